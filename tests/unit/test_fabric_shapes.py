"""Invariants of the GPU-cluster builders: dragonfly, torus, rail_optimized (no root).

In the networkx style: counts, degrees, links, diameters and the wiring rule
each shape is named for, not snapshots. The contract every builder shares
(dense ports, unique dpids, interface names) is tests/unit/test_fabric.py's,
which builds these shapes too.
"""

from __future__ import annotations

import itertools

import networkx as nx
import pytest

from emu.fabric import (
    NVLINK_RATIO,
    FabricSpecError,
    dragonfly,
    hosts,
    leaf_spine,
    network,
    nvlink_domains,
    port_map,
    rail_optimized,
    switch_links,
    switches,
    torus,
    validate,
)


def switch_graph(G: nx.Graph) -> nx.Graph:
    return G.subgraph(switches(G))


# ------------------------------------------------------------ dragonfly

# (groups g, routers per group a, hosts per router p, global links per router h)
DRAGONFLIES = [(3, 2, 1, 1), (3, 2, 2, 2), (5, 4, 1, 1), (4, 3, 2, 1), (9, 4, 2, 2), (2, 1, 1, 1)]


@pytest.mark.parametrize("g, a, p, h", DRAGONFLIES)
def test_dragonfly_counts_degrees_and_links(g, a, p, h):
    G = dragonfly(groups=g, routers_per_group=a, hosts_per_router=p, global_links_per_router=h)
    S = switch_graph(G)
    assert len(switches(G)) == g * a and len(hosts(G)) == g * a * p
    # Every router: p hosts, a-1 local links, h global links.
    assert {d for _, d in G.degree(switches(G))} == {p + a - 1 + h}
    tiers = [t for _, _, t in S.edges(data="tier")]
    assert tiers.count("local") == g * a * (a - 1) // 2
    assert tiers.count("global") == g * a * h // 2
    assert len(switch_links(G)) == len(tiers)


