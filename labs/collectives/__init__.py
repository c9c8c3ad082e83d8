"""Lab collectives: predict a ring and an in-network all-reduce and a straggler's step, then measure.

Owns the lab's setting (4 ranks on a leaf/spine of 2 leaves and 2 spines at
5 Mbit/s, 256 KiB per rank, one straggler), the three times a student
predicts in `predictions.yaml` from the handout's formulas, and how each is
graded: the check measures the ring all-reduce, the SHARP-like all-reduce
and a training-like iteration with a straggler on real packets
(`emu.traffic.collectives.run_allreduce`), then grades

- each prediction against its measurement, within the terms the handout's
  formula leaves out (the ring's ACKs, computed with emu/traffic/model.py)
  plus the error a faithful emulator may add (below, `emulator_share`);
- each measurement against emu's own first-principles model
  (emu/traffic/model.py) within that emulator error alone, so that a change
  to emu that moves a collective's time fails the lab's solution in CI.

A failed prediction's hint names the term the student most likely missed,
found by comparing the answer with the usual wrong formulas (`MISTAKES`).
Blank predictions fail at once, without a fabric: there is nothing to grade
a measurement against.

Does not own the collectives, their model or the fidelity measures
(emu/traffic/, emu/fidelity.py): it uses them as a user's script would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emu import fabric as fabric_mod
from emu import fidelity
from emu.labs import LabError, LabRun
from emu.net import Fabric
from emu.traffic import collectives, model

TITLE = "Collectives: predict ring vs in-network all-reduce and a straggler's step, then measure"
MINUTES = 60
ORDER = 7
GRADES = (
    "3 predicted times against a ring, a SHARP-like and a straggler's all-reduce measured "
    "on real packets, and each measurement against emu's model"
)
FILES = ("predictions.yaml",)

# The setting, as the handout and predictions.yaml state it. 5 Mbit/s is the
# rate at which the 2-core machine kept up with 8 ranks and 6 switches all busy
# while the switches' and NICs' per-frame paths ran in Python (measured for
# scenarios/straggler.py and sharp_allreduce.py, whose default is 10 Mbit/s
# since those paths run in C); this lab's 4 ranks and 4 switches load it less.
LEAVES, SPINES, HOSTS_PER_LEAF = 2, 2, 2
RATE_BPS = 5_000_000
MODELLED_RATE_BPS = 25e9  # 25 Gbit/s NICs (HPCC/DCQCN ns-3 configurations), as the scenarios
SIZE_BYTES = 256 * 1024
DTYPE = "float32"
COMPUTE_S = 0.3  # every rank's compute step before the all-reduce
DELAY_S = 0.5  # the straggler computes this much longer
STRAGGLER = "h1"
ITERS = 2  # per measurement; the measured time is the mean (the slowest rank's per iteration)
APPS = ("controllers.routing", "controllers.aggregation")

# A frame carries at most 1024 bytes of data behind 58 bytes of headers, the
# same for a RoCEv2 SEND (Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4) and an
# aggregation frame (Ethernet, IPv4, UDP, aggregation header 16).
DATA_BYTES = 1024
assert model.ROCE_SEND_OVERHEAD_BYTES == model.AGG_OVERHEAD_BYTES
FRAME_BYTES = DATA_BYTES + model.ROCE_SEND_OVERHEAD_BYTES

# The emulator's error, from the limits a faithful run keeps (emu/fidelity.py
# Limits): it loses at most `max_deficit_share` of a busy link's time, and
# places 99% of frames within `on_time_frames` frame time of their slot. A
# message's last frame may be that late at each of the HOPS transmissions of
# a path between the leaves (the NIC, the leaf's uplink, the spine, the
# leaf's downlink), and a step that waits for a message inherits its delay:
# the ring has 2(n-1) such steps, the in-network aggregation streams (one).
LIMITS = fidelity.Limits()
HOPS = 4


def emulator_share(steps: int, comm_s: float) -> float:
    """Share of a collective's time a faithful emulator may add or take: lost link time
    plus one frame time per hop of each of its `steps` waits on a message."""
    late_s = steps * HOPS * LIMITS.on_time_frames * fidelity.frame_time_s(RATE_BPS)
    return LIMITS.max_deficit_share + late_s / comm_s


def ranks() -> int:
    return LEAVES * HOSTS_PER_LEAF


def payload_rate_bps() -> float:
    """B in the handout: the link's rate times the data share of a full frame."""
    return RATE_BPS * DATA_BYTES / FRAME_BYTES


