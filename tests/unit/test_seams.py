"""The seams between emu's parts, read from the source with `ast`.

- No controller module reads another object's private attribute: apps and
  managers meet through events, requests and public methods (os-ken's
  topology service and Faucet's valve are the models), never by reaching into
  `routing._hosts` or `mgr._dps`.
- No pure manager reads a clock: every manager and every pure switch or NIC
  module takes `now` from its caller. Only the event-loop shells (the os-ken
  apps, the switch's datapath and its report builder, the host agent) may.

Nothing is imported: a module that reads the clock through an alias
(`from time import monotonic`) is caught as well as one that calls
`time.time()`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Module-level functions of the standard library whose names start with an
# underscore by design; calling one is not reading an object's private field.
PUBLIC_UNDERSCORE = {("os", "_exit")}

CLOCKS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "perf_counter"),
    ("time", "perf_counter_ns"),
    ("time", "process_time"),
    ("time", "thread_time"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}

# The shells: they own the loop, the sockets and the clock (DESIGN.md, STYLE.md 5).
CLOCK_OWNERS = {
    "emu/switch/datapath.py",
    "emu/switch/loop.py",
    "emu/switch/fastpath.py",  # the C loop's Python side
    "emu/switch/reports.py",
    "emu/host/agent.py",
}


def private_reads(source: str, filename: str = "<src>") -> list[str]:
    """`line: expr` of every `obj._name` where obj is not `self` or `cls`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Name) and (base.id, name) in PUBLIC_UNDERSCORE:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def clock_reads(
    source: str, filename: str = "<src>", skip_class_suffix: str | None = None
) -> list[str]:
    """`line: what` of every clock read, skipping classes whose name ends with `skip_class_suffix`."""
    tree = ast.parse(source, filename)
    owners: dict[str, str] = {}  # local name -> time, datetime or date (`import time as t`)
    functions: dict[str, tuple[str, str]] = {}  # local name -> clock (`from time import monotonic`)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("time", "datetime"):
                    owners[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "time":
                    functions[local] = ("time", alias.name)
                else:  # from datetime import datetime, date: their methods are the clocks
                    owners[local] = alias.name
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                skip_class_suffix
                and isinstance(child, ast.ClassDef)
                and child.name.endswith(skip_class_suffix)
            ):
                continue
            if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
                owner = owners.get(child.value.id)
                if owner and (owner, child.attr) in CLOCKS:
                    found.append(f"{child.lineno}: {ast.unparse(child)}")
            elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Attribute):
                if (child.value.attr, child.attr) in CLOCKS:  # datetime.datetime.now
                    found.append(f"{child.lineno}: {ast.unparse(child)}")
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                if functions.get(child.id) in CLOCKS:
                    found.append(f"{child.lineno}: {child.id}")
            visit(child)

    visit(tree)
    return found


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO / f).glob("*.py"))]


@pytest.mark.parametrize("path", _sources("controllers"), ids=lambda p: p.name)
def test_no_controller_module_reads_another_objects_private_attribute(path: Path) -> None:
    assert private_reads(path.read_text(), str(path)) == []


@pytest.mark.parametrize("path", _sources("controllers"), ids=lambda p: p.name)
def test_no_controller_manager_reads_the_clock(path: Path) -> None:
    """Only the os-ken shims (classes named ...App) read the clock and pass it on as `now`."""
    assert clock_reads(path.read_text(), str(path), skip_class_suffix="App") == []


