"""Scenario parameters: defaults, overrides, and errors that name the problem."""

import pytest

from emu import scenario
from emu.scenario import ScenarioError


def test_every_scenario_has_description_params_and_docstring():
    mods = scenario.available()
    assert "smoke" in mods
    for name, mod in mods.items():
        assert mod.DESCRIPTION and mod.__doc__, name
        for key, p in mod.PARAMS.items():
            p.validate(key, p.default)


@pytest.mark.parametrize("name", sorted(scenario.available()))
def test_every_scenario_s_defaults_pass_its_own_validation(name):
    # As `emu run NAME` checks them before any fabric starts: a default moved in
    # one place must still fit the others (incast's 8 senders need 9 hosts).
    params = scenario.resolve_params(scenario.load(name), [])
    assert params.keys() == scenario.load(name).PARAMS.keys()


def test_override_is_parsed_to_the_default_type():
    mod = scenario.load("smoke")
    params = scenario.resolve_params(
        mod, ["topology=fat_tree", "k=4", "rate_mbps=10", "link_down=off"]
    )
    assert params["topology"] == "fat_tree" and params["k"] == 4
    assert params["rate_mbps"] == 10.0 and params["link_down"] is False


@pytest.mark.parametrize(
    "item, message",
    [
        ("nope=1", "unknown parameter 'nope'"),
        ("k=four", "k='four': expected an integer"),
        ("topology=ring", "allowed values are leaf_spine, fat_tree"),
        ("spines=-1", "spines=-1: must be >= 0"),
        ("rate_mbps=5000", "must be in 0.1..1000 Mbit/s"),
        ("link_down=maybe", "expected true or false"),
        ("k", "expected KEY=VALUE"),
    ],
)
def test_bad_parameter_names_the_problem(item, message):
    with pytest.raises(ScenarioError, match=message):
        scenario.resolve_params(scenario.load("smoke"), [item])


def test_unknown_scenario_lists_the_known_ones():
    with pytest.raises(ScenarioError, match="available: .*smoke"):
        scenario.load("nosuch")


def test_odd_fat_tree_is_rejected():
    params = scenario.resolve_params(scenario.load("failover"), [])
    params.update(topology="fat_tree", k=3)
    with pytest.raises(ScenarioError, match="even k"):
        scenario.build_fabric_graph(params)
    # smoke builds its graph while resolving, so the error comes before any run.
    with pytest.raises(ScenarioError, match="even k"):
        scenario.resolve_params(scenario.load("smoke"), ["topology=fat_tree", "k=3"])


@pytest.mark.parametrize(
    "sets, message",
    [
        (["topology=rail_optimized", "spines=0"], "not connected .rail-only: give spines >= 1."),
        (["topology=leaf_spine", "spines=0"], "spines=0: must be >= 1"),
        (["topology=dragonfly", "groups=4"], "topology=dragonfly: global_links_per_router=1"),
        (["topology=torus", "dims=3"], "dims='3': expected 2 or 3 sizes"),
        (["topology=torus", "dims=3x1"], "topology=torus: dims=.3, 1.: must be 2 or 3 sizes"),
    ],
)
def test_smoke_rejects_a_shape_it_cannot_run_in_one_line(sets, message):
    with pytest.raises(ScenarioError, match=message):
        scenario.resolve_params(scenario.load("smoke"), sets)


@pytest.mark.parametrize("shape", scenario.TOPOLOGIES)
def test_every_topology_builds_from_the_shared_parameters(shape):
    params = scenario.resolve_params(scenario.load("smoke"), [f"topology={shape}"])
    assert scenario.build_fabric_graph(params).graph["kind"] == shape


