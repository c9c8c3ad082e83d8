"""Forwarding benchmark: frames/s and Mbit/s through chains of 1..N switches.

Owns one measurement, run on one machine in one go, of five ways to forward
between two network namespaces `h1` (10.0.0.1) and `h2` (10.0.0.2):

    veth        h1 ================================= h2      (0 hops, ceiling)
    emu         h1 --- s1 --- s2 --- ... --- sN --- h2      (emu.switch.worker, a process each)
    emu-shared  h1 --- s1 --- s2 --- ... --- sN --- h2      (emu.switch.worker: one process)
    emu-python  h1 --- s1 --- s2 --- ... --- sN --- h2      (as emu, EMU_DATAPATH=python)
    ovs-user    h1 --- b1 --- b2 --- ... --- bN --- h2      (OVS, datapath_type=netdev)

Every switch has port 1 towards h1 and port 2 towards h2 and the two flows
`in_port=1,actions=output:2` and `in_port=2,actions=output:1`, installed with
`ovs-ofctl -O OpenFlow13`. The veths between switches live in the root
namespace. Offloads are switched off on every veth end of every variant, since
AF_PACKET forwarding needs it and the comparison should be fair.

Per row it measures TCP throughput (one iperf3 stream) and small-frame rate
(iperf3 UDP, 64-byte payload, `-b 0`: frames/s = datagrams the server received
/ seconds, from the client's JSON `end.sum_received`), and the CPU time the
switch processes used while doing so.

It does not own emu's fabric code (`emu.fabric`, `emu.net`): it starts the
switch processes itself so that nothing but forwarding is measured.

Hygiene: every process started is recorded by pid in emu's run registry
(emu/registry.py, /run/emu/runs/bench-run-*.json, the manifest a fabric's run
keeps) right after it starts and is stopped by pid, TERM then KILL; every
namespace and interface is recorded before it is created and deleted in
`finally` and on SIGINT/SIGTERM/SIGHUP. What a run that died (kill -9) left
is cleaned at the next start, by `emu clean`, or by the next fabric's run.
Nothing is killed or deleted by name pattern.

Run as root from the repository root:

    .venv/bin/python bench/forwarding.py [--hops 1 3 5] [--seconds 5]
        [--variants veth,emu,ovs-user] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from emu import mgmt, ovs, registry, rig  # noqa: E402  (the repo on sys.path when run as a script)
from emu.registry import FabricError, die_with_parent, wait_for  # noqa: E402

log = logging.getLogger("bench.forwarding")

PREFIX = "emub-"
BENCH_DIR = Path("/run/emu-bench")
H1_IP, H2_IP = "10.0.0.1", "10.0.0.2"
PREFIX_LEN = 24
IPERF_PORT = 5201
# High enough that the emu scheduler's pacing never limits (DESIGN.md: links
# are paced at their emulated rate; here we want the raw forwarding rate).
EMU_RATE_BPS = 10_000_000_000
UDP_PAYLOAD_BYTES = 64
READY_TIMEOUT_S = 15.0
PING_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 3.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
OFFLOAD_FEATURES = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")
VARIANTS = ("veth", "emu", "emu-shared", "emu-python", "ovs-user")
OVS_NETDEV_TAP = ovs.NETDEV_TAP


class BenchError(RuntimeError):
    """A row could not be measured; the message says what and where the logs are."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP arrived; unwinds through every `finally`."""


def _ifexists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def _netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _proc_alive(pid: int, argv: Optional[list[str]] = None) -> bool:
    """True if `pid` runs (not a zombie) and, if given, still has `argv`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return False
    if argv is not None:
        return cmdline.split(b"\0")[:-1] == [a.encode() for a in argv]
    return True


def _cpu_s(pid: int) -> float:
    """User+system CPU seconds of `pid` (all its threads), 0.0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # proc(5): utime and stime are fields 14 and 15; fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _run(
    argv: list[str],
    timeout_s: float = 30.0,
    check: bool = True,
    env: Optional[dict[str, str]] = None,
) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{' '.join(argv)}: no answer within {timeout_s:.0f} s") from exc
    if check and res.returncode != 0:
        raise BenchError(
            f"{' '.join(argv)}: exit {res.returncode}: {(res.stderr or res.stdout).strip()[-300:]}"
        )
    return res


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    log_path: Path