@pytest.mark.parametrize(
    "path",
    [p for p in _sources("emu/switch", "emu/host") if str(p.relative_to(REPO)) not in CLOCK_OWNERS],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_pure_switch_and_nic_modules_take_now_from_their_caller(path: Path) -> None:
    assert clock_reads(path.read_text(), str(path)) == []


def test_the_checkers_see_what_they_forbid() -> None:
    """The checkers themselves, on the patterns issue 10 found in the old code."""
    reaching_in = (
        "class AdaptiveManager(RoutingManager):\n"
        "    def place(self):\n"
        "        hosts = self.routing._hosts\n"
        "        dps = app._mgr._dps\n"
        "        os._exit(0)\n"
        "        return self._mine, self.__class__\n"
    )
    assert private_reads(reaching_in) == [
        "3: self.routing._hosts",
        "4: app._mgr._dps",
        "4: app._mgr",
    ]

    clocked = (
        "import time\n"
        "import time as t\n"
        "from time import monotonic as mono\n"
        "import datetime\n"
        "class AggregationManager:\n"
        "    def register(self):\n"
        "        return time.time(), mono(), datetime.datetime.now(), t.monotonic()\n"
        "    def elapsed(self, now):\n"
        "        return now - self.started, time.sleep\n"
        "class AggregationApp:\n"
        "    def handler(self):\n"
        "        return self.mgr.register(time.time())\n"
    )
    manager_reads = ["7: time.time", "7: mono", "7: datetime.datetime.now", "7: t.monotonic"]
    assert clock_reads(clocked) == manager_reads + ["12: time.time"]
    assert clock_reads(clocked, skip_class_suffix="App") == manager_reads


def foreign_bases(path: Path) -> list[str]:
    """`line: Class(Base)` where a non-shim class subclasses a class of another controller module."""
    tree = ast.parse(path.read_text(), str(path))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controllers"):
            imported.update(alias.asname or alias.name for alias in node.names)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not node.name.endswith("App"):
            for base in node.bases:
                name = ast.unparse(base)
                if name in imported or name.startswith(("routing.", "aggregation.", "adaptive.")):
                    found.append(f"{node.lineno}: {node.name}({name})")
    return found


@pytest.mark.parametrize("path", _sources("controllers"), ids=lambda p: p.name)
def test_managers_compose_by_holding_each_other_not_by_subclassing(path: Path) -> None:
    """A manager that subclasses another inherits its private state (issue 10: the old
    AdaptiveManager(RoutingManager) read `_hosts`, `_links` and `_is_damped`)."""
    assert foreign_bases(path) == []


def test_the_subclass_checker_sees_a_manager_extending_routing(tmp_path: Path) -> None:
    src = tmp_path / "adaptive.py"
    src.write_text(
        "from controllers.routing import RoutingApp, RoutingManager\n"
        "class AdaptiveManager(RoutingManager):\n    pass\n"
        "class AdaptiveApp(RoutingApp):\n    pass\n"
    )
    assert foreign_bases(src) == ["2: AdaptiveManager(RoutingManager)"]


def scenario_imports(path: Path) -> list[str]:
    """`scenarios.X` modules that the file at `path` imports (X another scenario)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "scenarios":
                found += [f"scenarios.{a.name}" for a in node.names]
            elif node.module.startswith("scenarios."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("scenarios.")]
    return sorted(set(found) - {f"scenarios.{path.stem}"})


@pytest.mark.parametrize(
    "path",
    _sources("scenarios", *(f"labs/{d.name}" for d in (REPO / "labs").iterdir() if d.is_dir())),
    ids=str,
)
def test_scenarios_and_labs_share_models_through_emu_models_not_each_other(path: Path) -> None:
    """issue 30: a model two places use lives in emu/models/; no scenario or lab
    imports a scenario for it (labs/ is checked too: they quoted incast's model)."""
    assert scenario_imports(path) == [], path


def test_the_scenario_import_checker_sees_both_spellings(tmp_path: Path) -> None:
    src = tmp_path / "mine.py"
    src.write_text("from scenarios import incast\nfrom scenarios.ecmp_vs_adaptive import x\n")
    assert scenario_imports(src) == ["scenarios.ecmp_vs_adaptive", "scenarios.incast"]


def fabrics_built_directly(path: Path) -> list[str]:
    """Lines of `path` that build an emu.net.Fabric themselves (`Fabric(...)`)."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{node.lineno}: Fabric(...)"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "Fabric")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "Fabric")
        )
    ]


@pytest.mark.parametrize(
    "path",
    _sources("scenarios", *(f"labs/{d.name}" for d in (REPO / "labs").iterdir() if d.is_dir())),
    ids=str,
)
def test_scenarios_and_labs_open_fabrics_through_the_run_layer(path: Path) -> None:
    """issue 30: a fabric a scenario or lab check opens is the run's (`ctx.fabric`,
    `lab.fabric`, emu/runs.py), so the run judges its fidelity from what that fabric
    measured, not from whatever fidelity.json lies under its folder."""
    assert fabrics_built_directly(path) == [], path


def test_the_fabric_checker_sees_both_spellings(tmp_path: Path) -> None:
    src = tmp_path / "mine.py"
    src.write_text("fab = Fabric(g)\nwith net.Fabric(g) as f:\n    pass\nctx.fabric(g)\n")
    assert fabrics_built_directly(src) == ["1: Fabric(...)", "2: Fabric(...)"]


# Calls that return a management answer as JSON (emu/answers.py has the typed ones:
# Fabric.port_stats/counters/queues/live_ports/watchdog/flows/groups, RdmaHosts.nic_stats
# and nic_samples).
RAW_ANSWER_CALLS = {"switch_call", "stats", "samples"}


def raw_answer_calls(path: Path) -> list[str]:
    """`line: name(...)` for each call in `path` that reads a management answer untyped."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{node.lineno}: {node.func.attr}(...)"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in RAW_ANSWER_CALLS
    ]


