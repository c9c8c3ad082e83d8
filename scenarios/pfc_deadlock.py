"""pfc-deadlock: routes that all turn one way round a ring deadlock PFC; watchdog and Tagger.

      h1            h2          every route goes clockwise (controllers/ring_next_hops.py):
      s1 --------> s2           h1 -> h3 over s1 s2 s3,  h2 -> h4 over s2 s3 s4,
      ^             |           h3 -> h1 over s3 s4 s1,  h4 -> h2 over s4 s1 s2
      |             v           (RoCEv2, lossless priority 3, each sender at line rate)
      s4 <-------- s3
      h4            h3

Every ring link carries two flows at line rate, so every ring queue fills,
and each switch's ingress queue from its counter-clockwise neighbour holds
frames that wait for its clockwise port, which the clockwise neighbour has
paused: a cyclic buffer dependency (Hu et al., "Deadlocks in Datacenter
Networks: Why Do They Form, and How to Avoid Them", HotNets 2016; Guo et
al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016). Frames for
the switch's own host leave; frames for further on stay, so the ingress
queues end up holding only frames that cannot move, above XOFF, and every
switch pauses its upstream for good: deadlock. It outlives the traffic.

Two runs, each a fresh fabric with PFC on priorities 3 and 4:
- deadlock: the watchdog off. The deadlock forms; the report derives the
  cycle from the switches' own state (paused egress ports, ingress queues
  above XOFF: a wait-for graph, its cycle found with networkx), shows zero
  goodput while it holds and after the senders have stopped, then turns
  the PFC watchdog on (SONiC pfcwd, emu/switch/watchdog.py): it finds the
  stuck queues, drops what they hold, and the flows move again.
- tagger: the same routes and traffic with controllers/tagger.py (Hu et
  al., CoNEXT 2017): a packet that goes down then up in the ring's up-down
  order moves to the next lossless queue (DSCP 27, priority 4), so the
  priority-3 queues hold no cycle; no deadlock forms, every flow finishes.

Run:  emu run pfc-deadlock
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import networkx as nx

from emu import config, topofile
from emu import fabric as fabric_mod
from emu.answers import NicSample
from emu.config import BufferSpec, WatchdogSpec
from emu.faults import Faults
from emu.figures import WILDCARD, Entry, per_key
from emu.net import Fabric, default_switch_processes
from emu.proto.pfc import quanta_to_s
from emu.registry import FabricError, wait_for
from emu.scenario import Context, Param, choices, fabric_options
from emu.telemetry import Panel, save_panels, start_capture
from emu.traffic.rdma import RdmaHosts

DESCRIPTION = (
    "routes around a ring deadlock PFC: the cycle named, watchdog breaks it, Tagger prevents it"
)

ROOT = Path(__file__).resolve().parent.parent
RING_FILE = ROOT / "topologies" / "ring4.yaml"
NEXT_HOPS_FILE = ROOT / "controllers" / "ring_next_hops.py"
LOSSLESS = (3, 4)  # priority 3: RoCE (DESIGN.md); 4: Tagger's second lossless queue
MESSAGE_BYTES = 16384
NIC_SAMPLE_S = 0.1  # the NIC agents sample their counters this often (emu/host/agent.py)
POLL_S = 0.1
FORM_TIMEOUT_S = 10.0
MODES = ("deadlock", "tagger")

PARAMS = {
    "rate_mbps": Param(10.0, "link rate of every link (Mbit/s)", min=1.0, max=100.0),
    # Time scale 10 (a 100 Mbit/s NIC on 10 Mbit/s links): the NIC's RTO (the IB
    # local ACK timeout, 67 ms modelled, emu/host/rnic.py) must outlast the ring's
    # queueing under PFC, or go-back-N resends what is only queued and the flows
    # crawl: a path's data and ACKs wait in four ring egress queues, each fed by
    # two ingress queues of about 100 KB at XOFF (1 MiB buffer, alpha 1/8):
    # 4 x 2 x 100 KB at 10 Mbit/s is 640 ms, against 670 ms at time scale 10.
    # The RTO is also never below the fabric's lossless buffer bound
    # (emu/host/rto.py: 1.5 s on this ring), which covers that queueing whatever
    # the time scale. The PFC watchdog runs on the time scale: SONiC's 200 ms are 2 s here.
    "modelled_gbps": Param(
        0.1,
        "NIC speed the links stand for: the time scale is it over rate_mbps (RTO, watchdog)",
        min=0.001,
        max=800.0,
    ),
    "send_s": Param(
        2.0,
        "the senders post what their fair share (half a ring link) sends in this time, "
        "then stop posting",
        min=1.0,
        max=60.0,
    ),
    "hold_s": Param(
        1.0,
        "how long the deadlock is watched before the senders stop (and again after)",
        min=0.5,
        max=30.0,
    ),
    "recover_s": Param(8.0, "how long the watchdog gets to clear the ring", min=1.0, max=60.0),
    "modes": Param("deadlock,tagger", "runs: deadlock (then the watchdog), tagger"),
    "seed": Param(0, "base of the per-switch hash seeds"),
    "extensions": Param(
        "",
        "controller managers beside routing in every run (the tagger run has Tagger "
        "anyway): adaptive, tagger (controllers/routing_api.py)",
        each=config.ROUTING_EXTENSIONS,
    ),
    "host_nic_pacing": Param(True, "hosts' kernels send at their link rate"),
    "switch_processes": Param(
        default_switch_processes(), "processes that run the switches (0: one each)", min=0, max=64
    ),
}


def validate(params: dict) -> None:
    choices(params, "modes", MODES)


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


def run(ctx: Context) -> None:
    p = ctx.params
    graph = ring_graph(p["rate_mbps"], p["modelled_gbps"])
    flows = ring_flows(graph)
    ctx.metrics["flows"] = [f"{s}->{d}" for s, d in flows]
    results = {}
    for mode in [m for m in p["modes"].split(",") if m]:
        ctx.log(f"pfc-deadlock: {mode}")
        results[mode] = (run_deadlock if mode == "deadlock" else run_tagger)(ctx, graph, flows)
    ctx.metrics["modes"] = {
        m: {k: v for k, v in r.items() if k != "timelines"} for m, r in results.items()
    }
    report(ctx, graph, results)
    plot(ctx, results)


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


def _peer_ports(graph) -> dict[tuple[str, int], tuple[str, int]]:
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
    peers = _peer_ports(graph)
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
    peers = _peer_ports(graph)
    hops = []
    for a, pa, prio in cycle:
        b, pb = peers[(a, pa)]
        buf = snap["counters"][b].buffer
        key = (pb, prio)
        hops.append(
            {
                "waits": f"{_intf(graph, a, pa)} prio {prio}",
                "switch": a,
                "paused_by": b,
                "ingress": f"{_intf(graph, b, pb)} prio {prio}",
                "ingress_bytes": buf.ingress_bytes.get(key, 0),
                "headroom_bytes": buf.headroom_used_bytes.get(key, 0),
                "xoff_bytes": buf.xoff_threshold_bytes,
                # PFC's hysteresis: PAUSE stands until the queue is below this.
                "xon_bytes": buf.xoff_threshold_bytes - BufferSpec().resume_offset_bytes,
                "xoff_sent": buf.xoff_sent.get(key, 0),
                "ingress_key": (b, pb, prio),
                "egress_key": (a, pa, prio),
            }
        )
    return hops


def _intf(graph, sw: str, port: int) -> str:
    return f"{sw}-eth{port}"


def cycle_text(hops: list[dict]) -> str:
    if not hops:
        return "none"
    return " -> ".join(h["waits"].split(" prio")[0] for h in hops) + f" -> {hops[0]['switch']}"


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
    out = {}
    for (s, d), q in qps.items():
        pts = [(x.t - t0, x.rx_bytes.get(q, 0)) for x in samples[d]]
        out[f"{s}->{d}"] = [
            (t1, (b1 - b0) * 8 / (t1 - ta) / 1e6)
            for (ta, b0), (t1, b1) in zip(pts, pts[1:])
            if t1 > ta and t1 >= -0.5
        ]
    return out


def _queue_tx(snap: dict, sw: str, port: int, prio: int) -> int:
    return snap["counters"][sw].queues[port][prio].tx_packets


# ----- the runs -----------------------------------------------------------------


def _start(ctx, fab, graph, flows, tag):
    """NICs, a capture of the s1 -> s2 ring link, the QPs, and the posted messages."""
    p = ctx.params
    rate = p["rate_mbps"] * 1e6
    nics = RdmaHosts(fab, fabric_mod.hosts(graph), dcqcn=False)
    s1, s2 = fabric_mod.switches(graph)[:2]
    intf = graph.edges[s1, s2]["intfs"][s1]
    capture = start_capture(fab, intf, ctx.out_dir / tag / f"{intf}.pcap")
    # What each sender's fair share (two flows per ring link) sends in send_s.
    volume = rate / 2 * p["send_s"] / 8
    count = max(1, int(volume // MESSAGE_BYTES))
    qps = {(s, d): nics.connect(s, d, max_rate_bps=rate) for s, d in flows}
    t0 = time.monotonic()
    for (s, _d), q in qps.items():
        nics.post(s, q, MESSAGE_BYTES, count)
    return nics, capture, qps, t0, count * MESSAGE_BYTES


def _qos(watchdog: dict) -> dict:
    return {
        "watchdog": watchdog,
        "ecn": {"enabled": False},
        "pfc": {"lossless_priorities": list(LOSSLESS)},
    }


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


def run_deadlock(ctx: Context, graph, flows) -> dict:
    """The clockwise routes with the watchdog off until the deadlock has held, then on."""
    p = ctx.params
    stop = threading.Event()  # never set: a sleep that reads as one
    with ctx.fabric(
        graph,
        "deadlock",
        controller_args=("--next-hops", str(NEXT_HOPS_FILE)),
        qos=_qos({"enabled": False}),
        **fabric_options(p),
    ) as fab:
        nics, capture, qps, t0, posted = _start(ctx, fab, graph, flows, "deadlock")
        run = DeadlockRun(posted, qps, t0)
        _await_deadlock(ctx, fab, graph, run)
        _hold_deadlock(ctx, fab, graph, run, stop)
        _recover(fab, nics, graph, run, stop, p["recover_s"])
        fab.stop_proc(capture)
        run.samples = {h: nics.nic_samples(h) for h in fabric_mod.hosts(graph)}
        run.snap_end = snapshot(fab, graph)
        run.wd = {sw: fab.watchdog(sw) for sw in fabric_mod.switches(graph)}
    return _deadlock_result(graph, run)


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
    ctx: Context, fab: Fabric, graph, run: DeadlockRun, stop: threading.Event
) -> None:
    """The two windows of the held deadlock: after it formed, and after the senders stopped
    (snapshots at both ends of the second, and the cycle at its end)."""
    p = ctx.params
    rate = p["rate_mbps"] * 1e6
    ring = fabric_mod.switches(graph)
    # Frames already past the cycle (queued towards the hosts, which nothing
    # pauses) still arrive: an XOFF's worth per port at line rate, then a sample.
    settle = max(fab.counters(s).buffer.xoff_threshold_bytes for s in ring)
    settle_s = settle * 8 / rate + 2 * NIC_SAMPLE_S
    stop.wait(settle_s)
    run.a_from = time.monotonic()
    stop.wait(p["hold_s"])
    run.a_to = time.monotonic()
    # The senders stop: after send_s nothing more is posted. The window after it
    # lasts at least one PAUSE refresh period, so every paused port is seen
    # refreshing its PAUSE with no new traffic.
    run.refresh_s = quanta_to_s(0xFFFF, rate) / 2
    stop.wait(max(0.0, run.t0 + p["send_s"] - time.monotonic()))
    run.b_from = time.monotonic()
    run.snap_b0 = snapshot(fab, graph)
    stop.wait(max(p["hold_s"], run.refresh_s + 0.3))
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


def _deadlock_result(graph, run: DeadlockRun) -> dict:
    """The deadlock run's result (and metrics) from what it measured."""
    samples, qps, t0, hops = run.samples, run.qps, run.t0, run.hops
    storms = _storms(run)
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
            if h["headroom_bytes"] > 0 or h["ingress_bytes"] > h["xon_bytes"]
        ],
        "window_formed": [run.a_from - t0, run.a_to - t0],
        "bytes_formed": window_bytes(samples, qps, run.a_from, run.a_to),
        "window_stopped": [run.b_from - t0, run.b_to - t0],
        "bytes_stopped": window_bytes(samples, qps, run.b_from, run.b_to),
        "ring_tx_stopped": _ring_tx(graph, run.snap_b0, run.snap_b1),
        "pause_refreshed": {
            h["ingress"]: run.snap_b1["counters"][ik[0]].buffer.xoff_sent.get(ik[1:], 0)
            - run.snap_b0["counters"][ik[0]].buffer.xoff_sent.get(ik[1:], 0)
            for h, ik in ((h, h["ingress_key"]) for h in hops)
        },
        "refresh_s": run.refresh_s,
        "watchdog_on_at_s": run.t_wd - t0,
        "storms": storms,
        "storms_on_cycle": [
            s for s in storms if (s["switch"], s["port"], s["prio"]) in cycle_egress
        ],
        "watchdog_drops": sum(w.drops for w in run.wd.values()),
        "window_recovered": [run.t_wd - t0, run.c_to - t0],
        "bytes_recovered": window_bytes(samples, qps, run.t_wd, run.c_to),
        "bytes_total": window_bytes(samples, qps, t0 - 1.0, run.c_to),
        "cycle_after_watchdog": cycle_text(
            cycle_hops(graph, run.snap_end, deadlock_cycle(graph, run.snap_end["live"]))
        ),
        "hosts_paused": _hosts_paused(graph, run.snap_b1),
        "timelines": timelines(samples, qps, t0),
    }


