"""One TCP flow against its link (emu/traffic/line_rate.py): goodput to frames on the
wire, the last hop's egress counter to rates per window, and what goes into a
scenario's context. iperf3 and the switch are stand-ins here; the real flow runs
in tests/scenarios/test_smoke.py."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from emu import fabric
from emu.answers import QueueSnapshot
from emu.scenario import Context
from emu.traffic import line_rate
from emu.traffic.line_rate import LineRate

DOC = {
    "start": {"tcp_mss_default": 1448},
    "end": {
        "sum_received": {"bits_per_second": 36.2e6},
        "sum_sent": {"bits_per_second": 36.5e6, "retransmits": 7},
    },
}
# (switch time, tx bytes): 1.25 MB per 250 ms is 40 Mbit/s; one answer stamped twice.
SAMPLES = [(100.0, 0), (100.25, 1_250_000), (100.5, 2_400_000), (100.5, 2_400_000)]


def flow(doc=DOC, samples=SAMPLES) -> LineRate:
    return LineRate.from_run(doc, samples, "h1", "h8", 40_000_000, 4.0)


def test_goodput_becomes_full_frames_on_the_wire():
    tcp = flow()
    assert tcp.goodput_bps == 36.2e6 and tcp.retransmits == 7 and tcp.error is None
    assert tcp.wire_bps == pytest.approx(36.2e6 * 1514 / 1448)


def test_the_egress_counter_gives_a_rate_per_window_and_its_peak():
    tcp = flow()
    # A window of no time (the same answer twice) has no rate.
    assert tcp.windows_bps == pytest.approx([40e6, 36.8e6])
    assert tcp.peak_window_bps == pytest.approx(40e6)
    assert tcp.window_end_s == [0.25, 0.5, 0.5]


def test_no_samples_no_windows():
    tcp = flow(samples=[])
    assert tcp.windows_bps == [] and tcp.peak_window_bps == 0.0 and tcp.window_end_s == []


def test_an_iperf_error_gives_zeros_its_error_and_no_picture():
    tcp = flow(doc={"error": "unable to connect to server"})
    assert tcp.error == "unable to connect to server"
    assert (tcp.goodput_bps, tcp.wire_bps, tcp.retransmits) == (0.0, 0.0, 0)
    assert tcp.panel() is None


def test_the_report_writes_tcp_metrics_and_one_table(tmp_path):
    ctx = Context("t", {}, tmp_path)
    flow().report(ctx)
    m = ctx.metrics["tcp"]
    assert list(m) == [
        "src",
        "dst",
        "goodput_bps",
        "wire_bps",
        "retransmits",
        "peak_window_bps",
        "windows_bps",
        "window_end_s",
    ]
    assert (m["src"], m["dst"], m["retransmits"]) == ("h1", "h8", 7)
    [table] = ctx.tables
    assert table.title == "TCP h1 -> h8 (4 s, one flow)"
    assert table.columns[4] == "peak 250ms Mb/s" and table.columns[-1] == "retransmits"
    assert table.rows[0][2] == 40.0 and table.rows[0][3] == pytest.approx(m["wire_bps"] / 40e6)


def test_the_panel_draws_the_windows_against_the_link_rate():
    panel = flow().panel()
    assert panel.hline == 40.0
    xs, ys = panel.lines["250 ms windows"]
    assert xs == [0.25, 0.5, 0.5] and ys == pytest.approx([40.0, 36.8])


class QueueFabric:
    """A fabric whose switches answer `queues`: port p has sent 1000 x p bytes more each call."""

    def __init__(self, graph) -> None:
        self.graph = graph
        self.asked: list[str] = []
        self._ticks = itertools.count()

    def queues(self, switch: str) -> QueueSnapshot:
        self.asked.append(switch)
        n = next(self._ticks)
        ports = {p: 1000 * n * p for p in range(1, 9)}
        return QueueSnapshot(time=float(n), depth_bytes={}, paused={}, tx_bytes=ports, blocked={})


def until(done, timeout_s: float = 5.0) -> None:
    """Wait for the sampler thread until `done()` (a broken sampler fails, not hangs)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the sampler took no samples"
        time.sleep(0.001)


def test_sample_egress_samples_until_the_block_ends():
    fab = QueueFabric(fabric.leaf_spine())
    threads = threading.active_count()
    with line_rate.sample_egress(fab, "leaf1", 3, window_s=0.01) as samples:
        until(lambda: len(samples) >= 3)
    assert samples[:3] == [(0.0, 0), (1.0, 3000), (2.0, 6000)]
    # The sampler stopped with the block: its thread is gone, every answer is a sample.
    assert threading.active_count() == threads and len(samples) == len(fab.asked)


def test_measure_samples_the_last_hops_port_towards_the_receiver(monkeypatch):
    g = fabric.leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)
    fab = QueueFabric(g)
    ran = []

    def run(fab_, src, dst, duration_s):
        ran.append((src, dst, duration_s))
        until(lambda: len(fab.asked) >= 2)
        return DOC

    monkeypatch.setattr(line_rate.iperf, "run", run)
    tcp = line_rate.measure(fab, "h1", "h4", 40_000_000, 2.0, window_s=0.01)
    assert ran == [("h1", "h4", 2.0)]
    assert set(fab.asked) == {"leaf2"}  # h4's switch
    port = g.edges["h4", "leaf2"]["ports"]["leaf2"]
    assert tcp.samples[:2] == ((0.0, 0), (1.0, 1000 * port))
    assert tcp.window_s == 0.01 and tcp.goodput_bps == 36.2e6
