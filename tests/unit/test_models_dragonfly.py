"""Dragonfly routing's throughput model (emu/models/dragonfly.py): closed forms and paths.

Kim et al.'s figures for the adversarial pattern (every host of group i to
group i+1) and Valiant's half of the global bandwidth, checked on the
builder's graphs; the fluid model's paths against what the controller
installs (one global hop a minimal path, Valiant candidates as
controllers/ugal.py picks them) and its rates against hand counts.
"""

from __future__ import annotations

import pytest

from emu.fabric import dragonfly, leaf_spine
from emu.models import dragonfly as model

MBPS = 1e6
RATE = 10_000_000


def graph(g=5, a=2, h=2, p=1, **kw):
    return dragonfly(
        groups=g,
        routers_per_group=a,
        global_links_per_router=h,
        hosts_per_router=p,
        rate_bps=RATE,
        **kw,
    )


def hosts(G) -> list[str]:
    return sorted(
        (n for n, d in G.nodes(data=True) if d["kind"] == "host"), key=lambda h: int(h[1:])
    )


def adversarial(G) -> list[tuple[str, str]]:
    """Host j of group i to host j of group i+1 (what emu/traffic/dragonfly.py sends)."""
    by_group: dict[int, list[str]] = {}
    for h in hosts(G):
        by_group.setdefault(G.nodes[h]["group"], []).append(h)
    n = len(by_group)
    return [(hs[j], by_group[i % n + 1][j]) for i, hs in by_group.items() for j in range(len(hs))]


def test_the_shape_is_read_from_the_graph() -> None:
    shape = model.Shape.of(graph(5, 2, 2, 3, rates={"global": 5_000_000}))
    assert (shape.groups, shape.routers_per_group, shape.hosts_per_router) == (5, 2, 3)
    assert shape.global_links_per_router == 2 and shape.hosts_per_group == 6
    assert (shape.host_bps, shape.local_bps, shape.global_bps) == (RATE, RATE, 5_000_000)
    assert shape.links_between_groups == 1
    with pytest.raises(ValueError, match="not a dragonfly"):
        model.Shape.of(leaf_spine(2, 2))


@pytest.mark.parametrize(
    "g, a, h, p, minimal, valiant",
    [
        (5, 2, 2, 1, 5.0, 10.0),  # 2 hosts share 1 link; 4 links, half each: 2 hosts' worth
        (3, 2, 1, 1, 5.0, 5.0),  # 2 links a group, half of them: one host link for 2
        (4, 3, 1, 1, 10 / 3, 5.0),
        (5, 2, 2, 2, 2.5, 5.0),
        (3, 2, 2, 1, 10.0, 10.0),  # 2 links between each pair: no bottleneck
    ],
)
def test_kims_closed_forms(g, a, h, p, minimal, valiant) -> None:
    shape = model.Shape.of(graph(g, a, h, p))
    assert model.minimal_bound_bps(shape) / MBPS == pytest.approx(minimal)
    assert model.valiant_bound_bps(shape) / MBPS == pytest.approx(valiant)
    assert model.ugal_expected_bps(shape, "adversarial") == max(
        model.minimal_bound_bps(shape), model.valiant_bound_bps(shape)
    )


def test_uniform_traffic_is_limited_by_the_global_links_a_group_sends_on() -> None:
    # 5 groups of 2 x 3 hosts: 24 of 29 other hosts are elsewhere; 4 global links carry
    # 6 hosts x 24/29 of their traffic: 40 / (6 x 24/29) = 8.06 Mbit/s a host.
    shape = model.Shape.of(graph(5, 2, 2, 3))
    assert model.uniform_minimal_bound_bps(shape) / MBPS == pytest.approx(40 / (6 * 24 / 29))
    assert model.ugal_expected_bps(shape, "uniform") == model.uniform_minimal_bound_bps(shape)
    with pytest.raises(ValueError, match="adversarial or uniform"):
        model.ugal_expected_bps(shape, "tornado")


# ----- paths ---------------------------------------------------------------------------


def test_minimal_paths_cross_one_global_link_and_split_evenly() -> None:
    G = graph()
    paths = model.Paths(G)
    for src in hosts(G):
        for dst in hosts(G):
            if src == dst:
                continue
            split = paths.minimal_split((src, dst))
            out_of_src = sum(w for (u, _v), w in split.items() if u == paths.router(src))
            assert out_of_src == pytest.approx(1.0)
            crossing = sum(w for (u, v), w in split.items() if G.edges[u, v]["tier"] == "global")
            same = G.nodes[src]["group"] == G.nodes[dst]["group"]
            assert crossing == pytest.approx(0.0 if same else 1.0)
    # Plain shortest paths cross a third group for some pairs (two global links).
    shortest = model.Paths(G, "shortest")
    assert any(
        sum(
            w
            for (u, v), w in shortest.minimal_split((s, d)).items()
            if G.edges[u, v]["tier"] == "global"
        )
        > 1.0
        for s in hosts(G)
        for d in hosts(G)
        if s != d
    )


def test_valiant_candidates_are_the_source_routers_links_to_third_groups() -> None:
    G = graph()
    paths = model.Paths(G)
    # g1r1's global links go to g2r2 and g3r2; towards g2, g2r2 is minimal.
    assert paths.valiant_candidates("g1r1", "g2r1") == ["g3r2"]
    assert paths.valiant_candidates("g1r2", "g2r2") == ["g4r1", "g5r1"]
    split = paths.valiant_split(("h1", "h3"))  # h1 at g1r1, h3 at g2r1
    globals_crossed = sum(w for (u, v), w in split.items() if G.edges[u, v]["tier"] == "global")
    assert globals_crossed == pytest.approx(2.0)
    opts = paths.options(("h1", "h3"))
    assert [hops for hops, _s in opts] == [2, 2]  # g1r1-g2r2-g2r1; g1r1-g3r2-g2r1
    assert paths.options(("h1", "h2"))[1:] == []  # in-group: minimal only


