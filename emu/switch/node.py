"""The emu switch as a Mininet node.

Owns the life of one switch process: `EmuSwitch` is a Mininet `Switch`
subclass whose `start()` turns off the veth offloads that would hand us
oversized or checksum-less frames, builds the datapath argv (in overridable
methods, like p4-utils' P4Switch), spawns `python -m emu.switch.worker`,
records its pid in the run registry and waits until its management socket
answers; `stop()` ends exactly that pid. The only emu module that imports Mininet.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from mininet.node import Switch

from emu import mgmt, realtime
from emu.registry import FabricError, Run, stop_child, wait_for

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
# Frames handed to AF_PACKET must be real Ethernet frames: no TSO/GSO/GRO
# super-frames, no partial checksums, VLAN tags in the frame rather than in
# metadata. Not every driver has every feature (disable_offloads copes).
OFFLOADS_OFF = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")


def disable_offloads(ifname: str, run_in=None) -> None:
    """Turn off the offloads that break a userspace datapath on `ifname`.

    One ethtool call for all of them (a fabric has hundreds of interfaces:
    nine calls each cost a k=4 fat-tree a second of its boot); if ethtool
    refuses that (an older ethtool stops at a feature the driver has fixed),
    one call per feature. `run_in(argv)` runs a command where the interface
    lives (a host's namespace) and returns its exit code; by default, in ours.
    """

    def run(argv: list[str]) -> int:
        if run_in is None:
            return subprocess.run(argv, capture_output=True, check=False).returncode
        return run_in(argv)

    every = [word for feature in OFFLOADS_OFF for word in (feature, "off")]
    if run(["ethtool", "-K", ifname, *every]) != 0:
        for feature in OFFLOADS_OFF:
            run(["ethtool", "-K", ifname, feature, "off"])


def disable_ipv6(*ifnames: str) -> None:
    """No IPv6 on `ifnames`: the kernel would send router solicitations and MLD
    reports out of them, frames that no switch sent but its peer counts as
    received (a healthy link would read a few frames short in tx against rx).

    One sysctl for all of them (a fabric starts hundreds of ports). Raises
    RuntimeError naming the interfaces if the sysctl is refused.
    """
    # A kernel without IPv6 has no conf entry, and sends none.
    keys = [
        f"net.ipv6.conf.{name}.disable_ipv6=1"
        for name in ifnames
        if os.path.exists(f"/proc/sys/net/ipv6/conf/{name}")
    ]
    if not keys:
        return
    res = subprocess.run(["sysctl", "-qw", *keys], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"disabling IPv6 on {', '.join(ifnames)}: {res.stderr.strip()}")


class EmuSwitch(Switch):
    """A Mininet switch backed by one emu datapath process.

    Args:
        name: switch name (also used for its interfaces).
        dpid: 16-hex-digit datapath id (always explicit; see DESIGN.md).
        run: the run registry that records the pid.
        controller_addrs: `host:port` of the controllers to connect to.
        port_rates: link rate per interface name, from the fabric graph.
        seed: SELECT hash seed for this switch.
    """

    def __init__(
        self,
        name: str,
        run: Run,
        port_rates: dict[str, int],
        controller_addrs: tuple[str, ...] = (),
        seed: int = 0,
        log_level: str = "INFO",
        qos: dict | None = None,
        switch_processes: int = 0,
        **params,
    ) -> None:
        super().__init__(name, **params)
        # 0: this switch runs in a process of its own. N > 0: batchStartup puts
        # the fabric's switches into N processes that share one loop each.
        self.switch_processes = switch_processes
        self.deferred = False  # start() left the spawning to batchStartup
        self.started_once = False  # later starts (a restart after a crash) spawn alone
        self.shares_process = False
        self.crashed = False
        self.run = run
        self.port_rates = port_rates
        self.controller_addrs = tuple(controller_addrs)
        self.seed = seed
        self.log_level = log_level
        self.qos = qos or {}
        self.proc: subprocess.Popen | None = None
        self.mgmt_path = os.path.join(run.sock_dir, f"{name}.sock")
        self.log_path = os.path.join(run.log_dir, f"{name}.log")

    # argv, in pieces a subclass can override
    def datapath_command(self) -> list[str]:
        return [sys.executable, "-m", "emu.switch.worker"]

    def port_args(self) -> list[str]:
        args = []
        for intf in self.intfList():
            port_no = self.ports[intf]
            if intf.name == "lo" or port_no == 0:
                continue
            rate = self.port_rates.get(intf.name)
            if rate is None:
                raise ValueError(f"{self.name}: no link rate for interface {intf.name}")
            args += ["--port", f"{intf.name}:{port_no}:{rate}"]
        return args

    def build_argv(self) -> list[str]:
        argv = self.datapath_command() + [
            "--name",
            self.name,
            "--dpid",
            f"0x{self.dpid}",
            "--mgmt",
            self.mgmt_path,
            "--seed",
            str(self.seed),
            "--log-level",
            self.log_level,
            "--rt-priority",
            str(realtime.configured_priority()),
        ]
        for addr in self.controller_addrs:
            argv += ["--controller", addr]
        if self.qos:
            argv += ["--qos", json.dumps(self.qos)]
        if self.listenPort:
            argv += ["--of-listen", f"127.0.0.1:{self.listenPort}"]
        return argv + self.port_args()

    def start(self, controllers) -> None:  # noqa: N802 (Mininet's API)
        ports = [intf.name for intf in self.intfList() if intf.name != "lo"]
        disable_ipv6(*ports)
        for name in ports:
            disable_offloads(name)
        self.crashed = False
        first = not self.started_once
        self.started_once = True
        if self.switch_processes and first:
            self.deferred = True  # Mininet calls batchStartup next
            return
        # A switch of its own, or one restarted after a crash: its own process.
        self.shares_process = False
        argv = self.build_argv()
        log.debug("%s: %s", self.name, " ".join(argv))
        self.proc = self.run.spawn(argv, self.log_path, f"switch {self.name}")

    @classmethod
    def batchStartup(cls, switches) -> list:  # noqa: N802 (Mininet's API)
        """Start the switches whose start() was deferred, spread over their processes.

        Round-robin over the switches in Mininet's order, so that each process
        gets leaves and spines alike rather than one tier each.
        """
        deferred = [s for s in switches if s.deferred]
        if not deferred:
            return list(switches)
        n = max(1, min(deferred[0].switch_processes, len(deferred)))
        groups = [deferred[i::n] for i in range(n)]
        for i, group in enumerate(groups, 1):
            group[0].spawn_shared(f"switches-{i}", group)
        return list(switches)

    def spawn_shared(self, process_name: str, group: list) -> None:
        """Start one `emu.switch.worker` process that runs every switch of `group`."""
        argv = [sys.executable, "-m", "emu.switch.worker", "--name", process_name]
        argv += ["--rt-priority", str(realtime.configured_priority())]
        argv += ["--log-level", self.log_level]
        for sw in group:
            argv += ["--switch", json.dumps(sw.build_argv()[len(sw.datapath_command()) :])]
        log_path = os.path.join(self.run.log_dir, f"{process_name}.log")
        names = ",".join(sw.name for sw in group)
        proc = self.run.spawn(argv, log_path, f"switches {process_name}: {names}")
        for sw in group:
            sw.proc = proc
            sw.log_path = log_path
            sw.deferred = False
            sw.shares_process = True

    def running(self) -> bool:
        """Its process runs and it has not crashed (another switch of the process may have)."""
        return self.proc is not None and self.proc.poll() is None and not self.crashed

    def crash(self, timeout_s: float = 5.0) -> None:
        """Stop this switch as a crash does: at once, losing tables, queues and sessions.

        Alone in its process: SIGKILL. Sharing a process: the switch is told
        to crash (management command) and the others go on; returns when its
        management socket is gone, i.e. its sockets are closed.
        """
        if not self.running():
            raise FabricError(f"switch {self.name} is not running")
        self.crashed = True
        if not self.shares_process:
            self.proc.kill()
            self.proc.wait()
            self.run.forget_pid(self.proc.pid)
            self.proc = None
            return
        self.call("crash", timeout_s=timeout_s)
        wait_for(
            lambda: not os.path.exists(self.mgmt_path),
            timeout_s,
            f"switch {self.name} to close its sockets after a crash",
            interval_s=0.01,
            logs=self.log_path,
        )
        self.proc = None  # the process is the other switches' now

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict:
        """Wait until the process answers on its management socket; returns its `info`.

        Raises:
            FabricError: the process exited, or did not answer within `timeout_s`
                (the message names the socket and the log file).
        """

        def answered() -> dict | None:
            if self.proc is None or self.proc.poll() is not None:
                raise FabricError(f"switch {self.name} exited during start-up; see {self.log_path}")
            try:
                return mgmt.call(self.mgmt_path, "info", timeout_s=1.0)
            except mgmt.MgmtError:
                return None

        return wait_for(
            answered,
            timeout_s,
            f"switch {self.name} to answer on {self.mgmt_path}",
            interval_s=0.05,
            logs=self.log_path,
        )

    def call(self, cmd: str, **args):
        """Ask the running switch process (see emu/mgmt.py)."""
        return mgmt.call(self.mgmt_path, cmd, **args)

    def connected(self) -> bool:
        try:
            info = self.call("info", timeout_s=1.0)
        except mgmt.MgmtError:
            return False
        return any(c["connected"] for c in info["controllers"])

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's API)
        if self.proc is not None:
            stop_child(self.proc)  # a shared process: the first of its switches ends it
        super().stop(deleteIntfs)
