"""What emu runs on a server that holds part of a fabric (issue 32; docs/cluster.md).

Three commands, each started over SSH by emu.servers on the machine that runs
the fabric (its "origin"):

- ``python -m emu.remote preflight`` prints one JSON line: this server's emu
  version, whether it is root, whether ``mnexec`` is on its PATH and which
  tunnel kinds its kernel makes. emu.servers reads it before anything starts.
- ``python -m emu.remote serve --origin RUN`` is the server's agent for one
  run: it owns the server's run manifest (emu.registry, on this server's own
  /run/emu), starts the switch workers it is asked for, records their pids,
  makes the tunnel ends and runs the root-namespace commands of that part of
  the fabric. Requests and answers are JSON lines on stdin and stdout. When
  its stdin ends (the run closed it, the run died and its SSH connection with
  it), it removes everything its manifest lists and exits: nothing the run
  made on this server outlives the run's connection.
- ``python -m emu.remote guard -- ARGV`` runs ARGV (a command in a host's
  namespace, started by a remote node's ``popen``) and ends it when its own
  stdin ends. sshd does not signal a command without a terminal when the
  connection that started it goes; the guard does.

Imports only the standard library and emu.registry at start: the guard
starts once for each command a remote host runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

# Kinds of tunnel emu makes between servers, in the order it prefers them:
# VXLAN (UDP, so an underlay's ECMP spreads tunnels) and gretap (Mininet's
# cluster edition's RemoteGRELink). A kernel without one lacks its module.
TUNNEL_KINDS = ("vxlan", "gretap")
VXLAN_PORT = 4789
# How long an agent waits for a word from its run (the run sends one every
# `HEARTBEAT_S`) before it takes the run for dead and removes its part.
ORIGIN_SILENCE_S = 60.0
HEARTBEAT_S = 5.0


def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("emu")
    except metadata.PackageNotFoundError:
        return "unknown"


def source_fingerprint(suffixes=(".py",), root: str | None = None) -> str | None:
    """A hash of emu's own files here that end in `suffixes`: two servers run the
    same emu only if theirs match (setup.cfg's version is the same for every
    commit). Python files by default, which every installation has; the C
    sources (".c", ".h") only a checkout has (None without any)."""
    import hashlib

    root = root or os.path.dirname(os.path.abspath(__file__))
    digest, found = hashlib.sha256(), False
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(suffixes) or name.startswith(".#"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    text = f.read()
            except OSError:
                continue  # an editor's lock file, a file going away
            digest.update(os.path.relpath(path, root).encode() + b"\0" + text)
            found = True
    return digest.hexdigest()[:12] if found else None


def tunnel_argv(kind: str, name: str, key: int, local_ip: str, remote_ip: str) -> list[str]:
    """`ip link add` of one end of a tunnel between two servers.

    Raises:
        ValueError: an unknown kind, or a key a tunnel header cannot carry (24 bits).
    """
    if not 0 < key < 1 << 24:
        raise ValueError(f"tunnel key {key}: expected 1..{(1 << 24) - 1}")
    if kind == "vxlan":
        return [
            "ip", "link", "add", name, "type", "vxlan", "id", str(key),
            "local", local_ip, "remote", remote_ip, "dstport", str(VXLAN_PORT), "nolearning",
        ]  # fmt: skip
    if kind == "gretap":
        return [
            "ip", "link", "add", name, "type", "gretap",
            "local", local_ip, "remote", remote_ip, "ttl", "64", "key", str(key),
        ]  # fmt: skip
    raise ValueError(f"tunnel kind {kind!r}: expected one of {', '.join(TUNNEL_KINDS)}")


def tunnel_kinds_here(kinds=TUNNEL_KINDS) -> list[str]:
    """The first of `kinds` this kernel makes, tried on a throw-away device ([] if
    none): not every kind, since trying gretap loads ip_gre, whose fallback
    devices gre0, gretap0 and erspan0 then stay in every namespace."""
    import uuid

    for kind in kinds:
        name = f"emuprobe{uuid.uuid4().hex[:6]}"
        argv = tunnel_argv(kind, name, 1, "127.0.0.1", "127.0.0.2")
        if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            return [kind]
    return []


def ipv4_addresses() -> list[str]:
    """This server's IPv4 addresses (`ip -o -4 addr`)."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=False)
    return [
        line.split()[3].split("/")[0] for line in out.stdout.splitlines() if len(line.split()) > 3
    ]