def _raw_answer_readers() -> list[Path]:
    labs = [f"labs/{d.name}" for d in (REPO / "labs").iterdir() if d.is_dir()]
    return _sources("scenarios", "bench", *labs)


@pytest.mark.parametrize("path", _raw_answer_readers(), ids=str)
def test_scenarios_labs_and_benches_read_typed_management_answers(path: Path) -> None:
    """issue 30: no scenario, lab or bench indexes management JSON by strings (`c["pfc"]
    ["pause_rx"]`, `rx.get(str(qpn))`): they read emu/answers.py's types."""
    assert raw_answer_calls(path) == [], path


def test_the_raw_answer_checker_sees_switch_and_nic_answers(tmp_path: Path) -> None:
    src = tmp_path / "mine.py"
    src.write_text('fab.switch_call("s1", "ports")\nnics.stats("h1")\nfab.counters("s1")\n')
    assert raw_answer_calls(src) == ["1: switch_call(...)", "2: stats(...)"]


# Where switches are started outside a fabric: emu/rig.py (the testbed's and the
# benches'); a fabric's are Mininet nodes (emu/switch/node.py).
SWITCH_STARTERS = {"emu/rig.py", "emu/switch/node.py", "emu/ovs.py"}
OVS_DAEMON_ARGV = {"ovsdb_server_argv", "vswitchd_argv"}


def switches_started_by_hand(path: Path) -> list[str]:
    """`line: what` for each switch worker command line or OVS daemon started in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if "-m" in words and "emu.switch.worker" in words:
                found.append(f"{node.lineno}: -m emu.switch.worker")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in OVS_DAEMON_ARGV:
                found.append(f"{node.lineno}: {name}(...)")
    return found


def _switch_starting_candidates() -> list[Path]:
    return [
        p
        for top in ("emu", "bench", "tests", "labs", "scenarios")
        for p in sorted((REPO / top).rglob("*.py"))
        if str(p.relative_to(REPO)) not in SWITCH_STARTERS
    ]


@pytest.mark.parametrize(
    "path", _switch_starting_candidates(), ids=lambda p: str(p.relative_to(REPO))
)
def test_switches_outside_a_fabric_start_through_the_one_rig(path: Path) -> None:
    """issue 30, one rig per job: the testbed, the benches and tests start emu's switches
    and Open vSwitch's daemons through emu/rig.py, not command lines of their own."""
    assert switches_started_by_hand(path) == [], path


