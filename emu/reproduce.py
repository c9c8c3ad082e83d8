"""`emu reproduce`: run every scenario the README quotes, several times, and write docs/results.md.

Owns three things:

- `ENTRIES`, the declarative list of what the README quotes: which scenario,
  with which parameters (the README's configuration, and a small `--quick`
  one), and which figures, each a `Figure`: a path into the run's
  `metrics.json["metrics"]` plus, where the README shows a derived number
  (a sum, a ratio, a count), one named operation from `OPS`.
- The pure aggregation of runs (`summarise`): min / median / max of each
  figure over the *faithful* runs only (a run whose fidelity checks failed is
  marked and its figures are left out: DESIGN.md, "a result from an unfaithful
  run is never quoted"), and each check's pass count over the runs, so that an
  unstable check shows. And the markdown (`render_markdown`).
- The thin shell that runs them (`run_once`, `reproduce`): each run is `emu run`
  in a subprocess, so that one crash does not end the reproduction and a run
  that exits non-zero still leaves its metrics.json to read.

It does not own the scenarios, their checks or the fidelity judgement
(`emu/scenario.py`, `emu/fidelity.py`); it only reads what they wrote. Called by
`emu reproduce` (emu/cli.py); tested in tests/unit/test_reproduce.py.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from emu import realtime
from emu.scenario import ScenarioError

# A path into metrics.json["metrics"]: dict keys, list indices (-1 = last), or
# WILDCARD, which maps the rest of the path over every element of a list or
# dict and yields a list.
WILDCARD = "*"

# How long a run that outlived its timeout gets to tear its fabric down after
# SIGTERM (emu run turns TERM into the same unwinding as Ctrl-C) before KILL.
TERM_GRACE_S = 60.0


# ----- the figures the README quotes ----------------------------------------------------


def _numbers(x: Any) -> list[float]:
    """The numbers among a list's items or a dict's values (None and text are skipped)."""
    if isinstance(x, dict):
        x = list(x.values())
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"expected a list or dict, got {type(x).__name__}")
    return [float(v) for v in x if _is_number(v)]


def _share(x: dict, pick: Callable) -> float | None:
    vals = _numbers(x)
    total = sum(vals)
    return pick(vals) / total if vals and total else None


# op -> function of the value at `path` (and, for two-path ops, at `other`).
OPS: dict[str, Callable[..., Any]] = {
    "value": lambda a: a,
    "len": lambda a: len(a),
    "sum": lambda a: sum(_numbers(a)),
    "mean": lambda a: statistics.mean(_numbers(a)) if _numbers(a) else None,
    "min": lambda a: min(_numbers(a)) if _numbers(a) else None,
    "max": lambda a: max(_numbers(a)) if _numbers(a) else None,
    # Largest / smallest member's share of the total (ECMP: bytes per top-tier switch).
    "max_share": lambda a: _share(a, max),
    "min_share": lambda a: _share(a, min),
    "ratio": lambda a, b: a / b if b else None,
    "add": lambda a, b: a + b,
}
TWO_PATH_OPS = ("ratio", "add")


@dataclass(frozen=True)
class Figure:
    """One number the README quotes, and where a run's metrics.json holds it.

    `path` (and `other`, for ratio/add) lead into `metrics.json["metrics"]`;
    `op` names an entry of OPS; the result is multiplied by `scale` (units:
    the label says which). A figure a run did not produce (a mode not run, a
    crash) is None for that run, never an error.
    """

    label: str
    path: tuple
    op: str = "value"
    other: tuple = ()
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(
                f"figure {self.label!r}: op {self.op!r} is not one of {', '.join(OPS)}"
            )
        if (self.op in TWO_PATH_OPS) != bool(self.other):
            raise ValueError(
                f"figure {self.label!r}: op {self.op!r} "
                f"{'needs' if self.op in TWO_PATH_OPS else 'takes no'} `other`"
            )


@dataclass(frozen=True)
class Entry:
    """One configuration the README quotes: a scenario, its parameters, its figures."""

    id: str  # unique; the scenario name, or name-variant
    scenario: str  # what `emu run` takes
    title: str
    full: tuple = ()  # --set overrides of the README's configuration
    quick: tuple = ()  # --set overrides for `--quick` (the scenario tests' sizes)
    figures: tuple = ()
    timeout_s: float = 900.0  # per run, full configuration


def _per(keys: tuple, prefix: tuple, specs: tuple) -> tuple:
    """Figures `{key}: label` for every key at metrics[prefix][key] (modes, variants)."""
    out = []
    for key in keys:
        for label, sub, *rest in specs:
            kw = dict(rest[0]) if rest else {}
            if "other" in kw:
                kw["other"] = prefix + (key,) + kw["other"]
            out.append(Figure(f"{key}: {label}", prefix + (key,) + sub, **kw))
    return tuple(out)


_SMOKE = (
    Figure("converged after (s)", ("converge_s",)),
    Figure("all-pairs ping: pairs", ("ping", "all-pairs ping", "pairs")),
    Figure("all-pairs ping: loss %", ("ping", "all-pairs ping", "loss_pct")),
    Figure("TCP goodput (Mbit/s)", ("tcp", "goodput_bps"), scale=1e-6),
    Figure("TCP on the wire (Mbit/s)", ("tcp", "wire_bps"), scale=1e-6),
    Figure("TCP on the wire / link rate", ("tcp", "wire_bps"), "ratio", ("fabric", "rate_bps")),
    Figure("TCP peak 250 ms window (Mbit/s)", ("tcp", "peak_window_bps"), scale=1e-6),
    Figure("TCP retransmits", ("tcp", "retransmits")),
    Figure("ECMP: largest top-tier switch's share", ("ecmp", "bytes_per_top_switch"), "max_share"),
    Figure("ECMP: smallest top-tier switch's share", ("ecmp", "bytes_per_top_switch"), "min_share"),
    Figure("ECMP: largest first hop's share", ("ecmp", "bytes_per_first_hop"), "max_share"),
    Figure("ECMP: smallest first hop's share", ("ecmp", "bytes_per_first_hop"), "min_share"),
    Figure(
        "link down: longest outage of any sender (ms)",
        ("link_failure", "outage_s"),
        "max",
        scale=1e3,
    ),
    Figure("link down: controller saw it after (ms)", ("controller_reaction_s",), scale=1e3),
    Figure(
        "all-pairs ping after the link failure: loss %",
        ("ping", "all-pairs ping after link failure", "loss_pct"),
    ),
)

_INCAST = (
    ("util", ("utilisation",)),
    ("drops (switch + NIC)", ("switch_drops",), {"op": "add", "other": ("nic_drops",)}),
    ("retransmitted packets", ("retransmitted",)),
    ("PFC frames", ("pfc_frames",)),
    ("paused port-seconds", ("paused_s",), {"op": "sum"}),
    ("CNPs", ("cnps",)),
    ("CE marks", ("ecn_marks",)),
    ("Jain's fairness", ("jain",)),
    ("queue p50 (B)", ("queue_p50_bytes",)),
    ("queue p99 (B)", ("queue_p99_bytes",)),
)

_PAUSE_STORM = (
    ("other flows", ("other_flows",)),
    ("stalled", ("stalled",), {"op": "len"}),
    ("recovered", ("recovered",), {"op": "len"}),
    ("switches PAUSE reached beyond the stuck leaf", ("pause_reached_switches",), {"op": "len"}),
    ("storms detected", ("storm_events",), {"op": "len"}),
    ("detected after (s)", ("detected_after_s",)),
    ("watchdog drops", ("watchdog_drops",)),
)

_MIXED = (
    ("RDMA asks (Mbit/s)", ("rdma_target_bps",), {"scale": 1e-6}),
    ("RDMA gets (Mbit/s)", ("rdma_bps",), {"scale": 1e-6}),
    ("RDMA rate at the end (Mbit/s)", ("rdma_rate_bps",), {"scale": 1e-6}),
    ("TCP (Mbit/s)", ("tcp_bps",), {"scale": 1e-6}),
    ("CNPs to RDMA", ("rdma_cnps",)),
    ("lossless queue peak (KB)", ("lossless_watermark_bytes",), {"scale": 1e-3}),
    ("PFC frames", ("pfc_frames",)),
    ("lossless drops", ("lossless_drops",)),
    ("TCP retransmits", ("tcp_retransmits",)),
)

_ECN = (
    ("util", ("utilisation",)),
    ("queue p50 (B)", ("queue_p50_bytes",)),
    ("queue p99 (B)", ("queue_p99_bytes",)),
    ("CE marks", ("ecn_marks",)),
    ("CNPs", ("cnps",)),
    ("PFC frames", ("pfc_frames",)),
    ("Jain's fairness", ("jain",)),
)

_FAILOVER = (
    ("pairs", ("pairs",)),
    ("worst outage (ms)", ("worst_outage_s",), {"scale": 1e3}),
    ("pings lost", ("lost",)),
    ("pings sent", ("sent",)),
    ("controller saw it after (ms)", ("controller_saw_s",), {"scale": 1e3}),
    ("pairs unreachable at the end", ("unreachable_after",)),
)

_LINK_FLAP = (
    ("damped after (s)", ("damped_after_s",)),
    ("downs", ("flaps",)),
    ("route recomputations", ("recomputations",)),
    ("TCP before (Mbit/s)", ("before_mbps",)),
    ("TCP during (Mbit/s)", ("during_mbps",)),
    ("TCP after (Mbit/s)", ("after_mbps",)),
    ("worst ping outage (ms)", ("worst_outage_s",), {"scale": 1e3}),
    ("stuck flows", ("stuck_flows",)),
    ("switches or controller died", ("dead",), {"op": "len"}),
)

_ALLREDUCE = (
    ("wrong elements (all sizes)", (WILDCARD, "wrong"), {"op": "sum"}),
    ("time at the largest size (us)", (-1, "time_s"), {"scale": 1e6}),
    ("algbw at the largest size (MB/s)", (-1, "algbw_bytes_per_s"), {"scale": 1e-6}),
    ("busbw at the largest size (MB/s)", (-1, "busbw_bytes_per_s"), {"scale": 1e-6}),
    (
        "average busbw over the sizes (MB/s)",
        (WILDCARD, "busbw_bytes_per_s"),
        {"op": "mean", "scale": 1e-6},
    ),
    ("restarts (all sizes)", (WILDCARD, "restarts"), {"op": "sum"}),
)

_LIVELOCK = (
    ("goodput (Mbit/s)", ("goodput_bps",), {"scale": 1e-6}),
    ("goodput / payload line rate", ("line_share",)),
    ("messages completed", ("messages_completed",)),
    ("frames sent", ("tx_packets",)),
    ("link busy", ("link_busy",)),
    ("frames lost", ("lost_frames",)),
    ("NAKs", ("naks",)),
    ("timeouts", ("timeouts",)),
    ("frames resent", ("retransmitted",)),
    ("frames resent per loss", ("resent_per_loss",)),
    ("discarded at the receiver", ("rx_discarded_packets",)),
)

_CREDIT_MODES = ("pfc", "dcqcn", "credit", "pfc-2class", "credit-2vl")
_CREDIT = (
    *(
        (f"{h} goodput (Mbit/s)", ("goodput_bps", h), {"scale": 1e-6})
        for h in ("h1", "h2", "h5", "h6")
    ),
    ("incast goodput (Mbit/s)", ("incast_bps",), {"scale": 1e-6}),
    ("victim goodput (Mbit/s)", ("victim_bps",), {"scale": 1e-6}),
    ("bottleneck queue p50 (B)", ("queue_p50_bytes",)),
    ("bottleneck queue max (B)", ("queue_max_bytes",)),
    ("paused / blocked port-seconds", ("stalled_s",), {"op": "sum"}),
    ("drops (switch + NIC)", ("switch_drops",), {"op": "add", "other": ("nic_drops",)}),
    ("PAUSE frames on the captured links", ("wire", WILDCARD, "pause"), {"op": "sum"}),
    ("credit frames on the captured links", ("wire", WILDCARD, "flow_control"), {"op": "sum"}),
    ("CNPs", ("cnps",)),
)
# Only the credit modes replay their pcaps against the credit advertised.
_CREDIT_AUDIT = (
    ("frames checked against the credit", ("audit", WILDCARD, "checked"), {"op": "sum"}),
    ("credit violations", ("audit", WILDCARD, "violations"), {"op": "sum"}),
)


def _victim_slowdown(mode: str) -> Figure:
    """The victim's max-min share (its line rate's payload) over what it got."""
    return Figure(
        f"{mode}: victim slowdown (x)",
        ("line_goodput_bps",),
        "ratio",
        ("modes", mode, "victim_bps"),
    )


_DEADLOCK = (
    ("formed after (s)", ("formed_after_s",)),
    ("switches on the wait-for cycle", ("cycle_switches",), {"op": "len"}),
    ("ring ingress queues full to XOFF", ("above_xoff",), {"op": "len"}),
    ("bytes received after it formed (all flows)", ("bytes_formed",), {"op": "sum"}),
    ("bytes received after the senders stopped (all flows)", ("bytes_stopped",), {"op": "sum"}),
    ("ring frames sent after the senders stopped", ("ring_tx_stopped",)),
    ("fewest PAUSE refreshes of a switch on the cycle", ("pause_refreshed",), {"op": "min"}),
    ("hosts paused by their switch", ("hosts_paused",), {"op": "len"}),
    (
        "watchdog: storm declared after it was on (s)",
        ("storms_on_cycle", WILDCARD, "after_s"),
        {"op": "min"},
    ),
    ("watchdog: frames dropped", ("watchdog_drops",)),
    ("watchdog on: fewest bytes a flow received (B)", ("bytes_recovered",), {"op": "min"}),
    ("watchdog on: most bytes a flow received (B)", ("bytes_recovered",), {"op": "max"}),
)

_TAGGER = (
    ("wait-for cycles seen", ("cycles_seen",), {"op": "len"}),
    ("storms (watchdog alert only)", ("storms",)),
    ("slowest flow (Mbit/s)", ("goodput_bps",), {"op": "min", "scale": 1e-6}),
    ("fastest flow (Mbit/s)", ("goodput_bps",), {"op": "max", "scale": 1e-6}),
    ("last flow done after (s)", ("done_at_s",), {"op": "max"}),
    ("RTO timeouts (all flows)", ("timeouts",), {"op": "sum"}),
    ("packets through Tagger's rules", ("tagged_packets",), {"op": "sum"}),
)

_RAIL_PARTS = (
    "rail-aligned ring",
    "crossing ring",
    "flat ring",
    "hierarchical",
    "all-to-all without PXN",
    "all-to-all with PXN",
)
_RAIL = (
    ("crossing hops / pairs", ("hops",)),
    ("spines: model (B)", ("model_frame_bytes",)),
    ("spines received (B)", ("spine_rx_bytes",)),
    ("NVSwitches: model (B)", ("model_nvlink_frame_bytes",)),
    ("NVSwitches received (B)", ("nvswitch_rx_bytes",)),
    ("time (ms)", ("time_s",), {"scale": 1e3}),
)
# Received over model where the model is not 0 (elsewhere the check compares
# against the crossing counterpart, and the README quotes the bytes).
_RAIL_ON_SPINES = ("crossing ring", "flat ring", "all-to-all without PXN")
_RAIL_ON_NVSWITCHES = ("hierarchical", "all-to-all with PXN")
_RAIL_NVLINK = (
    ("network part (ms)", ("wire_s",), {"scale": 1e3}),
    ("NVLink part (ms)", ("nvlink_s",), {"scale": 1e3}),
    ("NVLink link time, model (ms)", ("nvlink_model_s",), {"scale": 1e3}),
)


def _rail_optimized() -> tuple:
    parts = ("parts",)
    figures = _per(_RAIL_PARTS, parts, _RAIL)
    figures += tuple(
        Figure(
            f"{p}: spines received / model",
            parts + (p, "spine_rx_bytes"),
            "ratio",
            parts + (p, "model_frame_bytes"),
        )
        for p in _RAIL_ON_SPINES
    )
    figures += tuple(
        Figure(
            f"{p}: NVSwitches received / model",
            parts + (p, "nvswitch_rx_bytes"),
            "ratio",
            parts + (p, "model_nvlink_frame_bytes"),
        )
        for p in _RAIL_ON_NVSWITCHES
    )
    figures += _per(_RAIL_ON_NVSWITCHES, parts, _RAIL_NVLINK)
    figures += _per(
        ("all-to-all without PXN", "all-to-all with PXN"),
        ("alltoall_floor_s",),
        (("NIC-link floor (ms)", (), {"scale": 1e3}),),
    )
    figures += _per(
        ("flat ring", "hierarchical"),
        ("allreduce",),
        (
            ("algbw (MB/s)", ("algbw_bytes_per_s",), {"scale": 1e-6}),
            ("busbw (MB/s)", ("busbw_bytes_per_s",), {"scale": 1e-6}),
        ),
    )
    return figures + (Figure("wrong elements (all parts)", parts + (WILDCARD, "wrong"), "sum"),)


_STRAGGLER_FACTORS = ("1.0", "1.5", "2.0", "3.0", "4.0")
_EVA_PATTERNS = ("stride4", "stride8", "random")


def _straggler(algo: str) -> tuple:
    return tuple(
        Figure(f"{algo}: iteration at s={float(s):g} (ms)", ("measured_s", algo, s), scale=1e3)
        for s in _STRAGGLER_FACTORS
    ) + (Figure(f"{algo}: T_comm (ms)", ("t_comm_s", algo), scale=1e3),)


def _eva(pattern: str) -> tuple:
    out = []
    for mode in ("ecmp", "adaptive"):
        out += [
            Figure(f"{pattern}: {mode}, mean over seeds", ("mean_normalised", mode, pattern)),
            Figure(f"{pattern}: {mode}, lowest seed", ("normalised", mode, pattern), "min"),
            Figure(f"{pattern}: {mode}, highest seed", ("normalised", mode, pattern), "max"),
        ]
    out.append(
        Figure(
            f"{pattern}: adaptive / ecmp",
            ("mean_normalised", "adaptive", pattern),
            "ratio",
            ("mean_normalised", "ecmp", pattern),
        )
    )
    return tuple(out)


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "smoke",
        "smoke",
        "smoke on a leaf/spine (2 spines, 4 leaves, 8 hosts)",
        full=(),
        quick=("hosts_per_leaf=1", "iperf_s=4"),
        figures=_SMOKE,
        timeout_s=600,
    ),
    Entry(
        "smoke-fat-tree",
        "smoke",
        "smoke on a k=4 fat-tree (What a run looks like)",
        full=("topology=fat_tree", "k=4"),
        quick=("topology=fat_tree", "k=4", "iperf_s=3", "ping_count=1"),
        figures=_SMOKE,
        timeout_s=900,
    ),
    Entry(
        "incast",
        "incast",
        "incast: lossy vs PFC vs PFC + ECN/DCQCN",
        figures=_per(("lossy", "pfc", "dcqcn"), ("modes",), _INCAST),
        timeout_s=600,
    ),
    Entry(
        "credit-vs-pfc",
        "credit-vs-pfc",
        "credit-vs-pfc: an incast and a victim flow, PFC vs DCQCN vs credits",
        quick=("duration_s=5", "warmup_s=1.5"),
        figures=(Figure("victim's max-min share (Mbit/s)", ("line_goodput_bps",), scale=1e-6),)
        + sum(
            (_per((m,), ("modes",), _CREDIT) + (_victim_slowdown(m),) for m in _CREDIT_MODES),
            (),
        )
        + _per(("credit", "credit-2vl"), ("modes",), _CREDIT_AUDIT),
        timeout_s=900,
    ),
    Entry(
        "pause-storm",
        "pause-storm",
        "pause-storm: watchdog off vs on",
        figures=_per(("off", "on"), ("modes",), _PAUSE_STORM),
        timeout_s=600,
    ),
    Entry(
        "livelock",
        "livelock",
        "livelock: 1 RoCEv2 packet in 256 lost, go-back-N vs go-back-0",
        quick=("duration_s=5",),
        figures=_per(("go-back-n", "go-back-0"), ("modes",), _LIVELOCK),
        timeout_s=600,
    ),
    Entry(
        "pfc-deadlock",
        "pfc-deadlock",
        "pfc-deadlock: a ring of clockwise routes, the watchdog and Tagger",
        quick=("recover_s=5",),
        figures=_per(("deadlock",), ("modes",), _DEADLOCK) + _per(("tagger",), ("modes",), _TAGGER),
        timeout_s=600,
    ),
    Entry(
        "mixed-traffic",
        "mixed-traffic",
        "mixed-traffic: TCP on the RDMA class by mistake",
        figures=_per(("correct", "misconfigured"), ("variants",), _MIXED),
        timeout_s=600,
    ),
    Entry(
        "ecn-thresholds",
        "ecn-thresholds",
        "ecn-thresholds: training- vs storage-tuned",
        figures=_per(("training", "storage"), ("variants",), _ECN),
        timeout_s=600,
    ),
    Entry(
        "failover",
        "failover",
        "failover: link, switch and controller failures",
        figures=_per(("link", "switch", "controller"), ("failures",), _FAILOVER),
        timeout_s=600,
    ),
    Entry(
        "link-flap",
        "link-flap",
        "link-flap: a spine link flapping under load, static vs adaptive",
        quick=("flap_s=10",),
        figures=_per(("static", "adaptive"), ("modes",), _LINK_FLAP),
        timeout_s=900,
    ),
    Entry(
        "sharp-allreduce",
        "sharp-allreduce",
        "sharp-allreduce: ring vs in-network aggregation",
        quick=("sizes=1K:4M", "factor=4"),
        figures=(
            Figure("ranks", ("ranks",)),
            Figure("largest size (B)", ("results", "ring", -1, "size_bytes")),
        )
        + _per(("ring", "sharp"), ("results",), _ALLREDUCE)
        + (
            Figure(
                "ring: busbw / link RoCE goodput at the largest size",
                ("results", "ring", -1, "busbw_bytes_per_s"),
                "ratio",
                ("goodput_bps",),
                scale=8,
            ),
            Figure(
                "sharp / ring algbw at the largest size",
                ("results", "sharp", -1, "algbw_bytes_per_s"),
                "ratio",
                ("results", "ring", -1, "algbw_bytes_per_s"),
            ),
        ),
        timeout_s=1200,
    ),
    Entry(
        "straggler",
        "straggler",
        "straggler: iteration time against the slowdown",
        quick=("factors=1,2,4", "iters=2", "compute_s=0.4"),
        figures=_straggler("ring") + _straggler("sharp"),
        timeout_s=1200,
    ),
    Entry(
        "ecmp-vs-adaptive",
        "ecmp-vs-adaptive",
        "ecmp-vs-adaptive: Hedera's patterns on a k=4 fat-tree",
        full=("patterns=stride4,stride8,random", "modes=ecmp,adaptive"),
        quick=(
            "patterns=stride4,stride8,random",
            "modes=ecmp,adaptive",
            "seeds=1",
            "min_gain=1.25",
        ),
        figures=sum((_eva(p) for p in _EVA_PATTERNS), ()),
        timeout_s=3600,
    ),
    Entry(
        "rail-optimized",
        "rail-optimized",
        "rail-optimized: where a collective's bytes go on a rail fabric",
        quick=("size=128K", "a2a_size=16K"),
        figures=_rail_optimized(),
        timeout_s=600,
    ),
)


# ----- reading one run ------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def lookup(data: Any, path: tuple) -> Any:
    """The value at `path` in `data`, or None where the path does not lead anywhere.

    Examples:
        >>> lookup({"a": [{"b": 1}, {"b": 2}]}, ("a", -1, "b"))
        2
        >>> lookup({"a": [{"b": 1}, {"b": 2}]}, ("a", "*", "b"))
        [1, 2]
        >>> lookup({"a": 1}, ("nope",)) is None
        True
    """
    for i, key in enumerate(path):
        if key == WILDCARD:
            if isinstance(data, dict):
                items = list(data.values())
            elif isinstance(data, (list, tuple)):
                items = list(data)
            else:
                return None
            found = [lookup(x, path[i + 1 :]) for x in items]
            return [x for x in found if x is not None]
        if isinstance(data, dict) and not isinstance(key, int):
            data = data.get(key)
        elif (
            isinstance(data, (list, tuple))
            and isinstance(key, int)
            and -len(data) <= key < len(data)
        ):
            data = data[key]
        else:
            return None
        if data is None:
            return None
    return data


def extract(metrics: dict, fig: Figure) -> float | None:
    """The figure's number in one run's `metrics.json["metrics"]`, or None if it has none."""
    a = lookup(metrics, fig.path)
    if a is None:
        return None
    args = [a]
    if fig.other:
        b = lookup(metrics, fig.other)
        if b is None:
            return None
        args.append(b)
    try:
        value = OPS[fig.op](*args)
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # a value of another shape than the figure expects: no number
    if not _is_number(value):
        return None
    return float(value) * fig.scale


@dataclass
class RunRecord:
    """What one `emu run` left: its exit status and metrics.json (None if it wrote none)."""

    index: int  # 1-based
    out_dir: str
    exit_code: int | None  # None: killed after its timeout
    doc: dict | None
    seconds: float = 0.0
    note: str = ""  # why there is no doc, or that it timed out

    @property
    def faithful(self) -> bool:
        """The run's own verdict (emu/scenario.py); no metrics.json is not faithful."""
        return bool(self.doc) and self.doc.get("faithful") is True

    @property
    def checks(self) -> list[dict]:
        return list(self.doc.get("checks", [])) if self.doc else []


