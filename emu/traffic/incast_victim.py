"""An RDMA incast and a victim flow that shares its queues but none of its links: the
workload that credit-vs-pfc runs under PFC, PFC + DCQCN and InfiniBand-style credits.

Owns who sends (`Workload`: the incast's senders and receiver, the victim's pair and
its class), which links are captured (`Tap`: a pcap on a switch's interface, and the
end of the link whose data a credit audit checks), the run on a fabric its caller
opened (`run`: the captures, the NICs, every sender flooding for a while, the
bottleneck's queue sampled every SAMPLE_S, the switches' and NICs' answers read
through emu/answers.py into a `Collected`), what is measured of it (`measure`:
goodput per sender and the victim's, the bottleneck queue, drops, retransmissions,
CNPs, PAUSE and credit frames sent and counted on the wire, the seconds each port and
NIC was paused or blocked for credit, and on a credit fabric each tap replayed
against the credit advertised, emu/credit_audit.py), and report pieces for its
results (`table`, `panels`). The caller chooses the fabric, its QoS and flow
control, compares with emu/models/hol_blocking.py and checks: nothing here decides
what passes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
from scapy.layers.l2 import Ether
from scapy.utils import PcapReader

from emu import fabric as fabric_mod
from emu.answers import NicSample
from emu.credit_audit import audit
from emu.host.rnic import DSCP_SECOND_CLASS
from emu.proto import credit, pfc, roce
from emu.telemetry import Panel, start_capture
from emu.traffic.rdma import RdmaHosts, received_bps

SAMPLE_S = 0.05  # the bottleneck queue's sampling period
# How frames are classified (DESIGN.md; emu/switch/datapath.py): a priority under PFC,
# the virtual lane of the same number on a credit link (emu/credit.py).
DSCP_TO_VL = {roce.DSCP_DATA: 3, DSCP_SECOND_CLASS: 4, roce.DSCP_CNP: 6}
INCAST_PRIO = DSCP_TO_VL[roce.DSCP_DATA]  # the incast's class: its queue, pauses and credit


@dataclass(frozen=True)
class Workload:
    """Who sends: every sender floods `receiver`; the victim's flow runs beside them,
    on the incast's class or (`victim_dscp`, e.g. DSCP_SECOND_CLASS) one of its own."""

    senders: tuple[str, ...]
    receiver: str
    victim: tuple[str, str]  # (source, destination)
    victim_dscp: int = roce.DSCP_DATA

    @property
    def hosts(self) -> list[str]:
        """Every host with a NIC in the run, sorted."""
        return sorted({*self.senders, self.receiver, *self.victim})

    @property
    def victim_vl(self) -> int:
        """The victim's priority (PFC) or virtual lane (credits)."""
        return DSCP_TO_VL[self.victim_dscp]


@dataclass(frozen=True)
class Tap:
    """A link captured on `switch`'s interface towards `peer`. A credit audit of it checks
    the data frames that `sender` (one of the two ends) sends, on the victim's lane if the
    link carries the victim's flow alone (`victim_only`), else on the incast's."""

    switch: str
    peer: str
    sender: str
    victim_only: bool = False

    @property
    def receiver(self) -> str:
        """The end that receives the audited data (and returns the credit)."""
        return self.peer if self.sender == self.switch else self.switch


@dataclass(frozen=True)
class Collected:
    """What one run read while its fabric was up (emu/answers.py's types)."""

    t0: float  # monotonic time the senders posted: the clock of the NICs' samples
    wall0: float  # unix time of the same moment: the clock of the switches' snapshots
    end: float  # monotonic time the senders were stopped being measured
    samples: list  # [QueueSnapshot] of the bottleneck's switch, every SAMPLE_S
    rx: dict  # receiving host (the receiver, the victim's destination) -> [NicSample]
    nic_stats: dict  # host -> NicStats
    counters: dict  # switch -> SwitchCounters
    macs: dict  # switch interface name -> its MAC
    qps: dict  # sender -> its QP number
    victim_qp: int
    pcaps: dict  # tap name -> its pcap


def _intf(graph: nx.Graph, switch: str, peer: str) -> str:
    return graph.edges[switch, peer]["intfs"][switch]


