"""The benches keep their records in emu's one run registry (issue 30, "one run registry").

bench/forwarding.py's `Resources` (used by the forwarding, conformance and
scale benches) records every process, namespace and interface in an
`emu.registry.Run`, so what a bench that was killed left behind is removed
by `emu clean` (`registry.clean_dead_runs`), by pid and start time, the same
way as what a fabric's run left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from emu import registry
from emu.registry import wait_for

REPO = Path(__file__).resolve().parents[2]
NS, VETH = "emub-regtest", ("emub-rt0", "emub-rt1")


def namespace_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


def test_a_bench_run_is_a_registry_run_and_its_teardown_removes_what_it_made(tmp_path):
    sys.path.insert(0, str(REPO))
    from bench import forwarding as fw

    (tmp_path / "logs").mkdir()
    res = fw.Resources(tmp_path, label="bench-regtest")
    try:
        res.add_netns(NS)
        res.add_veth(*VETH)
        sleeper = res.start("sleeper", ["sleep", "60"], netns=NS)
        (run,) = [r for r in registry.live_runs() if r.run_id == res.run.run_id]
        assert run.namespaces == [NS] and run.interfaces == list(VETH)
        assert [e["pid"] for e in run.pids] == [sleeper.popen.pid]
        res.teardown()
        assert sleeper.popen.poll() is not None
        assert not namespace_exists(NS) and not registry.interface_exists(VETH[0])
        (run,) = [r for r in registry.live_runs() if r.run_id == res.run.run_id]
        assert (run.pids, run.namespaces, run.interfaces) == ([], [], [])
    finally:
        res.close()
    assert not res.run.manifest_path.exists()


BENCH_THAT_DIES = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from bench import forwarding as fw
    out = Path({out!r}); (out / "logs").mkdir(exist_ok=True)
    res = fw.Resources(out, label="bench-regtest")
    res.add_netns({ns!r})
    res.add_veth({a!r}, {b!r})
    res.start("sleeper", ["sleep", "60"], netns={ns!r})
    print(res.run.run_id, flush=True)
    signal.pause()  # alive, with what it made, until the test kills it
    """
)


def test_what_a_killed_bench_left_is_removed_by_emu_clean(tmp_path):
    code = BENCH_THAT_DIES.format(repo=str(REPO), out=str(tmp_path), ns=NS, a=VETH[0], b=VETH[1])
    bench = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        run_id = bench.stdout.readline().strip()
        assert run_id.startswith("bench-regtest-"), run_id
        (run,) = [r for r in registry.load_runs() if r.run_id == run_id]
        sleeper = run.pids[0]
        assert namespace_exists(NS) and registry.interface_exists(VETH[0])
    finally:
        bench.send_signal(signal.SIGKILL)  # no teardown: what it made stays
        bench.wait()
        bench.stdout.close()
    # Its processes die with it (PR_SET_PDEATHSIG) or here; its namespace and veths
    # stay until the registry removes them.
    assert namespace_exists(NS) and registry.interface_exists(VETH[0])
    removed = [r for r in registry.clean_dead_runs() if r["run"] == run_id]
    assert removed and removed[0]["deleted_interfaces"] == [VETH[0]]  # its peer goes with it
    wait_for(
        lambda: not registry.same_process(sleeper["pid"], sleeper["start_time"]),
        5,
        "the dead bench's process to end",
    )
    assert not namespace_exists(NS) and not registry.interface_exists(VETH[0])
    assert run_id not in {r.run_id for r in registry.load_runs()}
