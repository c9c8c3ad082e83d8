"""straggler: one slow rank stretches every iteration; ring vs in-network aggregation, vs a model.

       spine1   spine2
      leaf1 .. leaf4          8 ranks run `iters` training-like iterations:
      h1 .. h8                compute for C seconds, then all-reduce S bytes

h1 is made a straggler with the fault API, in two ways:

- compute (`faults.straggler("h1", compute_factor=s)`): its compute step takes
  s x C. No all-reduce ends before its slowest rank has contributed, so an
  iteration takes T = s x C + T_comm.
- NIC (`faults.straggler("h1", nic_factor=f)`): its NIC and its link run at
  link rate / f, both ways. Every ring step waits for the slowest link, and
  every aggregated chunk for its slowest contributor, so T = C + f x T_comm.

T_comm is predicted from first principles, never taken from the measurement
(emu/traffic/model.py): the frames each rank's link carries, at the link
rate. Ring: 2(n-1) steps, each one chunk of S/n in RoCEv2 SENDs of 1024-byte
packets (58 bytes of headers each) plus a 62-byte ACK every 4 packets; SHARP:
S up and S down in 1 KiB aggregation frames (58 bytes of headers each). At
the defaults (10 Mbit/s, 256 KiB, 8 ranks): ring 393 ms, SHARP 222 ms. No
fixed overhead is added, and none is hidden: iteration times are taken on
the agents' clocks (from a rank's compute start to its last result; the
slowest rank's, averaged over iterations), so the driver's start lead and
its status polling do not enter them; the emulated links hand a frame on at
the start of its slot, so a path's forwarding latency hides inside the last
frame's own time.

The scenario sweeps `factors` (compute, s = 1 is the healthy baseline) and
`nic_factors` for the ring and for SHARP-like aggregation and checks every
point: T minus its compute part within `tolerance` (10%) of the predicted
T_comm. The tolerance is relative to T_comm, not to T, so that a wrong
all-reduce time cannot hide behind a long compute step; it is what the model
leaves to the emulator (frames placed up to a frame time late at every hop,
link time lost to a late loop: the limits emu/fidelity.py holds a faithful
run to are sized for checks of 10%). A run where the emulator fell further
behind fails its fidelity checks too, and the report says so. The measured
T_comm at s = 1 is reported next to the prediction.

DCQCN is off by default (`dcqcn`): with it, the queue that the NIC
straggler's slow link builds draws CNPs that cut its upstream neighbour below
the straggler's own rate, and the ring ends later than its slowest link
allows (measured: 841 instead of 787 ms at f = 2), an effect the
slowest-link model does not describe. Compute stragglers draw no CNPs.

The backlog behind a slow NIC link keeps the spine's port towards h1's leaf
paused while it drains at rate / f. The PFC watchdog runs on the fabric's
clock (emu/fabric/, "The time scale"): at 25 Gbit/s over 10 Mbit/s (x2500)
its 200 ms detection lasts 500 s, so that pause is congestion, not a storm,
as on the hardware modelled. While the watchdog ran on emulated time (200
ms), f = 2 drew 2 storms, 214 retransmitted packets and +18%. Every point
still reports the storms the switches declared during it, so a failure there
would name this cause.

The rate is 10 Mbit/s since the switches' and NICs' per-frame paths run in C
(issues 27 and 29; `emu reproduce --runs 5` at 2e8fd43: faithful with every
check passing in 4 of 5, the fifth stopped whole by the VM). With the Python paths it was 5 Mbit/s, what the 2-core
VM kept up with when all 8 NICs and 5 switches aggregate at once: at 10 a
SHARP all-reduce took 225 ms while the main threads used 530 ms of CPU over
the call on 2 cores (/proc schedstat), the NICs sent 1.2-2.1% of their frames
more than a frame time late and lost 1.0-1.7% of their link time, and the
exposed all-reduce came out 6-27% long.

Report: a table of every point (measured, model, the exposed communication
against its prediction, per iteration), the model's byte counts, and a plot
of iteration minus compute against the predicted T_comm.

Run:  emu run straggler [--set factors=1,2,4 --set nic_factors=1,1.25,1.5 --set compute_s=0.5]
      emu run straggler --topo FILE
                    (any topology file whose switch links are no slower than
                    its hosts' and whose ring neighbours cannot share a link;
                    the straggler is its first host)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from emu import fabric as fabric_mod
from emu import topopick
from emu.figures import Entry, Figure
from emu.net import Fabric
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
    parse_param,
)
from emu.telemetry import Panel, save_panels
from emu.traffic import collectives, model
from emu.traffic.rdma import RdmaHosts

DESCRIPTION = (
    "one slow rank (compute or NIC): iteration time against its slowdown, ring vs "
    "SHARP, vs the time predicted from link rate and bytes"
)
APPS = ("controllers.routing", "controllers.aggregation")
# The straggler (the fabric's first host: h1 on the builders' fabrics), the
# ranks and the model's rate come from the graph, so a topology file may
# replace the shape parameters (emu/scenario.py) if the model holds on it
# (emu/topopick.py, collective_misfit).
TOPOLOGY_FILE = True

PARAMS = {
    # 25 Gbit/s NICs (HPCC/DCQCN ns-3 configurations) at 1:2500.
    **fabric_params(rate_mbps=10.0, modelled_gbps=25.0),
    "factors": Param(
        "1,1.5,2,3,4", "the straggler's compute slowdowns s (1 = healthy; must include 1)"
    ),
    "nic_factors": Param(
        "1,1.5",
        "the straggler's NIC slowdowns f (its link at rate / f)",
    ),
    "compute_s": Param(0.5, "compute step C of every rank, seconds", min=0.01, max=60.0),
    "size": Param("256K", "all-reduce size per rank (bytes; K/M suffixes)"),
    "dtype": Param("float32", "float32 or int32", choices=("float32", "int32")),
    "iters": Param(3, "iterations per point", min=1, max=50),
    "algos": Param("ring,sharp", "comma list of ring, sharp"),
    "tolerance": Param(
        0.10,
        "allowed error of T - compute, as a fraction of the predicted "
        "T_comm (the emulator's share; emu/fidelity.py sizes its limits "
        "for 10%)",
        min=0.0,
        max=1.0,
    ),
    "dcqcn": Param(
        False,
        "DCQCN on the ring's queue pairs (on: a NIC straggler's queue "
        "cuts its neighbour below the slowest link, outside the model)",
    ),
}


def _factors(key: str, text: str, need_one: bool) -> list[float]:
    try:
        out = sorted({float(f) for f in text.split(",") if f})
    except ValueError:
        raise ScenarioError(f"parameter {key}={text!r}: a comma list of numbers >= 1") from None
    if not out or any(not 1 <= f < float("inf") for f in out):
        raise ScenarioError(f"parameter {key}={text!r}: a comma list of numbers >= 1")
    if need_one and 1.0 not in out:
        raise ScenarioError(
            f"parameter {key}={text!r}: must include 1 (the healthy "
            "baseline whose T_comm is reported beside the prediction)"
        )
    return out


def validate(params: dict) -> None:
    _factors("factors", params["factors"], need_one=True)
    _factors("nic_factors", params["nic_factors"], need_one=False)
    parse_param(params, "algos", collectives.parse_algos, collectives.ALLREDUCE_NAMES)
    parse_param(params, "size", collectives.parse_size, params["dtype"])
    graph = build_fabric_graph(params)
    ring = "ring" in collectives.parse_algos(params["algos"], collectives.ALLREDUCE_NAMES)
    misfit = topopick.collective_misfit(graph, ring=ring)
    if misfit:
        raise ScenarioError(f"straggler: {params.get('topo') or 'the fabric'}: {misfit}")


def straggler_of(graph) -> str:
    """The rank made slow: the fabric's first host (h1 on the builders' fabrics)."""
    return fabric_mod.hosts(graph)[0]


@dataclass(frozen=True)
class Point:
    """One measured point of the sweep and its prediction (times in seconds)."""

    algo: str
    kind: str  # "compute" or "nic"
    factor: float
    iteration_s: float  # measured: the slowest rank's compute start -> result
    allreduce_s: float  # measured: the slowest rank's first send -> result
    compute_s: float  # the straggler's compute step: s x C (C for a NIC straggler)
    predicted_comm_s: float  # emu/traffic/model.py
    tolerance_s: float
    per_iteration_s: tuple[float, ...] = ()  # the slowest rank's, iteration by iteration
    retransmitted: int = 0  # frames or packets sent again, all ranks, all iterations
    storms: int = 0  # PFC storms the switches' watchdogs declared meanwhile

    @property
    def model_s(self) -> float:
        return self.compute_s + self.predicted_comm_s

    @property
    def comm_s(self) -> float:
        """The measured iteration minus its compute part: the exposed communication."""
        return self.iteration_s - self.compute_s

    @property
    def error(self) -> float:
        return (self.comm_s - self.predicted_comm_s) / self.predicted_comm_s

    @property
    def passed(self) -> bool:
        return abs(self.iteration_s - self.model_s) <= self.tolerance_s

    @property
    def label(self) -> str:
        return f"{'compute' if self.kind == 'compute' else 'NIC'} x{self.factor:g}"


MS_PER_S = 1000.0


def _storms(fab: Fabric) -> int:
    """PFC storms declared so far by every switch's watchdog (emu/switch/watchdog.py)."""
    return sum(fab.watchdog(sw).detected for sw in fabric_mod.switches(fab.graph))


