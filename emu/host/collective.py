"""One rank of a collective job inside a host agent: the job's spec, its algorithms, its driver.

Owns what the host agent (emu/host/agent.py) runs for a collective:
`CollectiveSpec` (what `coll_setup` receives, checked key by key), the
`Algorithm` interface and its implementations by name in `ALGORITHMS` (the
ring all-reduce on the NIC's queue pairs and its reduce-scatter and
all-gather phases alone, `emu.host.ring.RingOnNic`, and in-network
aggregation, `emu.host.sharp.SharpOnNic`), `RankData` (a rank's input and
the result its algorithm must reach), and `CollectiveRank`, the agent's
hook: input from (seed, rank), iterations with a compute step before each (a
straggler's is longer), timing, the rank's own check of its result, byte
counts.

Not owned here: the algorithms themselves (emu/host/ring.py,
emu/host/sharp.py), the data and its check (emu/host/data.py), the
transport (emu/host/rnic.py), the agent's loop and sockets
(emu/host/agent.py), driving jobs from outside through the agents'
management sockets (emu/traffic/collectives.py, which imports this side;
emu/host never imports emu/traffic).
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

from emu.host.data import (
    DTYPES,
    ExpectedSum,
    chunk_bounds,
    dtype_name,
    expected_all_gather,
    expected_hierarchical,
    expected_reduce_scatter,
    expected_sum,
    is_int,
    rank_input,
)
from emu.host.ring import DEFAULT_SLICE_BYTES, MAX_SLICE_BYTES, RingOnNic
from emu.host.sharp import SharpOnNic

if TYPE_CHECKING:
    from emu.host.rnic import Rnic


@dataclass(frozen=True)
class CollectiveSpec:
    """One rank's part of a collective job, as `coll_setup` receives it.

    Args:
        job: the job's name (unique on the host while it exists).
        rank, nranks: this rank and the job's size.
        dtype: "int32" or "float32" (nccl-tests' "int" and "float" accepted).
        count: elements per rank (>= 1).
        seed: the data seed (rank r's input is rank_input(seed, r, ...)).
        algo: a key of ALGORITHMS.
        iters: iterations (each starts with the compute step).
        compute_s: seconds the rank is busy before it communicates, every
            iteration (a straggler has a larger one).
        slice_bytes: the pipelined message size.
        send_qpn, recv_qpn: the ring's QPs to rank+1 and from rank-1 (the
            ring algorithms: "ring", "reduce_scatter", "all_gather").
        options: algorithm-specific settings (e.g. an aggregation switch).

    Raises:
        ValueError: an unknown key or a value out of range, named.
    """

    job: str
    rank: int
    nranks: int
    dtype: str
    count: int
    seed: int = 0
    algo: str = "ring"
    iters: int = 1
    compute_s: float = 0.0
    slice_bytes: int = DEFAULT_SLICE_BYTES
    send_qpn: int | None = None
    recv_qpn: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: {allowed}")

        check(isinstance(self.job, str) and self.job != "", "job", "a non-empty string")
        check(is_int(self.nranks) and self.nranks >= 1, "nranks", "an integer >= 1")
        check(
            is_int(self.rank) and 0 <= self.rank < self.nranks,
            "rank",
            f"an integer in 0..{self.nranks - 1}",
        )
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        check(is_int(self.count) and self.count >= 1, "count", "an integer >= 1")
        check(is_int(self.seed), "seed", "an integer")
        check(self.algo in ALGORITHMS, "algo", f"one of {sorted(ALGORITHMS)}")
        check(is_int(self.iters) and self.iters >= 1, "iters", "an integer >= 1")
        check(
            isinstance(self.compute_s, (int, float)) and 0 <= self.compute_s < math.inf,
            "compute_s",
            "a finite number >= 0",
        )
        check(
            is_int(self.slice_bytes)
            and DTYPES[self.dtype].itemsize <= self.slice_bytes <= MAX_SLICE_BYTES,
            "slice_bytes",
            f"an integer in {DTYPES[self.dtype].itemsize}..{MAX_SLICE_BYTES}",
        )
        for name in ("send_qpn", "recv_qpn"):
            check(
                getattr(self, name) is None or is_int(getattr(self, name)),
                name,
                "an integer QP number",
            )
        check(isinstance(self.options, Mapping), "options", "a mapping")

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> CollectiveSpec:
        """From management-call arguments; unknown keys are named in the error."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(args) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; allowed: {sorted(known)}")
        missing = sorted(k for k in ("job", "rank", "nranks", "dtype", "count") if k not in args)
        if missing:
            raise ValueError(f"missing key(s) {missing}")
        return cls(**args)


