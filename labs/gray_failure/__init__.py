"""Lab gray_failure: one link silently loses 1% of its frames; find it from counters and
retransmissions.

Owns the lab's fabric (three leaves, two spines, two hosts per leaf), the choice
of the faulty link (from the instance's seed, emu/labs.py: each student has
their own; the reference seed is the one solution/ answers), the
TCP workload that crosses every leaf-spine link in both directions, and the
grading. The fault is emu's lossy link (`emu.faults.Faults.lossy_link`) in one
direction only, as a failing transmitter or one bad fibre of a pair loses
frames one way: the sending port counts each lost frame as sent, the receiving
port never sees it, and the TCP flows whose data crosses it retransmit.
Nothing else tells: the link stays up, routing keeps using it, and nearly
every ping is answered (Huang et al., "Gray Failure: The Achilles' Heel of
Cloud-Scale Systems", HotOS 2017).

The student names the link and its direction in `answers.yaml`. The check
runs the same fabric and fault again (same seed, `measure`) and grades the
answer against it (`grade`, pure), and it first finds the link itself from
what a student can read: the port counters of both ends of every link, and
the TCP retransmissions of flows whose paths the switches trace. If a change
to emu hid the fault from either, that check fails here, instead of leaving a
lab that cannot be solved. Until the student has named the link, the report
never does: not in the answer's check (it says what is wrong with the link
named), not in the evidence (it says that one link stands out, not which).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from emu import fabric as fabric_mod
from emu import fidelity
from emu.answers import PortStats
from emu.labs import LabRun
from emu.net import Fabric, FabricError, wait_for

TITLE = "Gray failure: one link loses 1% of its frames; find it without being told"
MINUTES = 40
ORDER = 6
GRADES = (
    "the link and direction you name, against a fresh run in which the check finds the "
    "lossy link itself from port counters and TCP retransmissions"
)
FILES = ("answers.yaml",)

SEED = 2017  # the reference instance (the HotOS paper's year): solution/ answers it
LOSS = 0.01  # the gray failure: one link loses 1% of its frames
RATE_BPS = 10_000_000
# Every host sends two bulk TCP flows and receives two, each with a 16 KB
# socket buffer (iperf3 -w): enough window to fill its share of a 10 Mbit/s
# link (the unloaded round trip is a few ms), too little for the twelve flows
# together to fill the switches' shared buffer (1 MiB, emu/config.py), so no
# queue overflows anywhere. Every frame lost and every segment resent is then
# the faulty link's doing, not congestion's. The flows are not rate-limited:
# a paced, application-limited flow goes idle between its writes, and Linux's
# tail-loss probes (RFC 8985) then resend segments that were never lost. And
# the hosts send without emu's NIC qdisc (`host_nic_pacing=False`): its
# 16-frame queue dropped segments when a host's two flows and its ACKs
# burst together, and TCP resent those too. What a host sends waits instead
# in the switches' egress queues, which send at the links' rate, in a buffer
# these windows cannot fill (each flow gets about 4.5 Mbit/s: its receiver's
# link is shared by two).
FLOW_WINDOW = "16K"
FLOW_SECONDS = 8
# `emu lab start`: the flows run for a minute, long enough to read `ss -ti` in the
# hosts; then the counters stand still and both ends of a link can be compared.
LIVE_SECONDS = 60
FIRST_SERVER_PORT = 5301
FIRST_CLIENT_PORT = 40000
# Source ports tried to pin a flow to a spine: the leaf's ECMP hash sends each
# to one of two spines, so 64 tries all missing one spine happen with p = 2^-64.
CLIENT_PORT_TRIES = 64
MSS_BYTES = 1448  # TCP payload per segment: 1500-byte MTU, IP and TCP headers, timestamps
# A flow "retransmits" when it resent at least a quarter of what the fault
# takes (a flow through the faulty link resends about 1% of its segments; a
# flow elsewhere, with no congestion anywhere, none).
RETRANS_SHARE_FLOOR = LOSS / 4
# Longest a frame takes from its sender's count to its receiver's once the flows
# have ended: the links have no delay and the queues are empty, so it is one pass
# of the receiving switch's loop; 0.2 s is over fifteen times the longest stall
# a faithful run has (fidelity.Limits: 10 frame times, 12 ms at 10 Mbit/s).
CROSSING_S = 0.2


def graph():
    return fabric_mod.leaf_spine(leaves=3, spines=2, hosts_per_leaf=2, host_rate_bps=RATE_BPS)


def fabric(lab: LabRun, label: str = ""):
    return lab.fabric(graph(), label, host_nic_pacing=False)  # see FLOW_WINDOW


def fabric_links(g) -> list[tuple[str, str]]:
    """Every directed leaf-spine link (sending switch, receiving switch), in a fixed order."""
    return sorted(
        (a, b)
        for u, v, d in g.edges(data=True)
        if d["tier"] == "leaf-spine"
        for a, b in ((u, v), (v, u))
    )


def lossy_link(g, seed: int = SEED) -> tuple[str, str]:
    """The link that loses frames in instance `seed`: (the switch whose port sends them,
    the one that misses them)."""
    return random.Random(seed).choice(fabric_links(g))


def _num(name: str) -> int:
    return int("".join(c for c in name if c.isdigit()))


@dataclass
class Flow:
    """One TCP flow of the workload, pinned to one spine by its source port."""

    src: str
    dst: str
    spine: str
    server_port: int
    client_port: int = 0
    path: list[str] = field(default_factory=list)
    retransmits: int = 0
    sent_bytes: int = 0

    @property
    def links(self) -> set[tuple[str, str]]:
        """The directed links its data crosses, its hosts' own links included."""
        return set(zip(self.path, self.path[1:]))

    @property
    def resent_share(self) -> float:
        segments = self.sent_bytes / MSS_BYTES
        return self.retransmits / segments if segments else 0.0

    def __str__(self) -> str:
        return f"{self.src}->{self.dst} via {self.spine}"