def _storms(run: DeadlockRun) -> list[dict]:
    """The watchdogs' storm events, each with when after its switch's watchdog came on."""
    return [
        dict(dataclasses.asdict(e), switch=sw, after_s=round(e.wall - run.wall_wd[sw], 3))
        for sw, w in run.wd.items()
        for e in w.events
        if e.kind == "storm" and e.wall is not None
    ]


def _ring_tx(graph, snap_from: dict, snap_to: dict) -> int:
    """Lossless frames the ring ports sent between two snapshots."""
    return sum(
        _queue_tx(snap_to, sw, port, prio) - _queue_tx(snap_from, sw, port, prio)
        for sw, port in _peer_ports(graph)
        for prio in LOSSLESS
    )


def _hosts_paused(graph, snap: dict) -> list[str]:
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


def run_tagger(ctx: Context, graph, flows) -> dict:
    p = ctx.params
    rate = p["rate_mbps"] * 1e6
    ring = fabric_mod.switches(graph)
    # The watchdog only watches (action alert): a queue paused with frames and no
    # progress for its detection time counts as a storm, and nothing is dropped.
    with ctx.fabric(
        graph,
        "tagger",
        apps=("controllers.tagger",),
        controller_args=("--next-hops", str(NEXT_HOPS_FILE)),
        qos=_qos({"enabled": True, "action": "alert"}),
        **fabric_options(p),
    ) as fab:
        s3, s4 = ring[2], ring[3]
        bounce_intf = graph.edges[s3, s4]["intfs"][s3]
        bounce_cap = start_capture(fab, bounce_intf, ctx.out_dir / "tagger" / f"{bounce_intf}.pcap")
        nics, capture, qps, t0, posted = _start(ctx, fab, graph, flows, "tagger")
        cycles_seen = []

        def done():
            cycle = deadlock_cycle(graph, live_state(fab, graph))
            if cycle:
                cycles_seen.append(" -> ".join(f"{sw}-eth{port}" for sw, port, _ in cycle))
            got = {}
            for (s, d), q in qps.items():
                series = nics.nic_samples(d, since=time.monotonic() - 1.0)
                got[f"{s}->{d}"] = series[-1].rx_bytes.get(q, 0) if series else 0
            return got if all(v >= posted for v in got.values()) else None

        # A deadlock-free ring delivers it in send_s at the fair share; four times
        # that before we call it stuck.
        try:
            wait_for(
                done,
                4 * p["send_s"] + 5.0,
                "every flow's posted bytes delivered",
                0.25,
                logs=fab.log_dir(),
            )
            finished = True
        except FabricError:  # a stuck ring: this run's failed check
            finished = False
        t_end = time.monotonic()
        fab.stop_proc(capture)
        fab.stop_proc(bounce_cap)
        samples = {h: nics.nic_samples(h) for h in fabric_mod.hosts(graph)}
        wd = {sw: fab.watchdog(sw) for sw in ring}
        send_stats = {(s, d): nics.nic_stats(s).send[q] for (s, d), q in qps.items()}
        flows_tbl = {sw: fab.flows(sw) for sw in ring}
        status = fab.controller_status()
    done_at = {}
    for (s, d), q in qps.items():
        hit = [x.t for x in samples[d] if x.rx_bytes.get(q, 0) >= posted]
        done_at[f"{s}->{d}"] = (hit[0] - t0) if hit else None
    tag_packets = {
        sw: sum(f.packets for f in fl if f.cookie.startswith("0x4")) for sw, fl in flows_tbl.items()
    }
    return {
        "posted_bytes": posted,
        "finished": finished,
        "done_at_s": done_at,
        "goodput_bps": {k: posted * 8 / v if v else 0.0 for k, v in done_at.items()},
        "cycles_seen": sorted(set(cycles_seen)),
        # Go-back-N's own view: a timeout resends what may only have been queued.
        "timeouts": {f"{s}->{d}": st.timeouts for (s, d), st in send_stats.items()},
        "retransmitted": {f"{s}->{d}": st.retransmitted for (s, d), st in send_stats.items()},
        "storms": sum(w.detected for w in wd.values()),
        "tagger_status": status.get("tagger", {}),
        # Adaptive routing beside Tagger (extensions=adaptive): what it measured and placed.
        "adaptive_status": status.get("adaptive"),
        "tagged_packets": tag_packets,
        "bytes_total": window_bytes(samples, qps, t0 - 1.0, t_end),
        "timelines": timelines(samples, qps, t0),
        "rate_bps": rate,
    }


