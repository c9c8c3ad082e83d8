"""training-step: what the fabric does to a training step, on packets, beside an alpha-beta model.

      spine1        spine2              a training job (jobs/*.yaml, emu/job.py) placed on a
     rail1  rail2 (leaves)              rail-optimized fabric: tensor-parallel groups inside a
   h1 h3 h5 h7   h2 h4 h6 h8            node (NVLink, the NVSwitch), pipeline stages and
   nvsw1 .. nvsw4 (NVLink domains)      data-parallel peers across the nodes (the rails)

The job's steps become a schedule of operations (emu/schedule.py: each
layer's compute and tensor-parallel all-reduce, the pipeline's sends, the
MoE all-to-alls, the gradients' all-reduce), or a JSON trace of another
tool's (`trace`). Every operation runs on packets as soon as the ones it
waits for have ended (emu/traffic/training.py): compute waited out, then
its collective on the GPUs' NIC or NVLink agents, the all-reduces checked
element by element by their ranks. Beside it the same schedule is timed by
Hockney's alpha-beta model of each collective (emu/models/step.py), its
inputs from the fabric graph (port rates, path delays, the frames emu
sends).

The report (emu/traffic/training_report.py) gives each step on packets (each
collective as its NICs timed it, composed along the schedule) and in the
model, the exposed communication, each phase's share of the critical path,
and every operation over `tolerance` above its model with what shared one of
its links while it ran (emu/traffic/training.py `shared_links`).

Checks: every all-reduce's sum right on every rank; on every operation that
shared no link while it ran, packets within `tolerance` (10%, issue 33's
acceptance) of the model; and the step within `tolerance` of the model when
no operation on its critical path shared a link (the model's step is that
path; a shared link off it slows nothing the step waits for). `compare` runs
variants side by side (placement rail vs crossing, the gradients by ring or
in-network aggregation, overlap off or on, a straggler), one table and one
plot of step time per variant, each comparison checked against its model.

Run:  emu run training-step [--set job=moe-alltoall] [--compare placement=rail,crossing]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from emu import fabric as fabric_mod
from emu import job as job_mod
from emu import schedule as sched
from emu.faults import LINK_FAULT_SYNTAX, FaultError, parse_link_fault, scripted_link_fault
from emu.figures import Entry, per_key
from emu.host.rnic import GO_BACK_N, SELECTIVE
from emu.models import step as step_model
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
)
from emu.traffic import rail, training, training_report
from emu.traffic.rdma import gpu_ports
from emu.traffic.training_report import MS, Variant, phase_s, ratio

DESCRIPTION = (
    "a training job's steps on packets (TP, PP, DP, MoE all-to-all) beside an alpha-beta "
    "model: step time, exposed communication, critical path; what-if comparisons"
)
APPS = ("controllers.routing", "controllers.aggregation")

_fab = fabric_params(topology="rail_optimized", rate_mbps=2.0, modelled_gbps=400.0)
_fab["nodes"] = type(_fab["nodes"])(**{**_fab["nodes"].__dict__, "default": 4})
# What `compare` varies, and the job field each value sets.
COMPARE = {
    "placement": ("placement", {"rail": "rail", "crossing": "crossing"}),
    "sharp": ("dp_algorithm", {"off": "ring", "on": "sharp"}),
    "overlap": ("overlap", {"off": False, "on": True}),
    "straggler": ("", {}),  # off, or RANK:FACTOR: that rank computes FACTOR x as long
    "routing": ("", {"ecmp": "ecmp", "adaptive": "adaptive"}),  # a fabric of its own each
    "fault": ("", {"off": "", "on": "on"}),  # without and with the `fault` parameter's
}
# The compare keys that change the job (a trace has none to change).
JOB_KEYS = ("placement", "sharp", "overlap")
# Per-packet adaptive routing (emu/switch/adaptive.py) of the RoCE class (DSCP 26,
# priority 3), with the NIC that adaptive-routing fabrics pair with: it places
# reordered packets and resends only what is lost (emu/host/reorder.py).
ADAPTIVE_CLASSES = "3"

PARAMS = {
    # 2 Mbit/s NICs and 18 Mbit/s NVLink ports for 8 GPUs, where this scenario was
    # measured faithful; rail-optimized's collectives hold up to 3 Mbit/s
    # (scenarios/rail_optimized.py says why, measured).
    **_fab,
    "job": Param(
        "dense-dp-tp-pp",
        f"a job file, or an example's name ({', '.join(job_mod.examples())}; jobs/)",
    ),
    "trace": Param("", "a JSON trace to replay instead of the job (docs/training.md)"),
    "steps": Param(0, "steps to run (0: the job's own)", min=0, max=100),
    "compare": Param(
        "",
        "variants side by side: placement=rail,crossing, sharp=off,on, overlap=off,on, "
        "routing=ecmp,adaptive or straggler=off,RANK:FACTOR (also emu run training-step "
        "--compare ...)",
    ),
    "placement": Param(
        "",
        "rail or crossing: the data-parallel peers' placement, over the job's own (emu/job.py)",
        choices=("", "rail", "crossing"),
    ),
    "routing": Param(
        "ecmp",
        "ecmp (the switches hash each flow onto a path) or adaptive (per-packet adaptive "
        "routing of the RoCE class, with reordering NICs); also a compare key",
        choices=("ecmp", "adaptive"),
    ),
    "fault": Param(
        "",
        f"a fault in every variant, from its start: {LINK_FAULT_SYNTAX} (a flap: down and up "
        "every P s, 0.6 by default, N times, 3 by default); also emu run training-step "
        "--fault ...; compare=fault=off,on runs without and with it",
    ),
    "straggler": Param(
        "",
        "a rank that computes longer, RANK:FACTOR (gpu5:1.3: rank 5 takes 1.3 x its compute "
        "time), in every variant; also a compare key (straggler=off,gpu5:1.3)",
    ),
    "tolerance": Param(
        0.10,
        "allowed difference from the alpha-beta model (issue 33's acceptance)",
        min=0.0,
        max=1.0,
    ),
}


def validate(params: dict) -> None:
    if params["topology"] != "rail_optimized" or params.get("topo"):
        raise ScenarioError(
            f"parameter topology={params['topology']!r}: this scenario runs on rail_optimized only"
        )
    job = load_job(params)
    graph = build_fabric_graph(params)
    if params["fault"]:
        try:
            parse_link_fault(params["fault"], graph)
        except FaultError as exc:
            raise ScenarioError(f"parameter fault={params['fault']!r}: {exc}") from None
    specs = variants(params, job)
    ranks = job.gpus
    if params["trace"]:
        ranks = _trace(params, graph).ranks
        key = params["compare"].partition("=")[0]
        if key in JOB_KEYS or params["placement"]:
            raise ScenarioError(
                f"parameter {'placement' if params['placement'] else 'compare'}: a trace "
                "fixes its own operations; with trace, compare routing, straggler or fault"
            )
    for spec in specs:
        if spec.straggler and sched.parse_straggler(spec.straggler)[0] >= ranks:
            raise ScenarioError(f"straggler {spec.straggler!r}: the ranks are 0..{ranks - 1}")
        if not params["trace"]:
            try:
                job_mod.place(spec.job, graph)
            except job_mod.PlacementError as exc:
                raise ScenarioError(f"parameter job={params['job']!r}: {exc}") from None
    if params["compare"].startswith("sharp=") and not (job.dp > 1 and job.dp_bytes):
        raise ScenarioError(
            "parameter compare=sharp=...: the job all-reduces no gradients (dp=1 or no dp bytes)"
        )


def _trace(params: dict, graph) -> sched.Schedule:
    """The trace, placed on the fabric's GPUs; ScenarioError naming it."""
    try:
        schedule = sched.load_trace(params["trace"])
        job_mod.place_trace(schedule, graph)
    except (sched.TraceError, job_mod.PlacementError) as exc:
        raise ScenarioError(f"parameter trace: {exc}") from None
    return schedule