def sshd_config_of_session() -> str | None:
    """The config file of the sshd that serves this session: the `-f` of the
    listening sshd among this process's ancestors, else sshd's default."""
    pid = os.getppid()
    for _ in range(16):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = b" ".join(f.read().split(b"\0")).decode(errors="replace").split()
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        # The listener retitles itself "sshd: /usr/sbin/sshd -D -f FILE [listener] ...".
        if words and os.path.basename(words[0]) in ("sshd", "sshd:"):
            if "-f" in words[:-1]:
                return words[words.index("-f") + 1]
            if "[listener]" in words or os.path.basename(words[0]) == "sshd":
                return "/etc/ssh/sshd_config"
        if ppid <= 1:
            return None
        pid = ppid
    return None


def max_sessions() -> int | None:
    """How many sessions this server's sshd allows on one connection (MaxSessions,
    `sshd -T`): every node of a fabric there is one session of the run's connection."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    config = sshd_config_of_session()
    if config is None or not os.path.exists(sshd):
        return None
    res = subprocess.run([sshd, "-T", "-f", config], capture_output=True, text=True, check=False)
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "maxsessions" and value.strip().isdigit():
            return int(value)
    return None


def preflight() -> dict:
    return {
        "version": package_version(),
        "python": sys.executable,
        "root": os.geteuid() == 0,
        "mnexec": shutil.which("mnexec") is not None,
        "tunnels": tunnel_kinds_here() if os.geteuid() == 0 else [],
        "max_sessions": max_sessions() if os.geteuid() == 0 else None,
        "source": source_fingerprint(),
        "c_source": source_fingerprint((".c", ".h")),
        "addresses": ipv4_addresses(),
    }


class Agent:
    """One run's part on this server: its manifest, its processes, its tunnel ends."""

    def __init__(self, origin: str) -> None:
        from emu import registry

        self.registry = registry
        registry.clean_dead_runs()  # what an earlier run's agent could not remove
        self.run = registry.Run.create(label="part")
        self.run.info["origin_run"] = origin
        self.run.info["made_by"] = "emu.remote serve"
        # The logs go with the run: the origin copies them first (emu.cluster.ClusterRun).
        self.run.paths.append(self.run.log_dir)
        self.run.save()
        self.procs: dict[int, subprocess.Popen] = {}

    def hello(self) -> dict:
        return {
            "run_id": self.run.run_id,
            "sock_dir": self.run.sock_dir,
            "log_dir": self.run.log_dir,
            "version": package_version(),
            "python": sys.executable,
        }

    def handle(self, req: dict):
        op = req.get("op")
        if op == "spawn":
            proc = self.run.spawn(list(req["argv"]), req["log"], str(req["role"]))
            self.procs[proc.pid] = proc
            return {"pid": proc.pid}
        if op == "poll":
            proc = self.procs.get(int(req["pid"]))
            return None if proc is None else proc.poll()
        if op == "signal":
            proc = self.procs.get(int(req["pid"]))
            if proc is not None and proc.poll() is None:
                proc.send_signal(int(req["sig"]))
            return None
        if op == "reap":  # the process has ended: forget it
            proc = self.procs.pop(int(req["pid"]), None)
            if proc is not None:
                proc.wait()
                self.run.forget_pid(proc.pid)
            return None
        if op == "interfaces":  # recorded before they are made
            self.run.add_interfaces(list(req["names"]))
            return None
        if op == "run":
            res = subprocess.run(
                list(req["argv"]),
                stdin=subprocess.DEVNULL,  # the agent's stdin is the run's requests
                capture_output=True,
                text=True,
                timeout=float(req.get("limit_s", 30.0)),
                check=False,
            )
            return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr}
        if op == "machine":
            from dataclasses import asdict

            from emu import fidelity

            return asdict(fidelity.machine_sample())
        if op == "read":  # a log file, for the origin's out directory
            path = os.path.join(self.run.log_dir, os.path.basename(str(req["name"])))
            try:
                with open(path, errors="replace") as f:
                    return f.read()
            except OSError:
                return None
        if op == "ping":
            return "pong"
        if op == "write":  # a file a process here reads (a NIC group's spec)
            path = os.path.join(self.run.log_dir, os.path.basename(str(req["name"])))
            with open(path, "w") as f:
                f.write(str(req["text"]))
            return path
        if op == "logs":
            return sorted(os.listdir(self.run.log_dir))
        raise ValueError(f"unknown op {op!r}")

    def teardown(self) -> dict:
        return self.run.teardown()