# ----- report -------------------------------------------------------------------


def report(ctx: Context, graph, results: dict) -> None:
    """Each mode's tables, texts and checks: the deadlock and the watchdog, then Tagger."""
    if "deadlock" in results:
        r = results["deadlock"]
        _deadlock_tables(ctx, r)
        _deadlock_checks(ctx, graph, r)
        _watchdog_checks(ctx, graph, r)
    if "tagger" in results:
        r = results["tagger"]
        _tagger_tables(ctx, r)
        _tagger_checks(ctx, graph, r)


def _deadlock_tables(ctx: Context, r: dict) -> None:
    """The cycle in a line, hop by hop, and the bytes each flow received in each window."""
    ctx.text(
        f"deadlock cycle (from the switches' paused ports and ingress queues): "
        f"{r['cycle_text']}\nhosts their switch was pausing too, once the senders had "
        f"stopped: {', '.join(r['hosts_paused']) or 'none'}"
    )
    ctx.table(
        "the cycle, hop by hop, once the senders had stopped",
        [
            "egress waiting",
            "paused by",
            "ingress holding it",
            "shared bytes",
            "XOFF bytes",
            "XON bytes",
            "headroom bytes",
            "PAUSE refreshes",
        ],
        [
            [
                h["waits"],
                h["paused_by"],
                h["ingress"],
                h["ingress_bytes"],
                h["xoff_bytes"],
                h["xon_bytes"],
                h["headroom_bytes"],
                r["pause_refreshed"].get(h["ingress"], 0),
            ]
            for h in r["hops"]
        ],
    )
    ctx.table(
        "deadlock, then the watchdog: bytes each flow received",
        ["flow", "after it formed", "after senders stopped", "after watchdog on", "total"],
        [
            [
                f,
                r["bytes_formed"][f],
                r["bytes_stopped"][f],
                r["bytes_recovered"][f],
                r["bytes_total"][f],
            ]
            for f in r["bytes_formed"]
        ],
    )