def graph():
    return fabric_mod.leaf_spine(
        leaves=LEAVES,
        spines=SPINES,
        hosts_per_leaf=HOSTS_PER_LEAF,
        host_rate_bps=RATE_BPS,
        modelled_rate_bps=MODELLED_RATE_BPS,
    )


def fabric(lab: LabRun):
    return lab.fabric(graph(), apps=APPS)


# ----------------------------------------------------------------- the three tasks


@dataclass(frozen=True)
class Mistake:
    """A usual wrong formula: its value and what the student then missed."""

    value_s: float
    hint: str


@dataclass(frozen=True)
class Task:
    """One prediction: the handout's formula, emu's model, and how to measure it."""

    key: str  # in predictions.yaml
    title: str
    algo: str
    compute: dict  # host -> compute seconds before each iteration
    handout_s: float  # the handout's formula
    model_s: float  # emu/traffic/model.py (plus the compute part)
    comm_model_s: float  # the all-reduce's share of model_s: tolerances are relative to it
    steps: int  # waits on a message (emulator_share)
    formula: str  # the handout's formula, for the hints
    mistakes: tuple[Mistake, ...]

    @property
    def emulator_s(self) -> float:
        return emulator_share(self.steps, self.comm_model_s) * self.comm_model_s

    @property
    def left_out_s(self) -> float:
        """What the handout's formula leaves out of emu's model (the ring's ACKs)."""
        return abs(self.model_s - self.handout_s)

    @property
    def prediction_tolerance_s(self) -> float:
        return self.left_out_s + self.emulator_s

    def measured_s(self, r: collectives.AllReduceResult) -> float:
        # With a compute step, an iteration (compute start -> result); without, the all-reduce.
        return r.iteration_s if any(self.compute.values()) else r.time_s

    def run(self, fab: Fabric) -> collectives.AllReduceResult:
        hosts = fabric_mod.hosts(fab.graph)
        (r,) = collectives.run_allreduce(
            fab,
            hosts,
            [SIZE_BYTES],
            dtype=DTYPE,
            algo=self.algo,
            iters=ITERS,
            compute_s=self.compute,
            count_ports=True,
        )
        return r


BITS_HINT = "bytes and bits: S is in bytes, the rate in bit/s (x 8)"


def tasks() -> list[Task]:
    """The three predictions of the setting: the ring, the SHARP-like all-reduce, a straggler."""
    n, s = ranks(), SIZE_BYTES
    once_s = s * 8 / payload_rate_bps()  # S / B: every rank's data over its link once
    ring_s = 2 * (n - 1) / n * once_s
    ring_model_s = model.ring_allreduce(
        s, n, RATE_BPS, slice_bytes=collectives.DEFAULT_SLICE_BYTES
    ).time_s
    sharp_model_s = model.sharp_allreduce(s, n, RATE_BPS).time_s
    return [
        _ring_task(n, once_s, ring_s, ring_model_s),
        _sharp_task(once_s, ring_s, sharp_model_s),
        _straggler_task(n, once_s, ring_s, ring_model_s),
    ]


