"""A training step's schedule run on packets: every collective on the GPUs' NIC and NVLink agents.

Owns `run_schedule`: the operations of an emu/schedule.py `Schedule` (from a
job file or a trace), each started as soon as the operations it waits for
have ended, its compute waited out, then its communication run on the
agents of the ranks' GPUs (emu/traffic/rdma.py `gpu_ports`): an all-reduce
(or its halves) as a job on the ring's queue pairs or through the switches'
aggregation (emu/traffic/collectives.py `run_allreduce`, every rank checking
its own sum), an all-to-all as one SEND per pair on its own queue pair
(emu/traffic/rail.py `run_alltoall`), a send as one SEND. A group inside one
node runs on the NVLink ports, any other on the NICs (emu/models/step.py
`port_of`, the same choice the model makes). The collectives of one group
on one port run one after the other, as NCCL runs a communicator's on one
stream; everything else runs at once, each operation in a thread of its own.

What it measures (`TrainingRun`): each operation's communication time as
its ranks' NICs timed it (an all-reduce as nccl-tests times it: the slowest
rank's time from its own first post to its last receive, a send from post to
completion, an
all-to-all from the first post to the last completion of its slowest
sender) and the wall-clock times the driver saw. The step time on packets
is emu/schedule.py's `timeline` over the measured times: the orchestration
between operations (management calls, each all-reduce's start lead) is the
driver's, not the network's, and is reported apart (`wall_s`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from emu import fabric as fabric_mod
from emu.models.step import op_port, port_of
from emu.net import FabricError, wait_for
from emu.schedule import Op, Schedule
from emu.traffic import collectives, rail
from emu.traffic.rdma import RdmaHosts

# An all-reduce's lead before its ranks start together (collectives.run_allreduce's
# start_delay_s): time for the set-up calls of a few ranks to arrive.
START_LEAD_S = 0.1
DTYPE = "float32"


@dataclass
class TrainingRun:
    """What `run_schedule` measured.

    Attributes:
        comm_s: op id -> its communication time as the NICs timed it.
        wall: op id -> (start, end) on the driver's clock, from the run's start.
        comm_wall: op id -> (its communicator acquired, end) on that clock: a window
            that holds its communication (and the driver's calls around it).
        ports: op id -> "nic" or "nvlink".
        busbw: op id -> an all-reduce's bus bandwidth (bytes/s, nccl-tests' factor).
        wrong: elements the ranks found wrong in their all-reduce results.
        errors: the first errors, op id: message (the run stopped at the first).
    """

    comm_s: dict[str, float] = field(default_factory=dict)
    wall: dict[str, tuple[float, float]] = field(default_factory=dict)
    comm_wall: dict[str, tuple[float, float]] = field(default_factory=dict)
    ports: dict[str, str] = field(default_factory=dict)
    busbw: dict[str, float] = field(default_factory=dict)
    wrong: int = 0
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return max((e for _, e in self.wall.values()), default=0.0)


class _Runner:
    """The ops' threads, their dependencies and the communicators' locks."""

    def __init__(self, graph, schedule: Schedule, nics: RdmaHosts, nv: RdmaHosts, timeout_s: float):
        self.graph, self.schedule, self.timeout_s = graph, schedule, timeout_s
        self.sets = {"nic": nics, "nvlink": nv}
        self.result = TrainingRun()
        self.lock = threading.Lock()
        self.comm_locks: dict[tuple, threading.Lock] = defaultdict(threading.Lock)
        self.abort = threading.Event()
        self.waiting = {op.id: len(op.deps) for op in schedule.ops}
        self.after: dict[str, list[Op]] = defaultdict(list)
        for op in schedule.ops:
            for dep in op.deps:
                self.after[dep].append(op)
        self.left = len(schedule.ops)
        self.running = 0  # op threads not yet returned
        self.t0 = 0.0
        self.qps: dict[tuple[str, str, str, str], int] = {}  # (port, src, dst, kind) -> QP

    def hosts(self, op: Op) -> list[str]:
        return [self.schedule.hosts[r] for r in op.group]

    def connect(self) -> None:
        """Every queue pair the ops use, one at a time before anything runs
        (RdmaHosts hands out QP numbers; the threads only post on them)."""
        for op in self.schedule.ops:
            if not op.communicates:
                continue
            members = self.hosts(op)
            port = op_port(op, members, self.graph)
            self.result.ports[op.id] = port
            if op.kind in ("allreduce", "reduce_scatter", "all_gather") and op.algo == "ring":
                self.sets[port].ring_qps(members)
            for src, dst in _pairs(op, members):  # a QP per pair and kind: no two ops poll one
                key = (port_of(self.graph, [src, dst]), src, dst, op.kind)
                if key not in self.qps:
                    self.qps[key] = self.sets[key[0]].connect(src, dst)

    def start(self) -> None:
        self.t0 = time.monotonic()
        for op in self.schedule.ops:
            if not op.deps:
                self.launch(op)

    def launch(self, op: Op) -> None:
        with self.lock:
            self.running += 1
        threading.Thread(target=self.run_op, args=(op,), name=f"op {op.id}", daemon=True).start()

    def run_op(self, op: Op) -> None:
        try:
            self._run_op(op)
        finally:
            with self.lock:
                self.running -= 1

    def _run_op(self, op: Op) -> None:
        begun = time.monotonic() - self.t0
        try:
            if self.abort.wait(op.compute_s):
                return
            if op.communicates:
                members = self.hosts(op)
                with self.comm_locks[self.result.ports[op.id], tuple(members)]:
                    if self.abort.is_set():  # stopped while it waited for its communicator
                        return
                    acquired = time.monotonic() - self.t0
                    self.communicate(op, members)
                    self.result.comm_wall[op.id] = (acquired, time.monotonic() - self.t0)
        except Exception as exc:  # reported with the op it came from; the run stops
            with self.lock:
                self.result.errors.setdefault(op.id, f"{type(exc).__name__}: {exc}")
            self.abort.set()
            return
        self.done(op, begun)

    def done(self, op: Op, begun: float) -> None:
        ready = []
        with self.lock:
            self.result.wall[op.id] = (begun, time.monotonic() - self.t0)
            self.left -= 1
            for nxt in self.after[op.id]:
                self.waiting[nxt.id] -= 1
                if self.waiting[nxt.id] == 0:
                    ready.append(nxt)
        for nxt in ready:
            self.launch(nxt)

    def communicate(self, op: Op, members: list[str]) -> None:
        port = self.result.ports[op.id]
        nic_set = self.sets[port]
        if op.kind == "send":
            self.result.comm_s[op.id] = self.send(op, members)
        elif op.kind == "alltoall":
            self.result.comm_s[op.id] = self.alltoall(op, members)
        else:
            algo = op.kind if op.kind != "allreduce" else op.algo
            (res,) = collectives.run_allreduce(
                nic_set, members, [op.bytes], DTYPE, algo, start_delay_s=START_LEAD_S
            )
            with self.lock:
                self.result.comm_s[op.id] = res.time_s
                self.result.busbw[op.id] = res.busbw_bytes_per_s
                self.result.wrong += res.wrong

    def send(self, op: Op, members: list[str]) -> float:
        src, dst = members
        port = self.result.ports[op.id]
        nic_set, qpn = self.sets[port], self.qps[port, src, dst, "send"]
        (msg,) = nic_set.post(src, qpn, op.bytes)
        got: dict = {}

        def completed() -> bool:
            for c in nic_set.poll_completions(src, qpn):
                got[c["msg_id"]] = c
            return msg in got

        wait_for(completed, self.timeout_s, f"{op.id}: {op.bytes} B {src} -> {dst}", 0.01)
        return got[msg]["completed_at"] - got[msg]["posted_at"]

    def alltoall(self, op: Op, members: list[str]) -> float:
        """The network pairs and the NVLink pairs at once, each on its own ports; the slower."""
        by_port: dict[str, list] = defaultdict(list)
        for src, dst in _pairs(op, members):
            pport = port_of(self.graph, [src, dst])
            by_port[pport].append((src, self.qps[pport, src, dst, "alltoall"], op.bytes))
        times: dict[str, float] = {}
        errors: list[str] = []

        def one(port: str) -> None:
            try:
                times[port] = rail.run_alltoall(
                    self.sets[port], [], self.timeout_s, qps=by_port[port]
                )
            except Exception as exc:  # raised below, naming the port
                errors.append(f"{port}: {exc}")

        threads = [threading.Thread(target=one, args=(p,)) for p in by_port]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        return max(times.values())


def _pairs(op: Op, members: list[str]) -> list[tuple[str, str]]:
    """The (source, destination) pairs an op's sends use: a send's, or an all-to-all's every pair."""
    if op.kind == "send":
        return [(members[0], members[1])]
    if op.kind == "alltoall":
        return [(a, b) for a in members for b in members if a != b]
    return []