def _deadlock_checks(ctx: Context, graph, r: dict) -> None:
    """The cycle through every switch, its queues full, no goodput, PAUSE kept up."""
    ring = set(fabric_mod.switches(graph))
    ctx.check(
        "deadlock: a wait-for cycle through every ring switch",
        set(r["cycle_switches"]) == ring,
        r["cycle_text"],
        "a cycle over " + ", ".join(sorted(ring)),
    )
    ctx.check(
        "deadlock: every ingress queue on the cycle full to XOFF",
        len(r["hops"]) == len(ring) and len(r["above_xoff"]) == len(r["hops"]),
        f"{len(r['above_xoff'])}/{len(r['hops'])}, fullest at "
        + ", ".join(f"{h['ingress_bytes'] / h['xoff_bytes']:.1%}" for h in r["hops"])
        + " of XOFF",
        "all: above XON (XOFF - 2 frames, PFC's hysteresis) or frames in the headroom",
    )
    formed_s = r["window_formed"][1] - r["window_formed"][0]
    ctx.check(
        "deadlock: zero goodput on every cycle flow after it formed",
        all(v == 0 for v in r["bytes_formed"].values()),
        f"{sum(r['bytes_formed'].values())} bytes in {formed_s:.1f} s",
        "0 bytes",
    )
    ctx.check(
        "deadlock: still zero after the senders stopped, and no frame crossed a ring link",
        all(v == 0 for v in r["bytes_stopped"].values()) and r["ring_tx_stopped"] == 0,
        f"{sum(r['bytes_stopped'].values())} bytes, {r['ring_tx_stopped']} ring frames in "
        f"{r['window_stopped'][1] - r['window_stopped'][0]:.1f} s",
        "0 and 0",
    )
    ctx.check(
        "deadlock: every switch on the cycle keeps pausing its upstream",
        bool(r["hops"]) and all(v >= 1 for v in r["pause_refreshed"].values()),
        ", ".join(f"{k}: {v}" for k, v in r["pause_refreshed"].items()) or "no cycle",
        f">= 1 PAUSE refresh each (every {r['refresh_s']:.2f} s: half of 65535 quanta, 802.1Qbb)",
    )