def read_metrics(out_dir: Path) -> tuple[dict | None, str]:
    """metrics.json in `out_dir`, or None and why not."""
    path = Path(out_dir) / "metrics.json"
    if not path.exists():
        return None, f"no metrics.json in {out_dir}"
    try:
        return json.loads(path.read_text()), ""
    except (OSError, ValueError) as exc:
        return None, f"{path}: unreadable ({exc})"


# ----- aggregating runs -----------------------------------------------------------------


@dataclass
class FigureStats:
    """One figure over the faithful runs that produced it."""

    label: str
    values: list[float]  # one per faithful run that has the figure
    faithful_runs: int  # the denominator: faithful runs of the entry
    # (run index, value) of the unfaithful runs: shown apart, never in min/median/max.
    left_out: list = field(default_factory=list)

    @property
    def min(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def max(self) -> float | None:
        return max(self.values) if self.values else None


@dataclass
class CheckCount:
    """How often one check passed: over every run with metrics.json, and over the faithful ones."""

    name: str
    fidelity: bool
    passed: int = 0
    runs: int = 0
    passed_faithful: int = 0
    runs_faithful: int = 0
    absent: int = 0  # runs with metrics.json that lack this check (count as failed)


@dataclass
class EntrySummary:
    entry: Entry
    overrides: tuple
    runs: list[RunRecord]
    figures: list[FigureStats]
    checks: list[CheckCount]
    plot_run: RunRecord | None  # the run whose plots the doc shows
    plots: list[str] = field(default_factory=list)  # file names relative to the doc

    @property
    def faithful_runs(self) -> list[RunRecord]:
        return [r for r in self.runs if r.faithful]


def count_checks(runs: list[RunRecord]) -> list[CheckCount]:
    """Each check's pass count, in the order the checks first appear."""
    counts: dict[str, CheckCount] = {}
    with_doc = [r for r in runs if r.doc is not None]
    for r in with_doc:
        for c in r.checks:
            counts.setdefault(c["name"], CheckCount(c["name"], bool(c.get("fidelity"))))
    for r in with_doc:
        by_name = {c["name"]: c for c in r.checks}
        for name, cc in counts.items():
            c = by_name.get(name)
            ok = bool(c and c.get("passed"))
            cc.runs += 1
            cc.passed += ok
            cc.absent += c is None
            if r.faithful:
                cc.runs_faithful += 1
                cc.passed_faithful += ok
    return list(counts.values())


def choose_plot_run(runs: list[RunRecord]) -> RunRecord | None:
    """The last faithful run with plots, else the last run with plots."""
    with_plots = [r for r in runs if r.doc and r.doc.get("plots")]
    faithful = [r for r in with_plots if r.faithful]
    return (faithful or with_plots or [None])[-1]


def summarise(entry: Entry, overrides: tuple, runs: list[RunRecord]) -> EntrySummary:
    """Min/median/max of every figure over the faithful runs; check pass counts over all."""
    good = [r for r in runs if r.faithful]
    bad = [r for r in runs if r.doc is not None and not r.faithful]
    figures = []
    for fig in entry.figures:
        values = [
            v for v in (extract(r.doc.get("metrics", {}), fig) for r in good) if v is not None
        ]
        left_out = [
            (r.index, v)
            for r, v in ((r, extract(r.doc.get("metrics", {}), fig)) for r in bad)
            if v is not None
        ]
        figures.append(FigureStats(fig.label, values, len(good), left_out))
    return EntrySummary(
        entry, tuple(overrides), list(runs), figures, count_checks(runs), choose_plot_run(runs)
    )


def overall(summaries: list[EntrySummary]) -> str:
    """'passed' (every check of every run), 'unfaithful' (only fidelity checks failed), 'failed'."""
    runs = [r for s in summaries for r in s.runs]
    if all(r.doc and r.doc.get("passed") is True for r in runs):
        return "passed"
    if all(r.doc and all(c.get("passed") for c in r.checks if not c.get("fidelity")) for r in runs):
        return "unfaithful"
    return "failed"


# ----- the markdown ---------------------------------------------------------------------


def fmt(value: float | None) -> str:
    """Three significant digits, integers as integers, '—' for no value."""
    if value is None:
        return "—"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def fidelity_row(run: RunRecord) -> list[str]:
    """One run's line of the fidelity table: exit, faithful, worst on-time, stall, drops."""
    exit_text = "timed out" if run.exit_code is None else str(run.exit_code)
    if run.doc is None:
        return [
            str(run.index),
            exit_text,
            "**no** (no metrics.json)",
            "—",
            "—",
            "—",
            "—",
            "—",
            f"{run.seconds:.0f}",
        ]
    checks = run.checks
    passed = f"{sum(bool(c.get('passed')) for c in checks)}/{len(checks)}"
    fid = run.doc.get("metrics", {}).get("fidelity")
    faithful = "yes" if run.faithful else "**no**"
    if not fid:
        return [
            str(run.index),
            exit_text,
            faithful + " (no fidelity record)",
            passed,
            "—",
            "—",
            "—",
            "—",
            f"{run.seconds:.0f}",
        ]
    worst = fid.get("worst", {})

    def at(measure: str, text: Callable[[float], str]) -> str:
        w = worst.get(measure)
        if not w:
            return "—"
        mark = "" if w.get("passed", True) else " **over the limit**"
        return f"{text(w['value'])} at {w['where']}{mark}"

    return [
        str(run.index),
        exit_text,
        faithful,
        passed,
        at("on_time", lambda v: f"{v:.2%}"),
        at("stall", lambda v: f"{v:g} frame times"),
        at("kernel_drops", lambda v: f"{v:g}"),
        machine_cell(fid),
        f"{run.seconds:.0f}",
    ]


def machine_cell(fid: dict) -> str:
    """The whole machine over the run's fabrics: idle CPU, CPU pressure (PSI), steal."""
    parts = []
    if fid.get("idle_share") is not None:
        parts.append(f"idle {fid['idle_share']:.0%}")
    if fid.get("cpu_pressure_share") is not None:
        parts.append(f"waited {fid['cpu_pressure_share']:.0%}")
    parts.append(f"steal {fid.get('steal_s', 0.0) * 1e3:.0f} ms")
    return ", ".join(parts)


def _plot_name(entry: Entry, name: str) -> str:
    """A plot's file name in the doc's directory: prefixed with the entry, unique per entry."""
    stem = Path(name).name
    if stem.startswith(entry.scenario):
        return entry.id + stem[len(entry.scenario) :]
    return f"{entry.id}-{stem}"


def _measured_line(commit: str, date: str, command: str) -> str:
    """A section's own provenance: sections of a merged doc come from different runs."""
    return f"Measured at {commit} on {date}: `{command}`."


def render_entry(s: EntrySummary, plots_dir_name: str, measured: str = "") -> list[str]:
    e = s.entry
    sets = " ".join(f"--set {shlex.quote(o)}" for o in s.overrides)
    good = s.faithful_runs
    lines = [
        f"## {e.title}",
        "",
        *([measured, ""] if measured else []),
        f"`emu run {e.scenario}{' ' + sets if sets else ''}`: {len(s.runs)} run(s), "
        f"{len(good)} faithful.",
        "",
    ]
    bad = [r for r in s.runs if not r.faithful]
    if bad:
        lines += [
            "Left out of the figures (unfaithful, or no metrics.json): "
            + ", ".join(f"run {r.index}" for r in bad)
            + ".",
            "",
        ]
    lines += _table(
        ["figure", "min", "median", "max", "runs", "unfaithful runs (not quoted)"],
        [
            [
                f.label,
                fmt(f.min),
                fmt(f.median),
                fmt(f.max),
                f"{len(f.values)}/{f.faithful_runs}",
                ", ".join(f"run {i}: {fmt(v)}" for i, v in f.left_out) or "—",
            ]
            for f in s.figures
        ],
    )
    lines += ["", "Checks (passed / runs; a check missing from a run counts as failed):", ""]
    rows = []
    for c in s.checks:
        all_runs = f"{c.passed}/{c.runs} passed" + (f" (absent in {c.absent})" if c.absent else "")
        rows.append(
            [c.name, all_runs, f"{c.passed_faithful}/{c.runs_faithful}" if c.runs_faithful else "—"]
        )
    lines += _table(["check", "all runs", "faithful runs"], rows) if rows else ["(no checks)"]
    lines += ["", "Fidelity per run (emu/fidelity.py; worst process or port of the run):", ""]
    lines += _table(
        [
            "run",
            "exit",
            "faithful",
            "checks passed",
            "worst on-time share",
            "longest stall",
            "worst kernel drops",
            "machine (CPUs idle, some task waited for a CPU, steal)",
            "time s",
        ],
        [fidelity_row(r) for r in s.runs],
    )
    notes = [f"run {r.index}: {r.note}" for r in s.runs if r.note]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if s.plots and s.plot_run:
        which = f"run {s.plot_run.index}" + ("" if s.plot_run.faithful else ", unfaithful")
        lines += ["", f"Plots ({which}):", ""]
        lines += [f"![{e.id}: {name}]({plots_dir_name}/{name})" for name in s.plots]
    return lines + [""]


def render_markdown(info: dict, summaries: list[EntrySummary], plots_dir_name: str) -> str:
    """docs/results.md: the header (commit, machine, date, command), then each entry.

    `info` holds "commit", "dirty", "machine" (from `machine_info()`), "date",
    "command", "runs" and "quick".
    """
    m = info["machine"]
    commit = f"`{info['commit']}`" + (
        " (dirty: the tree had uncommitted changes)" if info.get("dirty") else ""
    )
    runs = f"{info['runs']} per configuration"
    if info.get("quick"):
        runs += " (`--quick`: small parameters, not the README's configuration)"
    lines = [
        "# Reproduced figures",
        "",
        "Written by `emu reproduce` (emu/reproduce.py): every figure the README quotes, "
        "measured again. Do not edit by hand; run the command below.",
        "",
    ]
    lines += [
        f"- commit: {commit}",
        f"- machine: {m['cores']} cores, {m['cpu']}, kernel {m['kernel']}, {m['memory']} memory",
        f"- date: {info['date']}",
        f"- command: `{info['command']}`",
        f"- scheduling of switches and NIC agents: {info.get('scheduling', 'not recorded')}",
        f"- runs: {runs}",
    ]
    lines += [
        "",
        "Each figure is the min, median and max over the **faithful** runs only: a run "
        "whose fidelity checks failed (the emulator fell behind its links' clocks, "
        "emu/fidelity.py) is marked **no** below and its figures are left out, because "
        "a result from an unfaithful run is never quoted. `runs` says how many faithful "
        "runs gave the figure; the last column shows what the unfaithful runs measured, "
        "for diagnosis only. Check pass counts cover every run that wrote "
        "metrics.json, and separately the faithful ones.",
        "",
    ]
    lines += [
        "| configuration | runs | faithful | every check passed |",
        "| --- | --- | --- | --- |",
    ]
    for s in summaries:
        passed = sum(1 for r in s.runs if r.doc and r.doc.get("passed") is True)
        lines.append(
            f"| [{s.entry.id}](#{_anchor(s.entry.title)}) | {len(s.runs)} | "
            f"{len(s.faithful_runs)} | {passed} |"
        )
    lines.append("")
    measured = _measured_line(commit, info["date"], info["command"])
    for s in summaries:
        lines += render_entry(s, plots_dir_name, measured)
    return "\n".join(lines)


_SUMMARY_ROW = re.compile(r"^\| \[([A-Za-z0-9_-]+)\]\(#[^)]*\) \| \d+ \| \d+ \| \d+ \|$", re.M)
_MEASURED = re.compile(r"^Measured at (`[0-9a-f]+`(?: \(dirty[^)]*\))?) on ", re.M)
MERGED_NOTE = (
    "- merged: configurations this command did not run keep the figures of an earlier "
    "reproduction; every section names the commit, date and command it was measured with"
)


def _split_doc(text: str) -> tuple[str, dict]:
    """(header, {title: section}) of a doc render_markdown wrote."""
    head, *sections = re.split(r"^## ", text, flags=re.M)
    return head, {sec.partition("\n")[0].strip(): "## " + sec for sec in sections}


def merge_results(old: str, new: str, entries: tuple | None = None) -> str:
    """`new` (a run of some configurations) over `old` (docs/results.md as it was).

    The sections and summary rows of what `new` ran replace `old`'s; the others
    stay, each stamped with the commit, date and command of the reproduction
    that measured it (from `old`'s header when its section does not say).

    Raises:
        ValueError: either text is not one render_markdown wrote.
    """
    entries = ENTRIES if entries is None else entries
    for text in (old, new):
        parse_results(text, entries)  # ValueError when not ours
    old_head, old_secs = _split_doc(old)
    new_head, new_secs = _split_doc(new)

    def field(name: str) -> str:
        m = re.search(rf"^- {name}: (.*)$", old_head, re.M)
        return m.group(1) if m else "?"

    old_measured = _measured_line(field("commit"), field("date"), field("command").strip("`"))
    rows = {m.group(1): m.group(0) for m in _SUMMARY_ROW.finditer(old_head)}
    rows.update({m.group(1): m.group(0) for m in _SUMMARY_ROW.finditer(new_head)})
    sections = []
    for e in entries:
        if e.title in new_secs:
            sections.append(new_secs[e.title])
        elif e.title in old_secs:
            sec = old_secs[e.title]
            if not _MEASURED.search(sec):
                title, _, rest = sec.partition("\n")
                sec = f"{title}\n\n{old_measured}\n{rest}"
            sections.append(sec)
    table = "\n".join(rows[e.id] for e in entries if e.id in rows)
    head = _SUMMARY_ROW.sub("", new_head)
    head = re.sub(
        r"(\| --- \| --- \| --- \| --- \|\n)\n*", lambda m: m.group(1) + table + "\n\n", head
    )
    head = re.sub(
        r"^(- runs: .*)$", lambda m: m.group(1) + "\n" + MERGED_NOTE, head, count=1, flags=re.M
    )
    return head + "".join(sections)


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


# ----- the README's copies -----------------------------------------------------------------

# A table copied from docs/results.md sits between these markers, in README.md
# or in a page of the docs site (docs/scenarios.md holds the scenarios'); `emu
# reproduce --update-readme` rewrites every block's body and a test checks them.
README_BLOCK = re.compile(
    r"<!-- reproduced:(?P<id>[A-Za-z0-9_-]+) -->\n(?P<body>.*?)"
    r"<!-- /reproduced -->",
    re.S,
)
_FIGURE_HEADER = "| figure | min | median | max | runs |"


@dataclass
class ResultsDoc:
    """What the README copies from docs/results.md: the commit and each entry's figures."""

    commit: str
    runs: dict = field(default_factory=dict)  # entry id -> (runs, faithful, all passed)
    commits: dict = field(default_factory=dict)  # entry id -> its section's commit, if it names one
    figures: dict = field(default_factory=dict)  # entry id -> [[label, min, median, max, runs]]


def parse_results(text: str, entries: tuple | None = None) -> ResultsDoc:
    """Read docs/results.md as `render_markdown` writes it.

    Raises:
        ValueError: no commit line (not a file this module wrote).
    """
    m = re.search(r"^- commit: `([0-9a-f]+)`(.*)$", text, re.M)
    if m is None:
        raise ValueError("no '- commit: `...`' line: not written by emu reproduce")
    doc = ResultsDoc(m.group(1) + (" (dirty)" if "dirty" in m.group(2) else ""))
    for m in re.finditer(
        r"^\| \[([A-Za-z0-9_-]+)\]\(#[^)]*\) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M
    ):
        doc.runs[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    by_title = {e.title: e.id for e in (ENTRIES if entries is None else entries)}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        entry_id = by_title.get(title.strip())
        if entry_id is None:
            continue
        measured = _MEASURED.search(body)
        if measured:
            c = re.match(r"`([0-9a-f]+)`(.*)", measured.group(1))
            doc.commits[entry_id] = c.group(1) + (" (dirty)" if "dirty" in c.group(2) else "")
        rows, in_table = [], False
        for line in body.splitlines():
            if line.startswith(_FIGURE_HEADER):
                in_table = True
            elif in_table and line.startswith("| ---"):
                continue
            elif in_table and line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                rows.append(cells[:5])
            elif in_table:
                break
        doc.figures[entry_id] = rows
    return doc


def quoting_pages(readme: str | Path, results: str | Path) -> list[Path]:
    """The pages whose blocks quote `results`: `readme`, then each docs/*.md beside it with one.

    docs/ is the folder beside `readme`; `results` itself is not a page that
    quotes, and docs/runs/ (evidence, not prose) is not searched.
    """
    readme = Path(readme)
    pages = [readme]
    docs = readme.parent / "docs"
    skip = Path(results).resolve()
    for page in sorted(docs.glob("*.md")) if docs.is_dir() else ():
        if page.resolve() != skip and "<!-- reproduced:" in page.read_text():
            pages.append(page)
    return pages


def results_link(page: str | Path, results: str | Path) -> str:
    """How `page` links to `results`: a relative path, as GitHub and MkDocs both resolve it."""
    rel = os.path.relpath(Path(results).resolve(), Path(page).resolve().parent)
    return rel.replace(os.sep, "/")


def readme_block(doc: ResultsDoc, entry_id: str, link: str = "docs/results.md") -> str:
    """The body of a block for `entry_id`: where from, then median and range.

    `link` is docs/results.md as the page holding the block reaches it
    (`results_link`): docs/results.md from the README, results.md from docs/.
    """
    entry = next(e for e in ENTRIES if e.id == entry_id)
    runs, faithful, passed = doc.runs.get(entry_id, (0, 0, 0))
    commit = doc.commits.get(entry_id, doc.commit)
    lines = [
        f"Reproduced at `{commit}` by `emu reproduce`: {runs} runs, {faithful} "
        f"faithful, every check passed in {passed}. Median and range over the faithful "
        f"runs; every run, check and plot in "
        f"[docs/results.md]({link}#{_anchor(entry.title)}).",
        "",
    ]
    rows = doc.figures.get(entry_id, [])
    if not any(r[2] != "—" for r in rows):
        return "\n".join(lines + ["No faithful run: no figure to quote.", ""])
    lines += ["| figure | median | min .. max | runs |", "| --- | ---: | --- | --- |"]
    for label, lo, med, hi, n in rows:
        lines.append(f"| {label} | {med} | {lo} .. {hi} | {n} |")
    return "\n".join(lines + [""])


def update_readme(
    readme: str, results: str, link: str = "docs/results.md"
) -> tuple[str, list[str]]:
    """Rewrite every block of a page from `results`; returns the new text and the unknown ids.

    `readme` is the text of README.md or of any page that quotes (`quoting_pages`);
    `link` is how that page reaches docs/results.md (`results_link`).
    """
    doc = parse_results(results)
    ids = {e.id for e in ENTRIES}
    unknown = []

    def body(m: re.Match) -> str:
        if m.group("id") not in ids:
            unknown.append(m.group("id"))
            return m.group(0)
        return (
            f"<!-- reproduced:{m.group('id')} -->\n{readme_block(doc, m.group('id'), link)}"
            "<!-- /reproduced -->"
        )

    return README_BLOCK.sub(body, readme), unknown


def readme_problems(readme: str, results: str, link: str = "docs/results.md") -> list[str]:
    """Blocks of a page that differ from what docs/results.md says (empty: the page matches it)."""
    fresh, unknown = update_readme(readme, results, link)
    problems = [f"block reproduced:{i}: no such configuration" for i in unknown]
    old = {m.group("id"): m.group("body") for m in README_BLOCK.finditer(readme)}
    new = {m.group("id"): m.group("body") for m in README_BLOCK.finditer(fresh)}
    problems += [
        f"block reproduced:{i} differs from docs/results.md (run emu reproduce --update-readme)"
        for i in old
        if old[i] != new.get(i)
    ]
    return problems


# ----- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    entries: tuple  # of Entry
    runs: int
    quick: bool

    def overrides(self, entry: Entry) -> tuple:
        return entry.quick if self.quick else entry.full


def make_plan(only: str | None, runs: int | None, quick: bool, entries: tuple = ENTRIES) -> Plan:
    """What to run; ScenarioError names a bad --only name or --runs value.

    `only` is a comma list of scenario names (every configuration of it, e.g.
    smoke's two topologies) or configuration ids (`smoke-fat-tree`). `runs`
    None means 3, or 1 with `quick`.
    """
    if runs is None:
        runs = 1 if quick else 3
    if runs < 1:
        raise ScenarioError(f"--runs {runs}: must be at least 1")
    chosen = list(entries)
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        if not names:
            raise ScenarioError(f"--only {only!r}: expected NAME[,NAME]")
        known = sorted({e.scenario for e in entries} | {e.id for e in entries})
        bad = [n for n in names if n not in known]
        if bad:
            raise ScenarioError(
                f"--only {','.join(bad)}: not a scenario the README quotes; "
                f"choose from {', '.join(known)}"
            )
        chosen = [e for e in entries if e.id in names or e.scenario in names]
    return Plan(tuple(chosen), runs, quick)


def check_overrides(plan: Plan) -> None:
    """Every chosen configuration's parameters parse (before any fabric is built)."""
    from emu import scenario

    for e in plan.entries:
        scenario.resolve_params(scenario.load(e.scenario), list(plan.overrides(e)))


def command_line(plan_only: str | None, runs: int | None, quick: bool, out: str, doc: str) -> str:
    """The command as run, every option explicit, so that it can be run again."""
    argv = ["emu", "reproduce"]
    if runs is not None:
        argv += ["--runs", str(runs)]
    if quick:
        argv.append("--quick")
    if plan_only is not None:
        argv += ["--only", plan_only]
    argv += ["--out", str(out), "--doc", str(doc)]
    # The scheduling is part of what was run: the same command must ask for it
    # again, whatever the default is then.
    return f"{realtime.ENV}={realtime.configured_priority()} " + shlex.join(argv)


# ----- the shell: machine, git, running ---------------------------------------------------


def scheduling_info() -> str:
    """How the runs' switches and NIC agents are scheduled (EMU_RT_PRIORITY, emu/realtime.py)."""
    prio = realtime.configured_priority()
    if prio:
        return f"SCHED_RR {prio} asked ({realtime.ENV}={prio}; each run's report says what it got)"
    return f"normal ({realtime.ENV} unset or 0)"


def machine_info() -> dict:
    """Cores, CPU model, kernel release and total memory of this machine."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                break
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cores": os.cpu_count() or 0,
        "cpu": cpu,
        "kernel": platform.release(),
        "memory": memory,
    }


def git_info(repo: Path | None = None) -> tuple[str, bool]:
    """(short commit, dirty) of the tree emu runs from; ('unknown', False) outside git."""
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return commit.stdout.strip(), bool(status.stdout.strip())


def emu_run_argv(entry: Entry, overrides: tuple, out_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "emu.cli", "run", entry.scenario, "--out", str(out_dir)]
    for o in overrides:
        argv += ["--set", o]
    return argv


def run_once(
    argv: list[str],
    out_dir: Path,
    log_path: Path,
    timeout_s: float,
    index: int,
    after_kill: Callable[[], None] | None = None,
) -> RunRecord:
    """Run `argv` (an `emu run`), its output to `log_path`; read what it left in `out_dir`.

    A run past `timeout_s` gets SIGTERM (emu run tears its fabric down on it),
    then SIGKILL after TERM_GRACE_S, then `after_kill` (emu clean). Ctrl-C or
    SIGTERM here stops the child the same way before it propagates.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = out_dir / "metrics.json"
    if stale.exists():
        stale.unlink()  # a previous reproduction's: never read it as this run's
    t0 = time.monotonic()
    note = ""
    with open(log_path, "w") as log_file:
        # Its own session: a Ctrl-C at the terminal reaches only us, and we send the
        # child exactly one SIGTERM (a second signal would interrupt its teardown).
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code, note = None, f"timed out after {timeout_s:g} s; log {log_path}"
            _stop(proc, after_kill)
        except BaseException:
            _stop(proc, after_kill)
            raise
    doc, why = read_metrics(out_dir)
    if doc is None:
        note = "; ".join(x for x in (note, why, f"log {log_path}") if x)
    return RunRecord(index, str(out_dir), code, doc, time.monotonic() - t0, note)


def _stop(proc: subprocess.Popen, after_kill: Callable[[], None] | None) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if after_kill is not None:
        after_kill()


def _emu_clean() -> None:
    subprocess.run([sys.executable, "-m", "emu.cli", "clean"], capture_output=True, timeout=300)


def copy_plots(summary: EntrySummary, plots_dir: Path) -> None:
    """Copy the chosen run's PNGs into `plots_dir`, named per entry; record their names."""
    run = summary.plot_run
    if run is None:
        return
    plots_dir.mkdir(parents=True, exist_ok=True)
    for name in run.doc.get("plots", []):
        src = Path(run.out_dir) / name
        if not src.exists():
            continue
        dst_name = _plot_name(summary.entry, name)
        shutil.copyfile(src, plots_dir / dst_name)
        summary.plots.append(dst_name)


def reproduce(
    plan: Plan, out_dir: str, doc_path: str, command: str, say: Callable[[str], None] = print
) -> list[EntrySummary]:
    """Run the plan, write the markdown to `doc_path` and plots beside it; return the summaries."""
    out = Path(out_dir).resolve()
    doc = Path(doc_path)
    plots_dir = doc.parent / doc.stem  # docs/results.md -> docs/results/
    total = len(plan.entries) * plan.runs
    done = 0
    summaries = []
    # Read before the runs: the commit they ran at (a tree edited meanwhile is not theirs).
    commit, dirty = git_info()
    scheduling = scheduling_info()
    for entry in plan.entries:
        overrides = plan.overrides(entry)
        timeout = entry.timeout_s
        runs = []
        for i in range(1, plan.runs + 1):
            done += 1
            run_dir = out / entry.id / f"run-{i}"
            say(
                f"[{done}/{total}] {entry.id} run {i}/{plan.runs}: emu run {entry.scenario} "
                + " ".join(f"--set {o}" for o in overrides)
            )
            rec = run_once(
                emu_run_argv(entry, overrides, run_dir),
                run_dir,
                out / entry.id / f"run-{i}.log",
                timeout,
                i,
                after_kill=_emu_clean,
            )
            runs.append(rec)
            say(
                f"    exit {'timeout' if rec.exit_code is None else rec.exit_code}, "
                f"{'faithful' if rec.faithful else 'NOT faithful'}, "
                f"{sum(bool(c.get('passed')) for c in rec.checks)}/{len(rec.checks)} checks, "
                f"{rec.seconds:.0f} s" + (f" ({rec.note})" if rec.note else "")
            )
        summary = summarise(entry, overrides, runs)
        copy_plots(summary, plots_dir)
        summaries.append(summary)
    info = {
        "commit": commit,
        "dirty": dirty,
        "machine": machine_info(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "runs": plan.runs,
        "quick": plan.quick,
        "scheduling": scheduling,
    }
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(info, summaries, plots_dir.name)
    if len(plan.entries) < len(ENTRIES) and doc.exists():
        try:
            text = merge_results(doc.read_text(), text)
        except ValueError as exc:
            say(f"{doc}: not a reproduction's doc ({exc}); written anew with these runs only")
    doc.write_text(text)
    return summaries
