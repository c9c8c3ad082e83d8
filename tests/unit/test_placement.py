"""Placing a fabric over several servers (emu/placement.py): units whole, few tunnels, balance.

Pure: graphs in, maps out; no root. Mininet's cluster edition's own placers
are the baseline, run here on the same graphs as MininetCluster would give
them (its Topo lists nodes in natural name order).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import fabric
from emu.placement import PlacementError, place, placer_class, units

ROOT = Path(__file__).parents[2]
BUILDERS = {
    "leaf_spine": lambda: fabric.leaf_spine(leaves=4, spines=2),
    "fat_tree k=4": lambda: fabric.fat_tree(k=4),
    "fat_tree k=8": lambda: fabric.fat_tree(k=8),
    "rail_optimized": lambda: fabric.rail_optimized(nodes=4, gpus_per_node=4),
    "dragonfly": lambda: fabric.dragonfly(groups=5, routers_per_group=2, global_links_per_router=2),
    "torus": lambda: fabric.torus(dims=(3, 3)),
}


def servers(n: int) -> list[str]:
    return ["local"] + [f"server{i}" for i in range(2, n + 1)]


def stock_cut(graph, names: list[str], placer: str) -> int:
    """Links between servers when one of the cluster edition's placers places `graph`."""
    cluster = pytest.importorskip("mininet.examples.cluster")
    from emu.fabric import natural_key

    hosts = sorted(fabric.hosts(graph), key=natural_key)
    switches = sorted(fabric.switches(graph), key=natural_key)
    p = getattr(cluster, placer)(
        servers=names,
        nodes=hosts + switches,
        hosts=hosts,
        switches=switches,
        controllers=[],
        links=list(graph.edges()),
    )
    where = {n: p.place(n) for n in graph}
    return sum(1 for u, v in graph.edges() if where[u] != where[v])


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_units_stay_whole_and_servers_share_the_nodes(name: str, n: int):
    graph = BUILDERS[name]()
    p = place(graph, servers(n))
    assert set(p.server_of) == set(graph) and set(p.server_of.values()) == set(servers(n))
    for unit in set(p.unit_of.values()):
        assert len({p.server_of[m] for m in p.unit_of if p.unit_of[m] == unit}) == 1, unit
    # A host always runs beside the switch it hangs off: no host link is a tunnel
    # (a rail fabric's GPU reaches its NVSwitch or its rail leaf across, by design).
    for h in fabric.hosts(graph):
        if "node" not in graph.nodes[h]:
            assert p.server_of[h] == p.server_of[graph.nodes[h]["leaf"]], h
    biggest = max(list(p.unit_of.values()).count(u) for u in set(p.unit_of.values()))
    loads = [len(p.nodes_on(s)) for s in servers(n)]
    assert max(loads) - min(loads) <= biggest, loads
    assert p.cut == tuple(
        sorted((u, v) for u, v in graph.edges() if p.server_of[u] != p.server_of[v])
    )
    assert p.cut_bps == sum(graph.edges[u, v]["rate_bps"] for u, v in p.cut)
    assert place(graph, servers(n)) == p  # the same placement every time


def test_a_k8_fat_tree_over_two_servers_cuts_a_third_of_the_cluster_editions_links():
    graph = fabric.fat_tree(k=8)
    p = place(graph, servers(2))
    # Four whole pods a side and half the cores: each pod reaches the other side's
    # 8 cores over 8 of its 16 uplinks, 64 links in all, the fewest for pods kept whole.
    assert len(p.cut) == 64
    switches = [sum(1 for n in p.nodes_on(s) if n in fabric.switches(graph)) for s in servers(2)]
    assert switches == [40, 40]
    assert stock_cut(graph, servers(2), "SwitchBinPlacer") == 192
    assert stock_cut(graph, servers(2), "RoundRobinPlacer") == 256


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_never_more_tunnels_than_the_cluster_editions_switch_bins_on_two_servers(name: str):
    graph = BUILDERS[name]()
    assert len(place(graph, servers(2)).cut) <= stock_cut(graph, servers(2), "SwitchBinPlacer")


def test_a_rail_fabric_keeps_what_crosses_the_cheaper_of_rails_and_gpu_servers():
    """NVLink runs at nvlink_ratio times the rail rate: cutting it costs more tunnel
    bandwidth, so the placement weighs both ways of keeping GPUs together."""
    graph = fabric.rail_optimized(nodes=4, gpus_per_node=4)
    p = place(graph, servers(2))
    assert set(p.unit_of.values()) in ({*units(graph).values()}, {*units(graph, True).values()})
    nvlink = [e for e in p.cut if "nvswitch" in {graph.nodes[n]["role"] for n in e}]
    assert not nvlink, nvlink  # the GPU servers stay whole: only rail links cross
    assert p.cut_bps == 12 * graph.edges["h1", "rail1"]["rate_bps"]