def _watchdog_checks(ctx: Context, graph, r: dict) -> None:
    """The watchdog finds a stuck queue of the cycle in time, drops, and goodput returns."""
    # SONiC's detection time on the fabric's clock, plus a poll to see the
    # queue send nothing and one to declare it (emu/switch/watchdog.py).
    spec = WatchdogSpec()
    limit = spec.detection_s * graph.graph["time_scale"] + 2 * spec.poll_s
    first = min((s["after_s"] for s in r["storms_on_cycle"]), default=None)
    ctx.check(
        "watchdog: detects a stuck queue of the cycle",
        first is not None and first <= limit,
        "none" if first is None else f"{first:.2f} s after it was turned on",
        f"<= {limit:.1f} s (SONiC's 200 ms detection x time scale "
        f"{graph.graph['time_scale']:g}, + two polls)",
    )
    ctx.check(
        "watchdog: drops the stuck queues' frames",
        r["watchdog_drops"] > 0,
        r["watchdog_drops"],
        "> 0",
    )
    ctx.check(
        "watchdog: goodput back on every cycle flow",
        all(v > 0 for v in r["bytes_recovered"].values()),
        ", ".join(
            f"{k} {v * 8 / 1e6 / ctx.params['recover_s']:.2f} Mbit/s"
            for k, v in r["bytes_recovered"].items()
        ),
        "> 0 on each (0 while deadlocked)",
    )