def _ring_task(n: int, once_s: float, ring_s: float, ring_model_s: float) -> Task:
    """The ring all-reduce: T_ring = 2(n-1)/n x S / B, and the formulas that miss a term."""
    return Task(
        "ring_allreduce_s",
        "ring all-reduce",
        "ring",
        {},
        ring_s,
        ring_model_s,
        ring_model_s,
        2 * (n - 1),
        "T_ring = 2(n-1)/n x S x 8 / B, B = 5 Mbit/s x 1024/1082",
        (
            Mistake(
                once_s,
                "that is S / B, every rank's data sent once: in a ring each rank sends "
                "(n-1)/n x S in the reduce-scatter and again in the all-gather, "
                "2(n-1)/n x S in all (Patarasuk & Yuan)",
            ),
            Mistake(
                (n - 1) / n * once_s,
                "that is the reduce-scatter alone: the all-gather sends as much again, "
                "2(n-1)/n x S in all",
            ),
            Mistake(
                2 * once_s,
                "that is 2 x S / B: a rank sends n-1 chunks of S/n in each phase, "
                "2(n-1)/n x S, not 2 x S",
            ),
            Mistake(
                2 * (n - 1) * once_s,
                "that is 2(n-1) x S / B: each of the 2(n-1) steps moves one chunk of S/n, "
                "so divide by n",
            ),
            Mistake(ring_s / 8, BITS_HINT),
            Mistake(ring_s * 8, BITS_HINT),
        ),
    )


def _sharp_task(once_s: float, ring_s: float, sharp_model_s: float) -> Task:
    """The SHARP-like all-reduce: T_sharp = S / B, and the formulas that miss a term."""
    raw_s = SIZE_BYTES * 8 / RATE_BPS  # S over the raw link rate: headers forgotten
    return Task(
        "sharp_allreduce_s",
        "SHARP-like all-reduce",
        "sharp",
        {},
        once_s,
        sharp_model_s,
        sharp_model_s,
        1,
        "T_sharp = S x 8 / B: S up and the sum back down, at once on a full-duplex link",
        (
            Mistake(
                ring_s,
                "that is the ring's time: with the switches adding, every rank sends "
                "its S once and receives the sum once, S / B (Graham et al.)",
            ),
            Mistake(
                2 * once_s,
                "that is 2 x S / B: the sum comes down while the data goes up, on the "
                "other direction of a full-duplex link, so S / B",
            ),
            Mistake(
                raw_s,
                "headers: every 1024 bytes of data travel in a 1082-byte frame, so B is "
                "5 Mbit/s x 1024/1082, 5.4% less than the raw rate",
            ),
            Mistake(once_s / 8, BITS_HINT),
            Mistake(once_s * 8, BITS_HINT),
        ),
    )


def _straggler_task(n: int, once_s: float, ring_s: float, ring_model_s: float) -> Task:
    """A ring iteration with STRAGGLER DELAY_S late: T = C + d + T_ring, and the usual misses."""
    compute = dict.fromkeys(fabric_mod.hosts(graph()), COMPUTE_S)
    slow = dict(compute, **{STRAGGLER: COMPUTE_S + DELAY_S})
    return Task(
        "straggler_iteration_s",
        f"iteration with {STRAGGLER} {DELAY_S:g} s late (ring)",
        "ring",
        slow,
        COMPUTE_S + DELAY_S + ring_s,
        COMPUTE_S + DELAY_S + ring_model_s,
        ring_model_s,
        2 * (n - 1),
        "T = C + d + T_ring: the slowest rank's compute, then the whole all-reduce",
        (
            Mistake(
                COMPUTE_S + ring_s,
                "the delay is missing: no rank has its sum before the straggler's data "
                "went round the ring, and the others cannot get ahead (each step needs "
                "the previous one's message), so a synchronous step lasts as long as its "
                "slowest rank's compute plus the whole all-reduce",
            ),
            Mistake(
                COMPUTE_S + DELAY_S / n + ring_s,
                "that averages the delay over the ranks: a synchronous step waits for "
                "its slowest rank, so the whole delay d counts",
            ),
            Mistake(
                DELAY_S + ring_s,
                "the compute step C is missing: the straggler computes C + d",
            ),
            Mistake(
                COMPUTE_S + DELAY_S,
                "the all-reduce is missing: it starts only once the straggler is done",
            ),
            Mistake(
                COMPUTE_S + DELAY_S + once_s,
                "that uses the SHARP-like time: this iteration all-reduces with the ring",
            ),
        ),
    )