@dataclass
class Resources:
    """Everything one bench run created, in emu's run registry before creation.

    The record is an `emu.registry.Run` (/run/emu/runs/bench-*.json), the same
    manifest a fabric's run keeps, and the one list of what exists: the
    switches a rig starts (emu/rig.py) record their processes and interfaces
    there too. `emu clean`, and the next bench or fabric run, remove what a
    bench that died (kill -9) left, by pid and start time, never by name.
    `teardown` removes what was made so far and may be called between
    measurements; `close` ends the record. Cleanup touches only what is
    listed here and is idempotent.
    """

    run_dir: Path
    label: str = "bench"
    procs: list[Proc] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    started_pids: list[int] = field(default_factory=list)
    all_links: set[str] = field(default_factory=set)
    stopped: int = 0
    removed_ns: int = 0
    removed_links: int = 0
    run: registry.Run = field(init=False)

    def __post_init__(self) -> None:
        self.run = registry.Run.create(log_dir=str(self.run_dir / "logs"), label=self.label)

    @property
    def links(self) -> list[str]:
        """Interfaces recorded (the run's list: a caller may append, then `save`)."""
        return self.run.interfaces

    @links.setter
    def links(self, names: list[str]) -> None:
        self.run.interfaces = list(names)

    @property
    def netns(self) -> list[str]:
        return self.run.namespaces

    def save(self) -> None:
        """Write what exists now into the run's manifest (callers append to links and dirs)."""
        self.all_links.update(self.links)
        self.started_pids += [e["pid"] for e in self.run.pids if e["pid"] not in self.started_pids]
        self.run.paths = [self.run.sock_dir, *(str(d) for d in self.dirs)]
        self.run.save()

    # -- creation -------------------------------------------------------

    def start(
        self,
        name: str,
        argv: list[str],
        netns: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
    ) -> Proc:
        """Start `argv` (inside `netns` if given), logging to run_dir/logs/NAME.log."""
        full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
        log_path = self.run_dir / "logs" / f"{name}.log"
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        # `ip netns exec` execs the command, so the pid is the command's pid.
        proc = Proc(name, full, popen, log_path)
        self.procs.append(proc)
        self.started_pids.append(popen.pid)
        self.run.add_pid(popen.pid, name)
        return proc

    def run_to_end(
        self, name: str, argv: list[str], timeout_s: float, netns: Optional[str] = None
    ) -> tuple[int, str]:
        """Run `argv` to completion as a recorded process; return (exit code, output)."""
        proc = self.start(name, argv, netns=netns)
        try:
            proc.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.stop(proc)
        out = proc.log_path.read_text(errors="replace")
        proc.log_path.unlink()
        return proc.popen.returncode, out

    def add_netns(self, name: str) -> None:
        self.run.add_namespaces([name])
        self.save()
        _run(["ip", "netns", "add", name])

    def add_veth(self, a: str, b: str) -> None:
        for n in (a, b):
            if len(n) > 15:
                raise BenchError(f"interface name {n!r} is longer than 15 characters")
        self.run.add_interfaces([a, b])
        self.save()
        _run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])

    # -- removal --------------------------------------------------------

    def stop(self, proc: Proc) -> None:
        """Stop one process by pid: TERM, wait, then KILL."""
        p = proc.popen
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s (pid %d) ignored SIGTERM for %.0f s; sending SIGKILL (log %s)",
                    proc.name,
                    p.pid,
                    STOP_TIMEOUT_S,
                    proc.log_path,
                )
                p.kill()
                p.wait(STOP_TIMEOUT_S)
            self.stopped += 1
        if proc in self.procs:
            self.procs.remove(proc)
            self.run.forget_pid(p.pid)

    def stop_switches(self, switches: rig.Switches) -> None:
        """Stop a rig's switches (its processes counted as ours); OVS's logs kept in logs/."""
        self.started_pids += [p for p in switches.started.values() if p not in self.started_pids]
        if isinstance(switches, rig.OvsBridges):
            switches.stop(keep_logs_as=str(self.run_dir / "logs" / f"{Path(switches.dir).name}-"))
        else:
            switches.stop()

    def teardown(self) -> None:
        """Stop every process (newest first), delete namespaces, links, dirs."""
        self.save()
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except OSError as exc:
                log.warning("stopping %s (pid %d): %s", proc.name, proc.popen.pid, exc)
        # What a rig started and nobody stopped (a measurement that raised between).
        self.stopped += len(registry.stop_pids(list(reversed(self.run.pids))))
        self.run.pids.clear()
        for ns in list(self.netns):
            if registry.delete_namespace(ns):
                self.removed_ns += 1
            self.netns.remove(ns)
        for link in list(self.links):
            if registry.delete_interface(link):
                self.removed_links += 1
            self.links.remove(link)
        for d in list(self.dirs):
            shutil.rmtree(d, ignore_errors=True)
            self.dirs.remove(d)
        self.save()

    def close(self) -> None:
        """`teardown`, then end the run's record (its manifest and socket folder go)."""
        self.teardown()
        self.run.teardown()