class Algorithm(Protocol):
    """One iteration of a collective on one rank, on the NIC (what `ALGORITHMS` builds).

    Required: `recv_qpns` (QPs whose whole messages it consumes: the agent
    turns data delivery on for them), `tx_qpns` (QPs whose NIC counters are
    its traffic), `done` (this rank's part is over: all it sends is sent or
    posted to the NIC, all it needs is received), `result`, `start(now)`
    (post the first sends), `on_message(qpn, data, now)` (a whole message
    received on one of `recv_qpns`, in order; the job holds back messages
    that arrive before `start`). Optional, for algorithms that speak their
    own frames (e.g. in-network aggregation on UDP 4792): `on_frame(frame,
    now) -> bool` (a non-RoCE frame, possibly before `start`; True if it was
    consumed), `next_frame(now) -> bytes | None` (a frame to send now, asked
    only while the iteration runs: it must honour and advance the NIC's wire
    clock with `rnic.free_at` / `rnic.use_wire(len(frame), now, ready_at)` and the
    PAUSE state `rnic.paused_until`), `next_wakeup(now)` (when `next_frame`
    may have something).
    """

    recv_qpns: tuple[int, ...]
    tx_qpns: tuple[int, ...]

    @property
    def done(self) -> bool: ...

    @property
    def result(self) -> np.ndarray: ...

    def start(self, now: float) -> None: ...

    def on_message(self, qpn: int, data: bytes, now: float) -> None: ...


# name -> factory(spec, rnic, input) of one iteration. SHARP-like aggregation plugs in here.
ALGORITHMS: dict[str, Callable[[CollectiveSpec, Any, np.ndarray], Algorithm]] = {
    "ring": RingOnNic,  # the ring all-reduce on the NIC's queue pairs (emu/host/ring.py)
    "sharp": SharpOnNic,  # in-network aggregation (emu/host/sharp.py)
    "reduce_scatter": RingOnNic,  # the ring's first phase alone: rank r ends with chunk r+1
    "all_gather": RingOnNic,  # the ring's second phase alone, from each rank's input
}  # the same names as collectives.ALGORITHM_NAMES, which run_allreduce checks


@dataclass(frozen=True)
class RankData:
    """A rank's input and the result its algorithm must reach: the heavy part of a setup.

    The all-reduces ("ring", "sharp") must reach the exact sum; a
    reduce-scatter this rank's chunk of it (`expected_reduce_scatter`); an
    all-gather every chunk copied from its owner's input (`expected_all_gather`).

    A job that is one phase of a longer collective takes its input from the
    previous phase and hands its result on (`CHAIN_OPTIONS`, in the spec's
    options): a hierarchical all-reduce runs on a GPU's two ports, whose
    agents share one process (emu/traffic/rdma.py `gpu_ports`), so the
    hand-over is that process's memory (`GPU_MEMORY`, a chain name
    ``gpu:KEY``), as a GPU's memory is reached by its NVLink and its NIC; a
    path instead names a file (.npy), for ports in separate processes
    (`EMU_NIC=python`).
    Its result is then checked against the whole collective's
    (`expected_hierarchical`).

    At 16 MB and 8 ranks, building it costs about half a second of CPU; the
    agent builds it on its management worker thread (emu/mgmt.py, `Deferred`)
    so that its loop keeps sending frames meanwhile.
    """

    input: np.ndarray
    expected: ExpectedSum

    @classmethod
    def build(cls, spec: CollectiveSpec) -> RankData:
        """Raises ValueError naming a chain option that is malformed or a file that does not fit."""
        args = (spec.seed, spec.nranks, spec.count, spec.dtype)
        opts = spec.options
        unknown = sorted(k for k in opts if k.startswith("chain_") and k not in CHAIN_OPTIONS)
        if unknown:
            raise ValueError(f"options {unknown}: unknown; chain options are {list(CHAIN_OPTIONS)}")
        if "chain_expect" in opts:
            want = opts["chain_expect"]
            try:
                expected = expected_hierarchical(
                    [int(x) for x in want["seeds"]],
                    int(want["gpus"]),
                    int(want["count"]),
                    spec.dtype,
                    None if want.get("chunk") is None else int(want["chunk"]),
                )
            except (KeyError, TypeError) as exc:
                raise ValueError(
                    f"options chain_expect={want!r}: expected seeds, gpus, count and chunk ({exc})"
                ) from None
        elif spec.algo == "reduce_scatter":
            expected = expected_reduce_scatter(*args, rank=spec.rank)
        elif spec.algo == "all_gather":
            expected = expected_all_gather(*args)
        else:
            expected = expected_sum(*args)
        if "chain_input" in opts:
            data = _chained_input(spec, str(opts["chain_input"]), opts.get("chain_input_chunk"))
        else:
            data = rank_input(spec.seed, spec.rank, spec.count, spec.dtype)
        return cls(data, expected)


