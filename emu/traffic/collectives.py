"""Collectives driven from outside the hosts, and their nccl-tests report.

Owns what runs in the test or scenario process:

1. `run_allreduce`: the orchestration through the agents' management
   sockets only (the data never crosses them): one job per size, set up on
   every rank, started at one instant, waited for, checked by the ranks
   themselves; for in-network aggregation it registers the job with the
   aggregation manager (controllers/aggregation.py) and falls back to the
   ring when refused. The algorithms (`ALGORITHM_NAMES`) are the all-reduces
   "ring" and "sharp" (`ALLREDUCE_NAMES`) and the ring's two phases as jobs
   of their own, "reduce_scatter" and "all_gather" (the parts of a
   hierarchical all-reduce). `AllReduceResult` is one size's row.
2. The report: `nccl_table` (nccl-tests all_reduce_perf's header, rows and
   summary lines), `as_dict` for metrics.json.
3. The arguments and models the scenarios check against: size and algorithm
   parsing, the byte and bandwidth models (`busbw_factor`,
   `model_bytes_per_host`).

Not owned here: the algorithms and the data, which live with the NIC model
and run inside the host agents: the pure ring (emu/host/ring.py), in-network
aggregation (emu/host/sharp.py), each rank's input and the exact sum
(emu/host/data.py), a job's spec and per-rank driver (emu/host/collective.py).
This module imports them, never the other way. `emu.traffic.rdma.RdmaHosts` owns
the NIC agents, the ring's queue pairs and the jobs' names; emu/host/rnic.py
the transport.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from emu.host.data import DTYPES, dtype_name, is_int
from emu.host.ring import ALGO_PHASES, DEFAULT_SLICE_BYTES
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.mgmt import MgmtError
from emu.net import Fabric
from emu.proto import roce
from emu.registry import FabricError, wait_for
from emu.traffic.rdma import RdmaHosts, fabric_nics

log = logging.getLogger(__name__)

NCCL_TYPE_NAMES = {"int32": "int32", "float32": "float"}  # nccl-tests test_typenames


#: The all-reduce algorithms: what the scenarios comparing the ring with aggregation offer.
ALLREDUCE_NAMES = ("ring", "sharp")
#: The algorithms a host agent runs (emu/host/collective.py, ALGORITHMS): the
#: all-reduces and the ring's reduce-scatter and all-gather alone.
ALGORITHM_NAMES = ALLREDUCE_NAMES + ("reduce_scatter", "all_gather")
#: How the waits and errors name each algorithm's collective.
_COLLECTIVE = {"reduce_scatter": "reduce-scatter", "all_gather": "all-gather"}


class CollectiveError(FabricError):
    """A collective could not run or finish: names the job, the rank and why (what the
    fabric did, not a bug: `emu run` prints the report and the line, exit status 1)."""


# ----------------------------------------------------------------- orchestration


@dataclass(frozen=True)
class AllReduceResult:
    """One size of a collective run, as nccl-tests reports it, plus the NIC's counts.

    `time_s` is per iteration: the mean over iterations of the slowest rank's
    time from its first post to its last receive (the collective is over when
    the last rank has its result). algbw = size / time, busbw = algbw x
    `busbw_factor` (nccl-tests doc/PERFORMANCE.md). `wrong` is the number of
    wrong elements summed over ranks (each rank's worst iteration). Byte
    counts are per host and per iteration, as the host's NIC counted them on
    the ring's send QP (retransmissions included). `digests_agree`: every
    rank ended with the same bytes; after a reduce-scatter each rank holds a
    different chunk, nothing is compared and it is True (each rank's own
    check, `wrong`, is the test).
    """

    size_bytes: int
    count: int
    dtype: str
    nranks: int
    algo: str
    iters: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    wrong: int
    tx_payload_bytes: dict
    tx_frame_bytes: dict
    retransmitted: dict
    elapsed_s: dict  # host -> per-iteration times
    digests_agree: bool  # every rank ended with the same bytes (reduce-scatter: True)
    iter_s: dict = field(default_factory=dict)  # host -> compute start -> result
    port_tx_bytes: dict = field(default_factory=dict)  # host -> bytes its leaf port took in
    agg_job: dict | None = None  # the aggregation manager's job (algo "sharp")
    restarts: int = 0  # times the all-reduce started over after its tree was reset
    digests: dict = field(default_factory=dict)  # host -> crc32 of its last result
    # host -> CPU its rank spent on its own data: input, exact result, checks (the test's
    # oracle in the NIC agent's process, not the NIC's work; bench/fabric_cpu.py)
    data_cpu_s: dict = field(default_factory=dict)

    @property
    def iteration_s(self) -> float:
        """Mean over iterations of the slowest rank's compute start -> result (a training step)."""
        if not self.iter_s:
            return self.time_s
        return sum(max(v[i] for v in self.iter_s.values()) for i in range(self.iters)) / self.iters

    @property
    def mean_port_bytes(self) -> float:
        """Bytes a host sent per all-reduce, as its leaf switch port counted them (mean)."""
        if not self.port_tx_bytes:
            return math.nan
        return sum(self.port_tx_bytes.values()) / len(self.port_tx_bytes)


def host_nics(target: RdmaHosts | Fabric, hosts: Sequence[str]) -> RdmaHosts:
    """The NIC agents to run on: `target` itself, or the fabric's (`rdma.fabric_nics`).

    A fabric's agents are its own (`fab.nics`, which its NIC faults drive too):
    they are started there on first use (and on a host not yet among them
    when it is first used), so that a later call, or a NIC fault, finds the
    same agents instead of starting a second set.
    """
    nics = target if isinstance(target, RdmaHosts) else fabric_nics(target, hosts)
    missing = [h for h in hosts if h not in nics.nics]
    if missing:
        raise ValueError(
            f"hosts {missing} have no NIC agent here (agents: {sorted(nics.nics)}); "
            "pass an RdmaHosts started on them"
        )
    return nics


def run_allreduce(
    target: RdmaHosts | Fabric,
    hosts: Sequence[str],
    size_bytes: int | Sequence[int],
    dtype: str = "float32",
    algo: str = "ring",
    seed: int = 0,
    iters: int = 1,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
    compute_s: float | Mapping[str, float] = 0.0,
    start_delay_s: float = 0.3,
    timeout_s: float | None = None,
    options: Mapping[str, Any] | None = None,
    nslots: int = 64,
    count_ports: bool = False,
    rank_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[AllReduceResult]:
    """All-reduce (sum) across `hosts`' NIC agents, one job per size; returns one row per size.

    Or the ring's reduce-scatter or all-gather alone (`algo`): each rank
    checks what it must hold, its chunk of the sum or every chunk from its
    owner's input (emu/host/data.py).

    Every rank generates its input, runs `iters` iterations (each after its
    compute step) and, once all are done, checks its results itself; only
    commands and counters cross the management sockets. Ranks are `hosts` in
    order; the ring is
    hosts[0] -> hosts[1] -> ... -> hosts[0] (QPs connected on first use).

    Args:
        target: the hosts' NICs (RdmaHosts), or a Fabric (its agents are then
            started on `hosts` once, kept as `fab.nics`, and reused).
        hosts: the ranks, in ring order (>= 2).
        size_bytes: bytes per rank (a multiple of the element size), or several:
            the whole buffer, which a reduce-scatter leaves 1/n of on each rank
            and an all-gather fills.
        dtype: "float32" or "int32".
        algo: one of ALGORITHM_NAMES (emu/host/collective.py, ALGORITHMS).
        seed: the data seed.
        iters: timed iterations per size.
        slice_bytes: the pipelined message size.
        compute_s: seconds of compute before each iteration, for all ranks or
            per host ({host: seconds}, others 0): a straggler.
        start_delay_s: lead time so that every rank starts at the same instant.
        timeout_s: per size; default from the slowest host link and the size.
        options: algorithm-specific settings for every rank (CollectiveSpec.options).
        rank_options: more options per host, over `options` (a phase of a
            longer collective: where each rank's input comes from and its
            result goes, emu/host/collective.py CHAIN_OPTIONS).
        nslots: algo "sharp": the slots the job asks every switch of its tree for.
            The job is registered with the aggregation manager
            (controllers.aggregation) for the call and unregistered after it; a
            refused job (no slots) runs the ring instead, and its rows say "ring".
            Options with a `job_id` (and job_ip, job_mac, nslots) use a job the
            caller registered and keeps.
        count_ports: also read, around every size, the bytes each host's leaf
            switch port received (`port_tx_bytes`), an independent count.

    Returns:
        One AllReduceResult per size, in order.

    Raises:
        ValueError: bad arguments (named).
        emu.mgmt.MgmtError: an agent refused the job (the message says why).
        CollectiveError: a rank failed (its error is in the message).
        emu.net.FabricError: the job did not finish within the timeout.

    Examples:
        >>> run_allreduce(nics, ["h1", "h2", "h3", "h4"], [1 << 20], "int32")  # doctest: +SKIP
    """
    hosts, name, sizes, compute = _checked_args(
        hosts, size_bytes, dtype, algo, compute_s, rank_options
    )
    nics = host_nics(target, hosts)
    algo, options, agg_job = _join_aggregation(nics, hosts, algo, options, nslots)
    try:
        run = _Run(
            nics=nics,
            hosts=hosts,
            dtype=name,
            algo=algo,
            seed=seed,
            iters=iters,
            slice_bytes=slice_bytes,
            compute=compute,
            start_delay_s=start_delay_s,
            timeout_s=timeout_s,
            options={h: {**(options or {}), **(rank_options or {}).get(h, {})} for h in hosts},
            count_ports=count_ports,
            agg_job=agg_job,
        )
        return _run_sizes(run, sizes)
    finally:
        if agg_job is not None:
            _unregister_agg_job(nics.fab, agg_job)


def _checked_args(
    hosts: Sequence[str],
    size_bytes: int | Sequence[int],
    dtype: str,
    algo: str,
    compute_s: float | Mapping[str, float],
    rank_options: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[list[str], str, list[int], dict[str, float]]:
    """`run_allreduce`'s arguments checked in its order: the ranks, dtype, sizes, compute per rank."""
    hosts = list(hosts)
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts={hosts!r}: at least two distinct hosts")
    name = dtype_name(dtype)
    itemsize = DTYPES[name].itemsize
    sizes = [size_bytes] if isinstance(size_bytes, int) else list(size_bytes)
    for s in sizes:
        if not is_int(s) or s < itemsize or s % itemsize:
            raise ValueError(f"size_bytes={s!r}: a positive multiple of {itemsize} ({name})")
    if algo not in ALGORITHM_NAMES:
        raise ValueError(f"algo={algo!r}: one of {list(ALGORITHM_NAMES)}")
    if isinstance(compute_s, Mapping):
        unknown = sorted(set(compute_s) - set(hosts))
        if unknown:
            raise ValueError(f"compute_s names hosts {unknown} that are not ranks {hosts}")
        compute = {h: float(compute_s.get(h, 0.0)) for h in hosts}
    else:
        compute = dict.fromkeys(hosts, float(compute_s))
    unknown = sorted(set(rank_options or {}) - set(hosts))
    if unknown:
        raise ValueError(f"rank_options names hosts {unknown} that are not ranks {hosts}")
    return hosts, name, sizes, compute


def _join_aggregation(
    nics: RdmaHosts,
    hosts: list[str],
    algo: str,
    options: Mapping[str, Any] | None,
    nslots: int,
) -> tuple[str, Mapping[str, Any] | None, dict | None]:
    """Register a job for algo "sharp" unless `options` name the caller's; add it to `options`.

    Returns the algorithm to run (the ring when the manager refused), the
    options, and the job registered here (None when none was).
    """
    if algo != "sharp" or (options and "job_id" in options):
        return algo, options, None
    agg_job = _register_agg_job(nics.fab, hosts, nslots)
    if agg_job is None:
        return "ring", options, None  # refused: the client falls back to the ring
    options = dict(
        options or {},
        job_id=agg_job["job_id"],
        job_ip=agg_job["job_ip"],
        job_mac=agg_job["job_mac"],
        nslots=agg_job["nslots"],
    )
    return algo, options, agg_job


def _register_agg_job(fab: Fabric, hosts: list[str], nslots: int) -> dict | None:
    """Register the ranks with the aggregation manager; None if it refused (no slots)."""
    ips = [fab.graph.nodes[h]["ip"] for h in hosts]
    try:
        return fab.agg_call("register", hosts=ips, nslots=nslots)
    except MgmtError as exc:
        if "refused" in str(exc):
            log.warning("in-network aggregation refused, falling back to the ring: %s", exc)
            return None
        raise


def _port_bytes(nics: RdmaHosts, hosts: list[str]) -> dict[str, int]:
    """Bytes the switch port at the other end of each host's NIC (`nics.port`) received so far."""
    g = nics.fab.graph
    by_switch: dict[str, list[str]] = {}
    for h in hosts:
        by_switch.setdefault(nics.ports[h].switch, []).append(h)
    out = {}
    for sw, members in by_switch.items():
        counters = {p["port_no"]: p["rx_bytes"] for p in nics.fab.switch_call(sw, "ports")}
        for h in members:
            out[h] = counters[g.edges[h, sw]["ports"][sw]]
    return out


def _unregister_agg_job(fab: Fabric, agg_job: dict) -> None:
    """Unregister a job `run_allreduce` registered; one already gone is only logged."""
    try:
        fab.agg_call("unregister", job_id=agg_job["job_id"])
    except MgmtError as exc:
        log.warning("aggregation job %s not unregistered: %s", agg_job["job_id"], exc)


@dataclass(frozen=True)
class _Run:
    """What every size of one `run_allreduce` call shares: the ranks, the algorithm, its settings."""

    nics: RdmaHosts
    hosts: list[str]
    dtype: str  # emu/host/data.py's name
    algo: str
    seed: int
    iters: int
    slice_bytes: int
    compute: dict[str, float]  # host -> seconds of compute before each iteration
    start_delay_s: float
    timeout_s: float | None
    options: Mapping[str, Mapping[str, Any]]  # host -> its CollectiveSpec.options
    count_ports: bool
    agg_job: dict | None  # the job registered for this call (algo "sharp")

    @property
    def factor(self) -> float:
        """busbw / algbw (`busbw_factor`)."""
        return busbw_factor(self.algo, len(self.hosts))

    @property
    def agg_job_id(self) -> int | None:
        """The aggregation job of algo "sharp": every rank's options name it."""
        shared = self.options[self.hosts[0]]
        return int(shared["job_id"]) if self.algo == "sharp" and "job_id" in shared else None

    def limit_s(self, size: int) -> float:
        """How long one size may take: `timeout_s`, else from the slowest host link."""
        slowest_bps = min(self.nics.ports[h].rate_bps for h in self.hosts)
        wire_s = self.factor * size * 1.2 * 8 / slowest_bps  # 1.2: headers and ACKs
        if self.timeout_s is not None:
            return self.timeout_s
        return 10 * self.iters * wire_s + self.iters * max(self.compute.values()) + 30

    def setup_timeout_s(self, count: int) -> float:
        """How long a rank may take to set a job up: every rank regenerates n inputs."""
        return 30 + count * len(self.hosts) * 1e-7


def _run_sizes(run: _Run, sizes: list[int]) -> list[AllReduceResult]:
    """One job per size, in order, over the same queue pairs."""
    # The ring's QPs (the all-reduce and its phases); other algorithms bring their own transport.
    qps = run.nics.ring_qps(run.hosts) if run.algo in ALGO_PHASES else [None] * len(run.hosts)
    results = []
    for size in sizes:
        count = size // DTYPES[run.dtype].itemsize
        status, port_tx_bytes, restarts = _run_size(run, size, count, qps)
        results.append(_result(run, size, count, status, port_tx_bytes, restarts))
    return results


def _run_size(
    run: _Run, size: int, count: int, qps: list
) -> tuple[dict[str, dict], dict[str, float], int]:
    """One size's job: set up on every rank, started at one instant, waited for, read, cleared.

    Starts over when the aggregation tree is reset under it (at most
    MAX_TREE_RESETS times). Returns every rank's final status, the bytes each
    host's leaf port took in per iteration (with `count_ports`), and the restarts.
    """
    nics, hosts = run.nics, run.hosts
    what = _COLLECTIVE.get(run.algo, "all-reduce")
    restarts = 0
    while True:
        job = nics.new_job("allreduce" if run.algo in ALLREDUCE_NAMES else run.algo)
        reset = _tree_reset_check(nics.fab, run.agg_job_id)
        try:
            _set_up(run, job, count, qps)
            ports0 = _port_bytes(nics, hosts) if run.count_ports else {}
            at = time.time() + run.start_delay_s
            for h in hosts:
                nics.nics[h].call("coll_start", job=job, at=at)
            try:
                what_job = f"{what} {job} of {size} B on {len(hosts)} ranks"
                _wait_done(nics, hosts, job, run.limit_s(size), what_job, reset=reset)
            except _TreeReset:
                restarts = _after_tree_reset(run, job, size, restarts)
                continue  # the ranks are cleared below, then set up afresh
            # Read again once all are done: a rank may finish receiving before
            # its own last sends left its NIC; now every message has arrived.
            status = {
                h: nics.nics[h].call(
                    "coll_status", timeout_s=run.setup_timeout_s(count), job=job, check=True
                )
                for h in hosts
            }
            ports1 = _port_bytes(nics, hosts) if run.count_ports else {}
        finally:
            _clear_job(nics, hosts, job)
        return status, {h: (ports1[h] - ports0[h]) / run.iters for h in ports0}, restarts


def _tree_reset_check(fab: Fabric, agg_job_id: int | None) -> Callable[[], bool] | None:
    """For an aggregation job: whether its tree was reset since now (its epoch moved)."""
    if agg_job_id is None:
        return None
    epoch = _agg_epoch(fab, agg_job_id)
    return lambda: _agg_epoch(fab, agg_job_id) != epoch


def _after_tree_reset(run: _Run, job: str, size: int, restarts: int) -> int:
    """Count one more start over of a size whose tree was reset; give up after MAX_TREE_RESETS."""
    if restarts >= MAX_TREE_RESETS:
        raise CollectiveError(
            f"all-reduce of {size} B: aggregation job {run.agg_job_id}'s tree "
            f"was reset {restarts + 1} times during it; gave up"
        ) from None
    log.warning(
        "all-reduce %s: aggregation tree of job %s reset; starting over (%d)",
        job,
        run.agg_job_id,
        restarts + 1,
    )
    return restarts + 1


def _set_up(run: _Run, job: str, count: int, qps: list) -> None:
    """Set `job` up on every rank: its input, its place in the ring, its options."""
    n = len(run.hosts)
    for rank, h in enumerate(run.hosts):
        run.nics.nics[h].call(
            "coll_setup",
            timeout_s=run.setup_timeout_s(count),
            job=job,
            rank=rank,
            nranks=n,
            dtype=run.dtype,
            count=count,
            seed=run.seed,
            algo=run.algo,
            iters=run.iters,
            compute_s=run.compute[h],
            slice_bytes=run.slice_bytes,
            send_qpn=qps[rank],
            recv_qpn=qps[rank - 1],
            options=dict(run.options[h]),
        )


def _clear_job(nics: RdmaHosts, hosts: list[str], job: str) -> None:
    """Clear `job` on every rank, whatever state each is in."""
    for h in hosts:
        try:
            nics.nics[h].call("coll_clear", job=job)
        except MgmtError as exc:  # not set up there, or gone: clear the others
            log.debug("coll_clear %s on %s: %s", job, h, exc)


def _result(
    run: _Run,
    size: int,
    count: int,
    status: dict[str, dict],
    port_tx_bytes: dict[str, float],
    restarts: int,
) -> AllReduceResult:
    """One size's row, from every rank's final status."""
    hosts, iters = run.hosts, run.iters
    per_iter = [max(status[h]["elapsed_s"][i] for h in hosts) for i in range(iters)]
    t = sum(per_iter) / iters
    algbw = size / t if t > 0 else math.inf
    return AllReduceResult(
        size_bytes=size,
        count=count,
        dtype=run.dtype,
        nranks=len(hosts),
        algo=run.algo,
        iters=iters,
        time_s=t,
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=algbw * run.factor,
        wrong=sum(status[h]["wrong"] for h in hosts),
        tx_payload_bytes={h: status[h]["tx_payload_bytes"] / iters for h in hosts},
        tx_frame_bytes={h: status[h]["tx_frame_bytes"] / iters for h in hosts},
        retransmitted={h: status[h]["retransmitted"] for h in hosts},
        elapsed_s={h: status[h]["elapsed_s"] for h in hosts},
        digests_agree=run.algo == "reduce_scatter"
        or len({status[h]["digest"] for h in hosts}) == 1,
        iter_s={h: status[h]["iter_s"] for h in hosts},
        port_tx_bytes=port_tx_bytes,
        agg_job=run.agg_job,
        restarts=restarts,
        digests={h: status[h]["digest"] for h in hosts},
        data_cpu_s={h: status[h]["data_cpu_s"] for h in hosts},
    )


#: How often one size may start over because its aggregation tree was reset.
MAX_TREE_RESETS = 3
#: How often a waiting driver asks the aggregation manager for the job's epoch.
EPOCH_POLL_S = 0.5


class _TreeReset(Exception):
    """The aggregation job's epoch moved while an all-reduce was in flight."""


def _agg_epoch(fab: Fabric, job_id: int) -> int:
    """The aggregation job's epoch (controllers/aggregation.py); a gone or failed job raises."""
    for j in fab.agg_call("jobs")["jobs"]:
        if j["job_id"] == job_id:
            if j["state"] != "active":
                raise CollectiveError(f"aggregation job {job_id} is {j['state']}: {j['reason']}")
            return j["epoch"]
    raise CollectiveError(f"aggregation job {job_id} is not registered")


def _wait_done(
    nics: RdmaHosts,
    hosts: list[str],
    job: str,
    timeout_s: float,
    what: str,
    reset: Callable[[], bool] | None = None,
) -> None:
    """Poll the ranks' coll_status until all are done; a failed rank raises at once.

    One rank is asked per poll (the first not known to be done): management
    calls interrupt the agents' loops and cost CPU that the fabric needs.
    `reset`, asked every EPOCH_POLL_S while ranks are not done, says whether
    the job can no longer finish (raises _TreeReset).
    """
    pending = deque(hosts)
    next_reset_check = [time.monotonic() + EPOCH_POLL_S]

    def finished() -> bool:
        while pending:
            h = pending[0]
            st = nics.nics[h].call("coll_status", job=job)
            if st["state"] == "failed":
                raise CollectiveError(f"job {job}: rank {st['rank']} ({h}) failed: {st['error']}")
            if not st["done"]:
                if reset is not None and time.monotonic() >= next_reset_check[0]:
                    next_reset_check[0] = time.monotonic() + EPOCH_POLL_S
                    if reset():
                        raise _TreeReset(job)
                return False
            pending.popleft()
        return True

    wait_for(finished, timeout_s, what, interval_s=0.1, logs=nics.fab.run.log_dir)


# ----------------------------------------------------------------- nccl-tests output

BW_UNITS = {"GB/s": 1e9, "MB/s": 1e6}
# Emulated links run at Mbit/s (DESIGN.md, time scale), where nccl-tests' GB/s
# columns would all read 0.00: the default is MB/s, in the same %6.2f columns,
# with the unit in the header. bw_unit="GB/s" prints nccl-tests' unit.
DEFAULT_BW_UNIT = "MB/s"


def _bw_scale(bw_unit: str) -> float:
    if bw_unit not in BW_UNITS:
        raise ValueError(f"bw_unit={bw_unit!r}: allowed {sorted(BW_UNITS)}")
    return BW_UNITS[bw_unit]


def nccl_header(bw_unit: str = DEFAULT_BW_UNIT) -> str:
    """nccl-tests' column header (src/common.cu), out-of-place columns only.

    Examples:
        >>> print(nccl_header())  # doctest: +NORMALIZE_WHITESPACE
        #                                                        out-of-place
        #       size         count      type   redop    root     time   algbw   busbw #wrong
        #        (B)    (elements)                               (us)  (MB/s)  (MB/s)
    """
    _bw_scale(bw_unit)
    unit = f"({bw_unit})"
    return "\n".join(
        [
            "# %10s  %12s  %8s  %6s  %6s           out-of-place" % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s"
            % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s"
            % ("(B)", "(elements)", "", "", "", "(us)", unit, unit, ""),
        ]
    )


def nccl_row(result: AllReduceResult, bw_unit: str = DEFAULT_BW_UNIT) -> str:
    """One all_reduce_perf row: size, count, type, redop, root, time, algbw, busbw, #wrong.

    Formats as nccl-tests' src/common.cu: "%12li  %12li  %8s  %6s  %6s" then
    "  %7s  %6.2f  %6.2f  %5g", the time with 2, 1 or 0 decimals below 100 us,
    below 10 ms, above. An all-gather reduces nothing: its redop is "none",
    as all_gather_perf prints it.

    Examples:
        >>> r = AllReduceResult(1048576, 262144, "float32", 4, "ring", 1, 0.5, 2097152.0,
        ...                     3145728.0, 0, {}, {}, {}, {}, True)
        >>> nccl_row(r)
        '     1048576        262144     float     sum      -1   500000    2.10    3.15      0'
    """
    scale = _bw_scale(bw_unit)
    us = result.time_s * 1e6
    time_str = "%7.0f" % us if us >= 10000.0 else "%7.1f" % us if us >= 100.0 else "%7.2f" % us
    return "%12li  %12li  %8s  %6s  %6s" % (
        result.size_bytes,
        result.count,
        NCCL_TYPE_NAMES[result.dtype],
        "none" if result.algo == "all_gather" else "sum",
        "%6i" % -1,
    ) + "  %7s  %6.2f  %6.2f  %5g" % (
        time_str,
        result.algbw_bytes_per_s / scale,
        result.busbw_bytes_per_s / scale,
        result.wrong,
    )


def nccl_table(results: Sequence[AllReduceResult], bw_unit: str = DEFAULT_BW_UNIT) -> str:
    """Header, one row per result, and nccl-tests' two summary lines."""
    scale = _bw_scale(bw_unit)
    wrong = sum(r.wrong for r in results)
    avg = sum(r.busbw_bytes_per_s for r in results) / len(results) / scale if results else 0.0
    return "\n".join(
        [nccl_header(bw_unit)]
        + [nccl_row(r, bw_unit) for r in results]
        + [
            "# Out of bounds values : %d %s" % (wrong, "FAILED" if wrong else "OK"),
            "# Avg bus bandwidth    : %g %s" % (avg, bw_unit),
        ]
    )


# ----------------------------------------------------------------- sizes and models

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
#: A RoCEv2 frame that carries a full MTU (1024 payload bytes), as emu/proto/roce.py sizes it.
ROCE_FRAME_BYTES = roce.data_frame_bytes(DEFAULT_MTU_PAYLOAD)


def parse_size(text: str | int, dtype: str = "float32") -> int:
    """Bytes from "256K" / "1M" / "4096" (binary suffixes, as nccl-tests), whole elements only.

    Examples:
        >>> parse_size("256K"), parse_size("1M", "int32"), parse_size(64)
        (262144, 1048576, 64)
    """
    raw = str(text).strip().upper()
    num, suffix = raw.rstrip("KMGB"), raw[len(raw.rstrip("KMGB")) :]
    if suffix not in _SUFFIX or not num.isdigit():
        raise ValueError(f"size {text!r}: a number with an optional K, M or G suffix")
    size = int(num) * _SUFFIX[suffix]
    itemsize = DTYPES[dtype_name(dtype)].itemsize
    if size < itemsize or size % itemsize:
        raise ValueError(f"size {text!r} = {size} B: a positive multiple of {itemsize} ({dtype})")
    return size


def parse_sizes(text: str, factor: int = 2, dtype: str = "float32") -> list[int]:
    """Sizes from "MIN:MAX" (or one size): MIN, MIN*factor, ... up to MAX (nccl-tests -b -e -f).

    Examples:
        >>> parse_sizes("1K:16K", 4)
        [1024, 4096, 16384]
    """
    if not isinstance(factor, int) or factor < 2:
        raise ValueError(f"factor={factor!r}: an integer >= 2")
    lo_text, _, hi_text = str(text).partition(":")
    lo = parse_size(lo_text, dtype)
    hi = parse_size(hi_text, dtype) if hi_text else lo
    if hi < lo:
        raise ValueError(f"sizes {text!r}: the maximum is below the minimum")
    out = []
    size = lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def parse_algos(text: str, allowed: Sequence[str] = ALGORITHM_NAMES) -> list[str]:
    """Split "ring,sharp" -> ["ring", "sharp"]; ValueError naming the allowed names.

    `allowed` narrows the names (a scenario that compares all-reduces passes
    ALLREDUCE_NAMES).

    Examples:
        >>> parse_algos("ring,all_gather")
        ['ring', 'all_gather']
        >>> parse_algos("reduce_scatter", ALLREDUCE_NAMES)
        Traceback (most recent call last):
        ...
        ValueError: a comma list of ring, sharp
    """
    algos = [a for a in str(text).split(",") if a]
    if not algos or any(a not in allowed for a in algos):
        raise ValueError(f"a comma list of {', '.join(allowed)}")
    return algos


def roce_goodput_bps(link_rate_bps: float) -> float:
    """Payload bit/s a link carries in full-MTU RoCEv2 frames (1024 of every 1082 bytes)."""
    return link_rate_bps * DEFAULT_MTU_PAYLOAD / ROCE_FRAME_BYTES


def busbw_factor(algo: str, nranks: int) -> float:
    """busbw / algbw of a collective on `nranks` ranks (nccl-tests doc/PERFORMANCE.md).

    All-reduce 2(n-1)/n; reduce-scatter and all-gather (n-1)/n, with the
    size the whole buffer. The bytes a ring moves through each rank's link
    per byte of size, so that busbw compares with the link's rate.

    Raises:
        ValueError: an unknown algorithm, or fewer than one rank.

    Examples:
        >>> busbw_factor("ring", 4), busbw_factor("sharp", 4), busbw_factor("all_gather", 4)
        (1.5, 1.5, 0.75)
    """
    if algo not in ALGORITHM_NAMES:
        raise ValueError(f"algo={algo!r}: one of {list(ALGORITHM_NAMES)}")
    if not is_int(nranks) or nranks < 1:
        raise ValueError(f"nranks={nranks!r}: an integer >= 1")
    if algo in ("reduce_scatter", "all_gather"):
        return (nranks - 1) / nranks
    return 2 * (nranks - 1) / nranks


def model_bytes_per_host(algo: str, size_bytes: int, nranks: int) -> float:
    """Payload bytes each host sends for one collective of S = `size_bytes`.

    Ring all-reduce 2(n-1)/n x S; its reduce-scatter or all-gather alone
    (n-1)/n x S (Thakur, Rabenseifner, Gropp, IJHPCA 2005: the (p-1)/p n
    beta term); in-network aggregation S.

    Examples:
        >>> model_bytes_per_host("ring", 1024, 4), model_bytes_per_host("reduce_scatter", 1024, 4)
        (1536.0, 768.0)
    """
    if algo == "ring":
        return 2 * (nranks - 1) / nranks * size_bytes
    if algo in ("reduce_scatter", "all_gather"):
        return (nranks - 1) / nranks * size_bytes
    if algo == "sharp":
        return float(size_bytes)
    raise ValueError(f"algo={algo!r}: one of {list(ALGORITHM_NAMES)}")


def as_dict(result: AllReduceResult) -> dict:
    """A result as plain data (metrics.json), with its derived values."""
    out = dataclasses.asdict(result)
    out.update(iteration_s=result.iteration_s, mean_port_bytes=result.mean_port_bytes)
    return out
