"""The servers a fabric runs on besides this machine, and emu's SSH to them.

Owns what the run knows of each server (issue 32; docs/cluster.md): the names
given (`--servers local,b`: "local" is this machine, anything else is what
`ssh` connects to, so ~/.ssh/config or `EMU_SSH_CONFIG` says its address,
user, port and key); the preflight that checks every server before anything
starts (`preflight`: reachable, a key accepted, root, the same emu, mnexec, a
tunnel kind its kernel makes; one line naming the server and the problem);
and, for a running fabric, one SSH master connection per server that every
session shares (`Connection`), the server's agent (`Agent`, the other end of
`python -m emu.remote serve`) and the processes it started (`RemoteProcess`).

No Mininet here: emu.cluster holds the Mininet classes that use this.
Nothing here ends processes by name; the run's manifest records the master
and agent pids, and the agent's own manifest on the server records what it
started there.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time

from emu import remote
from emu.registry import FabricError, Run, die_with_parent, stop_child, wait_for

log = logging.getLogger(__name__)

LOCAL = "local"
LOCAL_ALIASES = (LOCAL, "localhost")
SSH_CONFIG_ENV = "EMU_SSH_CONFIG"  # an ssh_config file used instead of ~/.ssh/config
REMOTE_PYTHON_ENV = "EMU_REMOTE_PYTHON"  # the servers' python with emu (default: this one's path)
CONNECT_TIMEOUT_S = 5
PREFLIGHT_TIMEOUT_S = 30.0
AGENT_TIMEOUT_S = 30.0


class ServerError(FabricError):
    """A server cannot take part in a run; one line naming the server and why.

    A FabricError, so that a test or script that handles those handles this;
    `emu` exits with status 2 for it, as for any bad input.
    """


def parse_servers(value) -> list[str]:
    """`local,b,c` (or a list) -> ["local", "b", "c"]; [] for none.

    Raises:
        ServerError: an empty or repeated name, or one ssh would read as an option.
    """
    if value is None or value == "":
        return []
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise ServerError(f"servers {value!r}: an empty server name")
        if name.startswith("-") or re.search(r"\s", name):
            raise ServerError(f"servers {value!r}: {name!r} is not a host name")
        name = LOCAL if name in LOCAL_ALIASES else name
        if name in out:
            raise ServerError(f"servers {value!r}: {name} is named twice")
        out.append(name)
    return out


def remote_servers(servers: list[str]) -> list[str]:
    return [s for s in servers if s != LOCAL]


def ssh_config_path() -> str | None:
    return os.environ.get(SSH_CONFIG_ENV) or None


def remote_python() -> str:
    """The python that runs emu on the servers: `EMU_REMOTE_PYTHON`, else this one's path
    (Mininet's cluster edition assumes the same installation everywhere)."""
    return os.environ.get(REMOTE_PYTHON_ENV) or sys.executable


def ssh_base(config: str | None) -> list[str]:
    argv = ["ssh"]
    if config:
        argv += ["-F", config]
    return argv + [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", "ServerAliveInterval=5",
        "-o", "ServerAliveCountMax=3",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip


def ssh_failure(name: str, stderr: str) -> str:
    """One line for an ssh that failed before the remote command ran (exit status 255)."""
    text = stderr.strip()
    last = text.splitlines()[-1] if text else "no message"
    low = text.lower()
    if "permission denied" in low:
        return (
            f"server {name}: no key accepted (ssh {name} refused this machine's keys; "
            "add one to its authorized_keys, docs/cluster.md)"
        )
    if "host key verification failed" in low or "no such host key" in low:
        return f"server {name}: its host key is not known here (add it to known_hosts)"
    if "could not resolve" in low or "name or service not known" in low:
        return f"server {name}: unknown host name ({last})"
    return f"server {name}: unreachable ({last})"


def check_server(
    name: str, config: str | None, python: str, version: str, sessions: int | None = None
) -> dict:
    """Ask `name` what it has (`python -m emu.remote preflight`); ServerError if unfit."""
    argv = ssh_base(config) + ["-o", "ControlPath=none", name]
    argv += [shlex.join([python, "-m", "emu.remote", "preflight"])]
    try:
        res = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PREFLIGHT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ServerError(f"server {name}: no answer within {PREFLIGHT_TIMEOUT_S:g} s") from None
    if res.returncode == 255:
        raise ServerError(ssh_failure(name, res.stderr))
    if res.returncode != 0:
        err = res.stderr.strip().splitlines()
        last = err[-1] if err else f"exit status {res.returncode}"
        if res.returncode == 127 or "no such file" in res.stderr.lower():
            why = f"no {python} there"
        elif "No module named" in res.stderr:
            why = f"{python} there has no emu installed"
        else:
            why = f"{python} -m emu.remote failed: {last}"
        raise ServerError(
            f"server {name}: {why} (install emu there as here, or set {REMOTE_PYTHON_ENV})"
        )
    try:
        info = json.loads(res.stdout.strip().splitlines()[-1])
        there = info["version"]
    except (ValueError, IndexError, KeyError, TypeError):
        raise ServerError(
            f"server {name}: {python} -m emu.remote preflight answered "
            f"{res.stdout.strip()[:80]!r}, not emu's preflight"
        ) from None
    here = remote.source_fingerprint()
    if there != version or info.get("source") != here:
        raise ServerError(
            f"server {name}: emu {there} (source {info.get('source')}) there, {version} "
            f"(source {here}) here: install the same emu on every server"
        )
    here_c, there_c = remote.source_fingerprint((".c", ".h")), info.get("c_source")
    if here_c and there_c and here_c != there_c:  # two checkouts: their C sources too
        raise ServerError(
            f"server {name}: emu's C sources differ ({there_c} there, {here_c} here): "
            "install the same emu on every server"
        )
    if not info.get("root"):
        raise ServerError(f"server {name}: emu needs root there (log in as root: User root)")
    if not info.get("mnexec"):
        raise ServerError(f"server {name}: no mnexec there (install Debian's mininet package)")
    if not info.get("tunnels"):
        raise ServerError(f"server {name}: its kernel makes neither VXLAN nor gretap tunnels")
    allowed = info.get("max_sessions")
    if sessions and allowed is not None and allowed < sessions:
        raise ServerError(
            f"server {name}: its sshd allows {allowed} sessions on a connection (MaxSessions) "
            f"and the fabric needs {sessions} there: set MaxSessions 1000 in its sshd_config "
            "(docs/cluster.md)"
        )
    return info


def sessions_needed(nodes: int, hosts: int) -> int:
    """Sessions a server's share of a fabric opens on the run's one connection: a
    shell per node, a command or two at a time per host (ping, iperf3, tc), the
    agent, and room for a scenario's own."""
    return nodes + 2 * hosts + 10


# A full frame (1514 bytes) in a VXLAN tunnel: outer IPv4 20 + UDP 8 + VXLAN 8 +
# inner Ethernet 14 + 1500 = 1550 bytes of IP (gretap with a key: 1542).
TUNNEL_PACKET_BYTES = 1550


def check_underlay(name: str, address: str) -> None:
    """The network to `name` carries a tunnelled full frame unfragmented (ping with DF
    set); else ServerError: the tunnel would drop every full frame without a word."""

    def ping(payload: int) -> bool:
        argv = ["ping", "-q", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-M", "do", "-s"]
        res = subprocess.run(argv + [str(payload), address], capture_output=True, check=False)
        return res.returncode == 0

    if not ping(56):
        raise ServerError(
            f"server {name}: no answer to ping from {address} (emu measures the path to a "
            "server with ping: let ICMP echo through)"
        )
    if not ping(TUNNEL_PACKET_BYTES - 28):  # IPv4 20 + ICMP 8
        raise ServerError(
            f"server {name}: the network to {address} does not carry {TUNNEL_PACKET_BYTES}-byte "
            "packets, a tunnelled full frame: raise the MTU of the interfaces between the "
            "servers to 1600 (docs/cluster.md)"
        )


def preflight(
    servers: list[str],
    config: str | None = None,
    python: str | None = None,
    sessions: dict[str, int] | None = None,
) -> dict:
    """Check every remote server at once, before anything is made.

    `sessions`: how many ssh sessions the fabric will open on each server
    (`sessions_needed`), checked against its sshd's MaxSessions; None: not
    checked. Returns {"servers": {server: its preflight answer}, "tunnel":
    the tunnel kind this machine and every server make}.

    Raises:
        ServerError: the first server (in the order given) that cannot take part.
    """
    python = python or remote_python()
    version = remote.package_version()
    for tool in ("ssh", "ping"):
        if shutil.which(tool) is None:
            raise ServerError(f"no {tool} on this machine: scripts/bootstrap installs it")
    names = remote_servers(servers)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        futures = {
            n: pool.submit(check_server, n, config, python, version, (sessions or {}).get(n))
            for n in names
        }
    infos = {n: futures[n].result() for n in names}  # raises the first in the order given
    for n in names:
        address = server_address(n, config)
        if address not in infos[n].get("addresses", []):
            raise ServerError(
                f"server {n}: ssh reaches it at {address}, which is not one of its addresses "
                f"({', '.join(infos[n].get('addresses', [])) or 'none'}): a ProxyJump or a "
                "forwarded port; tunnels need the server's own address as HostName"
            )
        if LOCAL in servers:
            check_underlay(n, address)
    kinds = common_tunnel_kind(servers, infos, config, python)
    if not kinds:
        raise ServerError(
            "servers " + ",".join(servers) + ": no tunnel kind (VXLAN, gretap) that all their "
            "kernels make"
        )
    return {"servers": infos, "tunnel": kinds[0]}


def common_tunnel_kind(servers: list[str], infos: dict, config: str | None, python: str) -> list:
    """[the tunnel kind every machine of the run makes] or []. Each preflight probed
    only the first kind its kernel makes (VXLAN where it can); where they differ,
    the machines that named another are asked about the rest (`emu.remote probe`)."""
    made = {n: list(infos[n]["tunnels"]) for n in remote_servers(servers)}
    if LOCAL in servers:
        made[LOCAL] = remote.tunnel_kinds_here()
    for kind in remote.TUNNEL_KINDS:
        if all(kind in k for k in made.values()):
            return [kind]
    for kind in remote.TUNNEL_KINDS[1:]:  # the fallback, asked of those that did not say it
        for n, ks in made.items():
            if kind in ks:
                continue
            if n == LOCAL:
                ks += remote.tunnel_kinds_here((kind,))
                continue
            argv = ssh_base(config) + ["-o", "ControlPath=none", n]
            argv += [shlex.join([python, "-m", "emu.remote", "probe", kind])]
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            try:
                ks += json.loads(res.stdout)
            except ValueError:
                pass
        if all(kind in k for k in made.values()):
            return [kind]
    return []


def server_address(name: str, config: str | None) -> str:
    """The IPv4 address ssh connects to for `name` (its config's HostName, resolved)."""
    if name == LOCAL:
        return "127.0.0.1"
    res = subprocess.run(
        ssh_base(config) + ["-G", name], capture_output=True, text=True, check=False
    )
    host = name
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname":
            host = value.strip()
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except OSError as exc:
        raise ServerError(f"server {name}: cannot resolve {host}: {exc}") from None


def local_address_towards(ip: str) -> str:
    """This machine's source address for packets to `ip` (`ip route get`)."""
    out = subprocess.run(["ip", "route", "get", ip], capture_output=True, text=True, check=False)
    found = re.search(r"\bsrc (\S+)", out.stdout)
    if not found:
        raise ServerError(f"no route from this machine to {ip}: {out.stderr.strip()}")
    return found.group(1)


class Connection:
    """This run's SSH master connection to one server; every session shares it.

    The master dies with the run (PR_SET_PDEATHSIG): when it goes, sshd ends
    every session of the run on the server, the agent's included, and the
    agent removes what the run made there.
    """

    def __init__(self, name: str, index: int, run: Run, config: str | None) -> None:
        self.name = name
        self.config = config
        self.run = run
        # Short: a Unix socket path has 108 bytes.
        self.control_path = os.path.join(run.sock_dir, f"ssh{index}")
        self.master: subprocess.Popen | None = None

    def ssh(self, tty: bool = False) -> list[str]:
        """ssh through the master, up to the destination; the command comes after."""
        argv = ssh_base(self.config) + ["-S", self.control_path, "-o", "ControlMaster=no"]
        return argv + (["-tt"] if tty else []) + [self.name]

    def argv(self, command: list[str], tty: bool = False) -> list[str]:
        """ssh that runs `command` (quoted for the remote shell) on the server."""
        return self.ssh(tty) + [shlex.join(command)]

    def start(self) -> None:
        argv = ssh_base(self.config) + [
            "-M", "-N", "-S", self.control_path,
            "-o", "ControlPersist=no",
            "-o", "StreamLocalBindUnlink=yes",
            self.name,
        ]  # fmt: skip
        log_path = os.path.join(self.run.log_dir, f"ssh-{self.name}.log")
        self.master = self.run.spawn(
            argv, log_path, f"ssh master {self.name}", dies_with_parent=True
        )

        def up() -> bool:
            if self.master.poll() is not None:
                raise ServerError(f"server {self.name}: ssh connection ended; see {log_path}")
            return self._control(["-O", "check"]).returncode == 0

        wait_for(up, 20.0, f"the ssh connection to {self.name}", interval_s=0.1, logs=log_path)

    def _control(self, args: list[str]) -> subprocess.CompletedProcess:
        argv = ssh_base(self.config) + ["-S", self.control_path, *args, self.name]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except subprocess.TimeoutExpired:
            raise ServerError(
                f"server {self.name}: ssh {' '.join(args)} gave no answer within 20 s"
            ) from None

    def forward_socket(self, local_path: str, remote_path: str) -> None:
        """`local_path` here reaches the Unix socket `remote_path` there (ssh -L)."""
        res = self._control(["-O", "forward", "-L", f"{local_path}:{remote_path}"])
        if res.returncode != 0:
            raise ServerError(f"server {self.name}: forwarding {remote_path}: {res.stderr.strip()}")

    def forward_port_here(self, port: int) -> int:
        """A port on the server's loopback that reaches this machine's 127.0.0.1:`port`."""
        res = self._control(["-O", "forward", "-R", f"127.0.0.1:0:127.0.0.1:{port}"])
        found = re.search(r"(\d+)", res.stdout)
        if res.returncode != 0 or not found:
            raise ServerError(
                f"server {self.name}: forwarding port {port}: {res.stderr.strip() or res.stdout}"
            )
        return int(found.group(1))

    def stop(self) -> None:
        if self.master is None:
            return
        if self.master.poll() is None:
            self._control(["-O", "exit"])
        stop_child(self.master)
        self.run.forget_pid(self.master.pid)
        self.master = None


class AgentGone(ServerError):
    """The agent's process (its ssh) has exited: what it started there has gone with it."""


class AgentTimeout(ServerError):
    """The agent did not answer in time; it may still be running."""


class Agent:
    """The run's agent on one server (`python -m emu.remote serve`), through its connection."""

    def __init__(self, conn: Connection, python: str) -> None:
        self.name = conn.name
        self.conn = conn
        self._lock = threading.Lock()
        self._buf = b""
        self._next_id = 0
        log_path = os.path.join(conn.run.log_dir, f"agent-{conn.name}.log")
        command = [python, "-m", "emu.remote", "serve", "--origin", conn.run.run_id]
        with open(log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                conn.argv(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logf,
                close_fds=True,
                preexec_fn=die_with_parent,
            )
        conn.run.add_pid(self.proc.pid, f"agent {conn.name}")
        self.log_path = log_path
        self.hello = self._answer("start", AGENT_TIMEOUT_S)
        self.run_id = self.hello["run_id"]
        self.sock_dir = self.hello["sock_dir"]
        self.log_dir = self.hello["log_dir"]

    def _readline(self, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return b""
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _answer(self, what: str, timeout_s: float, want_id: int | None = None):
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._readline(max(0.0, deadline - time.monotonic()))
            if not line:
                if self.proc.poll() is not None:
                    raise AgentGone(
                        f"server {self.name}: its agent has exited (see {self.log_path})"
                    )
                raise AgentTimeout(
                    f"server {self.name}: its agent gave no answer to {what} within "
                    f"{timeout_s:g} s (see {self.log_path})"
                )
            try:
                answer = json.loads(line)
            except ValueError:
                raise ServerError(
                    f"server {self.name}: its agent wrote {line[:80]!r}, not an answer "
                    "(does a login script there print to stdout?)"
                ) from None
            # An answer to an earlier request that timed out is not this one's.
            if want_id is None or answer.get("id") == want_id:
                break
        if not answer.get("ok"):
            raise ServerError(f"server {self.name}: {what}: {answer.get('error')}")
        return answer.get("result")

    def call(self, op: str, timeout_s: float = AGENT_TIMEOUT_S, **args):
        with self._lock:
            if self.proc.poll() is not None:
                raise AgentGone(f"server {self.name}: its agent has exited (see {self.log_path})")
            self._next_id += 1
            try:
                req = dict(args, op=op, id=self._next_id)
                self.proc.stdin.write(json.dumps(req).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise AgentGone(f"server {self.name}: its agent has gone") from None
            return self._answer(op, timeout_s, want_id=self._next_id)

    def heartbeat(self) -> None:
        """Tell the agent the run is alive (it ends the run's part after
        `remote.ORIGIN_SILENCE_S` without a word from the run); an agent busy with a
        request hears from the run already, and is skipped."""
        if self._lock.locked():
            return
        try:
            self.call("ping", timeout_s=10.0)
        except Exception as exc:  # noqa: BLE001 - the heartbeat must go on for the others
            log.warning("heartbeat to %s: %s", self.name, exc)

    def run(self, argv: list[str], check: bool = True, timeout_s: float = 30.0) -> dict:
        """Run `argv` in the server's root namespace; its {"rc", "stdout", "stderr"}."""
        res = self.call("run", argv=argv, limit_s=timeout_s, timeout_s=timeout_s + 5)
        if check and res["rc"] != 0:
            raise FabricError(f"server {self.name}: {shlex.join(argv)}: {res['stderr'].strip()}")
        return res

    def close(self) -> dict:
        """Remove what the run made on the server (the agent's teardown); {} if it had gone."""
        removed: dict = {}
        try:
            removed = self.call("teardown", timeout_s=60.0)
        except ServerError:
            pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        stop_child(self.proc)
        self.conn.run.forget_pid(self.proc.pid)
        return removed


class RemoteProcess:
    """A process the agent started on its server, as much of `subprocess.Popen` as emu uses."""

    def __init__(self, agent: Agent, pid: int, role: str) -> None:
        self.agent = agent
        self.pid = pid
        self.role = role
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                rc = self.agent.call("poll", pid=self.pid)
            except AgentGone:
                rc = -9  # the agent, and with it this process, has gone
            except AgentTimeout:
                return None  # not known to have ended
            if rc is not None:
                self.returncode = rc
                try:
                    self.agent.call("reap", pid=self.pid)
                except ServerError:
                    pass
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            self.agent.call("signal", pid=self.pid, sig=int(sig))

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"{self.agent.name}:{self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


def clean_server(name: str, info: dict, origin: str) -> str:
    """On server `name`, end the part of the dead run `origin` (its agent may live on
    if the run's machine died without closing the connection) and `emu clean` there;
    `info`: what the run's manifest recorded of the server. One line saying what
    it did or why it could not."""
    python = info.get("python") or remote_python()
    argv = ssh_base(info.get("ssh_config")) + ["-o", "ControlPath=none", name]
    end = shlex.join([python, "-m", "emu.remote", "end", "--origin", origin])
    argv += [end + "; " + shlex.join([python, "-m", "emu.cli", "clean"])]
    try:
        res = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        return f"server {name}: emu clean did not finish within 120 s"
    if res.returncode == 255:
        return (
            ssh_failure(name, res.stderr)
            + f"; there, run `{python} -m emu.remote end --origin {origin}` and `emu clean`"
        )
    out = (res.stdout + res.stderr).strip().replace("\n", "; ")
    return f"server {name}: {out}"


# ----- what a run over several servers reports (emu.scenario add_servers) -----

FRAME_BITS = 1514 * 8  # a full frame: the unit of a link's time


def placement_rows(doc: dict) -> list[list]:
    """[server, switches, hosts] of a `Fabric.servers_report()`."""
    return [[s, ", ".join(doc["switches"][s]) or "-", len(doc["hosts"][s])] for s in doc["servers"]]


def tunnel_rows(doc: dict) -> list[list]:
    """[link, from, to, frames in, frames out, lost, mean Mbit/s] per tunnel and
    direction; lost "-" where it was not judged (traffic never paused for a reading
    with nothing in flight), the link marked "(fault)" where a fault took it down."""
    rows = []
    for t in doc["tunnels"]:
        link = t["link"] + (" (fault)" if t.get("faulted") else "")
        for src, dst in (("a", "b"), ("b", "a")):
            way = t.get(f"{src}_to_{dst}")
            ends = [f"{t[f'server_{e}']}:{t[f'intf_{e}']}" for e in (src, dst)]
            ends = [e.replace("localhost:", "local:") for e in ends]
            if way is None:
                rows.append([link, *ends, "?", "?", "?", "?"])
            else:
                lost = tunnel_lost(way)
                rows.append(
                    [link, *ends, way["sent"], way["received"], "-" if lost is None else lost,
                     way.get("mbps", "?")]
                )  # fmt: skip
    return rows


def tunnels_lost(doc: dict) -> dict:
    """Over the tunnels no fault took down, each way: {"lost": frames lost where
    judged, "judged": ways judged, "unjudged": ways read but never at a quiet
    moment, "unread": ways that could not be read}."""
    out = {"lost": 0, "judged": 0, "unjudged": 0, "unread": 0}
    for t in doc["tunnels"]:
        if t.get("faulted"):
            continue
        for w in ("a_to_b", "b_to_a"):
            way = t.get(w)
            lost = None if way is None else tunnel_lost(way)
            if way is None:
                out["unread"] += 1
            elif lost is None:
                out["unjudged"] += 1
            else:
                out["judged"] += 1
                out["lost"] += lost
    return out


def tunnel_lost(way: dict) -> int | None:
    """Frames a tunnel lost one way: sent and never out, or dropped or errored at an
    end; None where it could not be judged."""
    if way.get("lost") is None:
        return None
    return (
        way["lost"] + way["tx_dropped"] + way["tx_errors"] + way.get("rx_dropped", 0)
        + way["rx_errors"]
    )  # fmt: skip


def tunnel_frames(doc: dict) -> int:
    """Frames that came out of every tunnel, both ways."""
    return sum(t[w]["received"] for t in doc["tunnels"] for w in ("a_to_b", "b_to_a") if t.get(w))


def tunnel_delay_limit_s(doc: dict) -> float | None:
    """One frame time of the slowest link a tunnel carries: emu's links have no
    propagation delay (`delay_s` 0), so a tunnel that adds less than a frame time
    adds less than the link's own serialization of one frame."""
    rates = doc.get("tunnel_link_rates_bps") or {}
    return FRAME_BITS / min(rates.values()) if rates else None