@pytest.mark.parametrize("g, a, p, h", DRAGONFLIES)
def test_dragonfly_groups_are_cliques_joined_all_to_all(g, a, p, h):
    G = dragonfly(groups=g, routers_per_group=a, hosts_per_router=p, global_links_per_router=h)
    S = switch_graph(G)
    group = nx.get_node_attributes(S, "group")
    for i in range(1, g + 1):
        members = [r for r in S if group[r] == i]
        assert len(members) == a
        assert all(S.has_edge(u, v) for u, v in itertools.combinations(members, 2))
    per_pair = {}
    for u, v, tier in S.edges(data="tier"):
        assert tier == ("local" if group[u] == group[v] else "global")
        if tier == "global":
            pair = frozenset((group[u], group[v]))
            per_pair[pair] = per_pair.get(pair, 0) + 1
    # Every pair of groups is joined, each by the same number of global links.
    assert set(per_pair) == {frozenset(c) for c in itertools.combinations(range(1, g + 1), 2)}
    assert set(per_pair.values()) == {a * h // (g - 1)}
    # Minimal routes are local, global, local at most.
    assert nx.diameter(S) <= 3


def test_dragonfly_canonical_diameter_is_three():
    # The largest dragonfly of a=2, h=1 (g = a*h + 1): one global link per pair of groups.
    assert nx.diameter(switch_graph(dragonfly(groups=3, routers_per_group=2))) == 3


def test_dragonfly_consecutive_arrangement():
    # Group i's global link k (router k // h) goes to group i + k mod (g-1) + 1.
    g, a, h = 5, 4, 2
    G = dragonfly(groups=g, routers_per_group=a, global_links_per_router=h)
    for i in range(g):
        for k in range(a * h):
            router = f"g{i + 1}r{k // h + 1}"
            port = 1 + a + k % h  # one host, a-1 local links, then globals in k order
            _intf, peer, _peer_port, _rate = port_map(G, router)[port]
            assert G.nodes[peer]["group"] == (i + k % (g - 1) + 1) % g + 1


def test_dragonfly_names_dpids_and_addresses():
    G = dragonfly(groups=3, routers_per_group=2, hosts_per_router=2)
    assert G.nodes["g3r2"]["dpid"] == 0x10302
    assert [G.nodes[h]["ip"] for h in ("h1", "h2", "h3", "h12")] == [
        "10.1.1.1",
        "10.1.1.2",
        "10.1.2.1",
        "10.3.2.2",
    ]
    assert G.nodes["h12"]["leaf"] == "g3r2" and G.nodes["h12"]["group"] == 3


# ------------------------------------------------------------ torus


@pytest.mark.parametrize(
    "dims", [(3, 3), (4, 4), (2, 2, 2), (3, 3, 3), (2, 3), (4, 3, 2), (5, 4, 3)]
)
def test_torus_counts_degrees_links_and_diameter(dims):
    G = torus(dims=dims, hosts_per_switch=2)
    S = switch_graph(G)
    n = 1
    for d in dims:
        n *= d
    # A dimension of size 2 is one link per pair of switches, not two.
    width = sum(1 if d == 2 else 2 for d in dims)
    assert len(switches(G)) == n and len(hosts(G)) == 2 * n
    assert {d for _, d in S.degree()} == {width}
    assert {d for _, d in G.degree(switches(G))} == {width + 2}
    assert len(switch_links(G)) == n * width // 2
    assert nx.diameter(S) == sum(d // 2 for d in dims)
    # The same graph as networkx's own periodic grid.
    relabel = {s: tuple(G.nodes[s]["coords"]) for s in S}
    grid = nx.grid_graph(dim=list(dims)[::-1], periodic=True)
    assert {frozenset((relabel[u], relabel[v])) for u, v in S.edges} == {
        frozenset(e) for e in grid.edges
    }


def test_torus_wraparound():
    G = torus(dims=(4, 3))
    assert G.has_edge("t0_0", "t3_0") and G.has_edge("t0_0", "t0_2")
    assert G.has_edge("t3_2", "t0_2") and G.has_edge("t3_2", "t3_0")
    assert G.edges["t0_0", "t3_0"]["tier"] == "torus"
    # Ports: the host, then per dimension +1 then -1.
    assert [peer for _i, peer, _p, _r in port_map(G, "t0_0").values()] == [
        "h1",
        "t1_0",
        "t3_0",
        "t0_1",
        "t0_2",
    ]


def test_torus_size_two_dimension_is_one_link():
    G = torus(dims=(2, 3))
    assert [peer for _i, peer, _p, _r in port_map(G, "t0_0").values()] == [
        "h1",
        "t1_0",
        "t0_1",
        "t0_2",
    ]
    assert port_map(G, "t1_0")[2][1] == "t0_0"


def test_torus_addresses_and_dpids():
    G = torus(dims=(3, 3), hosts_per_switch=2)
    assert G.nodes["t2_2"]["dpid"] == 0x10009 and G.nodes["t2_2"]["coords"] == [2, 2]
    assert G.nodes["h18"]["ip"] == "10.0.9.2" and G.nodes["h18"]["leaf"] == "t2_2"


# ------------------------------------------------------------ rail-optimized


@pytest.mark.parametrize("n, g, s", [(2, 2, 2), (4, 2, 2), (2, 4, 1), (3, 8, 4), (4, 2, 0)])
def test_rail_counts_degrees_and_nic_r_on_leaf_r(n, g, s):
    G = rail_optimized(nodes=n, gpus_per_node=g, spines=s)
    # g rail leaves, s spines and an NVSwitch per node
    assert len(hosts(G)) == n * g and len(switches(G)) == g + s + n
    assert len(switch_links(G)) == g * s
    for h in hosts(G):
        r = G.nodes[h]["rail"]
        nvsw = f"nvsw{G.nodes[h]['node']}"
        assert G.nodes[h]["leaf"] == f"rail{r}" and list(G[h]) == [f"rail{r}", nvsw]
        assert G.nodes[f"rail{r}"]["rail"] == r
        # On port `node` of its rail leaf.
        assert G.edges[h, f"rail{r}"]["ports"][f"rail{r}"] == G.nodes[h]["node"]
    for r in range(1, g + 1):
        assert G.degree(f"rail{r}") == n + s
        assert sorted(G.nodes[h]["node"] for h in G[f"rail{r}"] if h.startswith("h")) == list(
            range(1, n + 1)
        )
    for sp in range(1, s + 1):
        assert sorted(G[f"spine{sp}"]) == sorted(f"rail{r}" for r in range(1, g + 1))
    for node in range(1, n + 1):  # the NVLink domain: GPU r on port r, nothing else
        assert G.nodes[f"nvsw{node}"]["dpid"] == node
        assert {G.edges[h, f"nvsw{node}"]["ports"][f"nvsw{node}"]: h for h in G[f"nvsw{node}"]} == {
            r: f"h{(node - 1) * g + r}" for r in range(1, g + 1)
        }


def test_rail_traffic_between_rails_crosses_a_spine_and_within_a_rail_does_not():
    G = rail_optimized(nodes=3, gpus_per_node=2, spines=2, nvlink_domain=False)
    # NIC 1 of node 1 to NIC 1 of node 3: one leaf.
    assert nx.shortest_path(G, "h1", "h5") == ["h1", "rail1", "h5"]
    paths = list(nx.all_shortest_paths(G, "h1", "h6"))
    assert sorted(p[2] for p in paths) == ["spine1", "spine2"]
    assert nx.diameter(G) == 4


def test_rail_only_rails_are_islands():
    G = rail_optimized(nodes=4, gpus_per_node=2, spines=0, nvlink_domain=False)
    parts = sorted(sorted(c) for c in nx.connected_components(G))
    assert len(parts) == 2
    assert G.graph["params"]["oversubscription"] is None


def test_nvlink_domain_default_is_h100_over_connectx7():
    # 900 GB/s NVLink total (both directions) = 3.6 Tbit/s each way; ConnectX-7 400 Gbit/s.
    assert NVLINK_RATIO == pytest.approx(900e9 * 8 / 2 / 400e9)
    G = rail_optimized(nodes=2, gpus_per_node=4, host_rate_bps=10_000_000)
    assert G.graph["params"]["nvlink_rate_bps"] == 90_000_000
    assert nvlink_domains(G) == {1: ["h1", "h2", "h3", "h4"], 2: ["h5", "h6", "h7", "h8"]}
    G = rail_optimized(nvlink_ratio=4.5, host_rate_bps=10_000_000)
    assert G.graph["params"]["nvlink_rate_bps"] == 45_000_000
    with pytest.raises(FabricSpecError, match="rail_optimized"):
        nvlink_domains(torus())


# ------------------------------------------------------------ errors, one per rule

BAD = [
    ("groups", lambda: dragonfly(groups=1)),
    ("groups", lambda: dragonfly(groups=256)),
    ("routers_per_group", lambda: dragonfly(routers_per_group=0)),
    ("hosts_per_router", lambda: dragonfly(hosts_per_router=255)),
    ("global_links_per_router", lambda: dragonfly(groups=3, global_links_per_router=3)),
    ("global_links_per_router", lambda: dragonfly(groups=4, routers_per_group=2)),
    ("rates['core']", lambda: dragonfly(rates={"core": 10})),
    ("rate_bps", lambda: dragonfly(rate_bps=0)),
    ("dims", lambda: torus(dims=(3,))),
    ("dims", lambda: torus(dims=(3, 3, 3, 3))),
    ("dims", lambda: torus(dims=(3, 1))),
    ("dims", lambda: torus(dims="3x3")),
    ("dims", lambda: torus(dims=(3, 2.5))),
    ("dims", lambda: torus(dims=(300, 300))),
    ("dims", lambda: torus(dims=(20, 20, 20), hosts_per_switch=200)),  # t19_19_19-eth206
    ("hosts_per_switch", lambda: torus(hosts_per_switch=0)),
    ("rates['global']", lambda: torus(rates={"global": 10})),
    ("nodes", lambda: rail_optimized(nodes=0)),
    ("gpus_per_node", lambda: rail_optimized(gpus_per_node=0)),
    ("spines", lambda: rail_optimized(spines=-1)),
    ("nvlink_ratio", lambda: rail_optimized(nvlink_ratio=0)),
    ("fabric_rate_bps", lambda: rail_optimized(fabric_rate_bps=-1)),
    ("spines", lambda: rail_optimized(nodes=254, gpus_per_node=255, spines=10_000)),
]


@pytest.mark.parametrize("param,build", BAD, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD)])
def test_bad_parameter_raises_naming_it(param, build):
    with pytest.raises(FabricSpecError) as info:
        build()
    assert param in str(info.value)


