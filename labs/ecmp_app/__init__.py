"""Lab ecmp_app: write the ECMP policy of a routing controller and see flows spread on the wire.

The student edits `ecmp.py`, one function that emu's routing app calls for
every switch and destination (`controllers/routing.py`, `--next-hops FILE`):
the ports on which to send. The starting point follows one shortest path,
so every host is reachable but all traffic between two leaves crosses one
spine.

The check grades the policy on two fabrics, because a policy can be right on
one and wrong on another: on a leaf/spine with three spines (two tiers) a
policy that sends "to the destination if adjacent, else everywhere" spreads
perfectly, and on a k=4 fat-tree (three tiers) the same policy sends packets
back down into the pod they came from, in loops. On each fabric it pings
hosts, asks the switches to trace many 5-tuples through their own tables
(a loop or a longer-than-shortest path is named), and sends many UDP flows as
real datagrams, then counts the frames each top switch (spine, core) received.

`emu lab test ecmp-app` runs `offline`: the same policy as plain Python on
both fabrics' graphs (and an uneven one), no root, no fabric: every port
returned is a link, no destination's next hops form a loop, every next hop is
on a shortest path, and every shortest path is used.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import networkx as nx

from emu import fabric as fabric_mod
from emu.labs import LabError, LabRun
from emu.net import Fabric, FabricError, wait_for

TITLE = "Write an ECMP routing policy: every shortest path, not only the first"
MINUTES = 45
ORDER = 2
GRADES = (
    "on a leaf/spine and on a k=4 fat-tree: ping, traced paths (no loop, shortest), and how "
    "many of 60 real UDP flows each spine or core carried"
)
FILES = ("ecmp.py",)

SPINES = 3
FLOWS = 60
DATAGRAMS_PER_FLOW = 20
DPORT = 4000
FIRST_SPORT = 40000
TRACES = 64  # 5-tuples traced per fabric: a core missed by all with p = 4 x (3/4)^64
BACKGROUND_FRAMES = 50  # LLDP and ARP a spine may see while the flows run
RATE_BPS = 20_000_000


def min_flows(tops: int) -> float:
    """A flow picks each of `tops` top switches with probability 1/tops under ECMP: per
    switch a binomial count; below mean - 4 sigma a switch is not in the hash's choice."""
    p = 1 / tops
    return FLOWS * p - 4 * math.sqrt(FLOWS * p * (1 - p))


# A flow's datagrams on the wire: 64 B of payload, UDP, IPv4 and Ethernet headers.
DATAGRAM_WIRE_BYTES = 64 + 8 + 20 + 14
# The sender paces its flows to half the host's link rate: sent unpaced, 1,200
# datagrams overran the host NIC's 16-frame token bucket (emu/net.py
# host_nic_pacing), which dropped 821 of them (`tc -s qdisc` on h1), and the
# spread was graded on the third that crossed.
FLOW_GAP_S = DATAGRAMS_PER_FLOW * DATAGRAM_WIRE_BYTES * 8 / (RATE_BPS / 2)

SEND = """
import socket, sys, time
dst, dport, first, flows, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
gap = float(sys.argv[6])
for sport in range(first, first + flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", sport))
    for _ in range(n):
        s.sendto(b"x" * 64, (dst, dport))
    s.close()
    time.sleep(gap)
"""


def graph():
    """The two-tier fabric (the one `emu lab start ecmp-app` builds)."""
    return fabric_mod.leaf_spine(leaves=2, spines=SPINES, hosts_per_leaf=2, host_rate_bps=RATE_BPS)


def fat_tree():
    """The three-tier fabric: 4 pods, 4 cores, 16 hosts."""
    return fabric_mod.fat_tree(k=4, rate_bps=RATE_BPS, name="ecmp_fat_tree")


def uneven():
    """An offline-only fabric: leaves with different numbers of uplinks (2 and 3 spines)."""
    g = fabric_mod.leaf_spine(leaves=3, spines=3, hosts_per_leaf=1, host_rate_bps=RATE_BPS)
    g.remove_edge("leaf3", "spine3")
    return g


