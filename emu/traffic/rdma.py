"""RDMA workloads on the host agents: start NICs, connect queue pairs, post messages.

Owns the orchestration of emu's NIC model across a fabric: one agent process
per host (emu/host/agent.py, registered with the run so teardown stops it),
queue pairs connected on both ends, SEND messages posted, counters and
throughput samples collected. `RdmaHosts` owns what its agents share: the QP
numbers it hands out, the ring collectives' QPs (connected once, reused) and
the names of collective jobs on its agents. Scenarios and
emu/traffic/collectives.py use this; nothing here decides what a scenario
checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from emu import answers, mgmt, realtime
from emu import fabric as fabric_mod
from emu.config import parse_qos
from emu.host import nicpath
from emu.host.rnic import GO_BACK_N, LOSS_RECOVERY
from emu.host.rto import path_rtt_bound_s
from emu.registry import wait_for

if TYPE_CHECKING:
    # Annotations only: emu.net imports emu.faults, whose NIC faults start agents here.
    from emu.net import Fabric

AGENT_READY_TIMEOUT_S = 20.0
NIC_PROCESSES_ENV = "EMU_NIC_PROCESSES"
# A process per NIC by default. Every NIC of a set in one process spent 13 us
# and 0.13 wake-ups per frame in the ring at 10 Mbit/s, against 34 us and 0.89
# a process per NIC (without the ranks' data work; 088f64c, 8ac55c4;
# docs/performance.md, "The NIC agent in C"), but one loop serves its NICs in
# turn: sixteen busy ones (per-packet AR on the k=4 fat-tree) lost 2.1% of a
# link's time (limit 1%) at c26266e, where a process per NIC keeps up.
DEFAULT_NIC_PROCESSES = 0


@dataclass
class Nic:
    host: str
    path: str
    proc: subprocess.Popen

    def call(self, cmd: str, **args):
        return mgmt.call(self.path, cmd, **args)


class RdmaHosts:
    """The NICs of a fabric's hosts, started on construction (one agent per host).

    Each NIC models hardware at its link rate times the fabric's time scale
    (emu/fabric/, "The time scale"): DCQCN's timers and rate steps, the RTO
    and the RNR timer run on that clock. Build the fabric with
    ``modelled_rate_bps=25e9`` for the 25 Gbit/s NICs of the HPCC/DCQCN ns-3
    configurations; at time scale 1 the NIC is as slow as its emulated link,
    and DCQCN's 55 us timers and the 67 ms RTO run in real time. The RTO is
    never below the fabric's worst round trip from the NIC's port, which
    each agent gets from the graph and the switches' QoS (emu/host/rto.py:
    the lossless buffer bound), whatever the time scale.
    """

    def __init__(
        self,
        fab: Fabric,
        hosts: list[str],
        dcqcn: bool = True,
        loss_recovery: str = GO_BACK_N,
        port: str = "nic",
        nic_processes: int | None = None,
    ) -> None:
        """Start the NICs of `hosts`; `loss_recovery` is the NICs' (emu/host/rnic.py).

        `loss_recovery`: "go-back-n" (the default: strict in-order receive, as
        IBA and today's RoCE NICs), "go-back-0" (Guo et al.'s livelocking
        firmware) or "selective" (the NIC an adaptive-routing fabric pairs
        with: out-of-order placement, a NAK only for a hole found lost, only
        that PSN resent; emu/host/reorder.py). Every NIC of the set runs it,
        as both ends of a connection must.

        `port` "nvlink" runs them on the GPUs' NVLink ports instead (a
        rail_optimized fabric, emu/fabric/ `host_ports`): the same NIC
        model, at the NVLink rate, whose queue pairs address the peers'
        NVLink ports, so everything it sends crosses the node's NVSwitch. Its
        agents are named ``<host>-nvlink`` (in fidelity records and `emu ctl`).

        `nic_processes` N > 0 serves the NICs from N processes, one C loop
        each (emu/host/agent.py `group_main`: one wake-up serves every NIC
        whose frame is due); 0 a process per NIC; None: `EMU_NIC_PROCESSES`,
        else DEFAULT_NIC_PROCESSES (0). `EMU_NIC=python` runs a process per NIC.

        Raises:
            ValueError: an unknown `loss_recovery`, a host without such a port,
                or a negative `nic_processes`.
        """
        if nic_processes is None:
            text = os.environ.get(NIC_PROCESSES_ENV, "") or str(DEFAULT_NIC_PROCESSES)
            try:
                nic_processes = int(text)
            except ValueError:
                raise ValueError(
                    f"{NIC_PROCESSES_ENV}={text!r}: expected an integer >= 0"
                ) from None
        if not isinstance(nic_processes, int) or nic_processes < 0:
            raise ValueError(f"nic_processes={nic_processes!r}: expected an integer >= 0")
        self.nic_processes = nic_processes
        if loss_recovery not in LOSS_RECOVERY:
            raise ValueError(
                f"loss_recovery={loss_recovery!r}: must be one of {', '.join(LOSS_RECOVERY)}"
            )
        self.fab = fab
        self.port = port
        self.ports: dict[str, fabric_mod.HostPort] = {}
        self.nics: dict[str, Nic] = {}
        self.dcqcn = dcqcn
        self.loss_recovery = loss_recovery
        self._qpn = 100
        self._ring_qps: dict[tuple[str, str], int] = {}  # (src, dst) -> the ring's QP
        self._jobs = 0  # collective jobs named so far
        self._names = threading.Lock()  # new_job's count
        if port == "nic" and getattr(fab, "nics", None) is None:
            fab.nics = self  # the fabric's NIC agents: its NIC faults and collectives use these
        self.add(hosts)

    def add(self, hosts: Sequence[str]) -> list[str]:
        """Start the NICs of those `hosts` that have none here yet, as the others were started.

        Returns the hosts whose agents were started now (all ready on return).

        Raises:
            ValueError: a host without this set's port.
        """
        new = [h for h in dict.fromkeys(hosts) if h not in self.nics]
        try:
            self.ports.update({h: fabric_mod.host_port(self.fab.graph, h, self.port) for h in new})
        except fabric_mod.FabricSpecError as exc:
            raise ValueError(str(exc)) from None
        if self.nic_processes > 0 and self.can_share() and new:
            # A process's agents share its server (a fabric over several servers).
            by_server: dict[str, list[str]] = {}
            for h in new:
                by_server.setdefault(self.fab.server_of(h), []).append(h)
            for on_server in by_server.values():
                groups = [on_server[k :: self.nic_processes] for k in range(self.nic_processes)]
                for group in (g for g in groups if g):
                    _start_shared(self.fab, [(self, h) for h in group])
        else:
            for h in new:
                self.nics[h] = self._start_agent(h)
        for h in new:
            self._wait_ready(h, self.nics[h])
        return new

    def can_share(self) -> bool:
        """Whether several agents can share a process: C engines (credit link or PFC)."""
        return nicpath.engine_name() == "c"

    def _agent_args(self, h: str) -> tuple[str, str, list[str]]:
        """(agent name, management socket, emu.host.agent's arguments) of host `h`'s NIC."""
        fab = self.fab
        where = self.ports[h]
        rate = where.rate_bps
        modelled_rate_bps = rate * fab.time_scale
        name = h if self.port == "nic" else f"{h}-{self.port}"
        path = os.path.join(fab.run.sock_dir, f"{name}.nic.sock")
        argv = [
            "--name",
            name,
            "--intf",
            where.intf,
            "--mac",
            where.mac,
            "--ip",
            where.ip,
            "--rate-bps",
            str(rate),
            "--modelled-rate-bps",
            str(modelled_rate_bps),
            "--path-rtt-bound-s",
            # What the switches can hold on the NIC's paths: the floor of its RTO.
            repr(path_rtt_bound_s(fab.graph, h, parse_qos(fab.qos), self.port)),
            "--mgmt",
            fab.path_on(h, path),
            "--rt-priority",
            str(realtime.configured_priority()),
            "--loss-recovery",
            self.loss_recovery,
        ]
        if not self.dcqcn:
            argv.append("--no-dcqcn")
        credit = fab.qos.get("credit", {})
        if credit.get("enabled"):
            # A credit fabric: the NIC is the host's end of its link's credit loop.
            argv += ["--credit", json.dumps(credit)]
        return name, path, argv

    def _start_agent(self, h: str) -> Nic:
        name, path, args = self._agent_args(h)
        log = open(os.path.join(self.fab.run.log_dir, f"{name}.nic.log"), "ab")
        argv = [self.fab.python_on(h), "-m", "emu.host.agent", *args]
        proc = self.fab.popen(h, argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.fab.serve_here(h, path)  # on another server: its socket forwarded here
        return Nic(h, path, proc)

    def _wait_ready(self, h: str, nic: Nic) -> None:
        fab = self.fab
        agent = os.path.basename(nic.path)[: -len(".sock")]

        def ready():
            if nic.proc.poll() is not None:
                raise RuntimeError(f"NIC agent {agent} exited; see {fab.run.log_dir}/{agent}.log")
            try:
                return nic.call("info", timeout_s=1.0)
            except mgmt.MgmtError:
                return None

        wait_for(ready, AGENT_READY_TIMEOUT_S, f"the NIC agent of {h}", logs=fab.run.log_dir)

    def connect(self, src: str, dst: str, max_rate_bps: float | None = None, dscp: int = 26) -> int:
        """A reliable connection src -> dst; returns the QP number (same on both ends).

        `max_rate_bps` caps the sender (an application that paces itself).
        `dscp` marks its frames: 26 the RoCE class (priority 3), 34 the second
        lossless class (priority 4, emu/host/rnic.py).
        """
        self._qpn += 1
        qpn = self._qpn
        a, b = self.ports[src], self.ports[dst]
        # RoCEv2 varies the UDP source port per QP: ECMP spreads QPs (DESIGN.md).
        sport = 49152 + qpn % 16384
        self.nics[src].call(
            "connect",
            qpn=qpn,
            peer_qpn=qpn,
            peer_mac=b.mac,
            peer_ip=b.ip,
            udp_sport=sport,
            max_rate_bps=max_rate_bps,
            dscp=dscp,
        )
        self.nics[dst].call(
            "connect",
            qpn=qpn,
            peer_qpn=qpn,
            peer_mac=a.mac,
            peer_ip=a.ip,
            udp_sport=sport,
            dscp=dscp,
        )
        return qpn

    def ring_qps(self, hosts: Sequence[str]) -> list[int]:
        """The ring's QPs: QP i connects hosts[i] -> hosts[i+1 mod n].

        Each (src, dst) is connected on first use and reused by every later
        ring over it; QPs made with `connect` are never the ring's.
        """
        qps = []
        for i, src in enumerate(hosts):
            dst = hosts[(i + 1) % len(hosts)]
            if (src, dst) not in self._ring_qps:
                self._ring_qps[(src, dst)] = self.connect(src, dst)
            qps.append(self._ring_qps[(src, dst)])
        return qps

    def new_job(self, kind: str) -> str:
        """A collective job's name, unique on these agents: "<kind>-<n>-<ms>".

        Safe from several threads (a training step runs its collectives at once).
        """
        with self._names:
            self._jobs += 1
            return f"{kind}-{self._jobs}-{int(time.time() * 1000) % 10**9}"

    def post(self, src: str, qpn: int, size_bytes: int, count: int = 1) -> list[int]:
        """post_send: `count` SENDs of `size_bytes`; returns their message ids."""
        return self.nics[src].call("post_send", qpn=qpn, size_bytes=size_bytes, count=count)

    def post_write(
        self, src: str, qpn: int, size_bytes: int, count: int = 1, remote_va: int = 0, rkey: int = 0
    ) -> list[int]:
        """RDMA WRITEs (RETH on the first packet of each) to (remote_va, rkey)."""
        return self.nics[src].call(
            "post_write",
            qpn=qpn,
            size_bytes=size_bytes,
            count=count,
            remote_va=remote_va,
            rkey=rkey,
        )

    def poll_completions(self, src: str, qpn: int) -> list[dict]:
        """Completed messages not polled before: msg_id, size_bytes, latency_s."""
        return self.nics[src].call("poll_completions", qpn=qpn)

    def stats(self, host: str) -> dict:
        """The agent's `stats` answer as JSON gave it (`emu ctl HOST stats` prints it)."""
        return self.nics[host].call("stats")

    def nic_stats(self, host: str) -> answers.NicStats:
        """`host`'s NIC: its queue pairs by number, PAUSE, CNPs, typed (emu/answers.py)."""
        return answers.NicStats.decode(self.stats(host))

    def samples(self, host: str, since: float = 0.0) -> list:
        """The agent's `samples` answer as JSON gave it."""
        return self.nics[host].call("samples", since=since)

    def nic_samples(self, host: str, since: float = 0.0) -> list[answers.NicSample]:
        """`host`'s NIC samples from monotonic time `since`, typed (emu/answers.py)."""
        return [answers.NicSample.decode(row) for row in self.samples(host, since)]

    def set(self, host: str, **faults) -> dict:
        return self.nics[host].call("set", **faults)


def received_bps(samples: list[answers.NicSample], qpn: int, t_from: float, t_to: float) -> float:
    """Payload bit/s a NIC received on `qpn` between monotonic `t_from` and `t_to`, from
    its first and last sample in that window (0 with fewer than two)."""
    window = [(s.t, s.rx_bytes.get(qpn, 0)) for s in samples if t_from <= s.t <= t_to]
    if len(window) < 2 or window[-1][0] <= window[0][0]:
        return 0.0
    return (window[-1][1] - window[0][1]) * 8 / (window[-1][0] - window[0][0])


def _start_shared(fab: Fabric, members: list[tuple[RdmaHosts, str]]) -> None:
    """One process for the agents of `members` (set, host) (emu/host/agent.py `group_main`);
    each set files its `Nic` under the host."""
    specs, nics = [], {}
    for nic_set, h in members:
        name, path, args = nic_set._agent_args(h)
        specs.append({"argv": args, "netns": f"/proc/{fab.host(h).pid}/ns/net"})
        nics[h, nic_set.port] = name, path
    first_set, first = members[0]
    first_name = nics[first, first_set.port][0]
    spec_path = os.path.join(fab.run.log_dir, f"{first_name}.nics.json")
    spec_there = fab.write_on(first, spec_path, json.dumps(specs))
    log = open(os.path.join(fab.run.log_dir, f"{first_name}.nics.log"), "ab")
    argv = [fab.python_on(first), "-m", "emu.host.agent", "--group", spec_there]
    argv += ["--rt-priority", str(realtime.configured_priority())]
    proc = fab.popen(first, argv, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    for nic_set, h in members:
        fab.serve_here(h, nics[h, nic_set.port][1])
        nic_set.nics[h] = Nic(h, nics[h, nic_set.port][1], proc)


def gpu_ports(
    fab: Fabric,
    hosts: Sequence[str],
    dcqcn: bool = True,
    loss_recovery: str = GO_BACK_N,
    nic_processes: int | None = None,
) -> tuple[RdmaHosts, RdmaHosts]:
    """The NIC and the NVLink port of each GPU of `hosts` (a rail_optimized fabric), as two sets.

    A GPU's two ports are served by one process (one C loop, emu/host/agent.py
    `group_main`), as one GPU's memory is reached by both: a collective's
    phases hand over through that process's memory (emu/host/collective.py,
    `GPU_MEMORY`), not through a file. `nic_processes` N > 0 puts every GPU
    into N processes instead; 0 (the default, whatever `EMU_NIC_PROCESSES`
    says), a process per GPU. Where agents cannot share a process
    (`RdmaHosts.can_share`: `EMU_NIC=python`) each port gets
    its own, and `shares_memory` says so.

    Raises:
        ValueError: as `RdmaHosts`: a host without an NVLink port, a bad argument.
    """
    nics = RdmaHosts(fab, [], dcqcn, loss_recovery, "nic", nic_processes or 0)
    nvlink = RdmaHosts(fab, [], dcqcn, loss_recovery, "nvlink", nic_processes or 0)
    new = list(dict.fromkeys(hosts))
    if not nics.can_share():
        nics.add(new)
        nvlink.add(new)
        return nics, nvlink
    try:
        for nic_set in (nics, nvlink):
            nic_set.ports.update({h: fabric_mod.host_port(fab.graph, h, nic_set.port) for h in new})
    except fabric_mod.FabricSpecError as exc:
        raise ValueError(str(exc)) from None
    count = nics.nic_processes or len(new)
    for group in (new[k::count] for k in range(count)):
        if group:
            _start_shared(fab, [(nic_set, h) for h in group for nic_set in (nics, nvlink)])
    for nic_set in (nics, nvlink):
        for h in new:
            nic_set._wait_ready(h, nic_set.nics[h])
    return nics, nvlink


def shares_memory(nics: RdmaHosts, other: RdmaHosts, host: str) -> bool:
    """Whether `host`'s agents in the two sets are one process (`gpu_ports`)."""
    return nics.nics[host].proc is other.nics[host].proc


def fabric_nics(fab: Fabric, hosts: Sequence[str]) -> RdmaHosts:
    """The fabric's NIC agents (`fab.nics`), started on `hosts` on first use.

    The fabric owns them: the first `RdmaHosts` a scenario starts on its
    hosts' NIC ports becomes `fab.nics`, and otherwise the first workload run
    on the fabric as a whole (`collectives.run_allreduce(fab, ...)`) or the
    first NIC fault (emu/faults.py) starts them here, so that a later run, or
    a NIC fault, finds the same agents instead of a second set. A host not yet
    among them gets its agent now, started as the others were (`RdmaHosts.add`).
    """
    if getattr(fab, "nics", None) is None:
        fab.nics = RdmaHosts(fab, list(hosts))
    else:
        fab.nics.add(hosts)
    return fab.nics
