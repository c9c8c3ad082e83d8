"""The scenario contract: parameters, checks, report and metrics.json.

Owns what every scenario module shares: declaring parameters with defaults
(`Param`), parsing `--set key=value` against them (unknown keys and bad values
are errors that name the key, the value and what is allowed), the `Check`
record, writing `OUT/metrics.json` and `OUT/report.txt`, and the exit status
(0 only when every check passed). A scenario module defines `DESCRIPTION`,
`PARAMS` and `run(ctx) -> None`; it fills `ctx.metrics`, `ctx.tables` and
`ctx.checks`.

A scenario that reads its fabric only from the graph (never from the shape
parameters) sets `TOPOLOGY_FILE = True` and then also runs on a fabric from a
topology file (`--set topo=FILE`, `emu run NAME --topo FILE`, emu/topofile.py):
the file replaces the shape parameters (`SHAPE_PARAMS`, dropped from the
parameters) and sets `rate_mbps` to its slowest host link.

Every run is also judged on its fidelity (emu/fidelity.py): after the scenario,
the records its fabrics left in `OUT/**/fidelity.json` become a fidelity table
and four fidelity checks. A run whose own checks pass but whose fidelity fails
is an *unfaithful run*: the report says so in one line naming where and by
how much, and `emu run` exits with its own status (EXIT_UNFAITHFUL in cli.py).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import scenarios
from emu import fabric, fidelity, topofile
from emu.net import default_switch_processes


class ScenarioError(ValueError):
    """A scenario name or parameter is wrong; the message says what is allowed."""


@dataclass(frozen=True)
class Param:
    """One scenario parameter: default, type, help, and optional allowed values/range."""

    default: Any
    help: str
    choices: tuple = ()
    min: float | None = None
    max: float | None = None

    def parse(self, key: str, text: str) -> Any:
        kind = type(self.default)
        try:
            if kind is bool:
                if text.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
                value = text.lower() in ("1", "true", "yes", "on")
            else:
                value = kind(text)
        except ValueError:
            raise ScenarioError(f"parameter {key}={text!r}: expected {kind.__name__}") from None
        self.validate(key, value)
        return value

    def validate(self, key: str, value: Any) -> None:
        if self.choices and value not in self.choices:
            raise ScenarioError(
                f"parameter {key}={value!r}: allowed values are {', '.join(map(str, self.choices))}"
            )
        if self.min is not None and value < self.min:
            raise ScenarioError(f"parameter {key}={value!r}: must be >= {self.min}")
        if self.max is not None and value > self.max:
            raise ScenarioError(f"parameter {key}={value!r}: must be <= {self.max}")


@dataclass
class Check:
    """One expected outcome: what was measured against what was expected."""

    name: str
    passed: bool
    value: Any
    expected: str
    fidelity: bool = False  # a check of the emulator, not of the emulated network


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]

    def render(self) -> str:
        cells = [[_fmt(c) for c in row] for row in self.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self.columns)]
        line = "  ".join(h.ljust(w) for h, w in zip(self.columns, widths))
        out = [self.title, line, "  ".join("-" * w for w in widths)]
        out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
        return "\n".join(out)


@dataclass
class Text:
    """A preformatted block of the report (e.g. an nccl-tests table), printed as it is."""

    text: str

    def render(self) -> str:
        return self.text


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


@dataclass
class Context:
    """What a running scenario sees and fills."""

    name: str
    params: dict[str, Any]
    out_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    tables: list[Table | Text] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    log: Callable[[str], None] = print

    def check(
        self, name: str, passed: bool, value: Any, expected: str, fidelity: bool = False
    ) -> bool:
        self.checks.append(Check(name, bool(passed), value, expected, fidelity))
        return bool(passed)

    def event(self, kind: str, **info: Any) -> None:
        self.events.append({"t": round(time.monotonic() - self.started, 3), "kind": kind, **info})

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        self.tables.append(Table(title, columns, rows))

    def text(self, block: str) -> None:
        """A preformatted block, in order with the tables."""
        self.tables.append(Text(block))


def available() -> dict[str, Any]:
    """Scenario name (dashes) -> module."""
    found = {}
    for info in pkgutil.iter_modules(scenarios.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"scenarios.{info.name}")
        if hasattr(module, "run") and hasattr(module, "PARAMS"):
            found[info.name.replace("_", "-")] = module
    return found


def load(name: str):
    mods = available()
    if name not in mods:
        raise ScenarioError(f"unknown scenario {name!r}; available: {', '.join(sorted(mods))}")
    return mods[name]


def resolve_params(module, overrides: list[str]) -> dict[str, Any]:
    """Defaults of `module.PARAMS` with `key=value` overrides applied and validated."""
    params = {k: p.default for k, p in module.PARAMS.items()}
    given = set()
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ScenarioError(f"--set {item!r}: expected KEY=VALUE")
        if key not in module.PARAMS:
            raise ScenarioError(
                f"unknown parameter {key!r}; allowed: {', '.join(sorted(module.PARAMS))}"
            )
        params[key] = module.PARAMS[key].parse(key, text.strip())
        given.add(key)
    if params.get("topo"):
        _apply_topology_file(module, params, given)
    if hasattr(module, "validate"):
        module.validate(params)
    return params


# The fabric shapes `topology=` builds (emu/fabric/'s builders).
TOPOLOGIES = ("leaf_spine", "fat_tree", "dragonfly", "torus", "rail_optimized")

# What a topology file decides instead of the parameters (rate_mbps is set from it).
SHAPE_PARAMS = (
    "topology",
    "k",
    "leaves",
    "spines",
    "hosts_per_leaf",
    "groups",
    "routers_per_group",
    "global_links_per_router",
    "dims",
    "nodes",
    "gpus_per_node",
)


def _apply_topology_file(module, params: dict[str, Any], given: set[str]) -> None:
    """Check a `topo` file now (one line on error) and let it replace the shape parameters."""
    if not getattr(module, "TOPOLOGY_FILE", False):
        takers = sorted(n for n, m in available().items() if getattr(m, "TOPOLOGY_FILE", False))
        raise ScenarioError(
            f"parameter topo: this scenario's checks assume the fabric its own parameters "
            f"build; a topology file runs with: emu cli, {', '.join(takers)}"
        )
    for key in sorted(given & {*SHAPE_PARAMS, "rate_mbps"}):
        raise ScenarioError(
            f"parameter {key}: the topology file {params['topo']} decides the fabric's shape "
            f"and rates; drop --set {key} or the file"
        )
    graph = topofile.load(params["topo"])
    for key in SHAPE_PARAMS:
        params.pop(key, None)
    params["rate_mbps"] = _slowest_host_link_bps(graph) / 1e6


def _slowest_host_link_bps(graph) -> int:
    return min(d["rate_bps"] for _, _, d in graph.edges(data=True) if d["tier"] == "host")


def render_report(ctx: Context) -> str:
    lines = [
        f"emu scenario: {ctx.name}",
        "parameters: " + ", ".join(f"{k}={v}" for k, v in ctx.params.items()),
        "",
    ]
    for table in ctx.tables:
        lines += [table.render(), ""]
    if ctx.events:
        lines.append("events (s since start)")
        lines += [
            f"  {e['t']:8.3f}  {e['kind']}  "
            + " ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "kind"))
            for e in ctx.events
        ]
        lines.append("")
    lines.append("checks")
    for c in ctx.checks:
        lines.append(
            f"  [{'PASS' if c.passed else 'FAIL'}] {c.name}: {_fmt(c.value)} "
            f"(expected {c.expected})"
        )
    passed = sum(c.passed for c in ctx.checks)
    lines.append(f"\n{passed}/{len(ctx.checks)} checks passed; results in {ctx.out_dir}")
    if not faithful(ctx):
        lines.append(unfaithful_line(ctx))
    return "\n".join(lines)


def faithful(ctx: Context) -> bool:
    """Every fidelity check passed (the emulator kept up with the emulated network)."""
    return all(c.passed for c in ctx.checks if c.fidelity)


def unfaithful_line(ctx: Context) -> str:
    """One line that names where the emulator fell behind and by how much."""
    bad = [c for c in ctx.checks if c.fidelity and not c.passed]
    others_pass = all(c.passed for c in ctx.checks if not c.fidelity)
    head = (
        "unfaithful run"
        if others_pass
        else "unfaithful run (its failed checks may be the emulator's)"
    )
    line = f"{head}: " + "; ".join(str(c.value) for c in bad)
    steal_s = ctx.metrics.get("fidelity", {}).get("steal_s", 0.0)
    if steal_s >= 0.01:
        # On a VM whose host is busy, every process stops now and then: name it.
        line += f"; the VM's host took {steal_s * 1e3:.0f} ms of CPU meanwhile (steal)"
    return line


def machine_text(machine: dict) -> str:
    """The machine's idle share and CPU pressure, for the scheduling line ("" if unmeasured)."""
    text = ""
    if machine.get("idle_share") is not None:
        text += f"the whole machine meanwhile: CPUs idle {machine['idle_share']:.0%} of the time"
        if machine.get("cpu_pressure_share") is not None:
            text += (
                f"; some task waited for a CPU {machine['cpu_pressure_share']:.0%} of the time "
                "(PSI): the hosts' traffic and the controller are not judged above, and a "
                "busy machine can starve them while the switches keep time"
            )
    return text