def clean_stale_runs(label: str) -> None:
    """Remove what runs that died without cleanup (kill -9) left behind: emu's
    registry, benches' and fabrics' alike (`emu.registry.clean_dead_runs`).

    Raises:
        BenchError: another bench of this kind (`label`) is alive.
    """
    for run in registry.live_runs():
        if run.run_id.startswith(f"{label}-") and run.owner_pid != os.getpid():
            raise BenchError(
                f"another bench (pid {run.owner_pid}) is running; see {run.manifest_path}"
            )
    for removed in registry.clean_dead_runs():
        print(
            f"stale: {removed['run']}: stopped {len(removed['stopped_pids'])} processes, "
            f"deleted {len(removed['deleted_interfaces'])} interfaces"
        )


# -- topology -----------------------------------------------------------------


def _offloads_off(ifname: str, netns: Optional[str] = None) -> None:
    """ethtool -K, one feature at a time: a veth refuses some, which is fine."""
    pre = ["ip", "netns", "exec", netns] if netns else []
    for feat in OFFLOAD_FEATURES:
        subprocess.run([*pre, "ethtool", "-K", ifname, feat, "off"], capture_output=True)


def _host_end(res: Resources, ifname: str, ns: str, ip: str) -> None:
    """Move `ifname` into `ns`, address it and bring it up with offloads off."""
    _run(["ip", "link", "set", ifname, "netns", ns])
    nx = ["ip", "netns", "exec", ns]
    _run([*nx, "ip", "link", "set", "lo", "up"])
    _run([*nx, "ip", "addr", "add", f"{ip}/{PREFIX_LEN}", "dev", ifname])
    _run([*nx, "ip", "link", "set", ifname, "up"])
    _offloads_off(ifname, ns)


def _root_end(ifname: str) -> None:
    _run(["ip", "link", "set", ifname, "up"])
    _offloads_off(ifname)


@dataclass
class Chain:
    """Names of a chain of `hops` switches between namespaces h1 and h2.

    Switch i has port 1 = `port(i, 1)` (towards h1) and port 2 = `port(i, 2)`.
    """

    hops: int
    ns1: str = PREFIX + "h1"
    ns2: str = PREFIX + "h2"
    h1_if: str = PREFIX + "h1e"
    h2_if: str = PREFIX + "h2e"

    @staticmethod
    def port(i: int, port_no: int) -> str:
        return f"{PREFIX}s{i}p{port_no}"

    def build(self, res: Resources) -> None:
        res.add_netns(self.ns1)
        res.add_netns(self.ns2)
        if self.hops == 0:
            res.add_veth(self.h1_if, self.h2_if)
        else:
            res.add_veth(self.h1_if, self.port(1, 1))
            for i in range(1, self.hops):
                res.add_veth(self.port(i, 2), self.port(i + 1, 1))
            res.add_veth(self.port(self.hops, 2), self.h2_if)
            for i in range(1, self.hops + 1):
                _root_end(self.port(i, 1))
                _root_end(self.port(i, 2))
        _host_end(res, self.h1_if, self.ns1, H1_IP)
        _host_end(res, self.h2_if, self.ns2, H2_IP)


# -- switches -----------------------------------------------------------------