def plan(g) -> list[Flow]:
    """One flow per (source leaf, destination leaf, spine): every directed leaf-spine link
    carries the data of two flows. The two flows that share a link come from different
    hosts and go to different hosts, so that the one link their paths share is that one;
    and each host sends two flows and receives two."""
    switches = fabric_mod.switches(g)
    leaves = sorted((s for s in switches if g.nodes[s]["role"] == "leaf"), key=_num)
    spines = sorted((s for s in switches if g.nodes[s]["role"] == "spine"), key=_num)
    hosts = {
        leaf: sorted((h for h in g.neighbors(leaf) if g.nodes[h]["kind"] == "host"), key=_num)
        for leaf in leaves
    }
    flows = []
    for a in leaves:
        for b in leaves:
            if a == b:
                continue
            to_b = [x for x in leaves if x != a].index(b)  # which of a's two peers b is
            from_a = [x for x in leaves if x != b].index(a)  # which of b's two peers a is
            for i, spine in enumerate(spines):
                src = hosts[a][(i + to_b) % len(hosts[a])]
                dst = hosts[b][(i + from_a) % len(hosts[b])]
                flows.append(Flow(src, dst, spine, FIRST_SERVER_PORT + len(flows)))
    return flows


def pin(fab: Fabric, flows: list[Flow]) -> None:
    """Give each flow a source port that the leaves' ECMP hash sends over its spine.

    The switches trace each candidate 5-tuple through their own tables
    (`Fabric.trace_path`, the CLI's `path`), so the flows' paths are the ones
    their frames take.
    """
    sport = FIRST_CLIENT_PORT
    for flow in flows:
        for _ in range(CLIENT_PORT_TRIES):
            sport += 1
            path = fab.trace_path(flow.src, flow.dst, "tcp", sport, flow.server_port)
            if flow.spine in path:
                flow.client_port, flow.path = sport, path
                break
        else:
            raise FabricError(
                f"no source port of {CLIENT_PORT_TRIES} sends {flow} over {flow.spine}"
            )