def add_fidelity(ctx: Context) -> None:
    """Judge the run's fidelity records: a table, four checks and `metrics["fidelity"]`."""
    records = fidelity.load_records(ctx.out_dir)
    missing = fidelity.load_missing(ctx.out_dir)
    if not records:
        ctx.check(
            "fidelity: measured",
            False,
            f"no fidelity records under {ctx.out_dir}",
            "every fabric writes fidelity.json",
            fidelity=True,
        )
        return
    limits = fidelity.Limits()
    verdict = fidelity.judge(records, limits)
    ctx.table(
        "fidelity (the emulator against its links' clocks; emu/fidelity.py)",
        fidelity.TABLE_COLUMNS,
        fidelity.table_rows(records, limits),
    )
    machine = fidelity.load_machine(ctx.out_dir)
    steal_s = machine["steal_s"]
    scheduling = fidelity.sched_summary(records)
    ctx.text(f"{scheduling}; CPU time the VM's host took meanwhile (steal): {steal_s * 1e3:.0f} ms")
    machine_line = machine_text(machine)
    if machine_line:
        ctx.text(machine_line)
    for measure in ("on_time", "stall", "deficit", "kernel_drops"):
        worst = verdict.worst.get(measure)
        if worst is None:
            continue
        ctx.check(
            fidelity.check_name(measure, limits),
            worst.passed,
            worst.text if not worst.passed else f"worst {worst.value:g} at {worst.where}",
            fidelity.limit_text(measure, limits),
            fidelity=True,
        )
    if missing:
        ctx.check(
            "fidelity: every switch and NIC answered",
            False,
            f"no record from {', '.join(missing)}",
            "a record from every process",
            fidelity=True,
        )
    ctx.metrics["fidelity"] = {
        "faithful": verdict.faithful,
        "processes": verdict.processes,
        "frames": verdict.frames,
        "scheduling": scheduling,
        "steal_s": round(steal_s, 3),
        "idle_share": machine["idle_share"],
        "cpu_pressure_share": machine["cpu_pressure_share"],
        "worst": {
            m: {"where": f.where, "value": f.value, "limit": f.limit, "passed": f.passed}
            for m, f in verdict.worst.items()
        },
    }


