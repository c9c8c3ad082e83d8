"""EmuSwitch as a drop-in Mininet switch (issue 28, part 8; docs/mininet.md).

Mininet's own topologies (`LinearTopo`, `TreeTopo`), its own `pingAll`, its
own `mn` command and `RemoteController`, with emu's switch in place of Open
vSwitch and no emu run set up beforehand: the switches make their run
registry, take their rates from the links' `bw`, and remove what they
recorded when the network stops. Controllers: os-ken's unchanged
`simple_switch_13` (from os-ken 1.4.1's wheel, emu/osken_samples.py) and emu's
routing app, both run by emu's launcher (controllers/launch.py).

Every fabric here is torn down in a `finally`, and mn's own run is removed by
its manifest should mn have to be killed; the leak check (tests/conftest.py)
then runs after every test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from emu import osken_samples, registry

REPO = Path(__file__).resolve().parents[2]
CUSTOM = REPO / "emu" / "mininet_custom.py"
MN = shutil.which("mn") or "/usr/bin/mn"
MN_TIMEOUT_S = 240.0


@pytest.fixture
def sample_dir(tmp_path) -> Path:
    """A directory holding os-ken's simple_switch_13, unchanged (fetched once per machine)."""
    osken_samples.fetch()
    osken_samples.extract("simple_switch_13", tmp_path / "apps")
    return tmp_path / "apps"


class Controller:
    """emu's controller launcher on a free loopback port, stopped by its pid."""

    def __init__(self, tmp_path: Path, apps: list[str], *options: str, pythonpath: str = ""):
        self.port = registry.free_tcp_port()
        self.status_path = tmp_path / "controller-status.json"
        self.log_path = tmp_path / "controller.log"
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)
        argv = [
            sys.executable,
            "-m",
            "controllers.launch",
            "--ofp-listen-host",
            "127.0.0.1",
            "--ofp-tcp-listen-port",
            str(self.port),
            "--status-file",
            str(self.status_path),
            "--log-file",
            str(self.log_path),
            *options,
            *apps,
        ]
        with open(tmp_path / "controller.out", "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        try:
            registry.wait_for(
                self.listening, 30.0, f"the controller on 127.0.0.1:{self.port}", logs=str(tmp_path)
            )
        except BaseException:
            self.stop()
            raise

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"controller exited with {self.proc.returncode}; see {self.log_path}"
            )
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        registry.stop_child(self.proc, grace_s=5)


