"""Lab ecmp_app: write the ECMP policy of a routing controller and see flows spread on the wire.

The student edits `ecmp.py`, one function that emu's routing app calls for
every switch and destination (`controllers/routing.py`, `--next-hops FILE`):
the ports on which to send. The starting point follows one shortest path,
so every host is reachable but all traffic between two leaves crosses one
spine. The check builds a leaf/spine with three spines around the student's
policy, pings every pair of hosts and sends many UDP flows between the two
leaves as real datagrams, then counts the frames each spine received.
"""

from __future__ import annotations

import math
import sys

from emu import fabric as fabric_mod
from emu.labs import LabRun
from emu.net import Fabric, FabricError, wait_for

TITLE = "Write an ECMP routing policy: every shortest path, not only the first"
MINUTES = 45
ORDER = 2
GRADES = "all-pairs ping, and how many of 60 real UDP flows each of 3 spines carried"
FILES = ("ecmp.py",)

SPINES = 3
FLOWS = 60
DATAGRAMS_PER_FLOW = 20
DPORT = 4000
# A flow picks each spine with probability 1/3 under ECMP: per spine a binomial
# count; below mean - 4 sigma a spine is not in the hash's choice.
MIN_FLOWS_PER_SPINE = FLOWS / SPINES - 4 * math.sqrt(FLOWS * (1 / SPINES) * (1 - 1 / SPINES))
BACKGROUND_FRAMES = 50  # LLDP and ARP a spine may see while the flows run

SEND = """
import socket, sys
dst, dport, first, flows, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for sport in range(first, first + flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", sport))
    for _ in range(n):
        s.sendto(b"x" * 64, (dst, dport))
    s.close()
"""


def graph():
    return fabric_mod.leaf_spine(
        leaves=2, spines=SPINES, hosts_per_leaf=2, host_rate_bps=20_000_000
    )


def fabric(lab: LabRun) -> Fabric:
    policy = str(lab.path("ecmp.py").resolve())
    return Fabric(graph(), out_dir=str(lab.out_dir), controller_args=("--next-hops", policy))


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    with fabric(lab) as fab:
        interactive(fab)


def spine_rx(fab: Fabric) -> dict[str, int]:
    return {
        sw: sum(p["rx_packets"] for p in fab.switch_call(sw, "ports"))
        for sw in fabric_mod.switches(fab.graph)
        if sw.startswith("spine")
    }


def check(lab: LabRun) -> None:
    hosts = fabric_mod.hosts(graph())
    pairs = [(a, b) for a in hosts for b in hosts if a != b]
    fab = fabric(lab)
    started = lab.open_fabric(
        fab,
        "the fabric converges with your policy",
        "your next_hops raised or returned a port with no link behind it; the controller's "
        f"log says which: {lab.out_dir}/controller.log (search for Traceback)",
    )
    if not started:
        return
    try:
        unreachable = [f"{a}->{b}" for a, b in pairs if fab.ping(a, b, count=2)[1] == 0]
        lab.check(
            "every host reaches every other host",
            not unreachable,
            f"{len(pairs) - len(unreachable)} of {len(pairs)} pairs",
            f"{len(pairs)} of {len(pairs)}",
            "a destination your next_hops returns no port for, or a port that leads away "
            "from it, is unreachable; `path h1 h3` in the lab's CLI shows where packets go",
        )
        before = spine_rx(fab)
        dst = fab.graph.nodes["h3"]["ip"]
        argv = [sys.executable, "-c", SEND, dst, str(DPORT), "40000", str(FLOWS)]
        fab.host_run("h1", argv + [str(DATAGRAMS_PER_FLOW)], timeout_s=60, check=True)
        total = FLOWS * DATAGRAMS_PER_FLOW
        try:
            wait_for(
                lambda: sum(spine_rx(fab).values()) - sum(before.values()) >= total,
                10.0,
                f"{total} datagrams to cross the spines",
            )
        except FabricError:
            pass  # graded below on what did cross
        after = spine_rx(fab)
    finally:
        fab.close()
    flows = {
        sw: max(0, after[sw] - before[sw] - BACKGROUND_FRAMES) / DATAGRAMS_PER_FLOW for sw in after
    }
    shown = ", ".join(f"{sw} {n:.0f}" for sw, n in sorted(flows.items()))
    lab.check(
        f"{FLOWS} UDP flows h1 -> h3 spread over the {SPINES} spines",
        all(n >= MIN_FLOWS_PER_SPINE for n in flows.values()),
        f"flows per spine: {shown}",
        f">= {MIN_FLOWS_PER_SPINE:.1f} on each (ECMP's binomial mean {FLOWS / SPINES:.0f} "
        "minus 4 sigma)",
        "a switch spreads flows only over the ports you return: return every neighbour that "
        "is one hop closer to the destination (networkx's shortest-path lengths give the "
        "distances), not the first hop of one shortest path",
    )