MORE_PICTURES = {"fat-tree.png": fat_tree}  # python -m emu.labs draws it beside topology.png

# (label, builder, source host, destination host, the top tier's role): the source and
# destination as far apart as the fabric allows, so that flows cross the top tier.
FABRICS = (
    ("leaf/spine", graph, "h1", "h3", "spine"),
    ("fat-tree k=4", fat_tree, "h1", "h16", "core"),
)


def policy_args(lab: LabRun) -> dict:
    """The Fabric options that run the student's policy in the controller."""
    return {"controller_args": ("--next-hops", str(lab.path("ecmp.py").resolve()))}


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    with lab.fabric(graph(), **policy_args(lab)) as fab:
        interactive(fab)


def top_rx(fab: Fabric, role: str) -> dict[str, int]:
    """Frames each switch of the top tier (`role`) has received, over all its ports."""
    return {
        sw: sum(p.rx_packets for p in fab.port_stats(sw).values())
        for sw in fabric_mod.switches(fab.graph)
        if fab.graph.nodes[sw]["role"] == role
    }


def check(lab: LabRun) -> None:
    for label, build, src, dst, role in FABRICS:
        g = build()
        folder = label.split()[0].replace("/", "-")
        fab = lab.open_fabric(
            f"[{label}] the fabric converges with your policy",
            "your next_hops raised or returned a port with no link behind it; the controller's "
            f"log says which: {lab.out_dir / folder}/controller.log (search for Traceback); "
            "`emu lab test ecmp-app` tries it without a fabric",
            g,
            folder,
            **policy_args(lab),
        )
        if fab is None:
            continue
        try:
            grade_fabric(lab, fab, label, src, dst, role)
        finally:
            lab.close_fabric(fab)