@pytest.mark.parametrize("make", [torus, dragonfly, rail_optimized])
def test_each_shape_draws(make, tmp_path):
    from emu import telemetry

    path = telemetry.draw_fabric(make(), tmp_path / "fabric.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------ the NVLink domain's contract


def _with_ring_link(G):
    """An NVSwitch wired to a rail leaf: the NVLink domain as a transit network."""
    G.add_edge(
        "nvsw1",
        "rail1",
        tier="nvlink",
        rate_bps=10**7,
        delay_s=0.0,
        ports={"nvsw1": 3, "rail1": 5},
        intfs={"nvsw1": "nvsw1-eth3", "rail1": "rail1-eth5"},
    )
    return G


def _set(host, **attrs):
    def edit(G):
        G.nodes[host].update(attrs)
        return G

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_set("h1", nvlink_ip="10.0.0.9"), "host h1: nvlink_ip=10.0.0.9 must be in 10.255.0.0/16"),
        (_set("h1", nvlink_ip="10.255.1.300"), "host h1: nvlink_ip='10.255.1.300' is not an IPv4"),
        (
            _set("h2", nvlink_mac="02:00:00:00:00:09"),
            "nvlink_mac='02:00:00:00:00:09', must be 02:00:01",
        ),
        (
            _set("h2", nvlink_ip="10.255.1.1"),
            r"ip '10.255.1.1' already used by host h1 \(NVLink port\)",
        ),
        (
            _with_ring_link,
            "nvswitch nvsw1: linked to rail1; an NVSwitch links only GPUs' NVLink ports",
        ),
    ],
)
def test_validate_names_what_breaks_the_nvlink_domain(edit, message):
    G = edit(rail_optimized())
    with pytest.raises(FabricSpecError, match=message):
        validate(G)


def test_network_leaves_the_nvlink_domains_out():
    G = rail_optimized(nodes=3, gpus_per_node=2, spines=0)
    assert nx.is_connected(G)  # through the NVSwitches ...
    assert nx.number_connected_components(network(G)) == 2  # ... but the rails are islands
    assert network(rail_optimized(nvlink_domain=False)).number_of_nodes() == 8
    ls = leaf_spine()
    assert network(ls) is ls
