"""The run registry: what a run created, so that exactly that is removed.

Owns the manifest of every run (`/run/emu/runs/<run_id>.json`), a fabric's or
a bench's: the pid and start time of the process that owns the run, and every
process, interface, named namespace, socket and directory the run creates,
recorded *before* creation where the name is known in advance (interfaces,
namespaces) and right after spawning for pids.
`clean_dead_runs()` (used by `emu clean` and at the start of every run)
removes what dead runs listed and nothing else: a pid is only signalled when
its start time still matches the recorded one, so a reused pid is never hit.
Nothing here ends processes by name.

Also the one home of process hygiene (DESIGN.md, "Processes and cleanup"),
used by emu.net, emu.switch.node, the switch and NIC agent processes,
controllers/launch.py and the benches: `wait_for` (every wait has a timeout
and, on expiry, names what it waited for and where the logs are),
`free_tcp_port`, `die_with_parent`, `stop_on_signals`, `signals_held` and
`stop_child`; and
`FabricError`, what a failed wait raises (emu.net re-exports it). It imports
nothing of emu, so that any process, a controller included, may use it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

REGISTRY_DIR = Path(os.environ.get("EMU_REGISTRY_DIR", "/run/emu"))
# Scenarios drive hosts from several threads; one writer at a time.
_LOCK = threading.Lock()
TERM_GRACE_S = 3.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_TIMERSLACK = 29
PR_GET_TIMERSLACK = 30
PR_SET_THP_DISABLE = 41
PR_GET_THP_DISABLE = 42
# What stops emu (DESIGN.md, "SIGINT, SIGTERM and SIGHUP tear down within a bound").
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class FabricError(RuntimeError):
    """The fabric could not be brought up or driven; the message names what and where.

    Raised by `wait_for` when a wait times out and by emu.net for everything
    else that goes wrong on a running fabric (emu.net re-exports it; it is the
    same class). A bad topology or parameter is `emu.fabric.FabricSpecError`.
    """


def wait_for(
    condition: Callable[[], Any],
    timeout_s: float,
    what: str,
    interval_s: float = 0.1,
    logs: str = "",
) -> Any:
    """Poll `condition()` until it returns a truthy value, and return that value.

    Args:
        condition: called every `interval_s`; it may raise to end the wait early
            (a process it waits on has exited, say).
        timeout_s: how long to wait.
        what: what is waited for, as the message says it ("the controller to
            listen on 127.0.0.1:6653").
        interval_s: the time between two calls.
        logs: where the logs are, named in the message.

    Raises:
        FabricError: `timeout_s` passed; the message names `what` and `logs`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            where = f"; logs in {logs}" if logs else ""
            raise FabricError(f"timed out after {timeout_s:.0f} s waiting for {what}{where}")
        time.sleep(interval_s)


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def proc_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def same_process(pid: int, start_time: int | None) -> bool:
    """True if `pid` is alive and is the process that was recorded."""
    return start_time is not None and proc_start_time(pid) == start_time


def stop_pids(entries: list[dict], grace_s: float = TERM_GRACE_S) -> list[int]:
    """TERM, then KILL after `grace_s`, each recorded process still alive; returns those hit."""
    alive = [e for e in entries if same_process(e["pid"], e.get("start_time"))]
    for e in alive:
        # An interactive shell (Mininet's node shell) ignores TERM; its entry says HUP.
        _signal(e, e.get("sig", signal.SIGTERM))
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(same_process(e["pid"], e.get("start_time")) for e in alive):
            break
        time.sleep(0.05)
    for e in alive:
        if same_process(e["pid"], e.get("start_time")):
            _signal(e, signal.SIGKILL)
    for e in alive:
        try:  # reap our own children so that they do not linger as zombies
            os.waitpid(e["pid"], os.WNOHANG)
        except ChildProcessError:
            pass
    return [e["pid"] for e in alive]


def _signal(entry: dict, sig: int) -> None:
    try:
        if entry.get("group"):
            os.killpg(entry["pid"], sig)
        else:
            os.kill(entry["pid"], sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_child(proc: subprocess.Popen, grace_s: float = TERM_GRACE_S) -> None:
    """Stop a child we started: TERM, then KILL after `grace_s`; always reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _prctl(option: int, arg: int) -> int:
    """prctl(2) with one argument; -1 where it fails or there is no libc to ask."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0))
    except (OSError, AttributeError):
        return -1


def set_timer_slack_ns(ns: int) -> bool:
    """Let this thread's sleeps end at most `ns` late (PR_SET_TIMERSLACK; the kernel's
    default is 50 µs, which it uses to batch wake-ups). False where refused."""
    return _prctl(PR_SET_TIMERSLACK, int(ns)) == 0


def timer_slack_ns() -> int:
    """This thread's timer slack (PR_GET_TIMERSLACK), in ns; -1 where unknown."""
    return _prctl(PR_GET_TIMERSLACK, 0)


def disable_huge_pages() -> bool:
    """Give this process 4 KB pages only, whatever madvise(MADV_HUGEPAGE) asks
    (PR_SET_THP_DISABLE, Linux 3.15; inherited by children). False where refused."""
    return _prctl(PR_SET_THP_DISABLE, 1) == 0


def huge_pages_disabled() -> bool:
    """Whether PR_SET_THP_DISABLE is set for this process."""
    return _prctl(PR_GET_THP_DISABLE, 0) == 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits (PR_SET_PDEATHSIG).

    Children must not outlive emu (DESIGN.md). Call it first thing in a child
    process, or as a `subprocess.Popen` `preexec_fn`. The signal follows the
    parent *thread*: a child spawned from a thread dies when that thread ends.
    A parent that died before the request took effect ends this process at once.
    """
    parent = os.getppid()
    if _prctl(PR_SET_PDEATHSIG, sig) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def stop_on_signals(loop) -> None:
    """TERM, INT and HUP set `loop.stopping`: an event loop (switch, NIC agent) ends cleanly."""

    def stop(signum, frame):
        loop.stopping = True

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)


@contextmanager
def signals_held() -> Iterator[list[int]]:
    """Hold TERM, INT and HUP while the block runs; then deliver the first that came.

    A teardown that a signal cuts short leaves a fabric's interfaces and its
    manifest behind until `emu clean` (emu turns these signals into
    KeyboardInterrupt, which would leave the teardown wherever it was). A signal
    lands in a teardown when it arrives as a run ends, or is the second of two:
    emu reproduce's one SIGTERM after the one a service manager sent every
    process, a second Ctrl-C. So a teardown runs under this: such a signal is
    noted, the block finishes, and the signal then goes to the handler that was
    in place before, as if it had arrived just now. Yields the signals held so
    far (a block may cut a wait short when one comes). Python runs handlers in
    the main thread only: a block in another thread is never interrupted, and
    runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)

    # None: a handler set outside Python, which could not be put back; leave it.
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS if signal.getsignal(s) is not None}
    before = _set_handlers(dict.fromkeys(previous, hold))
    try:
        yield held
    finally:
        after = _set_handlers(previous)
        if before is not None or after is not None:
            raise before or after
        if held:
            signal.raise_signal(held[0])


