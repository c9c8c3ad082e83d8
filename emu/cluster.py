"""One fabric over several servers, built with Mininet's cluster edition (issue 32).

Owns the Mininet classes of a fabric that `Fabric(graph, servers=[...])`
spreads over servers (docs/cluster.md), each a subclass of the cluster
edition's own (Debian's mininet package, mininet/examples/cluster.py):

- `EmuRemoteMixin` (its `RemoteMixin`): a node on another server is a shell
  there, started over the run's SSH master (emu.servers.Connection); no
  `sudo` (emu is root on every server, the preflight checks it), no agent
  forwarding, and every command a remote node `popen`s runs under
  `python -m emu.remote guard`, which ends it when its SSH session ends.
- `RemoteEmuHost`, `RemoteEmuSwitch`: emu's host and switch on the server
  `server=` names; the switch's worker is started by that server's agent
  (recorded in the server's own manifest), its management socket is
  forwarded here (so `mgmt.call`, telemetry and `emu ctl` work unchanged),
  and it reaches the controller through a port the SSH master forwards.
- `EmuTunnelLink` (its `RemoteGRELink`): a link whose ends are on two
  servers becomes a tunnel (VXLAN, or gretap where every kernel has it)
  whose two ends carry the graph's interface names, so each is an ordinary
  emu switch port, paced at the link's rate. MTU 1500 as every emu link,
  not the cluster edition's 1450: the underlay must carry 1550-byte packets.
- `EmuCluster` (its `MininetCluster`): emu's preflight (emu.servers)
  instead of `precheck` (which `sys.exit`s and calls sudo), emu's placement
  (emu.placement) instead of `SwitchBinPlacer`.
- `ClusterRun`: the servers of one run, their connections and agents, the
  tunnels made, and what was read of them when the run closed.

`ClusterCleanup` (which runs `mn -c` over SSH) is never used: each server's
agent removes what its manifest lists, and `emu clean` asks each server of a
dead run to do the same.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import weakref
import zlib

from mininet.examples.cluster import MininetCluster, RemoteGRELink, RemoteMixin
from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host

from emu import registry
from emu import servers as srv
from emu.registry import FabricError, Run, wait_for
from emu.remote import HEARTBEAT_S, tunnel_argv
from emu.switch.node import EmuSwitch, disable_offloads

log = logging.getLogger(__name__)

QUIET_S = 0.1  # no frame in or out of any tunnel this long: nothing is in flight
MININET_LOCAL = "localhost"  # the cluster edition's name for this machine
TUNNEL_MTU = 1500  # every emu link's: a 1514-byte frame


def mininet_name(server: str) -> str:
    return MININET_LOCAL if server == srv.LOCAL else server


class ClusterRun:
    """The servers of one run: SSH masters, agents, controller forwards, tunnels."""

    def __init__(self, servers: list[str], run: Run, preflight: dict) -> None:
        self.servers = list(servers)
        self.run = run
        self.config = srv.ssh_config_path()
        self.python = srv.remote_python()
        self.tunnel_kind = preflight["tunnel"]
        self.addresses = {s: srv.server_address(s, self.config) for s in self.servers}
        self.conns: dict[str, srv.Connection] = {}
        self.agents: dict[str, srv.Agent] = {}
        self.controller_addrs: dict[str, str] = {}
        self.tunnels: list[dict] = []
        # Links between servers that a fault took down (emu.net set_link, kill_switch):
        # what they lost then is the fault's, not the tunnel's.
        self.faulted: set[str] = set()
        self._baseline: dict | None = None  # the tunnels' counters at `mark_tunnels`
        self._baseline_quiet: dict[str, bool] = {}  # by tunnel: read with nothing in flight
        self._marked_at = time.monotonic()
        self._heart: threading.Thread | None = None
        # The write end of each guarded remote command's stdin, by its ssh's pid.
        self._stdin_of: dict[int, int] = {}
        self._key = zlib.crc32(run.run_id.encode()) & 0xFFF000 or 0x1000
        run.info["servers"] = {
            s: {"address": self.addresses[s], "ssh_config": self.config, "python": self.python}
            for s in srv.remote_servers(self.servers)
        }
        run.save()

    def connect(self, controller_port: int) -> None:
        """A master and an agent on every remote server; the controller reachable from each."""
        self.controller_addrs[MININET_LOCAL] = f"127.0.0.1:{controller_port}"
        # Beating from the first agent on: the later servers' connects take time.
        self._beating = threading.Event()
        self._heart = threading.Thread(
            target=self._heartbeats, name="agent-heartbeats", daemon=True
        )
        self._heart.start()
        for i, name in enumerate(srv.remote_servers(self.servers)):
            conn = srv.Connection(name, i, self.run, self.config)
            self.conns[name] = conn
            conn.start()
            agent = srv.Agent(conn, self.python)
            self.agents[name] = agent
            self.run.info["servers"][name]["run_id"] = agent.run_id
            self.run.save()
            self.controller_addrs[name] = f"127.0.0.1:{conn.forward_port_here(controller_port)}"

    def _heartbeats(self) -> None:
        """A word to every agent every `remote.HEARTBEAT_S`: an agent that hears none for
        `remote.ORIGIN_SILENCE_S` takes the run for dead (its machine crashed without
        closing the connection) and removes its part."""
        while not self._beating.wait(HEARTBEAT_S):
            for agent in list(self.agents.values()):
                agent.heartbeat()  # logs, never raises: one agent's trouble stops no other's

    def server_ip(self, server: str) -> str:
        """The address of `server` (a Mininet server name) that we connect to."""
        return self.addresses[srv.LOCAL if server == MININET_LOCAL else server]

    def tunnel_address(self, server: str, peer: str) -> str:
        """The address of `server` on the underlay between it and `peer`: its own
        address for a remote server; for this machine, where its route to `peer` leaves."""
        if server == MININET_LOCAL:
            return srv.local_address_towards(self.server_ip(peer))
        return self.server_ip(server)

    def run_on(self, server: str, argv: list[str], check: bool = True) -> dict:
        """`argv` in `server`'s root namespace (a Mininet server name)."""
        if server == MININET_LOCAL:
            res = subprocess.run(argv, capture_output=True, text=True, check=False)
            out = {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr}
            if check and res.returncode != 0:
                raise FabricError(f"{' '.join(argv)}: {res.stderr.strip()}")
            return out
        return self.agents[server].run(argv, check=check)

    def python_on(self, server: str) -> str:
        return sys.executable if server == MININET_LOCAL else self.python

    def path_on(self, server: str, local_path: str) -> str:
        """The run's file `local_path` (in its socket or log directory here) on `server`:
        the same name in the server's part's directory."""
        if server == MININET_LOCAL:
            return local_path
        agent = self.agents[server]
        there = agent.sock_dir if local_path.startswith(self.run.sock_dir) else agent.log_dir
        return os.path.join(there, os.path.basename(local_path))

    def forward_here(self, server: str, local_path: str) -> None:
        if server != MININET_LOCAL:
            self.conns[server].forward_socket(local_path, self.path_on(server, local_path))

    def write_there(self, server: str, local_path: str, text: str) -> str:
        there = self.path_on(server, local_path)
        if server != MININET_LOCAL:
            self.agents[server].call("write", name=os.path.basename(there), text=text)
        return there

    def guarded_popen(self, server: str, argv: list[str], **params) -> subprocess.Popen:
        """Start `argv` on `server` (its root namespace; `mnexec -a PID ...` for a
        node's) over the run's connection, under `python -m emu.remote guard`,
        which ends it when its ssh session ends. Its stdin is a pipe whose write
        end this process holds while the Popen lives (`release_stdin`)."""
        guard = [self.python, "-m", "emu.remote", "guard", "--"]
        cmd = self.conns[server].argv(guard + [str(c) for c in argv])
        held = os.pipe()  # neither end is inherited by other children (PEP 446)
        params.update(stdin=held[0], preexec_fn=os.setpgrp)
        try:
            popen = subprocess.Popen(cmd, **params)
        except BaseException:
            os.close(held[1])
            raise
        finally:
            os.close(held[0])
        # By the Popen's id, not its pid (a pid is reused): the entry goes, by
        # `release_stdin`, before the object and so its id can.
        self._stdin_of[id(popen)] = held[1]
        weakref.finalize(popen, self.release_stdin, id(popen), popen.pid)
        return popen

    def end_input(self, popen: subprocess.Popen) -> bool:
        """End the input of a guarded command (`guarded_popen`): its guard then stops
        it (TERM), it finishes its output (a capture its last packets), and its ssh
        exits. False if `popen` is not one."""
        return self._close_stdin(id(popen))

    def _close_stdin(self, key: int) -> bool:
        fd = self._stdin_of.pop(key, None)
        if fd is None:
            return False
        os.close(fd)
        return True

    def release_stdin(self, key: int, pid: int) -> None:
        """A guarded remote command's Popen is gone: end its input if its ssh has
        ended; if it still runs, keep it until the run closes (a command nobody
        waits for runs on, as a local one would)."""
        if registry.proc_start_time(pid) is None or _zombie(pid):
            self._close_stdin(key)

    def record_interfaces(self, server: str, names: list[str]) -> None:
        """Into the manifest of the server that will hold them, before they are made."""
        if server == MININET_LOCAL:
            self.run.add_interfaces(names)
        else:
            self.agents[server].call("interfaces", names=names)

    def next_key(self) -> int:
        """A tunnel key (VNI) of this run: run-derived, so two runs between the same
        servers do not share one (the cluster edition counts from 1 in every process)."""
        self._key += 1
        return self._key & 0xFFFFFF or 1

    def _read_tunnels(self) -> dict:
        """{(link, end): that tunnel end's stats64}, one `ip -s -j link` per server;
        None for an end that could not be read (its server's agent did not answer)."""
        by_server: dict[str, dict] = {}
        for server in {t[f"server_{e}"] for t in self.tunnels for e in ("a", "b")}:
            try:
                res = self.run_on(server, ["ip", "-s", "-j", "link", "show"], check=False)
                by_server[server] = {
                    d["ifname"]: d.get("stats64") for d in json.loads(res["stdout"])
                }
            except (srv.ServerError, ValueError, KeyError, TypeError) as exc:
                log.warning("tunnel counters on %s not read: %s", server, exc)
                by_server[server] = {}
        return {
            (t["link"], e): by_server[t[f"server_{e}"]].get(t[f"intf_{e}"])
            for t in self.tunnels
            for e in ("a", "b")
        }

    def _quiet_reading(self, timeout_s: float) -> tuple[dict, dict]:
        """Each tunnel's ends' counters at a moment when no frame had entered or left
        that tunnel for `QUIET_S` (two readings at least that far apart agree):
        every frame sent into it by then has had that long to come out. Returns
        (reading, {link: quiet}); a tunnel whose traffic never paused within
        `timeout_s`: its last reading, not quiet."""
        last, last_at = self._read_tunnels(), time.monotonic()
        kept = dict(last)
        quiet = {t["link"]: False for t in self.tunnels}

        def counts(reading: dict, link: str):
            ends = [reading.get((link, e)) for e in ("a", "b")]
            if not all(ends):
                return None
            return [(d["tx"]["packets"], d["rx"]["packets"]) for d in ends]

        def settled() -> bool:
            nonlocal last, last_at
            if time.monotonic() - last_at < QUIET_S:
                return False  # two readings less than QUIET_S apart prove nothing
            now, now_at = self._read_tunnels(), time.monotonic()
            for link in quiet:
                if quiet[link]:
                    continue
                c = counts(now, link)
                if c is not None and c == counts(last, link):
                    quiet[link] = True
                for e in ("a", "b"):
                    kept[link, e] = now[link, e]
            last, last_at = now, now_at
            return all(quiet.values())

        try:
            wait_for(settled, timeout_s, "a pause in each tunnel's traffic", interval_s=QUIET_S)
        except FabricError:
            pass
        return kept, quiet

    def mark_tunnels(self) -> None:
        """Begin the tunnels' window (the fabric's fidelity window): what they carry
        from now is what `tunnel_counters` accounts for."""
        self._baseline, self._baseline_quiet = self._quiet_reading(3.0)
        self._marked_at = time.monotonic()

    def tunnel_counters(self, timeout_s: float = 3.0) -> list[dict]:
        """What crossed each tunnel each way since `mark_tunnels`, by the tunnel
        devices' counters: frames into it (the sending end's tx) and out of it
        (the other end's rx), and the frames lost: their difference, plus what
        either end dropped or got wrong. Judged (`exact`) only where both the
        window's start and its end were read at a quiet moment (`_quiet_reading`),
        with nothing in flight; else `lost` is None: frames in flight cannot be
        told from frames lost. Tunnels a fault took down (`faulted`) are marked."""
        last, quiet = self._quiet_reading(timeout_s)
        window_s = max(time.monotonic() - self._marked_at, 1e-9)
        base = self._baseline or {}
        rows = []
        for t in self.tunnels:
            row = dict(t, faulted=t["link"] in self.faulted)
            exact = quiet[t["link"]] and bool(self._baseline_quiet.get(t["link"]))
            for src, dst in (("a", "b"), ("b", "a")):
                tx, rx = last.get((t["link"], src)), last.get((t["link"], dst))
                b_tx, b_rx = base.get((t["link"], src)), base.get((t["link"], dst))
                if not (tx and rx and b_tx and b_rx):
                    row[f"{src}_to_{dst}"] = None
                    continue
                sent = tx["tx"]["packets"] - b_tx["tx"]["packets"]
                received = rx["rx"]["packets"] - b_rx["rx"]["packets"]
                sent_bytes = tx["tx"]["bytes"] - b_tx["tx"]["bytes"]
                row[f"{src}_to_{dst}"] = {
                    "sent": sent,
                    "received": received,
                    "lost": max(0, sent - received) if exact else None,
                    "exact": exact,
                    "sent_bytes": sent_bytes,
                    # The tunnel's mean rate that way over the window (payload and
                    # inner headers: what the emulated link carried).
                    "mbps": round(sent_bytes * 8 / window_s / 1e6, 3),
                    "window_s": round(window_s, 3),
                    "tx_dropped": tx["tx"]["dropped"] - b_tx["tx"]["dropped"],
                    "tx_errors": tx["tx"]["errors"] - b_tx["tx"]["errors"],
                    "rx_dropped": rx["rx"]["dropped"] - b_rx["rx"]["dropped"],
                    "rx_errors": rx["rx"]["errors"] - b_rx["rx"]["errors"],
                }
            rows.append(row)
        return rows

    def underlay_rtt(self, count: int = 20) -> dict[str, dict]:
        """Round-trip time from this machine to each remote server on the underlay the
        tunnels cross (`ping`, `count` packets 10 ms apart): {server: {"avg_ms", "max_ms"}}."""
        out = {}
        for name in srv.remote_servers(self.servers):
            res = subprocess.run(
                ["ping", "-q", "-n", "-c", str(count), "-i", "0.01", "-s", "1472",
                 "-M", "do", self.addresses[name]],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            found = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", res.stdout)
            out[name] = (
                {"avg_ms": float(found.group(2)), "max_ms": float(found.group(3))}
                if found and res.returncode == 0
                else {"error": (res.stdout + res.stderr).strip().splitlines()[-1:]}
            )
        return out

    def fetch_logs(self, dest: str) -> list[str]:
        """Copy every remote server's logs of this run into dest/<server>/; the paths written."""
        written = []
        for name, agent in self.agents.items():
            try:
                files = agent.call("logs")
                os.makedirs(os.path.join(dest, name), exist_ok=True)
                for f in files:
                    text = agent.call("read", name=f)
                    if text is None:
                        continue
                    path = os.path.join(dest, name, f)
                    with open(path, "w") as out:
                        out.write(text)
                    written.append(path)
            except srv.ServerError as exc:
                log.warning("logs of server %s not fetched: %s", name, exc)
        return written

    def close(self) -> dict:
        """Each agent removes what the run made on its server; then the masters go."""
        removed = {}
        if self._heart is not None:
            self._beating.set()
            self._heart.join()
            self._heart = None
        for name, agent in self.agents.items():
            removed[name] = agent.close()
        self.agents = {}
        for conn in self.conns.values():
            conn.stop()
        self.conns = {}
        for key in list(self._stdin_of):
            self._close_stdin(key)
        return removed


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class EmuRemoteMixin(RemoteMixin):
    """RemoteMixin over the run's SSH master, without sudo, its commands guarded.

    Args (besides the node's own):
        server: the Mininet server name ("localhost": this machine, as a plain node).
        cluster: the run's `ClusterRun`.
    """

    def __init__(self, name, server=MININET_LOCAL, cluster=None, serverIP=None, **kwargs):  # noqa: N803
        # RemoteMixin.__init__ is not called: it builds `sudo -E -u USER ssh ...`
        # and registers ClusterCleanup (mn -c over SSH); the attributes it sets are set here.
        self.server = server or MININET_LOCAL
        self.cluster = cluster
        self.serverIP = serverIP  # noqa: N815 (the cluster edition's name)
        self.user = "root"
        self.controlPath = None  # noqa: N815
        self.splitInit = False  # noqa: N815
        self.isRemote = self.server != MININET_LOCAL  # noqa: N815
        if self.isRemote:
            conn = cluster.conns[self.server]
            self.dest = self.server
            self.sshcmd = conn.ssh(tty=True)
            self.sshcmd_notty = conn.ssh(tty=False)
        else:
            self.dest = None
            self.sshcmd = []
        self.shell, self.pid = None, None
        super(RemoteMixin, self).__init__(name, **kwargs)

    def _popen(self, cmd, sudo=True, tt=True, **params):
        if not self.isRemote:
            return super(RemoteMixin, self)._popen(cmd, **params)
        if isinstance(cmd, str):
            cmd = cmd.split()
        if tt:  # the node's shell: a terminal there, which ends with its session
            cmd = self.sshcmd + cmd
        elif params.get("stdin") not in (None, subprocess.DEVNULL):
            # A command that reads input (Mininet's pexec, stdin=PIPE): its stdin is
            # the caller's, so no guard; it ends when its input does, or it finishes.
            cmd = self.sshcmd_notty + [shlex.join([str(c) for c in cmd])]
        else:
            return self.cluster.guarded_popen(self.server, cmd, **params)
        params.update(preexec_fn=os.setpgrp)
        return super(RemoteMixin, self)._popen(cmd, **params)


class RemoteEmuHost(EmuRemoteMixin, Host):
    """An emu host (a Mininet host) on the server its `server` names."""


class RemoteEmuSwitch(EmuRemoteMixin, EmuSwitch):
    """An emu switch on the server its `server` names; its worker started there by the agent."""

    def __init__(self, name, server=MININET_LOCAL, cluster=None, **params):
        params["controller_addrs"] = (cluster.controller_addrs[server or MININET_LOCAL],)
        super().__init__(name, server=server, cluster=cluster, **params)
        if self.isRemote:
            agent = cluster.agents[self.server]
            self.worker_mgmt_path = os.path.join(agent.sock_dir, f"{name}.sock")
            self.worker_log_dir = agent.log_dir
            self.worker_python = cluster.python
            # Where its log is copied as the run closes (the server's copy goes then).
            self.log_path = os.path.join(self.run.log_dir, self.server, f"{name}.log")

    def prepare_ports(self, ports: list[str]) -> None:
        if not self.isRemote:
            return super().prepare_ports(ports)
        agent = self.cluster.agents[self.server]
        # As disable_ipv6 does here: a port without an IPv6 entry has none to turn off.
        script = (
            "set --; for p in " + " ".join(ports) + "; do [ -e /proc/sys/net/ipv6/conf/$p ] && "
        )
        script += (
            'set -- "$@" net.ipv6.conf.$p.disable_ipv6=1; done; [ $# -eq 0 ] || sysctl -qw "$@"'
        )
        res = agent.run(["sh", "-c", script], check=False)
        if res["rc"] != 0:
            raise RuntimeError(f"disabling IPv6 on {', '.join(ports)}: {res['stderr'].strip()}")
        for p in ports:
            disable_offloads(p, run_in=lambda argv: agent.run(argv, check=False)["rc"])

    def spawn_process(self, argv: list[str], log_path: str, role: str):
        if not self.isRemote:
            return super().spawn_process(argv, log_path, role)
        agent = self.cluster.agents[self.server]
        remote_log = os.path.join(agent.log_dir, os.path.basename(log_path))
        pid = agent.call("spawn", argv=argv, log=remote_log, role=role)["pid"]
        return srv.RemoteProcess(agent, pid, role)

    def switch_started(self) -> None:
        """Forward the worker's management socket here, once it is spawned."""
        if self.isRemote:
            self.cluster.conns[self.server].forward_socket(self.mgmt_path, self.worker_mgmt_path)

    def sockets_closed(self) -> bool:
        if not self.isRemote:
            return super().sockets_closed()
        try:
            self.call("info", timeout_s=0.5)
        except Exception:  # noqa: BLE001 - any failure: the switch no longer answers
            return True
        return False

    @classmethod
    def batchStartup(cls, switches) -> list:  # noqa: N802 (Mininet's API)
        """Each server's switches share that server's processes, never another's."""
        by_server: dict[str, list] = {}
        for sw in switches:
            by_server.setdefault(sw.server, []).append(sw)
        for group in by_server.values():
            EmuSwitch.batchStartup.__func__(cls, group)
        return list(switches)


class EmuTunnelLink(RemoteGRELink):
    """A link inside a server is a veth pair; across servers, a tunnel (VXLAN or gretap).

    The tunnel ends are named as the graph's interfaces and stay in their
    server's root namespace (switch ports); they are recorded in that
    server's manifest before they are made.
    """

    def __init__(self, node1, node2, cluster=None, **kwargs):
        self.cluster = cluster
        self.tunnel = None
        super().__init__(node1, node2, **kwargs)

    def makeIntfPair(  # noqa: N802 (Mininet's API)
        self,
        intfname1,
        intfname2,
        addr1=None,
        addr2=None,
        node1=None,
        node2=None,
        deleteIntfs=True,  # noqa: N803
    ):
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        s1 = getattr(node1, "server", MININET_LOCAL)
        s2 = getattr(node2, "server", MININET_LOCAL)
        if s1 == s2:  # without the cluster edition's MTU 1450
            return Link.makeIntfPair(
                intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=False
            )
        self.makeTunnel(node1, node2, intfname1, intfname2, addr1, addr2)
        self.tunnel = 1
        return None

    def makeTunnel(self, node1, node2, intfname1, intfname2, addr1=None, addr2=None):  # noqa: N802
        for node in (node1, node2):
            if not isinstance(node, EmuSwitch):
                raise FabricError(
                    f"link {node1.name}-{node2.name} crosses servers at host {node.name}: "
                    "a host runs on its switch's server (emu.placement keeps them together)"
                )
        c = self.cluster
        key = c.next_key()
        kind = c.tunnel_kind
        ends = [(node1, intfname1, addr1, node2), (node2, intfname2, addr2, node1)]
        for node, intf, addr, peer in ends:
            c.record_interfaces(node.server, [intf])
            here = c.tunnel_address(node.server, peer.server)
            there = c.tunnel_address(peer.server, node.server)
            c.run_on(node.server, tunnel_argv(kind, intf, key, here, there))
            link_set = ["ip", "link", "set", "dev", intf, "mtu", str(TUNNEL_MTU)]
            if addr:
                link_set += ["address", addr]
            c.run_on(node.server, link_set)
            # No IPv6 before it is up: the kernel's own MLD report and router
            # solicitation would go into a tunnel whose far end may not exist yet.
            c.run_on(
                node.server, ["sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1"], check=False
            )
        for node, intf, _, _ in ends:
            c.run_on(node.server, ["ip", "link", "set", "dev", intf, "up"])
        c.tunnels.append(
            {
                "kind": kind,
                "key": key,
                "server_a": node1.server,
                "intf_a": intfname1,
                "server_b": node2.server,
                "intf_b": intfname2,
                "link": f"{node1.name}-{node2.name}",
            }
        )

    def stop(self):
        if self.tunnel:  # each end in its server's root namespace
            for intf in (self.intf1, self.intf2):
                try:
                    self.cluster.run_on(
                        intf.node.server, ["ip", "link", "del", intf.name], check=False
                    )
                except srv.ServerError as exc:  # its agent's teardown removes it
                    log.warning("tunnel end %s not deleted now: %s", intf.name, exc)
            self.tunnel = None
        else:
            Link.stop(self)


class EmuCluster(MininetCluster):
    """MininetCluster with emu's classes, its placement and servers given.

    Its `__init__` is not MininetCluster's: that one runs `precheck` (sudo over
    ssh, `sys.exit(1)` on failure; emu.servers.preflight ran before anything
    started), looks servers up with getent (emu passes their addresses) and
    makes ~/.ssh/mn, which nothing uses and nothing would remove. Its
    `placeNodes` and `buildFromTopo` are the edition's own.
    """

    def __init__(self, *args, servers, serverIP, placement, **kwargs):  # noqa: N803
        self.servers = list(servers)
        self.serverIP = dict(serverIP)  # noqa: N815 (the edition's names)
        self.user = "root"
        self.connections = {}
        self.placement = placement
        Mininet.__init__(self, *args, **kwargs)
