"""Per-packet adaptive routing on a real fabric (issue 31): one flow over both spines.

::

            spine1      spine2          leaf-spine links 10 Mbit/s
             |    \\    /    |
             |     \\  /     |
            leaf1      leaf2            host links 20 Mbit/s
             |           |
             h1          h2

One UDP flow h1 -> h2 at 16 Mbit/s in the RoCE class (DSCP 26, priority 3)
needs both spines. Hashing (OpenFlow's SELECT, emu's default) keeps the flow
on the one spine its 5-tuple picks, which carries all of it; with
`Fabric(adaptive_routing="3")` leaf1 places each packet of priority 3 on the
uplink with fewer bytes queued, and both spines carry a large share, as the
switch's port counters and its adaptive-routing counters show. That a paused
port is never chosen is tested on both data planes without root
(tests/unit/test_adaptive_routing.py).
"""

from __future__ import annotations

from emu import fabric
from emu.net import Fabric
from emu.traffic import iperf

HOST_BPS = 20_000_000
FABRIC_BPS = 10_000_000
ROCE_TOS = 26 << 2
SECONDS = 3


def graph():
    return fabric.leaf_spine(
        leaves=2, spines=2, hosts_per_leaf=1, host_rate_bps=HOST_BPS, fabric_rate_bps=FABRIC_BPS
    )


def spread(fab: Fabric) -> tuple[dict[str, int], float]:
    """Packets leaf1 sent to each spine while the flow ran, and the rate h2 received."""
    uplinks = {
        port: peer
        for port, (_intf, peer, _peer_port, _rate) in fabric.port_map(fab.graph, "leaf1").items()
        if peer.startswith("spine")
    }
    before = fab.port_stats("leaf1")
    doc = iperf.run(fab, "h1", "h2", SECONDS, udp=True, bitrate="16M", length=1400, tos=ROCE_TOS)
    after = fab.port_stats("leaf1")
    assert "error" not in doc, doc["error"]
    per_spine = {peer: after[p].tx_packets - before[p].tx_packets for p, peer in uplinks.items()}
    return per_spine, doc["end"]["sum"]["bits_per_second"] * (
        1 - doc["end"]["sum"]["lost_percent"] / 100
    )


def test_hashing_keeps_the_flow_on_one_spine(tmp_path):
    with Fabric(graph(), out_dir=str(tmp_path)) as fab:
        per_spine, received_bps = spread(fab)
        assert fab.switch_call("leaf1", "counters")["adaptive"]["decisions"] == 0
    print(f"hash: {per_spine}, received {received_bps / 1e6:.1f} Mbit/s")
    total = sum(per_spine.values())
    assert total > 2000, per_spine
    # LLDP and iperf3's control connection may take the other spine: a few packets.
    assert min(per_spine.values()) < 0.03 * total, per_spine


def test_adaptive_routing_spreads_the_flow_over_both_spines_per_packet(tmp_path):
    with Fabric(graph(), out_dir=str(tmp_path), adaptive_routing="3") as fab:
        per_spine, received_bps = spread(fab)
        adaptive = fab.switch_call("leaf1", "counters")["adaptive"]
        groups = fab.switch_call("leaf1", "groups")
    print(f"adaptive: {per_spine}, received {received_bps / 1e6:.1f} Mbit/s; {adaptive}")
    total = sum(per_spine.values())
    assert total > 2000, per_spine
    assert min(per_spine.values()) > 0.3 * total, per_spine
    assert adaptive["default"] == {"mode": "adaptive", "classes": [3]}
    assert adaptive["decisions"] >= 0.9 * total, adaptive
    assert len(adaptive["picks"]) == 2 and min(adaptive["picks"].values()) > 0.3 * total
    assert all(g["mode"]["mode"] == "adaptive" for g in groups if g["type"] == "select")
    # Both spines together carry what one could not: more than one uplink's rate arrives.
    assert received_bps > 1.2 * FABRIC_BPS, received_bps
