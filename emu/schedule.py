"""A training step as a graph of operations: derived from a job, or read from a trace.

Owns `Op` (one operation: a compute, or a collective after a compute, on a
group of ranks, with the operations it waits for), `Schedule` (a job's
operations in program order, `from_job`), the JSON trace format that writes
and reads the same operations (`dump_trace`, `load_trace`, `TraceError`;
docs/training.md has the format) so that users replay traces of their own
tools, and the step's arithmetic on any operation times: when each op
starts and ends (`timeline`), the critical path, and the communication the
compute does not hide (`exposed_s`). Pure: no fabric, no processes; the
times come from the packets (emu/traffic/training.py) or from a model
(emu/models/step.py).

What `from_job` derives, per step (emu/job.py's `Job`; GPipe's schedule:
every micro-batch's forward through the stages, then every backward in
reverse order):

- each layer's compute on a tensor-parallel group, followed by its
  all-reduce of `tp` bytes over the group (a compute alone when tp is 1);
- an MoE layer (`moe.every`) splits its compute around two all-to-alls on
  the expert group (dispatch after the attention, combine after the
  experts; the backward runs them in reverse);
- between stages, each tensor-parallel rank sends `pp` bytes to the same
  rank of the next stage (the activations), and back (their gradients);
- each stage's gradients, `dp` bytes per GPU, all-reduced across the
  data-parallel peers (one communicator per tensor-parallel rank): after
  the whole backward, or with `overlap` a layer's share as soon as its
  last backward is done, one after the other on the communicator;
- the next step's forward waits for its stage's gradients.

Every operation of a tensor-parallel group waits for the group's previous
one (a GPU runs one stream), and a collective waits for every member's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from emu.config import ConfigError
from emu.job import Job

KINDS = ("compute", "allreduce", "reduce_scatter", "all_gather", "alltoall", "send")
PHASES = ("compute", "tp", "pp", "dp", "ep")
TRACE_FORMAT = "emu-training-trace"
TRACE_VERSION = 1
# What a trace may hold: a step of a 64-GPU job with 8 micro-batches is ~10,000 ops.
MAX_TRACE_OPS = 200_000
# An operation's bytes per rank and a trace's steps (a job file's bounds: emu/job.py).
MAX_BYTES = 1 << 30
MAX_STEPS = 100


class TraceError(ConfigError):
    """A trace that cannot be replayed, in one line naming the file and the field."""


@dataclass(frozen=True)
class Op:
    """One operation of a step.

    Attributes:
        id: unique in its schedule.
        kind: one of KINDS: "compute" (no bytes), a collective over `group`,
            or "send" (group[0] sends to group[1]).
        group: the ranks it runs on, in ring order.
        bytes: per rank (allreduce and its halves: each rank's buffer;
            alltoall: what each rank sends each other rank; send: the message).
        deps: the ids it waits for (each must come earlier in the schedule).
        compute_s: each member's compute before the communication starts.
        phase: what it belongs to, for reports: one of PHASES.
        algo: an allreduce's algorithm ("ring" or "sharp").
        step: the training step it belongs to (0-based).
    """

    id: str
    kind: str
    group: tuple[int, ...]
    bytes: int = 0
    deps: tuple[str, ...] = ()
    compute_s: float = 0.0
    phase: str = "compute"
    algo: str = "ring"
    step: int = 0

    @property
    def communicates(self) -> bool:
        return self.kind != "compute" and self.bytes > 0


@dataclass
class Schedule:
    """A step's (or several steps') operations in an order that respects their deps."""

    name: str
    ranks: int
    ops: list[Op] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> GPU, once placed

    def by_id(self) -> dict[str, Op]:
        return {op.id: op for op in self.ops}

    @property
    def steps(self) -> int:
        return 1 + max((op.step for op in self.ops), default=0)


# ---------------------------------------------------------------- from a job


class _Builder:
    """`from_job`'s state: the ops so far, and what each tensor-parallel group waits for next.

    A group is (stage, d); `after[group]` holds the ids its next op must wait
    for (its own latest op, and what it received since).
    """

    def __init__(self, job: Job):
        self.job = job
        self.ops: list[Op] = []
        self.after: dict[tuple[int, int], tuple[str, ...]] = defaultdict(tuple)

    def append(self, op: Op, owners: Sequence[tuple[int, int]], extra: Sequence[str] = ()) -> str:
        """`op` after its `owners`' waits (and `extra`); it becomes their latest op."""
        deps = dict.fromkeys(d for o in owners for d in self.after[o])
        deps.update(dict.fromkeys(extra))
        op = Op(**{**op.__dict__, "deps": tuple(deps)})
        self.ops.append(op)
        return op.id

    def layer(self, name: str, stage: int, d: int, compute_s: float, step: int) -> None:
        """A compute on (stage, d)'s group, then its tensor-parallel all-reduce if any."""
        job = self.job
        group = tuple(job.rank(stage, d, t) for t in range(job.tp))
        if job.tp > 1 and job.tp_bytes:
            op = Op(name, "allreduce", group, job.tp_bytes, (), compute_s, "tp", step=step)
        else:
            op = Op(name, "compute", group, 0, (), compute_s, "compute", step=step)
        self.after[stage, d] = (self.append(op, [(stage, d)]),)

    def alltoall(self, name: str, stage: int, compute_s: float, step: int) -> None:
        """Per expert group of `stage` and tensor-parallel rank, an all-to-all of `ep` bytes."""
        job = self.job
        for block in range(job.dp // job.ep):
            owners = [(stage, d) for d in range(block * job.ep, (block + 1) * job.ep)]
            ids = tuple(
                self.append(
                    Op(
                        f"{name}.e{block}.t{t}",
                        "alltoall",
                        tuple(job.rank(stage, d, t) for _, d in owners),
                        job.ep_bytes,
                        (),
                        compute_s,
                        "ep",
                        step=step,
                    ),
                    owners,
                )
                for t in range(job.tp)
            )
            for o in owners:
                self.after[o] = ids

    def sends(self, name: str, stage: int, to: int, step: int) -> None:
        """Each rank of every (stage, d) sends `pp` bytes to the same rank of (to, d)."""
        job = self.job
        for d in range(job.dp):
            if not job.pp_bytes:  # the next stage still waits for this one
                self.after[to, d] += self.after[stage, d]
                continue
            ids = tuple(
                self.append(
                    Op(
                        f"{name}.d{d}.t{t}",
                        "send",
                        (job.rank(stage, d, t), job.rank(to, d, t)),
                        job.pp_bytes,
                        phase="pp",
                        step=step,
                    ),
                    [(stage, d)],
                )
                for t in range(job.tp)
            )
            self.after[to, d] += ids

    def gradients(self, stage: int, layers: Sequence[int], step: int, share: int) -> None:
        """`stage`'s gradient all-reduces, one per tensor-parallel rank over the peers.

        After `layers` (the stage's, or one layer's with overlap) are done on
        every peer; each communicator's all-reduces run one after the other.
        """
        job = self.job
        tag = "all" if len(layers) > 1 or not job.overlap else f"l{layers[0]}"
        owners = [(stage, d) for d in range(job.dp)]
        for t in range(job.tp):
            comm = ("dp", stage, t)
            op = Op(
                f"s{step}.c{stage}.t{t}.grad.{tag}",
                "allreduce",
                tuple(job.rank(stage, d, t) for d in range(job.dp)),
                share,
                (),
                0.0,
                "dp",
                job.dp_algorithm,
                step,
            )
            self.after[comm] = (self.append(op, owners, self.after[comm]),)


def from_job(job: Job) -> Schedule:
    """The operations of `job.steps` steps (module docstring), in program order."""
    b = _Builder(job)
    for step in range(job.steps):
        if step:  # the optimizer needs the stage's gradients before the next forward
            for stage in range(job.pp):
                done = tuple(i for t in range(job.tp) for i in b.after["dp", stage, t])
                for d in range(job.dp):
                    b.after[stage, d] += done
        for m in range(job.micro_batches):
            for stage in range(job.pp):
                if stage:
                    b.sends(f"s{step}.m{m}.c{stage - 1}.act", stage - 1, stage, step)
                _layers(b, f"s{step}.m{m}", stage, step, job.forward_s, backward=False)
        for m in reversed(range(job.micro_batches)):
            for stage in reversed(range(job.pp)):
                if stage < job.pp - 1:
                    b.sends(f"s{step}.m{m}.c{stage + 1}.grad", stage + 1, stage, step)
                _layers(b, f"s{step}.m{m}", stage, step, job.backward_s, backward=True, last=m == 0)
        if job.dp > 1 and job.dp_bytes and not job.overlap:
            for stage in range(job.pp):
                b.gradients(stage, list(_stage_layers(job, stage)), step, job.dp_bytes)
    return Schedule(job.name, job.gpus, b.ops)


def _layers(
    b: _Builder,
    prefix: str,
    stage: int,
    step: int,
    compute_s: float,
    backward: bool,
    last: bool = False,
) -> None:
    """One micro-batch through `stage`'s layers on every peer, forward or backward.

    An MoE layer's compute is split around its two all-to-alls (module
    docstring). With overlap, the last micro-batch's backward of a layer
    starts that layer's gradient all-reduce.
    """
    job = b.job
    layers = _stage_layers(job, stage)
    way = "bwd" if backward else "fwd"
    for layer in reversed(layers) if backward else layers:
        name = f"{prefix}.c{stage}.l{layer}.{way}"
        if job.is_moe(layer) and job.ep_bytes:
            if backward:  # the combine's gradient, the experts' backward, the dispatch's
                b.alltoall(f"{name}.combine", stage, 0.0, step)
                b.alltoall(f"{name}.dispatch", stage, compute_s / 2, step)
                for d in range(job.dp):
                    b.layer(f"{name}.d{d}", stage, d, compute_s / 2, step)
            else:  # attention, dispatch, the experts, combine
                for d in range(job.dp):
                    b.layer(f"{name}.d{d}", stage, d, compute_s / 2, step)
                b.alltoall(f"{name}.dispatch", stage, 0.0, step)
                b.alltoall(f"{name}.combine", stage, compute_s / 2, step)
        else:
            for d in range(job.dp):
                b.layer(f"{name}.d{d}", stage, d, compute_s, step)
        if backward and last and job.overlap and job.dp > 1 and job.dp_bytes:
            b.gradients(stage, [layer], step, job.dp_bytes // job.layers_per_stage)


def _stage_layers(job: Job, stage: int) -> range:
    per = job.layers_per_stage
    return range(stage * per, (stage + 1) * per)


# ---------------------------------------------------------------- the trace format


def to_trace(schedule: Schedule) -> dict[str, Any]:
    """`schedule` as a trace document (docs/training.md, "The trace format")."""
    ops = []
    for op in schedule.ops:
        rec: dict[str, Any] = {"id": op.id, "kind": op.kind, "group": list(op.group)}
        if op.kind != "compute":
            rec["bytes"] = op.bytes
        if op.deps:
            rec["deps"] = list(op.deps)
        if op.compute_s:
            rec["compute_ms"] = round(op.compute_s * 1e3, 9)
        rec["phase"] = op.phase
        if op.kind == "allreduce" and op.algo != "ring":
            rec["algo"] = op.algo
        if op.step:
            rec["step"] = op.step
        ops.append(rec)
    doc = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "name": schedule.name}
    doc["ranks"] = schedule.ranks
    return {**doc, "ops": ops}


def dump_trace(schedule: Schedule, path: str | Path) -> None:
    """Write `schedule` as a JSON trace file."""
    Path(path).write_text(json.dumps(to_trace(schedule), indent=1) + "\n")


def load_trace(path: str | Path) -> Schedule:
    """Read a JSON trace file into a Schedule.

    Raises:
        TraceError: the file cannot be read, is not JSON, or the first thing
            wrong in it, naming the field (``ops[12].deps[0]: ...``).
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError, or a number too long to read
        raise TraceError(f"{path}: not JSON: {exc}") from None
    return from_trace(doc, str(path))


def from_trace(doc: Any, name: str = "<trace>") -> Schedule:
    """A trace document as a Schedule; TraceError naming `name` and the field."""

    def fail(where: str, problem: str) -> TraceError:
        return TraceError(f"{name}: {where}: {problem}")

    if not isinstance(doc, dict):
        raise fail("top level", "expected an object with format, version, ranks and ops")
    if doc.get("format") != TRACE_FORMAT or doc.get("version") != TRACE_VERSION:
        raise fail("format", f"expected format {TRACE_FORMAT!r} and version {TRACE_VERSION}")
    ranks = doc.get("ranks")
    if not _is_int(ranks) or not 1 <= ranks <= 4096:
        raise fail("ranks", f"{ranks!r}: expected an integer in 1..4096")
    ops = doc.get("ops")
    if not isinstance(ops, list) or not ops:
        raise fail("ops", "expected a non-empty list of operations")
    if len(ops) > MAX_TRACE_OPS:
        raise fail("ops", f"{len(ops)} operations; a trace may have at most {MAX_TRACE_OPS}")
    seen: set[str] = set()
    out = []
    for i, rec in enumerate(ops):
        op = _trace_op(rec, f"ops[{i}]", ranks, seen, fail)
        seen.add(op.id)
        out.append(op)
    if not any(op.compute_s or op.communicates for op in out):
        raise fail("ops", "no operation computes or moves a byte: nothing to run")
    return Schedule(str(doc.get("name", name)), ranks, out)


_TRACE_KEYS = ("id", "kind", "group", "bytes", "deps", "compute_ms", "phase", "algo", "step")


def _trace_op(rec: Any, where: str, ranks: int, seen: set[str], fail) -> Op:
    """One trace record as an Op, every field checked before it is used."""
    if not isinstance(rec, dict):
        raise fail(where, "expected an object")
    unknown = sorted(set(rec) - set(_TRACE_KEYS), key=str)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown field; allowed: {', '.join(_TRACE_KEYS)}")
    op_id = rec.get("id")
    if not isinstance(op_id, str) or not op_id:
        raise fail(f"{where}.id", "expected a non-empty string")
    if op_id in seen:
        raise fail(f"{where}.id", f"{op_id!r} is given twice")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    group = rec.get("group")
    if not isinstance(group, list) or not group:
        raise fail(f"{where}.group", "expected a non-empty list of ranks")
    for j, r in enumerate(group):
        if not _is_int(r) or not 0 <= r < ranks:
            raise fail(f"{where}.group[{j}]", f"{r!r} is not a rank (0..{ranks - 1})")
    if len(set(group)) != len(group):
        raise fail(f"{where}.group", "a rank is named twice")
    need = {"send": 2, "compute": 1}.get(kind, 2)
    if (kind == "send" and len(group) != 2) or len(group) < need:
        raise fail(
            f"{where}.group",
            f"a {kind} needs {'exactly' if kind == 'send' else 'at least'} {need} ranks",
        )
    size, deps, compute_ms, phase, algo, step = _trace_values(rec, where, kind, seen, fail)
    return Op(op_id, kind, tuple(group), size, tuple(deps), compute_ms / 1e3, phase, algo, step)


def _trace_values(rec: dict, where: str, kind: str, seen: set[str], fail) -> tuple:
    """A record's bytes, deps, compute_ms, phase, algo and step, each checked."""
    size = rec.get("bytes", 0)
    if not _is_int(size) or not 0 <= size <= MAX_BYTES or (kind != "compute" and size % 4):
        raise fail(f"{where}.bytes", f"{size!r}: expected whole 4-byte elements, 0..{MAX_BYTES}")
    if kind == "compute" and size:
        raise fail(f"{where}.bytes", "a compute moves no bytes")
    deps = rec.get("deps", [])
    if not isinstance(deps, list):
        raise fail(f"{where}.deps", "expected a list of earlier operations' ids")
    for j, dep in enumerate(deps):
        if not isinstance(dep, str) or dep not in seen:
            raise fail(f"{where}.deps[{j}]", f"{dep!r} is not an earlier operation's id")
    compute_ms = rec.get("compute_ms", 0)
    if (
        not isinstance(compute_ms, (int, float))
        or isinstance(compute_ms, bool)
        or not 0 <= compute_ms <= 3.6e6
    ):
        raise fail(f"{where}.compute_ms", f"{compute_ms!r}: expected milliseconds in 0..3600000")
    phase = rec.get("phase", "compute" if kind == "compute" else "dp")
    if phase not in PHASES:
        raise fail(f"{where}.phase", f"{phase!r} is not one of {', '.join(PHASES)}")
    algo = rec.get("algo", "ring")
    if algo not in ("ring", "sharp") or (algo == "sharp" and kind != "allreduce"):
        raise fail(f"{where}.algo", f"{algo!r}: ring, or sharp for an allreduce")
    step = rec.get("step", 0)
    if not _is_int(step) or not 0 <= step <= MAX_STEPS:
        raise fail(f"{where}.step", f"{step!r}: expected an integer in 0..{MAX_STEPS}")
    return size, deps, compute_ms, phase, algo, step


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------- the step's arithmetic


@dataclass(frozen=True)
class Timeline:
    """When each op's compute began and its communication ended, given each op's comm time.

    `start[id]`: when its deps were done (its compute begins); `end[id]`:
    start + compute + communication. `critical` is the path of ops, first
    to last, whose chain of deps decided the latest end.
    """

    start: Mapping[str, float]
    end: Mapping[str, float]
    critical: tuple[str, ...]

    @property
    def total_s(self) -> float:
        return max(self.end.values(), default=0.0)

    def step_s(self, schedule: Schedule) -> list[float]:
        """Each step's time: from the previous step's last end to its own."""
        ends: dict[int, float] = defaultdict(float)
        for op in schedule.ops:
            ends[op.step] = max(ends[op.step], self.end[op.id])
        times, before = [], 0.0
        for step in sorted(ends):
            times.append(ends[step] - before)
            before = ends[step]
        return times


def timeline(schedule: Schedule, comm_s: Mapping[str, float]) -> Timeline:
    """Each op started when its deps had ended, then computed, then communicated.

    `comm_s[id]`: the op's communication time (missing: 0, a compute). A
    communicator (the ops of one group) runs one collective at a time, in
    the schedule's order, as NCCL runs a communicator's on one stream and as
    emu/traffic/training.py runs them: an op's communication starts when its
    compute is done and the communicator's previous op has ended. So this is
    the schedule's time on an ideal machine with those times; `critical`
    follows whichever of the two came last.
    """
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    parent: dict[str, str | None] = {}
    busy: dict[tuple[int, ...], str] = {}  # communicator -> its latest op
    for op in schedule.ops:
        ready, last = 0.0, None
        for dep in op.deps:
            if last is None or end[dep] > ready:
                ready, last = end[dep], dep
        start[op.id] = ready
        begin = ready + op.compute_s
        before = busy.get(op.group) if op.communicates else None
        if before is not None and end[before] > begin:
            begin, last = end[before], before
        end[op.id] = begin + comm_s.get(op.id, 0.0)
        parent[op.id] = last
        if op.communicates:
            busy[op.group] = op.id
    if not end:
        return Timeline(start, end, ())
    node: str | None = max(end, key=lambda i: end[i])
    path = []
    while node is not None:
        path.append(node)
        node = parent[node]
    return Timeline(start, end, tuple(reversed(path)))


def exposed_s(schedule: Schedule, comm_s: Mapping[str, float]) -> float:
    """The communication the compute does not hide: the step with `comm_s` less the step without."""
    return timeline(schedule, comm_s).total_s - timeline(schedule, {}).total_s


def with_straggler(schedule: Schedule, rank: int, factor: float) -> Schedule:
    """The same schedule with rank `rank` computing `factor` times as long.

    An op whose group holds the rank starts its communication when its
    slowest member has computed: its compute becomes factor x its own.

    Raises:
        ValueError: a rank outside the schedule, or a factor below 1.
    """
    if not 0 <= rank < schedule.ranks:
        raise ValueError(f"rank {rank}: the schedule's ranks are 0..{schedule.ranks - 1}")
    if not factor >= 1.0:
        raise ValueError(f"factor {factor}: a straggler computes at least as long (>= 1)")
    ops = [
        Op(**{**op.__dict__, "compute_s": op.compute_s * factor}) if rank in op.group else op
        for op in schedule.ops
    ]
    return Schedule(schedule.name, schedule.ranks, ops, dict(schedule.hosts))


def parse_straggler(text: str) -> tuple[int, float]:
    """`gpu5:1.3` or `5:1.3` -> (5, 1.3); ValueError naming the text otherwise."""
    rank_text, _, factor_text = text.strip().partition(":")
    rank_text = rank_text.removeprefix("gpu").removeprefix("rank")
    try:
        rank, factor = int(rank_text), float(factor_text)
    except ValueError:
        raise ValueError(f"{text!r}: expected RANK:FACTOR, e.g. gpu5:1.3") from None
    if rank < 0:
        raise ValueError(f"{text!r}: a rank is >= 0")
    if not 1.0 <= factor <= 100.0:
        raise ValueError(f"{text!r}: the factor is in 1..100")
    return rank, factor