#: A phase's options that chain it to the previous and the next: its input (placed
#: at chunk c of its array, or the whole array), its result (kept once checked), and
#: the whole collective's result to check against ({"seeds": [per node], "gpus": G,
#: "count": elements, "chunk": c or None}). Input and result are named ``gpu:KEY``
#: (`GPU_MEMORY`) or by a file's path (.npy).
CHAIN_OPTIONS = ("chain_input", "chain_input_chunk", "chain_output", "chain_expect")

#: A GPU's memory, shared by the agents of its ports when they are one process
#: (emu/traffic/rdma.py `gpu_ports`): phase results by chain name, each replaced
#: by the next result of the same name.
GPU_MEMORY: dict[str, np.ndarray] = {}
GPU_MEMORY_PREFIX = "gpu:"


def _keep_output(name: str, result: np.ndarray) -> None:
    if name.startswith(GPU_MEMORY_PREFIX):
        GPU_MEMORY[name] = result
    else:
        np.save(name, result, allow_pickle=False)


def _load_input(name: str) -> np.ndarray:
    """Raises ValueError naming the input when it is not there or not an array file."""
    if name.startswith(GPU_MEMORY_PREFIX):
        if name not in GPU_MEMORY:
            raise ValueError(
                f"options chain_input={name!r}: no such result in this agent's GPU memory "
                "(the phase that makes it must run first, on a port of the same GPU process)"
            )
        return GPU_MEMORY[name].copy()  # the phase reading it must not change the kept one
    try:
        return np.load(name, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"options chain_input={name!r}: {exc}") from None


def _chained_input(spec: CollectiveSpec, path: str, chunk: Any) -> np.ndarray:
    """The previous phase's result named `path`: the whole input, or chunk `chunk` of it."""
    got = _load_input(path)
    dtype = DTYPES[spec.dtype]
    if got.dtype != dtype or got.ndim != 1:
        raise ValueError(
            f"options chain_input={path!r}: a 1-D {spec.dtype} array expected, "
            f"got {got.dtype} of shape {got.shape}"
        )
    if chunk is None:
        lo, hi = 0, spec.count
        out = got
    else:
        lo, hi = chunk_bounds(spec.count, spec.nranks, int(chunk))
        out = np.zeros(spec.count, dtype=dtype)  # the ring sends only this rank's chunk
    if got.size != hi - lo:
        raise ValueError(
            f"options chain_input={path!r}: {got.size} elements, the "
            f"{'chunk' if chunk is not None else 'input'} has {hi - lo}"
        )
    if chunk is not None:
        out[lo:hi] = got
    return out


