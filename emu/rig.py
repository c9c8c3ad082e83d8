"""Switches started on interfaces that exist already: emu's, or Open vSwitch's, behind one interface.

Owns starting, waiting for and stopping the switches of every place that holds
a switch to account outside a fabric: `SwitchTestbed` (emu/testbed.py: the
OpenFlow conformance tests and a user's own pytest) and the benches
(bench/forwarding.py's chains, bench/of_conformance.py's target and tester,
bench/scale.py's OVS). Two kinds, as Mininet's small switch subclasses:

- `EmuSwitches`: `emu.switch.worker`, a process per switch or all of them in
  one process and one event loop (`shared`, as `Fabric(switch_processes=1)`
  runs a fabric's);
- `OvsBridges`: netdev bridges on a private ovsdb-server and ovs-vswitchd
  (the command lines are emu/ovs.py's), the reference a bench or a test holds
  emu to.

Both start from `SwitchSpec`s, record every process and interface in the
caller's `emu.registry.Run` (interfaces before they exist, pids right after
spawning), so `emu clean` removes what a killed owner left; both are ready
when every switch answers on its passive OpenFlow listener or management
socket and sees carrier on every port, and both give each switch's listener
(`of_addr`) for `emu.ofctl` or an os-ken client.

Does not own: the interfaces (the caller makes its veths), a fabric's switches
(emu/switch/node.py, Mininet nodes, started by emu/net.py), the management
protocol (emu/mgmt.py), or ovs-ofctl's command line (emu/ofctl.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from emu import mgmt, ofctl, ovs
from emu.registry import FabricError, Run, free_tcp_port, interface_exists, stop_child, wait_for

READY_TIMEOUT_S = 20.0
VSCTL_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 20
LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent


class RigError(FabricError):
    """A switch could not be started or exited; the message names it and its log's last lines."""


@dataclass(frozen=True)
class SwitchSpec:
    """One switch of a rig.

    Args:
        name: the switch's name (an OVS bridge's name, so at most 15 characters there).
        dpid: datapath id.
        ports: (interface, OpenFlow port number) of every port.
        rate_bps: every port's link rate (emu paces its output at it; OVS does not pace).
        controllers: "[tcp:]HOST:PORT" of controllers the switch connects to.
        tables: number of flow tables (emu's; None: the switch's default).
        log_level: emu's log level (None: the switch's default).
        extra_args: more arguments of emu's switch (as p4-utils' P4Switch takes them).
    """

    name: str
    dpid: int
    ports: tuple[tuple[str, int], ...]
    rate_bps: int = 10_000_000_000
    controllers: tuple[str, ...] = ()
    tables: int | None = None
    log_level: str | None = None
    extra_args: tuple[str, ...] = ()


def _hostport(addr: str) -> str:
    return addr[len("tcp:") :] if addr.startswith("tcp:") else addr


def emu_switch_args(spec: SwitchSpec, mgmt_path: str, of_port: int) -> list[str]:
    """`emu.switch.worker` arguments of one switch, without the interpreter and `-m`."""
    args = ["--name", spec.name, "--dpid", hex(spec.dpid), "--mgmt", mgmt_path]
    args += ["--of-listen", f"{LOOPBACK}:{of_port}"]
    for ifname, port_no in spec.ports:
        args += ["--port", f"{ifname}:{port_no}:{spec.rate_bps}"]
    for addr in spec.controllers:
        args += ["--controller", _hostport(addr)]
    if spec.tables is not None:
        args += ["--tables", str(spec.tables)]
    if spec.log_level is not None:
        args += ["--log-level", spec.log_level]
    return args + list(spec.extra_args)


def log_tail(path: str | os.PathLike, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text[-lines:])