def _points(factors: list[float], nic_factors: list[float]) -> list[tuple[str, float]]:
    """(kind, factor) to measure; the healthy point is measured once, as compute x1."""
    return [("compute", s) for s in factors] + [("nic", f) for f in nic_factors if f != 1.0]


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    straggler = straggler_of(graph)
    factors = _factors("factors", p["factors"], need_one=True)
    nic_factors = _factors("nic_factors", p["nic_factors"], need_one=False)
    size = collectives.parse_size(p["size"], p["dtype"])
    itemsize = collectives.DTYPES[collectives.dtype_name(p["dtype"])].itemsize
    c = p["compute_s"]
    n = len(hosts)
    rate_bps = min(graph.edges[h, graph.nodes[h]["leaf"]]["rate_bps"] for h in hosts)
    slow_rank = hosts.index(straggler)

    def predict(algo: str, nic_factor: float = 1.0) -> model.Prediction:
        return model.predict_allreduce(
            algo,
            size,
            n,
            rate_bps,
            nic_factor=nic_factor,
            slow_rank=slow_rank,
            itemsize=itemsize,
            slice_bytes=collectives.DEFAULT_SLICE_BYTES,
        )

    points: list[Point] = []
    with ctx.fabric(graph, "fabric", **fabric_options(p), apps=APPS) as fab:
        # The fabric's agents (fab.nics): the straggler fault talks to them, run_allreduce reuses them.
        RdmaHosts(fab, hosts, dcqcn=p["dcqcn"])
        for algo in collectives.parse_algos(p["algos"], collectives.ALLREDUCE_NAMES):
            for kind, factor in _points(factors, nic_factors):
                if kind == "compute":
                    fab.faults.straggler(straggler, compute_factor=factor)
                else:
                    fab.faults.straggler(straggler, nic_factor=factor)
                storms0 = _storms(fab)
                (r,) = collectives.run_allreduce(
                    fab, hosts, [size], dtype=p["dtype"], algo=algo, iters=p["iters"], compute_s=c
                )
                if r.wrong:
                    raise RuntimeError(f"{algo} {kind} x{factor:g}: {r.wrong} wrong elements")
                if r.algo != algo:
                    raise RuntimeError(
                        f"{algo} ran as {r.algo} (the aggregation manager refused the job)"
                    )
                pred = predict(algo, factor if kind == "nic" else 1.0)
                per_iteration = tuple(max(v[i] for v in r.iter_s.values()) for i in range(r.iters))
                pt = Point(
                    algo,
                    kind,
                    factor,
                    r.iteration_s,
                    r.time_s,
                    (factor if kind == "compute" else 1.0) * c,
                    pred.time_s,
                    p["tolerance"] * pred.time_s,
                    per_iteration,
                    sum(r.retransmitted.values()),
                    _storms(fab) - storms0,
                )
                points.append(pt)
                ctx.log(
                    f"  {algo} {pt.label}: iteration {pt.iteration_s * 1000:.0f} ms "
                    f"(model {pt.model_s * 1000:.0f} ms), all-reduce "
                    f"{pt.allreduce_s * 1000:.0f} ms"
                )
            fab.faults.straggler(straggler)  # healthy again for the next algorithm
        ctx.events.extend(fab.faults.events)
    _report(ctx, points, predict, c, size, n, rate_bps, straggler)