def _wait(
    cond: Callable[[], bool],
    what: str,
    timeout_s: float,
    procs: tuple[Proc, ...] = (),
    switches: Optional[rig.Switches] = None,
) -> None:
    """Poll `cond` until true; fail naming `what` and the logs of `procs` (emu's `wait_for`)."""

    def done() -> bool:
        for p in procs:
            if p.popen.poll() is not None:
                tail = p.log_path.read_text(errors="replace").strip().splitlines()[-3:]
                raise BenchError(
                    f"{p.name} exited with {p.popen.returncode} while waiting "
                    f"for {what}; log {p.log_path}: {' | '.join(tail)}"
                )
        if switches is not None:
            switches.check_alive(f"while waiting for {what}")
        return cond()

    logs = ", ".join(str(p.log_path) for p in procs) or str(
        Path(switches.run.log_dir) if switches else "none"
    )
    try:
        wait_for(done, timeout_s, what, interval_s=0.1, logs=logs)
    except FabricError as exc:  # a row that cannot be measured is a BenchError (a RigError too)
        raise BenchError(str(exc)) from None


FLOWS = ("in_port=1,actions=output:2", "in_port=2,actions=output:1")


def chain_switches(res: Resources, chain: Chain, variant: str, profile: bool) -> rig.Switches:
    """The chain's switches of `variant` (emu/rig.py, the testbed's rig), started and programmed.

    emu: a process per switch; emu-shared: all in one process and one event
    loop, as `Fabric(switch_processes=1)` runs them; emu-python: as emu with
    EMU_DATAPATH=python; ovs-user: netdev bridges on our own OVS daemons.

    Raises:
        BenchError: a switch did not start, or refused the flows (names its log).
    """
    label = f"{variant}-{chain.hops}hop"
    ports = [((chain.port(i, 1), 1), (chain.port(i, 2), 2)) for i in range(1, chain.hops + 1)]
    switches: rig.Switches
    if variant == "ovs-user":
        specs = [rig.SwitchSpec(f"{PREFIX}b{i}", i, p) for i, p in enumerate(ports, 1)]
        directory = res.run_dir / f"ovs-{label}"
        res.dirs.append(directory)
        res.save()
        switches = rig.OvsBridges(res.run, specs, directory)
    else:
        specs = [
            rig.SwitchSpec(f"s{i}", i, p, rate_bps=EMU_RATE_BPS) for i, p in enumerate(ports, 1)
        ]
        env = {"EMU_DATAPATH": "python" if variant == "emu-python" else "c"}
        if profile:  # emu/profiling.py: one .prof per process when it stops
            env["EMU_PROFILE_DIR"] = str(res.run_dir / "logs" / f"prof-{chain.hops}hop")
        switches = rig.EmuSwitches(
            res.run, specs, shared=variant == "emu-shared", env=env, log_prefix=f"{label}-"
        )
    try:
        switches.start(READY_TIMEOUT_S)
        for spec in specs:
            for flow in FLOWS:
                switches.ofctl(spec.name, "add-flow", flow)
    except rig.RigError as exc:
        raise BenchError(str(exc)) from None
    return switches


def snapshot(switches: rig.Switches, label: str) -> None:
    """Save each emu switch's counters next to its log, for post-mortems."""
    if not isinstance(switches, rig.EmuSwitches):
        return
    for spec in switches.specs:
        try:
            counters = switches.call(spec.name, "counters", timeout_s=3.0)
        except mgmt.MgmtError as exc:
            counters = {"error": str(exc)}
        path = Path(switches.log_paths[spec.name]).with_suffix(".counters.jsonl")
        with open(path, "a") as f:
            f.write(json.dumps({"after": label, "switch": spec.name, "counters": counters}) + "\n")


# -- measurement --------------------------------------------------------------


@dataclass
class Row:
    variant: str
    hops: int
    tcp_mbps: Optional[float] = None
    tcp_retransmits: Optional[int] = None
    tcp_cpu_pct: Optional[float] = None
    udp_fps: Optional[float] = None
    udp_loss_pct: Optional[float] = None
    udp_cpu_pct: Optional[float] = None
    error: str = ""


def _iperf(res: Resources, ns: str, label: str, args: list[str], seconds: int) -> dict:
    argv = [
        "iperf3",
        "-c",
        H2_IP,
        "-p",
        str(IPERF_PORT),
        "-t",
        str(seconds),
        "-J",
        "--connect-timeout",
        "3000",
        "-A",
        "0",
        *args,
    ]
    code, out = res.run_to_end(f"{label}-iperf3-client", argv, seconds + 30, netns=ns)
    try:
        data = json.loads(out)
    except json.JSONDecodeError as exc:
        raise BenchError(
            f"iperf3 {' '.join(args)}: no JSON (exit {code}): {out.strip()[-200:]}"
        ) from exc
    if "error" in data:
        raise BenchError(f"iperf3 {' '.join(args)}: {data['error']}")
    return data


