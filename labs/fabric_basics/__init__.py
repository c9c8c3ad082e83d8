"""Lab fabric_basics: a leaf/spine, one packet traced hop by hop, flow tables, an ECMP choice.

The student answers four questions in `answers.yaml` from what the running
fabric shows them (the CLI's `path`, `ctl SWITCH flows|groups`, tcpdump on a
spine port). The instance's seed (emu/labs.py) is the fabric's ECMP hash
seed, so which spine each flow takes differs from student to student. The
check builds the same fabric (same seed, so the same hash choices), sends the
flows in question as real datagrams, reads the switches' port counters and
group table (`measure`), and compares each answer with what the packets did
(`grade`, pure: it never prints the right answer).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from emu import fabric as fabric_mod
from emu import topofile
from emu.labs import LabRun
from emu.net import Fabric, wait_for

TITLE = "Fabric basics: trace a packet, read flow tables, explain an ECMP choice"
MINUTES = 30
ORDER = 1
GRADES = "which switches and which spine real datagrams crossed, the group's buckets"
FILES = ("answers.yaml",)

SEED = 0  # the reference instance's ECMP hash seed: solution/ answers it
KEYS = (
    "switches_h1_to_h3",
    "buckets_leaf1_to_h3",
    *(f"spine_for_udp_{sport}_to_h3_4000" for sport in (40000, 40001)),
)
DPORT = 4000
SPORTS = (40000, 40001)
DATAGRAMS = 200
# A few frames of LLDP and ARP cross every link while the check runs.
BACKGROUND_FRAMES = 30

GROUP_ACTION = re.compile(r"OFPActionGroup\(group_id=(\d+)")

SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("", int(sys.argv[1])))
for _ in range(int(sys.argv[4])):
    s.sendto(b"x" * 64, (sys.argv[2], int(sys.argv[3])))
"""


FABRIC_FILE = Path(__file__).with_name("fabric.yaml")


def graph():
    """The lab's fabric, from its topology file (the same graph as leaf_spine(2, 2, 2))."""
    return topofile.load(FABRIC_FILE)


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    with lab.fabric(graph(), seed=lab.seed) as fab:
        interactive(fab)


def rx_packets(fab: Fabric) -> dict[str, int]:
    """Frames every switch has received, summed over its ports."""
    return {
        sw: sum(p.rx_packets for p in fab.port_stats(sw).values())
        for sw in fabric_mod.switches(fab.graph)
    }


def crossed_by(fab: Fabric, sport: int) -> list[str]:
    """The switches that `DATAGRAMS` real datagrams h1:sport -> h3:DPORT went through."""
    before = rx_packets(fab)
    dst = fab.graph.nodes["h3"]["ip"]
    fab.host_run(
        "h1", [sys.executable, "-c", SEND, str(sport), dst, str(DPORT), str(DATAGRAMS)], check=True
    )

    def arrived() -> bool:
        return rx_packets(fab)["leaf2"] - before["leaf2"] >= DATAGRAMS

    wait_for(arrived, 10.0, f"{DATAGRAMS} datagrams from h1 to reach leaf2")
    after = rx_packets(fab)
    crossed = {sw for sw in after if after[sw] - before[sw] >= DATAGRAMS - BACKGROUND_FRAMES}
    # In the order a packet meets them: the first leaf, the spine, the last leaf.
    return sorted(crossed, key=lambda sw: (sw != "leaf1", sw.startswith("leaf"), sw))


def buckets_towards(fab: Fabric, switch: str, host: str) -> int:
    """Buckets of the group that `switch`'s route to `host` points at (0: no group)."""
    ip = fab.graph.nodes[host]["ip"]
    groups = fab.groups(switch)
    for flow in fab.flows(switch):
        if str(flow.match.get("ipv4_dst", "")).split("/")[0] != ip:
            continue
        for instruction in flow.instructions:
            found = GROUP_ACTION.search(instruction)
            if found and int(found.group(1)) in groups:
                return len(groups[int(found.group(1))].buckets)
    return 0