def start_flows(
    fab: Fabric, flows: list[Flow], seconds: int, json_dir: Path | None = None
) -> list[subprocess.Popen]:
    """An iperf3 server per flow, then every client at once (bulk TCP, JSON out).

    With `json_dir`, each client writes its JSON report to `<src>-<dst>.json` there;
    without, to a pipe that `finish_flows` reads.
    """
    for flow in flows:
        fab.popen(
            flow.dst,
            ["iperf3", "-s", "-1", "-p", str(flow.server_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    for flow in flows:
        wait_for(
            lambda flow=flow: fab.host_run(
                flow.dst, ["ss", "-Hltn", f"sport = :{flow.server_port}"]
            ).stdout.strip(),
            10.0,
            f"the iperf3 server of {flow} on {flow.dst}:{flow.server_port}",
        )
    if json_dir is not None:
        json_dir.mkdir(parents=True, exist_ok=True)
    clients = []
    for flow in flows:
        argv = ["iperf3", "-c", fab.graph.nodes[flow.dst]["ip"], "-p", str(flow.server_port)]
        argv += ["--cport", str(flow.client_port), "-w", FLOW_WINDOW, "-t", str(seconds), "-J"]
        if json_dir is None:
            out = subprocess.PIPE
        else:
            # Closed below, once the client holds its own copy.
            out = open(json_dir / f"{flow.src}-{flow.dst}.json", "w")
        try:
            clients.append(
                fab.popen(flow.src, argv, stdout=out, stderr=subprocess.DEVNULL, text=True)
            )
        finally:
            if json_dir is not None:
                out.close()
    return clients


def finish_flows(fab: Fabric, flows: list[Flow], clients: list[subprocess.Popen]) -> None:
    """Wait for every client; each flow's retransmissions and bytes from iperf3's JSON."""
    for flow, client in zip(flows, clients):
        try:
            out, _ = client.communicate(timeout=FLOW_SECONDS + 30)
        finally:
            fab.stop_proc(client)
        doc = json.loads(out or '{"error": "no output"}')
        if "error" in doc:
            raise FabricError(f"iperf3 {flow}: {doc['error']}")
        sent = doc["end"]["sum_sent"]
        flow.retransmits, flow.sent_bytes = sent.get("retransmits", 0), sent["bytes"]


def port_counters(fab: Fabric) -> dict[str, dict[int, PortStats]]:
    """Every switch's port counters now, as `ctl SWITCH ports` shows them."""
    return {sw: fab.port_stats(sw) for sw in fabric_mod.switches(fab.graph)}


def link_counts(fab: Fabric) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per directed leaf-spine link, now: (frames sent, fewest missing, most missing).

    A frame is missing when the sender's port counted it sent (tx_pkts) and the
    receiver's port neither received it (rx_pkts) nor saw the kernel drop it
    before the switch could read it (rx_drop). Two switches cannot be read at
    the same instant, and frames (LLDP, ARP) cross between two reads, so every
    counter is read twice, CROSSING_S apart: what was sent by the first read and
    not received by the second is missing for sure; what was sent by the second
    and not received by the first is the most that can be.
    """
    g = fab.graph
    first = port_counters(fab)
    # The gap is what makes the first bound sure (frames the first read counted
    # sent have arrived by the second), not a wait for something to happen.
    time.sleep(CROSSING_S)
    second = port_counters(fab)
    out = {}
    for u, v in fabric_links(g):
        tx_port, rx_port = g.edges[u, v]["ports"][u], g.edges[u, v]["ports"][v]
        sent = [snap[u][tx_port].tx_packets for snap in (first, second)]
        received = [
            snap[v][rx_port].rx_packets + snap[v][rx_port].rx_dropped for snap in (first, second)
        ]
        out[(u, v)] = (sent[1], sent[0] - received[1], sent[1] - received[0])
    return out


def missing_frames(before: dict, after: dict) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per directed leaf-spine link, between two `link_counts`: (frames sent, fewest
    missing, most missing).

    Only frames of the measurement count: a switch's first frames, sent before
    its peer's switch had bound its port, are missing too (the peer's kernel
    drops them with no one to hand them to: rx_dropped 1 on its interface, in
    `ip -s link`, not in the switch's counters), on a link the lab did not fault.
    """
    out = {}
    for link, (sent, fewest, most) in after.items():
        sent_before, fewest_before, most_before = before[link]
        out[link] = (sent - sent_before, fewest - most_before, most - fewest_before)
    return out


def inject(fab: Fabric, seed: int) -> tuple[str, str]:
    sender, receiver = lossy_link(fab.graph, seed)
    fab.faults.lossy_link(sender, receiver, LOSS, only_from=sender)
    return sender, receiver


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    with fabric(lab) as fab:
        inject(fab, lab.seed)
        flows = plan(fab.graph)
        pin(fab, flows)
        reports = lab.out_dir / "iperf3"
        start_flows(fab, flows, LIVE_SECONDS, json_dir=reports)
        print(
            f"{len(flows)} TCP flows (iperf3, server ports "
            f"{flows[0].server_port}..{flows[-1].server_port}) cross every leaf-spine link "
            f"for {LIVE_SECONDS} s; their iperf3 reports go to {reports}/. One link loses "
            "1% of the frames it carries, one way. Which?"
        )
        interactive(fab)


def answer(lab: LabRun) -> tuple[str, str] | None:
    """(from, to) as the student wrote them; None while either is blank."""
    doc = lab.answers()
    ends = tuple(str(doc.get(k) or "").strip() for k in ("from", "to"))
    return None if "" in ends else ends


WHERE_TO_LOOK = (
    "for each leaf-spine link, compare the frames one end sent (tx_pkts in `ctl SWITCH "
    "ports`) with those the other end received (rx_pkts + rx_drop); on a healthy link "
    "they agree to within a few frames (`net` shows which port faces which switch). Then "
    "check it with TCP: `h1 ss -ti` shows each connection's retrans, `path SRC DST tcp "
    "SPORT DPORT` its spine"
)
ANSWER = "the lossy link, in the direction that loses frames"


def check(lab: LabRun) -> None:
    g = graph()
    named = answer(lab)
    if named is None or named not in fabric_links(g):
        grade(lab, named, lossy_link(g, lab.seed), None)  # nothing to measure for it
        return
    grade(lab, named, lossy_link(g, lab.seed), measure(lab))


def measure(lab: LabRun) -> dict:
    """The fault again on a fresh fabric: every link's missing frames, every flow's resends."""
    g = graph()
    label = "check"  # apart from `emu lab start`'s run: its own logs and pcaps
    with fabric(lab, label) as fab:
        inject(fab, lab.seed)
        flows = plan(g)
        pin(fab, flows)
        before = link_counts(fab)
        clients = start_flows(fab, flows, FLOW_SECONDS)
        finish_flows(fab, flows, clients)
        counts = missing_frames(before, link_counts(fab))
    # Evidence that is not there is a defect of the lab, unless the emulator fell
    # behind its links (a kernel drop shows as a missing frame): say which.
    verdict = fidelity.judge(lab.fabrics.latest_records())
    late = "; ".join(f.text for f in verdict.failures()) if not verdict.faithful else ""
    return {"counts": counts, "flows": flows, "late": late, "out": lab.out_dir / label}


def grade(lab: LabRun, named, faulty: tuple[str, str], m: dict | None) -> None:
    """The answer `named` (None: blank) against the `faulty` link, with the evidence of
    the measured run `m` (None: the answer was not a link, nothing was run)."""
    links = fabric_links(graph())
    if named is None:
        lab.grade(
            ANSWER,
            False,
            None,
            "fill in `from:` and `to:` in answers.yaml",
            f"{WHERE_TO_LOOK}; `from` is the end whose port counts more frames sent than "
            "the other end counts received",
        )
        return
    if named not in links:
        lab.grade(
            ANSWER,
            False,
            f"from {named[0]} to {named[1]}",
            f"{named[0]} and {named[1]} are not the two ends of one leaf-spine link",
            "`net` in the lab's CLI lists every link and the ports at its ends",
        )
        return
    assert m is not None
    if m["late"]:
        defect = f"not your answer: the emulator fell behind ({m['late']}); check again"
    else:
        defect = f"a lab defect, not your answer: please report it with {m['out']}"
    # Once the student named the link, the evidence may name it too.
    revealed = named == faulty
    grade_counters(lab, faulty, m["counts"], defect, revealed)
    grade_retransmissions(lab, faulty, m["flows"], defect, revealed)
    lab.grade(
        ANSWER,
        revealed,
        f"from {named[0]} to {named[1]}",
        f"frames from {named[0]} to {named[1]} arrive: that direction of that link loses "
        "none (each direction of a link is its own fibre: the loss is one way only)",
        f"{WHERE_TO_LOOK}; `from` is the end whose port counts more frames sent than the "
        "other end counts received",
    )


def _withheld(lab: LabRun, lines: list[str]) -> str:
    """Evidence that names the lossy link, kept out of the report and written to a file."""
    path = lab.out_dir / "evidence.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def grade_counters(lab: LabRun, faulty, counts, defect: str, revealed: bool = True) -> None:
    """The port counters show one link, the faulty one, short of frames; the others whole.

    Unless `revealed` (the student named the link), the report says that one link
    stands out, and how far, but not which.
    """
    found = max(counts, key=lambda link: counts[link][1])
    sent, fewest, _ = counts[faulty]
    # Binomial: the faulty link loses LOSS of what it sends; fewer than the mean
    # minus 4 sigma missing, it is not losing that (or the counters hide it).
    floor = max(LOSS * sent - 4 * math.sqrt(sent * LOSS * (1 - LOSS)), 1)
    rest = [c for link, c in counts.items() if link != faulty]
    # Each link's count is an interval (missing_frames): frames cross between the
    # reads of two switches, so the interval widens with the LLDP and ARP sent
    # while the switches were read, and a healthy link's interval holds zero, however
    # wide. Below zero on both reads are frames a receiver counted that its peer
    # switch never sent: the kernel's own IPv6 router solicitations and MLD reports
    # (4 to 6 of them) did that until the switches' ports had IPv6 turned off
    # (emu/switch/node.py).
    lowest, others = min(fewest for _, fewest, _ in rest), max(most for _, _, most in rest)
    whole = all(fewest <= 0 <= most for _, fewest, most in rest)
    passed = found == faulty and fewest >= floor and whole
    value = (
        f"{found[0]}->{found[1]}: {counts[found][1]} of {counts[found][0]} frames missing; "
        f"every other link {lowest} to {others}"
    )
    if not revealed:
        if passed:
            value = (
                f"one link: {counts[found][1]} of {counts[found][0]} frames missing; every "
                f"other link {lowest} to {others} (which link: that is your question)"
            )
        else:
            value = f"no single link stands out (the figures name the lossy link: {_withheld(lab, [value])})"
    lab.check(
        "evidence: port counters show one link short of frames",
        passed,
        value,
        f"the faulty link >= {floor:.0f} missing (1% of what it sent, binomial mean - 4 "
        "sigma), every other link's interval holding 0 (frames in flight between reads)",
        "the lossy link no longer shows in the port counters (tx of one end against rx of "
        f"the other); {defect}",
    )


def grade_retransmissions(
    lab: LabRun, faulty, flows: list[Flow], defect: str, revealed: bool = True
) -> None:
    """TCP's retransmissions point at the same link: the only link that every flow which
    resent segments crosses and no flow that resent none does (tomography, as in 007:
    Arzani et al., NSDI 2018)."""
    bad = [f for f in flows if f.resent_share >= RETRANS_SHARE_FLOOR]
    clean = [f for f in flows if f.resent_share < RETRANS_SHARE_FLOOR]
    suspects = set.intersection(*(f.links for f in bad)) if bad else set()
    for f in clean:
        suspects -= f.links
    shown = ", ".join(f"{f} ({f.retransmits})" for f in bad) or "none"
    value = (
        f"flows that resent >= {RETRANS_SHARE_FLOOR:.2%} of segments: {shown}; the only link "
        f"all of them cross and no clean flow does: "
        f"{', '.join(f'{u}->{v}' for u, v in sorted(suspects)) or 'none'}"
    )
    expected = f"{faulty[0]}->{faulty[1]}"
    if not revealed:
        # The flows and their spines would name the link as surely as the link itself.
        if suspects == {faulty}:
            value = (
                f"{len(bad)} of {len(flows)} flows resent >= {RETRANS_SHARE_FLOOR:.2%} of their "
                "segments, and exactly one link is crossed by all of them and by no clean flow"
            )
        else:
            value = (
                f"the flows do not single out one link (details name it: {_withheld(lab, [value])})"
            )
        expected = "one link, the lossy one (found by the check; yours to find)"
    lab.check(
        "evidence: TCP retransmissions point at the same link",
        suspects == {faulty},
        value,
        expected,
        "the TCP flows do not single out the lossy link (those through it resend about "
        f"1% of their segments, the others none); {defect}",
    )


def offline(lab: LabRun) -> None:
    """`emu lab test gray_failure`: the answer reads and names a link of the fabric."""
    named = answer(lab)
    lab.check(
        "answers.yaml names `from` and `to`",
        named is not None,
        "blank" if named is None else f"from {named[0]} to {named[1]}",
        "two switches",
        "fill in `from:` and `to:`; whether the link is the lossy one is graded on "
        "packets: sudo emu lab check gray_failure",
    )
    if named is not None:
        lab.check(
            "they are the two ends of one leaf-spine link",
            named in fabric_links(graph()),
            f"from {named[0]} to {named[1]}",
            "a leaf-spine link",
            "`net` in the lab's CLI (sudo emu lab start gray_failure) lists every link",
        )