def load_job(params: dict) -> job_mod.Job:
    """The job the parameters name, with `steps` applied; ScenarioError naming the file."""
    name = params["job"]
    if not Path(name).exists() and name not in job_mod.examples():
        raise ScenarioError(
            f"parameter job={name!r}: no such file, nor an example "
            f"({', '.join(job_mod.examples())})"
        )
    try:
        job = job_mod.load(name)
    except job_mod.JobFileError as exc:
        raise ScenarioError(f"parameter job: {exc}") from None
    return job.with_(steps=params["steps"]) if params["steps"] else job


@dataclass(frozen=True)
class Spec:
    """One variant to run: its label, job, straggler ("" or RANK:FACTOR) and routing."""

    label: str
    job: job_mod.Job
    straggler: str = ""
    routing: str = "ecmp"
    fault: str = ""  # LINK_FAULT_SYNTAX, from the variant's start


def variants(params: dict, job: job_mod.Job) -> list[Spec]:
    """The variants `compare` asks for; one, the parameters' own, without."""
    if params["placement"]:
        job = job.with_(placement=params["placement"])
    straggler = _straggler(params, params["straggler"], "straggler")
    base = Spec("", job, straggler, params["routing"], params["fault"])
    text = params["compare"].strip()
    if not text:
        return [base]
    key, _, values = text.partition("=")
    if key not in COMPARE or not values:
        raise ScenarioError(
            f"parameter compare={text!r}: expected KEY=A,B with KEY one of {', '.join(COMPARE)}"
        )
    field_name, allowed = COMPARE[key]
    out = []
    for value in [v.strip() for v in values.split(",") if v.strip()]:
        label = f"{key}={value}"
        if key == "straggler":
            out.append(replace(base, label=label, straggler=_straggler(params, value, "compare")))
        elif value not in allowed:
            raise ScenarioError(
                f"parameter compare={text!r}: {key} takes {', '.join(allowed)}, not {value!r}"
            )
        elif key == "routing":
            out.append(replace(base, label=label, routing=value))
        elif key == "fault":
            if not params["fault"]:
                raise ScenarioError(f"parameter compare={text!r}: give the fault with --fault")
            out.append(replace(base, label=label, fault=params["fault"] if value == "on" else ""))
        else:
            out.append(replace(base, label=label, job=job.with_(**{field_name: allowed[value]})))
    return out