def grade_fabric(lab: LabRun, fab: Fabric, label: str, src: str, dst: str, role: str) -> None:
    """Ping, traced paths and real flows on one running fabric."""
    g = fab.graph
    hosts = fabric_mod.hosts(g)
    # Every pair on the small fabric; on the fat-tree, every host from both ends.
    pairs = [(a, b) for a in hosts for b in hosts if a != b]
    if len(hosts) > 4:
        pairs = [(a, b) for a in (src, dst) for b in hosts if a != b]
    unreachable = [f"{a}->{b}" for a, b in pairs if fab.ping(a, b, count=2)[1] == 0]
    lab.check(
        f"[{label}] hosts reach each other",
        not unreachable,
        f"{len(pairs) - len(unreachable)} of {len(pairs)} pairs"
        + (f" (not: {', '.join(unreachable[:4])})" if unreachable else ""),
        f"{len(pairs)} of {len(pairs)}",
        "a destination your next_hops returns no port for, or a port that leads away "
        "from it, is unreachable; `path h1 h3` in the lab's CLI shows where packets go",
    )
    shortest = nx.shortest_path_length(g, src, dst) + 1  # nodes on a shortest path
    problems, tops = [], set()
    for sport in range(FIRST_SPORT, FIRST_SPORT + TRACES):
        try:
            path = fab.trace_path(src, dst, "udp", sport, DPORT)
        except FabricError as exc:
            problems.append(f"udp {sport}: {exc}")
            continue
        if len(path) != shortest:
            problems.append(f"udp {sport}: {' '.join(path)} is longer than a shortest path")
        tops |= {n for n in path if g.nodes[n].get("role") == role}
    lab.check(
        f"[{label}] {TRACES} traced flows {src} -> {dst} take shortest paths, no loop",
        not problems,
        problems[0] if problems else f"all {TRACES} shortest, over {len(tops)} {role}s",
        f"{shortest - 2} switches each",
        "the switches traced each 5-tuple through their tables (the CLI's `path`). A "
        "loop means some switch sends a packet to a neighbour that is no closer to the "
        "destination (on a fat-tree, an aggregation switch sending back down into its own "
        "pod): return only neighbours one hop closer. `emu lab test ecmp-app` finds it "
        "without a fabric",
    )
    if any("loops at" in problem for problem in problems):
        # Each datagram would circle until its TTL ran out: a flood, not a measurement.
        lab.check(
            f"[{label}] {FLOWS} UDP flows {src} -> {dst} spread over the {role}s",
            False,
            "not sent: the traced flows loop (above), and real ones would circle the fabric",
            "no loop first",
            "fix the loop (above), then the spread is measured",
        )
        return
    before = top_rx(fab, role)
    argv = [sys.executable, "-c", SEND, g.nodes[dst]["ip"], str(DPORT), str(FIRST_SPORT)]
    fab.host_run(
        src, argv + [str(FLOWS), str(DATAGRAMS_PER_FLOW), str(FLOW_GAP_S)], timeout_s=60, check=True
    )
    total = FLOWS * DATAGRAMS_PER_FLOW
    try:
        wait_for(
            lambda: sum(top_rx(fab, role).values()) - sum(before.values()) >= total,
            10.0,
            f"{total} datagrams to cross the {role}s",
        )
    except FabricError:
        pass  # graded below on what did cross
    after = top_rx(fab, role)
    flows = {
        sw: max(0, after[sw] - before[sw] - BACKGROUND_FRAMES) / DATAGRAMS_PER_FLOW for sw in after
    }
    floor = min_flows(len(flows))
    shown = ", ".join(f"{sw} {n:.0f}" for sw, n in sorted(flows.items()))
    lab.check(
        f"[{label}] {FLOWS} UDP flows {src} -> {dst} spread over the {len(flows)} {role}s",
        all(n >= floor for n in flows.values()),
        f"flows per {role}: {shown}",
        f">= {floor:.1f} on each (ECMP's binomial mean {FLOWS / len(flows):.0f} minus 4 sigma)",
        "a switch spreads flows only over the ports you return: return every neighbour that "
        "is one hop closer to the destination (networkx's shortest-path lengths give the "
        "distances), not the first hop of one shortest path",
    )


# ----------------------------------------------------------------- offline


def switch_view(g) -> tuple[nx.DiGraph, dict[int, str]]:
    """The topology as routing hands it to next_hops (dpids, "port" on each directed link),
    and each dpid's switch name for messages."""
    names = {g.nodes[s]["dpid"]: s for s in fabric_mod.switches(g)}
    view = nx.DiGraph()
    view.add_nodes_from(names)
    for u, v, d in g.edges(data=True):
        if g.nodes[u]["kind"] == "switch" and g.nodes[v]["kind"] == "switch":
            view.add_edge(g.nodes[u]["dpid"], g.nodes[v]["dpid"], port=d["ports"][u])
            view.add_edge(g.nodes[v]["dpid"], g.nodes[u]["dpid"], port=d["ports"][v])
    return view, names


def load_policy(path: Path):
    """The student's next_hops, loaded as the controller loads it; a LabError names why not."""
    spec = importlib.util.spec_from_file_location("student_next_hops", path)
    if spec is None or spec.loader is None:
        raise LabError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a student's file: any error is theirs to see, named
        raise LabError(f"{path}: {type(exc).__name__}: {exc}") from None
    policy = getattr(module, "next_hops", None)
    if not callable(policy):
        raise LabError(f"{path}: defines no function next_hops(topology, switch, destination)")
    return policy