def _set_handlers(handlers: dict) -> BaseException | None:
    """Set every handler; what a handler raised meanwhile is returned, not raised.

    A signal that comes while they are being set may run a handler at once (and
    emu's raise KeyboardInterrupt): the rest must still be set, and the caller
    raises the exception when its block is done.
    """
    raised: BaseException | None = None
    for sig, handler in handlers.items():
        while True:
            try:
                signal.signal(sig, handler)
                break
            except BaseException as exc:  # noqa: BLE001 - the caller raises it
                raised = raised or exc
    return raised


def interface_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def delete_interface(name: str) -> bool:
    """Delete one interface of ours (a veth end also takes its peer)."""
    if not interface_exists(name):
        return False
    subprocess.run(["ip", "link", "del", "dev", name], capture_output=True, check=False)
    return True


def delete_namespace(name: str) -> bool:
    """Delete one named network namespace of ours, if it exists."""
    if not os.path.exists(f"/run/netns/{name}"):
        return False
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return True


@dataclass
class Run:
    """One run's manifest, written to disk on every change."""

    run_id: str
    owner_pid: int
    owner_start: int | None
    created: float
    log_dir: str
    sock_dir: str
    pids: list = field(default_factory=list)
    interfaces: list = field(default_factory=list)
    # Named network namespaces (`ip netns`): the benches' hosts; a fabric's hosts
    # are Mininet shells, recorded as pids.
    namespaces: list = field(default_factory=list)
    paths: list = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def manifest_path(self) -> Path:
        return REGISTRY_DIR / "runs" / f"{self.run_id}.json"

    @classmethod
    def create(cls, log_dir: str | None = None, label: str = "run") -> Run:
        run_id = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        sock_dir = REGISTRY_DIR / run_id
        sock_dir.mkdir(parents=True, exist_ok=True)
        if log_dir is None:
            log_dir = str(Path("/tmp") / f"emu-{run_id}")
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        run = cls(
            run_id,
            os.getpid(),
            proc_start_time(os.getpid()),
            time.time(),
            str(log_dir),
            str(sock_dir),
        )
        run.paths.append(str(sock_dir))
        run.save()
        return run

    def save(self) -> None:
        with _LOCK:
            path = self.manifest_path
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.__dict__, indent=1))
            os.replace(tmp, path)

    def add_pid(self, pid: int, role: str, group: bool = False, sig: int = signal.SIGTERM) -> None:
        entry = {
            "pid": pid,
            "start_time": proc_start_time(pid),
            "role": role,
            "group": group,
            "sig": int(sig),
        }
        with _LOCK:
            self.pids.append(entry)
        self.save()

    def spawn(
        self,
        argv: list[str],
        log_path: str,
        role: str,
        env: dict | None = None,
        dies_with_parent: bool = False,
    ) -> subprocess.Popen:
        """Start `argv` with stdout and stderr appended to `log_path`; its pid recorded as `role`.

        The one way emu starts a long-lived child (switches, the controller, a
        testbed's switch): no terminal input, no inherited descriptors, and in
        the manifest before anyone can miss it. `dies_with_parent` for programs
        that do not ask for it themselves (Open vSwitch's daemons; emu's own
        processes call `die_with_parent` first thing).
        """
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(
                argv,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                close_fds=True,
                env=env,
                preexec_fn=die_with_parent if dies_with_parent else None,
            )
        self.add_pid(proc.pid, role)
        return proc

    def forget_pid(self, pid: int) -> None:
        """Drop a process that has ended and been reaped (keeps the manifest short)."""
        with _LOCK:
            self.pids = [e for e in self.pids if e["pid"] != pid]
        self.save()

    def add_interfaces(self, names: list[str]) -> None:
        with _LOCK:
            self.interfaces.extend(n for n in names if n not in self.interfaces)
        self.save()

    def add_namespaces(self, names: list[str]) -> None:
        """Record named network namespaces, before they are made."""
        with _LOCK:
            self.namespaces.extend(n for n in names if n not in self.namespaces)
        self.save()

    def teardown(self) -> dict:
        """Stop every recorded process, delete every recorded namespace, interface and path.

        A stop signal that arrives meanwhile waits until this is done (`signals_held`).
        """
        with signals_held():
            # Newest first: scenario workloads, then switches, then host shells.
            stopped = stop_pids(list(reversed(self.pids)))
            for name in self.namespaces:  # takes the interfaces inside with it
                delete_namespace(name)
            deleted = [name for name in self.interfaces if delete_interface(name)]
            for path in self.paths:
                shutil.rmtree(path, ignore_errors=True)
            try:
                self.manifest_path.unlink()
            except FileNotFoundError:
                pass
        return {"run": self.run_id, "stopped_pids": stopped, "deleted_interfaces": deleted}


def load_runs() -> list[Run]:
    runs = []
    for path in sorted((REGISTRY_DIR / "runs").glob("*.json")):
        try:
            runs.append(Run(**json.loads(path.read_text())))
        except (ValueError, TypeError) as exc:
            log.warning("unreadable manifest %s: %s", path, exc)
    return runs


def live_runs() -> list[Run]:
    """Runs whose owner process is still alive."""
    return [r for r in load_runs() if same_process(r.owner_pid, r.owner_start)]


def clean_dead_runs() -> list[dict]:
    """Remove what runs whose owner died (crash, SIGKILL) left behind."""
    return [r.teardown() for r in load_runs() if not same_process(r.owner_pid, r.owner_start)]