def _straggler(params: dict, text: str, key: str) -> str:
    """`text` checked as RANK:FACTOR ("" and "off": none); ScenarioError naming `key`."""
    if text in ("", "off"):
        return ""
    try:
        sched.parse_straggler(text)
    except ValueError as exc:
        raise ScenarioError(f"parameter {key}={params[key]!r}: {exc}") from None
    return text


def schedule_of(params: dict, job: job_mod.Job, graph, straggler: str) -> sched.Schedule:
    """The variant's schedule, placed: the job's (or the trace, its rank r on the fabric's
    r-th GPU in node order), with its straggler."""
    if params["trace"]:
        schedule = _trace(params, graph)
    else:
        schedule = sched.from_job(job)
        schedule.hosts = job_mod.place(job, graph)
    if straggler:
        try:
            schedule = sched.with_straggler(schedule, *sched.parse_straggler(straggler))
        except ValueError as exc:
            raise ScenarioError(f"parameter straggler: {exc}") from None
    return schedule


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    job = load_job(p)
    done: list[Variant] = []
    specs = variants(p, job)
    for routing in dict.fromkeys(spec.routing for spec in specs):  # a fabric per routing
        if not _run_on_fabric(ctx, graph, [sp for sp in specs if sp.routing == routing], done):
            break
    report(ctx, done, graph)


