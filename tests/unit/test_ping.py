"""The ping sweeps (emu/traffic/ping.py): every ordered pair pinged once, the loss
and the lossy pairs counted, NVLink pings judged by the NVSwitches' counters,
and what each writes into a scenario's context. On a builder's graph with a
fake fabric (tests/unit/fakes.py: CounterFabric); the real pings run in
tests/scenarios/test_smoke.py."""

from __future__ import annotations

import threading

import pytest

from emu import fabric
from emu.scenario import Context
from emu.traffic import ping
from emu.traffic.ping import AllPairs, NvlinkPing

from .fakes import CounterFabric


def test_all_pairs_pings_every_ordered_pair_once_from_a_thread_per_source():
    fab = CounterFabric(fabric.leaf_spine(spines=2, leaves=2, hosts_per_leaf=2))
    threads = set()

    def pinger(src, dst, count, port):
        threads.add(threading.current_thread().name)
        return (count, count - 1) if (src, dst) == ("h2", "h3") else (count, count)

    fab.pinger = pinger
    pings = ping.all_pairs(fab, count=3)
    assert sorted(pings.results) == sorted(
        (s, d) for s in ("h1", "h2", "h3", "h4") for d in ("h1", "h2", "h3", "h4") if s != d
    )
    assert len(fab.pings) == 12 and len(threads) == 4
    assert (pings.pairs, pings.expected_pairs) == (12, 12)
    assert (pings.sent, pings.received) == (36, 35)
    assert pings.loss_pct == pytest.approx(100 / 36)
    assert pings.lossy_pairs == ["h2->h3"] and not pings.lossless
    assert pings.loss_text() == f"{100 / 36:.2f}% loss (h2->h3)"


def test_a_sweep_that_sent_nothing_is_all_loss():
    empty = AllPairs(("h1", "h2"), {})
    assert empty.loss_pct == 100.0 and not empty.lossless
    assert empty.pairs == 0 and empty.expected_pairs == 2


def test_lossless_pairs_name_nobody():
    pings = AllPairs(("h1", "h2"), {("h1", "h2"): (3, 3), ("h2", "h1"): (3, 3)})
    assert pings.lossless and pings.loss_text() == "0.00% loss"


def test_the_report_keeps_twenty_lossy_pairs_and_names_five():
    hosts = tuple(f"h{i}" for i in range(1, 8))
    results = {(s, d): (2, 0) for s in hosts for d in hosts if s != d}
    pings = AllPairs(hosts, results)
    assert len(pings.metrics()["lossy_pairs"]) == 20
    assert pings.loss_text().count("->") == 5


def test_all_pairs_reports_its_metrics_and_table_under_its_label(tmp_path):
    ctx = Context("t", {}, tmp_path)
    AllPairs(("h1", "h2"), {("h1", "h2"): (3, 3), ("h2", "h1"): (3, 2)}).report(ctx, "sweep")
    assert ctx.metrics["ping"]["sweep"] == {
        "pairs": 2,
        "sent": 6,
        "received": 5,
        "loss_pct": pytest.approx(100 / 6),
        "lossy_pairs": ["h2->h1"],
    }
    [table] = ctx.tables
    assert table.title == "sweep" and table.columns == ["pairs", "sent", "received", "loss %"]
    assert table.rows == [[2, 6, 5, pytest.approx(100 / 6)]]


def test_nvlink_ping_pings_node_mates_at_their_nvlink_port_and_counts_the_nvswitches():
    g = fabric.rail_optimized(nodes=2, gpus_per_node=2, spines=2)
    fab = CounterFabric(g)
    domains = fabric.nvlink_domains(g)

    def pinger(src, dst, count, port):
        # Each echo: a request into the NVSwitch from src, a reply from dst.
        sw = f"nvsw{g.nodes[src]['node']}"
        fab.rx_packets[(sw, fab.port_no(sw, src))] += count
        fab.rx_packets[(sw, fab.port_no(sw, dst))] += count
        return count, count

    fab.pinger = pinger
    nv = ping.nvlink_ping(fab, count=2)
    pairs = sum(len(gpus) * (len(gpus) - 1) for gpus in domains.values())
    assert {p for _, _, p in fab.pings} == {"nvlink"}
    assert all(g.nodes[s]["node"] == g.nodes[d]["node"] for s, d, _ in fab.pings)
    assert nv == NvlinkPing(pairs, sent=2 * pairs, received=2 * pairs, nvswitch_rx_frames=4 * pairs)
    assert nv.lossless


def test_nvlink_ping_with_nothing_sent_is_not_lossless():
    assert NvlinkPing(pairs=2, sent=6, received=6, nvswitch_rx_frames=11).lossless
    assert not NvlinkPing(pairs=2, sent=6, received=5, nvswitch_rx_frames=11).lossless
    assert not NvlinkPing(pairs=0, sent=0, received=0, nvswitch_rx_frames=0).lossless


def test_nvlink_ping_reports_under_its_label(tmp_path):
    ctx = Context("t", {}, tmp_path)
    NvlinkPing(2, 6, 6, 12).report(ctx)
    assert ctx.metrics["ping"]["NVLink ping"] == {
        "pairs": 2,
        "sent": 6,
        "received": 6,
        "nvswitch_rx_frames": 12,
    }
    assert ctx.tables[0].title == "NVLink ping" and ctx.tables[0].rows == [[2, 6, 6, 12]]