def test_the_time_scale_follows_the_modelled_nic_at_any_rate():
    def scale(name, *sets):
        params = scenario.resolve_params(scenario.load(name), list(sets))
        return scenario.build_fabric_graph(params).graph["time_scale"]

    # modelled_gbps 0: the emulated rate itself, whatever rate_mbps is set to.
    assert scale("pause-storm") == 1.0
    assert scale("pause-storm", "rate_mbps=20") == 1.0
    # A modelled NIC: its speed over the link's, at the default or another rate.
    assert scale("incast") == pytest.approx(50.0)  # 1 Gbit/s over 20 Mbit/s
    assert scale("incast", "rate_mbps=10") == pytest.approx(100.0)
    assert scale("straggler") == pytest.approx(2500.0)  # 25 Gbit/s over 10 Mbit/s
    assert scale("smoke", "rate_mbps=20", "modelled_gbps=25") == pytest.approx(1250.0)
    assert scale("smoke", "modelled_gbps=25") == pytest.approx(25e9 / 40e6)  # smoke's 40 Mbit/s


def test_report_and_metrics_json(tmp_path):
    ctx = scenario.Context(name="x", params={"a": 1}, out_dir=tmp_path)
    ctx.table("t", ["c1", "c2"], [[1, 2.5]])
    ctx.check("good", True, 1, "1")
    ctx.check("bad", False, 0, "1")
    scenario.write_results(ctx)
    import json

    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["passed"] is False
    assert doc["checks"][1] == {
        "name": "bad",
        "passed": False,
        "value": 0,
        "expected": "1",
        "fidelity": False,
    }
    report = (tmp_path / "report.txt").read_text()
    assert "[FAIL] bad" in report and "[PASS] good" in report and "1/2 checks passed" in report


def test_a_comma_list_of_choices_names_the_parameter_and_what_it_may_hold():
    assert scenario.choices({"modes": "pfc,dcqcn"}, "modes", ("pfc", "dcqcn")) == ["pfc", "dcqcn"]
    for bad, what in (("pfc,nope", "unknown nope"), ("", "empty"), (",", "empty")):
        with pytest.raises(
            ScenarioError, match=rf"parameter modes=.*: {what}; a comma list of pfc, dcqcn$"
        ):
            scenario.choices({"modes": bad}, "modes", ("pfc", "dcqcn"))
    assert scenario.choices({"modes": "pfc, dcqcn"}, "modes", ("pfc", "dcqcn")) == ["pfc", "dcqcn"]


def test_every_scenario_with_fabric_parameters_gives_the_fabric_its_options():
    # pfc-deadlock declares its own fabric parameters without flow_control; a
    # KeyError there once stopped the scenario before its first fabric.
    keys = {"seed", "switch_processes", "host_nic_pacing"}
    for name, mod in scenario.available().items():
        if keys <= set(mod.PARAMS):
            params = {k: p.default for k, p in mod.PARAMS.items()}
            opts = scenario.fabric_options(params)
            assert opts["flow_control"] in ("pfc", "credit"), name


def test_adaptive_routing_is_a_fabric_parameter_checked_before_anything_runs():
    """`--set adaptive_routing=3` reaches `Fabric(adaptive_routing=...)`; a bad class stops
    the run in one line naming it, as the switches' extension would read it."""
    param = scenario.fabric_params()["adaptive_routing"]
    assert param.parse("adaptive_routing", "0,3") == "0,3"
    for bad, why in (("9", "class '9'"), ("3,x", "class 'x'"), ("none", "class 'none'")):
        with pytest.raises(ScenarioError, match=rf"parameter adaptive_routing='{bad}': {why}"):
            param.parse("adaptive_routing", bad)
    params = {k: p.default for k, p in scenario.fabric_params().items()}
    assert scenario.fabric_options(params)["adaptive_routing"] is None  # hashing, as before
    params["adaptive_routing"] = "3"
    assert scenario.fabric_options(params)["adaptive_routing"] == "3"


def test_dragonfly_routing_is_a_fabric_parameter_checked_before_anything_runs():
    param = scenario.fabric_params()["dragonfly_routing"]
    for good in ("minimal", "ugal", "ugal:3", "valiant"):
        assert param.parse("dragonfly_routing", good) == good
    with pytest.raises(ScenarioError, match=r"parameter dragonfly_routing='sideways': "):
        param.parse("dragonfly_routing", "sideways")
    params = {k: p.default for k, p in scenario.fabric_params().items()}
    assert scenario.fabric_options(params)["dragonfly_routing"] is None
    params["dragonfly_routing"] = "ugal"
    assert scenario.fabric_options(params)["dragonfly_routing"] == "ugal"
