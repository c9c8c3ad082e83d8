"""The scenario contract: parameters, checks, report and metrics.json.

Owns what every scenario module shares: declaring parameters with defaults
(`Param`), parsing `--set key=value` against them (unknown keys and bad values
are errors that name the key, the value and what is allowed), the `Check`
record, writing `OUT/metrics.json` and `OUT/report.txt`, and the exit status
(0 only when every check passed). A scenario module defines `DESCRIPTION`,
`PARAMS` and `run(ctx) -> None`; it fills `ctx.metrics`, `ctx.tables` and
`ctx.checks`. A scenario whose figures the README and docs/results.md quote
declares them beside its code as `REPRODUCE` (emu/figures.py `Entry`s), which
`emu reproduce` reads.

A scenario that reads its fabric only from the graph (never from the shape
parameters) sets `TOPOLOGY_FILE = True` and then also runs on a fabric from a
topology file (`--set topo=FILE`, `emu run NAME --topo FILE`, emu/topofile.py):
the file replaces the shape parameters (`SHAPE_PARAMS`, dropped from the
parameters) and sets `rate_mbps` to its slowest host link.

Parameters are validated in one place, whatever spells them (docs/parameters.md):
`resolve_params` for `--set`, `fabric_graph` for the Python API and the pytest
marker, and emu/topofile.py for files hold every value to the same bounds
(`emu.config.Bound`) and raise one error type (`emu.config.ConfigError`, of which
`ScenarioError` is a kind). A shape parameter that the chosen topology does not
use is an error that names it, not a silent default; `describe_params` is what
`emu run NAME --help` and `emu list -v` print.

A scenario opens its fabrics with `ctx.fabric(graph, label, **options)` (the run
layer, emu/runs.py), which puts each fabric's results in OUT/label and keeps
what it measured of itself. Every run is also judged on its fidelity
(emu/fidelity.py): after the scenario, the records of the fabrics it opened
(held in memory, never found again on disk) become a fidelity table
and four fidelity checks. A run whose own checks pass but whose fidelity fails
is an *unfaithful run*: the report says so in one line naming where and by
how much, and `emu run` exits with its own status (EXIT_UNFAITHFUL in cli.py).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import pkgutil
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import scenarios
from emu import config, fabric, fidelity, topofile
from emu.config import ConfigError
from emu.net import check_tcp_congestion, default_switch_processes
from emu.proto import ofext
from emu.runs import RunFabrics


class ScenarioError(ConfigError):
    """A scenario name or parameter is wrong; the message says what is allowed."""


_BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True}
_BOOL_WORDS.update({"0": False, "false": False, "no": False, "off": False})
_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True)
class Param:
    """One scenario parameter: default, type, help, and optional allowed values/range.

    `bound` holds the value, times `scale`, to one of emu.config's fabric bounds
    (rate_mbps: scale 1e6 against LINK_RATE_BPS), which then also accepts the
    topology files' unit spelling (``--set rate_mbps=20M``); `off` is a value
    outside the bound that means "not set" (modelled_gbps's 0).
    """

    default: Any
    help: str
    choices: tuple = ()
    min: float | None = None
    max: float | None = None
    bound: config.Bound | None = None
    scale: float = 1.0
    off: Any = None
    # A comma list (a str default): each item one of these, at most once; "" is none.
    each: tuple = ()
    # A value's own rule: raises ValueError whose message says what is wrong.
    check: Callable[[Any], None] | None = None

    def parse(self, key: str, text: str) -> Any:
        """The value of `--set key=text`, validated."""
        kind = type(self.default)
        if kind is bool:
            if text.lower() not in _BOOL_WORDS:
                raise ScenarioError(f"parameter {key}={text!r}: expected true or false")
            value = _BOOL_WORDS[text.lower()]
        elif kind is str:
            value = text
        else:
            value = self._number(key, text, kind)
        self.validate(key, value)
        return value

    def _number(self, key: str, text: str, kind: type) -> Any:
        if self.bound is not None and self.scale != 1 and text[-1:].upper() in "KMGT":
            # A rate in the topology files' spelling: 20M is 20 Mbit/s whatever the key's unit.
            try:
                return kind(topofile.parse_rate(text.upper()) / self.scale)
            except (ValueError, OverflowError):
                raise ScenarioError(
                    f"parameter {key}={text!r}: expected a number or a rate like 20M, 10G"
                ) from None
        try:
            return kind(text)
        except (ValueError, OverflowError):
            raise ScenarioError(f"parameter {key}={text!r}: expected {_KIND_NAMES[kind]}") from None

    def validate(self, key: str, value: Any) -> None:
        """Raise ScenarioError unless `value` is of the default's type and within range."""
        kind = type(self.default)
        shown = f"parameter {key}={_short(value)}"
        numeric = kind in (int, float)
        if isinstance(value, bool) != (kind is bool) or not isinstance(
            value, (int, float) if kind is float else kind
        ):
            raise ScenarioError(f"{shown}: expected {_KIND_NAMES.get(kind, kind.__name__)}")
        if numeric and not _finite_ok(value):
            raise ScenarioError(f"{shown}: expected a finite number; allowed {self.range_text()}")
        if self.choices and value not in self.choices:
            raise ScenarioError(f"{shown}: allowed values are {', '.join(map(str, self.choices))}")
        items = [x for x in str(value).split(",") if x] if self.each else []
        if any(x not in self.each for x in items) or len(set(items)) != len(items):
            raise ScenarioError(
                f"{shown}: a comma list of {', '.join(map(str, self.each))}, each at most once"
            )
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                raise ScenarioError(f"{shown}: {exc}") from None
        if self.off is not None and value == self.off:
            return
        if self.bound is not None and not self.bound.contains(_times(value, self.scale)):
            raise ScenarioError(f"{shown}: {self.bound.allowed}")
        if self.min is not None and value < self.min:
            raise ScenarioError(f"{shown}: must be >= {self.min}")
        if self.max is not None and value > self.max:
            raise ScenarioError(f"{shown}: must be <= {self.max}")

    def describe(self, key: str, used_by: tuple[str, ...] = ()) -> str:
        """Two lines or more: `key=default  range`, then the help (and which topologies use it)."""
        head = f"  {key}={_fmt_default(self.default)}"
        allowed = self.range_text()
        if used_by:
            allowed = f"{allowed}; " if allowed else ""
            allowed += f"with topology={' or '.join(used_by)}"
        if allowed:
            head = f"{head:30s} {allowed}" if len(head) < 30 else f"{head}  {allowed}"
        wrapped = textwrap.wrap(self.help, 88, initial_indent=" " * 6, subsequent_indent=" " * 6)
        return "\n".join([head, *wrapped])

    def range_text(self) -> str:
        """What the parameter allows, as `emu run NAME --help` lists it ("" if anything)."""
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if self.each:
            return "any of " + ",".join(map(str, self.each))
        if isinstance(self.default, bool):
            return "true or false"
        parts = []
        if self.bound is not None:
            parts.append(self.bound.allowed.removeprefix("must be in "))
        elif self.min is not None or self.max is not None:
            lo = "" if self.min is None else f"{self.min:g}"
            hi = "" if self.max is None else f"{self.max:g}"
            parts.append(f"{lo}..{hi}" if lo and hi else (f">= {lo}" if lo else f"<= {hi}"))
        if self.off is not None:
            parts.append(f"or {self.off:g} (off)")
        return " ".join(parts)


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


def _short(value: Any, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters: an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _times(value: float, scale: float) -> float:
    try:
        return value * scale
    except OverflowError:  # an int beyond a float's range: out of any bound
        return math.inf


def _fmt_default(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else '""'
    return f"{value:g}" if isinstance(value, float) else str(value)


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
    # The run's start on the unix clock that events are stamped with.
    started_wall: float = field(default_factory=time.time)
    # The fabrics this run opened and their fidelity (emu/runs.py), judged at its end.
    fabrics: RunFabrics = field(init=False)

    def __post_init__(self) -> None:
        self.fabrics = RunFabrics(self.out_dir)

    def fabric(self, graph, label: str = "", **options):
        """`with ctx.fabric(graph, "mode", qos=...) as fab:` a fabric (emu.net.Fabric's
        options) with its results in OUT/label, its fidelity judged with the run's."""
        return self.fabrics.open(graph, label, **options)

    def check(
        self, name: str, passed: bool, value: Any, expected: str, fidelity: bool = False
    ) -> bool:
        self.checks.append(Check(name, bool(passed), value, expected, fidelity))
        return bool(passed)

    def event(self, kind: str, at: float | None = None, **info: Any) -> None:
        """Record that `kind` happened `at` (unix time; None: now), not when this is called.

        A scenario that learns of a moment later (a controller's reaction, the
        end of an outage) passes the moment itself.
        """
        wall = time.time() if at is None else at
        self.events.append(
            {"t": round(wall - self.started_wall, 3), "wall": wall, "kind": kind, **info}
        )

    def timeline(self) -> list[dict]:
        """The events in the order they happened, each `t` in seconds since the run began.

        An event with a ``wall`` stamp (every `event`, and emu/faults.py's, which
        scenarios add as they are) is placed by it: a fault's own ``t`` counts
        from its fabric's start, not the run's.
        """
        placed = [
            dict(e, t=round(e["wall"] - self.started_wall, 3)) if "wall" in e else dict(e)
            for e in self.events
        ]
        return sorted(placed, key=lambda e: e.get("t", 0.0))

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


def deprecated(message: str) -> None:
    """One line on stderr, once per process: an old spelling still works, and which is new."""
    if message not in _DEPRECATED_SAID:
        _DEPRECATED_SAID.add(message)
        print(f"emu: deprecated: {message}", file=sys.stderr)


_DEPRECATED_SAID: set[str] = set()


def canonical_name(name: str, known, what: str) -> str:
    """`name` as `known` spells it: scenarios and labs take dashes (`pause-storm`).

    The underscore spelling of a dashed name still works, with a deprecation
    line; a name spelled with dashes where `known` has underscores is taken as is.

    Raises:
        ScenarioError: neither spelling is known; names what is.
    """
    if name in known:
        return name
    for other in (name.replace("_", "-"), name.replace("-", "_")):
        if other in known:
            if "_" in name and "-" in other:
                deprecated(f"{what} {name!r} is spelled {other!r} now")
            return other
    raise ScenarioError(f"unknown {what} {name!r}; available: {', '.join(sorted(known))}")


def load(name: str):
    mods = available()
    return mods[canonical_name(name, mods, "scenario")]


# Other spellings `--set` takes for a parameter. The topology files' unit spellings
# are rates in bit/s with a suffix (`rate=20M`), as in a file; the shape's
# hosts per edge switch is `hosts_per_leaf` on every topology (the builders'
# own names for it still work, with a deprecation line).
RATE_ALIASES = {
    "rate": ("rate_mbps", 1e6),
    "rate_bps": ("rate_mbps", 1e6),
    "modelled_rate": ("modelled_gbps", 1e9),
    "modelled_rate_bps": ("modelled_gbps", 1e9),
}
DEPRECATED_KEYS = {"hosts_per_switch": "hosts_per_leaf", "hosts_per_router": "hosts_per_leaf"}


def _parse_override(module, item: str) -> tuple[str, Any]:
    """`KEY=VALUE` -> (parameter, value), through the aliases; errors name the key."""
    key, sep, text = item.partition("=")
    key, text = key.strip().replace("-", "_"), text.strip()
    if not sep or not key:
        raise ScenarioError(f"--set {item!r}: expected KEY=VALUE")
    params = module.PARAMS
    if key not in params and key in RATE_ALIASES and RATE_ALIASES[key][0] in params:
        target, scale = RATE_ALIASES[key]
        try:
            rate_bps = topofile.parse_rate(text.upper() if text[-1:].isalpha() else float(text))
        except (ValueError, OverflowError):
            raise ScenarioError(
                f"parameter {key}={text!r}: expected a rate in bit/s like 20M, 10G, 25e9"
            ) from None
        bound = params[target].bound
        if bound is not None and not bound.contains(rate_bps):
            raise ScenarioError(f"parameter {key}={text!r}: {bound.allowed}")
        value = rate_bps / scale
        params[target].validate(target, value)
        return target, value
    if key not in params and key in DEPRECATED_KEYS and DEPRECATED_KEYS[key] in params:
        deprecated(f"--set {key}=... is --set {DEPRECATED_KEYS[key]}=... (on every topology)")
        key = DEPRECATED_KEYS[key]
    if key not in params:
        raise ScenarioError(f"unknown parameter {key!r}; allowed: {', '.join(sorted(params))}")
    return key, params[key].parse(key, text)


def resolve_params(module, overrides: list[str]) -> dict[str, Any]:
    """Defaults of `module.PARAMS` with `key=value` overrides applied and validated.

    Raises:
        ScenarioError: an unknown key, a bad value, or a shape parameter the
            chosen topology does not use; one line naming it.
    """
    params = {k: p.default for k, p in module.PARAMS.items()}
    given = set()
    for item in overrides:
        key, value = _parse_override(module, item)
        params[key] = value
        given.add(key)
    if params.get("topo"):
        _apply_topology_file(module, params, given)
    else:
        check_shape_keys(params, given)
    if hasattr(module, "validate"):
        try:
            module.validate(params)
        except fabric.FabricSpecError as exc:  # a builder's refusal: still the one error type
            raise ScenarioError(str(exc)) from None
    return params


# Which shape parameters each topology reads (build_fabric_graph); a given one
# that the chosen topology does not read would be silently ignored.
SHAPE_KEYS = {
    "leaf_spine": ("leaves", "spines", "hosts_per_leaf"),
    "fat_tree": ("k",),
    "dragonfly": ("groups", "routers_per_group", "global_links_per_router", "hosts_per_leaf"),
    "torus": ("dims", "hosts_per_leaf"),
    "rail_optimized": ("nodes", "gpus_per_node", "spines"),
}


def shape_users(key: str) -> tuple[str, ...]:
    """The topologies that read shape parameter `key` (empty: not a shape parameter)."""
    return tuple(t for t, keys in SHAPE_KEYS.items() if key in keys)


def check_shape_keys(params: dict[str, Any], given) -> None:
    """Refuse a given shape parameter that `params["topology"]` does not use."""
    topology = params.get("topology")
    if topology not in SHAPE_KEYS:
        return  # a scenario with one fixed shape uses every shape parameter it declares
    for key in sorted(given):
        users = shape_users(key)
        if users and topology not in users:
            raise ScenarioError(
                f"parameter {key}: topology={topology} does not use it (it shapes "
                f"{', '.join(users)}); add --set topology={users[0]} or drop {key}"
            )


def describe_params(module) -> str:
    """Every parameter of `module` with its default, range and help (`emu run NAME --help`)."""
    shaped = "topology" in module.PARAMS
    lines = []
    for key, param in module.PARAMS.items():
        users = shape_users(key) if shaped else ()
        lines.append(param.describe(key, users))
    return "\n".join(lines)


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
        lines.append("events (s since start, when each happened)")
        lines += [
            f"  {e['t']:8.3f}  {e['kind']}  "
            + " ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "wall", "kind"))
            for e in ctx.timeline()
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
    documents = ctx.fabrics.documents
    records = fidelity.records_of(documents)
    missing = fidelity.missing_of(documents)
    if not records:
        ctx.check(
            "fidelity: measured",
            False,
            "no fidelity records: the run closed no fabric it opened with ctx.fabric",
            "a record from every switch and NIC of every fabric the run opened",
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
    machine = fidelity.machine_of(documents)
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


def add_underlay_check(ctx: Context, doc: dict, where: str) -> None:
    """The underlay's one-way delay to every server (RTT/2 from here) under one frame
    time of the slowest tunnelled link; a server it could not measure fails it."""
    from emu import servers

    limit = servers.tunnel_delay_limit_s(doc)
    rtts = doc.get("underlay_rtt", {})
    if limit is None or not rtts:
        return
    measured = [(r["avg_ms"], s) for s, r in rtts.items() if r.get("avg_ms") is not None]
    unmeasured = sorted(s for s, r in rtts.items() if r.get("avg_ms") is None)
    worst = max(measured) if measured else None
    one_way_s = None if worst is None else worst[0] / 2e3
    parts = [f"{one_way_s * 1e6:.0f} µs one way to {worst[1]} (RTT/2)"] if worst else []
    parts += [f"no RTT to {s} ({rtts[s].get('error')})" for s in unmeasured]
    ctx.check(
        f"tunnels{where}: the underlay adds less than one frame time",
        not unmeasured and one_way_s is not None and one_way_s < limit,
        "; ".join(parts),
        f"< {limit * 1e6:.0f} µs (a 1514-byte frame at the slowest tunnelled link's rate)",
        fidelity=True,
    )


def add_servers(ctx: Context) -> None:
    """For a fabric over several servers (`servers`): which switch ran where, what
    crossed each tunnel, and two checks that the tunnels kept up (emu/servers.py)."""
    from emu import servers

    for label, doc in ctx.fabrics.servers_documents:
        where = f" ({label})" if label else ""
        if "error" in doc:  # the fabric could not read its servers as it closed
            ctx.check(f"servers{where}: reported", False, doc["error"], "a report", fidelity=True)
            continue
        ctx.table(
            f"servers{where}: which node ran where (emu/placement.py)",
            ["server", "switches", "hosts"],
            servers.placement_rows(doc),
        )
        ctx.table(
            f"tunnels{where} ({doc['tunnel_kind']}): frames by the tunnel devices' counters",
            ["link", "from", "to", "frames in", "frames out", "lost", "mean Mbit/s"],
            servers.tunnel_rows(doc),
        )
        count = servers.tunnels_lost(doc)
        faulted = sorted(t["link"] for t in doc["tunnels"] if t.get("faulted"))
        value = f"{count['lost']} lost in {count['judged']} tunnel directions"
        if count["unjudged"]:
            value += f"; {count['unjudged']} not judged (traffic never paused for a reading)"
        if count["unread"]:
            value += f"; {count['unread']} unread"
        if faulted:
            value += f"; taken down by a fault, not judged: {', '.join(faulted)}"
        ctx.check(
            f"tunnels{where}: every frame sent into a tunnel came out",
            count["lost"] == 0 and count["unread"] == 0 and count["judged"] > 0,
            value,
            "0 lost, every tunnel read (a tunnel stands for a wire)",
            fidelity=True,
        )
        add_underlay_check(ctx, doc, where)
        ctx.metrics.setdefault("servers", []).append(
            {"label": label, **{k: doc[k] for k in ("servers", "switches", "tunnel_kind")},
             "tunnel_frames": servers.tunnel_frames(doc), "tunnels": count, "faulted": faulted,
             "underlay_rtt": doc.get("underlay_rtt", {})}
        )  # fmt: skip


def write_results(ctx: Context) -> None:
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "scenario": ctx.name,
        "params": ctx.params,
        "metrics": ctx.metrics,
        "checks": [asdict(c) for c in ctx.checks],
        "events": ctx.timeline(),
        "plots": ctx.plots,
        "passed": bool(ctx.checks) and all(c.passed for c in ctx.checks),
        "faithful": faithful(ctx),
    }
    (ctx.out_dir / "metrics.json").write_text(json.dumps(doc, indent=2, default=str))
    (ctx.out_dir / "report.txt").write_text(render_report(ctx) + "\n")


def results_dir(name: str, out_dir: str | None = None) -> Path:
    """Where `run` writes scenario `name`'s results: `out_dir`, else results/NAME."""
    return Path(out_dir or f"results/{name}")


def run(
    name: str, overrides: list[str], out_dir: str | None = None, log: Callable[[str], None] = print
) -> Context:
    """Run scenario `name`; returns its context (checks, metrics) after writing results.

    A scenario that raises still writes its results, with a failed check that
    names the error, before the exception propagates.
    """
    module = load(name)
    params = resolve_params(module, overrides)
    out = results_dir(name, out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"--out {out}: {exc.strerror}") from None
    ctx = Context(name=name, params=params, out_dir=out, log=log)
    try:
        module.run(ctx)
    except BaseException as exc:
        ctx.check("scenario completed", False, f"{type(exc).__name__}: {exc}", "no error")
        add_fidelity(ctx)
        add_servers(ctx)
        write_results(ctx)
        raise
    if not ctx.checks:
        ctx.check("scenario produced checks", False, 0, ">= 1 check")
    add_fidelity(ctx)
    add_servers(ctx)
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
    naming the parameter, the items it does not know (or that it is empty) and what it
    may hold."""
    chosen = [x.strip() for x in str(params[key]).split(",") if x.strip()]
    unknown = [x for x in chosen if x not in allowed]
    if unknown or not chosen:
        what = f"unknown {', '.join(unknown)}" if unknown else "empty"
        raise ScenarioError(
            f"parameter {key}={params[key]!r}: {what}; a comma list of {', '.join(allowed)}"
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
            bound=config.HOSTS_PER_SWITCH,
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
            rate_mbps,
            "emulated link rate in Mbit/s (see docs/performance.md); a unit spelling "
            "(20M) or --set rate=20M says the same",
            bound=config.LINK_RATE_BPS,
            scale=1e6,
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
            "(0: the emulated rate itself, time scale 1); also --set modelled_rate=25G",
            bound=config.MODELLED_RATE_BPS,
            scale=1e9,
            off=0.0,
        ),
        "flow_control": Param(
            "pfc",
            "link-level flow control of the lossless class: pfc (802.1Qbb PAUSE) or credit "
            "(InfiniBand-style credits per virtual lane, emu/credit.py)",
            choices=("pfc", "credit"),
        ),
        "extensions": Param(
            "",
            "controller managers beside routing, attached in this order (controllers/"
            "routing_api.py): adaptive (Hedera elephants, re-weighting), tagger (PFC deadlock "
            "prevention); a scenario that picks its own controller per mode adds these to it",
            each=config.ROUTING_EXTENSIONS,
        ),
        "adaptive_routing": Param(
            "",
            "per-packet adaptive routing in every switch for these priorities (3, 0,3 or "
            "all): each packet takes the ECMP port with the fewest bytes queued, a paused "
            "port skipped (emu/switch/adaptive.py); empty: hashing (ECMP)",
            check=_adaptive_classes,
        ),
        "dragonfly_routing": Param(
            "",
            "how a dragonfly routes between groups: minimal (one global hop a path), ugal "
            "(each source router sends each packet minimally or through a third group, "
            "whichever has the least queue x hops; ugal:CLASSES or ugal:CLASSES:BIAS_BYTES), "
            "valiant (always through a third group); empty: routing's shortest paths "
            "(controllers/ugal.py)",
            check=_dragonfly_routing,
        ),
        "seed": Param(0, "base of the per-switch ECMP hash seeds"),
        **host_params(),
        "switch_processes": Param(
            default_switch_processes(),
            "processes that run the switches, one event loop each (0: a process per "
            "switch; the default is this machine's CPU count)",
            min=0,
            max=64,
        ),
        "servers": Param(
            "",
            "run the fabric over these servers: local,NAME[,NAME...] (NAME as ssh knows it; "
            "docs/cluster.md); empty: this machine alone; also --servers",
            check=_servers,
        ),
    }


def _servers(text: str) -> None:
    """`servers` as emu.servers reads it (names only: the servers are checked at the start)."""
    from emu.servers import ServerError, parse_servers

    try:
        parse_servers(text)
    except ServerError as exc:
        raise ValueError(str(exc)) from None


def host_params() -> dict[str, Param]:
    """The hosts' kernel settings among `fabric_params`: their NIC's pacing, their TCP."""
    return {
        "host_nic_pacing": Param(
            True, "hosts' kernels send at their link rate (a tc token bucket), as a real NIC does"
        ),
        "host_tcp_congestion": Param(
            "cubic",
            "hosts' TCP congestion control (cubic: Linux's default; bbr, dctcp, reno, any "
            "this kernel has); empty: the machine's own default",
            check=_tcp_congestion,
        ),
    }


def _tcp_congestion(text: str) -> None:
    """`host_tcp_congestion`: one this kernel has or can load."""
    if text:
        check_tcp_congestion(text)


def _adaptive_classes(text: str) -> None:
    """The classes of `adaptive_routing`, as the switches' extension reads them."""
    if text:
        ofext.classes_mask(text)  # ExtensionError is a ValueError


def _dragonfly_routing(text: str) -> None:
    """`dragonfly_routing` as the controller reads it."""
    if text:
        ofext.parse_dragonfly_routing(text)  # ExtensionError is a ValueError


_FABRIC_PARAMS = fabric_params()


def fabric_options(params: dict[str, Any]) -> dict[str, Any]:
    """The `emu.net.Fabric` arguments that `fabric_params()` set (besides the graph).

    A scenario that declares its own fabric parameters without `flow_control`
    (pfc-deadlock: its point is PFC) runs PFC, the Fabric's default.
    """
    return {
        "seed": params["seed"],
        "switch_processes": params["switch_processes"],
        "host_nic_pacing": params["host_nic_pacing"],
        "host_tcp_congestion": params.get("host_tcp_congestion", "cubic") or None,
        "flow_control": params.get("flow_control", "pfc"),
        "extensions": config.routing_extensions(params.get("extensions", "")),
        "adaptive_routing": params.get("adaptive_routing") or None,
        "dragonfly_routing": params.get("dragonfly_routing") or None,
        "servers": params.get("servers") or None,
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
    if shape == "fat_tree" and params["k"] % 2:
        raise ScenarioError(f"parameter k={params['k']}: a fat-tree needs an even k")
    if shape == "fat_tree":
        kwargs = {"k": params["k"], "rate_bps": rate_bps}
    elif shape == "dragonfly":
        kwargs = {
            "groups": params["groups"],
            "routers_per_group": params["routers_per_group"],
            "hosts_per_router": params["hosts_per_leaf"],
            "global_links_per_router": params["global_links_per_router"],
            "rate_bps": rate_bps,
        }
    elif shape == "torus":
        kwargs = {
            "dims": _torus_dims(params["dims"]),
            "hosts_per_switch": params["hosts_per_leaf"],
            "rate_bps": rate_bps,
        }
    elif shape == "rail_optimized":
        kwargs = {
            "nodes": params["nodes"],
            "gpus_per_node": params["gpus_per_node"],
            "spines": params["spines"],
            "host_rate_bps": rate_bps,
        }
    else:
        kwargs = {
            "leaves": params["leaves"],
            "spines": params["spines"],
            "hosts_per_leaf": params["hosts_per_leaf"],
            "host_rate_bps": rate_bps,
        }
    return fabric_graph(shape, modelled_rate_bps=modelled_rate_bps, **kwargs)


# The builders `fabric_graph` takes by name (emu/fabric/), and how their
# arguments are bounded: each as `--set` and topology files bound it.
BUILDERS = (*TOPOLOGIES, "single_switch")
_COUNT_PARAMS = ("k", "leaves", "spines", "groups", "routers_per_group")
_COUNT_PARAMS += ("global_links_per_router", "nodes", "gpus_per_node")
_HOST_COUNTS = ("hosts_per_leaf", "hosts_per_switch", "hosts_per_router", "hosts")


def fabric_graph(topology: str = "leaf_spine", topo: str | None = None, **kwargs: Any):
    """A fabric from a builder's keyword arguments or a topology file, through the one validator.

    The Python API's (and the pytest marker's) way to a fabric: every argument is
    held to the bound that `--set` and topology files hold it to, with the same
    words, and anything wrong is one ScenarioError.

    Args:
        topology: the builder (`BUILDERS`: leaf_spine, fat_tree, dragonfly,
            torus, rail_optimized, single_switch).
        topo: a topology file (emu/topofile.py) instead of a builder; then
            only `modelled_rate_bps` may be given beside it.
        **kwargs: the builder's own keyword arguments, e.g. leaf_spine's
            leaves, spines, hosts_per_leaf, host_rate_bps, delay_s,
            modelled_rate_bps or time_scale.

    Returns:
        The builder's (or the file's) networkx graph.

    Raises:
        ScenarioError: an unknown topology or argument, or a value out of
            range, in one line naming it.

    Examples:
        >>> fabric_graph("fat_tree", k=4).graph["kind"]
        'fat_tree'
        >>> fabric_graph("fat_tree", leaves=3)
        Traceback (most recent call last):
        ...
        emu.scenario.ScenarioError: topology=fat_tree: unknown argument 'leaves'; allowed: k, rate_bps, rates, delay_s, time_scale, modelled_rate_bps, name
    """
    if topo is not None:
        extra = sorted(set(kwargs) - {"modelled_rate_bps"})
        if extra:
            raise ScenarioError(
                f"topo={topo}: the file decides the fabric's shape and rates; drop {', '.join(extra)}"
            )
        modelled = kwargs.get("modelled_rate_bps")
        if modelled is not None:
            config.MODELLED_RATE_BPS.check("modelled_rate_bps", modelled)
        try:
            return _graph_from_file(str(topo), modelled)
        except TypeError:  # a path that is not a string or path: still one line
            raise ScenarioError(f"topo={topo!r}: expected a file name") from None
    if not isinstance(topology, str) or topology not in BUILDERS:
        raise ScenarioError(f"topology={topology!r}: allowed {', '.join(BUILDERS)}")
    builder = getattr(fabric, topology)
    allowed = list(inspect.signature(builder).parameters)
    for key, value in kwargs.items():
        if key not in allowed:
            raise ScenarioError(
                f"topology={topology}: unknown argument {key!r}; allowed: {', '.join(allowed)}"
            )
        _check_builder_argument(builder, key, value)
    try:
        return builder(**kwargs)
    except fabric.FabricSpecError as exc:
        # The builder names its own argument; say which topology that is.
        raise ScenarioError(f"topology={topology}: {exc}") from None


def _check_builder_argument(builder, key: str, value: Any) -> None:
    """Hold one builder argument to its bound (the same as `--set`'s and the files')."""
    try:
        if not _bounded_argument(key, value):
            _check_like(key, value, inspect.signature(builder).parameters[key].default)
    except ScenarioError:
        raise
    except ConfigError as exc:
        raise ScenarioError(str(exc)) from None


def _bounded_argument(key: str, value: Any) -> bool:
    """Check `key`'s value if emu bounds it (rates, delay, host counts, shapes); whether it did."""
    if key in ("modelled_rate_bps", "time_scale"):
        if value is not None:
            bound = config.MODELLED_RATE_BPS if key == "modelled_rate_bps" else config.TIME_SCALE
            bound.check(key, value)
    elif key.endswith("rate_bps"):
        if value is not None or key == "host_rate_bps":
            config.LINK_RATE_BPS.check(key, value)
    elif key == "rates":
        _check_rates(value)
    elif key == "delay_s":
        config.LINK_DELAY_S.check(key, value)
    elif key in _HOST_COUNTS:
        config.HOSTS_PER_SWITCH.check(key, value)
    elif key in _COUNT_PARAMS:
        _FABRIC_PARAMS[key].validate(key, value)
    elif key == "dims":
        if not isinstance(value, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in value
        ):
            raise ConfigError(f"dims={value!r}: expected 2 or 3 sizes like (3, 3)")
    elif key == "name":
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"name={value!r}: expected a string")
    else:
        return False
    return True


def _check_rates(value: Any) -> None:
    """A builder's `rates`: None, or link tier -> a link rate in bounds."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ConfigError(f"rates={value!r}: expected a mapping of link tier to bit/s")
    for tier, rate in value.items():
        config.LINK_RATE_BPS.check(f"rates[{tier!r}]", rate)


def _check_like(key: str, value: Any, default: Any) -> None:
    """An argument with no bound of its own: of its default's type, and finite."""
    if value is None and default is None:
        return
    if isinstance(default, bool) or isinstance(value, bool):
        if not (isinstance(value, bool) and isinstance(default, bool)):
            raise ConfigError(f"{key}={value!r}: expected true or false")
        return
    if not _finite_ok(value):
        raise ConfigError(f"{key}={value!r}: expected a finite number")
    if isinstance(default, int) and not isinstance(value, int):
        raise ConfigError(f"{key}={value!r}: expected an integer")


def _finite_ok(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:
        return False


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
