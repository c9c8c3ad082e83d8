"""Lab step_time: where does my step time go? Predict a data-parallel step with and without
overlap, then measure it on packets.

Owns the lab's setting (4 data-parallel ranks on a leaf/spine of 2 leaves and
2 spines at 5 Mbit/s, a model of 2 layers whose gradients are 256 KiB per
rank, 0.1 s forward and 0.2 s backward per layer), the three times a student
predicts in `predictions.yaml` (the gradients' ring all-reduce, the step, the
step with each layer's gradients all-reduced while the earlier layer
computes), and how each is graded: the check runs the two schedules
(emu/schedule.py, from a `Job`) on real packets with emu/traffic/training.py,
then grades

- each prediction against the step the packets gave (each collective as its
  NICs timed it, composed along the schedule: what `emu run training-step`
  reports), within what the handout's formulas leave out (the ring's ACKs,
  computed with emu/models/step.py) plus the error a faithful emulator may
  add (the collectives lab's `emulator_share`, per all-reduce on the path);
- each measurement against emu's alpha-beta model (emu/models/step.py)
  within that emulator error alone, so that a change to emu that moves a
  step's time fails the lab's solution in CI.

A failed prediction's hint names the term the student most likely missed,
from the usual wrong answers (`Mistake`); blank predictions fail at once,
without a fabric.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu import fabric as fabric_mod
from emu import schedule as sched
from emu.job import Job
from emu.labs import LabError, LabRun
from emu.models import step as step_model
from emu.traffic import model, training
from emu.traffic.rdma import RdmaHosts
from labs.collectives import (
    DATA_BYTES,
    FRAME_BYTES,
    HOSTS_PER_LEAF,
    LEAVES,
    RATE_BPS,
    Mistake,
    blank_prediction,
    emulator_share,
    fidelity_note,
    graph,
    mistake_hint,
    offline_times,
    read_times,
)

TITLE = "Where does my step time go? A data-parallel step with and without overlap"
MINUTES = 45
ORDER = 8
GRADES = (
    "3 predicted times (the gradients' all-reduce, the step, the overlapped step) against "
    "the schedule run on real packets, and each measurement against emu's model"
)
FILES = ("predictions.yaml",)

# The setting, as the handout and predictions.yaml state it: the collectives lab's
# fabric (`graph`: 4 ranks on 2 leaves and 2 spines at 5 Mbit/s, what the 2-core
# machine keeps up with), a model of 2 layers.
GRADIENT_BYTES = 256 * 1024
LAYERS = 2
FORWARD_S, BACKWARD_S = 0.1, 0.2
APPS = ("controllers.routing",)


def job(overlap: bool) -> Job:
    ranks = LEAVES * HOSTS_PER_LEAF
    return Job(
        "step-time",
        dp=ranks,
        steps=1,
        layers=LAYERS,
        forward_s=FORWARD_S,
        backward_s=BACKWARD_S,
        dp_bytes=GRADIENT_BYTES,
        overlap=overlap,
    )


def schedule(overlap: bool) -> sched.Schedule:
    """The step's operations, rank r on host h<r+1> (ring h1 -> h2 -> h3 -> h4)."""
    s = sched.from_job(job(overlap))
    s.hosts = {r: f"h{r + 1}" for r in range(s.ranks)}
    return s


# ----------------------------------------------------------------- the three tasks


@dataclass(frozen=True)
class Task:
    """One prediction: the handout's answer, emu's model, what is measured."""

    key: str
    title: str
    overlap: bool
    handout_s: float
    model_s: float
    comm_model_s: float  # the all-reduces on the critical path: the tolerance's base
    steps: int  # ring steps on the critical path (emulator_share)
    formula: str
    mistakes: tuple[Mistake, ...]
    allreduce_only: bool = False

    @property
    def emulator_s(self) -> float:
        return emulator_share(self.steps, self.comm_model_s) * self.comm_model_s

    @property
    def left_out_s(self) -> float:
        return abs(self.model_s - self.handout_s)

    @property
    def prediction_tolerance_s(self) -> float:
        return self.left_out_s + self.emulator_s


def _ring_s(size: int, n: int) -> float:
    """The handout's T = 2(n-1)/n x S x 8 / B, B the link's data rate."""
    return 2 * (n - 1) / n * size * 8 / (RATE_BPS * DATA_BYTES / FRAME_BYTES)


def _model(overlap: bool) -> tuple[float, float]:
    """(the step in emu's model, its gradient all-reduce) on the lab's graph."""
    s = schedule(overlap)
    comm = step_model.comm_model_s(s, graph())
    return sched.timeline(s, comm).total_s, max(comm.values())


