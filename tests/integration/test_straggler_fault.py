"""faults.straggler on a real fabric: a slow compute step and a slow NIC each hold the whole ring."""

from __future__ import annotations

import pytest

from emu.faults import FaultError
from emu.traffic.collectives import run_allreduce
from emu.traffic.rdma import RdmaHosts

from . import RDMA_RATE_BPS as RATE_BPS
from . import rdma_fabric

HOSTS = ["h1", "h2", "h3", "h4"]


@rdma_fabric(leaves=2, hosts_per_leaf=2)
def test_compute_and_nic_stragglers_stretch_the_iteration(fabric):
    # DCQCN off: a slow link's queue is then held back by PFC alone, and the senders'
    # rates do not have to climb back on DCQCN's timers after the straggler heals.
    nics = RdmaHosts(fabric, HOSTS, dcqcn=False)
    assert fabric.nics is nics and fabric.faults.nics is nics  # the fabric owns its NICs
    size = 512 << 10
    (base,) = run_allreduce(fabric, HOSTS, [size], "int32", iters=2, compute_s=0.2, seed=1)
    # Compute: h1 takes 3 x 0.2 s; every rank waits for it, up to 0.4 s longer per
    # iteration. The others' first ring step (1/(2(n-1)) of the all-reduce) does not
    # need h1 and overlaps its compute, so the stretch is that much shorter.
    fabric.faults.straggler("h1", compute_factor=3.0)
    (slow_cpu,) = run_allreduce(fabric, HOSTS, [size], "int32", iters=2, compute_s=0.2, seed=2)
    assert slow_cpu.wrong == 0
    stretch = slow_cpu.iteration_s - base.iteration_s
    overlap = base.time_s / (2 * (len(HOSTS) - 1))
    assert 0.4 - overlap - 0.05 <= stretch <= 0.4 + 0.05, (stretch, overlap)
    # NIC: h1 sends and receives at half rate; the ring moves at its slowest link.
    fabric.faults.straggler("h1", compute_factor=1.0, nic_factor=2.0)
    assert nics.nics["h1"].call("set")["rate_bps"] == RATE_BPS // 2
    (slow_nic,) = run_allreduce(fabric, HOSTS, [size], "int32", iters=2, compute_s=0.2, seed=3)
    assert slow_nic.wrong == 0
    assert slow_nic.time_s > 1.7 * base.time_s, (slow_nic.time_s, base.time_s)
    # Healthy again: back to the baseline, and the host's NIC paced at its link again.
    fabric.faults.straggler("h1")
    assert nics.nics["h1"].call("set") == {
        "drain_rate_bps": None,
        "stuck": False,
        "compute_factor": 1.0,
        "rate_bps": RATE_BPS,
    }
    (healed,) = run_allreduce(fabric, HOSTS, [size], "int32", iters=2, compute_s=0.2, seed=4)
    assert healed.wrong == 0
    assert healed.time_s < 1.2 * base.time_s, (healed.time_s, base.time_s)
    qdisc = fabric.host_run("h1", ["tc", "qdisc", "show", "dev", "h1-eth0"]).stdout
    assert f"rate {RATE_BPS // 1_000_000}Mbit" in qdisc, qdisc
    kinds = [e["kind"] for e in fabric.faults.events]
    assert kinds.count("straggler") == 3 and "slow_host" in kinds
    with pytest.raises(FaultError, match="unknown host 'h99'"):
        fabric.faults.straggler("h99", compute_factor=2.0)
    with pytest.raises(FaultError, match="compute_factor=0.5: must be >= 1"):
        fabric.faults.straggler("h2", compute_factor=0.5)
