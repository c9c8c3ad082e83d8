"""The pfc-deadlock scenario on real packets, via `emu run pfc-deadlock`.

A ring of four switches with clockwise routes deadlocks; the cycle comes
from the switches' own pause state; the watchdog breaks it; Tagger's
re-tagged frames (DSCP 27) are on the wire and no deadlock forms.
"""

from __future__ import annotations

import subprocess

from . import assert_checks, emu_run

CHECKS = [
    "deadlock: a wait-for cycle through every ring switch",
    "deadlock: every ingress queue on the cycle full to XOFF",
    "deadlock: zero goodput on every cycle flow after it formed",
    "deadlock: still zero after the senders stopped, and no frame crossed a ring link",
    "deadlock: every switch on the cycle keeps pausing its upstream",
    "watchdog: detects a stuck queue of the cycle",
    "watchdog: drops the stuck queues' frames",
    "watchdog: goodput back on every cycle flow",
    "tagger: rules installed and used by real packets",
    "tagger: no wait-for cycle at any poll",
    "tagger: no queue stuck in PAUSE (watchdog, alert only)",
    "tagger: every flow finishes at >= half its fair share",
]


def _tshark(pcap, display_filter: str, *fields: str) -> list[list[str]]:
    argv = ["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields"]
    for f in fields:
        argv += ["-e", f]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return [line.split("\t") for line in res.stdout.splitlines() if line]


def test_pfc_deadlock_forms_the_watchdog_breaks_it_tagger_prevents_it(tmp_path, no_leaks):
    out = tmp_path / "dl"
    # recover_s 7: the watchdog declares the storm 2 s after it is turned on and
    # drops for its 2 s restoration; the NICs' first resend falls in it, the next
    # one an RTO later (1.5 s: the ring's buffer bound, emu/host/rto.py) gets through.
    res, doc = emu_run(out, "pfc-deadlock", "recover_s=7")
    assert_checks(res, doc, CHECKS, count=len(CHECKS))
    dead = doc["metrics"]["modes"]["deadlock"]
    # The cycle is every switch's clockwise port, each paused by the next switch,
    # whose port from its predecessor holds the frames.
    assert sorted(h["waits"] for h in dead["hops"]) == [f"s{i}-eth3 prio 3" for i in range(1, 5)]
    assert sorted(h["ingress"] for h in dead["hops"]) == [f"s{i}-eth2 prio 3" for i in range(1, 5)]
    # On the s1 -> s2 link: s2's PAUSE for priority 3 (XOFF, then refreshes with
    # nothing released in between) while the deadlock holds.
    pauses = _tshark(
        out / "deadlock" / "s1-eth3.pcap",
        "macc.opcode == 0x0101 && macc.cbfc.pause_time.c3 == 65535",
        "frame.time_relative",
    )
    assert len(pauses) >= 2, pauses
    # Tagger: the frames r3 re-tagged leave it on DSCP 27 (tag 2), only for h4 and h1.
    tagged = _tshark(out / "tagger" / "s3-eth3.pcap", "ip.dsfield.dscp == 27", "ip.dst")
    assert tagged and {d for (d,) in tagged} <= {"10.0.4.1", "10.0.1.1"}
    tagger = doc["metrics"]["modes"]["tagger"]
    assert tagger["finished"] and tagger["storms"] == 0 and not tagger["cycles_seen"]


TAGGER_CHECKS = [c for c in CHECKS if c.startswith("tagger:")]


def test_tagger_prevents_the_deadlock_with_adaptive_routing_beside_it(tmp_path, no_leaks):
    """issue 30: extensions compose; adaptive pins the ring's elephants only the way the
    one-way policy routes (port 3, clockwise), and Tagger's checks all hold."""
    out = tmp_path / "both"
    res, doc = emu_run(out, "pfc-deadlock", "modes=tagger", "extensions=adaptive")
    assert_checks(res, doc, TAGGER_CHECKS, count=len(TAGGER_CHECKS))
    adaptive = doc["metrics"]["modes"]["tagger"]["adaptive_status"]
    assert adaptive["placed_total"] >= 1, adaptive
    hops = [hop for pl in adaptive["placements"].values() for hop in pl["path"]]
    assert hops and all(hop.endswith(":3") for hop in hops), adaptive["placements"]
    assert "Adaptive routing beside Tagger" in res.stdout