def _run_on_fabric(ctx: Context, graph, specs: list[Spec], done: list[Variant]) -> bool:
    """`specs` (one routing) on a fabric of their own, appended to `done`; False on an error."""
    p, routing = ctx.params, specs[0].routing
    spines = rail.RailLayout.of(graph).spines
    options = dict(fabric_options(p), apps=APPS)
    if routing == "adaptive":
        options["adaptive_routing"] = ADAPTIVE_CLASSES
    label = "fabric" if routing == "ecmp" else f"fabric-{routing}"
    with ctx.fabric(graph, label, **options) as fab:
        # No DCQCN: NVLink has no end-to-end congestion control, and the rails need none
        # (as rail-optimized); a GPU's NIC and NVLink port are one process.
        recovery = SELECTIVE if routing == "adaptive" else GO_BACK_N
        nics, nv = gpu_ports(fab, fabric_mod.hosts(graph), dcqcn=False, loss_recovery=recovery)
        for spec in specs:
            schedule = schedule_of(p, spec.job, graph, spec.straggler)
            model = step_model.comm_model_s(schedule, graph)
            # The run's limit: its model's time, thrice, and a minute for the driver.
            limit = 60 + 3 * sched.timeline(schedule, model).total_s
            ctx.log(f"training-step: {spec.label or spec.job.name}: {len(schedule.ops)} operations")
            before = rail.rx_bytes(fab, spines)
            heal = scripted_link_fault(fab.faults, spec.fault) if spec.fault else (lambda: None)
            try:
                result = training.run_schedule(fab, schedule, nics, nv, limit)
            finally:
                heal()
            spine_bytes = rail.rx_bytes(fab, spines) - before
            done.append(
                Variant(spec.label or "run", spec.job, schedule, result, model, spine_bytes)
            )
            if result.errors:
                break
        ctx.events.extend(fab.faults.events)  # a failed variant's fault explains it
    return not done[-1].run.errors


# ----------------------------------------------------------------- the report


def report(ctx: Context, done: list[Variant], graph) -> None:
    tol = ctx.params["tolerance"]
    for v in done:
        errors = "; ".join(f"{k}: {e}" for k, e in list(v.run.errors.items())[:2])
        ctx.check(
            f"{v.label}: every operation ran, every all-reduce's sum right on every rank",
            not v.run.errors and v.run.wrong == 0,
            errors or f"{v.run.wrong} wrong elements",
            "no error, 0 wrong",
        )
        if not v.run.errors:
            _check_ops(ctx, v, tol, graph)
    training_report.step_table(ctx, done)
    for v in done:
        training_report.phase_table(ctx, v)
    _check_comparison(ctx, done, tol)
    ctx.metrics["variants"] = {v.label: training_report.metrics(v) for v in done}
    ctx.plots.append(training_report.plot(ctx.out_dir / "training-step.png", done).name)


def _check_ops(ctx: Context, v: Variant, tol: float, graph) -> None:
    """Each collective that shared no link while it ran within `tol` of its model; the
    step too when none shared one; and where the others part from it, with why."""
    shared = training.shared_links(v.schedule, v.run, graph)
    alone = [i for i in v.run.comm_s if not shared.get(i) and v.model.get(i)]

    def over(i: str) -> float:  # packets / model of op i
        return v.run.comm_s[i] / v.model[i]

    off = [i for i in alone if abs(over(i) - 1) > tol]
    worst = max(alone, key=lambda i: abs(over(i) - 1), default=None)
    ctx.check(
        f"{v.label}: every collective that shared no link within {tol:.0%} of its model",
        bool(alone) and not off,
        f"{len(off)} of {len(alone)} off"
        + (f"; worst {worst} {over(worst):.2f}x" if worst else ""),
        f"within {tol:.0%} (Hockney's alpha-beta, inputs from the graph)",
    )
    on_path = [i for i in v.packets.critical if shared.get(i)]
    total = ratio(v.packets.total_s, v.modelled.total_s)
    if not on_path:  # the model's step is its critical path, which no shared link slowed
        ctx.check(
            f"{v.label}: step time within {tol:.0%} of the model (no link shared on its "
            "critical path)",
            abs(total - 1) <= tol,
            f"{total:.3f}x",
            f"1 +- {tol}",
        )
    else:
        first = on_path[0]
        ctx.log(
            f"training-step: {v.label}: the step ({total:.3f}x the model) is not judged: "
            f"{len(on_path)} operations on its critical path shared a link, first {first} "
            f"with {shared[first][0][0]} ({shared[first][0][1]})"
        )
        ctx.metrics.setdefault("not_judged", {})[v.label] = {
            "critical_ops_shared": len(on_path),
            "first": first,
            "with": list(shared[first][0]),
        }
    parted = sorted((i for i in v.run.comm_s if v.model.get(i) and over(i) > 1 + tol), key=over)
    if parted:
        ctx.table(
            f"{v.label}: where packets and model part (collectives over {tol:.0%} above "
            "their model, and what shared a link with them while they ran)",
            ["operation", "packets ms", "model ms", "x", "shared with (link)"],
            [
                [
                    i,
                    f"{v.run.comm_s[i] * MS:.1f}",
                    f"{v.model[i] * MS:.1f}",
                    f"{over(i):.2f}",
                    ", ".join(f"{o} ({link})" for o, link in shared.get(i, [])[:2]) or "none",
                ]
                for i in reversed(parted[-12:])
            ],
        )


