"""The front door (issue 28): parameters discoverable, one validator, bad input never a traceback.

Every known bad input gives one line on stderr and exit status 2, whichever way
it comes in (`--set`, a topology file through `topo validate`, `topo show` or
`run --topo`, the Python API); the bounds and their words are emu.config's, the
same everywhere. Also `emu run NAME --help`, `emu list -v`, `emu ps`,
`emu --version` and the names that used to disagree. Nothing here builds a
fabric: `scenario.run` is replaced by a failure, so a validation that let bad
input through would fail the test instead of starting namespaces.
"""

from __future__ import annotations

import json
import os
import re
from importlib import metadata

import pytest

from emu import cli, config, fabric, registry, scenario, topofile
from emu.config import ConfigError
from emu.scenario import ScenarioError

GOOD_FILE = """\
name: two-leaves
defaults: {rate: 20M}
nodes:
  spine1: {kind: switch, role: spine}
  leaf1:  {kind: switch, role: leaf, hosts: 2}
  leaf2:  {kind: switch, role: leaf, hosts: 2}
links:
  - {a: leaf1, b: spine1}
  - {a: leaf2, b: spine1}
"""


@pytest.fixture(autouse=True)
def no_runs(monkeypatch):
    """Fail, rather than build a fabric, if validation ever lets a bad input through."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"validation let a run through: {args} {kwargs}")

    monkeypatch.setattr(scenario, "run", refuse)
    monkeypatch.setattr(cli, "need_root", lambda what: None)


def emu(capsys, *argv: str) -> tuple[int, str, str]:
    """`emu ARGV` in this process: (exit status, stdout, stderr)."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def one_line_usage_error(status: int, out: str, err: str) -> str:
    """Assert the contract for bad input and return the line."""
    assert status == cli.EXIT_USAGE, (status, out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("emu: "), err
    return lines[0]


# ---------------------------------------------------------------- the bad inputs


@pytest.mark.parametrize(
    "sets, words",
    [
        # Was a 21-line traceback (int(nan) in the builder).
        (["rate_mbps=nan"], "parameter rate_mbps=nan: expected a finite number"),
        # Passed validation: NaN compares false with both bounds.
        (["iperf_s=nan"], "parameter iperf_s=nan: expected a finite number"),
        # Named the builder's internal modelled_rate_bps.
        (["modelled_gbps=nan"], "parameter modelled_gbps=nan: expected a finite number"),
        (["rate_mbps=inf"], "parameter rate_mbps=inf"),
        (["rate_mbps=-5"], config.LINK_RATE_BPS.allowed),
        (["rate_mbps=1e400"], "expected a finite number"),
        (["ping_count=" + "9" * 300], "parameter ping_count=999"),
        # A key the chosen topology does not use was silently ignored.
        (["k=3"], "parameter k: topology=leaf_spine does not use it"),
        (["topology=fat_tree", "leaves=3"], "parameter leaves: topology=fat_tree does not use it"),
        (["topology=torus", "groups=4"], "parameter groups: topology=torus does not use it"),
        # A congestion control the kernel lacks would fail every host's sysctl.
        (
            ["host_tcp_congestion=vegas2"],
            "parameter host_tcp_congestion='vegas2': this kernel has no TCP congestion "
            "control named 'vegas2'",
        ),
    ],
)
def test_bad_set_is_one_line_and_exit_2(capsys, sets, words):
    argv = ["run", "smoke"] + [x for item in sets for x in ("--set", item)]
    line = one_line_usage_error(*emu(capsys, *argv))
    assert words in line
    assert "modelled_rate_bps" not in line


def test_k_on_incast_is_an_error_not_ignored(capsys):
    line = one_line_usage_error(*emu(capsys, "run", "incast", "--set", "k=4"))
    assert "parameter k: topology=leaf_spine does not use it (it shapes fat_tree)" in line


def test_a_shape_key_of_the_chosen_topology_is_taken():
    params = scenario.resolve_params(scenario.load("smoke"), ["topology=fat_tree", "k=2"])
    assert params["k"] == 2
    params = scenario.resolve_params(scenario.load("smoke"), ["topology=dragonfly", "groups=2"])
    assert params["groups"] == 2


ALIAS_LOOP = "a: &a [*a]\n"
BAD_FILES = {
    "alias loop": (ALIAS_LOOP, "nested deeper than"),
    "rate 1 bit/s": (GOOD_FILE.replace("rate: 20M", "rate: 1"), config.LINK_RATE_BPS.allowed),
    "rate 1T": (GOOD_FILE.replace("rate: 20M", "rate: 1T"), config.LINK_RATE_BPS.allowed),
    "delay 1000000 s": (
        GOOD_FILE.replace("{rate: 20M}", "{rate: 20M, delay: 1000000}"),
        config.LINK_DELAY_S.allowed,
    ),
    "hosts 250": (
        GOOD_FILE.replace("leaf, hosts: 2}\n  leaf2", "leaf, hosts: 250}\n  leaf2"),
        config.HOSTS_PER_SWITCH.allowed,
    ),
    "deep nesting": ("x: " + "[" * 5000, "nested too deep"),
    "billion laughs": (
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")
        ),
        "values (aliases expanded)",
    ),
    "bad date": ("name: !!timestamp 2001-13-45\n", "a value cannot be read"),
    "time_scale inf": ("time_scale: .inf\n" + GOOD_FILE, config.TIME_SCALE.allowed),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_the_same_one_line_from_validate_show_and_run(capsys, tmp_path, case):
    text, words = BAD_FILES[case]
    path = tmp_path / "topo.yaml"
    path.write_text(text)
    lines = set()
    for argv in (
        ("topo", "validate", str(path)),
        ("topo", "show", str(path)),
        ("run", "smoke", "--topo", str(path)),
        ("cli", "--topo", str(path)),
    ):
        status, out, err = emu(capsys, *argv)
        line = one_line_usage_error(status, out, err)
        assert words in line, (argv, line)
        assert out == "", argv  # the same stream: nothing on stdout
        lines.add(line)
    assert len(lines) == 1, lines  # the same words from every command
    with pytest.raises(topofile.TopoFileError) as raised:
        topofile.load(path)
    assert isinstance(raised.value, ConfigError)


def test_validate_reports_every_file_and_fails_if_one_is_bad(capsys, tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD_FILE)
    bad.write_text(ALIAS_LOOP)
    status, out, err = emu(capsys, "topo", "validate", str(good), str(bad))
    assert status == cli.EXIT_USAGE
    assert out.startswith(f"{good}: ok (3 switches, 4 hosts")
    assert err.strip().splitlines() == [err.strip()] and str(bad) in err


def test_a_file_at_the_bounds_loads():
    text = GOOD_FILE.replace("{rate: 20M}", "{rate: 1G, delay: 1s}").replace(
        "leaf, hosts: 2}\n  leaf2", "leaf, hosts: 32}\n  leaf2"
    )
    graph = topofile.loads("modelled_rate: 800G\n" + text)
    assert fabric.expected_counts(graph)["hosts"] == 34
    assert {d["rate_bps"] for _, _, d in graph.edges(data=True)} == {10**9}


def test_more_than_32_hosts_on_one_switch_by_hand_is_refused():
    hosts = "".join(f"  x{i}: {{kind: host}}\n" for i in range(31))
    links = "".join(f"  - {{a: x{i}, b: leaf1}}\n" for i in range(31))
    text = GOOD_FILE.replace("links:\n", "").replace("  - {a: leaf1", "links:\n  - {a: leaf1")
    text = text.replace("nodes:\n", "nodes:\n" + hosts) + links
    with pytest.raises(topofile.TopoFileError, match="33 hosts on one switch: must be in 1..32"):
        topofile.loads(text, "t.yaml")


# ---------------------------------------------------------------- one validator, one set of words


def test_the_rate_bound_says_the_same_from_set_file_and_api(capsys):
    allowed = re.escape(config.LINK_RATE_BPS.allowed)
    with pytest.raises(ScenarioError, match=allowed):
        scenario.resolve_params(scenario.load("smoke"), ["rate_mbps=0.01"])
    with pytest.raises(ScenarioError, match=allowed):
        scenario.resolve_params(scenario.load("smoke"), ["rate=1T"])
    with pytest.raises(topofile.TopoFileError, match=allowed):
        topofile.loads(GOOD_FILE.replace("20M", "1T"))
    with pytest.raises(ScenarioError, match=allowed):
        scenario.fabric_graph("leaf_spine", host_rate_bps=10**12)


def test_the_api_validator_names_the_topology_and_the_argument():
    with pytest.raises(ScenarioError, match="topology='fat-tree': allowed leaf_spine, fat_tree"):
        scenario.fabric_graph("fat-tree")
    with pytest.raises(ScenarioError, match="topology=fat_tree: unknown argument 'leaves'"):
        scenario.fabric_graph("fat_tree", leaves=3)
    with pytest.raises(ScenarioError, match="hosts_per_switch=250: must be in 1..32"):
        scenario.fabric_graph("torus", hosts_per_switch=250)
    with pytest.raises(ScenarioError, match=r"delay_s=nan: must be in 0..1 s"):
        scenario.fabric_graph("leaf_spine", delay_s=float("nan"))
    with pytest.raises(ScenarioError, match="modelled_rate_bps=nan"):
        scenario.fabric_graph("leaf_spine", modelled_rate_bps=float("nan"))
    with pytest.raises(ScenarioError, match="topology=dragonfly: global_links_per_router=1"):
        scenario.fabric_graph("dragonfly", groups=4)
    graph = scenario.fabric_graph("torus", dims=(2, 2), hosts_per_switch=2, rate_bps=10**7)
    assert fabric.expected_counts(graph)["hosts"] == 8


def test_the_api_reads_a_topology_file_and_refuses_shape_arguments_beside_it(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(GOOD_FILE)
    graph = scenario.fabric_graph(topo=str(path), modelled_rate_bps=25e9)
    assert graph.graph["time_scale"] == pytest.approx(1250.0)
    with pytest.raises(ScenarioError, match="the file decides the fabric's shape and rates"):
        scenario.fabric_graph(topo=str(path), leaves=2)


def test_every_error_of_a_validator_is_a_config_error():
    assert issubclass(ScenarioError, ConfigError)
    assert issubclass(topofile.TopoFileError, ConfigError)
    assert issubclass(topofile.TopoFileError, fabric.FabricSpecError)


# ---------------------------------------------------------------- parameters discoverable


def test_run_help_lists_every_parameter_with_default_range_and_help(capsys):
    status, out, err = emu(capsys, "run", "smoke", "--help")
    assert status == 0 and err == ""
    text = " ".join(out.split())
    for key, param in scenario.load("smoke").PARAMS.items():
        assert f" {key}=" in out, key
        assert " ".join(param.help.split()) in text, key
        if param.range_text():
            assert param.range_text() in text, key
    assert "rate_mbps=40 0.1..1000 Mbit/s (100K..1G bit/s)" in text
    assert "k=4 2..8; with topology=fat_tree" in text


def test_run_help_for_an_unknown_scenario_is_one_line(capsys):
    one_line_usage_error(*emu(capsys, "run", "nosuch", "--help"))


def test_list_verbose_lists_every_scenarios_parameters(capsys):
    status, out, _ = emu(capsys, "list", "-v")
    assert status == 0
    for name, module in scenario.available().items():
        section = out.split(f"\n{name} ", 1)[-1] if not out.startswith(name) else out
        for key in module.PARAMS:
            assert f"  {key}=" in section, (name, key)
    status, short, _ = emu(capsys, "list")
    assert "rate_mbps=" not in short and "smoke" in short


# ---------------------------------------------------------------- names made consistent


def test_the_underscore_scenario_name_works_with_a_deprecation_line(capsys):
    scenario._DEPRECATED_SAID.clear()
    assert scenario.load("pause_storm") is scenario.load("pause-storm")
    err = capsys.readouterr().err
    assert err == "emu: deprecated: scenario 'pause_storm' is spelled 'pause-storm' now\n"
    with pytest.raises(ScenarioError, match="unknown scenario 'pause_storms'"):
        scenario.load("pause_storms")


@pytest.mark.parametrize("old", ["hosts_per_switch", "hosts_per_router"])
def test_the_builders_names_for_hosts_per_leaf_are_deprecated_aliases(capsys, old):
    scenario._DEPRECATED_SAID.clear()
    params = scenario.resolve_params(scenario.load("smoke"), ["topology=torus", f"{old}=3"])
    assert params["hosts_per_leaf"] == 3
    assert capsys.readouterr().err.count("emu: deprecated: --set") == 1


@pytest.mark.parametrize(
    "item, key, value",
    [
        ("rate_mbps=20", "rate_mbps", 20.0),
        ("rate_mbps=20M", "rate_mbps", 20.0),
        ("rate_mbps=2.5m", "rate_mbps", 2.5),
        ("rate=20M", "rate_mbps", 20.0),
        ("rate_bps=500K", "rate_mbps", 0.5),
        ("rate=25e6", "rate_mbps", 25.0),
        ("modelled_gbps=25", "modelled_gbps", 25.0),
        ("modelled_gbps=400G", "modelled_gbps", 400.0),
        ("modelled_rate=25G", "modelled_gbps", 25.0),
    ],
)
def test_rates_take_the_topology_files_unit_spelling(item, key, value):
    params = scenario.resolve_params(scenario.load("smoke"), [item])
    assert params[key] == pytest.approx(value)


def test_a_rate_without_a_unit_under_the_files_name_is_bit_per_second():
    # `rate: 20` in a file is 20 bit/s; `--set rate=20` means the same, and is refused alike.
    with pytest.raises(ScenarioError, match=r"parameter rate='20': must be in 0.1..1000 Mbit/s"):
        scenario.resolve_params(scenario.load("smoke"), ["rate=20"])


def test_emu_cli_ctl_takes_every_word_that_emu_ctl_takes(capsys):
    cls = cli._make_emu_cli()

    class Fab:
        graph = fabric.leaf_spine(leaves=1, spines=1, hosts_per_leaf=1)
        calls = []

        def switch_call(self, name, cmd, **req):
            self.calls.append((name, cmd, req))
            return {"ok": True}

    shell = type("Shell", (), {"fab": Fab()})()
    cls.do_ctl(shell, "leaf1 ecn 3000 12000 0.5")
    cls.do_ctl(shell, "leaf1 loss 2 every 256")
    cls.do_ctl(shell, "leaf1 flows")
    assert Fab.calls == [
        ("leaf1", "set_ecn", {"kmin_bytes": 3000, "kmax_bytes": 12000, "pmax": 0.5}),
        ("leaf1", "set_port_loss", {"port_no": 2, "every": 256}),
        ("leaf1", "flows", {}),
    ]
    capsys.readouterr()
    cls.do_ctl(shell, "leaf9 flows")
    cls.do_ctl(shell, "leaf1")
    out = capsys.readouterr().out
    assert "ctl: unknown switch or host 'leaf9'" in out and "usage: ctl SWITCH|HOST" in out


# ---------------------------------------------------------------- emu ps, emu --version


def test_version_is_the_installed_packages(capsys):
    status, out, _ = emu(capsys, "--version")
    assert status == 0 and out.strip() == f"emu {metadata.version('emu')}"


@pytest.fixture
def empty_registry(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    return tmp_path


def test_ps_with_nothing_running_says_so(capsys, empty_registry):
    status, out, err = emu(capsys, "ps")
    assert status == 0 and err == ""
    assert out.startswith("no running fabric")
    status, out, _ = emu(capsys, "ps", "--json")
    assert status == 0 and json.loads(out) == []


def test_ps_lists_a_running_fabric_its_run_id_switches_and_hosts(capsys, empty_registry):
    import networkx as nx

    from emu.net import GRAPH_FILE

    run = registry.Run.create(log_dir=str(empty_registry / "logs"), label="unit")
    try:
        graph = fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1, name="tiny")
        (registry.REGISTRY_DIR / run.run_id / GRAPH_FILE).write_text(
            json.dumps(nx.node_link_data(graph))
        )
        (registry.REGISTRY_DIR / run.run_id / "leaf1.sock").touch()  # one switch "up"
        status, out, _ = emu(capsys, "ps")
        assert status == 0
        assert out.startswith(
            f"{run.run_id}: fabric tiny, 3 switches, 2 hosts; owner pid {os.getpid()}"
        )
        assert "leaf1   switch  leaf   dpid 0x10001  up" in out
        assert "h1      host    host   10.0.1.1      -" in out
        status, out, _ = emu(capsys, "ps", "--json")
        (doc,) = json.loads(out)
        assert doc["run"] == run.run_id and (doc["switches"], doc["hosts"]) == (3, 2)
        assert {n["name"]: n["up"] for n in doc["nodes"]}["leaf1"] is True
        status, out, _ = emu(capsys, "ps", "--run", "other")
        assert out.startswith("no running fabric with run id 'other'")
    finally:
        run.teardown()
