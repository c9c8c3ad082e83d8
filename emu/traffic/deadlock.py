"""A cyclic buffer dependency on a ring of switches: the RoCE flows that build it, the PFC
state read from the switches while it holds, and the wait-for cycle that says it is frozen.

Owns the workload scenarios/pfc_deadlock.py runs, in pieces a lab, bench or
test can call alone:

- the ring and its load: `ring_graph` (topologies/ring4.yaml at a rate and a
  time scale), `ring_flows` (each host to the host two switches on, so that
  every ring link carries two flows), `ring_paths` (their routes one way round,
  as controllers/ring_next_hops.py installs them), `ring_qos` (PFC on the two
  lossless priorities, ECN off), `RingLoad` and `start_flows` (the NICs, the
  queue pairs and the messages each sender posts);
- the switches' view: `live_state` and `snapshot` (typed answers, emu/answers.py),
  `peer_ports`, and the wait-for graph built from that state alone
  (`wait_for_graph`, `deadlock_cycle`, `cycle_hops`, `cycle_text`), the lossless
  frames the ring sent between two snapshots (`ring_tx`), the hosts their
  switch pauses (`hosts_paused`), the watchdogs' storms (`storms`);
- goodput from the receivers' NIC samples: `window_bytes`, `timelines`, and
  `goodput_panel` (a run's timelines as a plot panel);
- the two runs, each on a fresh fabric from the caller's run (`ctx.fabric`):
  `run_deadlock` (the watchdog off until the deadlock has formed and held,
  then on: `DeadlockRun` holds what it measured, `deadlock_result` sums it
  up) and `run_tagger` (the same routes and traffic with controllers/tagger.py,
  `TaggerRun`, `tagger_result`).

It does not judge: the checks and their thresholds are the scenario's, the
numbers they compare with are emu/models/deadlock.py's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import networkx as nx

from emu import fabric as fabric_mod
from emu import topofile
from emu.answers import NicSample
from emu.faults import Faults
from emu.models.deadlock import pause_refresh_s, stays_paused, xon_bytes
from emu.net import Fabric
from emu.registry import FabricError, wait_for
from emu.scenario import Context
from emu.telemetry import Panel, start_capture
from emu.traffic.rdma import RdmaHosts

ROOT = Path(__file__).resolve().parents[2]
RING_FILE = ROOT / "topologies" / "ring4.yaml"
NEXT_HOPS_FILE = ROOT / "controllers" / "ring_next_hops.py"
LOSSLESS = (3, 4)  # priority 3: RoCE (DESIGN.md); 4: Tagger's second lossless queue
MESSAGE_BYTES = 16384
NIC_SAMPLE_S = 0.1  # the NIC agents sample their counters this often (emu/host/agent.py)
POLL_S = 0.1  # how often the switches are asked whether the cycle has formed
FORM_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class RingLoad:
    """How hard and how long the ring is driven."""

    rate_bps: float  # every link's rate; each sender's NIC is capped at it
    send_s: float  # each sender posts what its fair share (half a ring link) sends in this
    hold_s: float  # how long the deadlock is watched before the senders stop (and after)
    recover_s: float  # how long the watchdog gets to clear the ring


# ----- the ring and its flows ----------------------------------------------------


def ring_graph(rate_mbps: float, modelled_gbps: float) -> nx.Graph:
    """topologies/ring4.yaml with every link at `rate_mbps`, standing for `modelled_gbps`."""
    graph = topofile.load(str(RING_FILE))
    for _u, _v, data in graph.edges(data=True):
        data["rate_bps"] = int(rate_mbps * 1e6)
    graph.graph["time_scale"] = fabric_mod.time_scale_for(rate_mbps * 1e6, modelled_gbps * 1e9)
    return graph


def ring_flows(graph) -> list[tuple[str, str]]:
    """Each host to the host two switches further round: two ring hops each."""
    hosts = fabric_mod.hosts(graph)
    return [(h, hosts[(i + 2) % len(hosts)]) for i, h in enumerate(hosts)]


def ring_paths(graph, flows: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Each flow's links, (from, to), when every switch forwards to its ring neighbour with
    the next larger dpid (the largest wraps round): controllers/ring_next_hops.py's routes."""
    order = sorted(fabric_mod.switches(graph), key=lambda sw: graph.nodes[sw]["dpid"])
    paths = []
    for src, dst in flows:
        here, last = graph.nodes[src]["leaf"], graph.nodes[dst]["leaf"]
        path = [(src, here)]
        while here != last:
            after = order[order.index(here) + 1 :] + order[: order.index(here)]
            nxt = next(sw for sw in after if graph.has_edge(here, sw))
            path.append((here, nxt))
            here = nxt
        paths.append(path + [(last, dst)])
    return paths


