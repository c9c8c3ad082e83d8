"""What scenarios pick from a fabric's graph (emu/topopick.py, scenarios/*), no fabric started.

Two kinds of test: on the builders' default shapes the graph-derived choices
are exactly the hosts, links and switches the scenarios used to name (so the
defaults run as before); on topology files they follow the file, and a file a
scenario's model does not fit is refused in one line that names what it lacks.
A file actually run on real packets is tests/integration/test_topology_file.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import fabric, scenario, topofile, topopick
from emu.traffic import hedera
from scenarios import (
    incast,
    link_flap,
    mixed_traffic,
    straggler,
)

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ROOT / "topologies"
ASYMMETRIC = str(TOPOLOGIES / "asymmetric.yaml")
LEAF_SPINE_2X2 = str(TOPOLOGIES / "leaf-spine-2x2.yaml")
FAT_TREE_K4 = str(TOPOLOGIES / "fat-tree-k4.yaml")

# Every scenario in scenarios/ (smoke's own tests are elsewhere).
SCENARIOS = (
    "ecmp-vs-adaptive",
    "ecn-thresholds",
    "failover",
    "incast",
    "link-flap",
    "mixed-traffic",
    "pause-storm",
    "sharp-allreduce",
    "straggler",
)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    return str(path)


def resolve(name: str, *sets: str) -> dict:
    return scenario.resolve_params(scenario.load(name), list(sets))


def refusal(name: str, *sets: str) -> str:
    with pytest.raises(scenario.ScenarioError) as err:
        resolve(name, *sets)
    text = str(err.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------- emu/topopick.py


def test_spare_uplink_is_the_first_leafs_first_uplink_off_the_bridges():
    assert topopick.spare_uplink(fabric.leaf_spine()) == ("leaf1", "spine1")
    assert topopick.spare_uplink(fabric.fat_tree(k=4)) == ("e1", "a1")
    assert topopick.spare_uplink(fabric.leaf_spine(spines=1)) is None
    # leaf3's only uplink is a bridge; leaf1 has two.
    assert topopick.spare_uplink(topofile.load(ASYMMETRIC)) == ("leaf1", "spine1")


def test_spare_top_switch_leaves_every_host_connected():
    assert topopick.spare_top_switch(fabric.leaf_spine()) == "spine1"
    assert topopick.spare_top_switch(fabric.fat_tree(k=4)) == "c1"
    assert topopick.spare_top_switch(fabric.leaf_spine(spines=1)) is None
    # spine1's crash leaves leaf1, leaf2 and leaf3 on spine2; spine2's would cut leaf3.
    assert topopick.spare_top_switch(topofile.load(ASYMMETRIC)) == "spine1"


def test_hosts_by_leaf_and_rates():
    g = topofile.load(ASYMMETRIC)
    assert topopick.hosts_by_leaf(g) == {
        "leaf1": ["h1", "h2"],
        "leaf2": ["h3", "h4"],
        "leaf3": ["storage"],
    }
    assert topopick.host_rate_bps(g, "storage") == 40_000_000
    assert topopick.links_slower_than_hosts(g) == [("spine2", "leaf2", 10_000_000)]
    assert topopick.mixed_rates(fabric.leaf_spine()) is None
    assert "runs at 40M" in topopick.mixed_rates(g) or "runs at 10M" in topopick.mixed_rates(g)


def test_shared_links_are_on_every_path():
    one_spine = fabric.leaf_spine(leaves=2, spines=1)
    assert topopick.shared_links(one_spine, [("h1", "h3"), ("h2", "h4")]) == {
        ("leaf1", "spine1"),
        ("spine1", "leaf2"),
    }
    assert topopick.shared_links(fabric.leaf_spine(), [("h1", "h3"), ("h2", "h4")]) == set()


def test_collective_model_fits_the_builders_and_names_a_slow_link_or_a_ring_clash():
    assert topopick.collective_misfit(fabric.leaf_spine(), ring=True) is None
    assert topopick.collective_misfit(fabric.fat_tree(k=4), ring=True) is None
    slow = topopick.collective_misfit(topofile.load(ASYMMETRIC), ring=False)
    assert slow.startswith("the switch link spine2-leaf2 runs at 10M, below the hosts' 20M")
    # Hosts of one leaf apart in host order: h1 -> h2 and h3 -> h4 both leave leaf1.
    interleaved = topofile.loads(
        "name: interleaved\ndefaults: {rate: 10M}\nnodes:\n"
        "  spine1: {kind: switch, role: spine}\n"
        "  leaf1: {kind: switch, role: leaf}\n  leaf2: {kind: switch, role: leaf}\n"
        "  h1: {kind: host}\n  h2: {kind: host}\n  h3: {kind: host}\n  h4: {kind: host}\n"
        "links:\n  - {a: leaf1, b: spine1}\n  - {a: leaf2, b: spine1}\n"
        "  - {a: h1, b: leaf1}\n  - {a: h2, b: leaf2}\n  - {a: h3, b: leaf1}\n"
        "  - {a: h4, b: leaf2}\n",
        "interleaved.yaml",
    )
    assert topopick.collective_misfit(interleaved, ring=False) is None
    assert topopick.collective_misfit(interleaved, ring=True) == (
        "the ring's h1->h2 and h3->h4 may hash onto leaf1->spine1; the model needs each "
        "switch's hosts next to each other in host order, one ring flow per link"
    )


# ---------------------------------------------------------------- the defaults, unchanged


def test_default_choices_are_what_the_scenarios_named_before():
    ls = fabric.leaf_spine()
    assert link_flap.flapping_link(ls) == ("leaf1", "spine1")
    hosts = fabric.hosts(ls)
    assert link_flap.tcp_flows(ls) == [(h, hosts[(i + 4) % 8]) for i, h in enumerate(hosts)]
    assert link_flap.probes(ls)[:3] == [("h1", "h3"), ("h1", "h5"), ("h1", "h7")]
    assert straggler.straggler_of(ls) == "h1"
    g = fabric.leaf_spine(leaves=3, hosts_per_leaf=3)
    assert incast.incast_hosts(g, 8) == ("h9", [f"h{i}" for i in range(1, 9)])
    one_spine = fabric.leaf_spine(leaves=2, spines=1, host_rate_bps=10_000_000)
    assert mixed_traffic.choose_flows(one_spine) == (("h1", "h3"), ("h2", "h4"), 10_000_000)
    assert resolve("pause-storm")["stuck_host"] == "h1"


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_takes_a_file_and_keeps_its_defaults(name):
    assert scenario.load(name).TOPOLOGY_FILE is True
    resolve(name)  # the defaults still validate


def test_shape_parameters_keep_their_refusals():
    assert "needs topology=fat_tree" in refusal("ecmp-vs-adaptive", "topology=leaf_spine")
    assert "no switch-to-switch uplink" in refusal("failover", "spines=1")
    assert "fewer than 3 switches with hosts" in refusal("link-flap", "leaves=2")
    assert "no two switches with two hosts" in refusal("mixed-traffic", "spines=2")


# ---------------------------------------------------------------- files


@pytest.mark.parametrize(
    "name, sets",
    [
        ("failover", ()),
        ("pause-storm", ()),
        ("incast", ("senders=3",)),
        ("ecn-thresholds", ("senders=3",)),
        ("straggler", ()),
        ("sharp-allreduce", ()),
    ],
)
def test_a_leaf_spine_file_is_taken(name, sets):
    params = resolve(name, f"topo={LEAF_SPINE_2X2}", *sets)
    assert not set(scenario.SHAPE_PARAMS) & set(params)
    assert params["rate_mbps"] == 20.0


def test_a_fat_tree_file_is_taken_where_its_kind_is_needed():
    params = resolve("ecmp-vs-adaptive", f"topo={FAT_TREE_K4}")
    assert hedera.fat_tree_misfit(scenario.build_fabric_graph(params)) is None
    for name in ("failover", "link-flap", "pause-storm", "incast", "straggler"):
        resolve(name, f"topo={FAT_TREE_K4}")
    g = topofile.load(FAT_TREE_K4)
    assert link_flap.flapping_link(g) == ("e1", "a1")


def test_pause_storm_stuck_host_and_incast_hosts_come_from_the_file(tmp_path):
    path = write(
        tmp_path,
        "name: named\ndefaults: {rate: 10M}\nnodes:\n"
        "  spine1: {kind: switch, role: spine}\n"
        "  leaf1: {kind: switch, role: leaf}\n  leaf2: {kind: switch, role: leaf}\n"
        "  gpu0: {kind: host}\n  gpu1: {kind: host}\n  gpu2: {kind: host}\n"
        "links:\n  - {a: leaf1, b: spine1}\n  - {a: leaf2, b: spine1}\n"
        "  - {a: gpu0, b: leaf1}\n  - {a: gpu1, b: leaf1}\n  - {a: gpu2, b: leaf2}\n",
    )
    assert resolve("pause-storm", f"topo={path}")["stuck_host"] == "gpu0"
    graph = scenario.build_fabric_graph(resolve("incast", f"topo={path}", "senders=2"))
    assert incast.incast_hosts(graph, 2) == ("gpu2", ["gpu0", "gpu1"])
    assert straggler.straggler_of(graph) == "gpu0"


def test_files_a_model_does_not_fit_are_refused_naming_what_they_lack(tmp_path):
    assert refusal("ecmp-vs-adaptive", f"topo={LEAF_SPINE_2X2}") == (
        f"ecmp-vs-adaptive: {LEAF_SPINE_2X2} is not a k-ary fat tree: its kind is 'custom', "
        "not fat_tree (write one with `emu topo export fat_tree k=4`)"
    )
    assert refusal("link-flap", f"topo={ASYMMETRIC}") == (
        f"link-flap: {ASYMMETRIC} has links at different rates (spine2-leaf2 runs at 10M, "
        "most links at 20M); the flow-level model needs one rate"
    )
    assert "fewer than 3 switches with hosts" in refusal("link-flap", f"topo={LEAF_SPINE_2X2}")
    assert refusal("straggler", f"topo={ASYMMETRIC}").startswith(
        f"straggler: {ASYMMETRIC}: the switch link spine2-leaf2 runs at 10M"
    )
    assert "sharp-allreduce: " in refusal("sharp-allreduce", f"topo={ASYMMETRIC}")
    assert "no two switches with two hosts" in refusal("mixed-traffic", f"topo={LEAF_SPINE_2X2}")
    # The incast's receiver is the storage host at 40M: its senders run at 20M.
    assert refusal("incast", f"topo={ASYMMETRIC}", "senders=4") == (
        f"incast: {ASYMMETRIC}: sender h1's link runs at 20M, receiver storage's at 40M; "
        "DCQCN's fluid model needs every sender at the receiver's rate"
    )
    single = write(
        tmp_path,
        "name: one\ndefaults: {rate: 10M}\nnodes:\n  s1: {kind: switch, role: leaf, hosts: 3}\n"
        "links: []\n",
    )
    assert "no other switch to pause" in refusal("pause-storm", f"topo={single}")
    assert "no switch-to-switch uplink" in refusal("failover", f"topo={single}")


def test_a_file_that_says_fat_tree_must_be_one(tmp_path):
    text = Path(FAT_TREE_K4).read_text()
    assert hedera.fat_tree_misfit(topofile.loads(text, "ft.yaml")) is None
    rewired = text.replace("  - {a: a8, b: c4}\n", "  - {a: a8, b: c3}\n", 1)
    rewired = rewired.replace("  - {a: a8, b: c3}\n  - {a: a8, b: c3}\n", "  - {a: a8, b: c3}\n")
    misfit = hedera.fat_tree_misfit(topofile.loads(rewired, "ft.yaml"))
    assert misfit.startswith("is not the k=4 fat tree its kind says: link a8-c4")
    slow = text.replace("  - {a: a8, b: c4}", "  - {a: a8, b: c4, rate: 10M}")
    assert "links at different rates" in hedera.fat_tree_misfit(topofile.loads(slow, "ft.yaml"))
    no_k = text.replace("params: {k: 4,", "params: {", 1)
    assert "has no even params.k" in hedera.fat_tree_misfit(topofile.loads(no_k, "ft.yaml"))


def test_first_hops_are_the_neighbours_on_a_shortest_path():
    ls = fabric.leaf_spine()
    assert topopick.first_hops(ls, "leaf1", "leaf4") == ["spine1", "spine2"]
    assert topopick.first_hops(ls, "spine1", "leaf4") == ["leaf4"]
    assert topopick.first_hops(ls, "leaf1", "leaf1") == []
    # Across both dimensions of a 3x3 torus, the wraparound links first.
    assert sorted(topopick.first_hops(fabric.torus(dims=(3, 3)), "t0_0", "t2_2")) == [
        "t0_2",
        "t2_0",
    ]


def test_first_hops_between_islands_are_none():
    rails = fabric.rail_optimized(nodes=2, gpus_per_node=2, spines=0)
    assert topopick.first_hops(rails, "rail1", "rail2") == []


def test_the_top_tier_is_the_highest_and_a_flat_fabric_has_none():
    assert topopick.top_tier(fabric.leaf_spine()) == ["spine1", "spine2"]
    assert topopick.top_tier(fabric.fat_tree(k=4)) == ["c1", "c2", "c3", "c4"]
    assert topopick.top_tier(fabric.torus(dims=(3, 3))) == []
    assert topopick.top_tier(fabric.dragonfly()) == []


@pytest.mark.parametrize(
    "graph, pair",
    [
        (fabric.leaf_spine(), ("h1", "h8")),  # the last host of the last leaf
        (fabric.fat_tree(k=4), ("h1", "h16")),  # in another pod
        (fabric.torus(dims=(3, 3)), ("h1", "h9")),
        (fabric.dragonfly(groups=3, routers_per_group=2), ("h1", "h6")),
        (fabric.rail_optimized(nodes=2, gpus_per_node=2, spines=2), ("h1", "h4")),
    ],
    ids=["leaf_spine", "fat_tree", "torus", "dragonfly", "rail_optimized"],
)
def test_the_pair_to_spread_has_two_first_hops(graph, pair):
    src, dst = topopick.spread_pair(graph)
    assert (src, dst) == pair
    assert len(topopick.first_hops(graph, graph.nodes[src]["leaf"], graph.nodes[dst]["leaf"])) > 1


def test_without_two_first_hops_the_pair_is_the_last_far_host():
    one_spine = fabric.leaf_spine(spines=1)
    assert topopick.spread_pair(one_spine) == ("h1", "h8")
    assert topopick.first_hops(one_spine, "leaf1", "leaf4") == ["spine1"]
