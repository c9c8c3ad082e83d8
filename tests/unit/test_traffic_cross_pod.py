"""emu/traffic/cross_pod.py and its report (emu/traffic/ar_report.py) on fakes: the ring's
order, the tiers' ports, the queues read from telemetry, the NICs' counts on a collective's
queue pairs, and the tables and plot they make."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emu import answers
from emu import fabric as fabric_mod
from emu.traffic import ar_report, cross_pod
from emu.traffic.cross_pod import CollectiveRun, Occupancy, QpCounts


def test_every_hop_of_the_ring_leaves_its_pod_and_a_non_fat_tree_is_refused() -> None:
    g = fabric_mod.fat_tree(k=4)
    ring = cross_pod.cross_pod_ring(g)
    assert sorted(ring) == sorted(fabric_mod.hosts(g))
    assert ring[:5] == ["h1", "h5", "h9", "h13", "h2"]
    with pytest.raises(ValueError, match="no pod"):
        cross_pod.cross_pod_ring(fabric_mod.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2))


def test_the_tiers_name_each_switch_to_switch_port_once() -> None:
    g = fabric_mod.fat_tree(k=4)
    tiers = cross_pod.tier_ports(g)
    # 8 edges x 2 uplinks, 8 aggs x 2 to the core, 4 cores x 4 down, 8 aggs x 2 down.
    assert {t: len(p) for t, p in tiers.items()} == dict.fromkeys(cross_pod.TIERS, 16)
    ports = [sp for p in tiers.values() for sp in p]
    assert len(ports) == len(set(ports))
    assert ("a1", 3) in tiers["agg-core"] and ("a1", 1) in tiers["agg-edge"]


def _row(t: float, port: int, depth3: int) -> answers.TelemetryRow:
    depth = [0] * 8
    depth[3] = depth3
    return answers.TelemetryRow(t, port, 0, depth, [False] * 8, [0] * 8, [0] * 8)


def test_queues_are_priority_3_inside_the_window_by_tier() -> None:
    g = fabric_mod.fat_tree(k=4)
    rows = {
        "e1": [_row(9.0, 3, 9999), _row(10.0, 3, 1000), _row(10.1, 3, 0), _row(12.0, 3, 7777)],
        "a1": [_row(10.0, 3, 3000), _row(10.0, 1, 500)],
    }
    fab = SimpleNamespace(
        graph=g, telemetry=lambda sw, since: [r for r in rows.get(sw, []) if r.t >= since]
    )
    occ = cross_pod.queue_occupancy(fab, 10.0, 11.0)
    assert occ["edge-agg"] == Occupancy(500.0, 1000, 0.5, 2)  # e1 port 3 goes to a1
    assert occ["agg-core"] == Occupancy(3000.0, 3000, 1.0, 1)
    assert occ["agg-edge"] == Occupancy(500.0, 500, 1.0, 1)
    assert occ["core-agg"] == Occupancy(0.0, 0, 0.0, 0)


def _nic(send: dict, recv: dict) -> SimpleNamespace:
    return SimpleNamespace(
        send={q: SimpleNamespace(**s) for q, s in send.items()},
        recv={q: SimpleNamespace(**r) for q, r in recv.items()},
    )


def test_the_counts_are_the_collective_s_queue_pairs_only() -> None:
    s = dict(retransmitted=5, naks=2, timeouts=1, cnps=7)
    r = dict(out_of_order=30, beyond_window=0, reorder_depth_max=12)
    stats = {
        "h1": _nic({1: s, 9: dict(s, retransmitted=1000)}, {2: dict(r, reorder_depth_max=40)}),
        "h2": _nic({2: s}, {1: r, 9: dict(r, reorder_depth_max=999)}),
    }
    nics = SimpleNamespace(nic_stats=lambda h: stats[h])
    got = cross_pod.qp_counts(nics, [("h1", "h2", 1), ("h2", "h1", 2)])
    assert got == QpCounts(10, 4, 2, 60, 40, 0, 14)
    # Since an earlier reading: counters subtract, the depth stays the maximum.
    assert got.minus(QpCounts(4, 4, 2, 50, 35, 0, 4)) == QpCounts(6, 0, 0, 10, 40, 0, 10)


def _run(kind: str, share: float, resent: int = 0, depth: int = 0) -> CollectiveRun:
    queues = {t: Occupancy(100.0 * i, 1000 * i, 0.5, 10) for i, t in enumerate(cross_pod.TIERS)}
    return CollectiveRun(
        kind, 1.0, share, QpCounts(retransmitted=resent, reorder_depth_max=depth), queues
    )


def test_the_report_tables_and_the_plot(tmp_path) -> None:
    runs = {
        "ecmp": [(_run("ring", 0.3), _run("alltoall", 0.8))] * 2,
        "ar-strict": [(_run("ring", 0.2, 500, 90), _run("alltoall", 0.9, 3, 4))],
    }
    ring = {"ecmp": [0.30, 0.34], "ar-strict": [0.2]}
    a2a = {"ecmp": [0.8, 0.82], "ar-strict": [0.9]}
    title, columns, rows = ar_report.fat_tree_table(runs, ring, a2a, 0.397)
    assert "0.397" in title and len(columns) == len(rows[0])
    assert rows[0][:5] == ["ecmp", 0.32, 0.3, 0.81, 0.8]
    assert rows[1][5] == 503 and rows[1][9] == 90  # resent added, the deepest reordering
    _t, qcols, qrows = ar_report.queue_table(runs)
    assert qcols[2:] == list(cross_pod.TIERS) and len(qrows) == 4
    assert qrows[0][2:] == ["0.0 / 0.0", "0.1 / 1.0", "0.2 / 2.0", "0.3 / 3.0"]
    doc = ar_report.counts_doc(runs["ar-strict"])
    assert doc["ring"]["retransmitted"] == 500 and doc["alltoall"]["reorder_depth_max"] == 4
    path = ar_report.plot(tmp_path / "p.png", ring, a2a, 0.397)
    assert path.stat().st_size > 10_000
