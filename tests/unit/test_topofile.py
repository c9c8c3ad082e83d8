"""Topology files (emu/topofile.py): every error class as its one line, round trips, the CLI.

No root: a file is read into a graph and checked, never started. That a
valid file runs a scenario on real packets is tests/integration/test_topology_file.py.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import types
from pathlib import Path

import jsonschema
import pytest
import yaml

import emu.topofile
from emu import cli, fabric, scenario, topofile, topowrite
from emu.topofile import TopoFileError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "topologies").glob("*.yaml"))

# Line numbers below count from this text's first line.
BASE = """\
name: t
defaults: {rate: 20M}
nodes:
  spine1: {kind: switch, role: spine}
  leaf1: {kind: switch, role: leaf, hosts: 2}
  leaf2: {kind: switch, role: leaf, hosts: 2}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
"""
STORAGE = "  storage: {kind: host}\nlinks:"

# (test id, the file's text, the exact one-line error). Each is one rule.
ERRORS = [
    (
        "unknown node in a link",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine9}"),
        "topo.yaml:9: links[1].b: unknown node 'spine9'",
    ),
    (
        "bad rate",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine1, rate: 10Gbps}"),
        "topo.yaml:9: links[1].rate: '10Gbps' is not a rate (e.g. 100M, 10G, 25e9)",
    ),
    (
        "zero rate",
        BASE.replace("defaults: {rate: 20M}", "defaults: {rate: 0}"),
        "topo.yaml:2: defaults.rate: 0 is not a rate (e.g. 100M, 10G, 25e9)",
    ),
    (
        "fractional bit rate",
        BASE.replace("defaults: {rate: 20M}", "defaults: {rate: 0.5}"),
        "topo.yaml:2: defaults.rate: 0.5 is not a rate (e.g. 100M, 10G, 25e9)",
    ),
    (
        "bad delay",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine1, delay: 3 parsecs}"),
        "topo.yaml:9: links[1].delay: '3 parsecs' is not a delay (e.g. 0, 100us, 1ms, 0.002)",
    ),
    (
        "duplicate node",
        BASE.replace("links:", "  leaf1: {kind: switch, role: leaf}\nlinks:"),
        "topo.yaml:7: nodes.leaf1: duplicate node (first at line 5)",
    ),
    (
        "duplicate key in a node",
        BASE.replace("role: spine}", "role: spine, kind: host}"),
        "topo.yaml:4: nodes.spine1.kind: duplicate key (first at line 4)",
    ),
    (
        "missing field in a node",
        BASE.replace("spine1: {kind: switch, role: spine}", "spine1: {role: spine}"),
        "topo.yaml:4: nodes.spine1.kind: missing field",
    ),
    (
        "missing end of a link",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2}"),
        "topo.yaml:9: links[1].b: missing field",
    ),
    (
        "missing top-level field",
        BASE.replace("name: t\n", ""),
        "topo.yaml:1: name: missing field",
    ),
    (
        "wrong kind",
        BASE.replace("spine1: {kind: switch", "spine1: {kind: swich"),
        "topo.yaml:4: nodes.spine1.kind: 'swich' is not one of switch, host",
    ),
    (
        "a host role on a switch",
        BASE.replace("role: spine}", "role: host}"),
        "topo.yaml:4: nodes.spine1.role: 'host' is not a switch role; "
        "allowed: leaf, spine, edge, agg, core, switch, router, torus, nvswitch",
    ),
    (
        "unknown field",
        BASE.replace("role: spine}", "role: spine, colour: red}"),
        "topo.yaml:4: nodes.spine1.colour: unknown field; "
        "allowed: coords, dpid, group, host_rate, hosts, ip, kind, mac, node, nvlink_ip, nvlink_mac, "
        "pod, rail, role",
    ),
    (
        "a switch field on a host",
        BASE.replace("links:", "  storage: {kind: host, hosts: 2}\nlinks:")
        + "  - {a: storage, b: leaf1}\n",
        "topo.yaml:7: nodes.storage.hosts: a host has no hosts",
    ),
    (
        "bad node name",
        BASE.replace("leaf2", "leaf-2"),
        "topo.yaml:6: nodes.leaf-2: 'leaf-2' is not a node name (a letter, then up to 9 "
        "letters, digits or _: interface names <node>-eth<N> must fit Linux's 15 characters)",
    ),
    (
        "bad YAML syntax",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine1"),
        "topo.yaml:10: YAML syntax: expected ',' or '}', but got '<stream end>' (column 1), "
        "while parsing a flow mapping that starts at line 9",
    ),
    (
        "bad indentation",
        BASE.replace("  leaf1: {kind", "   leaf1: {kind"),
        "topo.yaml:5: YAML syntax: expected <block end>, but found '<block mapping start>' "
        "(column 4), while parsing a block mapping that starts at line 4",
    ),
    ("empty file", "", "topo.yaml:1: the file is empty; expected name, nodes and links"),
    ("not a mapping", "- a\n- b\n", 'topo.yaml:1: top level: ["a", "b"] is not a mapping'),
    (
        "a host not attached",
        BASE.replace("links:", STORAGE),
        "topo.yaml:7: nodes.storage: host is not attached: no link names it",
    ),
    (
        "a host with two links",
        BASE.replace("links:", STORAGE)
        + "  - {a: storage, b: leaf1}\n  - {a: storage, b: leaf2}\n",
        "topo.yaml:12: links[3]: host 'storage' already has its one link (links[2], line 11)",
    ),
    (
        "a link between two hosts",
        BASE.replace("links:", "  s1: {kind: host}\n  s2: {kind: host}\nlinks:")
        + "  - {a: s1, b: s2}\n",
        "topo.yaml:12: links[2].b: links two hosts (s1, s2); a host attaches to a switch",
    ),
    (
        "a link to itself",
        BASE + "  - {a: leaf1, b: leaf1}\n",
        "topo.yaml:10: links[2].b: a link from 'leaf1' to itself",
    ),
    (
        "a second link between the same nodes",
        BASE + "  - {a: spine1, b: leaf1}\n",
        "topo.yaml:10: links[2]: a second link between spine1 and leaf1 (first: links[0], line 8)",
    ),
    (
        "a switch with no links",
        BASE.replace("links:", "  spine2: {kind: switch, role: spine}\nlinks:"),
        "topo.yaml:7: nodes.spine2: switch has no links",
    ),
    (
        "a fabric in two pieces",
        BASE.replace("  - {a: leaf2, b: spine1}\n", "").replace(
            "links:", "  spine2: {kind: switch, role: spine}\nlinks:"
        )
        + "  - {a: leaf2, b: spine2}\n",
        "topo.yaml:8: links: the fabric is not connected: leaf2, h3, h4, spine2 cannot reach spine1",
    ),
    (
        "a link without a rate",
        BASE.replace("defaults: {rate: 20M}\n", "").replace(
            "hosts: 2}", "hosts: 2, host_rate: 10M}"
        ),
        "topo.yaml:7: links[0]: missing rate (give one here or in defaults.rate)",
    ),
    (
        "an IP outside the fabric's subnet",
        BASE.replace("links:", "  storage: {kind: host, ip: 192.168.0.1}\nlinks:")
        + "  - {a: storage, b: leaf1}\n",
        "topo.yaml:7: nodes.storage.ip: '192.168.0.1' is not in 10.0.0.0/8",
    ),
    (
        "not an IP",
        BASE.replace("links:", "  storage: {kind: host, ip: 10.0.300.1}\nlinks:")
        + "  - {a: storage, b: leaf1}\n",
        "topo.yaml:7: nodes.storage.ip: '10.0.300.1' is not an IPv4 address",
    ),
    (
        "an IP a generated host has",
        BASE.replace("links:", "  storage: {kind: host, ip: 10.0.1.1}\nlinks:")
        + "  - {a: storage, b: leaf1}\n",
        "topo.yaml:7: nodes.storage.ip: ip '10.0.1.1' already used by h1 (line 5)",
    ),
    (
        "a dpid the default of another switch has",
        BASE.replace("role: spine}", "role: spine, dpid: 0x10001}"),
        "topo.yaml:5: nodes.leaf1: dpid 65537 already used by spine1 (line 4)",
    ),
    (
        "a port skipped",
        BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine1, ports: [5, 2]}"),
        "topo.yaml:9: links[1].ports: leaf2's ports must be 1..3 with none skipped; "
        "port 3 is missing",
    ),
    (
        "a port taken twice",
        BASE.replace("b: spine1}", "b: spine1, ports: [3, 1]}"),
        "topo.yaml:9: links[1].ports[1]: port 1 of spine1 already used by links[0]",
    ),
    (
        "a generated host named like a declared one",
        BASE.replace("links:", "  h3: {kind: host}\nlinks:") + "  - {a: h3, b: leaf1}\n",
        "topo.yaml:6: nodes.leaf2.hosts: generated host 'h3' clashes with node 'h3' (line 7)",
    ),
    (
        "modelled_rate and time_scale both",
        "modelled_rate: 25G\ntime_scale: 1250\n" + BASE,
        "topo.yaml:1: modelled_rate: give modelled_rate or time_scale, not both",
    ),
]


@pytest.mark.parametrize("text, expected", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_each_error_is_one_line_naming_file_line_and_field(text, expected):
    with pytest.raises(TopoFileError) as info:
        topofile.loads(text, "topo.yaml")
    assert str(info.value) == expected
    assert "\n" not in str(info.value)


def test_the_base_file_of_the_error_cases_is_valid():
    G = topofile.loads(BASE, "topo.yaml")
    assert fabric.expected_counts(G) == {
        "switches": 3,
        "hosts": 4,
        "host_addresses": 4,
        "switch_links": 2,
    }


def test_error_carries_its_parts():
    with pytest.raises(TopoFileError) as info:
        topofile.loads(BASE.replace("b: spine1}\n", "b: spine9}\n"), "t.yaml")
    err = info.value
    assert (err.filename, err.line, err.field) == ("t.yaml", 8, "links[0].b")
    assert isinstance(err, fabric.FabricSpecError)  # the CLI's one-line handler catches it


def test_unreadable_file_names_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(TopoFileError, match=rf"^{missing}: cannot read: .*No such file"):
        topofile.load(missing)


# ---------------------------------------------------------------- what loading derives


def test_a_hand_made_file_gets_the_builders_attributes():
    G = topofile.load(ROOT / "topologies" / "asymmetric.yaml")
    fabric.validate(G)
    assert G.graph["kind"] == "custom" and G.graph["time_scale"] == 1.0
    assert fabric.hosts(G) == ["h1", "h2", "h3", "h4", "storage"]
    assert G.nodes["h3"] == {
        "kind": "host",
        "role": "host",
        "ip": "10.0.2.1",
        "prefixlen": 8,
        "mac": "02:00:00:00:00:03",
        "leaf": "leaf2",
        "rail": 1,
    }
    assert G.nodes["storage"]["ip"] == "10.0.9.1" and G.nodes["storage"]["leaf"] == "leaf3"
    assert G.nodes["spine2"]["dpid"] == 0x20002 and G.nodes["leaf3"]["tier"] == 0
    assert G.edges["leaf2", "spine2"]["rate_bps"] == 10_000_000
    assert G.edges["leaf3", "spine2"]["delay_s"] == 0.0001
    assert G.edges["storage", "leaf3"]["rate_bps"] == 40_000_000
    # Downward-facing ports first: leaf3's host on 1, its uplink on 2.
    assert fabric.port_map(G, "leaf3") == {
        1: ("leaf3-eth1", "storage", 0, 40_000_000),
        2: ("leaf3-eth2", "spine2", 3, 20_000_000),
    }


def test_modelled_rate_sets_the_time_scale_over_the_host_links():
    G = topofile.loads("modelled_rate: 25G\n" + BASE, "t.yaml")
    assert G.graph["time_scale"] == 1250.0


def test_explicit_ports_are_kept():
    text = BASE.replace("{a: leaf2, b: spine1}", "{a: leaf2, b: spine1, ports: [3, 2]}")
    text = text.replace("{a: leaf1, b: spine1}", "{a: leaf1, b: spine1, ports: [3, 1]}")
    G = topofile.loads(text, "t.yaml")
    assert G.edges["leaf2", "spine1"]["ports"] == {"leaf2": 3, "spine1": 2}


@pytest.mark.parametrize(
    "text, bps",
    [("100M", 100_000_000), ("2.5G", 2_500_000_000), ("25e9", 25_000_000_000), (1e6, 1_000_000)],
)
def test_rates(text, bps):
    assert topofile.parse_rate(text) == bps
    assert topofile.parse_rate(topofile.format_rate(bps)) == bps


def test_doctests():
    cwd = os.getcwd()
    os.chdir(ROOT)  # load()'s example reads topologies/ from the repository's top
    try:
        result = doctest.testmod(emu.topofile)
    finally:
        os.chdir(cwd)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- round trips

BUILDERS = {
    "leaf_spine default": lambda: fabric.leaf_spine(),
    "leaf_spine 2x2x2": lambda: fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2),
    "leaf_spine oversubscribed, delayed, modelled": lambda: fabric.leaf_spine(
        leaves=3,
        spines=2,
        hosts_per_leaf=3,
        host_rate_bps=10_000_000,
        oversubscription=3.0,
        delay_s=0.001,
        modelled_rate_bps=25e9,
    ),
    "fat_tree k=2": lambda: fabric.fat_tree(k=2),
    "fat_tree k=4": lambda: fabric.fat_tree(k=4),
    "fat_tree k=4 per-tier rates": lambda: fabric.fat_tree(
        k=4, rates={"host": 10_000_000, "agg-core": 40_000_000}
    ),
    "fat_tree k=6": lambda: fabric.fat_tree(k=6),
    "single_switch": lambda: fabric.single_switch(hosts=5),
}


@pytest.mark.parametrize("make", BUILDERS.values(), ids=list(BUILDERS))
def test_export_then_load_gives_the_builders_graph(make):
    G = make()
    text = topowrite.dump(G)
    H = topofile.loads(text, "exported.yaml")
    assert topofile.graphs_equal(G, H)
    assert list(H.nodes) == list(G.nodes)  # hosts(G) order is what scenarios pick from
    # The defaults reproduce every builder's numbering: no file needs ports.
    assert "ports:" not in text


# The GPU-cluster shapes: a dragonfly's and a torus's ports have no up and down,
# so their files name the ports the default numbering would not give.
SHAPES = {
    "dragonfly 3g 2a": lambda: fabric.dragonfly(),
    "dragonfly 3g 2a 2p 2h, per-tier rates": lambda: fabric.dragonfly(
        groups=3,
        routers_per_group=2,
        hosts_per_router=2,
        global_links_per_router=2,
        rates={"global": 10_000_000},
    ),
    "dragonfly 5g 4a 2h": lambda: fabric.dragonfly(
        groups=5, routers_per_group=4, global_links_per_router=2
    ),
    "torus 3x3": lambda: fabric.torus(dims=(3, 3)),
    "torus 2x2x2, 2 hosts, modelled": lambda: fabric.torus(
        dims=(2, 2, 2), hosts_per_switch=2, modelled_rate_bps=400e9
    ),
    "torus 4x3x2": lambda: fabric.torus(dims=(4, 3, 2)),
    "rail_optimized 2n 2g 2s": lambda: fabric.rail_optimized(),
    "rail_optimized 2n 2g 2s, no NVLink": lambda: fabric.rail_optimized(nvlink_domain=False),
    "rail_optimized 4n 8g 4s, delayed": lambda: fabric.rail_optimized(
        nodes=4, gpus_per_node=8, spines=4, delay_s=0.0005
    ),
    "rail-only 4n 2g": lambda: fabric.rail_optimized(nodes=4, gpus_per_node=2, spines=0),
}


@pytest.mark.parametrize("make", SHAPES.values(), ids=list(SHAPES))
def test_export_then_load_gives_the_gpu_shapes_graph(make):
    G = make()
    H = topofile.loads(topowrite.dump(G), "exported.yaml")
    assert topofile.graphs_equal(G, H)
    assert list(H.nodes) == list(G.nodes)


def test_a_dragonfly_files_router_links_are_local_or_global_by_group():
    text = topowrite.dump(fabric.dragonfly())
    G = topofile.loads(text.replace("kind: dragonfly", "kind: custom"))
    assert G.edges["g1r1", "g1r2"]["tier"] == "local"
    assert G.edges["g1r1", "g2r2"]["tier"] == "global"


def test_only_a_rail_only_fabric_may_be_islands():
    text = topowrite.dump(
        fabric.rail_optimized(nodes=2, gpus_per_node=2, spines=0, nvlink_domain=False)
    )
    with pytest.raises(TopoFileError, match="the fabric is not connected"):
        topofile.loads(text.replace("kind: rail_optimized", "kind: custom"), "topo.yaml")


def test_graphs_equal_sees_one_changed_attribute():
    G, H = fabric.leaf_spine(), fabric.leaf_spine()
    H.edges["leaf1", "spine1"]["rate_bps"] += 1
    assert not topofile.graphs_equal(G, H)


def test_a_hand_made_file_round_trips():
    G = topofile.load(ROOT / "topologies" / "asymmetric.yaml")
    assert topofile.graphs_equal(topofile.loads(topowrite.dump(G), "again.yaml"), G)


def test_export_uses_the_hosts_shorthand_for_a_leaf_spine():
    text = topowrite.dump(fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2))
    doc = yaml.safe_load(text)
    assert doc["nodes"]["leaf1"] == {"kind": "switch", "role": "leaf", "hosts": 2}
    assert len(doc["links"]) == 4 and doc["defaults"] == {"rate": "20M"}


# ---------------------------------------------------------------- schema and examples


def test_examples_exist_and_load():
    assert {p.name for p in EXAMPLES} >= {
        "leaf-spine-2x2.yaml",
        "fat-tree-k4.yaml",
        "asymmetric.yaml",
    }
    for path in EXAMPLES:
        fabric.validate(topofile.load(path))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_point_editors_at_the_schema_and_pass_it(path):
    first = path.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../emu/data/topology.schema.json"
    assert (path.parent / first.split("=", 1)[1]).resolve() == topofile.schema_path().resolve()
    jsonschema.Draft7Validator(topofile.schema()).validate(yaml.safe_load(path.read_text()))


def test_fat_tree_example_is_the_builders_fat_tree():
    G = topofile.load(ROOT / "topologies" / "fat-tree-k4.yaml")
    assert topofile.graphs_equal(G, fabric.fat_tree(k=4))


def test_schema_is_a_valid_draft7_schema_shipped_as_package_data():
    jsonschema.Draft7Validator.check_schema(topofile.schema())
    assert topofile.schema_path().is_file()
    setup = (ROOT / "setup.cfg").read_text()
    assert "emu = data/*.json" in setup and "jsonschema" in setup and "PyYAML" in setup


# ---------------------------------------------------------------- scenario parameters


def test_topo_parameter_replaces_the_shape_and_sets_the_rate():
    module = scenario.load("smoke")
    path = str(ROOT / "topologies" / "asymmetric.yaml")
    params = scenario.resolve_params(module, [f"topo={path}"])
    assert not set(scenario.SHAPE_PARAMS) & set(params)
    assert params["rate_mbps"] == 20.0  # the slowest host link
    G = scenario.build_fabric_graph(params)
    assert topofile.graphs_equal(G, topofile.load(path))


def test_topo_parameter_with_modelled_rate_sets_the_time_scale():
    module = scenario.load("smoke")
    path = str(ROOT / "topologies" / "leaf-spine-2x2.yaml")
    params = scenario.resolve_params(module, [f"topo={path}", "modelled_gbps=25"])
    assert scenario.build_fabric_graph(params).graph["time_scale"] == 1250.0


def test_topo_parameter_refuses_a_shape_parameter_too():
    module = scenario.load("smoke")
    with pytest.raises(scenario.ScenarioError, match=r"^parameter leaves: the topology file"):
        scenario.resolve_params(module, ["topo=topologies/leaf-spine-2x2.yaml", "leaves=3"])


def test_a_scenario_that_assumes_its_shape_refuses_a_file():
    # Every scenario in scenarios/ takes a file now (tests/unit/test_topopick.py); one
    # without TOPOLOGY_FILE is refused in one line that names those that do.
    shaped = types.SimpleNamespace(PARAMS=scenario.load("smoke").PARAMS)
    with pytest.raises(
        scenario.ScenarioError,
        match=r"assume the fabric its own parameters build; a topology file runs with: "
        r"emu cli, ecmp-vs-adaptive, ecn-thresholds, failover, .*, smoke, straggler$",
    ):
        scenario.resolve_params(shaped, ["topo=topologies/leaf-spine-2x2.yaml"])


# ---------------------------------------------------------------- the CLI


def test_cli_validate_ok(capsys):
    paths = [str(p) for p in EXAMPLES]
    assert cli.main(["topo", "validate", *paths]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        f"{ROOT / 'topologies' / 'fat-tree-k4.yaml'}: ok (20 switches, 16 hosts, 32 switch links)"
        in out
    )
    assert len(out) == len(paths)


def test_cli_validate_a_typo_is_one_line_on_stderr_and_exit_2(tmp_path, capsys):
    # As `emu topo show` and `emu run --topo` report the same file (issue 28).
    good = ROOT / "topologies" / "leaf-spine-2x2.yaml"
    bad = tmp_path / "typo.yaml"
    bad.write_text(good.read_text().replace("{a: leaf2, b: spine2}", "{a: leaf2, b: spine3}"))
    assert cli.main(["topo", "validate", str(bad), str(good)]) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{good}: ok (4 switches, 4 hosts, 4 switch links)"]
    assert err == f"emu: {bad}:23: links[3].b: unknown node 'spine3'\n"
    assert cli.main(["topo", "show", str(bad)]) == cli.EXIT_USAGE
    assert capsys.readouterr() == ("", err)


def test_cli_run_with_a_bad_file_is_one_line_before_any_root_work(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE.replace("defaults: {rate: 20M}", "defaults: {rate: 10Gbps}"))
    assert cli.main(["run", "smoke", "--topo", str(bad), "--out", str(tmp_path)]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == (
        f"emu: {bad}:2: defaults.rate: '10Gbps' is not a rate (e.g. 100M, 10G, 25e9)\n"
    )


def test_cli_show_prints_and_draws(tmp_path, capsys):
    png, svg = tmp_path / "fabric.png", tmp_path / "fabric.svg"
    path = str(ROOT / "topologies" / "asymmetric.yaml")
    assert cli.main(["topo", "show", path, "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "fabric asymmetric (custom): 5 switches, 5 hosts, 5 switch links, time scale 1\n"
    )
    assert "storage  10.0.9.1  02:00:00:00:00:05   leaf3      40" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["topo", "show", path, "--out", str(svg)]) == 0
    assert "<svg" in svg.read_text()


def test_cli_show_refuses_other_picture_formats(tmp_path, capsys):
    path = str(ROOT / "topologies" / "asymmetric.yaml")
    assert cli.main(["topo", "show", path, "--out", str(tmp_path / "x.jpg")]) == cli.EXIT_USAGE
    assert "draw to a .png or an .svg file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, make",
    [
        (["fat_tree", "k=4"], lambda: fabric.fat_tree(k=4)),
        (
            ["leaf_spine", "leaves=2", "spines=2", "hosts_per_leaf=2", "host_rate_bps=10M"],
            lambda: fabric.leaf_spine(
                leaves=2, spines=2, hosts_per_leaf=2, host_rate_bps=10_000_000
            ),
        ),
        (["single_switch", "hosts=3"], lambda: fabric.single_switch(hosts=3)),
        (["torus", "dims=2x2x2"], lambda: fabric.torus(dims=(2, 2, 2))),
        (
            ["dragonfly", "groups=3", "global_links_per_router=2"],
            lambda: fabric.dragonfly(groups=3, global_links_per_router=2),
        ),
        (
            ["rail_optimized", "nodes=4", "spines=0"],
            lambda: fabric.rail_optimized(nodes=4, spines=0),
        ),
    ],
    ids=["fat_tree", "leaf_spine", "single_switch", "torus", "dragonfly", "rail_optimized"],
)
def test_cli_export_writes_what_loads_back(argv, make, tmp_path, capsys):
    out = tmp_path / "sub" / "exported.yaml"
    out.parent.mkdir()
    assert cli.main(["topo", "export", *argv, "--out", str(out)]) == 0
    assert topofile.graphs_equal(topofile.load(out), make())
    ref = out.read_text().splitlines()[0].split("=", 1)[1]
    assert (out.parent / ref).resolve() == topofile.schema_path().resolve()


def test_cli_export_to_stdout(capsys):
    assert cli.main(["topo", "export", "leaf_spine", "leaves=2"]) == 0
    G = topofile.loads(capsys.readouterr().out, "stdout")
    assert topofile.graphs_equal(G, fabric.leaf_spine(leaves=2))


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["mesh", "k=4"],
            "emu: unknown builder 'mesh'; available: leaf_spine, fat_tree, single_switch, dragonfly, torus, rail_optimized",
        ),
        (
            ["fat_tree", "leaves=4"],
            "emu: fat_tree: unknown parameter 'leaves'; allowed: k, rate_bps, delay_s, "
            "time_scale, modelled_rate_bps, name",
        ),
        (["fat_tree", "k=3"], "emu: k=3: must be even (k pods of k/2 edge and k/2 agg switches)"),
        (["fat_tree", "k"], "emu: 'k': expected KEY=VALUE"),
    ],
)
def test_cli_export_bad_input_is_one_line(argv, message, capsys):
    assert cli.main(["topo", "export", *argv]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == message + "\n"


def test_cli_schema_prints_the_shipped_schema(capsys):
    assert cli.main(["topo", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == topofile.schema()


# ------------------------------------------------------------ NVLink domains in a file

GPUS = """\
name: gpus
defaults: {rate: 20M}
nodes:
  leaf1: {kind: switch, role: leaf, hosts: 2}
  nv1:   {kind: switch, role: nvswitch}