def bottleneck(graph: nx.Graph, receiver: str) -> tuple[str, int]:
    """(switch, port) of the receiver's link on its switch: the incast's queue."""
    switch = fabric_mod.host_port(graph, receiver).switch
    return switch, graph.edges[receiver, switch]["ports"][switch]


def run(
    fab,
    graph: nx.Graph,
    w: Workload,
    taps: dict[str, Tap],
    out_dir: Path,
    duration_s: float,
    message_bytes: int,
    dcqcn: bool,
) -> Collected:
    """Run `w` on the open fabric `fab` for `duration_s` and read what it did.

    Every tap is captured into out_dir/NAME.pcap; each sender and the victim post
    enough SENDs of `message_bytes` to keep sending at twice the receiver's rate for the
    whole run (they never run dry); the NICs run DCQCN if `dcqcn`. The captures are
    stopped before this returns, so the pcaps are whole.
    """
    rate = fabric_mod.host_port(graph, w.receiver).rate_bps
    switch, _ = bottleneck(graph, w.receiver)
    caps = {
        name: start_capture(fab, _intf(graph, t.switch, t.peer), out_dir / f"{name}.pcap")
        for name, t in taps.items()
    }
    nics = RdmaHosts(fab, w.hosts, dcqcn=dcqcn)
    qps = {s: nics.connect(s, w.receiver) for s in w.senders}
    victim_qp = nics.connect(*w.victim, dscp=w.victim_dscp)
    backlog = int(2 * rate * duration_s / 8) + message_bytes
    count = backlog // message_bytes + 1
    samples: list = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(fab.queues(switch))
            stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.monotonic()
    wall0 = time.time()
    for s in w.senders:
        nics.post(s, qps[s], message_bytes, count)
    nics.post(w.victim[0], victim_qp, message_bytes, count)
    try:
        stop.wait(duration_s)
    finally:
        stop.set()
        sampler.join()
    end = time.monotonic()
    rx = {h: nics.nic_samples(h) for h in (w.receiver, w.victim[1])}
    nic_stats = {h: nics.nic_stats(h) for h in w.hosts}
    counters = {sw: fab.counters(sw) for sw in fabric_mod.switches(graph)}
    macs = {
        port.name: port.hw_addr
        for sw in fabric_mod.switches(graph)
        for port in fab.port_stats(sw).values()
    }
    for cap in caps.values():
        fab.stop_proc(cap)
    pcaps = {name: out_dir / f"{name}.pcap" for name in taps}
    return Collected(t0, wall0, end, samples, rx, nic_stats, counters, macs, qps, victim_qp, pcaps)