def _tagger_tables(ctx: Context, r: dict) -> None:
    """Each flow under Tagger, its rules and what they did, and adaptive routing's part."""
    ctx.table(
        "Tagger: the same routes and traffic",
        ["flow", "delivered bytes", "done after s", "goodput Mbit/s", "RTO timeouts"],
        [
            [
                f,
                r["bytes_total"][f],
                "-" if r["done_at_s"][f] is None else f"{r['done_at_s'][f]:.2f}",
                r["goodput_bps"][f] / 1e6,
                r["timeouts"][f],
            ]
            for f in r["done_at_s"]
        ],
    )
    ctx.text(
        f"Tagger rules: {r['tagger_status']}; packets re-tagged or queued by them per switch: "
        f"{r['tagged_packets']}"
    )
    if r.get("adaptive_status") is not None:
        a = r["adaptive_status"]
        ctx.text(
            "Adaptive routing beside Tagger (extensions=adaptive): "
            f"{a['placed_total']} elephants placed, {len(a['placements'])} placed now, "
            f"{len(a['hot_ports'])} hot ports; it places only on the paths routing's "
            "one-way policy allows, and Tagger's flows decide a re-tagged packet's hop"
        )


def _tagger_checks(ctx: Context, graph, r: dict) -> None:
    """Tagger's rules used, no cycle, no stuck queue, every flow done at a fair rate."""
    rate = ctx.params["rate_mbps"] * 1e6
    bounces = r["tagger_status"].get("bounces", 0)
    tagged = sum(r["tagged_packets"].values())
    ctx.check(
        "tagger: rules installed and used by real packets",
        bounces > 0 and tagged > 0,
        f"{bounces} bounce rules, {tagged} packets",
        "> 0 and > 0",
    )
    ctx.check(
        "tagger: no wait-for cycle at any poll",
        not r["cycles_seen"],
        "; ".join(r["cycles_seen"]) or "none",
        "none",
    )
    ctx.check(
        "tagger: no queue stuck in PAUSE (watchdog, alert only)",
        r["storms"] == 0,
        r["storms"],
        f"0 storms (paused with frames and nothing sent for SONiC's 200 ms x time scale "
        f"{graph.graph['time_scale']:g})",
    )
    # Model: two flows share every ring link, so the max-min fair share is half
    # the link; PFC is not fair (it pauses per ingress port, not per flow), so
    # the bound is half the fair share.
    bound = rate / 4
    ctx.check(
        "tagger: every flow finishes at >= half its fair share",
        r["finished"] and all(v >= bound for v in r["goodput_bps"].values()),
        ", ".join(f"{k} {v / 1e6:.2f}" for k, v in r["goodput_bps"].items()) + " Mbit/s",
        f">= {bound / 1e6:.2f} Mbit/s (fair share {rate / 2e6:.2f}: two flows per ring link)",
    )


