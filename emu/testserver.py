"""A second server on this machine, for the tests and benches of a fabric over servers.

Owns `LoopServer`: a network namespace with its own address on a veth
underlay, its own sshd (Debian's openssh-server) with a host key and a login
key made for it, and an ssh_config that names it. emu reaches it exactly as
it reaches a real server: through ssh, its preflight, its agent and its
tunnels (issue 32; docs/cluster.md). Its sessions see a private /run/emu, so
the "server" keeps its own run registry; the kernel, the clock, the
filesystem (emu's installation among it) and the pid namespace are shared.

Everything it makes (the namespace, the veth, the directory of keys, the
sshd) is recorded in a run manifest before it is made, so `emu clean`
removes what a killed test left. The underlay's MTU is 1600, as MaxiNet
sets it: a VXLAN tunnel carries a 1514-byte frame in 1550 bytes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from emu.registry import FabricError, Run, stop_child, wait_for

SSHD = "/usr/sbin/sshd"  # Debian's openssh-server; sshd must be started by absolute path
UNDERLAY_MTU = 1600
BASE_DIR = Path("/run/emu-servers")  # outside /tmp, outside /run/emu: both sides see it


def _free_subnet() -> int:
    """n of a 10.254.n.0/30 no interface here uses."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for n in range(1, 250):
        if f"10.254.{n}." not in used:
            return n
    raise FabricError("no free 10.254.n.0/30 for a loop server")


