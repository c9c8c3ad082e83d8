"""Where ECMP sent a bundle of flows (emu/traffic/ecmp_spread.py): the graph questions
(first hops, top tier, a pair to spread) on every builder's shape, which switch
carries which traced flows, and the measurement over a fake fabric
(tests/unit/fakes.py: CounterFabric) with iperf3 stood in. The real flows run in
tests/scenarios/test_smoke.py."""

from __future__ import annotations

import pytest

from emu import fabric
from emu.scenario import Context
from emu.traffic import ecmp_spread
from emu.traffic.ecmp_spread import Carried, EcmpSpread, carried_by

from .fakes import CounterFabric


def test_a_switch_carries_flows_when_it_sent_at_least_their_payload():
    flows = {1: 1000, 2: 3000, 3: 0}
    paths = {1: ["h1", "l1", "s1"], 2: ["h1", "l1", "s2"], 3: ["h1", "l1", "s2"]}
    got = carried_by(
        flows, paths, ["s1", "s2", "s3"], {"s1": 999, "s2": 3000, "s3": 5}, list.__contains__
    )
    assert got == {
        "s1": Carried(flows=1, payload_bytes=1000, tx_bytes=999),
        "s2": Carried(flows=2, payload_bytes=3000, tx_bytes=3000),
        "s3": Carried(flows=0, payload_bytes=0, tx_bytes=5),
    }
    # Less than the payload on the wire: not these flows'. No payload: nothing to carry.
    assert [n for n, c in got.items() if c.carries] == ["s2"]


def spread(at_top: dict) -> EcmpSpread:
    hops = {"spine1": Carried(10, 4_000_000, 5_000_000), "spine2": Carried(6, 2_000_000, 3_000_000)}
    return EcmpSpread("h1", "h8", 16, 16, "leaf1", hops, at_top)


def test_the_metrics_name_bytes_and_flows_per_first_hop_and_top_switch():
    m = spread({"spine1": Carried(10, 4_000_000, 5_000_000), "spine2": Carried(6, 1, 0)}).metrics()
    assert list(m) == [
        "flows",
        "traced_flows",
        "first_switch",
        "bytes_per_first_hop",
        "flows_per_first_hop",
        "error",
        "bytes_per_top_switch",
        "flows_per_top_switch",
    ]
    assert m["bytes_per_first_hop"] == {"spine1": 5_000_000, "spine2": 3_000_000}
    assert m["flows_per_top_switch"] == {"spine1": 10, "spine2": 6}
    assert "bytes_per_top_switch" not in spread({}).metrics()


def test_the_report_has_a_table_per_level_with_shares_of_bytes(tmp_path):
    ctx = Context("t", {}, tmp_path)
    spread(
        {"spine1": Carried(10, 4_000_000, 6_000_000), "spine2": Carried(6, 1, 2_000_000)}
    ).report(ctx)
    first, top = ctx.tables
    assert first.title.startswith("ECMP: 16 TCP flows h1 -> h8 through leaf1, per first hop")
    assert first.rows[0] == ["spine1", 10, 4.0, 5.0, 5 / 8]
    assert top.title == "ECMP: 16 TCP flows h1 -> h8, per top-tier switch"
    assert [r[4] for r in top.rows] == [0.75, 0.25]
    ctx = Context("t", {}, tmp_path)
    spread({}).report(ctx)
    assert len(ctx.tables) == 1 and "ecmp" in ctx.metrics


def test_the_picture_is_the_top_tier_where_there_is_one():
    assert spread({"c1": Carried(1, 1, 2_000_000)}).panel().bars == {"c1": 2.0}
    flat = spread({}).panel()
    assert flat.bars == {"spine1": 5.0, "spine2": 3.0} and "leaf1 sent per first hop" in flat.title


def test_measure_traces_each_stream_and_reads_the_counters_around_the_flows(monkeypatch):
    g = fabric.leaf_spine(hosts_per_leaf=1)  # h1 on leaf1, h4 on leaf4
    fab = CounterFabric(g)
    doc = {
        "start": {"connected": [{"socket": s, "local_port": 40000 + s} for s in range(4)]},
        "end": {"streams": [{"receiver": {"socket": s, "bytes": 1000}} for s in range(4)]},
    }

    def run(fab_, src, dst, duration_s, parallel, port):
        assert (src, dst, duration_s, parallel, port) == ("h1", "h4", 2.5, 4, 5202)
        for s in range(4):  # even source ports over spine1, odd over spine2
            spine = f"spine{1 + s % 2}"
            fab.send("leaf1", spine, 1100)
            fab.send(spine, "leaf4", 1100)
        fab.send("spine1", "leaf2", 7)  # someone else's traffic, counted by the switch
        return doc

    fab.tracer = lambda src, dst, proto, sport, dport: [
        "h1",
        "leaf1",
        f"spine{1 + sport % 2}",
        "leaf4",
        "h4",
    ]
    monkeypatch.setattr(ecmp_spread.iperf, "run", run)
    got = ecmp_spread.measure(fab, "h1", "h4", 4, 2.5)
    assert (got.traced_flows, got.first_switch, got.error) == (4, "leaf1", None)
    assert got.at_first_hop == {"spine1": Carried(2, 2000, 2200), "spine2": Carried(2, 2000, 2200)}
    assert got.at_top == {"spine1": Carried(2, 2000, 2207), "spine2": Carried(2, 2000, 2200)}
    assert got.used(got.at_first_hop) == ["spine1", "spine2"]


def test_a_failed_test_traces_nothing_and_keeps_its_error(monkeypatch):
    fab = CounterFabric(fabric.leaf_spine(hosts_per_leaf=1))
    fab.tracer = lambda *a: pytest.fail("nothing to trace")
    monkeypatch.setattr(ecmp_spread.iperf, "run", lambda *a, **kw: {"error": "no route"})
    got = ecmp_spread.measure(fab, "h1", "h4", 4, 2.0)
    assert got.traced_flows == 0 and got.error == "no route"
    assert got.used(got.at_first_hop) == [] and got.used(got.at_top) == []
