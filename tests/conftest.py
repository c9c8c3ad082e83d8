"""Shared test fixtures: root gating and the leak check.

Integration and scenario tests build real namespaces and need root; they are
skipped, with the reason, for a non-root run. Every such test is followed by
a check that nothing of ours is left: no emu run in the registry, no
interface named like a fabric port, no process whose command line is an emu
switch or controller.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from emu import registry

IS_ROOT = os.geteuid() == 0
FABRIC_INTF = re.compile(r"^(h|leaf|spine|e|a|c|s)\d+-eth\d+$")


def leftovers() -> dict:
    """What looks like ours on the machine now."""
    intfs = [n for n in os.listdir("/sys/class/net") if FABRIC_INTF.match(n)]
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    procs = [line.strip() for line in ps.splitlines()
             if "emu.switch.datapath" in line or "controllers.launch" in line]
    runs = [r.run_id for r in registry.load_runs()]
    return {"interfaces": intfs, "processes": procs, "runs": runs}


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves interfaces, processes or registry entries behind."""
    registry.clean_dead_runs()  # what an earlier, killed session left is not this test's leak
    before = leftovers()
    assert not any(before.values()), f"machine not clean before the test: {before}"
    yield
    after = leftovers()
    assert not any(after.values()), f"left behind: {after}"


def _interrupt(signum, frame):
    # CI or a user stopping pytest with TERM/HUP: unwind like Ctrl-C so that
    # every Fabric fixture tears its fabric down.
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: builds network namespaces")
    for item in items:
        path = str(item.fspath)
        if "/integration/" in path or "/scenarios/" in path:
            item.add_marker(pytest.mark.root)
            if not IS_ROOT:
                item.add_marker(skip)
