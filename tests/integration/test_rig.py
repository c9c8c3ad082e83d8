"""One rig per job (issue 30): the testbed's switches and the benches' come from emu/rig.py.

The testbed's own tests (test_testbed.py, test_same_as_ovs.py) hold the rig
to one switch of either kind; here it serves the forwarding bench's chains,
emu's switches in one process and Open vSwitch's bridges, measured on real
frames through namespaced hosts, and leaves nothing behind. Needs root and
iperf3; the OVS row needs Open vSwitch (scripts/bootstrap installs both).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from emu import ovs, registry, rig

REPO = Path(__file__).resolve().parents[2]


def bench_forwarding():
    sys.path.insert(0, str(REPO))
    from bench import forwarding

    return forwarding


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
@pytest.mark.parametrize(
    "variant, hops",
    [
        ("emu-shared", 2),
        pytest.param(
            "ovs-user",
            1,
            marks=pytest.mark.skipif(bool(ovs.missing()), reason=ovs.missing() or "ok"),
        ),
    ],
)
def test_the_forwarding_bench_measures_a_chain_started_by_the_rig(tmp_path, variant, hops):
    fw = bench_forwarding()
    (tmp_path / "logs").mkdir()
    res = fw.Resources(tmp_path, label="bench-rigtest")
    try:
        row = fw.measure(res, variant, hops, seconds=1)
        assert row.error == ""
        # TCP crossed the chain and UDP frames arrived; the switches' CPU was read.
        assert row.tcp_mbps > 0 and row.udp_fps > 0
        assert row.tcp_cpu_pct is not None and row.tcp_cpu_pct > 0
        # measure() tears its row down: the rig's processes and interfaces are gone.
        assert res.run.pids == [] and res.run.interfaces == []
        assert not [n for n in os.listdir("/sys/class/net") if n.startswith(fw.PREFIX)]
        assert res.started_pids and not [p for p in res.started_pids if fw._proc_alive(p)]
    finally:
        res.close()
    assert not res.run.manifest_path.exists()


def test_a_switch_that_exits_while_the_rig_waits_is_named_with_its_log(tmp_path):
    run = registry.Run.create(log_dir=str(tmp_path), label="rigtest")
    # No such interface: the switch exits at start-up, before any carrier.
    spec = rig.SwitchSpec("rt", 1, (("emunosuchif0", 1),))
    switches = rig.EmuSwitches(run, [spec])
    try:
        with pytest.raises(
            rig.RigError, match=r"switch rt exited \(code \d+\) during start-up"
        ) as e:
            switches.start(timeout_s=10)
        assert switches.log_paths["rt"] in str(e.value)
    finally:
        switches.stop()
        run.teardown()
    assert registry.proc_start_time(switches.started["switch rt"]) is None


def test_a_rig_refuses_specs_it_cannot_start(tmp_path):
    run = registry.Run.create(log_dir=str(tmp_path), label="rigtest")
    try:
        one = rig.SwitchSpec("a", 1, (("x", 1),))
        with pytest.raises(ValueError, match="names repeat"):
            rig.EmuSwitches(run, [one, one])
        with pytest.raises(ValueError, match="at least one"):
            rig.EmuSwitches(run, [])
        with pytest.raises(ValueError, match="longer than 15"):
            rig.OvsBridges(run, [rig.SwitchSpec("a" * 16, 1, ())], tmp_path / "ovs")
    finally:
        run.teardown()