# ----------------------------------------------------------------- predictions


def read_predictions(lab: LabRun) -> dict[str, float | None]:
    """Each task's predicted seconds, None where blank; a LabError names a bad key or value."""
    return read_times(lab, [t.key for t in tasks()])


def read_times(lab: LabRun, keys: list[str]) -> dict[str, float | None]:
    """The times in seconds under `keys` of predictions.yaml, None where blank.

    Shared with every lab whose student predicts times (labs/step_time).

    Raises:
        LabError: a key that is not one of `keys`, or a value that is not a time.
    """
    answers = lab.answers("predictions.yaml")
    unknown = sorted(set(answers) - set(keys))
    if unknown:
        raise LabError(
            f"{lab.path('predictions.yaml')}: unknown keys {unknown}; the keys are {keys}"
        )
    out: dict[str, float | None] = {}
    for key in keys:
        value = answers.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value < math.inf
        ):
            raise LabError(
                f"{lab.path('predictions.yaml')}: {key}: {value!r} is not a time in seconds "
                "(a positive number, e.g. 1.25)"
            )
        out[key] = None if value is None else float(value)
    return out


def mistake_hint(task: Task, predicted_s: float) -> str:
    """The hint for a prediction outside its tolerance: the nearest usual mistake, or the formula."""
    near = [m for m in task.mistakes if abs(predicted_s - m.value_s) <= task.prediction_tolerance_s]
    if near:
        best = min(near, key=lambda m: abs(predicted_s - m.value_s))
        return f"{best.hint}. {task.formula}"
    way = "long" if predicted_s > task.model_s else "short"
    return f"too {way}; {task.formula}, and check its units"


# ----------------------------------------------------------------- start and check


def start(lab: LabRun) -> None:
    """The lab's fabric; measure what the student has predicted (only that), then the CLI.

    Measuring only what is predicted keeps the lab's order, predict then
    measure; the CLI then shows the counters of what just ran (`ctl leaf1
    ports`, `ctl spine1 agg`).
    """
    from emu.cli import interactive

    predictions = read_predictions(lab)
    with fabric(lab) as fab:
        for task in tasks():
            predicted = predictions[task.key]
            if predicted is None:
                print(f"{task.key}: blank, so not measured: predict it first")
                continue
            print(f"measuring the {task.title} ({ITERS} iterations) ...")
            r = task.run(fab)
            print(collectives.nccl_table([r]))
            print(f"# bytes each host sent (its leaf port counted): {r.mean_port_bytes:.0f}")
            if any(task.compute.values()):
                # nccl-tests' time runs from each rank's first send: the wait for the straggler.
                print(f"# the time column holds the other ranks' wait for {STRAGGLER}")
            print(
                f"{task.key}: you predicted {predicted:.3f} s, measured {task.measured_s(r):.3f} s\n"
            )
        interactive(fab)


def fidelity_note(lab: LabRun) -> str:
    """One line on whether the emulator kept up during the measurements (emu/fidelity.py)."""
    records = lab.fabrics.records()
    if not records:
        return "no fidelity record was written"
    verdict = fidelity.judge(records, LIMITS)
    if verdict.faithful:
        return "the emulator kept up (fidelity checks passed)"
    return "the emulator fell behind: " + "; ".join(f.text for f in verdict.failures())


def check(lab: LabRun) -> None:
    all_tasks = tasks()
    predictions = read_predictions(lab)
    if all(v is None for v in predictions.values()):
        for task in all_tasks:
            blank_prediction(lab, task)
        return
    measured: dict[str, collectives.AllReduceResult] = {}
    with fabric(lab) as fab:
        for task in all_tasks:
            lab.log(f"lab collectives: measuring the {task.title}")
            measured[task.key] = task.run(fab)
    note = fidelity_note(lab)  # written when the fabric closed
    by_key = {t.key: t for t in all_tasks}
    grade(lab, predictions, {k: (r, by_key[k].measured_s(r)) for k, r in measured.items()}, note)