def policy_faults(policy, g) -> dict[str, list[str]]:
    """What is wrong with `policy` on fabric `g`, per property (an empty list: none).

    Pure: calls the policy for every (switch, destination switch) pair, as the
    controller does, and follows the next hops it returns.
    """
    view, names = switch_view(g)
    faults: dict[str, list[str]] = {"runs": [], "links": [], "loops": [], "shortest": [], "all": []}
    port_to = {(u, d["port"]): v for u, v, d in view.edges(data=True)}
    dist_to = {
        dst: nx.single_source_shortest_path_length(view.reverse(copy=False), dst) for dst in view
    }
    for dst in sorted(view):
        hops: dict[int, set[int]] = {}
        for sw in sorted(view):
            if sw == dst:
                continue
            try:
                ports = set(policy(view.copy(), sw, dst) or ())
            except Exception as exc:  # a student's function: its error is the finding
                faults["runs"].append(
                    f"next_hops(topology, {sw}, {dst}) [{names[sw]} towards {names[dst]}] "
                    f"raised {type(exc).__name__}: {exc}"
                )
                continue
            bad = sorted(p for p in ports if (sw, p) not in port_to)
            if bad:
                faults["links"].append(
                    f"{names[sw]} towards {names[dst]}: port(s) {bad} lead to no switch"
                )
            hops[sw] = {port_to[(sw, p)] for p in ports if (sw, p) in port_to}
            closer = {v for v in view.successors(sw) if dist_to[dst].get(v) == dist_to[dst][sw] - 1}
            if hops[sw] - closer:
                far = sorted(names[v] for v in hops[sw] - closer)
                faults["shortest"].append(
                    f"{names[sw]} towards {names[dst]}: not closer to it: {', '.join(far)}"
                )
            if closer - hops[sw]:
                faults["all"].append(
                    f"{names[sw]} towards {names[dst]}: uses {len(hops[sw] & closer)} of its "
                    f"{len(closer)} next hops on shortest paths"
                )
        cycle = _a_cycle(hops)
        if cycle:
            faults["loops"].append(
                f"towards {names[dst]}: {' -> '.join(names[n] for n in cycle)} is a loop"
            )
        stuck = sorted(names[sw] for sw, nxt in hops.items() if not nxt)
        if stuck:
            faults["runs"].append(f"towards {names[dst]}: {', '.join(stuck)} return no port")
    return faults


def _a_cycle(hops: dict[int, set[int]]) -> list[int]:
    """One cycle in the next-hop graph (switch -> each next hop), closed; [] if none."""
    g = nx.DiGraph()
    g.add_edges_from((u, v) for u, vs in hops.items() for v in vs)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return []
    return [u for u, _ in cycle] + [cycle[0][0]]


OFFLINE_PROPERTIES = (
    ("runs", "next_hops answers every switch and destination", "a port set for each"),
    ("links", "every port returned leads to another switch", "only ports with a link"),
    ("loops", "no loop: following the next hops always ends at the destination", "no loop"),
    ("shortest", "every next hop is on a shortest path", "only shortest paths"),
    ("all", "every next hop on a shortest path is used (ECMP)", "all of them"),
)


def offline(lab: LabRun) -> None:
    """`emu lab test ecmp-app`: the student's next_hops on three fabrics' graphs, no root."""
    policy = load_policy(lab.path("ecmp.py"))
    for label, build in (("leaf/spine", graph), ("fat-tree k=4", fat_tree), ("uneven", uneven)):
        faults = policy_faults(policy, build())
        for key, name, what in OFFLINE_PROPERTIES:
            found = faults[key]
            lab.check(
                f"[{label}] {name}",
                not found,
                found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                if found
                else "yes",
                what,
                OFFLINE_HINTS[key],
            )


OFFLINE_HINTS = {
    "runs": "every switch that is not the destination needs at least one port; an exception "
    "in next_hops is the controller's crash too",
    "links": 'return port numbers from topology.edges[switch, neighbour]["port"], not '
    "neighbours' datapath ids",
    "loops": "a next hop that is not closer to the destination can send the packet back: "
    "on a fat-tree an aggregation switch must not send down into its own pod unless the "
    "destination is there",
    "shortest": "compare distances to the destination: a next hop's must be one less than "
    "the switch's",
    "all": "return every neighbour one hop closer, not the first hop of one shortest path",
}
