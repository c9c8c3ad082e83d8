"""Shared test fixtures: root gating and the leak check.

Integration and scenario tests build real namespaces and need root; they are
skipped, with the reason, for a non-root run. Every such test is followed by
a check that nothing of ours is left: no emu run in the registry, no
interface named like a fabric port, no process whose command line is an emu
switch, controller or NIC agent. The check is autouse for every test under
tests/integration/, tests/scenarios/ and tests/labs/ (`no_leaks` remains for a test
elsewhere that wants it). A fabric that a module-scoped fixture holds is alive
during the module's tests by design: it is left out of each test's check and
checked when the module ends, after its fixture has torn it down.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterable

import pytest

from emu import registry

IS_ROOT = os.geteuid() == 0
# Fabric ports, and the test ends and switch ends of an emu.testbed.
FABRIC_INTF = re.compile(r"^((h|leaf|spine|e|a|c|s)\d+-eth\d+|tb[0-9a-f]{6}[st]\d+)$")
# What a fabric runs: switches, the controller, the hosts' NIC agents.
EMU_PROCESSES = ("emu.switch.worker", "emu.switch.datapath", "controllers.launch", "emu.host.agent")
# Leftovers already reported: each fails the one check that first saw it, not every later one.
_REPORTED: set[tuple[str, str]] = set()


def builds_fabrics(path) -> bool:
    """True for the tests that need root and get the leak check."""
    path = str(path)
    return any(part in path for part in ("/integration/", "/scenarios/", "/labs/"))


def leftovers(held: Iterable[registry.Run] = ()) -> dict:
    """What looks like ours on the machine now, less what the live runs in `held` recorded.

    A run in `held` is a fabric that a fixture still holds open: its manifest,
    its interfaces, and its recorded processes and their children are not
    leftovers (yet).
    """
    held = list(held)
    held_intfs = {name for run in held for name in run.interfaces}
    held_pids = {
        e["pid"]
        for run in held
        for e in run.pids
        if registry.same_process(e["pid"], e.get("start_time"))
    }
    intfs = sorted(
        n for n in os.listdir("/sys/class/net") if FABRIC_INTF.match(n) and n not in held_intfs
    )
    ps = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    parent, args = {}, {}
    for line in ps.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3:
            parent[int(fields[0])], args[int(fields[0])] = int(fields[1]), fields[2]

    def held_by_a_run(pid: int) -> bool:
        # A recorded pid may have started helpers of its own (mnexec, a shell): walk up.
        for _ in range(64):
            if pid in held_pids:
                return True
            if pid not in parent or pid <= 1:
                return False
            pid = parent[pid]
        return False

    procs = [
        f"{pid} {cmd}"
        for pid, cmd in args.items()
        if any(p in cmd for p in EMU_PROCESSES) and not held_by_a_run(pid)
    ]
    held_ids = {run.run_id for run in held}
    runs = [r.run_id for r in registry.load_runs() if r.run_id not in held_ids]
    return {"interfaces": intfs, "processes": procs, "runs": runs}


def _own_live_runs() -> list[registry.Run]:
    """Live runs this pytest process owns: fabrics that fixtures hold open."""
    return [r for r in registry.live_runs() if r.owner_pid == os.getpid()]


class LeakCheck:
    """One scope's check: the fabrics held open when it starts are not its leftovers."""

    def __init__(self) -> None:
        registry.clean_dead_runs()  # what an earlier, killed session left is nobody's leak here
        self.held = {r.run_id for r in _own_live_runs()}

    def report(self, what: str) -> None:
        """Fail, saying `what`, if anything not yet reported is left; end leaked runs of ours."""
        found = leftovers(r for r in _own_live_runs() if r.run_id in self.held)
        present = {(kind, item) for kind, items in found.items() for item in items}
        _REPORTED.intersection_update(present)  # a name that went and came back is news again
        new = {
            kind: [i for i in items if (kind, i) not in _REPORTED] for kind, items in found.items()
        }
        _REPORTED.update(present)
        # A leaked fabric of this process would break every later fabric (its
        # interface names are taken): remove it, by its manifest, once reported.
        for run in _own_live_runs():
            if run.run_id in found["runs"]:
                run.teardown()
        if any(new.values()):
            pytest.fail(f"{what}: {new}", pytrace=False)


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves interfaces, processes or registry entries behind.

    Applied to every test under tests/integration/ and tests/scenarios/ without
    asking; a test elsewhere may request it.
    """
    check = LeakCheck()
    check.report("machine not clean before the test")
    yield
    check.report("left behind")


@pytest.fixture(autouse=True)
def _leak_check_each_test(request):
    # Set up before any function-scoped fabric fixture, so torn down after it.
    if builds_fabrics(request.node.path):
        request.getfixturevalue("no_leaks")


@pytest.fixture(scope="module", autouse=True)
def _leak_check_each_module(request):
    # Autouse comes first among module-scoped fixtures: this ends after a
    # module-scoped fabric has been torn down, and checks that teardown.
    if not builds_fabrics(request.node.path):
        yield
        return
    check = LeakCheck()
    yield
    check.report("left behind when the module's fixtures were torn down")


class _StopOnSignal:
    """CI or a user stopping pytest with TERM or HUP: unwind like Ctrl-C, so that
    every fixture's finalizer tears its fabric down.

    Except while finalizers run: a KeyboardInterrupt raised out of one makes
    pytest skip the finalizers after it on the same node (and a fabric stays
    up), so there the session is asked to stop once they are done. A signal that
    lands in a fabric's own teardown waits for it (registry.signals_held) and
    comes here after it. Only the first signal counts: the teardown it started
    finishes.
    """

    def __init__(self) -> None:
        self.session: pytest.Session | None = None
        self.tearing_down = False
        self.stopping = False

    def __call__(self, signum, frame) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.tearing_down and self.session is not None:
            self.session.shouldstop = f"signal {signum}"
            return
        raise KeyboardInterrupt(f"signal {signum}")


_STOP = _StopOnSignal()


def pytest_configure(config):
    signal.signal(signal.SIGTERM, _STOP)
    signal.signal(signal.SIGHUP, _STOP)


def pytest_sessionstart(session):
    _STOP.session = session


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    _STOP.tearing_down = True
    try:
        return (yield)
    finally:
        _STOP.tearing_down = False


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session):
    _STOP.tearing_down = True  # what is still set up is torn down here
    return (yield)


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: builds network namespaces")
    for item in items:
        if builds_fabrics(item.fspath):
            item.add_marker(pytest.mark.root)
            if not IS_ROOT:
                item.add_marker(skip)
