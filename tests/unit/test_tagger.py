"""Tagger's rule computation (controllers/tagger.py) and its flows applied by emu's pipeline.

The property that matters is checked directly: along every path the routes
allow, with the tags the rules give, the buffer dependencies between
(link, tag) queues form no cycle, while the same routes without Tagger do.
"""

from __future__ import annotations

import networkx as nx
import pytest

from controllers.ring_next_hops import clockwise, next_hops
from controllers.routing import RoutingConfig, RoutingManager
from controllers.routing_api import Host
from controllers.tagger import TaggerConfig, TaggerManager, tag_rules, updown_rank

from .fakes import PipelineFabric, learn_all_hosts, ring_graph, roce_walk


def ring_links(n: int) -> list[tuple[int, int, int, int]]:
    """Switches 1..n in a ring: port 3 to the next (clockwise), port 2 to the previous."""
    links = []
    for i in range(1, n + 1):
        nxt = i % n + 1
        links += [(i, 3, nxt, 2), (nxt, 2, i, 3)]
    return links


def ring_hosts(n: int) -> dict[str, Host]:
    return {f"10.0.{i}.1": Host(f"10.0.{i}.1", "02:00:00:00:00:01", i, 1) for i in range(1, n + 1)}


def clockwise_routes(n: int) -> dict[int, dict[str, tuple]]:
    return {
        i: {
            f"10.0.{j}.1": ("local", 1, "m") if i == j else ("ecmp", frozenset({3}))
            for j in range(1, n + 1)
        }
        for i in range(1, n + 1)
    }


def dependencies(links, hosts, routes, rules) -> nx.DiGraph:
    """(link, tag) -> (next link, its tag) along every host-to-host path, tags from `rules`."""
    peer = {(s, sp): (d, dp) for s, sp, d, dp in links}
    new_tag = {(r.dpid, r.in_port, r.tag, r.ipv4_dst): r.new_tag for r in rules}
    g = nx.DiGraph()
    for dst in hosts:
        for src in hosts:
            if src == dst:
                continue
            dpid, in_port, tag, prev = hosts[src].dpid, hosts[src].port, 1, None
            for _ in range(4 * len(routes)):
                route = routes[dpid][dst]
                if route[0] == "local":
                    break
                (port,) = route[1]
                tag = new_tag.get((dpid, in_port, tag, dst), tag)
                here = ((dpid, port), tag)
                if prev is not None:
                    g.add_edge(prev, here)
                prev = here
                dpid, in_port = peer[(dpid, port)]
    return g


def test_updown_rank_is_breadth_first_from_the_smallest_dpid() -> None:
    assert updown_rank([1, 2, 3, 4], ring_links(4)) == {1: (0, 1), 2: (1, 2), 4: (1, 4), 3: (2, 3)}
    # Two components: the second is ranked after all of the first.
    rank = updown_rank([1, 2, 7, 8], [(1, 1, 2, 1), (7, 1, 8, 1)])
    assert max(rank[1], rank[2]) < min(rank[7], rank[8])


def test_a_clos_is_ranked_by_tiers_so_its_shortest_paths_never_bounce() -> None:
    # Leaves 1, 2 (with hosts) under spines 10, 11: up is towards the spines.
    links = [
        (leaf, sp, spine, lp)
        for leaf in (1, 2)
        for sp, (spine, lp) in enumerate(((10, leaf), (11, leaf)), 2)
    ]
    links += [(d, dp, s, sp) for s, sp, d, dp in links]
    rank = updown_rank([1, 2, 10, 11], links, edge=[1, 2])
    assert rank == {10: (0, 10), 11: (0, 11), 1: (1, 1), 2: (1, 2)}
    hosts = {f"10.0.{i}.1": Host(f"10.0.{i}.1", "02:00:00:00:00:01", i, 1) for i in (1, 2)}
    routes = {
        1: {"10.0.1.1": ("local", 1, "m"), "10.0.2.1": ("ecmp", frozenset({2, 3}))},
        2: {"10.0.2.1": ("local", 1, "m"), "10.0.1.1": ("ecmp", frozenset({2, 3}))},
        10: {"10.0.1.1": ("ecmp", frozenset({1})), "10.0.2.1": ("ecmp", frozenset({2}))},
        11: {"10.0.1.1": ("ecmp", frozenset({1})), "10.0.2.1": ("ecmp", frozenset({2}))},
    }
    assert tag_rules(links, hosts, routes) == []