def serve(origin: str, silence_s: float = 0.0) -> int:
    """Answer requests until stdin ends (or the run has been silent `silence_s`),
    then remove what this run made here."""
    import select

    from emu.registry import die_with_parent

    die_with_parent()  # the sshd session that started it
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the channel
    agent = Agent(origin)
    silence_s = silence_s or ORIGIN_SILENCE_S

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)

    def answer(doc: dict) -> None:
        out.write(json.dumps(doc) + "\n")
        out.flush()

    try:
        answer({"ok": True, "result": agent.hello()})
        buf = b""
        while True:
            # A run whose machine died without closing its connection (a crash, a
            # partition) says nothing more: its heartbeats stop, and the part ends.
            if not select.select([0], [], [], silence_s)[0]:
                print(f"no word from the run in {silence_s:g} s: removing its part", flush=True)
                return 1
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return 0
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                req = {}
                try:
                    req = json.loads(line)
                    if req.get("op") == "teardown":
                        answer({"ok": True, "result": agent.teardown(), "id": req.get("id")})
                        return 0
                    doc = {"ok": True, "result": agent.handle(req)}
                except Exception as exc:  # noqa: BLE001 - every request gets an answer
                    doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                doc["id"] = req.get("id") if isinstance(req, dict) else None
                answer(doc)
    finally:
        agent.teardown()  # idempotent: a second teardown finds nothing


def end_part(origin: str, timeout_s: float = 30.0) -> list[str]:
    """End the agents of `origin`'s parts on this server (their manifests name them,
    by pid and start time), then remove what any of them left; returns the run ids."""
    from emu import registry

    ended = []
    for run in registry.load_runs():
        if run.info.get("origin_run") != origin:
            continue
        if registry.same_process(run.owner_pid, run.owner_start):
            try:
                os.kill(run.owner_pid, signal.SIGTERM)  # the agent tears its part down
            except ProcessLookupError:
                pass  # it ended meanwhile
            try:
                registry.wait_for(
                    lambda r=run: not r.manifest_path.exists(), timeout_s, "the agent's teardown"
                )
            except registry.FabricError:
                pass  # removed below
        if run.manifest_path.exists():
            run.teardown()
        ended.append(run.run_id)
    return ended


def guard(argv: list[str]) -> int:
    """Run `argv` until it exits or stdin ends; then end it (its whole session)."""
    # Not a session or group leader of its own: Mininet's `mnexec -d` forks into the
    # background when it is one (and makes its own session when it is not).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def signal_all(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the command's own session, if it made one
        except (ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)

    def watch_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        if proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, None)):
                try:
                    signal_all(sig)
                except ProcessLookupError:
                    return
                try:
                    proc.wait(timeout=wait_s)
                    return
                except subprocess.TimeoutExpired:
                    continue

    threading.Thread(target=watch_stdin, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: proc.send_signal(signum))
    rc = proc.wait()
    return rc if rc >= 0 else 128 - rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emu.remote", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("preflight")
    s = sub.add_parser("serve")
    s.add_argument("--origin", required=True, help="the run id on the machine that runs the fabric")
    s.add_argument("--silence-s", type=float, default=0.0, help=argparse.SUPPRESS)
    e = sub.add_parser("end", help="end a dead run's part on this server")
    e.add_argument("--origin", required=True)
    pr = sub.add_parser("probe", help="which of these tunnel kinds this kernel makes")
    pr.add_argument("kinds", nargs="+", choices=TUNNEL_KINDS)
    g = sub.add_parser("guard")
    g.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "preflight":
        print(json.dumps(preflight()))
        return 0
    if args.cmd == "serve":
        return serve(args.origin, args.silence_s)
    if args.cmd == "probe":
        print(json.dumps(tunnel_kinds_here(args.kinds)))
        return 0
    if args.cmd == "end":
        ended = end_part(args.origin)
        print(f"ended {len(ended)} part(s) of run {args.origin}: {', '.join(ended) or 'none'}")
        return 0
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("guard: no command")
    return guard(command)


if __name__ == "__main__":
    sys.exit(main())
