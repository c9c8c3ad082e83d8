"""Where a flow goes: each switch traces a packet without touching it, real packets agree."""

from __future__ import annotations

import subprocess
import sys

import pytest

from emu.net import FabricError, wait_for

# Every datagram reaches the wire: the host's NIC (a tbf of 16 frames, Fabric
# set_host_tx_rate) drops silently what a burst overflows (CI lost 1-24 of the
# 300). A send buffer of a few datagrams makes sendto() block until the NIC has
# sent one, as the kernel counts a datagram against it until then; the ones
# held for ARP too.
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
s.bind(("", int(sys.argv[1])))
for _ in range(int(sys.argv[4])):
    s.sendto(b"x" * 64, (sys.argv[2], int(sys.argv[3])))
"""


def uplink_tx(fab, leaf: str) -> dict[str, int]:
    """tx packets of `leaf`'s ports towards each spine."""
    by_port = {p["port_no"]: p["tx_packets"] for p in fab.switch_call(leaf, "ports")}
    return {
        peer: by_port[e["ports"][leaf]]
        for peer, e in fab.graph[leaf].items()
        if peer.startswith("spine")
    }


@pytest.mark.emu_fabric(leaves=2, spines=2, hosts_per_leaf=2)
def test_the_traced_path_is_the_one_packets_take_and_follows_a_failure(fabric):
    paths = {
        sport: fabric.trace_path("h1", "h3", "udp", sport, 4000) for sport in range(40000, 40032)
    }
    assert all(p[:2] == ["h1", "leaf1"] and p[3:] == ["leaf2", "h3"] for p in paths.values())
    assert {p[2] for p in paths.values()} == {"spine1", "spine2"}  # the hash spreads them
    # Same-leaf traffic never leaves the leaf.
    assert fabric.trace_path("h1", "h2", "tcp", 40000, 5201) == ["h1", "leaf1", "h2"]

    # `emu path` asks the same switches from another process, over their sockets.
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "emu.cli",
            "path",
            "h1",
            "h3",
            "--proto",
            "udp",
            "--sport",
            "40001",
            "--dport",
            "4000",
            "--run",
            fabric.run.run_id,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip().endswith(" ".join(paths[40001]))
    cli = subprocess.run(
        [sys.executable, "-m", "emu.cli", "path", "h1", "h99", "--run", fabric.run.run_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode != 0 and "'h99': not a host" in cli.stderr
    assert "Traceback" not in cli.stderr

    sport = 40000
    spine = paths[sport][2]
    other = ({"spine1", "spine2"} - {spine}).pop()
    before = uplink_tx(fabric, "leaf1")
    res = fabric.host_run(
        "h1",
        [sys.executable, "-c", SEND, str(sport), fabric.graph.nodes["h3"]["ip"], "4000", "300"],
        timeout_s=20,
    )
    assert res.returncode == 0, res.stderr
    wait_for(
        lambda: uplink_tx(fabric, "leaf1")[spine] - before[spine] >= 300,
        10.0,
        f"300 datagrams out of leaf1 towards {spine}",
    )
    # The other uplink saw at most the controller's LLDP and the ARP exchange.
    assert uplink_tx(fabric, "leaf1")[other] - before[other] < 30

    # Pull the cable the flow uses: the trace (and the flow) move to the other spine.
    fabric.set_link("leaf1", spine, up=False)
    wait_for(
        lambda: fabric.trace_path("h1", "h3", "udp", sport, 4000)[2] == other,
        10.0,
        f"the flow's path to leave {spine}",
    )
    with pytest.raises(FabricError, match="not a host"):
        fabric.trace_path("h1", "leaf2")
    with pytest.raises(FabricError, match="must be tcp or udp"):
        fabric.trace_path("h1", "h3", "sctp")