def _report(
    ctx: Context,
    points: list[Point],
    predict,
    c: float,
    size: int,
    n: int,
    rate_bps: float,
    straggler: str,
) -> None:
    """Each point's check, the sweep's table, the model's T_comm, the metrics and the plot."""
    algos = list(dict.fromkeys(pt.algo for pt in points))
    for pt in points:
        _check_point(ctx, pt)
    baseline = {pt.algo: pt for pt in points if pt.kind == "compute" and pt.factor == 1.0}
    _points_table(ctx, points, c, size, n, straggler)
    _t_comm_text(ctx, algos, predict, rate_bps, baseline)
    ctx.metrics.update(
        {
            "compute_s": c,
            "size_bytes": size,
            "ranks": n,
            "straggler": straggler,
            "link_rate_bps": rate_bps,
            "points": [
                dict(
                    asdict(pt),
                    model_s=pt.model_s,
                    comm_s=pt.comm_s,
                    error=pt.error,
                    passed=pt.passed,
                )
                for pt in points
            ],
            "t_comm_s": {a: pt.comm_s for a, pt in baseline.items()},
            # What `emu reproduce` quotes: iteration time per algorithm and compute factor.
            "measured_s": {
                a: {
                    str(pt.factor): pt.iteration_s
                    for pt in points
                    if pt.algo == a and pt.kind == "compute"
                }
                for a in algos
            },
            "t_comm_predicted_s": {a: predict(a).time_s for a in algos},
        }
    )
    ctx.plots.append(plot(ctx.out_dir / "straggler.png", points).name)


