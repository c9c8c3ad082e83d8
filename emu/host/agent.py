"""The host agent: one process per host that is the host's RDMA NIC.

Owns the sockets and the clock of the NIC model (`rnic.py`) inside a host's
network namespace: an AF_PACKET socket on the host's interface for RoCEv2 and
PFC frames, UDP sockets bound to 4791 and 4792 so that the kernel does not
answer RoCEv2 and aggregation frames with ICMP port-unreachable, and the
management socket (emu/mgmt.py) through which workloads connect queue pairs,
post messages, read counters and inject faults (stuck NIC, slow receiver).
Kernel traffic (ping, iperf3) keeps flowing beside it on the lossy class.

It also runs collectives (emu/host/collective.py) on the host's own data:
`coll_setup` / `coll_start` / `coll_status` / `coll_clear` manage a job's rank
here, and the loop drives its hook (a `CollectiveRank`: `tick`, `next_wakeup`,
`on_message` for whole messages taken from the NIC's receive queues, and the
optional `on_frame` / `next_frame` for collectives that speak non-RoCE
frames). Only commands and counters cross the management socket, never data.
A hook that raises fails its job, not the loop.

Run in a host: `python -m emu.host.agent --name h1 --intf h1-eth0 --mac ... --ip ...
--rate-bps 20000000 --mgmt /run/emu/<run>/h1.nic.sock`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import math
import os
import selectors
import socket
import struct
import sys
import time
from typing import Any

from emu import profiling, realtime
from emu.config import ConfigError, CreditSpec
from emu.fidelity import CompiledLoopMonitor, GcMonitor, ProcessFidelity
from emu.host import nicpath
from emu.host.collective import CollectiveRank, CollectiveSpec, RankData
from emu.host.rnic import GO_BACK_N, LOSS_RECOVERY, MAX_OUTSTANDING_PACKETS, NicConfig
from emu.mgmt import Deferred, MgmtServer
from emu.proto import credit, pfc, roce
from emu.proto.agg import AGG_UDP_PORT
from emu.proto.roce import ROCEV2_UDP_PORT
from emu.registry import die_with_parent, disable_huge_pages, stop_on_signals

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PACKET_QDISC_BYPASS = 20  # linux/if_packet.h
RX_BATCH = 64
SAMPLE_S = 0.1
MAX_IDLE_S = 0.05
# The C loop's agents put their samples and idle calls on one grid of this
# process, so that the NICs of one process (run_agents) come due together and
# one wake-up serves them all; its origin is the process's own, so that
# separate processes do not all wake at the same instants.
_GRID_ORIGIN_S = time.monotonic()


def _on_grid(now: float, period_s: float) -> float:
    """The first instant after `now` on this process's grid of `period_s`."""
    return _GRID_ORIGIN_S + (math.floor((now - _GRID_ORIGIN_S) / period_s) + 1) * period_s


def thread_cpu_timed(fn, *args):
    """(fn(*args), the CPU this thread spent in it): a rank's data work, timed where it runs
    (the management worker), so that the NIC's own CPU can be told from it."""
    started = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - started