def _check_comparison(ctx: Context, done: list[Variant], tol: float) -> None:
    """What each comparison must show, against its model (module docstring)."""
    by = {v.label: v for v in done if not v.run.errors}
    rail_v, crossing = by.get("placement=rail"), by.get("placement=crossing")
    if rail_v and crossing:
        ctx.check(
            "rail-aligned placement keeps the gradients off the spines",
            crossing.spine_bytes > 0 and rail_v.spine_bytes <= tol * crossing.spine_bytes,
            f"{rail_v.spine_bytes / 1e3:.0f} kB vs crossing {crossing.spine_bytes / 1e3:.0f} kB",
            f"<= {tol:.0%} of crossing's",
        )
    ring, sharp = by.get("sharp=off"), by.get("sharp=on")
    if ring and sharp:
        got = ratio(phase_s(ring, "dp", ring.run.comm_s), phase_s(sharp, "dp", sharp.run.comm_s))
        want = ratio(phase_s(ring, "dp", ring.model), phase_s(sharp, "dp", sharp.model))
        ctx.check(
            "in-network aggregation shortens the gradients' all-reduce as its model says",
            abs(got / want - 1) <= tol,
            f"ring / sharp {got:.2f}",
            f"{want:.2f} +- {tol:.0%} (2(n-1)/n in frames, emu/traffic/model.py)",
        )
    ecmp, adaptive = by.get("routing=ecmp"), by.get("routing=adaptive")
    if ecmp and adaptive:
        got_e = ratio(ecmp.packets.total_s, ecmp.modelled.total_s)
        got_a = ratio(adaptive.packets.total_s, adaptive.modelled.total_s)
        ctx.check(
            "adaptive routing keeps the step at its model where ECMP's flows may collide",
            abs(got_a - 1) <= tol and adaptive.packets.total_s <= ecmp.packets.total_s * (1 + tol),
            f"adaptive {got_a:.3f}x the model, ECMP {got_e:.3f}x",
            f"adaptive 1 +- {tol} (every packet on the least-queued spine: no collision), "
            "and not slower than ECMP",
        )
    healthy = by.get("straggler=off")
    for v in by.values():
        if healthy and v.label.startswith("straggler=") and v is not healthy:
            got = v.packets.total_s - healthy.packets.total_s
            want = v.modelled.total_s - healthy.modelled.total_s
            ctx.check(
                f"{v.label} delays the steps by its compute excess",
                abs(got - want) <= tol * healthy.modelled.total_s,
                f"+{got * MS:.0f} ms",
                f"+{want * MS:.0f} ms (the model's critical path) +- {tol:.0%} of the steps",
            )


# The figures `emu reproduce` measures again for the docs (emu/figures.py): per
# placement, the step on packets and in the model, and what the spines received.
REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "training-step",
        "training-step",
        "training-step: the dense job's step on packets against its model, rail vs crossing",
        full=("compare=placement=rail,crossing",),
        quick=("compare=placement=rail,crossing", "steps=1"),
        figures=per_key(
            ("placement=rail", "placement=crossing"),
            ("variants",),
            (
                ("step on packets (ms)", ("mean_step_s",), {"scale": MS}),
                ("step in the model (ms)", ("model_mean_step_s",), {"scale": MS}),
                (
                    "packets / model",
                    ("mean_step_s",),
                    {"op": "ratio", "other": ("model_mean_step_s",)},
                ),
                ("spines received (kB)", ("spine_bytes",), {"scale": 1e-3}),
            ),
        ),
        timeout_s=900,
    ),
)
