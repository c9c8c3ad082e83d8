"""The report of training steps run on packets: the step table, each variant's phases, metrics, plot.

Renders what scenarios/training_step.py measured, one `Variant` each (a
schedule, its run on packets from emu/traffic/training.py, its alpha-beta
model from emu/models/step.py, and both timelines from emu/schedule.py):
`step_table` (each step on packets and in the model, the exposed
communication, the spines' bytes, the wall time), `phase_table` (each
phase's communication and its share of the critical path, the all-reduces'
bus bandwidth), `metrics` (for metrics.json and `emu reproduce`) and `plot`
(step time per variant, packets beside model). It neither measures nor
judges: the scenario's checks do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from emu import job as job_mod
from emu import schedule as sched
from emu.telemetry import Panel, save_panels
from emu.traffic import training
from emu.traffic.rail_report import Report

MS = 1000.0


@dataclass
class Variant:
    """One variant's run and its model."""

    label: str
    job: job_mod.Job
    schedule: sched.Schedule
    run: training.TrainingRun
    model: dict[str, float]
    spine_bytes: int  # what the spines received while it ran (their port counters)
    packets: sched.Timeline = field(init=False)
    modelled: sched.Timeline = field(init=False)

    def __post_init__(self) -> None:
        self.packets = sched.timeline(self.schedule, self.run.comm_s)
        self.modelled = sched.timeline(self.schedule, self.model)


def step_table(ctx: Report, done: list[Variant]) -> None:
    """One row per variant: its steps on packets and in the model, and what else it cost."""
    rows = []
    for v in done:
        pk, md = v.packets.step_s(v.schedule), v.modelled.step_s(v.schedule)
        rows.append(
            [
                v.label,
                " / ".join(f"{x * MS:.0f}" for x in pk),
                " / ".join(f"{x * MS:.0f}" for x in md),
                f"{(ratio(v.packets.total_s, v.modelled.total_s) - 1) * 100:+.1f}%",
                f"{sched.exposed_s(v.schedule, v.run.comm_s) * MS:.0f}",
                f"{sched.exposed_s(v.schedule, v.model) * MS:.0f}",
                f"{v.spine_bytes / 1e3:.0f}",
                f"{v.run.wall_s * MS:.0f}",
            ]
        )
    ctx.table(
        "step time per variant (ms per step; packets: each collective as its NICs timed it, "
        "composed along the schedule; exposed: over all steps; spines: kB they received)",
        [
            "variant",
            "packets",
            "model",
            "difference",
            "exposed packets",
            "exposed model",
            "spines kB",
            "wall",
        ],
        rows,
    )


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 (a check on it then fails, and a table shows nan)."""
    return a / b if b else float("nan")


def phase_s(v: Variant, phase: str, times: dict[str, float]) -> float:
    """The summed `times` of `v`'s ops of `phase`."""
    ops = v.schedule.by_id()
    return sum(t for i, t in times.items() if ops[i].phase == phase)


def phase_table(ctx: Report, v: Variant) -> None:
    """Each phase's communication and its share of the critical path, packets and model."""
    crit_p, crit_m = set(v.packets.critical), set(v.modelled.critical)
    ops = v.schedule.by_id()
    rows = []
    for phase in sched.PHASES:
        ids = [i for i, op in ops.items() if op.phase == phase and op.communicates]
        if not ids:
            continue
        on_p = sum(v.run.comm_s.get(i, 0.0) for i in ids if i in crit_p)
        on_m = sum(v.model.get(i, 0.0) for i in ids if i in crit_m)
        busbw = [v.run.busbw[i] for i in ids if i in v.run.busbw]
        rows.append(
            [
                phase,
                len(ids),
                f"{sum(v.run.comm_s.get(i, 0.0) for i in ids) * MS:.0f}",
                f"{sum(v.model.get(i, 0.0) for i in ids) * MS:.0f}",
                f"{ratio(on_p, v.packets.total_s):.0%}",
                f"{ratio(on_m, v.modelled.total_s):.0%}",
                f"{min(busbw) * 8 / 1e6:.2f}" if busbw else "",
            ]
        )
    compute_p = sum(ops[i].compute_s for i in v.packets.critical)
    rows.append(["compute", "", "", "", f"{ratio(compute_p, v.packets.total_s):.0%}", "", ""])
    ctx.table(
        f"{v.label}: phases (communication ms summed over operations; share of the critical path)",
        [
            "phase",
            "ops",
            "packets ms",
            "model ms",
            "on path packets",
            "on path model",
            "min busbw Mb/s",
        ],
        rows,
    )


def metrics(v: Variant) -> dict:
    return {
        "job": v.job.name,
        "ops": len(v.schedule.ops),
        "step_s": v.packets.step_s(v.schedule),
        "model_step_s": v.modelled.step_s(v.schedule),
        "mean_step_s": v.packets.total_s / v.schedule.steps,
        "model_mean_step_s": v.modelled.total_s / v.schedule.steps,
        "spine_bytes": v.spine_bytes,
        "exposed_s": sched.exposed_s(v.schedule, v.run.comm_s),
        "model_exposed_s": sched.exposed_s(v.schedule, v.model),
        "wall_s": v.run.wall_s,
        "critical_path": list(v.packets.critical),
        "comm_s": v.run.comm_s,
        "model_s": v.model,
        "errors": v.run.errors,
        "wrong": v.run.wrong,
    }


def plot(path: Path, done: list[Variant]) -> Path:
    bars: dict[str, float] = {}
    for v in done:
        bars[f"{v.label} packets"] = v.packets.total_s / v.schedule.steps * MS
        bars[f"{v.label} model"] = v.modelled.total_s / v.schedule.steps * MS
    panel = Panel("step time per variant", "", "ms per step", bars=bars)
    return save_panels(path, [panel], "training-step")