class Agent:
    """The event loop of one host's NIC."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name = args.name
        cfg = NicConfig(
            mac=args.mac,
            ip=args.ip,
            rate_bps=args.rate_bps,
            dcqcn=not args.no_dcqcn,
            modelled_rate_bps=args.modelled_rate_bps,
            path_rtt_bound_s=args.path_rtt_bound_s,
            loss_recovery=args.loss_recovery,
            ooo_window_packets=args.ooo_window_packets,
            credit=args.credit,
        )
        self.started = time.monotonic()
        # The C engine (emu/host/csrc/) unless EMU_NIC=python.
        self.rnic = nicpath.make_nic(cfg, now=self.started)
        self.link_rate_bps = cfg.rate_bps
        self.compute_factor = 1.0  # > 1: a straggler (faults.straggler)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((args.intf, ETH_P_ALL))
        self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        # The NIC model paces itself and stops at once on PAUSE. The host's own
        # qdisc (the tbf of Fabric(host_nic_pacing=True), which paces the
        # kernel's traffic) would hold frames that PAUSE could no longer stop,
        # and pace them a second time: our frames go straight to the device.
        self.sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setblocking(False)
        # Our RoCEv2 frames (and in-network aggregation's) also reach the kernel's
        # UDP stack; a bound socket we never read keeps it from answering them
        # with ICMP port-unreachable. Bound to this port's address: a GPU's NVLink
        # agent runs beside its NIC's in the same namespace (emu/traffic/rdma.py).
        self.sinks = []
        for port in (ROCEV2_UDP_PORT, AGG_UDP_PORT):
            sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sink.bind((cfg.ip, port))
            sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            self.sinks.append(sink)
        self.intf = args.intf
        self.fidelity = ProcessFidelity(
            self.name, "nic", {0: self.rnic.clock}, self.rnic.clock.frame_s, self.started
        )
        self.fidelity.port_names = {0: args.intf}
        # select(2), not epoll: epoll_wait's timeout is whole milliseconds, so a
        # loop that sleeps until the next frame's slot woke up to 1 ms late
        # (1.7 frame times at 20 Mbit/s; measured by emu/fidelity.py). select
        # takes microseconds, and a switch has a handful of descriptors.
        self.sel = selectors.SelectSelector()
        self.sel.register(self.sock, selectors.EVENT_READ, "port")
        self.mgmt = MgmtServer(
            args.mgmt,
            {
                "info": lambda: {
                    "name": self.name,
                    "ip": cfg.ip,
                    "mac": cfg.mac,
                    "rate_bps": cfg.rate_bps,
                    "modelled_rate_bps": cfg.modelled_rate_bps,
                    "rto_s": self.rnic.rto_s,
                    "path_rtt_bound_s": cfg.path_rtt_bound_s,
                    "engine": "c" if isinstance(self.rnic, nicpath.CRnic) else "python",
                    "loss_recovery": cfg.loss_recovery,
                    "ooo_window_packets": cfg.ooo_window_packets,
                    "reorder_timeout_s": self.rnic.reorder_s,
                },
                "connect": self._connect,
                "post_send": self._post_send,
                "post_write": self._post_write,
                "poll_completions": self._poll_completions,
                "stats": self._stats,
                "samples": lambda since=0: [s for s in self.samples if s[0] >= since],
                "set": self._set,
                "coll_setup": self._coll_setup,
                "coll_start": self._coll_start,
                "coll_status": self._coll_status,
                "coll_clear": self._coll_clear,
                "coll_list": lambda: sorted(self.jobs),
                "fidelity": self._fidelity,
                "fidelity_reset": lambda: self.fidelity.reset(time.monotonic()),
            },
            worker_init=realtime.normal_for_this_thread,
        )
        self.sel.register(self.mgmt.listener, selectors.EVENT_READ, "mgmt-listen")
        self.sel.register(self.mgmt.done_reader, selectors.EVENT_READ, "mgmt-done")
        self.samples: list = []
        self.tx_errors = 0
        self.stopping = False
        self.jobs: dict[str, CollectiveRank] = {}
        self.job_errors: dict[str, str] = {}  # jobs whose hook raised
        self._qp_owner: dict[int, str] = {}  # receive QP -> the job that consumes it
        self._frame_takers: list[str] = []  # jobs with on_frame
        self._frame_makers: list[str] = []  # jobs with next_frame
        self._conns: dict[int, object] = {}  # management connections (the C loop's)
        self._next_sample = self.started

    # ----- management -------------------------------------------------------

    def _connect(
        self,
        qpn: int,
        peer_qpn: int,
        peer_mac: str,
        peer_ip: str,
        udp_sport: int,
        max_rate_bps: float | None = None,
        dscp: int = roce.DSCP_DATA,
    ) -> dict:
        self.rnic.connect(
            int(qpn),
            int(peer_qpn),
            peer_mac,
            peer_ip,
            int(udp_sport),
            time.monotonic(),
            max_rate_bps=max_rate_bps,
            dscp=int(dscp),
        )
        return {"qpn": qpn}

    def _post_send(self, qpn: int, size_bytes: int, count: int = 1) -> list[int]:
        now = time.monotonic()
        return [self.rnic.post_send(int(qpn), int(size_bytes), now) for _ in range(int(count))]

    def _post_write(
        self, qpn: int, size_bytes: int, count: int = 1, remote_va: int = 0, rkey: int = 0
    ) -> list[int]:
        now = time.monotonic()
        return [
            self.rnic.post_write(int(qpn), int(size_bytes), now, int(remote_va), int(rkey))
            for _ in range(int(count))
        ]

    def _poll_completions(self, qpn: int, max_entries: int = 1024) -> list[dict]:
        """Completions not polled before, oldest first (like ibv_poll_cq)."""
        if int(qpn) not in self.rnic.qpns:
            raise ValueError(f"unknown QP {qpn}")
        return [
            {
                "msg_id": msg_id,
                "size_bytes": size_bytes,
                "latency_s": completed_at - posted_at,
                # On the machine's monotonic clock, which every process shares:
                # a driver can place many QPs' messages on one time line.
                "posted_at": posted_at,
                "completed_at": completed_at,
            }
            for msg_id, size_bytes, posted_at, completed_at in self.rnic.take_completions(
                int(qpn), int(max_entries)
            )
        ]

    def _stats(self) -> dict:
        now = time.monotonic()
        st = self.rnic.stats(now)
        st["time"] = now
        st["tx_errors"] = self.tx_errors
        if isinstance(self.rnic, nicpath.CRnic):  # the C loop's own sends
            st["tx_errors"] += self.rnic.engine.loop_stats()["tx_errors"]
        return st

    def _set(
        self,
        drain_rate_bps: float | None = None,
        stuck: bool | None = None,
        unlimited_drain: bool = False,
        compute_factor: float | None = None,
        rate_bps: float | None = None,
    ) -> dict:
        """Faults: a slow receiver (drain rate), a stuck NIC (no drain, continuous PAUSE),
        a straggler (every collective's compute step `compute_factor` times longer) or a
        slower NIC (`rate_bps`, the wire pacing; its link's rate restores it)."""
        if compute_factor is not None:
            if not 0 < float(compute_factor) < float("inf"):
                raise ValueError(f"compute_factor={compute_factor}: must be a positive number")
            self.compute_factor = float(compute_factor)
            for job in self.jobs.values():
                job.compute_factor = self.compute_factor
        if rate_bps is not None and not 0 < float(rate_bps) <= self.link_rate_bps:
            raise ValueError(f"rate_bps={rate_bps}: must be in (0, {self.link_rate_bps}]")
        if drain_rate_bps is not None and drain_rate_bps < 0:
            raise ValueError(f"drain_rate_bps={drain_rate_bps}: must be >= 0")
        self.rnic.configure(rate_bps, drain_rate_bps, unlimited_drain)
        if stuck is not None:
            self.rnic.stuck = bool(stuck)
        return {
            "drain_rate_bps": self.rnic.cfg.drain_rate_bps,
            "stuck": self.rnic.stuck,
            "compute_factor": self.compute_factor,
            "rate_bps": self.rnic.cfg.rate_bps,
        }

    def _read_kernel_drops(self) -> None:
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return
        self.fidelity.kernel_drops[0] += struct.unpack("II", raw)[1]  # reading resets them

    def _fidelity(self) -> dict:
        self._read_kernel_drops()
        # The NIC model's data frames are all RoCEv2 on the lossless priority.
        return self.fidelity.snapshot(time.monotonic(), self.rnic.clock.frames)

    # ----- collectives -------------------------------------------------------

    def _coll_setup(self, **args) -> Deferred:
        """Set up this host's rank of a collective job (see CollectiveSpec for the keys).

        Generates the rank's input and the expected result (the rank checks
        itself) on the management worker, and then turns data delivery on for
        the QPs it receives on. Returns {"job", "rank", "recv_qpns", "tx_qpns"}.
        """
        spec = CollectiveSpec.from_args(args)
        self._no_job_yet(spec.job)
        return Deferred(
            lambda: thread_cpu_timed(RankData.build, spec),
            lambda built: self._coll_install(spec, *built),
        )

    def _no_job_yet(self, job: str) -> None:
        if job in self.jobs:
            raise ValueError(f"job {job!r} exists; coll_clear it first")

    def _coll_install(self, spec: CollectiveSpec, data: RankData, cpu_s: float = 0.0) -> dict:
        self._no_job_yet(spec.job)  # again: another setup of it may have finished first
        job = CollectiveRank(spec, self.rnic, data)
        job.data_cpu_s += cpu_s
        busy = {q: self._qp_owner[q] for q in job.recv_qpns if q in self._qp_owner}
        if busy:
            raise ValueError(f"job {spec.job!r}: QPs {busy} are taken by other jobs")
        for q in job.recv_qpns:
            self.rnic.set_deliver_data(q, True)
            self._qp_owner[q] = spec.job
        job.compute_factor = self.compute_factor
        self.jobs[spec.job] = job
        self._refresh_hooks()
        return {
            "job": spec.job,
            "rank": spec.rank,
            "recv_qpns": list(job.recv_qpns),
            "tx_qpns": list(job.tx_qpns),
        }

    def _coll_start(self, job: str, at: float | None = None) -> dict:
        """Start `job` at wall-clock time `at` (time.time() seconds; None or past: now).

        Wall-clock rather than monotonic time, so that ranks on different
        machines can be told one instant. Returns {"start_in_s"}.
        """
        j = self._job(job)
        now = time.monotonic()
        delay = 0.0 if at is None else max(0.0, float(at) - time.time())
        j.start(now + delay)
        return {"start_in_s": delay}

    def _coll_status(self, job: str, check: bool = False) -> dict | Deferred:
        """The job's status on this rank: state, done, elapsed_s per iteration, bytes; with
        `check`, also `wrong` and `digest` (ask once every rank is done: the comparison
        runs on the management worker)."""
        j = self._job(job)
        if not check:
            return self._status_of(job, j)

        def recorded(checked):
            outcomes, cpu_s = checked
            j.record_checks(outcomes)
            j.data_cpu_s += cpu_s
            return self._status_of(job, j)

        work = j.check_work()  # takes the results now, on the loop's thread
        return Deferred(lambda: thread_cpu_timed(work), recorded)

    def _status_of(self, job: str, j: CollectiveRank) -> dict:
        st = dict(j.status(time.monotonic()))
        if job in self.job_errors:
            st.update(state="failed", done=False, error=self.job_errors[job])
        return st

    def _coll_clear(self, job: str) -> dict:
        """Forget `job` (finished or not) and stop delivering data on its receive QPs."""
        j = self._job(job)
        for q in [q for q, owner in self._qp_owner.items() if owner == job]:
            del self._qp_owner[q]
            self.rnic.set_deliver_data(q, False)
        close = getattr(j, "close", None)
        if close is not None:
            close()
        del self.jobs[job]
        self.job_errors.pop(job, None)
        self._refresh_hooks()
        return {"cleared": job}

    def _job(self, job: str) -> CollectiveRank:
        j = self.jobs.get(job)
        if j is None:
            raise ValueError(f"unknown job {job!r}; jobs here: {sorted(self.jobs)}")
        return j

    def _refresh_hooks(self) -> None:
        live = [name for name in self.jobs if name not in self.job_errors]
        self._frame_takers = [
            n
            for n in live
            if getattr(self.jobs[n], "wants_frames", hasattr(self.jobs[n], "on_frame"))
        ]
        self._frame_makers = [
            n
            for n in live
            if getattr(self.jobs[n], "sends_frames", hasattr(self.jobs[n], "next_frame"))
        ]

    def _job_failed(self, name: str, exc: Exception) -> None:
        log.warning(
            "collective job %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG)
        )
        self.job_errors[name] = f"{type(exc).__name__}: {exc}"
        fail = getattr(self.jobs[name], "fail", None)
        if fail is not None:
            fail(self.job_errors[name])
        self._refresh_hooks()

    def _jobs_tick(self, now: float) -> None:
        for name, job in list(self.jobs.items()):
            if name in self.job_errors:
                continue
            try:
                job.tick(now)
            except Exception as exc:  # noqa: BLE001 - a failing job must not stop the NIC
                self._job_failed(name, exc)

    def _jobs_frames(self, now: float) -> None:
        for name in list(self._frame_makers):
            try:
                frame = self.jobs[name].next_frame(now)
                while frame is not None:
                    self._send(frame)
                    frame = self.jobs[name].next_frame(now)
            except Exception as exc:  # noqa: BLE001 - a failing job must not stop the NIC
                self._job_failed(name, exc)

    def _jobs_wakeup(self, now: float) -> float | None:
        times = []
        for name, job in self.jobs.items():
            if name not in self.job_errors:
                t = job.next_wakeup(now)
                if t is not None:
                    times.append(t)
        return min(times) if times else None

    def _deliver_messages(self, now: float) -> None:
        """Hand whole received messages to the jobs that own their QPs, in order."""
        for qpn, name in list(self._qp_owner.items()):
            if not self.rnic.has_messages(qpn):
                continue
            messages = self.rnic.take_messages(qpn)
            if name in self.job_errors:
                continue  # a failed job's data is dropped
            job = self.jobs[name]
            try:
                for msn, data in messages:
                    job.on_message(qpn, msn, data, now)
            except Exception as exc:  # noqa: BLE001 - a failing job must not stop the NIC
                self._job_failed(name, exc)

    def _offer_frame(self, frame: bytes, now: float) -> bool:
        """Give a non-RoCE, non-PFC frame to the jobs that take frames; True if one did."""
        for name in self._frame_takers:
            try:
                if self.jobs[name].on_frame(frame, now):
                    return True
            except Exception as exc:  # noqa: BLE001 - a failing job must not stop the NIC
                self._job_failed(name, exc)
        return False

    # ----- the loop ---------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except OSError:
            self.tx_errors += 1  # as if lost on the wire: go-back-N recovers

    def _sample(self, now: float) -> None:
        counters = {q: self.rnic.qp_counters(q) for q in self.rnic.qpns}
        dcqcn = self.rnic.cfg.dcqcn
        self.samples.append(
            (
                now,
                {q: c["tx_bytes"] for q, c in counters.items()},
                {q: c["rx_bytes"] for q, c in counters.items()},
                {q: (c["rate_bps"] if dcqcn else None) for q, c in counters.items()},
            )
        )
        del self.samples[:-6000]

    def run(self) -> None:
        """Serve the NIC until `stopping`: the C loop with the C engine, else `_run_python`."""
        try:
            if isinstance(self.rnic, nicpath.CRnic):
                run_agents([self])
            else:
                self._run_python()
        finally:
            self.close()

    def close(self) -> None:
        self.mgmt.close()
        self.sock.close()
        for sink in self.sinks:
            sink.close()

    # ----- the C loop's callbacks (run_agents) --------------------------------

    def python_fds(self) -> list[int]:
        """The sockets of this agent's own that the C loop sleeps on."""
        return [self.mgmt.listener.fileno(), self.mgmt.done_reader.fileno(), *self._conns]

    def serve(self, now: float, ready: list[int], frames: list[bytes]) -> tuple[float, bool]:
        """What is not per frame: management, collectives, samples.

        Returns when it wants to be called next (<0: stop) and whether its
        sockets changed (the loop must watch the new set).
        """
        if self.stopping:
            return -1.0, False
        changed = False
        listener, done = self.mgmt.listener.fileno(), self.mgmt.done_reader.fileno()
        for fd in ready:
            if fd == listener:
                conn = self.mgmt.accept()
                if conn:
                    self._conns[conn.sock.fileno()] = conn
                    changed = True
            elif fd == done:
                self.mgmt.on_done()
            elif fd in self._conns and not self.mgmt.on_readable(self._conns[fd]):
                self._conns.pop(fd).sock.close()
                changed = True
        self.mgmt.take_served()
        for frame in frames:
            if self._offer_frame(frame, now):
                self.rnic.credit_rx(frame)  # its blocks, on a credit link (as `_receive`)
            else:
                for reply in self.rnic.receive(frame, now):
                    self._send(reply)
        if self.jobs:
            self._jobs_tick(now)
            self._jobs_frames(now)
        if self._qp_owner:
            self._deliver_messages(now)
        self.rnic.engine.set_takers(bool(self._frame_takers))
        if now >= self._next_sample:
            self._sample(now)
            self._read_kernel_drops()
            self._next_sample = _on_grid(now, SAMPLE_S)
        due = min(self._next_sample, _on_grid(now, MAX_IDLE_S))
        if self.jobs:
            wake = self._jobs_wakeup(now)
            if wake is not None and wake < due:
                due = wake
        return due, changed

    def _run_python(self) -> None:
        rnic = self.rnic
        next_sample = time.monotonic()
        conns = {}
        loop = self.fidelity.loop
        awake_since = time.monotonic()  # when the loop last came back from select()
        awake_cpu = time.thread_time()
        work: list = []  # what this pass did (names the longest stall)
        frames_read = 0  # and how many frames it read
        while not self.stopping:
            now = time.monotonic()
            for frame in rnic.tick(now):
                self._send(frame)
            if self.jobs:
                self._jobs_tick(now)
            frame = rnic.next_frame(now)
            while frame is not None:
                self._send(frame)
                frame = rnic.next_frame(now)
            if self._frame_makers:
                self._jobs_frames(now)
            if now >= next_sample:
                self._sample(now)
                self._read_kernel_drops()
                next_sample = now + SAMPLE_S
            wire_due = rnic.next_wakeup(now)
            deadline = min(
                t
                for t in (
                    wire_due,
                    rnic.next_tick(),
                    next_sample,
                    now + MAX_IDLE_S,
                    self._jobs_wakeup(now) if self.jobs else None,
                )
                if t is not None
            )
            asleep_at = time.monotonic()
            worked_cpu = time.thread_time() - awake_cpu
            timeout = max(0.0, deadline - asleep_at)
            ready = self.sel.select(timeout)
            woke = time.monotonic()
            awake_cpu = time.thread_time()
            loop.woke(
                awake_since,
                asleep_at,
                timeout,
                woke,
                wire_due,
                any(key.data == "port" for key, _ in ready),
                work,
                worked_cpu,
                frames_read,
            )
            awake_since = woke
            frames_read = 0
            work = ["mgmt" if key.data != "port" else "port" for key, _ in ready]
            if self.jobs:
                work.append("collective")
            for key, _ in ready:
                if key.data == "port":
                    now = time.monotonic()
                    frames_read += self._receive(now)
                    if self._qp_owner:
                        self._deliver_messages(now)
                else:
                    self._serve_mgmt(key.data, conns)
            served = self.mgmt.take_served()
            if served:
                work = [f"mgmt({served})" if w == "mgmt" else w for w in work]

    def _serve_mgmt(self, ready: Any, conns: dict) -> None:
        """Serve one ready management socket: a job done, a new connection, or a request.

        `ready` is the selector key's data: "mgmt-done", "mgmt-listen" or a connection.
        """
        if ready == "mgmt-done":
            self.mgmt.on_done()
        elif ready == "mgmt-listen":
            conn = self.mgmt.accept()
            if conn:
                conns[conn.sock.fileno()] = conn
                self.sel.register(conn.sock, selectors.EVENT_READ, conn)
        elif not self.mgmt.on_readable(ready):
            self.sel.unregister(ready.sock)
            conns.pop(ready.sock.fileno(), None)
            ready.sock.close()

    def _receive(self, now: float) -> int:
        """Read up to RX_BATCH frames and hand them to the NIC model; how many it read."""
        read = 0
        for read in range(1, RX_BATCH + 1):
            try:
                frame = self.sock.recv(9216)
            except BlockingIOError:
                return read - 1
            except OSError:
                return read - 1
            if (
                self._frame_takers
                and not roce.is_rocev2(frame)
                and not pfc.is_mac_control(frame)
                and not credit.is_flow_control(frame)
                and self._offer_frame(frame, now)
            ):
                self.rnic.credit_rx(frame)  # its blocks, on a credit link (receive counts the rest)
                continue
            try:
                replies = self.rnic.receive(frame, now)
            except Exception:  # noqa: BLE001 - a bad frame must never stop the NIC
                log.debug("frame not processed", exc_info=True)
                continue
            for reply in replies:
                self._send(reply)
        return read


def keep_page_faults_small() -> None:
    """Touch a collective's new arrays in 4 KB pages, not 2 MB ones, in this process.

    numpy asks for transparent huge pages on arrays of 4 MB and more
    (madvise(MADV_HUGEPAGE), NUMPY_MADVISE_HUGEPAGE). The first write to
    such a page zeroes all 2 MB of it at once: 6.6 ms of the loop's thread in
    the sharp-allreduce ring on the 2-core VM (a 64 KB slice reduced into a
    fresh result array), and with the eight ranks of one process finishing a
    step together, 48-83 ms in one pass, 40-68 frame times of every NIC in the
    process stalled (`EMU_NIC_PROCESSES=1 emu run sharp-allreduce --set
    rate_mbps=10`, 3 runs at b1902d5, all unfaithful). With 4 KB pages the
    same zeroing is spread over the slices as they arrive: 12/12 checks and
    faithful. A NIC's reassembly and a rank's data are not worth a stall for
    the TLB's sake.
    """
    if not disable_huge_pages():
        log.info("PR_SET_THP_DISABLE refused: a 2 MB page's first touch may stall the loop")


def run_agents(agents: list[Agent]) -> None:
    """Serve the C engines of `agents` from one loop (emu/host/csrc/nic_loop.c) until one stops.

    One wake-up serves every engine whose frame is due; Python runs only for
    the agents that have something to do (`Agent.serve`): a readable socket of
    theirs, frames or whole messages from their engine for a collective (the
    loop names those engines), or the time they asked to be called again
    reached. Each agent is thus served when it would be in a process of its
    own, and an idle one costs nothing (tests/unit/test_nic_loop.py).
    """
    loop = nicpath.new_loop()
    owner: dict[int, int] = {}  # a Python socket -> the index of its agent
    # When each agent asked to be called next; -inf: at the first pass.
    due = [-math.inf] * len(agents)
    for agent in agents:
        engine = agent.rnic.engine
        agent.fidelity.loop = CompiledLoopMonitor(engine, agent.fidelity.loop.frame_s)
        loop.add(engine, agent.sock.fileno())

    def watch() -> None:
        owner.clear()
        for index, agent in enumerate(agents):
            owner.update(dict.fromkeys(agent.python_fds(), index))
        loop.watch(list(owner))

    def serve(now: float, ready: tuple, frames: tuple, wanting: tuple) -> float:
        # A signal sets `stopping` (stop_on_signals) and wakes the loop with no
        # work for anyone: ask every agent, served or not.
        if any(agent.stopping for agent in agents):
            return -1.0
        readies: dict[int, list[int]] = {}
        for fd in ready:
            index = owner.get(fd)
            if index is not None:
                readies.setdefault(index, []).append(fd)
        taken: dict[int, list[bytes]] = {}
        for index, frame in frames:
            taken.setdefault(index, []).append(frame)
        changed = False
        for index, agent in enumerate(agents):
            idle = due[index] > now and index not in wanting
            if idle and index not in readies and index not in taken:
                continue
            wants, moved = agent.serve(now, readies.get(index, []), taken.get(index, []))
            if wants < 0:
                return -1.0
            due[index] = wants
            changed = changed or moved
        if changed:
            watch()
        return min(due)

    watch()
    loop.run(serve)


def _credit_spec(text: str) -> CreditSpec:
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ConfigError("expected a JSON object")
        return CreditSpec.from_dict(
            {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        )
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"--credit: {exc}") from None


def _seconds(text: str) -> float:
    """A finite duration >= 0, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, a finite number >= 0")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emu-host-agent", description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--intf", required=True)
    p.add_argument("--mac", required=True)
    p.add_argument("--ip", required=True)
    p.add_argument("--rate-bps", type=int, required=True)
    p.add_argument("--modelled-rate-bps", type=float, default=25e9)
    p.add_argument(
        "--path-rtt-bound-s",
        type=_seconds,
        default=0.0,
        help="the fabric's worst round trip for this NIC (emu/host/rto.py); the RTO is never "
        "below it",
    )
    p.add_argument("--no-dcqcn", action="store_true")
    p.add_argument(
        "--loss-recovery",
        choices=LOSS_RECOVERY,
        default=GO_BACK_N,
        help="go-back-n; go-back-0: restart the whole message on a loss; selective: place "
        "packets that arrive out of order, NAK only holes found lost and resend only those "
        "(emu/host/rnic.py, emu/host/reorder.py)",
    )
    p.add_argument(
        "--ooo-window-packets",
        type=int,
        default=MAX_OUTSTANDING_PACKETS,
        help="selective: how many PSNs beyond the expected one the NIC holds (its bitmap)",
    )
    p.add_argument(
        "--credit",
        type=_credit_spec,
        default=None,
        help="credit-based link flow control instead of PFC: JSON of emu.config.CreditSpec, "
        'e.g. {"enabled": true}',
    )
    p.add_argument("--mgmt", required=True)
    p.add_argument(
        "--rt-priority",
        type=int,
        default=0,
        help="SCHED_RR priority (emu/realtime.py); 0: normal scheduling",
    )
    p.add_argument("--log-level", default="INFO")
    return p


CLONE_NEWNET = 0x40000000  # linux/sched.h


def _setns(fd: int) -> None:
    """Move this thread into the network namespace `fd` refers to (setns(2))."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


_libc = ctypes.CDLL(None, use_errno=True)


class _Group:
    """The agents of one process: a signal stops them all (registry.stop_on_signals)."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents

    @property
    def stopping(self) -> bool:
        return any(a.stopping for a in self.agents)

    @stopping.setter
    def stopping(self, on: bool) -> None:
        for a in self.agents:
            a.stopping = on

    def run(self) -> None:
        try:
            run_agents(self.agents)
        finally:
            for a in self.agents:
                a.close()


def group_main(path: str, rt_priority: int) -> int:
    """Serve several hosts' NICs in this process: one C loop, one wake-up for all due frames.

    `path` is a JSON list of {"argv": [this module's arguments for one NIC],
    "netns": "/proc/PID/ns/net" of its host}. Each NIC's sockets are made in
    its host's namespace (setns(2) for the moment it takes), its management
    socket is its own, so that emu/traffic/rdma.py talks to it as to an agent
    of its own process.
    """
    with open(path) as f:
        specs = json.load(f)
    parser = _parser()
    die_with_parent()
    keep_page_faults_small()
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    agents = []
    try:
        for spec in specs:
            args = parser.parse_args(spec["argv"])
            ns = os.open(spec["netns"], os.O_RDONLY)
            try:
                _setns(ns)
                agents.append(Agent(args))
            finally:
                _setns(home)
                os.close(ns)
    finally:
        os.close(home)
    for a in agents:
        if not isinstance(a.rnic, nicpath.CRnic):
            raise SystemExit(f"{a.name}: a shared NIC process needs the C engine (EMU_NIC=c)")
    sched = realtime.apply(rt_priority)
    sys.setswitchinterval(0.0005)
    for a in agents:
        a.fidelity.sched = sched
    group = _Group(agents)
    stop_on_signals(group)
    GcMonitor.freeze()
    profiling.run("+".join(a.name for a in agents), group.run)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--group"]:
        if len(argv) < 2:
            raise SystemExit("--group FILE [--rt-priority N] [--log-level L]")
        rest = argparse.ArgumentParser(prog="emu-host-agent --group")
        rest.add_argument("--rt-priority", type=int, default=0)
        rest.add_argument("--log-level", default="INFO")
        opts = rest.parse_args(argv[2:])
        logging.basicConfig(
            level=opts.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        return group_main(argv[1], opts.rt_priority)
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    die_with_parent()
    keep_page_faults_small()
    sched = realtime.apply(args.rt_priority)
    # The management worker (a collective's setup, emu/mgmt.py) shares the GIL
    # with the loop; numpy releases it for large arrays, and between those the
    # loop should wait at most a fraction of a frame time, not Python's 5 ms.
    sys.setswitchinterval(0.0005)
    agent = Agent(args)
    agent.fidelity.sched = sched
    stop_on_signals(agent)
    GcMonitor.freeze()  # set up: keep it out of every later collection (emu/fidelity.py)
    profiling.run(args.name, agent.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