def _check_point(ctx: Context, pt: Point) -> None:
    """The point's iteration time against its model, within `tolerance` of T_comm."""
    tol = ctx.params["tolerance"]
    what = (
        f"{pt.factor:g} x C + predicted T_comm"
        if pt.kind == "compute"
        else "C + T_comm predicted at the slowest link"
    )
    storms = (
        f"; the PFC watchdog declared {pt.storms} storm(s) meanwhile, outside the model"
        if pt.storms
        else ""
    )
    ctx.check(
        f"{pt.algo} {pt.label}: iteration = {what}",
        pt.passed,
        f"{pt.iteration_s * MS_PER_S:.0f} ms (comm {pt.comm_s * MS_PER_S:.0f} ms, "
        f"{pt.error * 100:+.1f}%{storms})",
        f"{pt.model_s * MS_PER_S:.0f} ms = {pt.compute_s * MS_PER_S:.0f} + "
        f"{pt.predicted_comm_s * MS_PER_S:.0f} ms +- {pt.tolerance_s * MS_PER_S:.0f} ms, i.e. "
        f"{tol * 100:.0f}% of T_comm: the emulator's lateness, see fidelity",
    )


def _points_table(
    ctx: Context, points: list[Point], c: float, size: int, n: int, straggler: str
) -> None:
    """One row per point: measured against the model, and the communication part's error."""
    ms = MS_PER_S
    ctx.table(
        f"iteration time with {straggler} a straggler, {n} ranks, {size} B all-reduce, "
        f"C = {c * ms:.0f} ms; comm = iteration - compute",
        [
            "algo",
            "straggler",
            "measured ms",
            "model ms",
            "comm ms",
            "predicted comm ms",
            "comm error",
            "comm per iteration ms",
            "retransmitted",
            "PFC storms",
        ],
        [
            [
                pt.algo,
                pt.label,
                f"{pt.iteration_s * ms:.0f}",
                f"{pt.model_s * ms:.0f}",
                f"{pt.comm_s * ms:.0f}",
                f"{pt.predicted_comm_s * ms:.0f}",
                f"{pt.error * 100:+.1f}%",
                " ".join(f"{(t - pt.compute_s) * ms:.0f}" for t in pt.per_iteration_s),
                pt.retransmitted,
                pt.storms,
            ]
            for pt in points
        ],
    )