def ring_qos(watchdog: dict) -> dict:
    """The switches' QoS: PFC on the LOSSLESS priorities, ECN off, `watchdog` as given."""
    return {
        "watchdog": watchdog,
        "ecn": {"enabled": False},
        "pfc": {"lossless_priorities": list(LOSSLESS)},
    }


def start_flows(fab: Fabric, graph, flows, load: RingLoad, pcap_dir: Path):
    """NICs, a capture of the first ring link (into `pcap_dir`), the QPs, and the posted
    messages: each sender posts what its fair share (two flows per ring link) sends in
    `load.send_s`.

    Returns:
        (nics, capture, qps, t0, posted): the RdmaHosts, the tcpdump to stop, (src, dst) ->
        QP, the monotonic time of the first post, and the bytes each flow posted.
    """
    rate = load.rate_bps
    nics = RdmaHosts(fab, fabric_mod.hosts(graph), dcqcn=False)
    s1, s2 = fabric_mod.switches(graph)[:2]
    intf = graph.edges[s1, s2]["intfs"][s1]
    capture = start_capture(fab, intf, pcap_dir / f"{intf}.pcap")
    volume = rate / 2 * load.send_s / 8
    count = max(1, int(volume // MESSAGE_BYTES))
    qps = {(s, d): nics.connect(s, d, max_rate_bps=rate) for s, d in flows}
    t0 = time.monotonic()
    for (s, _d), q in qps.items():
        nics.post(s, q, MESSAGE_BYTES, count)
    return nics, capture, qps, t0, count * MESSAGE_BYTES


# ----- the switches' view: snapshots and the wait-for graph -------------------


def live_state(fab: Fabric, graph) -> dict:
    """Every switch's per-port pause state and queue depths now (its cheap `live` answer)."""
    return {sw: fab.live_ports(sw) for sw in fabric_mod.switches(graph)}


def snapshot(fab: Fabric, graph) -> dict:
    """`live_state` and every switch's counters (buffer, ports, queues) now."""
    return {
        "live": live_state(fab, graph),
        "counters": {sw: fab.counters(sw) for sw in fabric_mod.switches(graph)},
    }


def peer_ports(graph) -> dict[tuple[str, int], tuple[str, int]]:
    """(switch, port) -> (neighbour switch, its port) for every inter-switch link."""
    out = {}
    for u, v, data in graph.edges(data=True):
        if graph.nodes[u]["kind"] == graph.nodes[v]["kind"] == "switch":
            out[(u, data["ports"][u])] = (v, data["ports"][v])
            out[(v, data["ports"][v])] = (u, data["ports"][u])
    return out


def wait_for_graph(graph, live: dict) -> nx.DiGraph:
    """Who waits for whom, from the switches' telemetry alone.

    A node is a lossless egress queue (switch, port, prio) that holds frames
    and is paused. It waits for the queue(s) of its neighbour that keep the
    neighbour's ingress from it above XOFF: an edge (A, p, prio) -> (B, r, q)
    when B is pausing its port towards A on `prio` (its ingress queue from A
    is past XOFF: B's buffer lists it in `paused_upstream`) and B's egress
    (r, q), r not that port, is itself paused with frames. A cycle in this
    graph is a deadlock. `live` is `live_state`'s answer.
    """
    peers = peer_ports(graph)
    stuck = {
        (sw, port, prio)
        for sw, ports in live.items()
        for port, state in ports.items()
        for prio in LOSSLESS
        if prio in state.paused_now and state.depth_bytes[prio] > 0
    }
    g = nx.DiGraph()
    for a, pa, prio in stuck:
        if (a, pa) not in peers:
            continue
        b, pb = peers[(a, pa)]
        if prio not in live[b][pb].pausing:
            continue
        for b2, r, q in stuck:
            if b2 == b and r != pb:
                g.add_edge((a, pa, prio), (b, r, q), ingress=(b, pb, prio))
    return g


def deadlock_cycle(graph, live: dict) -> list[tuple[str, int, int]]:
    """The longest cycle of the wait-for graph ([] when there is none)."""
    g = wait_for_graph(graph, live)
    cycles = list(nx.simple_cycles(g))
    return max(cycles, key=len) if cycles else []


def cycle_hops(graph, snap: dict, cycle: list) -> list[dict]:
    """Per hop of `cycle`: the waiting egress, the ingress that pauses it, its bytes and XOFF."""
    peers = peer_ports(graph)
    hops = []
    for a, pa, prio in cycle:
        b, pb = peers[(a, pa)]
        buf = snap["counters"][b].buffer
        key = (pb, prio)
        hops.append(
            {
                "waits": f"{_intf(a, pa)} prio {prio}",
                "switch": a,
                "paused_by": b,
                "ingress": f"{_intf(b, pb)} prio {prio}",
                "ingress_bytes": buf.ingress_bytes.get(key, 0),
                "headroom_bytes": buf.headroom_used_bytes.get(key, 0),
                "xoff_bytes": buf.xoff_threshold_bytes,
                # PFC's hysteresis: PAUSE stands until the queue is below this.
                "xon_bytes": xon_bytes(buf.xoff_threshold_bytes),
                "xoff_sent": buf.xoff_sent.get(key, 0),
                "ingress_key": (b, pb, prio),
                "egress_key": (a, pa, prio),
            }
        )
    return hops


def _intf(sw: str, port: int) -> str:
    return f"{sw}-eth{port}"


def cycle_text(hops: list[dict]) -> str:
    """`s1-eth3 -> s2-eth3 -> ... -> s1`: the cycle's waiting ports ("none" for no hops)."""
    if not hops:
        return "none"
    return " -> ".join(h["waits"].split(" prio")[0] for h in hops) + f" -> {hops[0]['switch']}"


def _queue_tx(snap: dict, sw: str, port: int, prio: int) -> int:
    return snap["counters"][sw].queues[port][prio].tx_packets


def ring_tx(graph, snap_from: dict, snap_to: dict) -> int:
    """Lossless frames the ring ports sent between two snapshots."""
    return sum(
        _queue_tx(snap_to, sw, port, prio) - _queue_tx(snap_from, sw, port, prio)
        for sw, port in peer_ports(graph)
        for prio in LOSSLESS
    )


def hosts_paused(graph, snap: dict) -> list[str]:
    """The hosts their switch is pausing on priority 3 in `snap`.

    Each switch also pauses its own host (its host port's ingress is full of
    frames for the stuck clockwise port): PAUSE toward the NICs too.
    """
    return sorted(
        h
        for h in fabric_mod.hosts(graph)
        for sw in [graph.nodes[h]["leaf"]]
        if LOSSLESS[0] in snap["live"][sw][graph.edges[h, sw]["ports"][sw]].pausing
    )


def storms(wd: dict, wall_on: dict[str, float]) -> list[dict]:
    """The watchdogs' storm events (`wd`: switch -> WatchdogReport), each with `after_s`:
    when after its switch's watchdog came on (`wall_on`, unix time: events carry wall time)."""
    return [
        dict(dataclasses.asdict(e), switch=sw, after_s=round(e.wall - wall_on[sw], 3))
        for sw, w in wd.items()
        for e in w.events
        if e.kind == "storm" and e.wall is not None
    ]


# ----- goodput from the receivers' samples --------------------------------------


def _rx_at(series: list[NicSample], q: int, t: float) -> int:
    """Bytes QP q had received by agent-clock time t (the last sample at or before it)."""
    last = 0
    for sample in series:
        if sample.t > t:
            break
        last = sample.rx_bytes.get(q, 0)
    return last


def window_bytes(samples: dict, qps: dict, t_from: float, t_to: float) -> dict[str, int]:
    """Bytes each flow's receiver took in [t_from, t_to] (agent clocks are CLOCK_MONOTONIC)."""
    return {
        f"{s}->{d}": _rx_at(samples[d], q, t_to) - _rx_at(samples[d], q, t_from)
        for (s, d), q in qps.items()
    }


def timelines(samples: dict, qps: dict, t0: float) -> dict[str, list[tuple[float, float]]]:
    """Per flow, (seconds since `t0`, Mbit/s received since the sample before) at each of
    its receiver's samples from half a second before `t0` on."""
    out = {}
    for (s, d), q in qps.items():
        pts = [(x.t - t0, x.rx_bytes.get(q, 0)) for x in samples[d]]
        out[f"{s}->{d}"] = [
            (t1, (b1 - b0) * 8 / (t1 - ta) / 1e6)
            for (ta, b0), (t1, b1) in zip(pts, pts[1:])
            if t1 > ta and t1 >= -0.5
        ]
    return out


def goodput_panel(title: str, lines: dict, vline: float | None = None, label: str = "") -> Panel:
    """A plot panel of `timelines`' answer: goodput per flow over time, a vertical line
    at `vline` (labelled `label`) if given."""
    return Panel(
        title,
        "time since the senders started (s)",
        "goodput (Mbit/s)",
        lines={f: ([t for t, _ in s], [m for _, m in s]) for f, s in lines.items()},
        vline=vline,
        vline_label=label,
    )


# ----- the deadlock, then the watchdog ---------------------------------------------


@dataclasses.dataclass
class DeadlockRun:
    """What run_deadlock measures on its fabric, filled in step by step.

    Times are CLOCK_MONOTONIC seconds (the agents' clock too), except
    `wall_wd`: switch events carry wall time.
    """

    posted: int  # bytes each flow posted
    qps: dict  # (src, dst) -> QP
    t0: float  # the first post
    t_formed: float = 0.0  # the wait-for cycle through every ring switch seen
    a_from: float = 0.0  # the window after it formed ...
    a_to: float = 0.0
    b_from: float = 0.0  # ... and after the senders stopped
    b_to: float = 0.0
    refresh_s: float = 0.0  # a paused port refreshes its PAUSE this often
    snap_b0: dict = dataclasses.field(default_factory=dict)  # at b_from
    snap_b1: dict = dataclasses.field(default_factory=dict)  # at b_to
    cycle: list = dataclasses.field(default_factory=list)  # deadlock_cycle at b_to
    hops: list[dict] = dataclasses.field(default_factory=list)  # ... its cycle_hops
    t_wd: float = 0.0  # the watchdogs turned on
    wall_wd: dict[str, float] = dataclasses.field(default_factory=dict)  # ... per switch, wall
    c_to: float = 0.0  # the end of the recovery window
    samples: dict = dataclasses.field(default_factory=dict)  # every host's NIC samples
    snap_end: dict = dataclasses.field(default_factory=dict)
    wd: dict = dataclasses.field(default_factory=dict)  # every switch's watchdog answer


def run_deadlock(ctx: Context, graph, flows, load: RingLoad, options: dict) -> dict:
    """The clockwise routes with the watchdog off until the deadlock has held, then on.

    A fresh fabric `ctx.fabric(graph, "deadlock", **options)` (its pcaps in
    ctx.out_dir/deadlock); a `deadlock_formed` event when the cycle is seen.
    Returns `deadlock_result`'s dict.
    """
    stop = threading.Event()  # never set: a sleep that reads as one
    with ctx.fabric(
        graph,
        "deadlock",
        controller_args=("--next-hops", str(NEXT_HOPS_FILE)),
        qos=ring_qos({"enabled": False}),
        **options,
    ) as fab:
        nics, capture, qps, t0, posted = start_flows(
            fab, graph, flows, load, ctx.out_dir / "deadlock"
        )
        run = DeadlockRun(posted, qps, t0)
        _await_deadlock(ctx, fab, graph, run)
        _hold_deadlock(fab, graph, run, load, stop)
        _recover(fab, nics, graph, run, stop, load.recover_s)
        fab.stop_proc(capture)
        run.samples = {h: nics.nic_samples(h) for h in fabric_mod.hosts(graph)}
        run.snap_end = snapshot(fab, graph)
        run.wd = {sw: fab.watchdog(sw) for sw in fabric_mod.switches(graph)}
    return deadlock_result(graph, run)


def _await_deadlock(ctx: Context, fab: Fabric, graph, run: DeadlockRun) -> None:
    """Until the switches' state shows a wait-for cycle through every ring switch."""
    ring = fabric_mod.switches(graph)

    def formed():
        cycle = deadlock_cycle(graph, live_state(fab, graph))
        return cycle if {c[0] for c in cycle} == set(ring) else None

    wait_for(
        formed,
        FORM_TIMEOUT_S,
        "a wait-for cycle through every ring switch",
        POLL_S,
        logs=fab.log_dir(),
    )
    run.t_formed = time.monotonic()
    ctx.event("deadlock_formed", after_s=round(run.t_formed - run.t0, 2))


def _hold_deadlock(
    fab: Fabric, graph, run: DeadlockRun, load: RingLoad, stop: threading.Event
) -> None:
    """The two windows of the held deadlock: after it formed, and after the senders stopped
    (snapshots at both ends of the second, and the cycle at its end)."""
    rate = load.rate_bps
    ring = fabric_mod.switches(graph)
    # Frames already past the cycle (queued towards the hosts, which nothing
    # pauses) still arrive: an XOFF's worth per port at line rate, then a sample.
    settle = max(fab.counters(s).buffer.xoff_threshold_bytes for s in ring)
    settle_s = settle * 8 / rate + 2 * NIC_SAMPLE_S
    stop.wait(settle_s)
    run.a_from = time.monotonic()
    stop.wait(load.hold_s)
    run.a_to = time.monotonic()
    # The senders stop: after send_s nothing more is posted. The window after it
    # lasts at least one PAUSE refresh period, so every paused port is seen
    # refreshing its PAUSE with no new traffic.
    run.refresh_s = pause_refresh_s(rate)
    stop.wait(max(0.0, run.t0 + load.send_s - time.monotonic()))
    run.b_from = time.monotonic()
    run.snap_b0 = snapshot(fab, graph)
    stop.wait(max(load.hold_s, run.refresh_s + 0.3))
    run.snap_b1 = snapshot(fab, graph)
    run.b_to = time.monotonic()
    run.cycle = deadlock_cycle(graph, run.snap_b1["live"])
    run.hops = cycle_hops(graph, run.snap_b1, run.cycle)


def _recover(
    fab: Fabric, nics: RdmaHosts, graph, run: DeadlockRun, stop: threading.Event, recover_s: float
) -> None:
    """Remedy (a): the PFC watchdog on every switch, SONiC's defaults (detection 200 ms,
    drop), then `recover_s` for the flows to move again."""
    faults = Faults(fab, nics)
    run.t_wd = time.monotonic()
    for sw in fabric_mod.switches(graph):
        run.wall_wd[sw] = time.time()
        faults.watchdog(enabled=True, switch=sw)
    stop.wait(recover_s)
    run.c_to = time.monotonic()


def deadlock_result(graph, run: DeadlockRun) -> dict:
    """The deadlock run's result (the scenario's metrics) from what `run` measured."""
    samples, qps, t0, hops = run.samples, run.qps, run.t0, run.hops
    found = storms(run.wd, run.wall_wd)
    cycle_egress = {h["egress_key"] for h in hops}
    return {
        "posted_bytes": run.posted,
        "formed_after_s": run.t_formed - t0,
        "cycle": [list(c) for c in run.cycle],
        "cycle_text": cycle_text(hops),
        "hops": [{k: v for k, v in h.items() if not k.endswith("_key")} for h in hops],
        "cycle_switches": sorted({c[0] for c in run.cycle}),
        # Full to XOFF: PFC's hysteresis keeps PAUSE on until a queue falls two
        # frames below XOFF (emu/switch/buffer.py), so a queue stuck inside that
        # band, or with frames in its headroom (admitted past XOFF), is full.
        "above_xoff": [
            h["ingress"]
            for h in hops
            if stays_paused(h["ingress_bytes"], h["headroom_bytes"], h["xon_bytes"])
        ],
        "window_formed": [run.a_from - t0, run.a_to - t0],
        "bytes_formed": window_bytes(samples, qps, run.a_from, run.a_to),
        "window_stopped": [run.b_from - t0, run.b_to - t0],
        "bytes_stopped": window_bytes(samples, qps, run.b_from, run.b_to),
        "ring_tx_stopped": ring_tx(graph, run.snap_b0, run.snap_b1),
        "pause_refreshed": {
            h["ingress"]: run.snap_b1["counters"][ik[0]].buffer.xoff_sent.get(ik[1:], 0)
            - run.snap_b0["counters"][ik[0]].buffer.xoff_sent.get(ik[1:], 0)
            for h, ik in ((h, h["ingress_key"]) for h in hops)
        },
        "refresh_s": run.refresh_s,
        "watchdog_on_at_s": run.t_wd - t0,
        "storms": found,
        "storms_on_cycle": [
            s for s in found if (s["switch"], s["port"], s["prio"]) in cycle_egress
        ],
        "watchdog_drops": sum(w.drops for w in run.wd.values()),
        "window_recovered": [run.t_wd - t0, run.c_to - t0],
        "bytes_recovered": window_bytes(samples, qps, run.t_wd, run.c_to),
        "bytes_total": window_bytes(samples, qps, t0 - 1.0, run.c_to),
        "cycle_after_watchdog": cycle_text(
            cycle_hops(graph, run.snap_end, deadlock_cycle(graph, run.snap_end["live"]))
        ),
        "hosts_paused": hosts_paused(graph, run.snap_b1),
        "timelines": timelines(samples, qps, t0),
    }


# ----- the same with Tagger --------------------------------------------------------


@dataclasses.dataclass
class TaggerRun:
    """What run_tagger read from its fabric (times CLOCK_MONOTONIC, as the agents')."""

    posted: int  # bytes each flow posted
    qps: dict  # (src, dst) -> QP
    t0: float  # the first post
    rate_bps: float
    finished: bool = False  # every flow's posted bytes delivered in time
    t_end: float = 0.0
    cycles_seen: list = dataclasses.field(default_factory=list)  # a wait-for cycle per poll
    samples: dict = dataclasses.field(default_factory=dict)  # every host's NIC samples
    wd: dict = dataclasses.field(default_factory=dict)  # every switch's watchdog answer
    send_stats: dict = dataclasses.field(default_factory=dict)  # (src, dst) -> SendQp
    flows: dict = dataclasses.field(default_factory=dict)  # switch -> [FlowStats]
    status: dict = dataclasses.field(default_factory=dict)  # the controller's status file


def run_tagger(ctx: Context, graph, flows, load: RingLoad, options: dict) -> dict:
    """The same routes and traffic with controllers/tagger.py, until every flow's posted
    bytes are delivered (or four times send_s and 5 s have gone by: a stuck ring).

    A fresh fabric `ctx.fabric(graph, "tagger", **options)` with the watchdog
    on, alert only; pcaps of the first ring link and of the link where Tagger
    re-tags (s3 -> s4) in ctx.out_dir/tagger. Returns `tagger_result`'s dict.
    """
    ring = fabric_mod.switches(graph)
    # The watchdog only watches (action alert): a queue paused with frames and no
    # progress for its detection time counts as a storm, and nothing is dropped.
    with ctx.fabric(
        graph,
        "tagger",
        apps=("controllers.tagger",),
        controller_args=("--next-hops", str(NEXT_HOPS_FILE)),
        qos=ring_qos({"enabled": True, "action": "alert"}),
        **options,
    ) as fab:
        s3, s4 = ring[2], ring[3]
        bounce_intf = graph.edges[s3, s4]["intfs"][s3]
        bounce_cap = start_capture(fab, bounce_intf, ctx.out_dir / "tagger" / f"{bounce_intf}.pcap")
        nics, capture, qps, t0, posted = start_flows(
            fab, graph, flows, load, ctx.out_dir / "tagger"
        )
        run = TaggerRun(posted, qps, t0, load.rate_bps)
        run.finished = _await_delivery(fab, nics, graph, run, load.send_s)
        run.t_end = time.monotonic()
        fab.stop_proc(capture)
        fab.stop_proc(bounce_cap)
        run.samples = {h: nics.nic_samples(h) for h in fabric_mod.hosts(graph)}
        run.wd = {sw: fab.watchdog(sw) for sw in ring}
        run.send_stats = {(s, d): nics.nic_stats(s).send[q] for (s, d), q in qps.items()}
        run.flows = {sw: fab.flows(sw) for sw in ring}
        run.status = fab.controller_status()
    return tagger_result(run)


def _await_delivery(fab: Fabric, nics: RdmaHosts, graph, run: TaggerRun, send_s: float) -> bool:
    """Whether every flow's posted bytes arrive in time; each poll's wait-for cycle, if
    any, goes into `run.cycles_seen`."""

    def done():
        cycle = deadlock_cycle(graph, live_state(fab, graph))
        if cycle:
            run.cycles_seen.append(" -> ".join(f"{sw}-eth{port}" for sw, port, _ in cycle))
        got = {}
        for (s, d), q in run.qps.items():
            series = nics.nic_samples(d, since=time.monotonic() - 1.0)
            got[f"{s}->{d}"] = series[-1].rx_bytes.get(q, 0) if series else 0
        return got if all(v >= run.posted for v in got.values()) else None

    # A deadlock-free ring delivers it in send_s at the fair share; four times
    # that before we call it stuck.
    try:
        wait_for(
            done,
            4 * send_s + 5.0,
            "every flow's posted bytes delivered",
            0.25,
            logs=fab.log_dir(),
        )
        return True
    except FabricError:  # a stuck ring: this run's failed check
        return False


def tagger_result(run: TaggerRun) -> dict:
    """The Tagger run's result (the scenario's metrics) from what `run` read."""
    posted, qps, t0, samples = run.posted, run.qps, run.t0, run.samples
    done_at = {}
    for (s, d), q in qps.items():
        hit = [x.t for x in samples[d] if x.rx_bytes.get(q, 0) >= posted]
        done_at[f"{s}->{d}"] = (hit[0] - t0) if hit else None
    # Tagger's flows carry its cookie, 0x4 in the top nibble (controllers/layout.py).
    tag_packets = {
        sw: sum(f.packets for f in fl if f.cookie.startswith("0x4")) for sw, fl in run.flows.items()
    }
    return {
        "posted_bytes": posted,
        "finished": run.finished,
        "done_at_s": done_at,
        "goodput_bps": {k: posted * 8 / v if v else 0.0 for k, v in done_at.items()},
        "cycles_seen": sorted(set(run.cycles_seen)),
        # Go-back-N's own view: a timeout resends what may only have been queued.
        "timeouts": {f"{s}->{d}": st.timeouts for (s, d), st in run.send_stats.items()},
        "retransmitted": {f"{s}->{d}": st.retransmitted for (s, d), st in run.send_stats.items()},
        "storms": sum(w.detected for w in run.wd.values()),
        "tagger_status": run.status.get("tagger", {}),
        # Adaptive routing beside Tagger (extensions=adaptive): what it measured and placed.
        "adaptive_status": run.status.get("adaptive"),
        "tagged_packets": tag_packets,
        "bytes_total": window_bytes(samples, qps, t0 - 1.0, run.t_end),
        "timelines": timelines(samples, qps, t0),
        "rate_bps": run.rate_bps,
    }