def _same(answer, measured) -> bool:
    return str(answer).strip().lower() == str(measured).strip().lower()


def _is_number(answer) -> bool:
    return str(answer).strip().isdigit()


def measure(lab: LabRun) -> dict:
    """What the packets did: the switches each flow's datagrams crossed, leaf1's buckets."""
    with lab.fabric(graph(), seed=lab.seed) as fab:
        paths = {sport: crossed_by(fab, sport) for sport in SPORTS}
        buckets = buckets_towards(fab, "leaf1", "h3")
    return {"paths": paths, "buckets": buckets}


def check(lab: LabRun) -> None:
    answers = lab.answers(keys=KEYS)
    grade(lab, answers, measure(lab))


def grade(lab: LabRun, answers: dict, measured: dict) -> None:
    """Each answer against what the packets did; a wrong one is told what is wrong with it."""
    spines = [n for n in graph() if n.startswith("spine")]
    first = measured["paths"][SPORTS[0]]
    _count(
        lab,
        "1. switches from h1 to h3",
        answers.get("switches_h1_to_h3"),
        len(first),
        "not the number of switches whose counters the datagrams moved",
        "in the lab's CLI, `path h1 h3` lists every node a packet crosses; count the "
        "switches, not the hosts",
    )
    _count(
        lab,
        "2. buckets in leaf1's group towards h3",
        answers.get("buckets_leaf1_to_h3"),
        measured["buckets"],
        "not the number of buckets in that group of leaf1's group table",
        "`ctl leaf1 flows` shows the flow for h3's address and the group it sends to; "
        "`ctl leaf1 groups` shows that group's buckets, one per uplink",
    )
    for n, sport in enumerate(SPORTS, start=3):
        crossed = next((sw for sw in measured["paths"][sport] if sw in spines), None)
        key = f"spine_for_udp_{sport}_to_h3_{DPORT}"
        answer = answers.get(key)
        named = str(answer or "").strip().lower()
        if crossed is None:
            wrong = "no spine's counters moved: a lab defect, not your answer; please report it"
        elif not named:
            wrong = f"fill in `{key}:` in answers.yaml"
        elif named not in spines:
            wrong = "not a spine of this fabric (`net` in the lab's CLI lists the switches)"
        else:
            wrong = f"{named} received none of these datagrams"
        lab.grade(
            f"{n}. the spine UDP {sport} -> h3:{DPORT} crosses",
            crossed is not None and named == crossed,
            answer,
            wrong,
            f"`path h1 h3 udp {sport} {DPORT}` asks each switch where it would send the "
            f"packet; confirm it on the wire with `SPINE tcpdump -ni any udp port {DPORT}` "
            "on each spine while h1 sends. The source port is part of the ECMP hash, and "
            "the hash seed is your instance's own: a neighbour's answer need not be yours",
        )


def _count(lab: LabRun, name: str, answer, truth: int, wrong: str, hint: str) -> None:
    if answer is None or str(answer).strip() == "":
        wrong = "fill it in: a number"
    elif not _is_number(answer):
        wrong = "not a number"
    lab.grade(name, _same(answer, truth), answer, wrong, hint)


def offline(lab: LabRun) -> None:
    """`emu lab test fabric_basics`: the answers file reads, each answer of the right kind."""
    answers = lab.answers(keys=KEYS)
    lab.check("answers.yaml reads", True, "valid YAML", "valid YAML", "")
    spines = sorted(n for n in graph() if n.startswith("spine"))
    for key in KEYS:
        answer = answers.get(key)
        if key.startswith("spine_"):
            ok = str(answer or "").strip().lower() in spines
            kind = "a spine's name"
        else:
            ok = answer is not None and _is_number(answer)
            kind = "a number"
        lab.check(
            f"{key} is {kind}",
            ok,
            "(blank)" if answer is None else repr(answer),
            kind,
            "see the comment above it in answers.yaml; whether it is right is graded on "
            "packets: sudo emu lab check fabric_basics",
        )
