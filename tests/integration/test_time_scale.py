"""One fabric-wide time scale (emu/fabric/, "The time scale"), on real frames.

The graph's `time_scale` reaches the switches' PFC watchdog and the NIC
model: a storm is declared after the watchdog's 200 ms of modelled time, i.e.
scale x 200 ms of emulated time, and the NIC's RTO and DCQCN run on the rate
the link stands for.
"""

from __future__ import annotations

import time

import pytest

from emu import fabric
from emu.config import WatchdogSpec
from emu.host.rnic import NicConfig
from emu.net import Fabric, FabricError, wait_for
from emu.traffic.rdma import RdmaHosts

SCALE = 4.0
SLACK_S = 0.3  # the fault reaching the NIC, PAUSE reaching the leaf, one refresh


def test_the_watchdog_and_the_nic_run_on_the_fabrics_clock(tmp_path):
    rate_bps = 10_000_000
    g = fabric.leaf_spine(
        leaves=1, spines=1, hosts_per_leaf=2, host_rate_bps=rate_bps,
        modelled_rate_bps=SCALE * rate_bps,
    )  # fmt: skip
    assert g.graph["time_scale"] == SCALE
    with Fabric(g, out_dir=str(tmp_path), qos={"ecn": {"enabled": False}}) as fab:
        spec = fab.switch_call("leaf1", "watchdog")["spec"]
        assert spec["time_scale"] == SCALE
        nics = RdmaHosts(fab, ["h1", "h2"], dcqcn=False)
        info = nics.nics["h1"].call("info")
        assert info["modelled_rate_bps"] == SCALE * rate_bps
        # The IBA timeout on the modelled clock, or the fabric's worst round trip
        # (emu/host/rto.py) where that is longer, as it is here.
        assert info["path_rtt_bound_s"] > SCALE * NicConfig.rto_modelled_s
        assert info["rto_s"] == pytest.approx(info["path_rtt_bound_s"])
        qp = nics.connect("h1", "h2")
        nics.post("h1", qp, 1 << 20)
        wait_for(
            lambda: nics.stats("h2")["recv"].get(str(qp), {}).get("rx_bytes", 0) > 50_000,
            10,
            "h1's RDMA traffic to reach h2",
        )
        t_fault = time.time()
        fab.faults.stuck_nic("h2")

        def storm():
            events = fab.switch_call("leaf1", "watchdog")["events"]
            return [e for e in events if e["kind"] == "storm"]

        [first, *_] = wait_for(storm, 10, "leaf1's watchdog to declare the storm")
        detected_after = first["wall"] - t_fault
        detection = WatchdogSpec().detection_s * SCALE
        poll = WatchdogSpec().poll_s
        # Unscaled, it would have been declared after 0.2-0.3 s.
        assert detection <= detected_after <= detection + poll + SLACK_S


def test_a_watchdog_time_scale_of_its_own_is_refused():
    g = fabric.leaf_spine(leaves=1, spines=1, hosts_per_leaf=1)
    with pytest.raises(FabricError, match="qos watchdog time_scale=3.*fabric's"):
        Fabric(g, qos={"watchdog": {"time_scale": 3}})
