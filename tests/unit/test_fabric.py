"""Invariants of emu.fabric's topology builders (no root, no namespaces)."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import ipaddress
import itertools

import networkx as nx
import pytest

import emu.fabric
from emu.fabric import (
    MAX_INTF_NAME,
    FabricSpecError,
    dragonfly,
    expected_counts,
    fat_tree,
    host_ports,
    hosts,
    leaf_spine,
    port_map,
    rail_optimized,
    single_switch,
    switch_links,
    switches,
    to_mininet,
    torus,
    validate,
)

ALL_GRAPHS = {
    "fat_tree_k2": lambda: fat_tree(k=2),
    "fat_tree_k4": lambda: fat_tree(k=4),
    "fat_tree_k6": lambda: fat_tree(k=6),
    "leaf_spine_default": lambda: leaf_spine(),
    "leaf_spine_3x5x4": lambda: leaf_spine(leaves=5, spines=3, hosts_per_leaf=4),
    "single_switch": lambda: single_switch(hosts=5),
    "dragonfly_3g_2a": lambda: dragonfly(groups=3, routers_per_group=2, hosts_per_router=2),
    "dragonfly_5g_4a_h2": lambda: dragonfly(
        groups=5, routers_per_group=4, hosts_per_router=1, global_links_per_router=2
    ),
    "torus_3x3": lambda: torus(dims=(3, 3)),
    "torus_2x2x2": lambda: torus(dims=(2, 2, 2), hosts_per_switch=2),
    "torus_4x3x2": lambda: torus(dims=(4, 3, 2)),
    "rail_optimized_4n_2g_2s": lambda: rail_optimized(nodes=4, gpus_per_node=2, spines=2),
    "rail_only_2n_4g": lambda: rail_optimized(nodes=2, gpus_per_node=4, spines=0),
}


@pytest.fixture(params=sorted(ALL_GRAPHS))
def graph(request):
    return ALL_GRAPHS[request.param]()


# ------------------------------------------------------------ common contract


@pytest.mark.parametrize("module", ["contract", "clos", "gpu"])
def test_doctests_pass(module):
    result = doctest.testmod(importlib.import_module(f"emu.fabric.{module}"), verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


def test_graph_attrs(graph):
    assert graph.graph["kind"] in emu.fabric.KINDS and graph.graph["kind"] != "custom"
    assert graph.graph["subnet"] == "10.0.0.0/8"
    assert isinstance(graph.graph["name"], str) and graph.graph["name"]
    assert isinstance(graph.graph["params"], dict)
    assert graph.graph["time_scale"] == 1.0
    assert type(graph) is nx.Graph


def test_unique_dpids_macs_ips(graph):
    dpids = [graph.nodes[s]["dpid"] for s in switches(graph)]
    assert len(set(dpids)) == len(dpids)
    assert all(isinstance(d, int) and d > 0 for d in dpids)
    macs = [graph.nodes[h]["mac"] for h in hosts(graph)]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 0b10 and not first & 0b01  # locally administered, unicast
    ips = [graph.nodes[h]["ip"] for h in hosts(graph)]
    assert len(set(ips)) == len(ips)
    subnet = ipaddress.ip_network("10.0.0.0/8")
    assert all(ipaddress.ip_address(ip) in subnet for ip in ips)
    assert {graph.nodes[h]["prefixlen"] for h in hosts(graph)} == {8}


def test_interface_names_unique_and_short(graph):
    names = [name for _, _, intfs in graph.edges(data="intfs") for name in intfs.values()]
    assert len(set(names)) == len(names)
    assert all(len(name) <= MAX_INTF_NAME for name in names)
    for u, v, e in graph.edges(data=True):
        for node in (u, v):
            assert e["intfs"][node] == f"{node}-eth{e['ports'][node]}"


def test_ports_are_dense(graph):
    for node in graph:
        ports = sorted(port_map(graph, node))
        if graph.nodes[node]["kind"] == "host":
            # port 0 the NIC; a GPU's NVLink port, when it has one, is 1
            assert ports == ([0, 1] if "nvlink_ip" in graph.nodes[node] else [0])
        else:
            assert ports == list(range(1, graph.degree(node) + 1))


def test_port_map_is_symmetric(graph):
    for node in graph:
        for port, (intf, peer, peer_port, rate) in port_map(graph, node).items():
            assert intf == f"{node}-eth{port}"
            back = port_map(graph, peer)[peer_port]
            assert back[1:] == (node, port, rate)


def test_hosts_attach_to_their_leaf(graph):
    for h in hosts(graph):
        leaf = graph.nodes[h]["leaf"]
        nvlink = [p for p in graph[h] if graph.edges[h, p]["tier"] == "nvlink"]
        assert sorted(graph[h]) == sorted([leaf] + nvlink) and len(nvlink) <= 1
        assert graph.edges[h, leaf]["tier"] == "host"
        assert graph.edges[h, leaf]["ports"][h] == 0


def test_switch_tiers_match_roles(graph):
    tier_of = {"leaf": 0, "edge": 0, "switch": 0, "router": 0, "torus": 0}
    tier_of.update(spine=1, agg=1, core=2, nvswitch=-1)
    for s in switches(graph):
        assert graph.nodes[s]["tier"] == tier_of[graph.nodes[s]["role"]]


def test_validate_accepts_builders(graph):
    validate(graph)


def test_expected_counts(graph):
    counts = expected_counts(graph)
    assert counts == {
        "switches": len(switches(graph)),
        "hosts": len(hosts(graph)),
        # an address per host port: a GPU's NVLink port is learned too
        "host_addresses": sum(len(host_ports(graph, h)) for h in hosts(graph)),
        "switch_links": len(switch_links(graph)),
    }
    assert counts["switches"] + counts["hosts"] == graph.number_of_nodes()
    assert counts["host_addresses"] + counts["switch_links"] == graph.number_of_edges()


# ------------------------------------------------------------ fat tree


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts_and_degrees(k):
    G = fat_tree(k=k)
    assert len(switches(G)) == 5 * k * k // 4
    assert len(hosts(G)) == k**3 // 4
    assert all(G.degree(s) == k for s in switches(G))
    roles = [G.nodes[s]["role"] for s in switches(G)]
    assert roles.count("core") == (k // 2) ** 2
    assert roles.count("edge") == roles.count("agg") == k * k // 2
    assert nx.is_connected(G)


@pytest.mark.parametrize("k", [4, 6])
def test_fat_tree_path_diversity(k):
    G = fat_tree(k=k)
    by_pod = {}
    for h in hosts(G):
        by_pod.setdefault(G.nodes[h]["pod"], []).append(h)
    # inter-pod: one path per core switch
    src, dst = by_pod[0][0], by_pod[1][0]
    assert len(list(nx.all_shortest_paths(G, src, dst))) == (k // 2) ** 2
    # intra-pod, different edge: one path per agg switch of the pod
    other_edge = next(h for h in by_pod[0] if G.nodes[h]["leaf"] != G.nodes[src]["leaf"])
    assert len(list(nx.all_shortest_paths(G, src, other_edge))) == k // 2


def test_fat_tree_addressing_is_al_fares():
    G = fat_tree(k=4)
    for h in hosts(G):
        pod, sw, hid = (int(x) for x in G.nodes[h]["ip"].split(".")[1:])
        edge = G.nodes[h]["leaf"]
        assert pod == G.nodes[h]["pod"] == G.nodes[edge]["pod"]
        assert edge == f"e{pod * 2 + sw + 1}"
        assert 2 <= hid <= 3


def test_fat_tree_rates_per_tier():
    G = fat_tree(k=4, rate_bps=1000, rates={"agg-core": 500})
    for _, _, e in G.edges(data=True):
        assert e["rate_bps"] == (500 if e["tier"] == "agg-core" else 1000)
    assert G.graph["params"]["rates"] == {"host": 1000, "edge-agg": 1000, "agg-core": 500}


def test_port_order_down_then_up():
    G = fat_tree(k=4)
    roles = {
        p: G.nodes[peer]["tier"] if G.nodes[peer]["kind"] == "switch" else -1
        for p, (_, peer, _, _) in port_map(G, "a1").items()
    }
    assert [roles[p] for p in sorted(roles)] == [0, 0, 2, 2]
    G = leaf_spine(leaves=2, spines=3, hosts_per_leaf=2)
    assert [peer for _, peer, _, _ in port_map(G, "leaf2").values()] == [
        "h3",
        "h4",
        "spine1",
        "spine2",
        "spine3",
    ]
    assert [peer for _, peer, _, _ in port_map(G, "spine3").values()] == ["leaf1", "leaf2"]


# ------------------------------------------------------------ leaf/spine


@pytest.mark.parametrize("leaves,spines,hpl", [(1, 1, 1), (4, 2, 2), (6, 4, 3)])
def test_leaf_spine_counts(leaves, spines, hpl):
    G = leaf_spine(leaves=leaves, spines=spines, hosts_per_leaf=hpl)
    assert len(switches(G)) == leaves + spines
    assert len(hosts(G)) == leaves * hpl
    assert len(switch_links(G)) == leaves * spines
    for s in switches(G):
        expected = hpl + spines if G.nodes[s]["role"] == "leaf" else leaves
        assert G.degree(s) == expected


@pytest.mark.parametrize("spines", [1, 2, 4])
def test_leaf_spine_path_diversity(spines):
    G = leaf_spine(leaves=3, spines=spines, hosts_per_leaf=2)
    for a, b in itertools.combinations(hosts(G), 2):
        n = len(list(nx.all_shortest_paths(G, a, b)))
        same_leaf = G.nodes[a]["leaf"] == G.nodes[b]["leaf"]
        assert n == (1 if same_leaf else spines)


def test_leaf_spine_oversubscription_from_fabric_rate():
    G = leaf_spine(leaves=2, spines=2, hosts_per_leaf=4, host_rate_bps=1000, fabric_rate_bps=1000)
    assert G.graph["params"]["oversubscription"] == pytest.approx(2.0)
    rates = {e["tier"]: e["rate_bps"] for _, _, e in G.edges(data=True)}
    assert rates == {"host": 1000, "leaf-spine": 1000}


def test_leaf_spine_fabric_rate_from_oversubscription():
    G = leaf_spine(spines=2, hosts_per_leaf=4, host_rate_bps=1000, oversubscription=4.0)
    assert G.graph["params"]["fabric_rate_bps"] == 500
    assert G.graph["params"]["oversubscription"] == pytest.approx(4.0)
    assert {G.edges[e]["rate_bps"] for e in switch_links(G)} == {500}


def test_leaf_spine_default_is_non_blocking_at_host_rate():
    G = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_rate_bps=1000)
    assert G.graph["params"]["fabric_rate_bps"] == 1000
    assert G.graph["params"]["oversubscription"] == pytest.approx(1.0)


def test_leaf_spine_agreeing_rates_accepted():
    G = leaf_spine(
        hosts_per_leaf=2, spines=2, host_rate_bps=1000, fabric_rate_bps=500, oversubscription=2.0
    )
    assert G.graph["params"]["oversubscription"] == pytest.approx(2.0)


def test_leaf_spine_dpids_do_not_clash():
    G = leaf_spine(leaves=2, spines=2)
    assert G.nodes["leaf1"]["dpid"] != G.nodes["spine1"]["dpid"]


def test_single_switch():
    G = single_switch(hosts=6, rate_bps=1234)
    assert switches(G) == ["s1"]
    assert G.degree("s1") == 6
    assert {e["rate_bps"] for _, _, e in G.edges(data=True)} == {1234}


def test_params_and_time_scale_recorded():
    G = fat_tree(k=2, delay_s=0.001, time_scale=10, name="t")
    assert G.graph["name"] == "t"
    assert G.graph["time_scale"] == 10.0
    assert G.graph["params"]["k"] == 2
    assert {e["delay_s"] for _, _, e in G.edges(data=True)} == {0.001}


def test_time_scale_is_the_modelled_nic_over_the_host_link():
    assert leaf_spine(host_rate_bps=20_000_000, modelled_rate_bps=25e9).graph["time_scale"] == 1250
    # A fat-tree's host tier may run at its own rate: the scale follows the host links.
    G = fat_tree(k=2, rate_bps=10_000_000, rates={"host": 5_000_000}, modelled_rate_bps=1e9)
    assert G.graph["time_scale"] == 200
    assert single_switch(hosts=2, rate_bps=1_000_000, modelled_rate_bps=1e9).graph[
        "time_scale"
    ] == pytest.approx(1000)
    # Both given and agreeing is fine; neither is 1 (modelled time is emulated time).
    assert leaf_spine(host_rate_bps=1000, time_scale=4, modelled_rate_bps=4000).graph[
        "time_scale"
    ] == pytest.approx(4)
    assert leaf_spine().graph["time_scale"] == 1.0


# ------------------------------------------------------------ errors, one per rule

BAD = [
    ("k", lambda: fat_tree(k=3)),
    ("k", lambda: fat_tree(k=0)),
    ("k", lambda: fat_tree(k=-2)),
    ("k", lambda: fat_tree(k=4.0)),
    ("k", lambda: fat_tree(k=256)),
    ("rate_bps", lambda: fat_tree(rate_bps=-1)),
    ("rate_bps", lambda: fat_tree(rate_bps=0)),
    ("rates['core']", lambda: fat_tree(rates={"core": 10})),
    ("rates['host']", lambda: fat_tree(rates={"host": -5})),
    ("delay_s", lambda: fat_tree(delay_s=-0.1)),
    ("time_scale", lambda: fat_tree(time_scale=0)),
    ("modelled_rate_bps", lambda: fat_tree(modelled_rate_bps=-1)),
    ("conflicts with modelled_rate_bps", lambda: leaf_spine(time_scale=2, modelled_rate_bps=1e9)),
    ("name", lambda: fat_tree(name="")),
    ("leaves", lambda: leaf_spine(leaves=0)),
    ("leaves", lambda: leaf_spine(leaves=256)),
    ("spines", lambda: leaf_spine(spines=0)),
    ("hosts_per_leaf", lambda: leaf_spine(hosts_per_leaf=0)),
    ("hosts_per_leaf", lambda: leaf_spine(hosts_per_leaf=255)),
    ("host_rate_bps", lambda: leaf_spine(host_rate_bps=-10)),
    ("fabric_rate_bps", lambda: leaf_spine(fabric_rate_bps=0)),
    ("oversubscription", lambda: leaf_spine(oversubscription=0)),
    (
        "oversubscription",
        lambda: leaf_spine(host_rate_bps=1000, fabric_rate_bps=1000, oversubscription=3.0),
    ),
    ("uplinks_per_spine", lambda: leaf_spine(uplinks_per_spine=2)),
    ("uplinks_per_spine", lambda: leaf_spine(uplinks_per_spine=0)),
    ("spines", lambda: leaf_spine(leaves=10, spines=100_000, hosts_per_leaf=1)),
    ("hosts", lambda: single_switch(hosts=0)),
    ("hosts", lambda: single_switch(hosts=255)),
    ("rate_bps", lambda: single_switch(rate_bps=1.5)),
]


@pytest.mark.parametrize("param,build", BAD, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD)])
def test_bad_parameter_raises_naming_it(param, build):
    with pytest.raises(FabricSpecError) as info:
        build()
    assert param in str(info.value)
    assert isinstance(info.value, ValueError)


def test_interface_name_too_long_names_it():
    with pytest.raises(FabricSpecError, match=r"spines=100000.*characters.*15"):
        leaf_spine(leaves=10, spines=100_000, hosts_per_leaf=1)


def _broken(mutate):
    G = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2)
    mutate(G)
    return G


def _renumber_leaf1_uplink(G):
    # consistent port and name, but leaves a gap in leaf1's port numbers
    e = G.edges["leaf1", "spine1"]
    e["ports"]["leaf1"] = 9
    e["intfs"]["leaf1"] = "leaf1-eth9"


@pytest.mark.parametrize(
    "what,mutate",
    [
        ("dpid", lambda G: G.nodes["spine1"].update(dpid=G.nodes["leaf1"]["dpid"])),
        ("dpid", lambda G: G.nodes["spine1"].update(dpid=0)),
        ("mac", lambda G: G.nodes["h2"].update(mac=G.nodes["h1"]["mac"])),
        ("mac", lambda G: G.nodes["h2"].update(mac="00:11:22:33:44:55")),
        ("ip", lambda G: G.nodes["h2"].update(ip=G.nodes["h1"]["ip"])),
        ("10.0.0.0/8", lambda G: G.nodes["h2"].update(ip="192.168.0.1")),
        ("role", lambda G: G.nodes["leaf1"].update(role="tor")),
        ("kind", lambda G: G.nodes["leaf1"].update(kind="router")),
        ("tier", lambda G: G.nodes["leaf1"].update(tier=1)),
        ("rate_bps", lambda G: G.edges["h1", "leaf1"].update(rate_bps=-1)),
        ("tier", lambda G: G.edges["h1", "leaf1"].update(tier="rack")),
        ("ports", _renumber_leaf1_uplink),
        ("interface", lambda G: G.edges["h1", "leaf1"]["intfs"].update(h1="eth0")),
        ("leaf", lambda G: G.nodes["h1"].update(leaf="leaf2")),
        ("subnet", lambda G: G.graph.update(subnet="192.168.0.0/16")),
    ],
)
def test_validate_rejects(what, mutate):
    with pytest.raises(FabricSpecError, match=what):
        validate(_broken(mutate))


def test_port_map_unknown_node():
    with pytest.raises(FabricSpecError, match="node='nope'"):
        port_map(single_switch(), "nope")


# ------------------------------------------------------------ Mininet


needs_mininet = pytest.mark.skipif(
    importlib.util.find_spec("mininet") is None, reason="Mininet's python module is not installed"
)


@needs_mininet
@pytest.mark.parametrize("build", [lambda: fat_tree(k=4), lambda: leaf_spine(), single_switch])
def test_to_mininet_matches_graph(build):
    G = build()
    topo = to_mininet(G)
    assert set(topo.switches()) == set(switches(G))
    assert set(topo.hosts()) == set(hosts(G))
    assert len(topo.links()) == G.number_of_edges()
    for u, v, e in G.edges(data=True):
        assert topo.port(u, v) == (e["ports"][u], e["ports"][v])
        info = topo.linkInfo(u, v)
        names = {info["node1"]: info["intfName1"], info["node2"]: info["intfName2"]}
        assert names == e["intfs"]
        assert not {"bw", "delay", "loss"} & set(info)  # no TCLink shaping
    for s in switches(G):
        assert int(topo.nodeInfo(s)["dpid"], 16) == G.nodes[s]["dpid"]
        assert len(topo.nodeInfo(s)["dpid"]) == 16
    for h in hosts(G):
        info = topo.nodeInfo(h)
        assert info["ip"] == f"{G.nodes[h]['ip']}/8"
        assert info["mac"] == G.nodes[h]["mac"]


def test_fabric_imports_without_mininet():
    # to_mininet imports Mininet lazily; importing emu.fabric must not pull it in.
    import subprocess
    import sys

    code = "import sys, emu.fabric; sys.exit('mininet' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_lldp_period_is_ryus_second_up_to_200_switch_ports_and_grows_beyond() -> None:
    """Every scenario's fabric keeps 1 s; a k=8 fat-tree (640 switch ports), which never
    converged at 1 s on 2 cores, gets 640 / 200 = 3.2 s (docs/performance.md)."""
    assert emu.fabric.lldp_interval_s(fat_tree(k=4)) == 1.0
    assert emu.fabric.lldp_interval_s(leaf_spine(leaves=4, spines=2, hosts_per_leaf=2)) == 1.0
    ports = sum(fat_tree(k=8).degree(n) for n in switches(fat_tree(k=8)))
    assert ports == 640
    assert emu.fabric.lldp_interval_s(fat_tree(k=8)) == pytest.approx(640 / 200)
    assert emu.fabric.lldp_interval_s(fat_tree(k=6)) == pytest.approx(270 / 200)
