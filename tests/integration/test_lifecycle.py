"""Nothing leaks: after a normal run, a failed run, and a SIGKILLed run + `emu clean`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from emu import fabric, registry
from emu.net import Fabric, wait_for

from ..conftest import leftovers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def small():
    return fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)


def test_normal_run_leaves_nothing(no_leaks, tmp_path):
    with Fabric(small(), out_dir=str(tmp_path)) as fab:
        assert fab.ping("h1", "h2") == (1, 1)
        pids = [p["pid"] for p in fab.run.pids]
        assert all(registry.proc_start_time(p) for p in pids)
    assert not any(registry.proc_start_time(p) for p in pids)


def test_failed_run_leaves_nothing(no_leaks, tmp_path):
    with pytest.raises(RuntimeError, match="scenario blew up"):
        with Fabric(small(), out_dir=str(tmp_path)):
            raise RuntimeError("scenario blew up")


def test_sigkilled_run_is_removed_by_emu_clean(no_leaks, tmp_path):
    script = (
        "import signal\n"
        "from emu import fabric\n"
        "from emu.net import Fabric\n"
        "fab = Fabric(fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1),\n"
        f"             out_dir={str(tmp_path)!r})\n"
        "fab.open()\n"
        "fab.popen('h1', ['sleep', '300'])\n"
        "print('ready', flush=True)\n"
        "signal.pause()  # until the test kills this process\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        line = proc.stdout.readline()  # blocks until the fabric is up (or the child died)
        assert line.strip() == "ready", "the child did not bring its fabric up"
        assert leftovers()["runs"], "the run should be registered while it lives"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = leftovers()
    assert left["interfaces"], "a SIGKILLed run leaves interfaces (this is what clean is for)"
    out = subprocess.run(
        [sys.executable, "-m", "emu.cli", "clean"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "stopped" in out.stdout
    # Switch processes die with their parent (PDEATHSIG); the kernel may take a
    # moment to reap them.
    wait_for(lambda: not any(leftovers().values()), 10, "the killed run's leftovers to go")


def test_a_signal_during_teardown_is_acted_on_after_it(no_leaks, tmp_path):
    """SIGTERM that lands while a fabric is being torn down (emu reproduce's one
    SIGTERM as a run ends, a service manager's after it) waits for the teardown:
    cut short, it left the interfaces and the manifest to `emu clean`."""
    script = (
        "import os, signal\n"
        "from emu import cli, fabric\n"
        "from emu.net import Fabric\n"
        "signal.signal(signal.SIGTERM, cli._raise_interrupt)  # as emu run has it\n"
        "fab = Fabric(fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1),\n"
        f"             out_dir={str(tmp_path)!r})\n"
        "try:\n"
        "    with fab:\n"
        "        stop = fab.net.stop\n"
        "        def stop_as_a_signal_comes():\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "            stop()\n"
        "        fab.net.stop = stop_as_a_signal_comes\n"
        "except KeyboardInterrupt as exc:\n"
        "    print(exc, 'after the teardown:', fab.run is None, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.stdout.strip() == "signal 15 after the teardown: True", out.stderr
    assert not any(leftovers().values())


def test_a_second_fabric_of_the_same_names_is_refused_in_one_line_and_the_first_survives(
    no_leaks, tmp_path
):
    """Interfaces live in the root namespace: a second fabric of the same names would fail
    in Mininet ("RTNETLINK answers: File exists") and its teardown would delete the first
    fabric's interfaces. It is refused before anything is built, naming who holds them."""
    with Fabric(small(), out_dir=str(tmp_path / "first")) as first:
        second = Fabric(small(), out_dir=str(tmp_path / "second"))
        with pytest.raises(registry.FabricError) as refused:
            second.open()
        second.close()
        message = str(refused.value)
        assert "\n" not in message and "already exist" in message, message
        assert f"held by running fabric {first.run.run_id}" in message, message
        assert first.ping("h1", "h2") == (1, 1)  # nothing of the first was taken down