def tasks() -> list[Task]:
    n = LEAVES * HOSTS_PER_LEAF
    compute = LAYERS * (FORWARD_S + BACKWARD_S)
    whole, half = _ring_s(GRADIENT_BYTES, n), _ring_s(GRADIENT_BYTES // LAYERS, n)
    step_model_s, whole_model = _model(False)
    overlap_model_s, half_model = _model(True)
    # Overlap: the last layer's bucket starts after the first backward; the second
    # waits for both the earlier layer's backward and the first bucket.
    bwd_end = LAYERS * FORWARD_S + BACKWARD_S
    overlap_s = max(bwd_end + half, compute) + half
    bits = "bytes and bits: S is in bytes, the rate in bit/s (x 8)"
    return [
        Task(
            "allreduce_s",
            "the gradients' ring all-reduce",
            False,
            whole,
            whole_model,
            whole_model,
            2 * (n - 1),
            "T_ar = 2(n-1)/n x S x 8 / B, B = 5 Mbit/s x 1024/1082",
            (
                Mistake(
                    GRADIENT_BYTES * 8 / (RATE_BPS * DATA_BYTES / FRAME_BYTES),
                    "that is S / B: in a ring each rank sends 2(n-1)/n x S",
                ),
                Mistake(whole * 1024 / 1082, "headers: B is the link rate x 1024/1082"),
                Mistake(whole / 8, bits),
            ),
            allreduce_only=True,
        ),
        Task(
            "step_s",
            "the step without overlap",
            False,
            compute + whole,
            step_model_s,
            whole_model,
            2 * (n - 1),
            "T = L x (F + B) + T_ar: every layer's compute, then the all-reduce",
            (
                Mistake(compute, "the all-reduce is missing: the step ends when the sum is back"),
                Mistake(LAYERS * BACKWARD_S + whole, "the forward pass is missing"),
                Mistake(FORWARD_S + BACKWARD_S + whole, "compute is per layer: L x (F + B)"),
            ),
        ),
        Task(
            "step_overlap_s",
            "the step with each layer's gradients all-reduced as soon as they exist",
            True,
            overlap_s,
            overlap_model_s,
            2 * half_model,
            4 * (n - 1),
            "the last layer's bucket (S/L) starts when its backward ends and runs while the "
            "earlier layer computes; the next bucket waits for that layer and for the first",
            (
                Mistake(compute + whole, "that is the step without overlap"),
                Mistake(
                    compute + half,
                    "only one bucket is hidden behind compute: the "
                    "earlier layer's backward ends before the first bucket does",
                ),
                Mistake(
                    compute,
                    "communication cannot all hide: the last bucket starts after the last backward",
                ),
                Mistake(
                    max(compute, LAYERS * FORWARD_S + BACKWARD_S + whole),
                    "the buckets are S/L each, not S",
                ),
            ),
        ),
    ]


# ----------------------------------------------------------------- predictions


def read_predictions(lab: LabRun) -> dict[str, float | None]:
    """Each task's predicted seconds, None where blank; a LabError names a bad key or value."""
    return read_times(lab, [t.key for t in tasks()])


# ----------------------------------------------------------------- measuring


def measure(fab, nics: RdmaHosts, overlap: bool) -> tuple[sched.Schedule, training.TrainingRun]:
    """One step's schedule on packets (the NICs serve both ports: no NVLink here)."""
    s = schedule(overlap)
    run = training.run_schedule(fab, s, nics, nics, timeout_s=120)
    if run.errors or run.wrong:
        raise LabError(f"the step did not run: {run.errors or f'{run.wrong} wrong elements'}")
    return s, run


def measured(s: sched.Schedule, run: training.TrainingRun, task: Task) -> float:
    if task.allreduce_only:
        return max(run.comm_s.values())
    return sched.timeline(s, run.comm_s).total_s


def start(lab: LabRun) -> None:
    """The fabric; each step the student has predicted, measured and shown; then the CLI."""
    from emu.cli import interactive

    predictions = read_predictions(lab)
    with lab.fabric(graph(), apps=APPS) as fab:
        nics = RdmaHosts(fab, fabric_mod.hosts(fab.graph), dcqcn=False)
        runs = {}
        for task in tasks():
            if predictions[task.key] is None:
                print(f"{task.key}: blank, so not measured: predict it first")
                continue
            if task.overlap not in runs:
                runs[task.overlap] = measure(fab, nics, task.overlap)
            got = measured(*runs[task.overlap], task)
            print(f"{task.key}: you predicted {predictions[task.key]:.3f} s, measured {got:.3f} s")
        interactive(fab)


def check(lab: LabRun) -> None:
    predictions = read_predictions(lab)
    if all(v is None for v in predictions.values()):
        for task in tasks():
            blank_prediction(lab, task)
        return
    with lab.fabric(graph(), apps=APPS) as fab:
        nics = RdmaHosts(fab, fabric_mod.hosts(fab.graph), dcqcn=False)
        runs = {overlap: measure(fab, nics, overlap) for overlap in (False, True)}
    note = fidelity_note(lab)
    for task in tasks():
        got = measured(*runs[task.overlap], task)
        predicted = predictions[task.key]
        right = False
        if predicted is None:
            blank_prediction(lab, task)
        else:
            right = abs(predicted - got) <= task.prediction_tolerance_s
            lab.grade(
                f"{task.title}: your prediction",
                right,
                f"{predicted:.3f} s",
                f"more than {task.prediction_tolerance_s * 1000:.0f} ms from the step measured "
                f"({task.left_out_s * 1000:.0f} ms the formulas leave out, the ring's ACKs, + "
                f"{task.emulator_s * 1000:.0f} ms the emulator may add)",
                mistake_hint(task, predicted),
            )
        agrees = abs(got - task.model_s) <= task.emulator_s
        lab.check(
            f"{task.title}: emu's measurement agrees with its model",
            agrees,
            f"{got:.3f} s"
            if right
            else ("agrees" if agrees else "disagrees")
            + " (the figures are shown once your prediction passes)",
            (f"{task.model_s:.3f} s" if right else "emu's model")
            + f" +- {task.emulator_s * 1000:.0f} ms (emu/models/step.py; the emulator's "
            "limits, emu/fidelity.py)",
            f"not your work: emu disagrees with its own model, a defect to report with "
            f"{lab.out_dir}; {note}",
        )


def offline(lab: LabRun) -> None:
    """`emu lab test step-time`: predictions.yaml reads, one time per task."""
    offline_times(lab, tasks(), read_predictions(lab), "step-time")


assert model.ROCE_SEND_OVERHEAD_BYTES + DATA_BYTES == FRAME_BYTES