def run_schedule(
    fab,
    schedule: Schedule,
    nics: RdmaHosts,
    nv: RdmaHosts,
    timeout_s: float,
    progress: Callable[[int, int], None] | None = None,
) -> TrainingRun:
    """Run `schedule` (its `hosts` placed) on packets; returns what was measured.

    Stops at the first operation that fails (the rest are not started; those
    running finish or time out) and returns with `errors` set.

    Raises:
        FabricError: the schedule did not end within `timeout_s` (the whole
            run's limit; an op's send waits at most as long).
    """
    runner = _Runner(fab.graph, schedule, nics, nv, timeout_s)
    total = len(schedule.ops)

    def finished() -> bool:
        if progress:
            progress(total - runner.left, total)
        return runner.left == 0 or runner.abort.is_set()

    try:
        runner.connect()
        runner.start()
        wait_for(finished, timeout_s, f"{schedule.name}'s {total} ops", 0.2)
    finally:
        runner.abort.set()  # nothing new starts; the ops talking to the agents finish first
        try:
            wait_for(lambda: runner.running == 0, timeout_s, "the running operations to stop")
        except FabricError as exc:  # kept beside the first error, which it must not hide
            runner.result.errors.setdefault("(stopping)", str(exc))
    return runner.result


def op_links(op: Op, members: list[str], graph) -> set[str]:
    """The links (one way each) `op`'s data crosses, named for a report.

    A GPU's NIC link up ("h1 up") and down ("h3 down"), its NVLink port
    likewise ("h1 nvlink up"; the NVSwitch itself is not a bottleneck), and
    for a hop between two leaves the first leaf's uplinks and the second's
    downlinks as a whole ("rail1 uplinks"): which spine a flow takes is
    ECMP's choice, so two such hops may share a link there.
    """
    if op.algo == "sharp" and op.kind == "allreduce":
        # Up the aggregation tree from every member and down again; a tree over
        # several leaves also runs through their uplinks (the spine at its root).
        leaves = {fabric_mod.host_port(graph, m, "nic").switch for m in members}
        links = {f"{m} {way}" for m in members for way in ("up", "down")}
        if len(leaves) > 1:
            links |= {f"{leaf} {way}" for leaf in leaves for way in ("uplinks", "downlinks")}
        return links
    links: set[str] = set()
    for src, dst in _hops(op, members):
        port = port_of(graph, [src, dst])
        if port == "nvlink":
            links |= {f"{src} nvlink up", f"{dst} nvlink down"}
            continue
        links |= {f"{src} up", f"{dst} down"}
        a, b = (fabric_mod.host_port(graph, h, "nic").switch for h in (src, dst))
        if a != b:
            links |= {f"{a} uplinks", f"{b} downlinks"}
    return links


