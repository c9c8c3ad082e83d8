"""The pause-storm scenario's expected outcome on real PFC frames, via `emu run pause-storm`."""

from __future__ import annotations

import subprocess

from . import assert_checks, emu_run

CHECKS = [
    "watchdog off: >= 90% of the other flows stall",
    "watchdog off: PAUSE spreads beyond the faulty host's leaf",
    "watchdog on: storm detected within detection time + one poll",
    "watchdog on: the faulty queue is isolated",
    "watchdog on: the other flows recover",
]


def test_pause_storm_watchdog_off_vs_on(tmp_path, no_leaks):
    out = tmp_path / "ps"
    res, doc = emu_run(out, "pause-storm")
    assert_checks(res, doc, CHECKS)
    on = doc["metrics"]["modes"]["on"]
    # The storm is detected at the stuck host's leaf, on its port to that host.
    assert any(
        e["switch"] == "leaf1" and e["port"] == 1 and e["prio"] == 3 for e in on["storm_events"]
    )
    assert on["watchdog_drops"] > 0 and doc["metrics"]["modes"]["off"]["watchdog_drops"] == 0
    # The switches' storm counters agree with their event logs.
    assert on["storms_detected"] == len(on["storm_events"]) > 0
    assert doc["metrics"]["modes"]["off"]["storms_detected"] == 0
    # The capture of the stuck host's link shows its PAUSE flood: XOFF for priority 3,
    # refreshed, never released.
    res = subprocess.run(
        [
            "tshark",
            "-r",
            str(out / "watchdog-off" / "leaf1-eth1.pcap"),
            "-Y",
            "macc.opcode == 0x0101 && eth.src == 02:00:00:00:00:01",
            "-T",
            "fields",
            "-e",
            "macc.cbfc.enbv",
            "-e",
            "macc.cbfc.pause_time.c3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    frames = [line.split("\t") for line in res.stdout.splitlines() if line]
    assert len(frames) >= 3 and all(f == ["0x0008", "65535"] for f in frames), frames