def write_results(ctx: Context) -> None:
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "scenario": ctx.name,
        "params": ctx.params,
        "metrics": ctx.metrics,
        "checks": [asdict(c) for c in ctx.checks],
        "events": ctx.events,
        "plots": ctx.plots,
        "passed": bool(ctx.checks) and all(c.passed for c in ctx.checks),
        "faithful": faithful(ctx),
    }
    (ctx.out_dir / "metrics.json").write_text(json.dumps(doc, indent=2, default=str))
    (ctx.out_dir / "report.txt").write_text(render_report(ctx) + "\n")


def run(
    name: str, overrides: list[str], out_dir: str | None = None, log: Callable[[str], None] = print
) -> Context:
    """Run scenario `name`; returns its context (checks, metrics) after writing results.

    A scenario that raises still writes its results, with a failed check that
    names the error, before the exception propagates.
    """
    module = load(name)
    params = resolve_params(module, overrides)
    out = Path(out_dir or f"results/{name}")
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(name=name, params=params, out_dir=out, log=log)
    try:
        module.run(ctx)
    except BaseException as exc:
        ctx.check("scenario completed", False, f"{type(exc).__name__}: {exc}", "no error")
        add_fidelity(ctx)
        write_results(ctx)
        raise
    if not ctx.checks:
        ctx.check("scenario produced checks", False, 0, ">= 1 check")
    add_fidelity(ctx)
    write_results(ctx)
    return ctx