links:
  - {a: h1, b: nv1, rate: 180M}
  - {a: h2, b: nv1, rate: 180M}
"""


def test_a_hand_made_nvlink_domain_gets_the_builders_addresses_and_ports():
    G = topofile.loads(GPUS, "gpus.yaml")
    assert G.nodes["nv1"]["role"] == "nvswitch" and G.nodes["nv1"]["dpid"] == 1
    assert [(p.kind, p.intf, p.ip, p.mac) for p in fabric.host_ports(G, "h2")] == [
        ("nic", "h2-eth0", "10.0.1.2", "02:00:00:00:00:02"),
        ("nvlink", "h2-eth1", "10.255.1.2", "02:00:01:00:00:02"),
    ]
    assert G.edges["h2", "nv1"]["tier"] == "nvlink" and G.edges["h2", "nv1"]["ports"]["nv1"] == 2
    assert topofile.graphs_equal(topofile.loads(topowrite.dump(G), "again.yaml"), G)


NVLINK_ERRORS = [
    (
        "an nvswitch on a leaf",
        GPUS + "  - {a: leaf1, b: nv1}\n",
        "gpus.yaml:9: links[2]: links an nvswitch to 'leaf1'; an nvswitch links only GPUs "
        "(hosts), on their second port",
    ),
    (
        "two NVLink links",
        GPUS.replace("  nv1:", "  nv2:   {kind: switch, role: nvswitch}\n  nv1:")
        + "  - {a: h1, b: nv2}\n",
        "gpus.yaml:10: links[2]: host 'h1' already has its NVLink link (links[0], line 8)",
    ),
    (
        "a GPU on an nvswitch only",
        GPUS.replace("  nv1:", "  g1:    {kind: host}\n  nv1:") + "  - {a: g1, b: nv1}\n",
        "gpus.yaml:5: nodes.g1: host is not attached: no link names it but its NVLink link "
        "(a host needs a network switch)",
    ),
    (
        "an NVLink address without an NVLink link",
        BASE.replace("links:", "  s: {kind: host, nvlink_ip: 10.255.1.9}\nlinks:")
        + "  - {a: s, b: leaf1}\n",
        "topo.yaml:7: nodes.s.nvlink_ip: a host without an nvswitch link",
    ),
    (
        "an NVLink address outside 10.255.0.0/16",
        GPUS.replace("  nv1:", "  g1:    {kind: host, nvlink_ip: 10.0.9.9}\n  nv1:")
        + "  - {a: g1, b: leaf1}\n  - {a: g1, b: nv1}\n",
        "gpus.yaml:5: nodes.g1.nvlink_ip: '10.0.9.9' is not in 10.255.0.0/16",
    ),
]


@pytest.mark.parametrize(
    "text, expected", [e[1:] for e in NVLINK_ERRORS], ids=[e[0] for e in NVLINK_ERRORS]
)
def test_each_nvlink_error_is_one_line(text, expected):
    name = "topo.yaml" if text.startswith("name: t\n") else "gpus.yaml"
    with pytest.raises(TopoFileError) as info:
        topofile.loads(text, name)
    assert str(info.value) == expected


def test_a_gpu_whose_nvlink_link_comes_first_is_told_its_nic_must_be_port_0():
    text = GPUS.replace("  nv1:", "  g1:    {kind: host}\n  nv1:") + (
        "  - {a: g1, b: nv1}\n  - {a: g1, b: leaf1}\n"
    )
    with pytest.raises(TopoFileError, match="host g1: its link to leaf=leaf1 must be its port 0"):
        topofile.loads(text, "gpus.yaml")


def test_topo_show_lists_the_gpus_nvlink_ports(tmp_path, capsys):
    path = tmp_path / "rail.yaml"
    path.write_text(topowrite.dump(fabric.rail_optimized()))
    assert cli.main(["topo", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NVLink ports" in out
    assert re.search(r"h3\s+10\.255\.2\.1\s+02:00:01:00:00:03\s+nvsw2\s+180", out)
    assert cli.main(["topo", "show", "topologies/leaf-spine-2x2.yaml"]) == 0
    assert "NVLink ports" not in capsys.readouterr().out