def test_max_min_rates_with_shares() -> None:
    cap = {("a", "b"): 10.0, ("b", "c"): 10.0}
    splits = [{("a", "b"): 1.0}, {("a", "b"): 0.5, ("b", "c"): 1.0}, {("b", "c"): 1.0}]
    rates = model.max_min_rates(splits, [100, 100, 100], cap.__getitem__)
    # b-c fills first (2 x 5): flows 1 and 2 stop at 5; flow 0 takes what a-b has left.
    assert rates == pytest.approx([7.5, 5.0, 5.0])
    assert model.max_min_rates(splits, [1, 1, 1], cap.__getitem__) == [1, 1, 1]


# ----- rates on the adversarial pattern and uniform traffic ------------------------------


def test_adversarial_pattern_minimal_valiant_and_ugal() -> None:
    """5 groups of 2 routers, 2 global links each: minimal gives the 2 hosts of a group
    one global link; UGAL moves the host whose router owns that link to its other
    global link, doubling the group's throughput, even without backpressure."""
    G = graph()
    flows = adversarial(G)
    demands = [RATE] * len(flows)
    per_host = {
        r: sum(model.routed_rates(G, flows, demands, r)) / len(flows) / MBPS
        for r in ("minimal", "valiant", "ugal", "ugal-local")
    }
    assert per_host["minimal"] == pytest.approx(5.0)
    assert per_host["ugal"] == pytest.approx(10.0, rel=0.01)
    assert per_host["ugal-local"] == pytest.approx(10.0, rel=0.01)
    assert 5.0 < per_host["valiant"] < 10.0


def test_ugal_local_needs_backpressure_where_the_congested_link_is_another_routers() -> None:
    """4 groups of 3 routers, one global link each: the group's only link to the next
    group is on one router, whose own host has no other; the other two hosts see their
    local links, not the global one, so UGAL-L without backpressure gains nothing."""
    G = graph(4, 3, 1, 1)
    flows = adversarial(G)
    demands = [RATE] * len(flows)
    minimal = sum(model.routed_rates(G, flows, demands, "minimal"))
    ugal = sum(model.routed_rates(G, flows, demands, "ugal"))
    local = sum(model.routed_rates(G, flows, demands, "ugal-local"))
    assert ugal == pytest.approx(2 * minimal, rel=0.01)
    assert local == pytest.approx(minimal, rel=0.01)


def test_uniform_traffic_ugal_keeps_what_minimal_gets() -> None:
    G = graph()
    hs = hosts(G)
    flows = [(s, d) for s in hs for d in hs if s != d]
    demands = [RATE / (len(hs) - 1)] * len(flows)
    minimal = sum(model.routed_rates(G, flows, demands, "minimal"))
    ugal = sum(model.routed_rates(G, flows, demands, "ugal"))
    valiant = sum(model.routed_rates(G, flows, demands, "valiant"))
    assert minimal == pytest.approx(len(hs) * RATE)  # no global link is full
    assert ugal >= 0.99 * minimal
    assert valiant < minimal  # two global hops cost where nothing needed them


def test_unknown_routings_are_named() -> None:
    with pytest.raises(ValueError, match="minimal, valiant, ugal"):
        model.routed_rates(graph(), [("h1", "h3")], [RATE], "ecmp")
    with pytest.raises(ValueError, match="dragonfly or shortest"):
        model.Paths(graph(), "fastest")


def test_global_links_both_ways() -> None:
    G = graph()
    links = model.global_links(G)
    assert len(links) == 2 * 10 and ("g1r1", "g2r2") in links and ("g2r2", "g1r1") in links


def test_lossy_links_waste_what_a_later_link_drops() -> None:
    """A and B offer 10 each to L1 (10): half of each passes; A's 5 meet L2 (4), which
    passes 4. 9 delivered, where max-min fairness would give B the 6 A cannot use."""
    cap = {"L1": 10.0, "L2": 4.0}
    sub = [(0, 10.0, [("x", "L1"), ("L1", "L2")]), (1, 10.0, [("x", "L1")])]
    rates = model.lossy_rates(sub, lambda k: cap[k[1]], 2)
    assert rates == pytest.approx([4.0, 5.0])
    fair = model.max_min_rates(
        [{("x", "L1"): 1.0, ("L1", "L2"): 1.0}, {("x", "L1"): 1.0}],
        [10.0, 10.0],
        lambda k: cap[k[1]],
    )
    assert fair == pytest.approx([4.0, 6.0])


def test_paths_are_the_splits_in_order() -> None:
    G = graph()
    paths = model.Paths(G)
    for routing in ("minimal", "valiant"):
        for flow in adversarial(G):
            routes = paths.paths(flow, routing)
            assert sum(share for share, _links in routes) == pytest.approx(1.0)
            for _share, links in routes:
                assert links[0][0] == flow[0] and links[-1][1] == flow[1]
                assert all(a[1] == b[0] for a, b in zip(links, links[1:]))
            split = paths.minimal_split(flow) if routing == "minimal" else paths.valiant_split(flow)
            summed: dict = {}
            for share, links in routes:
                for link in links:
                    summed[link] = summed.get(link, 0.0) + share
            assert summed == pytest.approx(split)
    flows = adversarial(G)
    lossy = sum(model.routed_rates(G, flows, [RATE] * 10, "minimal-lossy"))
    assert lossy < sum(model.routed_rates(G, flows, [RATE] * 10, "minimal"))