def _t_comm_text(
    ctx: Context, algos: list[str], predict, rate_bps: float, baseline: dict[str, Point]
) -> None:
    """Each algorithm's predicted T_comm from its busiest link, and what s = 1 measured."""
    ms = MS_PER_S
    lines = []
    for algo in algos:
        pred = predict(algo)
        load = max(pred.loads, key=lambda ld: ld.up_bytes)  # the busiest link
        lines.append(
            f"{algo}: T_comm predicted {pred.time_s * ms:.1f} ms = {load.up_bytes} B of frames "
            f"per link each way ({load.payload_bytes} B of data, "
            f"{pred.goodput_fraction * 100:.1f}% of the frames) at {rate_bps / 1e6:g} Mbit/s"
            + (
                f"; measured at s = 1: {baseline[algo].comm_s * ms:.1f} ms"
                if algo in baseline
                else ""
            )
        )
    ctx.text(
        "T_comm from the model (emu/traffic/model.py), a NIC straggler's f times it:\n"
        + "\n".join("  " + line for line in lines)
    )


def plot(path: Path, points: list[Point]) -> Path:
    """The exposed communication (iteration - compute) of every point against the model.

    What the checks judge: the compute step would dwarf it on an iteration-time axis.
    """
    panels = []
    for kind, title, xlabel in (
        ("compute", "compute straggler", "compute slowdown s"),
        ("nic", "NIC straggler (link at rate / f)", "NIC slowdown f"),
    ):
        series = {}
        for algo in dict.fromkeys(pt.algo for pt in points):
            pts = sorted(
                (
                    pt
                    for pt in points
                    if pt.algo == algo
                    and (pt.kind == kind or (pt.kind == "compute" and pt.factor == 1.0))
                ),
                key=lambda pt: pt.factor,
            )
            if len(pts) < 2 and kind == "nic":
                continue
            xs = [pt.factor for pt in pts]
            series[f"{algo} measured"] = (xs, [pt.comm_s * 1000 for pt in pts])
            series[f"{algo} predicted"] = (xs, [pt.predicted_comm_s * 1000 for pt in pts])
        if series:
            panels.append(Panel(f"iteration - compute, {title}", xlabel, "ms", lines=series))
    return save_panels(path, panels, title="straggler: exposed all-reduce time vs the model")


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

# The default `factors`, as metrics.json keys them (`measured_s[algo]["1.5"]`).
_QUOTED_FACTORS = ("1.0", "1.5", "2.0", "3.0", "4.0")


def _figures_of(algo: str) -> tuple[Figure, ...]:
    """Iteration time at each quoted slowdown, and the predicted T_comm, for one algorithm."""
    return tuple(
        Figure(f"{algo}: iteration at s={float(s):g} (ms)", ("measured_s", algo, s), scale=1e3)
        for s in _QUOTED_FACTORS
    ) + (Figure(f"{algo}: T_comm (ms)", ("t_comm_s", algo), scale=1e3),)


REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "straggler",
        "straggler",
        "straggler: iteration time against the slowdown",
        quick=("factors=1,2,4", "iters=2", "compute_s=0.4"),
        figures=_figures_of("ring") + _figures_of("sharp"),
        timeout_s=1200,
    ),
)
