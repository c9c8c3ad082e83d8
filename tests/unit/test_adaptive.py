"""The adaptive controller (controllers/adaptive.py) on emu's own pipelines (no root).

Routing's manager, with the adaptive manager attached as its extension,
drives a simulated k=4 fat-tree whose switches are real emu pipelines
(`PipelineFabric`); the adaptive manager's statistics requests are answered by
those pipelines, and "traffic" is frames traced hop by hop through them, so the
counters the manager reads are the ones the frames bumped.
"""

from __future__ import annotations

import itertools

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controllers import layout
from controllers.adaptive import (
    WEIGHT_FLAPPING,
    WEIGHT_HOT,
    WEIGHT_NORMAL,
    AdaptiveConfig,
    AdaptiveManager,
    estimate_demands,
)
from controllers.routing import PortInfo, RoutingConfig, RoutingManager

from .fakes import (
    NIC_BPS,
    POLL_S,
    StatsFabric,
    fat_tree,
    hosts_of,
    learn_all_hosts,
    links_used,
    run_polls,
    stride,
)


def build(adaptive: bool = True, expect_hosts: int = 16, **config) -> StatsFabric:
    """Routing on a k=4 fat-tree, with the adaptive manager attached unless ``adaptive`` is False."""
    routing = RoutingManager(
        RoutingConfig(expect_switches=20, expect_links=32, expect_hosts=expect_hosts)
    )
    fab = StatsFabric(fat_tree(4), routing)
    if adaptive:
        fab.adaptive = AdaptiveManager(routing, AdaptiveConfig(poll_interval_s=POLL_S, **config))
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert fab.mgr.converged() == (expect_hosts <= 16)
    return fab


def test_pair_monitors_count_every_pair_at_its_source_switch() -> None:
    fab = build()
    monitors = [
        e
        for pl in fab.pipelines.values()
        for e in pl.tables[0].entries
        if e.priority == layout.PRIO_PAIR_MONITOR
    ]
    assert len(monitors) == 16 * 15
    assert all(e.cookie == layout.ADAPTIVE_COOKIE for e in monitors)
    # Routing still decides where they go: every pair still reaches its destination.
    for src, dst in itertools.permutations(hosts_of(fab), 2):
        fab.trace(src, dst)


@pytest.mark.parametrize("n", [4, 8])
def test_stride_elephants_get_link_disjoint_paths(n: int) -> None:
    pairs = stride(fab := build(), n)
    ecmp = build(adaptive=False)
    assert max(links_used(ecmp, pairs).values()) >= 2  # hashing collides (seeded per switch)
    run_polls(fab, pairs, 3)
    mgr = fab.adaptive
    ips = {h: fab.graph.nodes[h]["ip"] for h in hosts_of(fab)}
    assert set(mgr.placements) == {(ips[s], ips[d]) for s, d in pairs}
    assert all(pl.demand == pytest.approx(1.0) for pl in mgr.placements.values())
    # Through the real pipelines: no link carries two elephants.
    used = links_used(fab, pairs)
    assert max(used.values()) == 1, [k for k, v in used.items() if v > 1]
    assert fab.mgr.status()["adaptive"]["placed_total"] == 16
    # Each elephant's ACKs (the reverse pair, a mouse) come back along its own
    # path, so they too are spread one stream per link, not hashed onto a few.
    # (Under stride 8 of 16 hosts every reverse pair is an elephant itself.)
    mice = [(s, d) for s, d in pairs if (d, s) not in pairs]
    assert len(fab.mgr.status()["adaptive"]["reverse_pinned"]) == len(mice) == (16 if n == 4 else 0)
    for src, dst in mice:
        forward = fab.trace(src, dst, sport=40000)
        assert fab.trace(dst, src, sport=5201) == forward[::-1]
    acks = links_used(fab, [(d, s) for s, d in pairs])
    assert max(acks.values()) == 1, [k for k, v in acks.items() if v > 1]


def test_reverse_pairs_are_hashed_when_pinning_is_off() -> None:
    fab = build(pin_reverse=False)
    pairs = stride(fab, 4)
    run_polls(fab, pairs, 3)
    assert len(fab.adaptive.placements) == 16
    assert fab.mgr.status()["adaptive"]["reverse_pinned"] == []


def test_quiet_elephants_go_back_to_ecmp_and_their_groups_go() -> None:
    fab = build()
    pairs = stride(fab, 4)
    run_polls(fab, pairs, 3)
    assert len(fab.adaptive.placements) == 16
    assert any(
        gid >= layout.ADAPTIVE_GROUP_BASE for pl in fab.pipelines.values() for gid in pl.groups
    )
    run_polls(fab, [], 4)
    assert fab.adaptive.placements == {}
    assert not any(
        gid >= layout.ADAPTIVE_GROUP_BASE for pl in fab.pipelines.values() for gid in pl.groups
    )
    assert not any(
        e.priority == layout.PRIO_ELEPHANT
        for pl in fab.pipelines.values()
        for e in pl.tables[0].entries
    )


def test_an_elephant_fails_over_in_the_switch_then_is_unplaced() -> None:
    fab = build()
    pairs = stride(fab, 8)
    run_polls(fab, pairs, 3)
    src, dst = pairs[0]
    path = fab.trace(src, dst, sport=40000)
    a, b = path[1], path[2]  # the aggregation -> core link of the elephant
    # The pipelines alone (no port status to the controller yet): the FF group moves it.
    for x, y in ((a, b), (b, a)):
        pl = fab.pipelines[fab.dpid[x]]
        pl.ports[fab.port[(x, y)]].link_up = False
        pl.invalidate()
    moved = fab.trace(src, dst, sport=40000)
    assert (a, b) not in zip(moved, moved[1:]) and moved[-1] == path[-1]
    fab.set_link(a, b, up=False)
    ip_pair = (fab.graph.nodes[src]["ip"], fab.graph.nodes[dst]["ip"])
    assert ip_pair not in fab.adaptive.placements
    assert any(
        e["kind"] == "elephant_unplaced" and e["why"] == "path_lost"
        for e in fab.mgr.status()["events"]
    )