def parse_param(params: dict[str, Any], key: str, parse, *args: Any) -> Any:
    """`parse(params[key], *args)`; its ValueError becomes a ScenarioError naming the parameter."""
    try:
        return parse(params[key], *args)
    except ValueError as exc:
        raise ScenarioError(f"parameter {key}={params[key]!r}: {exc}") from None


def choices(params: dict[str, Any], key: str, allowed) -> list[str]:
    """The comma list `params[key]`, each item one of `allowed`; else a ScenarioError
    naming the parameter and what it may hold (an empty list is refused too)."""
    chosen = [x for x in str(params[key]).split(",") if x]
    if not chosen or any(x not in allowed for x in chosen):
        raise ScenarioError(
            f"parameter {key}={params[key]!r}: a comma list of {', '.join(allowed)}"
        )
    return chosen


def fabric_params(
    topology: str = "leaf_spine", rate_mbps: float = 20.0, modelled_gbps: float | None = None
) -> dict[str, Param]:
    """The parameters every fabric-building scenario shares (and `emu cli` takes).

    `modelled_gbps` is the host NIC speed the emulated links stand for; it sets
    the fabric's time scale (emu/fabric/, "The time scale"). None (the
    parameter's 0): whatever `rate_mbps` is set to, i.e. time scale 1.
    """
    return {
        "topology": Param(topology, "fabric shape", choices=TOPOLOGIES),
        "k": Param(4, "fat-tree arity (even)", min=2, max=8),
        "leaves": Param(4, "leaf switches (leaf_spine)", min=1, max=32),
        "spines": Param(
            2, "spine switches (leaf_spine; rail_optimized, where 0 is rail-only)", min=0, max=16
        ),
        "hosts_per_leaf": Param(
            2,
            "hosts per leaf (leaf_spine), per router (dragonfly), per switch (torus)",
            min=1,
            max=32,
        ),
        "groups": Param(3, "dragonfly groups", min=2, max=16),
        "routers_per_group": Param(2, "dragonfly routers per group", min=1, max=16),
        "global_links_per_router": Param(
            1,
            "dragonfly global links per router (routers_per_group times it: a multiple of groups-1)",
            min=1,
            max=15,
        ),
        "dims": Param("3x3", "torus size per dimension, 2 or 3 of them: 3x3, 2x2x2"),
        "nodes": Param(2, "GPU servers (rail_optimized)", min=1, max=32),
        "gpus_per_node": Param(2, "GPUs, NICs and rails per server (rail_optimized)", min=1, max=8),
        "rate_mbps": Param(
            rate_mbps, "emulated link rate in Mbit/s (see docs/performance.md)", min=0.1, max=1000.0
        ),
        "topo": Param(
            "",
            "a topology file (YAML, emu/topofile.py) instead of topology, k, leaves, spines, "
            "hosts_per_leaf and rate_mbps; also `--topo FILE`",
        ),
        "modelled_gbps": Param(
            float(modelled_gbps or 0.0),
            "host NIC speed the emulated links stand for: the fabric's time scale is it over "
            "rate_mbps, and DCQCN, the RTO and the PFC watchdog run on that clock "
            "(0: the emulated rate itself, time scale 1)",
            min=0.0,
            max=800.0,
        ),
        "flow_control": Param(
            "pfc",
            "link-level flow control of the lossless class: pfc (802.1Qbb PAUSE) or credit "
            "(InfiniBand-style credits per virtual lane, emu/credit.py)",
            choices=("pfc", "credit"),
        ),
        "seed": Param(0, "base of the per-switch ECMP hash seeds"),
        "host_nic_pacing": Param(
            True, "hosts' kernels send at their link rate (a tc token bucket), as a real NIC does"
        ),
        "switch_processes": Param(
            default_switch_processes(),
            "processes that run the switches, one event loop each (0: a process per "
            "switch; the default is this machine's CPU count)",
            min=0,
            max=64,
        ),
    }