def run_mn(args: list[str], timeout_s: float = MN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run `mn` with emu's custom file; whatever happens, nothing of its run is left.

    mn runs in a session of its own, so that a hung mn can be ended by its
    process group (its switch processes die with it: PR_SET_PDEATHSIG); the
    run it recorded is then removed by that run's manifest, as `emu clean`
    does, never by Mininet's cleanup.
    """
    argv = [MN, "--custom", str(CUSTOM), *args]
    env = dict(os.environ, EMU_VENV=sys.prefix)  # the interpreter running these tests
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mn did not finish within {timeout_s:.0f} s:\n{out.decode(errors='replace')}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = [r for r in registry.load_runs() if r.owner_pid == proc.pid]
        registry.clean_dead_runs()
        assert not left, f"mn left its run behind: {[r.run_id for r in left]}"
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(errors="replace"), "")


def test_mn_tree_pingall_with_simple_switch_13(tmp_path, sample_dir):
    """The acceptance: `mn --custom emu/mininet_custom.py --switch emu --controller remote
    --topo tree,2 --test pingall` with os-ken's simple_switch_13: every ping answered."""
    ctl = Controller(tmp_path, ["simple_switch_13"], pythonpath=str(sample_dir))
    try:
        res = run_mn(
            [
                "--switch",
                "emu",
                "--controller",
                f"remote,ip=127.0.0.1,port={ctl.port}",
                "--topo",
                "tree,2",
                "--test",
                "pingall",
            ]
        )
    finally:
        ctl.stop()
    # tree,2: four hosts, each pinging the three others.
    assert "Results: 0% dropped (12/12 received)" in res.stdout, res.stdout
    assert res.returncode == 0, res.stdout


def _pingall(topo, controller: Controller, link_cls=None, wait=None) -> tuple[float, dict]:
    """Mininet's own script path: `Mininet(topo, switch=EmuSwitch, controller=RemoteController)`.

    Returns pingAll's loss (percent) and each switch's port rates (bit/s).
    """
    from mininet.link import Link
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import RemoteController

    from emu.switch.node import DropInRuns, EmuSwitch

    setLogLevel("warning")
    net = Mininet(
        topo=topo,
        switch=EmuSwitch,
        link=link_cls or Link,
        controller=None,
        waitConnected=False,
    )
    try:
        net.addController("c0", controller=RemoteController, ip="127.0.0.1", port=controller.port)
        net.start()
        assert net.waitConnected(timeout=30), "switches did not connect to the controller"
        if wait is not None:
            wait()
        rates = {
            sw.name: {p["name"]: p["rate_bps"] for p in sw.call("ports")} for sw in net.switches
        }
        return net.pingAll(), rates
    finally:
        try:
            net.stop()
        finally:
            DropInRuns.teardown()  # a no-op after a clean stop: the last switch out ended the run


def test_linear_topo_with_bw_under_simple_switch_13(tmp_path, sample_dir):
    """LinearTopo over TCLinks of bw=10: ports run at 10 Mbit/s; simple_switch_13 forwards."""
    from mininet.link import TCLink
    from mininet.topo import LinearTopo

    ctl = Controller(tmp_path, ["simple_switch_13"], pythonpath=str(sample_dir))
    try:
        loss, rates = _pingall(LinearTopo(k=3, n=1, lopts={"bw": 10}), ctl, link_cls=TCLink)
    finally:
        ctl.stop()
    assert loss == 0
    assert sorted(rates) == ["s1", "s2", "s3"]
    assert {r for ports in rates.values() for r in ports.values()} == {10_000_000}
    assert sorted(rates["s2"]) == ["s2-eth1", "s2-eth2", "s2-eth3"]


def test_tree_topo_under_emu_routing(tmp_path):
    """TreeTopo(2, 2) under emu's routing app; links without `bw` run at the default rate."""
    from mininet.topolib import TreeTopo

    from emu.switch.node import DEFAULT_RATE_BPS

    ctl = Controller(
        tmp_path,
        ["controllers.routing"],
        "--expect-switches",
        "3",
        "--expect-links",
        "2",
    )

    def discovered() -> None:
        registry.wait_for(
            lambda: ctl.status().get("converged"),
            60.0,
            "the routing controller to discover 3 switches and 2 links",
            logs=str(tmp_path),
        )

    try:
        loss, rates = _pingall(TreeTopo(depth=2, fanout=2), ctl, wait=discovered)
    finally:
        ctl.stop()
    assert loss == 0
    assert {r for ports in rates.values() for r in ports.values()} == {DEFAULT_RATE_BPS}
    assert len(ctl.status()["hosts"]) == 4


def test_mn_bad_bw_fails_in_one_line_and_leaves_nothing(tmp_path):
    """A link bw the switch cannot use stops mn with the reason; emu's cleanup, not
    Mininet's, removes what was made (the leak check follows)."""
    res = run_mn(
        ["--switch", "emu", "--controller", "none", "--link", "tc,bw=-5", "--topo", "linear,2"],
        timeout_s=120,
    )
    assert "link bw=-5: expected a positive number of Mbit/s" in res.stdout, res.stdout
    assert not any(os.path.exists(f"/sys/class/net/s{i}-eth1") for i in (1, 2))


def test_mn_innamespace_is_refused():
    res = run_mn(
        ["--switch", "emu", "--controller", "none", "--innamespace", "--topo", "linear,2"],
        timeout_s=60,
    )
    assert res.returncode == 2
    assert (
        "emu: --switch emu does not support --innamespace "
        "(the switch processes run in the root namespace)"
    ) in res.stdout.splitlines(), res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["extract", "../etc", "/tmp"], "app '../etc': expected a module name"),
        (["extract", "no_such_app", "/tmp"], "os-ken 1.4.1 has no sample app 'no_such_app'"),
    ],
)
def test_osken_samples_bad_input(args, message, tmp_path):
    osken_samples.fetch()
    res = subprocess.run(
        [sys.executable, "-m", "emu.osken_samples", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_simple_switch_13_is_os_kens_file(sample_dir):
    """The app is os-ken's own, byte for byte: its hash is the one the wheel's RECORD lists."""
    data = (sample_dir / "simple_switch_13.py").read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(osken_samples.wheel_path()) as wheel:
        record = wheel.read("os_ken-1.4.1.dist-info/RECORD").decode().splitlines()
    assert f"os_ken/app/simple_switch_13.py,sha256={digest},{len(data)}" in record
    assert b"class SimpleSwitch13(app_manager.OSKenApp):" in data


def test_mn_killed_is_cleaned_by_its_manifest():
    """mn killed with SIGKILL mid-run: its switch processes die with it, and the
    veths between its switches, which outlive it, go with `emu clean` (its manifest)."""
    argv = [MN, "--custom", str(CUSTOM), "--switch", "emu", "--controller", "none"]
    # No controller: `--test pingall` waits for connections that never come, so mn stays up.
    argv += ["--topo", "linear,2", "--test", "pingall"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, EMU_VENV=sys.prefix),
        start_new_session=True,
    )
    try:

        def switches_up() -> registry.Run | None:
            if proc.poll() is not None:
                raise AssertionError(f"mn exited with {proc.returncode} before its switches ran")
            runs = [r for r in registry.load_runs() if r.owner_pid == proc.pid]
            return runs[0] if runs and len(runs[0].pids) == 2 else None

        run = registry.wait_for(switches_up, 60.0, "mn's two switch processes")
        switch_pids = [e["pid"] for e in run.pids]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # The link s2-s1 lies in the root namespace: nothing but the manifest removes it.
        assert "s2-eth2" in run.interfaces and os.path.exists("/sys/class/net/s2-eth2")
        removed = registry.clean_dead_runs()
        assert run.run_id in [r["run"] for r in removed]
        assert not os.path.exists("/sys/class/net/s2-eth2")
        registry.wait_for(
            lambda: not any(os.path.exists(f"/proc/{pid}") for pid in switch_pids),
            10.0,
            "the switch processes to die with mn",
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        registry.clean_dead_runs()
