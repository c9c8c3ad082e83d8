"""The compiled loops' stall meter (emu/csrc/loopmon.h) against its specification.

Both C loops, the switch's and the NIC agent's, keep `fidelity.LoopMonitor`'s
counts in C; `fidelity.CompiledLoopMonitor` reads them. The same passes fed to
the Python meter and to each C one must give the same snapshot, or a run's
fidelity verdict would depend on which datapath ran it.
"""

import random
import time

import pytest

from emu.fidelity import CompiledLoopMonitor, LoopMonitor
from emu.host import nicpath
from emu.host.rnic import NicConfig
from emu.switch.fastpath import _fastpath

from .fakes import CSwitch, make_switch

FRAME_S = 0.0006  # 1500 B at 20 Mbit/s
WORK_NAMES = ("frames", "timers", "python", "upcall", "mgmt")


def c_switch(tmp_path):
    """A switch of the C datapath on fake sockets (tests/unit/fakes.py), its meter."""
    dp = make_switch(CSwitch, tmp_path)
    return dp.csw, dp.close


def c_nic(tmp_path):
    cfg = NicConfig(mac="02:00:00:00:00:01", ip="10.0.0.1", rate_bps=20e6, dcqcn=False)
    return nicpath.CRnic(cfg, time.monotonic()).engine, lambda: None


def passes(seed: int, n: int = 2000):
    """Stalls around the thresholds that matter: a frame time, ten of them."""
    rng = random.Random(seed)
    at = 0.0
    for _ in range(n):
        stall = rng.choice(
            [
                rng.uniform(0, FRAME_S),
                FRAME_S,
                rng.uniform(FRAME_S, 10 * FRAME_S),
                10 * FRAME_S,
                rng.uniform(10 * FRAME_S, 100 * FRAME_S),
            ]
        )
        at += stall + rng.uniform(0, 0.01)
        work = tuple(rng.sample(WORK_NAMES, rng.randint(0, 3)))
        yield stall, rng.random() < 0.7, work, rng.uniform(0, stall), at, rng.randint(0, 500)


@pytest.mark.skipif(_fastpath is None or nicpath._nicpath is None, reason="C paths not built")
@pytest.mark.parametrize("make", [c_switch, c_nic], ids=["switch", "nic"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_c_meter_counts_every_pass_as_loop_monitor_does(make, seed, tmp_path):
    owner, close = make(tmp_path)
    try:
        check_alike(owner, seed)
    finally:
        close()


def check_alike(owner, seed: int) -> None:
    compiled = CompiledLoopMonitor(owner, FRAME_S)
    spec = LoopMonitor(FRAME_S)
    for stall, mattered, work, cpu_s, ended_at, frames in passes(seed):
        spec.pass_done(stall, mattered, work, cpu_s, ended_at, frames)
        # The C loops append each piece of work's name as the pass does it.
        owner.loop_pass(stall, mattered, ",".join(work), cpu_s, ended_at, frames)
    got, want = compiled.snapshot(), spec.snapshot()
    assert want["stalls_over_1"] > 0 and want["stalls_over_10"] > 0
    assert want["idle_longest_stall_s"] > 0
    assert got == want
    compiled.reset()
    spec.reset()
    assert compiled.snapshot() == spec.snapshot()