class Switches:
    """What both kinds share: the specs, each switch's listener, its processes, their checks."""

    kind = ""

    def __init__(self, run: Run, specs: list[SwitchSpec]) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"switch names repeat: {names}")
        self.run = run
        self.specs = list(specs)
        self.of_ports: dict[str, int] = {}
        # role -> (process, its log): what `check_alive` watches and `stop` ends.
        self.procs: dict[str, tuple[subprocess.Popen, str]] = {}
        # role -> pid of every process ever started, kept after `stop` (a test asks
        # whether it is gone).
        self.started: dict[str, int] = {}

    def of_addr(self, name: str) -> tuple[str, int]:
        """(host, port) of switch `name`'s passive OpenFlow listener, for emu.ofctl or os-ken."""
        try:
            return LOOPBACK, self.of_ports[name]
        except KeyError:
            raise RigError(f"no started switch {name!r} in this rig") from None

    def ofctl(self, name: str, *args: str) -> str:
        """ovs-ofctl ARGS against switch `name` (emu/ofctl.py); its stdout."""
        try:
            return ofctl.run(self.of_addr(name), args).stdout
        except ofctl.OfctlError as exc:
            raise RigError(f"{name}: {exc}") from None

    def pids(self) -> list[int]:
        """The processes whose CPU time is the switches' forwarding."""
        return sorted({p.pid for p, _ in self.procs.values()})

    def check_alive(self, when: str = "") -> None:
        """Raise RigError naming the first switch process that has exited, and its log's tail."""
        for role, (proc, log_path) in self.procs.items():
            if proc.poll() is not None:
                raise RigError(
                    f"{role} exited (code {proc.returncode}){' ' + when if when else ''}; "
                    f"log {log_path}:\n{log_tail(log_path)}"
                )

    def _wait(self, condition, what: str, logs: str, timeout_s: float) -> object:
        def alive_and(cond=condition):
            self.check_alive(f"during start-up (waiting for {what})")
            return cond()

        try:
            return wait_for(alive_and, timeout_s, what, interval_s=0.05, logs=logs)
        except RigError:
            raise
        except FabricError as exc:
            raise RigError(f"{exc}\n{log_tail(logs) if os.path.isfile(logs) else ''}") from None

    def _spawn(self, role: str, argv: list[str], log_path: str, env: dict[str, str]) -> None:
        proc = self.run.spawn(argv, log_path, role, env=env, dies_with_parent=True)
        self.procs[role] = (proc, log_path)
        self.started[role] = proc.pid

    def stop(self) -> None:
        """Stop every process of the rig, newest first (TERM, then KILL); harmless twice."""
        for role in reversed(list(self.procs)):
            proc, _ = self.procs.pop(role)
            stop_child(proc)
            self.run.forget_pid(proc.pid)