def test_the_rig_checker_sees_a_worker_and_the_ovs_daemons(tmp_path: Path) -> None:
    src = tmp_path / "mine.py"
    src.write_text(
        "argv = [sys.executable, '-m', 'emu.switch.worker', '--name', 's1']\n"
        "p = spawn(ovs.vswitchd_argv(d))\nEMU = ('emu.switch.worker',)\n"
    )
    assert switches_started_by_hand(src) == ["1: -m emu.switch.worker", "2: vswitchd_argv(...)"]


# A function that is a model by its name: what a measurement is held to.
MODEL_NAME = re.compile(r"model|_floor$|_ceiling$|_bound$")


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def model_functions_outside_models(root: Path = REPO) -> dict[tuple[str, str], str]:
    """(module, function) -> file of each public model function defined outside emu/models/."""
    found = {}
    for top in ("emu", "scenarios", "labs", "bench", "controllers"):
        for p in sorted((root / top).rglob("*.py")):
            if p.relative_to(root).parts[:2] == ("emu", "models"):
                continue
            for node in ast.parse(p.read_text(), str(p)).body:
                if (
                    isinstance(node, ast.FunctionDef)
                    and not node.name.startswith("_")
                    and MODEL_NAME.search(node.name)
                ):
                    found[(_module_name(p, root), node.name)] = str(p.relative_to(root))
    return found


def uses_of(path: Path, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which (module, function) of `wanted` the file at `path` imports and uses."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # local name -> module it names
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if (node.module, a.name) in wanted:
                    used.add((node.module, a.name))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            key = (aliases.get(node.value.id, ""), node.attr)
            if key in wanted:
                used.add(key)
    return used


def models_shared_outside_models(root: Path = REPO) -> list[str]:
    """Model functions outside emu/models/ that two or more scenarios, labs or benches use."""
    defined = model_functions_outside_models(root)
    users: dict[tuple[str, str], set[str]] = {}
    for top in ("scenarios", "labs", "bench"):
        for p in sorted((root / top).rglob("*.py")):
            for key in uses_of(p, set(defined)):
                if defined[key] != str(p.relative_to(root)):
                    users.setdefault(key, set()).add(str(p.relative_to(root)))
    return sorted(
        f"{defined[k]}: {k[1]} used by {', '.join(sorted(u))}"
        for k, u in users.items()
        if len(u) >= 2
    )


def test_a_model_the_scenarios_share_lives_in_emu_models() -> None:
    """issue 30: a model that two scenarios, labs or benches hold measurements to is
    in emu/models/ with its sources and unit tests, not in a workload module or a
    scenario (no scenario imports another: the test above)."""
    assert models_shared_outside_models() == []


def test_the_shared_model_checker_sees_a_model_in_a_workload_module(tmp_path: Path) -> None:
    for top in ("emu/traffic", "emu/models", "scenarios", "labs", "bench", "controllers"):
        (tmp_path / top).mkdir(parents=True)
    (tmp_path / "emu/traffic/incast.py").write_text("def queue_model(g):\n    return 1\n")
    (tmp_path / "emu/models/dcqcn.py").write_text("def fluid_model(g):\n    return 1\n")
    (tmp_path / "scenarios/a.py").write_text(
        "from emu.traffic import incast\nfrom emu.models import dcqcn\n"
        "x = incast.queue_model(1) + dcqcn.fluid_model(1)\n"
    )
    (tmp_path / "scenarios/b.py").write_text(
        "from emu.traffic.incast import queue_model\nfrom emu.models.dcqcn import fluid_model\n"
    )
    assert models_shared_outside_models(tmp_path) == [
        "emu/traffic/incast.py: queue_model used by scenarios/a.py, scenarios/b.py"
    ]