def _hops(op: Op, members: list[str]) -> list[tuple[str, str]]:
    """Where an op's data goes: a send's or an all-to-all's pairs, else a ring's hops."""
    if op.kind in ("send", "alltoall"):
        return _pairs(op, members)
    return list(zip(members, members[1:] + members[:1]))


def shared_links(schedule: Schedule, run: TrainingRun, graph) -> dict[str, list[tuple[str, str]]]:
    """For each op that communicated: the ops whose communication overlapped its own in
    time on a common link, with that link (`op_links`), from the run's wall times."""
    comm = {}
    for op in schedule.ops:
        if op.id in run.comm_s and op.id in run.wall:
            # From its communicator acquired to its end: its communication lies within,
            # so two ops that shared a link while both communicated always overlap here.
            begun, end = run.comm_wall.get(op.id, run.wall[op.id])
            members = [schedule.hosts[r] for r in op.group]
            comm[op.id] = (begun, end, op_links(op, members, graph))
    out: dict[str, list[tuple[str, str]]] = {}
    ids = list(comm)
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            (s1, e1, l1), (s2, e2, l2) = comm[a], comm[b]
            common = sorted(l1 & l2)
            if common and s1 < e2 and s2 < e1:
                out.setdefault(a, []).append((b, common[0]))
                out.setdefault(b, []).append((a, common[0]))
    return out