class EmuSwitches(Switches):
    """emu switches on the specs' interfaces, a process each or all in one (`shared`).

    Args:
        run: the registry run that records the processes.
        specs: the switches.
        shared: all switches in one `emu.switch.worker` process.
        env: variables added to the switches' environment (EMU_DATAPATH,
            EMU_PROFILE_DIR ...); PYTHONPATH always leads with this emu.
        log_prefix: put before each log file's name (two rigs may share a log folder).
    """

    kind = "emu"

    def __init__(
        self,
        run: Run,
        specs: list[SwitchSpec],
        shared: bool = False,
        env: dict[str, str] | None = None,
        log_prefix: str = "",
    ) -> None:
        if not specs:
            raise ValueError("EmuSwitches needs at least one SwitchSpec")
        super().__init__(run, specs)
        self.shared = shared
        self.extra_env = dict(env or {})
        self.log_prefix = log_prefix
        self.mgmt_paths = {s.name: os.path.join(run.sock_dir, f"{s.name}.sock") for s in specs}
        self.log_paths: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        # The switch must run the emu that this process imported, installed or not.
        env = dict(os.environ, **self.extra_env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        return env

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the switches; return when each answers and sees carrier on every port.

        Raises:
            RigError: a switch exited or did not get ready in time (names its log).
        """
        args = {}
        for spec in self.specs:
            self.of_ports[spec.name] = free_tcp_port()
            args[spec.name] = emu_switch_args(
                spec, self.mgmt_paths[spec.name], self.of_ports[spec.name]
            )
        worker = [sys.executable, "-m", "emu.switch.worker"]
        if self.shared:
            log_path = os.path.join(self.run.log_dir, f"{self.log_prefix}switches.log")
            argv = [*worker, "--name", "switches-1"]
            for spec in self.specs:
                argv += ["--switch", json.dumps(args[spec.name])]
            self._spawn("switches", argv, log_path, self.env())
            self.log_paths = dict.fromkeys(args, log_path)
        else:
            for spec in self.specs:
                log_path = os.path.join(self.run.log_dir, f"{self.log_prefix}{spec.name}.log")
                self._spawn(
                    f"switch {spec.name}", [*worker, *args[spec.name]], log_path, self.env()
                )
                self.log_paths[spec.name] = log_path
        for spec in self.specs:
            self._wait_ready(spec, timeout_s)

    def _wait_ready(self, spec: SwitchSpec, timeout_s: float) -> None:
        path = self.mgmt_paths[spec.name]

        def carrier_on_every_port() -> bool:
            try:
                ports = mgmt.call(path, "ports", timeout_s=1.0)
            except mgmt.MgmtError:
                return False
            # A port whose carrier the switch has not seen yet drops what it is sent.
            return len(ports) == len(spec.ports) and all(p["link_up"] for p in ports)

        self._wait(
            carrier_on_every_port,
            f"switch {spec.name} to answer on {path} with carrier on its {len(spec.ports)} ports",
            self.log_paths[spec.name],
            timeout_s,
        )

    def call(self, name: str, cmd: str, timeout_s: float = 5.0, **args: object) -> object:
        """Ask switch `name` over its management socket ("counters", "ports" ...)."""
        return mgmt.call(self.mgmt_paths[name], cmd, timeout_s=timeout_s, **args)


class OvsBridges(Switches):
    """Open vSwitch netdev bridges, one per spec, on our own daemons in `directory`.

    The system's OVS service is never used (emu/ovs.py). Only one userspace
    OVS can run on a machine (its `ovs-netdev` tap): one that runs already is
    somebody else's, and the rig refuses to start beside it.

    Args:
        run: the registry run that records the daemons and the bridges' interfaces.
        specs: the bridges (name, datapath id, ports, controllers); none for
            daemons whose bridges somebody else adds (Mininet's OVSSwitch,
            under `env`).
        directory: the daemons' database, sockets and logs (made if absent;
            the caller removes it).
        flow_cache: keep OVS's datapath flow cache. Off by default
            (`ovs.FLOW_LIMIT_OFF`): a frame sent right after a barrier would
            otherwise take the previous flows' path.
    """

    kind = "ovs"

    def __init__(
        self,
        run: Run,
        specs: list[SwitchSpec],
        directory: str | os.PathLike,
        flow_cache: bool = False,
    ) -> None:
        super().__init__(run, specs)
        for spec in specs:
            if len(spec.name) > 15:
                raise ValueError(f"bridge name {spec.name!r} is longer than 15 characters")
        self.dir = os.fspath(directory)
        self.flow_cache = flow_cache
        self.env = ovs.env(self.dir)
        self.log_path = os.path.join(self.dir, "ovs-vswitchd.log")

    def vsctl(self, *args: str) -> str:
        """ovs-vsctl ARGS against our daemons; its stdout."""
        argv = ovs.vsctl_argv(self.dir, *args)
        try:
            res = subprocess.run(
                argv, capture_output=True, text=True, timeout=VSCTL_TIMEOUT_S, env=self.env
            )
        except subprocess.TimeoutExpired:
            raise RigError(f"{' '.join(argv)}: no answer in {VSCTL_TIMEOUT_S:.0f} s") from None
        if res.returncode != 0:
            raise RigError(f"{' '.join(argv)}: {(res.stderr or res.stdout).strip()[-300:]}")
        return res.stdout

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the daemons and the bridges; return when each bridge answers with live ports.

        Raises:
            RigError: OVS is missing, another userspace OVS runs, a daemon
                exited or a bridge did not get ready in time.
        """
        absent = ovs.missing()
        if absent:
            raise RigError(absent)
        if interface_exists(ovs.NETDEV_TAP):
            raise RigError(
                f"interface {ovs.NETDEV_TAP} exists: another Open vSwitch userspace "
                "datapath runs on this machine, and only one can"
            )
        os.makedirs(self.dir, exist_ok=True)
        # The datapath's tap and each bridge's internal port appear with the bridges.
        self.run.add_interfaces([ovs.NETDEV_TAP, *(s.name for s in self.specs)])
        d = self.dir
        made = subprocess.run(
            ovs.create_db_argv(d), capture_output=True, text=True, env=self.env, timeout=30
        )
        if made.returncode != 0:
            raise RigError(
                f"ovsdb-tool create in {d}: {(made.stderr or made.stdout).strip()[-300:]}"
            )
        self._spawn(
            "ovsdb-server", ovs.ovsdb_server_argv(d), os.path.join(d, "ovsdb-server.out"), self.env
        )
        self._wait(lambda: ovs.db_ready(d), f"ovsdb-server to listen in {d}", d, timeout_s)
        self.vsctl("--no-wait", "init")
        self._spawn(
            "ovs-vswitchd", ovs.vswitchd_argv(d), os.path.join(d, "ovs-vswitchd.out"), self.env
        )
        self._wait(lambda: ovs.vswitchd_ready(d), "ovs-vswitchd to start", self.log_path, timeout_s)
        if not self.flow_cache:
            self.vsctl(*ovs.FLOW_LIMIT_OFF)
        for spec in self.specs:
            self._add_bridge(spec, timeout_s)

    def _add_bridge(self, spec: SwitchSpec, timeout_s: float) -> None:
        settings = (
            f"other-config:datapath-id={spec.dpid:016x}",
            "other-config:disable-in-band=true",
        )
        self.vsctl(*ovs.add_bridge_args(spec.name, list(spec.ports), *settings))
        port = self.of_ports[spec.name] = free_tcp_port()
        targets = [f"ptcp:{port}:{LOOPBACK}"] + [f"tcp:{_hostport(a)}" for a in spec.controllers]
        self.vsctl("set-controller", spec.name, *targets)
        wanted = {n for _, n in spec.ports}

        def ports_live() -> bool:
            res = ofctl.run(
                self.of_addr(spec.name), ("dump-ports-desc",), check=False, timeout_s=5.0
            )
            return res.returncode == 0 and live_ports(res.stdout) >= wanted

        self._wait(
            ports_live,
            f"bridge {spec.name} to answer on {LOOPBACK}:{port} with {len(wanted)} live ports",
            self.log_path,
            timeout_s,
        )

    def pids(self) -> list[int]:
        # The switches' CPU is ovs-vswitchd's (ovsdb-server idles while forwarding).
        proc = self.procs.get("ovs-vswitchd")
        return [] if proc is None else [proc[0].pid]

    def stop(self, keep_logs_as: str | None = None) -> None:
        """Delete the bridges while ovs-vswitchd runs, stop the daemons.

        Args:
            keep_logs_as: copy the daemons' logs to this path prefix first
                (`DIR/ovs-3hop-` keeps `DIR/ovs-3hop-ovs-vswitchd.log`); the
                daemons' directory is the caller's to remove.
        """
        if "ovs-vswitchd" in self.procs and self.procs["ovs-vswitchd"][0].poll() is None:
            for spec in self.specs:
                try:
                    self.vsctl("--if-exists", "del-br", spec.name)
                except RigError:
                    pass  # the run's teardown deletes the bridge's interface
        if keep_logs_as is not None:
            for name in ("ovs-vswitchd.log", "ovsdb-server.log"):
                src = Path(self.dir, name)
                if src.exists():
                    shutil.copy(src, f"{keep_logs_as}{name}")
        super().stop()


def live_ports(ports_desc: str) -> set[int]:
    """Port numbers that `ovs-ofctl dump-ports-desc` shows with state LIVE (not LOCAL)."""
    live, current = set(), None
    for line in ports_desc.splitlines():
        head = line.strip().split("(", 1)[0]
        if head.isdigit():
            current = int(head)
        elif current is not None and line.strip().startswith("state:"):
            if "LIVE" in line:
                live.add(current)
            current = None
    return live