def grade(
    lab: LabRun,
    predictions: dict[str, float | None],
    measured: dict[str, tuple[collectives.AllReduceResult, float]],
    note: str,
) -> None:
    """Each prediction against its measurement, then emu against its own model.

    A prediction that is off is told by how much it may be off and which usual
    mistake it is nearest, never the time measured nor emu's model: with either
    printed, the next try would copy it. Those figures are shown once the
    prediction passed.
    """
    for task in tasks():
        r, got_s = measured[task.key]
        predicted = predictions[task.key]
        if predicted is None:
            blank_prediction(lab, task)
            right = False
        else:
            right = abs(predicted - got_s) <= task.prediction_tolerance_s
            lab.grade(
                f"{task.title}: your prediction",
                right,
                f"{predicted:.3f} s",
                f"more than {task.prediction_tolerance_s * 1000:.0f} ms from the time measured ("
                + (
                    f"{task.left_out_s * 1000:.0f} ms the formula leaves out (the ring's ACKs) + "
                    if task.left_out_s
                    else ""
                )
                + f"{task.emulator_s * 1000:.0f} ms the emulator may add)",
                mistake_hint(task, predicted),
            )
        _measurement(lab, task, r, got_s, note, shown=right)


def blank_prediction(lab: LabRun, task: Task) -> None:
    """A blank prediction, graded as failed with the formula to start from."""
    lab.grade(
        f"{task.title}: your prediction",
        False,
        None,
        f"{task.key} is blank",
        f"predict it before measuring: {task.formula} (the handout's Background)",
    )


def _measurement(
    lab: LabRun,
    task: Task,
    r: collectives.AllReduceResult,
    got_s: float,
    note: str,
    shown: bool = True,
) -> None:
    """emu's time against its model; the figures only once `shown` (the prediction passed)."""
    ok = r.algo == task.algo and r.wrong == 0 and r.digests_agree
    error_s = got_s - task.model_s
    agrees = ok and abs(error_s) <= task.emulator_s
    if not ok:
        value = f"ran as {r.algo}, {r.wrong} wrong elements, ranks agree: {r.digests_agree}"
    elif shown:
        value = f"{got_s:.3f} s measured, {error_s / task.comm_model_s:+.1%} of the all-reduce"
    else:
        value = ("agrees" if agrees else "disagrees") + (
            " (the figures are shown once your prediction passes)"
        )
    bound = f"+- {task.emulator_s * 1000:.0f} ms"
    lab.check(
        f"{task.title}: emu's measurement agrees with its model",
        agrees,
        value,
        (f"{task.model_s:.3f} s {bound}" if shown else f"emu's model {bound}")
        + f" (emu/traffic/model.py; {emulator_share(task.steps, task.comm_model_s):.1%} of the "
        "all-reduce: lost link time and a frame time late per hop, emu/fidelity.py's limits)",
        "not your work: emu disagrees with its own model, a defect to report with "
        f"{lab.out_dir}; {note}",
    )


def offline(lab: LabRun) -> None:
    """`emu lab test collectives`: predictions.yaml reads, one time per task."""
    offline_times(lab, tasks(), read_predictions(lab), "collectives")


def offline_times(lab: LabRun, all_tasks, predictions: dict, name: str) -> None:
    """`emu lab test NAME` of a lab of predicted times: one check per task that it is a time."""
    for task in all_tasks:
        value = predictions[task.key]
        lab.check(
            f"{task.key} is a time in seconds",
            value is not None,
            "(blank)" if value is None else f"{value:.3f} s",
            "a positive number",
            f"predict it before measuring: {task.formula}; whether it is right is graded on "
            f"packets: sudo emu lab check {name}",
        )