def test_clockwise_ring_rules_bump_the_tag_where_the_path_goes_down_then_up() -> None:
    links, hosts, routes = ring_links(4), ring_hosts(4), clockwise_routes(4)
    rules = tag_rules(links, hosts, routes)
    # Ranks: s1 (0), s2 and s4 (1), s3 (2). s2 -> s3 goes down, s3 -> s4 up: the
    # only bounce is at s3 for what came from s2 and goes on to s4 (to h4 or h1).
    bounces = {(r.dpid, r.in_port, r.ipv4_dst) for r in rules if r.new_tag != r.tag}
    assert bounces == {(3, 2, "10.0.4.1"), (3, 2, "10.0.1.1")}
    assert all(r.new_tag == 2 for r in rules)
    # Tag 2 keeps its queue on the way out: s4 towards h4 and s1, s1 towards h1.
    assert {(r.dpid, r.ipv4_dst) for r in rules if r.tag == 2} == {
        (4, "10.0.4.1"),
        (4, "10.0.1.1"),
        (1, "10.0.1.1"),
    }


@pytest.mark.parametrize("n", [3, 4, 6])
def test_tagged_queues_hold_no_cycle_where_untagged_ones_do(n: int) -> None:
    links, hosts, routes = ring_links(n), ring_hosts(n), clockwise_routes(n)
    untagged = dependencies(links, hosts, routes, [])
    assert not nx.is_directed_acyclic_graph(untagged)  # the deadlock's cyclic dependency
    tagged = dependencies(links, hosts, routes, tag_rules(links, hosts, routes))
    assert nx.is_directed_acyclic_graph(tagged)


def test_after_the_last_lossless_queue_a_bounced_packet_goes_lossy() -> None:
    links, hosts, routes = ring_links(4), ring_hosts(4), clockwise_routes(4)
    config = TaggerConfig(lossless_queues=(3,))
    rules = tag_rules(links, hosts, routes, config)
    assert {r.new_tag for r in rules} == {config.lossy_tag}
    assert config.dscp(config.lossy_tag) == 0 and config.queue(config.lossy_tag) == 0
    # A lossy packet needs no rule after the hop that made it lossy.
    assert all(r.tag == 1 for r in rules)
    # Lossless queues left hold no cycle (the lossy class never pauses).
    lossless = dependencies(links, hosts, routes, rules)
    lossless.remove_nodes_from([q for q in list(lossless) if q[1] == config.lossy_tag])
    assert nx.is_directed_acyclic_graph(lossless)


def test_an_ecmp_set_whose_ports_disagree_takes_the_larger_tag() -> None:
    # At s2, traffic for h3 that came down from s1 may go on down to s3 (no
    # bounce) or back up to s1 (a bounce): one rule serves both ports, so it
    # carries the larger tag (a higher tag never closes a cycle).
    links, hosts = ring_links(4), ring_hosts(4)
    routes = clockwise_routes(4)
    routes[2]["10.0.3.1"] = ("ecmp", frozenset({2, 3}))
    rules = tag_rules(links, hosts, routes)
    assert [
        r.new_tag for r in rules if (r.dpid, r.in_port, r.tag, r.ipv4_dst) == (2, 2, 1, "10.0.3.1")
    ] == [2]


def test_config_rejects_what_is_not_a_set_of_lossless_priorities() -> None:
    for bad in ((), (3, 3), (0,), (8,)):
        with pytest.raises(ValueError, match="lossless_queues"):
            TaggerConfig(lossless_queues=bad)


def test_ring_policy_turns_one_way_and_refuses_a_switch_off_a_ring() -> None:
    topo = nx.DiGraph()
    for s, sp, d, _dp in ring_links(4):
        topo.add_edge(s, d, port=sp)
    assert [clockwise(topo, i) for i in (1, 2, 3, 4)] == [2, 3, 4, 1]
    assert next_hops(topo, 4, 3) == {3}  # the long way round: one direction only
    assert next_hops(topo, 2, 2) == set()
    topo.add_edge(1, 3, port=4)
    with pytest.raises(ValueError, match="not on a ring"):
        clockwise(topo, 1)


def test_the_emu_pipeline_retags_and_requeues_a_bounced_packet() -> None:
    config = RoutingConfig(expect_switches=4, expect_links=4, expect_hosts=4, next_hops=next_hops)
    mgr = RoutingManager(config)
    tagger = TaggerManager(mgr)
    fab = PipelineFabric(ring_graph(), mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert tagger.status()["tagger"]["bounces"] == 2

    # r1 -> r2 -> r3: down, down: routing's flows alone, DSCP 26, queue by DSCP.
    assert roce_walk(fab, "h1", "h3") == [("r1", 26, None), ("r2", 26, None), ("r3", 26, None)]
    # r2 -> r3 -> r4: down then up at r3: tag 2 (DSCP 27) on queue 4 from there on.
    assert roce_walk(fab, "h2", "h4") == [("r2", 26, None), ("r3", 27, 4), ("r4", 27, 4)]