@pytest.mark.parametrize(
    "graph, n",
    [
        (fabric.leaf_spine(leaves=1, spines=3, hosts_per_leaf=5), 3),
        (fabric.leaf_spine(leaves=1, spines=3, hosts_per_leaf=5), 4),
        (fabric.fat_tree(k=4), 7),
        (fabric.fat_tree(k=4), 8),
        (fabric.dragonfly(groups=5, routers_per_group=2, global_links_per_router=2), 5),
    ],
)
def test_as_many_servers_as_units_each_get_one(graph, n):
    """Units moved whole after the bisection could leave a server empty (found in
    review: 3 servers for a leaf and 3 spines said "would run nothing")."""
    p = place(graph, servers(n))
    assert set(p.server_of.values()) == set(servers(n))


def test_one_server_runs_everything_and_cuts_nothing():
    graph = fabric.fat_tree(k=4)
    p = place(graph, ["local"])
    assert set(p.server_of.values()) == {"local"} and p.cut == () and p.cut_bps == 0


@pytest.mark.parametrize(
    "names, named",
    [
        ([], "at least one server"),
        (["a", "a"], "'a' is named twice"),
        (["a", " b"], "' b' is not a server name"),
        (["a", ""], "'' is not a server name"),
        ([f"s{i}" for i in range(30)], "30 servers for 24 nodes"),
        ([f"s{i}" for i in range(10)], "10 servers for 8 units"),
    ],
)
def test_bad_servers_are_one_line_naming_the_problem(names, named):
    graph = fabric.fat_tree(k=4) if len(names) == 10 else fabric.leaf_spine(leaves=4, spines=2)
    if len(names) == 30:
        graph = fabric.single_switch(hosts=23)
    with pytest.raises(PlacementError) as info:
        place(graph, names)
    assert named in str(info.value) and "\n" not in str(info.value)


def test_the_cluster_edition_places_through_emus_placer():
    pytest.importorskip("mininet.examples.cluster")
    graph = fabric.fat_tree(k=4)
    p = place(graph, servers(2))
    Placer = placer_class(p)
    # As MininetCluster.placeNodes builds it (mininet/examples/cluster.py).
    placer = Placer(
        servers=servers(2),
        nodes=list(graph),
        hosts=fabric.hosts(graph),
        switches=fabric.switches(graph),
        controllers=[],
        links=list(graph.edges()),
    )
    assert {n: placer.place(n) for n in graph} == p.server_of
    with pytest.raises(PlacementError, match="'h99': not a node of the placed fabric"):
        placer.place("h99")
    with pytest.raises(PlacementError, match="the cluster has"):
        Placer(servers=["local", "elsewhere"])


def test_emu_topo_place_prints_where_each_unit_runs_and_every_tunnel(capsys):
    from emu import cli

    path = ROOT / "topologies" / "fat-tree-k4.yaml"
    assert cli.main(["topo", "place", str(path), "--servers", "local,server2"]) == 0
    out = capsys.readouterr().out
    head, servers_table, tunnels = out.strip().split("\n\n")
    assert head.endswith(
        "8 of 48 links cross between servers (tunnels), 160Mbit/s at their line rates"
    )
    rows = [line.split() for line in servers_table.splitlines()[3:]]
    assert [r[:3] for r in rows] == [["local", "10", "8"], ["server2", "10", "8"]]
    kept = {unit for r in rows for unit in r[3:]}
    assert {"pod0", "pod1", "pod2", "pod3"} <= kept  # pods whole, named as units
    assert len(tunnels.splitlines()) == 3 + 8  # title, header, rule, one row per tunnel


@pytest.mark.parametrize(
    "servers, error",
    [
        ("local,local", "emu: servers: 'local' is named twice\n"),
        (",b", "emu: servers: '' is not a server name\n"),
        (
            "a,b,c,d,e,f,g,h,i",
            "emu: servers: 9 servers for 8 nodes: each server needs at least one\n",
        ),
    ],
)
def test_emu_topo_place_names_a_bad_server_list_in_one_line_with_exit_2(servers, error, capsys):
    from emu import cli

    path = ROOT / "topologies" / "leaf-spine-2x2.yaml"
    assert cli.main(["topo", "place", str(path), "--servers", servers]) == cli.EXIT_USAGE
    assert capsys.readouterr() == ("", error)