def _cpu_pct(pids: list[int], before: list[float], wall_s: float) -> float:
    return 100.0 * sum(_cpu_s(p) - b for p, b in zip(pids, before)) / wall_s


def measure(res: Resources, variant: str, hops: int, seconds: int, profile: bool = False) -> Row:
    """Build one variant with `hops` switches, measure, tear it down."""
    row = Row(variant, hops)
    chain = Chain(hops)
    switches: Optional[rig.Switches] = None
    try:
        chain.build(res)
        if variant != "veth":
            switches = chain_switches(res, chain, variant, profile)

        def pings() -> bool:
            return (
                subprocess.run(
                    ["ip", "netns", "exec", chain.ns1, "ping", "-c", "1", "-W", "1", H2_IP],
                    capture_output=True,
                ).returncode
                == 0
            )

        _wait(
            pings,
            f"ping {H1_IP} -> {H2_IP} through {hops} {variant} hop(s)",
            PING_TIMEOUT_S,
            switches=switches,
        )
        # Client on CPU 0, server on CPU 1 (iperf3 -A): without pinning the
        # 0-hop UDP ceiling varied 75k..270k frames/s between runs.
        server = res.start(
            f"{variant}-{hops}hop-iperf3-server",
            ["iperf3", "-s", "-B", H2_IP, "-p", str(IPERF_PORT), "-A", "1"],
            netns=chain.ns2,
        )
        _wait(
            lambda: (
                subprocess.run(
                    ["ip", "netns", "exec", chain.ns2, "ss", "-Hltn", f"sport = :{IPERF_PORT}"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                != ""
            ),
            "iperf3 server to listen",
            READY_TIMEOUT_S,
            (server,),
        )
        pids = switches.pids() if switches else []

        before, t0 = [_cpu_s(p) for p in pids], time.monotonic()
        tcp = _iperf(res, chain.ns1, f"{variant}-{hops}hop-tcp", [], seconds)
        if pids:
            row.tcp_cpu_pct = _cpu_pct(pids, before, time.monotonic() - t0)
        row.tcp_mbps = tcp["end"]["sum_received"]["bits_per_second"] / 1e6
        row.tcp_retransmits = tcp["end"]["sum_sent"].get("retransmits")
        if switches:
            switches.check_alive("during TCP")
            snapshot(switches, "tcp")

        before, t0 = [_cpu_s(p) for p in pids], time.monotonic()
        udp = _iperf(
            res,
            chain.ns1,
            f"{variant}-{hops}hop-udp",
            ["-u", "-l", str(UDP_PAYLOAD_BYTES), "-b", "0"],
            seconds,
        )
        if pids:
            row.udp_cpu_pct = _cpu_pct(pids, before, time.monotonic() - t0)
        recv = udp["end"]["sum_received"]
        sent = udp["end"]["sum_sent"]
        received = recv["packets"] - recv["lost_packets"]
        row.udp_fps = received / recv["seconds"]
        row.udp_loss_pct = 100.0 * (1 - received / sent["packets"]) if sent["packets"] else None
        if switches:
            switches.check_alive("during UDP")
            snapshot(switches, "udp")
    except (BenchError, rig.RigError) as exc:
        row.error = str(exc)
    except (KeyError, ZeroDivisionError) as exc:
        row.error = f"unexpected iperf3 JSON: missing or zero {exc}"
    finally:
        if switches is not None:
            res.stop_switches(switches)
        res.teardown()
    return row


# -- output -------------------------------------------------------------------

HEADERS = (
    "variant",
    "hops",
    "TCP Mbit/s",
    "TCP retr",
    "UDP-64 frames/s",
    "UDP loss %",
    "switch CPU % (TCP)",
    "switch CPU % (UDP)",
    "error",
)


def _fmt(v: Optional[float], digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _cells(r: Row) -> list[str]:
    return [
        r.variant,
        str(r.hops),
        _fmt(r.tcp_mbps, 1),
        _fmt(r.tcp_retransmits),
        _fmt(r.udp_fps),
        _fmt(r.udp_loss_pct, 1),
        _fmt(r.tcp_cpu_pct),
        _fmt(r.udp_cpu_pct),
        r.error,
    ]


def plain_table(rows: list[Row]) -> str:
    cells = [list(HEADERS)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS) - 1)]
    lines = []
    for c in cells:
        line = "  ".join(
            v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(c, widths))
        )
        lines.append((line + "  " + c[-1]).rstrip())
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "| "
        + " | ".join(
            "---" if i < 2 or i == len(HEADERS) - 1 else "---:" for i in range(len(HEADERS))
        )
        + " |",
    ]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(r)) + " |")
    return "\n".join(lines)