class LoopServer:
    """A server named `name` (for ssh, through `ssh_config`) inside this machine.

    Use as a context manager; `env()` is what emu needs to reach it
    (`EMU_SSH_CONFIG`). Needs root and /usr/sbin/sshd (scripts/bootstrap
    installs openssh-server).
    """

    def __init__(self, name: str = "second", max_sessions: int = 1000) -> None:
        if not os.path.exists(SSHD):
            raise FabricError(f"{SSHD} is missing: install openssh-server (scripts/bootstrap)")
        self.name = name
        self.max_sessions = max_sessions
        self.run: Run | None = None
        self.sshd: subprocess.Popen | None = None

    def __enter__(self) -> LoopServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.run = Run.create(label="loopserver")
        self.run.info["made_by"] = "emu.testserver.LoopServer"
        suffix = self.run.run_id[-6:]
        self.netns = f"emu-srv-{suffix}"
        self.veth = f"emu-u{suffix}"
        self.dir = BASE_DIR / self.run.run_id
        n = _free_subnet()
        self.address = f"10.254.{n}.2"
        self.local_address = f"10.254.{n}.1"
        self.run.add_namespaces([self.netns])
        self.run.add_interfaces([self.veth])
        self.run.paths.append(str(self.dir))
        self.run.save()
        self.dir.mkdir(parents=True)
        self._keys()
        sh = ["sh", "-e", "-c"]
        self._ip("netns", "add", self.netns)
        self._ip(
            "link", "add", self.veth, "mtu", str(UNDERLAY_MTU), "type", "veth",
            "peer", "name", "eth0", "mtu", str(UNDERLAY_MTU), "netns", self.netns,
        )  # fmt: skip
        self._ip("addr", "add", f"{self.local_address}/30", "dev", self.veth)
        self._ip("link", "set", self.veth, "up")
        self._ip("-n", self.netns, "addr", "add", f"{self.address}/30", "dev", "eth0")
        self._ip("-n", self.netns, "link", "set", "eth0", "up")
        self._ip("-n", self.netns, "link", "set", "lo", "up")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        Path("/run/emu").mkdir(exist_ok=True)
        # A private /run/emu for the server's sessions: its own run registry.
        script = (
            f"mount -t tmpfs emu-server /run/emu && exec {SSHD} -D -e -f {self.dir}/sshd_config"
        )
        argv = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--propagation", "private"]
        log_path = self.dir / "sshd.log"
        with open(log_path, "ab") as logf:
            self.sshd = subprocess.Popen(
                argv + sh + [script],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
            )
        self.run.add_pid(self.sshd.pid, f"sshd of loop server {self.name}")

        def answers() -> bool:
            if self.sshd.poll() is not None:
                raise FabricError(f"the loop server's sshd exited; see {log_path}")
            res = subprocess.run(
                ["ssh", "-F", self.ssh_config, self.name, "true"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            return res.returncode == 0

        wait_for(answers, 20.0, f"loop server {self.name} to accept ssh", logs=str(log_path))

    def _ip(self, *args: str) -> None:
        res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise FabricError(f"ip {' '.join(args)}: {res.stderr.strip()}")

    def _keys(self) -> None:
        d = self.dir
        for key in ("id", "hostkey"):
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"emu-{key}",
                    "-f",
                    str(d / key),
                ],
                check=True,
            )
        shutil.copy(d / "id.pub", d / "authorized_keys")
        (d / "known_hosts").write_text(f"{self.address} {(d / 'hostkey.pub').read_text()}")
        (d / "sshd_config").write_text(
            f"ListenAddress {self.address}\n"
            f"HostKey {d}/hostkey\n"
            f"AuthorizedKeysFile {d}/authorized_keys\n"
            f"PidFile {d}/sshd.pid\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "UseDNS no\n"
            # One session for each node of the fabric there, and a few more.
            f"MaxSessions {self.max_sessions}\n"
            "MaxStartups 200\n"
            "AllowTcpForwarding yes\n"
            "AllowStreamLocalForwarding yes\n"
            "StreamLocalBindUnlink yes\n"
        )
        self.ssh_config = str(d / "ssh_config")
        Path(self.ssh_config).write_text(
            f"Host {self.name}\n"
            f"  HostName {self.address}\n"
            "  User root\n"
            f"  IdentityFile {d}/id\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {d}/known_hosts\n"
            "  StrictHostKeyChecking yes\n"
        )

    def env(self) -> dict[str, str]:
        """The environment under which emu reaches this server by its name."""
        return {"EMU_SSH_CONFIG": self.ssh_config}

    def ssh(self, command: str, check: bool = True, timeout_s: float = 30.0) -> str:
        """Run `command` on the server (its shell); its stdout."""
        res = subprocess.run(
            ["ssh", "-F", self.ssh_config, self.name, command],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if check and res.returncode != 0:
            raise FabricError(f"on {self.name}: {command}: {res.stderr.strip()}")
        return res.stdout

    def leftovers(self) -> dict:
        """What runs left on the server, read from this machine (no ssh session of its
        own): its run manifests, its interfaces besides lo and the underlay, and the
        processes under its sshd besides sshd's own."""
        root = f"/proc/{self.sshd.pid}/root/run/emu/runs" if self.sshd else None
        runs = sorted(os.listdir(root)) if root and os.path.isdir(root) else []
        links = subprocess.run(
            ["ip", "-n", self.netns, "-o", "link", "show"], capture_output=True, text=True
        ).stdout
        intfs = [
            line.split(":")[1].strip().split("@")[0]
            for line in links.splitlines()
            if line.count(":") >= 2
        ]
        return {
            "runs": runs,
            "interfaces": sorted(i for i in intfs if i not in ("lo", "eth0")),
            "processes": self.processes(),
        }

    def processes(self) -> list[str]:
        """'pid args' of every process under the sshd that is not an sshd itself."""
        if self.sshd is None:
            return []
        ps = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
        children: dict[int, list[int]] = {}
        args = {}
        for line in ps.stdout.splitlines():
            pid, ppid, cmd = line.split(None, 2) if len(line.split(None, 2)) == 3 else (0, 0, "")
            children.setdefault(int(ppid), []).append(int(pid))
            args[int(pid)] = cmd
        out, todo = [], list(children.get(self.sshd.pid, []))
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            if not args[pid].startswith("sshd"):
                out.append(f"{pid} {args[pid]}")
        return sorted(out)

    def stop_sshd(self) -> None:
        """The server stops answering ssh (its address stays)."""
        if self.sshd is not None:
            stop_child(self.sshd)
            self.run.forget_pid(self.sshd.pid)
            self.sshd = None

    def close(self) -> None:
        """Remove the namespace, the veth, the keys, and end the sshd (and its sessions)."""
        if self.run is None:
            return
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.send_signal(signal.SIGTERM)
        self.run.teardown()
        if self.sshd is not None:
            self.sshd.wait()
        self.run = None
