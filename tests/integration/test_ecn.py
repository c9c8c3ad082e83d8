"""ECN marking on real packets: never below Kmin, always above Kmax (thresholds set at run time).

Two hosts send ECN-capable UDP (DSCP 26, ECT(0)) at 2:1 overload to a third;
the lossless bottleneck queue at leaf3 stays non-empty. With Kmin above any
queue the buffer can hold, tshark finds no CE mark at the bottleneck; with
Kmax at one byte, every ECT packet that found a queue is CE-marked.
"""

from __future__ import annotations

import subprocess

import pytest

from emu import fabric
from emu.faults import Faults
from emu.net import Fabric
from emu.telemetry import start_capture
from emu.traffic import iperf

ECT0_DSCP26_TOS = 26 << 2 | 2


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    g = fabric.leaf_spine(leaves=3, spines=1, hosts_per_leaf=1)
    with Fabric(
        g, qos={"watchdog": {"enabled": False}}, out_dir=str(tmp_path_factory.mktemp("ecn"))
    ) as f:
        yield f


def overload(fab, pcap):
    cap = start_capture(fab, "leaf3-eth1", pcap, "udp and dst host 10.0.3.1")
    clients = [
        iperf.start(fab, h, "h3", 3, port=5500 + i, udp=True, bitrate="15M", tos=ECT0_DSCP26_TOS)
        for i, h in enumerate(("h1", "h2"))
    ]
    for c in clients:
        iperf.finish(fab, c)
    fab.stop_proc(cap)
    res = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "ip.dsfield.ecn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return [int(x) for x in res.stdout.split()]


def test_no_marks_while_the_queue_stays_under_kmin(fab, tmp_path):
    Faults(fab).ecn_thresholds(kmin_bytes=50_000_000, kmax_bytes=60_000_000)
    ecn = overload(fab, tmp_path / "high.pcap")
    assert len(ecn) > 1000
    # iperf3 sets the TOS after its first datagram or two: those are Not-ECT.
    assert ecn.count(3) == 0 and ecn.count(2) >= len(ecn) - 5


def test_every_ect_packet_marked_above_kmax(fab, tmp_path):
    Faults(fab).ecn_thresholds(kmin_bytes=0, kmax_bytes=1)
    ecn = overload(fab, tmp_path / "low.pcap")
    queue_peak = fab.switch_call("leaf3", "counters")["buffer"]["egress_watermark_bytes"]
    assert queue_peak.get("1:3", 0) > 0
    # Only frames that met an empty queue (the first of a burst) may pass unmarked.
    ect = ecn.count(2) + ecn.count(3)
    assert ecn.count(3) >= 0.95 * ect, f"{ecn.count(3)} of {ect} ECT packets marked"