def fabric_options(params: dict[str, Any]) -> dict[str, Any]:
    """The `emu.net.Fabric` arguments that `fabric_params()` set (besides the graph).

    A scenario that declares its own fabric parameters without `flow_control`
    (pfc-deadlock: its point is PFC) runs PFC, the Fabric's default.
    """
    return {
        "seed": params["seed"],
        "switch_processes": params["switch_processes"],
        "host_nic_pacing": params["host_nic_pacing"],
        "flow_control": params.get("flow_control", "pfc"),
    }


def _torus_dims(text: str) -> tuple[int, ...]:
    """`3x3` or `2x2x2` -> (3, 3) or (2, 2, 2); the torus builder checks the sizes."""
    parts = text.lower().split("x")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ScenarioError(f"parameter dims={text!r}: expected 2 or 3 sizes like 3x3 or 2x2x2")
    return tuple(int(p) for p in parts)


def build_fabric_graph(params: dict[str, Any]):
    """The networkx fabric that `fabric_params()` describe (or their `topo` file)."""
    rate_bps = int(params["rate_mbps"] * 1e6)
    modelled_rate_bps = params["modelled_gbps"] * 1e9 or None  # 0: time scale 1
    if params.get("topo"):
        return _graph_from_file(params["topo"], modelled_rate_bps)
    shape = params["topology"]
    if shape == "fat_tree":
        if params["k"] % 2:
            raise ScenarioError(f"parameter k={params['k']}: a fat-tree needs an even k")
        return fabric.fat_tree(
            k=params["k"], rate_bps=rate_bps, modelled_rate_bps=modelled_rate_bps
        )
    try:
        if shape == "dragonfly":
            return fabric.dragonfly(
                groups=params["groups"],
                routers_per_group=params["routers_per_group"],
                hosts_per_router=params["hosts_per_leaf"],
                global_links_per_router=params["global_links_per_router"],
                rate_bps=rate_bps,
                modelled_rate_bps=modelled_rate_bps,
            )
        if shape == "torus":
            return fabric.torus(
                dims=_torus_dims(params["dims"]),
                hosts_per_switch=params["hosts_per_leaf"],
                rate_bps=rate_bps,
                modelled_rate_bps=modelled_rate_bps,
            )
        if shape == "rail_optimized":
            return fabric.rail_optimized(
                nodes=params["nodes"],
                gpus_per_node=params["gpus_per_node"],
                spines=params["spines"],
                host_rate_bps=rate_bps,
                modelled_rate_bps=modelled_rate_bps,
            )
    except fabric.FabricSpecError as exc:
        # The builder names its own argument; say which scenario parameter that is.
        raise ScenarioError(f"topology={shape}: {exc}") from None
    return fabric.leaf_spine(
        leaves=params["leaves"],
        spines=params["spines"],
        hosts_per_leaf=params["hosts_per_leaf"],
        host_rate_bps=rate_bps,
        modelled_rate_bps=modelled_rate_bps,
    )


def _graph_from_file(path: str, modelled_rate_bps: float | None):
    """The file's graph; `modelled_gbps` sets its time scale unless the file has one."""
    graph = topofile.load(path)
    if modelled_rate_bps is not None:
        if graph.graph["time_scale"] != 1.0:
            raise ScenarioError(
                f"parameter modelled_gbps: {path} sets time_scale={graph.graph['time_scale']:g}; "
                "give one of them"
            )
        # Over the slowest host link, as rate_mbps is read from the file.
        graph.graph["time_scale"] = fabric.time_scale_for(
            _slowest_host_link_bps(graph), modelled_rate_bps
        )
    return graph