class CollectiveRank:
    """One rank of a collective job inside a host agent: the agent's collective hook.

    The agent's loop calls, all with its clock's `now`:

    - `tick(now)`: timed work (the start time, the end of a compute step:
      then the iteration's first sends are posted);
    - `next_wakeup(now)`: when `tick` or `next_frame` next has work (None: none);
    - `on_message(qpn, msn, data, now)` for every whole message taken from
      the inbox of a QP in `recv_qpns`;
    - `on_frame(frame, now) -> bool` for every non-RoCE, non-PFC frame (True:
      consumed);
    - `next_frame(now) -> bytes | None` until None, for algorithms that send
      their own frames;
    - `status(now)` for `coll_status`; `close()` when the job is dropped.

    A rank that is computing (or has not started) keeps early messages from
    rank-1 in order and feeds them to the iteration when it starts: the
    previous rank may be at most one iteration ahead.

    Args:
        spec: the job as set up.
        rnic: the host's NIC model (pure; the agent owns its socket).
        data: the rank's input and expected result, if built already (`RankData`).

    Raises:
        ValueError: a bad spec for the algorithm (e.g. unknown QPs).
    """

    def __init__(self, spec: CollectiveSpec, rnic: Rnic, data: RankData | None = None) -> None:
        self.spec = spec
        self.rnic = rnic
        data = data if data is not None else RankData.build(spec)
        self.input = data.input
        self.expected = data.expected
        # CPU of the rank's own data work, its input, the exact result and the
        # checks, as the agent timed it on the thread that did it: the test's oracle,
        # not the NIC's work (bench/fabric_cpu.py reports the NIC without it).
        self.data_cpu_s = 0.0
        self.algo = ALGORITHMS[spec.algo](spec, rnic, self.input)
        self.recv_qpns = tuple(self.algo.recv_qpns)
        self.tx_qpns = tuple(self.algo.tx_qpns)
        # The agent offers frames / asks for frames only to jobs that use them.
        self.wants_frames = hasattr(self.algo, "on_frame")
        self.sends_frames = hasattr(self.algo, "next_frame")
        self.state = "ready"  # ready -> scheduled -> compute -> running -> ... -> done | failed
        self.error: str | None = None
        self.wake_at: float | None = None  # when `tick` has work
        self.compute_until = 0.0
        self.iteration = 0
        self.iter_began = 0.0
        self.first_post = 0.0
        self.early: deque = deque()
        self.elapsed_s: list[float] = []  # per iteration: first post -> last receive
        self.iter_s: list[float] = []  # per iteration: compute start -> last receive
        self.wrong: list[int] = []  # per iteration
        # crc32 of the last result: equal on every rank (in a reduce-scatter each
        # rank holds its own chunk, so theirs differ).
        self.digest: int | None = None
        self._unchecked: list[np.ndarray] = []  # results not yet checked
        self.frames_sent = 0
        self.frame_bytes_sent = 0
        self.frame_payload_bytes = 0
        # Retransmissions of algorithms that send their own frames (SHARP's
        # timed-out chunks), over finished iterations; RoCE QPs count their own.
        self.frames_retransmitted = 0
        self.compute_factor = 1.0  # the agent's straggler factor (faults.straggler)
        self._tx0 = self._tx_counters()

    # ----- the hook ---------------------------------------------------------

    def start(self, at: float) -> None:
        """Start (the first compute step) at `at` on the agent's clock."""
        if self.state != "ready":
            raise ValueError(f"job {self.spec.job!r} is {self.state}, not ready to start")
        self.state = "scheduled"
        self.wake_at = at

    def tick(self, now: float) -> None:
        if self.state == "running":
            self._maybe_finish(now)  # an algorithm may finish on its own clock
        if self.wake_at is None or now < self.wake_at:
            return
        self.wake_at = None
        if self.state == "scheduled":
            self._begin_compute(now)
        if self.state == "compute" and now >= self.compute_until:
            self.wake_at = None
            self.state = "running"
            self.first_post = now
            self.algo.start(now)
            self._maybe_finish(now)  # a single rank has nothing to wait for
            # Messages that came during the compute step, in their order; any
            # beyond this iteration's stay queued for the next one.
            while self.early and self.state == "running":
                qpn, data = self.early.popleft()
                self._deliver(qpn, data, now)
                self._maybe_finish(now)

    def next_wakeup(self, now: float) -> float | None:
        times = [self.wake_at]
        hook = getattr(self.algo, "next_wakeup", None)
        if hook is not None:
            times.append(hook(now))
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def on_message(self, qpn: int, msn: int, data: bytes, now: float) -> None:
        if self.state != "running":
            if self.state in ("done", "failed"):
                raise ValueError(
                    f"job {self.spec.job!r} is {self.state}: unexpected message on QP {qpn}"
                )
            self.early.append((qpn, data))
            return
        self._deliver(qpn, data, now)
        self._maybe_finish(now)

    def on_frame(self, frame: bytes, now: float) -> bool:
        hook = getattr(self.algo, "on_frame", None)
        if hook is None or self.state in ("done", "failed"):
            return False
        consumed = hook(frame, now)
        if consumed:
            self._maybe_finish(now)
        return consumed

    def next_frame(self, now: float) -> bytes | None:
        hook = getattr(self.algo, "next_frame", None)
        if hook is None or self.state != "running":
            return None
        frame = hook(now)
        if frame is not None:
            self.frames_sent += 1
            self.frame_bytes_sent += len(frame)
            # Payload only for algorithms that say where it starts in their frames.
            header = getattr(self.algo, "frame_header_bytes", None)
            if header is not None:
                self.frame_payload_bytes += len(frame) - header
            self._maybe_finish(now)
        return frame

    def fail(self, error: str) -> None:
        """Stop the job with `error` (the agent calls it when a hook raised)."""
        self.state = "failed"
        self.error = error
        self.wake_at = None

    def close(self) -> None:
        """Drop queued state (the job is being removed)."""
        self.early.clear()

    def check_results(self) -> None:
        """Compare the finished iterations' results with the expected one (`wrong`, `digest`)."""
        self.record_checks(self.check_work()())

    def check_work(self) -> Callable[[], list[tuple[int, int]]]:
        """The comparison of the finished results, as work for another thread.

        Takes the results out of the rank (they are final), so the work touches
        nothing the loop changes; `record_checks` takes its outcome back.
        """
        results, self._unchecked = self._unchecked, []
        expected = self.expected
        output = self.spec.options.get("chain_output")

        def work() -> list[tuple[int, int]]:
            if output and results:
                _keep_output(str(output), results[-1])  # for the next phase
            return [(expected.wrong(r), zlib.crc32(r.tobytes())) for r in results]

        return work

    def record_checks(self, outcomes: list[tuple[int, int]]) -> None:
        """(wrong elements, crc32) per checked iteration, in order."""
        for wrong, digest in outcomes:
            self.wrong.append(wrong)
            self.digest = digest

    def status(self, now: float, check: bool = False) -> dict:
        """The rank's state and counters; `check` first checks finished results (CPU)."""
        if check:
            self.check_results()
        tx = self._tx_counters()
        t0 = self._tx0
        return {
            "job": self.spec.job,
            "rank": self.spec.rank,
            "nranks": self.spec.nranks,
            "algo": self.spec.algo,
            "dtype": self.spec.dtype,
            "count": self.spec.count,
            "state": self.state,
            "done": self.state == "done",
            "error": self.error,
            "iters": self.spec.iters,
            "iters_done": len(self.elapsed_s),
            "elapsed_s": list(self.elapsed_s),
            "iter_s": list(self.iter_s),
            "wrong": max(self.wrong) if self.wrong else None,
            "wrong_per_iter": list(self.wrong),
            "digest": self.digest,
            "data_cpu_s": round(self.data_cpu_s, 6),
            "tx_payload_bytes": tx["tx_payload_bytes"]
            - t0["tx_payload_bytes"]
            + self.frame_payload_bytes,
            "tx_frame_bytes": tx["tx_bytes"] - t0["tx_bytes"] + self.frame_bytes_sent,
            "tx_packets": tx["tx_packets"] - t0["tx_packets"] + self.frames_sent,
            "retransmitted": tx["retransmitted"]
            - t0["retransmitted"]
            + self.frames_retransmitted
            + self._algo_retransmitted(),
            "early_messages": len(self.early),
        }

    # ----- inside -------------------------------------------------------------

    def _algo_retransmitted(self) -> int:
        stats = getattr(self.algo, "stats", None)
        return getattr(stats, "retransmitted", 0)

    def _tx_counters(self) -> dict:
        out = dict.fromkeys(("tx_payload_bytes", "tx_bytes", "tx_packets", "retransmitted"), 0)
        for q in self.tx_qpns:
            counters = self.rnic.qp_counters(q)
            for k in out:
                out[k] += counters[k]
        return out

    def _begin_compute(self, now: float) -> None:
        self.state = "compute"
        self.iter_began = now
        self.compute_until = self.wake_at = now + self.spec.compute_s * self.compute_factor

    def _deliver(self, qpn: int, data: bytes, now: float) -> None:
        self.algo.on_message(qpn, data, now)

    def _maybe_finish(self, now: float) -> None:
        if self.state != "running" or not self.algo.done:
            return
        self.elapsed_s.append(now - self.first_post)
        self.iter_s.append(now - self.iter_began)
        # Checked when the driver asks, once every rank is done: checking a
        # large result here (tens of ms of CPU) stalled the ranks still
        # sending and the switches between them, and their queues drew CNPs.
        self._unchecked.append(self.algo.result)
        self.iteration += 1
        if self.iteration >= self.spec.iters:
            self.state = "done"
            return
        self.frames_retransmitted += self._algo_retransmitted()
        # The next iteration is built now, so that messages from rank-1 that
        # arrive during the compute step have an owner; they wait in `early`.
        self.algo = ALGORITHMS[self.spec.algo](self.spec, self.rnic, self.input)
        self._begin_compute(now)  # the loop's next tick starts it (at once if compute_s is 0)