def plot(ctx: Context, results: dict) -> None:
    panels = []
    if "deadlock" in results:
        r = results["deadlock"]
        panels.append(
            Panel(
                "clockwise routes: deadlock, then the watchdog",
                "time since the senders started (s)",
                "goodput (Mbit/s)",
                lines={
                    f: ([t for t, _ in s], [m for _, m in s]) for f, s in r["timelines"].items()
                },
                vline=r["watchdog_on_at_s"],
                vline_label="watchdog on",
            )
        )
    if "tagger" in results:
        r = results["tagger"]
        panels.append(
            Panel(
                "the same with Tagger",
                "time since the senders started (s)",
                "goodput (Mbit/s)",
                lines={
                    f: ([t for t, _ in s], [m for _, m in s]) for f, s in r["timelines"].items()
                },
            )
        )
    if panels:
        path = save_panels(ctx.out_dir / "pfc-deadlock.png", panels, title="PFC deadlock on a ring")
        ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_DEADLOCK_FIGURES = (
    ("formed after (s)", ("formed_after_s",)),
    ("switches on the wait-for cycle", ("cycle_switches",), {"op": "len"}),
    ("ring ingress queues full to XOFF", ("above_xoff",), {"op": "len"}),
    ("bytes received after it formed (all flows)", ("bytes_formed",), {"op": "sum"}),
    ("bytes received after the senders stopped (all flows)", ("bytes_stopped",), {"op": "sum"}),
    ("ring frames sent after the senders stopped", ("ring_tx_stopped",)),
    ("fewest PAUSE refreshes of a switch on the cycle", ("pause_refreshed",), {"op": "min"}),
    ("hosts paused by their switch", ("hosts_paused",), {"op": "len"}),
    (
        "watchdog: storm declared after it was on (s)",
        ("storms_on_cycle", WILDCARD, "after_s"),
        {"op": "min"},
    ),
    ("watchdog: frames dropped", ("watchdog_drops",)),
    ("watchdog on: fewest bytes a flow received (B)", ("bytes_recovered",), {"op": "min"}),
    ("watchdog on: most bytes a flow received (B)", ("bytes_recovered",), {"op": "max"}),
)

_TAGGER_FIGURES = (
    ("wait-for cycles seen", ("cycles_seen",), {"op": "len"}),
    ("storms (watchdog alert only)", ("storms",)),
    ("slowest flow (Mbit/s)", ("goodput_bps",), {"op": "min", "scale": 1e-6}),
    ("fastest flow (Mbit/s)", ("goodput_bps",), {"op": "max", "scale": 1e-6}),
    ("last flow done after (s)", ("done_at_s",), {"op": "max"}),
    ("RTO timeouts (all flows)", ("timeouts",), {"op": "sum"}),
    ("packets through Tagger's rules", ("tagged_packets",), {"op": "sum"}),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "pfc-deadlock",
        "pfc-deadlock",
        "pfc-deadlock: a ring of clockwise routes, the watchdog and Tagger",
        quick=("recover_s=5",),
        figures=per_key(("deadlock",), ("modes",), _DEADLOCK_FIGURES)
        + per_key(("tagger",), ("modes",), _TAGGER_FIGURES),
        timeout_s=600,
    ),
)
