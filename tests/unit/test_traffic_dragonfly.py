"""The dragonfly workloads (emu/traffic/dragonfly.py) and their UDP spray (emu/traffic/spray.py).

The patterns on the builder's graphs; the spray's pacing, measuring window
and per-source counts between two loopback addresses (real sockets, no
root); a run's figures from hosts' results and the counters around it; the
global links' counters through the typed port statistics (`CounterFabric`).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from emu.fabric import dragonfly
from emu.traffic import dragonfly as workload
from emu.traffic import spray

from .fakes import CounterFabric


def graph():
    return dragonfly(groups=5, routers_per_group=2, global_links_per_router=2, rate_bps=10**7)


def test_the_adversarial_pattern_sends_each_group_to_the_next() -> None:
    g = graph()
    pairs = workload.adversarial_pairs(g)
    assert len(pairs) == 10 and len({s for s, _d in pairs}) == 10 == len({d for _s, d in pairs})
    for src, dst in pairs:
        assert g.nodes[dst]["group"] == g.nodes[src]["group"] % 5 + 1
    assert workload.destinations(g, "adversarial")["h1"] == ["h3"]


def test_uniform_traffic_sends_to_every_other_host() -> None:
    dests = workload.destinations(graph(), "uniform")
    assert all(len(d) == 9 and h not in d for h, d in dests.items())
    with pytest.raises(ValueError, match="adversarial, uniform"):
        workload.destinations(graph(), "tornado")


def test_the_model_gives_the_adversarial_pattern_twice_minimal_under_ugal() -> None:
    g = graph()
    payload = 10**7 * workload.wire_share(1400)  # what a 10 Mbit/s link carries of it
    assert workload.wire_share(1400) == pytest.approx(1400 / 1446)
    minimal = workload.model_rates(g, "adversarial", payload, "minimal")
    ugal = workload.model_rates(g, "adversarial", payload, "ugal")
    assert minimal == pytest.approx(5 * payload)  # 5 global links for 10 hosts
    assert ugal == pytest.approx(2 * minimal, rel=0.01)
    # Open-loop UDP over drop-tail links: the first hops' losses waste later links.
    lossy = workload.model_rates(g, "adversarial", 0.95 * payload, "minimal-lossy")
    assert 0.7 * minimal < lossy < 0.85 * minimal


def test_a_bad_load_is_refused() -> None:
    with pytest.raises(ValueError, match="warm-ups"):
        workload.Load(rate_bps=1e6, duration_s=1.0, warmup_s=0.5)
    with pytest.raises(ValueError):
        workload.Load(rate_bps=0)


# ----- the spray -----------------------------------------------------------------------


def free_udp_port() -> int:
    """A UDP port free on both loopback addresses the test binds."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_sprays_pace_count_and_keep_to_the_window(tmp_path) -> None:
    """127.0.0.1 and 127.0.0.2 send each other 2 Mbit/s for 2 s; each counts the other's
    bytes sent inside the 1-second window."""
    port = free_udp_port()
    start = time.time() + 0.5
    procs = []
    for me, peer in (("127.0.0.1", "127.0.0.2"), ("127.0.0.2", "127.0.0.1")):
        argv = [
            sys.executable, "-m", "emu.traffic.spray", "--bind", me, "--port", str(port),
            "--dst", peer, "--rate-bps", "2e6", "--size", "1000", "--start-at", repr(start),
            "--duration", "2", "--warmup", "0.5", "--out", str(tmp_path / f"{me}.json"),
        ]  # fmt: skip
        procs.append(subprocess.Popen(argv))
    for proc in procs:
        assert proc.wait(timeout=30) == 0
    for me, peer in (("127.0.0.1", "127.0.0.2"), ("127.0.0.2", "127.0.0.1")):
        res = json.loads((tmp_path / f"{me}.json").read_text())
        assert res["window_s"] == pytest.approx(1.0)
        datagrams, nbytes, in_window = res["sent"][peer]
        assert datagrams == pytest.approx(500, abs=3) and nbytes == datagrams * 1000
        assert in_window == pytest.approx(250_000, rel=0.02)
        got = res["received"][peer]
        assert got[2] == pytest.approx(250_000, rel=0.05)  # what the peer sent in the window
        assert res["send_errors"] == 0


def test_a_spray_behind_its_schedule_skips_rather_than_bursts() -> None:
    args = spray.build_parser().parse_args(
        ["--bind", "x", "--port", "1", "--dst", "10.0.0.2", "--rate-bps", "8e6", "--size",
         "1000", "--start-at", "100", "--duration", "10", "--out", "x"]
    )  # fmt: skip
    sent = []

    class Sock:
        def sendto(self, data, addr):
            sent.append(addr)

    s = spray.Spray(args, Sock())
    s.send_due(100.0)
    assert len(sent) == 1
    s.send_due(101.0)  # a second late: 999 skipped, not sent at once
    assert s.skipped >= 990 and len(sent) < 60
    s.send_due(120.0)  # after the end: nothing is due, nothing is skipped
    assert s.skipped < 10_000 and s.next_s <= s.end_s + s.gap_s


# ----- a run from results and counters ---------------------------------------------------


def test_collect_turns_results_and_counters_into_a_run() -> None:
    g = graph()
    ip = {h: g.nodes[h]["ip"] for h in ("h1", "h3")}
    results = {
        "h1": {"window_s": 4.0, "sent": {ip["h3"]: [10, 14000, 10000]}, "received": {},
               "send_errors": 0, "skipped": 1},
        "h3": {"window_s": 4.0, "sent": {}, "received": {ip["h1"]: [9, 12600, 5000]},
               "send_errors": 2, "skipped": 0},
    }  # fmt: skip
    before = {("g1r1", "g2r2"): 100}
    after = {("g1r1", "g2r2"): 1100, ("g1r1", "g3r2"): 50}
    run = workload.collect(g, "adversarial", results, before, after, {}, {"g1r1": (7, 3)})
    assert run.flows == {("h1", "h3"): 5000 * 8 / 4.0}
    assert run.offered_bps == {"h1": 20000.0, "h3": 0.0}
    assert run.global_bytes == {("g1r1", "g2r2"): 1000, ("g1r1", "g3r2"): 50}
    assert run.nonminimal == 3 and run.send_errors == 2 and run.skipped == 1
    assert run.delivered_bps == 10000.0 and run.offered_total_bps == 20000.0
    rows = workload.table({"ugal": run}, {"ugal": 2e4})
    assert rows == [["ugal", "adversarial", 0.01, 0.5, 0.02, 3]]


def test_global_link_counters_both_ways() -> None:
    g = graph()
    fab = CounterFabric(g)
    fab.send("g1r1", "g2r2", 5000)
    fab.send("g2r2", "g1r1", 7)
    fab.send("g1r1", "g1r2", 999)  # a local link: not counted
    got = workload.global_tx_bytes(fab)
    assert len(got) == 20
    assert got[("g1r1", "g2r2")] == 5000 and got[("g2r2", "g1r1")] == 7
    assert sum(got.values()) == 5007