def measure(
    run: Collected,
    graph: nx.Graph,
    w: Workload,
    taps: dict[str, Tap],
    warmup_s: float,
    credit: bool,
) -> dict:
    """What `run` did, from `warmup_s` after the posts to its end (metrics.json's keys).

    Goodput is counted at the receiving NICs over that window; the bottleneck queue's
    median and maximum over it; `series` holds the whole run for plots. On a credit
    fabric (`credit`) each tap is audited and the credit counters are added.
    """
    w0 = run.t0 + warmup_s
    rx_incast, rx_victim = run.rx[w.receiver], run.rx[w.victim[1]]
    goodput = {s: received_bps(rx_incast, run.qps[s], w0, run.end) for s in w.senders}
    _, port = bottleneck(graph, w.receiver)
    depth = [
        (s.time - run.wall0, s.depth_bytes[port][INCAST_PRIO])
        for s in run.samples
        if port in s.depth_bytes
    ]
    steady = sorted(d for t, d in depth if t >= warmup_s)
    counters, nic_stats = run.counters, run.nic_stats
    result = {
        "goodput_bps": goodput,
        "incast_bps": sum(goodput.values()),
        "victim_bps": received_bps(rx_victim, run.victim_qp, w0, run.end),
        "queue_p50_bytes": steady[len(steady) // 2] if steady else 0,
        "queue_max_bytes": steady[-1] if steady else 0,
        "switch_drops": sum(sum(c.buffer.drops.values()) for c in counters.values()),
        "nic_drops": sum(st.rx_overflow for st in nic_stats.values()),
        "retransmitted": sum(
            sum(q.retransmitted for q in st.send.values()) for st in nic_stats.values()
        ),
        "cnps": sum(st.cnps_sent for st in nic_stats.values()),
        "pause_frames_sent": sum(sum(c.pfc.pfc_tx_frames.values()) for c in counters.values())
        + sum(st.pause_tx for st in nic_stats.values()),
        "wire": {name: wire_counts(path) for name, path in run.pcaps.items()},
        "stalled_s": stalled_s(counters, nic_stats, credit),
        "series": {
            "queue": depth,
            "victim": goodput_series(rx_victim, run.victim_qp, run.t0),
            "incast": {s: goodput_series(rx_incast, run.qps[s], run.t0) for s in w.senders},
        },
    }
    if credit:
        result["audit"] = audits(graph, w, taps, run)
        result.update(credit_counts(counters, nic_stats))
    return result


def credit_counts(counters: dict, nic_stats: dict) -> dict[str, int]:
    """Credit overruns counted by the receivers and credit frames sent, switches and NICs."""
    return {
        "overruns": sum(
            vl.overruns
            for c in counters.values()
            for link in c.credit.links.values()
            for vl in link.values()
        )
        + sum(st.credit_overruns for st in nic_stats.values()),
        "fc_frames_sent": sum(sum(c.credit.fc_tx_frames.values()) for c in counters.values())
        + sum(st.fc_tx for st in nic_stats.values()),
    }


def goodput_series(samples: list[NicSample], qpn: int, t0: float) -> tuple[list, list]:
    """Goodput of `qpn` (Mbit/s) between successive samples after `t0`, for a plot."""
    pts = [(s.t - t0, s.rx_bytes.get(qpn, 0)) for s in samples if s.t >= t0]
    ts, rates = [], []
    for (ta, a), (tb, b) in zip(pts, pts[1:]):
        if tb > ta:
            ts.append(tb)
            rates.append((b - a) * 8 / (tb - ta) / 1e6)
    return ts, rates


def stalled_s(
    counters: dict, nic_stats: dict, credit: bool, prio: int = INCAST_PRIO
) -> dict[str, float]:
    """Seconds each port ("switch:port") and NIC spent unable to send on `prio`: paused
    by PFC, or blocked waiting for credit (`credit`); those that never were are left out."""
    out = {}
    for sw, c in counters.items():
        if credit:
            for port, link in c.credit.links.items():
                if link[prio].blocked_s > 0:
                    out[f"{sw}:{port}"] = link[prio].blocked_s
        else:
            for port, per_prio in c.pfc.paused_s.items():
                if per_prio[prio] > 0:
                    out[f"{sw}:{port}"] = per_prio[prio]
    for h, st in nic_stats.items():
        secs = st.credit[prio].blocked_s if credit else st.paused_s[prio]
        if secs > 0:
            out[h] = secs
    return out


def wire_counts(path) -> dict[str, int]:
    """PAUSE/PFC frames and credit updates a capture holds, counted on the wire."""
    counts = {"pause": 0, "flow_control": 0, "frames": 0}
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            counts["frames"] += 1
            if Ether not in pkt:
                continue
            if pkt[Ether].type == pfc.ETH_TYPE_MAC_CONTROL:
                counts["pause"] += 1
            elif pkt[Ether].type == credit.ETH_TYPE_IB_FC:
                counts["flow_control"] += 1
    return counts


def _end_mac(graph: nx.Graph, macs: dict, node: str, other: str) -> str:
    """The MAC a link's end `node` sends from: a host's own, a switch port's."""
    if graph.nodes[node]["kind"] == "host":
        return graph.nodes[node]["mac"]
    return macs[_intf(graph, node, other)]


def _data_to(graph: nx.Graph, tap: Tap) -> set[str] | None:
    """The MACs of the hosts the audited data goes to: those nearer the receiving end than
    the sending one. None when a host sends: its own source MAC tells its frames apart."""
    if graph.nodes[tap.sender]["kind"] == "host":
        return None
    net = fabric_mod.network(graph)
    near_rx = nx.single_source_shortest_path_length(net, tap.receiver)
    near_tx = nx.single_source_shortest_path_length(net, tap.sender)
    return {graph.nodes[h]["mac"] for h in fabric_mod.hosts(graph) if near_rx[h] < near_tx[h]}


def audits(graph: nx.Graph, w: Workload, taps: dict[str, Tap], run: Collected) -> dict:
    """Each tap's pcap checked against the credit advertised on its data's lane
    (emu/credit_audit.py), keyed "sender -> receiver" and ordered by that name."""
    result = {}
    for name, tap in taps.items():
        a = audit(
            run.pcaps[name],
            _end_mac(graph, run.macs, tap.sender, tap.receiver),
            _end_mac(graph, run.macs, tap.receiver, tap.sender),
            w.victim_vl if tap.victim_only else INCAST_PRIO,
            DSCP_TO_VL,
            None,
            _data_to(graph, tap),
        )
        result[f"{tap.sender} -> {tap.receiver}"] = {
            "data_frames": a.data_frames,
            "checked": a.checked,
            "violations": a.violations,
            "fc_from_sender": a.fc_from_sender,
            "fc_from_receiver": a.fc_from_receiver,
        }
    return dict(sorted(result.items()))


def table(
    results: dict, w: Workload, line_goodput_bps: float, rate_mbps: float
) -> tuple[str, list[str], list[list]]:
    """(title, columns, rows) of a table with a row per mode (`results`: mode -> what
    `measure` returned); the victim's slowdown is its max-min share over its goodput."""
    rows = []
    for mode, r in results.items():
        wire = r["wire"]
        rows.append(
            [
                mode,
                *(round(r["goodput_bps"][s] / 1e6, 2) for s in w.senders),
                round(r["incast_bps"] / 1e6, 2),
                round(r["victim_bps"] / 1e6, 2),
                round(line_goodput_bps / max(r["victim_bps"], 1.0), 1),
                r["queue_p50_bytes"],
                r["queue_max_bytes"],
                round(sum(r["stalled_s"].values()), 2),
                r["switch_drops"] + r["nic_drops"],
                sum(t["pause"] for t in wire.values()),
                sum(t["flow_control"] for t in wire.values()),
                r["cnps"],
            ]
        )
    title = (
        f"incast {','.join(w.senders)} -> {w.receiver} and victim {w.victim[0]} -> "
        f"{w.victim[1]} ({rate_mbps:g} Mbit/s host links; goodput in Mbit/s over the window)"
    )
    columns = [
        "mode",
        *(f"{s} Mb/s" for s in w.senders),
        "incast Mb/s",
        "victim Mb/s",
        "victim slowdown x",
        "queue p50 B",
        "queue max B",
        "paused/blocked s",
        "drops",
        "PAUSE on wire",
        "credit frames on wire",
        "CNPs",
    ]
    return title, columns, rows


def panels(
    results: dict, graph: nx.Graph, w: Workload, senders_shown: Sequence[str] | None = None
) -> list[Panel]:
    """Plots of `results` (mode -> what `measure` returned): the bottleneck queue, the
    victim's goodput, the goodput of `senders_shown` (all by default), and the four
    ports or NICs of each mode that were paused or blocked longest, if any were."""
    shown = w.senders if senders_shown is None else senders_shown
    queue = Panel(
        f"bottleneck queue {bottleneck(graph, w.receiver)[0]} -> {w.receiver} "
        f"(priority {INCAST_PRIO})",
        "time (s)",
        "bytes",
        lines={
            m: ([t for t, _ in r["series"]["queue"]], [d for _, d in r["series"]["queue"]])
            for m, r in results.items()
        },
    )
    victim = Panel(
        f"victim {w.victim[0]} -> {w.victim[1]} goodput",
        "time (s)",
        "Mbit/s",
        lines={m: r["series"]["victim"] for m, r in results.items()},
    )
    incast = Panel(
        "incast goodput per sender",
        "time (s)",
        "Mbit/s",
        lines={
            f"{m} {s}": series
            for m, r in results.items()
            for s, series in r["series"]["incast"].items()
            if s in shown
        },
    )
    stalled = {
        f"{m}\n{where}": secs
        for m, r in results.items()
        for where, secs in sorted(r["stalled_s"].items(), key=lambda kv: -kv[1])[:4]
    }
    out = [queue, victim, incast]
    if stalled:
        out.append(Panel("paused (PFC) / blocked (credit) s, top 4", "", "seconds", bars=stalled))
    return out