def test_hot_and_flapping_ports_lose_weight_in_select_groups() -> None:
    fab = build()
    mgr, routing = fab.adaptive, fab.mgr
    edge = fab.dpid["e0_0"]
    up0, up1 = fab.port[("e0_0", "a0_0")], fab.port[("e0_0", "a0_1")]

    def weights():
        [(gid, ports)] = [
            (g, p) for g, p in routing.installed_groups(edge).items() if p == frozenset({up0, up1})
        ]
        buckets = fab.pipelines[edge].groups[gid].buckets
        return {b.watch_port: b.weight for b in buckets}

    assert weights() == {up0: WEIGHT_NORMAL, up1: WEIGHT_NORMAL}
    t = fab.now
    mgr.port_stats(edge, [(up0, 0), (up1, 0)], t)
    mgr.port_stats(edge, [(up0, int(0.95 * NIC_BPS / 8)), (up1, 100)], t + 1)
    fab.now = t + 1
    fab.deliver(mgr.schedule(fab.now))
    assert weights() == {up0: WEIGHT_HOT, up1: WEIGHT_NORMAL}
    mgr.port_stats(edge, [(up0, int(0.95 * NIC_BPS / 8) + 100), (up1, 200)], t + 2)
    fab.now = t + 2
    fab.deliver(mgr.schedule(fab.now))
    assert weights() == {up0: WEIGHT_NORMAL, up1: WEIGHT_NORMAL}
    # One flap (below the damping threshold): the port stays in rotation at the lowest weight.
    fab.set_link("e0_0", "a0_1", up=False)
    fab.set_link("e0_0", "a0_1", up=True)
    fab.settle(ticks=5)
    fab.deliver(mgr.schedule(fab.now))
    assert weights() == {up0: WEIGHT_NORMAL, up1: WEIGHT_FLAPPING}
    fab.now += routing.config.flap_window_s + 1
    fab.settle(ticks=20, step_s=0.2)
    fab.deliver(mgr.schedule(fab.now))
    assert weights() == {up0: WEIGHT_NORMAL, up1: WEIGHT_NORMAL}


def test_demand_estimator_follows_hedera() -> None:
    assert estimate_demands([("a", "x"), ("b", "y")]) == {("a", "x"): 1.0, ("b", "y"): 1.0}
    d = estimate_demands([("a", "x"), ("a", "y")])
    assert d[("a", "x")] == pytest.approx(0.5) and d[("a", "y")] == pytest.approx(0.5)
    d = estimate_demands([("a", "x"), ("b", "x"), ("c", "x")])
    assert all(v == pytest.approx(1 / 3) for v in d.values())
    # a splits over x and y; x is shared with b: b gets what a's 0.5 leaves at x.
    d = estimate_demands([("a", "x"), ("a", "y"), ("b", "x")])
    assert d == pytest.approx({("a", "x"): 0.5, ("a", "y"): 0.5, ("b", "x"): 0.5})
    # A small sender leaves the rest of the receiver to the big one.
    d = estimate_demands([("a", "x"), ("a", "y"), ("a", "z"), ("a", "w"), ("b", "x")])
    assert d[("a", "x")] == pytest.approx(0.25) and d[("b", "x")] == pytest.approx(0.75)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="elephant_fraction"):
        AdaptiveConfig(elephant_fraction=1.5)
    with pytest.raises(ValueError, match="poll_interval_s"):
        AdaptiveConfig(poll_interval_s=0)
    assert ofp.OFPGT_FF == 3  # the elephant hops' group type (layout's table says so)


def test_an_unconverged_manager_asks_for_no_statistics() -> None:
    """Hedera's scheduler waits for routing: no polling while routing has not converged."""
    fab = build(expect_hosts=17)  # 16 exist
    assert not fab.mgr.converged()
    sent_before = len(fab.sent)
    for _ in range(3):
        fab.now += POLL_S
        fab.deliver(fab.mgr.tick(fab.now))
    stats = [
        m
        for _d, m in fab.sent[sent_before:]
        if isinstance(m, (parser.OFPFlowStatsRequest, parser.OFPPortStatsRequest))
    ]
    assert stats == []


def test_once_converged_a_link_down_does_not_stop_the_statistics_rounds() -> None:
    """Failures are when placement matters: a cut cable leaves routing unconverged
    (fewer links than expected), and Hedera's rounds go on."""
    fab = build()
    fab.settle(ticks=1)  # adaptive sees the converged fabric once
    dpid, port = min(fab.peer)
    fab.deliver(fab.mgr.port_status(dpid, PortInfo(port, "02:00:00:00:00:00", False), fab.now))
    assert not fab.mgr.converged()
    sent_before = len(fab.sent)
    for _ in range(2):  # the first round may be due only one interval after start
        fab.now += POLL_S
        fab.deliver(fab.mgr.tick(fab.now))
    stats = [m for _d, m in fab.sent[sent_before:] if isinstance(m, parser.OFPPortStatsRequest)]
    assert len(stats) >= 20  # a round asks every switch of the k=4 fat-tree
