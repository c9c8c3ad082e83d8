"""The routing controller's messages, applied to emu's own pipeline, forward packets.

The pure routing manager runs against the simulated fabric of
`fakes.PipelineFabric`: every message it sends (serialized by os-ken, as on
the wire) is also fed to an emu OpenFlow session per switch, so each switch holds
exactly the flows and groups the controller installed. Frames are then traced
hop by hop through the pipelines: every host reaches every other, different
UDP source ports take different spines (ECMP), and after a link goes down the
dead port is never used.
"""

from __future__ import annotations

import networkx as nx
import pytest
from os_ken.ofproto import ofproto_v1_3_parser as ofparser

from controllers import ofmsg
from controllers.routing import RoutingConfig, RoutingManager
from emu import fabric as emu_fabric

from .fakes import PipelineFabric, fat_tree, hosts_of, leaf_spine, learn_all_hosts


def build(graph, switches, cables, hosts) -> PipelineFabric:
    mgr = RoutingManager(
        RoutingConfig(expect_switches=switches, expect_links=cables, expect_hosts=hosts)
    )
    fab = PipelineFabric(graph, mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.converged()
    return fab


@pytest.mark.parametrize("shape", ["leaf_spine", "fat_tree"])
def test_every_host_reaches_every_other_on_shortest_paths(shape):
    if shape == "leaf_spine":
        fab = build(leaf_spine(), 6, 8, 4)
        longest = 3
    else:
        fab = build(fat_tree(4), 20, 32, 16)
        longest = 5
    hosts = hosts_of(fab)
    for src in hosts:
        for dst in hosts:
            if src != dst:
                assert len(fab.trace(src, dst)) <= longest


def test_ecmp_spreads_udp_source_ports_over_both_spines():
    fab = build(leaf_spine(), 6, 8, 4)
    spines = {fab.trace("h1", "h3", sport)[1] for sport in range(49152, 49152 + 64)}
    assert spines == {"s1", "s2"}


def test_after_link_down_no_path_uses_it_and_all_pairs_still_reach():
    fab = build(leaf_spine(), 6, 8, 4)
    fab.set_link("l3", "s1", up=False)
    hosts = hosts_of(fab)
    for src in hosts:
        for dst in hosts:
            if src != dst:
                for sport in (1000, 2000, 3000, 4000):
                    path = fab.trace(src, dst, sport)
                    assert not ("l3" in path and "s1" in path), path


# ------------------------------------------------------------ switch graphs with cycles
#
# A torus and a dragonfly have cycles among switches. Routing never floods a
# frame in the data plane (ARP is answered by the controller, and its probes
# go out of edge ports only), and every route follows a shortest path, so
# nothing can loop; these tests hold it to that on emu's own builders' graphs.

SHAPES = {
    "torus 3x3": lambda: emu_fabric.torus(dims=(3, 3)),
    "torus 2x2x2": lambda: emu_fabric.torus(dims=(2, 2, 2)),
    "dragonfly 3x2": lambda: emu_fabric.dragonfly(groups=3, routers_per_group=2),
    "dragonfly 4x3": lambda: emu_fabric.dragonfly(groups=4, routers_per_group=3),
    "rail 3 nodes x 2 GPUs, 2 spines": lambda: emu_fabric.rail_optimized(nodes=3),
}


def build_shape(graph) -> PipelineFabric:
    counts = emu_fabric.expected_counts(graph)
    return build(graph, counts["switches"], counts["switch_links"], counts["host_addresses"])


@pytest.mark.parametrize("make", SHAPES.values(), ids=list(SHAPES))
def test_cyclic_shapes_route_every_pair_on_a_shortest_path(make):
    graph = make()
    fab = build_shape(graph)
    switch_graph = graph.subgraph(emu_fabric.switches(graph))
    hosts = hosts_of(fab)
    for src in hosts:
        for dst in hosts:
            if src == dst:
                continue
            a, b = graph.nodes[src]["leaf"], graph.nodes[dst]["leaf"]
            hops = nx.shortest_path_length(switch_graph, a, b)
            for sport in (1000, 2000, 3000):
                path = fab.trace(src, dst, sport)
                assert len(path) == hops + 1 and path[0] == a and path[-1] == b


@pytest.mark.parametrize("make", SHAPES.values(), ids=list(SHAPES))
def test_cyclic_shapes_send_arp_probes_out_of_edge_ports_only(make):
    graph = make()
    fab = build_shape(graph)
    host_ports = set(fab.host_at)
    probes = [
        (dpid, action.port)
        for dpid, msg in fab.sent
        if isinstance(msg, ofparser.OFPPacketOut) and ofmsg.parse_arp(msg.data) is not None
        for action in msg.actions
    ]
    assert probes and all(out in host_ports for out in probes)


def test_nvlink_ports_reach_their_node_through_its_nvswitch_and_nothing_else():
    graph = emu_fabric.rail_optimized(nodes=3, gpus_per_node=2)
    fab = build_shape(graph)
    for node, gpus in emu_fabric.nvlink_domains(graph).items():
        for src in gpus:
            for dst in gpus:
                if src != dst:
                    assert fab.trace(src, dst, nvlink=True) == [f"nvsw{node}"]
    # The NVLink addresses are no route of the network, nor the NICs' of an NVSwitch:
    # a host is never a transit node.
    nvlink_ips = {graph.nodes[h]["nvlink_ip"] for h in emu_fabric.hosts(graph)}
    nic_ips = {graph.nodes[h]["ip"] for h in emu_fabric.hosts(graph)}
    for name, dpid in fab.dpid.items():
        routed = set(fab.mgr.routes()[dpid])
        if graph.nodes[name]["role"] == "nvswitch":
            assert routed == {graph.nodes[h]["nvlink_ip"] for h in graph[name]}
        else:
            assert routed == nic_ips and not routed & nvlink_ips


def test_torus_ecmp_uses_both_first_hops_and_survives_a_cut():
    fab = build_shape(emu_fabric.torus(dims=(3, 3)))
    # h1 on t0_0 to h9 on t2_2: two hops along x then y, or y then x.
    firsts = {fab.trace("h1", "h9", sport)[1] for sport in range(49152, 49152 + 64)}
    assert firsts == {"t0_2", "t2_0"}
    fab.set_link("t0_0", "t0_2", up=False)
    for sport in range(49152, 49152 + 16):
        assert fab.trace("h1", "h9", sport)[1] == "t2_0"


def test_dragonfly_pair_of_groups_with_two_minimal_routes_uses_both():
    graph = emu_fabric.dragonfly(groups=3, routers_per_group=2, global_links_per_router=2)
    fab = build_shape(graph)
    # g1r1 to g2r2: global then local, or local then global (two global links per pair).
    firsts = {fab.trace("h1", "h4", sport)[1] for sport in range(49152, 49152 + 64)}
    assert firsts == {"g1r2", "g2r1"}
