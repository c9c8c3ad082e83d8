"""The emu switch as a Mininet node.

Owns the life of one switch process: `EmuSwitch` is a Mininet `Switch`
subclass whose `start()` turns off the veth offloads that would hand us
oversized or checksum-less frames, builds the datapath argv (in overridable
methods, like p4-utils' P4Switch), spawns `python -m emu.switch.worker`,
records its pid in the run registry and waits until its management socket
answers; `stop()` ends exactly that pid. The only emu module that imports Mininet.

Two ways in. emu.net's `Fabric` hands every switch its run registry, the link
rates of the fabric graph and the controller's address. A plain Mininet
script, or `mn --custom emu/mininet_custom.py --switch emu`, hands it nothing
(docs/mininet.md): the switch then takes its port rates from its links' `bw`
(TCLink's Mbit/s) or `DEFAULT_RATE_BPS`, its controllers from the ones
Mininet passes to `start()`, and a run registry made on demand and shared by
every such switch of the process (`DropInRuns`); stopping the last of them
removes exactly what that registry recorded, as `emu clean` would after a
crash. Nothing here ends processes by name or calls Mininet's `cleanup()`.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import subprocess
import sys
import zlib

from mininet.log import info as mn_info
from mininet.node import Switch

from emu import mgmt, realtime
from emu.fabric.contract import DEFAULT_RATE_BPS
from emu.registry import FabricError, Run, clean_dead_runs, stop_child, wait_for

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


class DropInRuns:
    """The run registry of the switches that no `Fabric` gave one (Mininet scripts, `mn`).

    Made on demand when the first such switch is built, shared by every such
    switch of this process, torn down (`Run.teardown`: exactly the pids,
    interfaces and directories it recorded) when the last of them stops, or
    when the process exits with some still up. Before making one, the
    manifests of dead runs are cleaned, as at the start of every emu run.
    """

    run: Run | None = None
    members: set = set()  # the EmuSwitch objects that use `run`
    _atexit_registered = False

    @classmethod
    def acquire(cls, switch) -> Run:
        if cls.run is None:
            clean_dead_runs()
            cls.run = Run.create(label="mininet")
            cls.run.info["made_by"] = "emu.switch.node (drop-in Mininet switch)"
            cls.run.save()
            if not cls._atexit_registered:
                atexit.register(cls.teardown)
                cls._atexit_registered = True
        cls.members.add(switch)
        return cls.run

    @classmethod
    def release(cls, switch) -> None:
        """`switch` has stopped; the last one out tears the run down."""
        cls.members.discard(switch)
        if not cls.members:
            cls.teardown()

    @classmethod
    def teardown(cls) -> dict:
        """Remove what the drop-in run recorded, now; returns what was removed ({} if none)."""
        run, cls.run = cls.run, None
        cls.members = set()
        return run.teardown() if run is not None else {}


def rate_from_link(intf, default_rate_bps: int) -> int:
    """The port rate of `intf` in bit/s: its link's `bw` (Mbit/s, as TCLink takes it), or the default.

    Raises:
        ValueError: `bw` is not a positive finite number (names the interface and value).
    """
    bw = intf.params.get("bw") if isinstance(getattr(intf, "params", None), dict) else None
    if bw is None:
        return int(default_rate_bps)
    try:
        mbps = float(bw)
    except (TypeError, ValueError):
        mbps = math.nan
    if not math.isfinite(mbps) or mbps <= 0 or isinstance(bw, bool):
        raise ValueError(
            f"{intf.name}: link bw={bw!r}: expected a positive number of Mbit/s (TCLink's unit)"
        )
    return max(1, round(mbps * 1e6))


class EmuSwitch(Switch):
    """A Mininet switch backed by one emu datapath process.

    Used by emu.net's `Fabric`, which passes `run`, `port_rates` and
    `controller_addrs`, or as a drop-in switch in any Mininet script:
    ``Mininet(topo, switch=EmuSwitch, controller=RemoteController)``, where
    all three are left out (see the module docstring and docs/mininet.md).

    Args:
        name: switch name (also used for its interfaces).
        dpid: 16-hex-digit datapath id (Mininet derives it from the name if
            left out; emu's fabrics always pass one, see DESIGN.md).
        run: the run registry that records the pid; None: the drop-in run
            (`DropInRuns`), made on demand.
        port_rates: link rate (bit/s) per interface name, from the fabric
            graph; None: each link's `bw`, else `default_rate_bps`.
        controller_addrs: `host:port` of the controllers to connect to;
            empty: the controllers Mininet passes to `start()`.
        seed: SELECT hash seed for this switch; None: one derived from the
            name, as a fabric with seed 0 would give it.
        default_rate_bps: the rate of a drop-in port whose link has no `bw`.
    """

    def __init__(
        self,
        name: str,
        run: Run | None = None,
        port_rates: dict[str, int] | None = None,
        controller_addrs: tuple[str, ...] = (),
        seed: int | None = None,
        log_level: str = "INFO",
        qos: dict | None = None,
        switch_processes: int = 0,
        default_rate_bps: int = DEFAULT_RATE_BPS,
        **params,
    ) -> None:
        if not isinstance(default_rate_bps, int) or default_rate_bps <= 0:
            raise ValueError(
                f"{name}: default_rate_bps={default_rate_bps!r}: expected a positive integer"
            )
        # A drop-in switch owns its share of the on-demand run; a fabric's switch
        # does not. Set before Mininet's __init__, which adds the loopback port.
        self.drop_in = run is None
        self.run = DropInRuns.acquire(self) if run is None else run
        super().__init__(name, **params)
        # 0: this switch runs in a process of its own. N > 0: batchStartup puts
        # the fabric's switches into N processes that share one loop each.
        self.switch_processes = switch_processes
        self.deferred = False  # start() left the spawning to batchStartup
        self.started_once = False  # later starts (a restart after a crash) spawn alone
        self.shares_process = False
        self.crashed = False
        self.port_rates = port_rates
        self.default_rate_bps = default_rate_bps
        self.controller_addrs = tuple(controller_addrs)
        self.seed = zlib.crc32(f"0:{name}".encode()) if seed is None else seed
        self.log_level = log_level
        self.qos = qos or {}
        self.proc: subprocess.Popen | None = None
        self.mgmt_path = os.path.join(self.run.sock_dir, f"{name}.sock")
        self.log_path = os.path.join(self.run.log_dir, f"{name}.log")
        # Where the worker serves its management socket and writes its log: here,
        # the same as above; a switch on another server (emu.cluster) differs.
        self.worker_mgmt_path = self.mgmt_path
        self.worker_log_dir = self.run.log_dir

    def addIntf(self, intf, *args, **kwargs) -> None:  # noqa: N802 (Mininet's API)
        # A drop-in switch records its ports as Mininet adds them, so that the
        # run's teardown (or `emu clean` after a crash) deletes the veths that
        # would outlive the process: those between two switches, in our namespace.
        if self.drop_in and intf.name != "lo":
            self.run.add_interfaces([intf.name])
        super().addIntf(intf, *args, **kwargs)

    # argv, in pieces a subclass can override
    # The python that runs the worker: this one's (a remote switch's: its server's).
    worker_python = sys.executable

    def datapath_command(self) -> list[str]:
        return [self.worker_python, "-m", "emu.switch.worker"]

    def port_args(self) -> list[str]:
        args = []
        for intf in self.intfList():
            port_no = self.ports[intf]
            if intf.name == "lo" or port_no == 0:
                continue
            if self.port_rates is None:
                rate = rate_from_link(intf, self.default_rate_bps)
            else:
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
            self.worker_mgmt_path,
            "--seed",
            str(self.seed),
            "--log-level",
            self.log_level,
            "--rt-priority",
            str(realtime.configured_priority()),
        ]
        for addr in self.controller_addrs or self.mininet_controllers:
            argv += ["--controller", addr]
        if self.qos:
            argv += ["--qos", json.dumps(self.qos)]
        if self.listenPort:
            argv += ["--of-listen", f"127.0.0.1:{self.listenPort}"]
        return argv + self.port_args()

    mininet_controllers: tuple[str, ...] = ()

    def start(self, controllers) -> None:  # noqa: N802 (Mininet's API)
        # Mininet's controllers (a RemoteController, say), used when no address was given.
        self.mininet_controllers = tuple(f"{c.IP()}:{c.port}" for c in controllers or ())
        if self.drop_in and self not in DropInRuns.members:
            self._rejoin()  # started again after a stop that ended the drop-in run
        self.prepare_ports([intf.name for intf in self.intfList() if intf.name != "lo"])
        if self.drop_in:
            self.disable_peer_offloads()
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
        self.proc = self.spawn_process(argv, self.log_path, f"switch {self.name}")
        self.switch_started()

    # Where the switch's ports and process live, in pieces a subclass overrides
    # (emu.cluster's RemoteEmuSwitch runs them on another server).
    def prepare_ports(self, ports: list[str]) -> None:
        """No IPv6 and no offloads on the switch's ports, before its worker opens them."""
        disable_ipv6(*ports)
        for name in ports:
            disable_offloads(name)

    def spawn_process(self, argv: list[str], log_path: str, role: str):
        """Start a worker process; a `subprocess.Popen`, or what stands for one."""
        return self.run.spawn(argv, log_path, role)

    def switch_started(self) -> None:
        """Called once this switch's worker has been spawned."""

    def sockets_closed(self) -> bool:
        """This switch's management socket is gone (after a crash)."""
        return not os.path.exists(self.mgmt_path)

    def _rejoin(self) -> None:
        self.run = DropInRuns.acquire(self)
        self.mgmt_path = os.path.join(self.run.sock_dir, f"{self.name}.sock")
        self.log_path = os.path.join(self.run.log_dir, f"{self.name}.log")
        self.worker_mgmt_path = self.mgmt_path
        self.worker_log_dir = self.run.log_dir
        self.run.add_interfaces([i.name for i in self.intfList() if i.name != "lo"])

    def disable_peer_offloads(self) -> None:
        """Turn the offloads off at the other end of each link too (drop-in switches only).

        A host's veth with TSO on hands our port 64 KiB super-frames that no
        wire carries. emu's fabrics configure their hosts themselves; a
        Mininet topology's hosts are Mininet's, so the switch does it, in the
        host's namespace. An emu switch at the other end does its own.
        """
        for intf in self.intfList():
            link = getattr(intf, "link", None)
            if intf.name == "lo" or link is None:
                continue
            peer = link.intf2 if link.intf1 is intf else link.intf1
            if isinstance(peer.node, EmuSwitch):
                continue
            if getattr(peer.node, "inNamespace", False):

                def run_in(argv: list[str], node=peer.node) -> int:
                    proc = node.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    return proc.wait()

                disable_offloads(peer.name, run_in=run_in)
            else:
                disable_offloads(peer.name)

    @classmethod
    def batchStartup(cls, switches) -> list:  # noqa: N802 (Mininet's API)
        """Start the switches whose start() was deferred, spread over their processes.

        Round-robin over the switches in Mininet's order, so that each process
        gets leaves and spines alike rather than one tier each. Drop-in
        switches are then awaited (a `Fabric` awaits its own): a switch that
        fails to start is an error naming its log, not a `waitConnected` that
        never ends.
        """
        deferred = [s for s in switches if s.deferred]
        if deferred:
            n = max(1, min(deferred[0].switch_processes, len(deferred)))
            groups = [deferred[i::n] for i in range(n)]
            for i, group in enumerate(groups, 1):
                group[0].spawn_shared(f"switches-{i}", group)
        for sw in switches:
            if sw.drop_in and sw.proc is not None:
                sw.wait_ready()
        return list(switches)

    def spawn_shared(self, process_name: str, group: list) -> None:
        """Start one `emu.switch.worker` process that runs every switch of `group`."""
        argv = [*self.datapath_command(), "--name", process_name]
        argv += ["--rt-priority", str(realtime.configured_priority())]
        argv += ["--log-level", self.log_level]
        for sw in group:
            argv += ["--switch", json.dumps(sw.build_argv()[len(sw.datapath_command()) :])]
        log_path = os.path.join(self.worker_log_dir, f"{process_name}.log")
        names = ",".join(sw.name for sw in group)
        proc = self.spawn_process(argv, log_path, f"switches {process_name}: {names}")
        for sw in group:
            sw.proc = proc
            sw.log_path = log_path
            sw.deferred = False
            sw.shares_process = True
            sw.switch_started()

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
            if isinstance(self.proc, subprocess.Popen):  # one of this machine's pids
                self.run.forget_pid(self.proc.pid)
            self.proc = None
            return
        self.call("crash", timeout_s=timeout_s)
        wait_for(
            self.sockets_closed,
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
        try:
            if self.proc is not None:
                stop_child(self.proc)  # a shared process: the first of its switches ends it
            super().stop(deleteIntfs)
        finally:
            if self.drop_in:
                DropInRuns.release(self)


def mn_cleanup() -> dict:
    """What `mn` calls as `cleanup()` when given emu/mininet_custom.py: removal by manifest.

    `mn` calls its `cleanup()` after an exception, on Ctrl-C and for `-c`;
    Mininet's own ends processes by name and deletes interfaces by pattern,
    which hits what is not ours. This stops and deletes what this process's
    drop-in run recorded, and what dead emu runs recorded (`emu clean`).

    Returns:
        {"run": what this process's run removed, "dead_runs": the dead runs removed}.
    """
    removed = {"run": DropInRuns.teardown(), "dead_runs": clean_dead_runs()}
    stopped = len(removed["run"].get("stopped_pids", ())) + sum(
        len(r["stopped_pids"]) for r in removed["dead_runs"]
    )
    deleted = len(removed["run"].get("deleted_interfaces", ())) + sum(
        len(r["deleted_interfaces"]) for r in removed["dead_runs"]
    )
    mn_info(f"*** emu: removed by manifest: {stopped} processes, {deleted} interfaces\n")
    return removed