def leftovers(res: Resources) -> list[str]:
    """What of ours still exists: processes, namespaces, interfaces."""
    left = [f"process {p}" for p in res.started_pids if _proc_alive(p)]
    left += [f"namespace {ns}" for ns in _netns_list() if ns.startswith(PREFIX)]
    left += [
        f"interface {n}"
        for n in os.listdir("/sys/class/net")
        if n.startswith(PREFIX) or n in res.all_links
    ]
    return left


def guarded(
    label: str, prefix: str, body: Callable[[Resources], None]
) -> tuple[Resources, int, list[str]]:
    """Run `body(res)` with everything it creates in emu's run registry and removed after.

    What runs that died left is cleaned first (`clean_stale_runs`); SIGINT,
    SIGTERM and SIGHUP unwind through the teardown. Returns the resources, the
    exit status (130 when interrupted) and what is left behind (nothing,
    normally; the run's manifest goes then, and stays for `emu clean` otherwise).
    """

    def on_signal(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    clean_stale_runs(f"bench-{prefix}")
    run_dir = BENCH_DIR / time.strftime(f"{prefix}-%Y%m%d-%H%M%S-{os.getpid()}")
    (run_dir / "logs").mkdir(parents=True)
    res = Resources(run_dir, label=f"bench-{prefix}")
    status = 0
    try:
        body(res)
    except Interrupted as exc:
        print(f"{label}: interrupted by {exc}; cleaning up", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        res.teardown()
        left = leftovers(res)
        if not left:
            res.run.teardown()
    return res, status, left


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--hops",
        type=int,
        nargs="+",
        default=[1, 3, 5],
        help="switch chain lengths to measure (default: 1 3 5)",
    )
    p.add_argument("--seconds", type=int, default=5, help="length of each iperf3 test")
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of {','.join(VARIANTS)}",
    )
    p.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run the emu switches under cProfile (slower); stats in the run's logs/*.prof",
    )
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {bad}; allowed: {', '.join(VARIANTS)}")
    if any(h < 1 or h > 99 for h in args.hops):
        p.error(f"--hops must be between 1 and 99, got {args.hops}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if os.geteuid() != 0:
        print("forwarding bench: needs root (namespaces, veths, AF_PACKET)", file=sys.stderr)
        return 2
    for tool in ("ip", "ethtool", "iperf3", "ovs-ofctl"):
        if not shutil.which(tool):
            print(f"forwarding bench: {tool} not found", file=sys.stderr)
            return 2

    plan = [(v, 0) for v in args.variants if v == "veth"]
    plan += [(v, h) for v in args.variants if v != "veth" for h in args.hops]
    rows: list[Row] = []

    def measure_all(res: Resources) -> None:
        for variant, hops in plan:
            print(f"# {variant}, {hops} hop(s) ...", file=sys.stderr, flush=True)
            row = measure(res, variant, hops, args.seconds, args.profile)
            if row.error:
                print(f"#   error: {row.error}", file=sys.stderr, flush=True)
            rows.append(row)

    res, status, left = guarded("forwarding bench", "run", measure_all)
    run_dir = res.run_dir
    print(plain_table(rows))
    if args.markdown:
        print()
        print(markdown_table(rows))
    print()
    print(f"logs: {run_dir / 'logs'}")
    if left:
        print(f"cleanup: LEFT BEHIND: {', '.join(left)} (see {res.run.manifest_path})")
        status = status or 1
    else:
        print(
            f"cleanup: nothing left ({len(res.started_pids)} processes started and stopped by pid, "
            f"namespaces and interfaces with prefix {PREFIX!r} all deleted)"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
