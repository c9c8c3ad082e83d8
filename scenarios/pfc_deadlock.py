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

The ring, its flows, the switches' state and the wait-for graph are
emu/traffic/deadlock.py's; the numbers the checks compare with (PAUSE
refresh, XON, the watchdog's bound, the fair share) emu/models/deadlock.py's.
"""

from __future__ import annotations

from emu import config
from emu import fabric as fabric_mod
from emu.figures import WILDCARD, Entry, per_key
from emu.models import deadlock as model
from emu.net import default_switch_processes
from emu.scenario import Context, Param, choices, fabric_options
from emu.telemetry import save_panels
from emu.traffic import deadlock as ring

DESCRIPTION = (
    "routes around a ring deadlock PFC: the cycle named, watchdog breaks it, Tagger prevents it"
)

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


def run(ctx: Context) -> None:
    p = ctx.params
    graph = ring.ring_graph(p["rate_mbps"], p["modelled_gbps"])
    flows = ring.ring_flows(graph)
    ctx.metrics["flows"] = [f"{s}->{d}" for s, d in flows]
    load = ring.RingLoad(p["rate_mbps"] * 1e6, p["send_s"], p["hold_s"], p["recover_s"])
    results = {}
    for mode in [m for m in p["modes"].split(",") if m]:
        ctx.log(f"pfc-deadlock: {mode}")
        workload = ring.run_deadlock if mode == "deadlock" else ring.run_tagger
        results[mode] = workload(ctx, graph, flows, load, fabric_options(p))
    ctx.metrics["modes"] = {
        m: {k: v for k, v in r.items() if k != "timelines"} for m, r in results.items()
    }
    report(ctx, graph, results)
    plot(ctx, results)


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
    switches = set(fabric_mod.switches(graph))
    ctx.check(
        "deadlock: a wait-for cycle through every ring switch",
        set(r["cycle_switches"]) == switches,
        r["cycle_text"],
        "a cycle over " + ", ".join(sorted(switches)),
    )
    ctx.check(
        "deadlock: every ingress queue on the cycle full to XOFF",
        len(r["hops"]) == len(switches) and len(r["above_xoff"]) == len(r["hops"]),
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
    # SONiC's detection time on the fabric's clock, plus two polls (emu/models/deadlock.py).
    limit = model.watchdog_detection_bound_s(graph.graph["time_scale"])
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
    fair = min(model.fair_share_bps(ring.ring_paths(graph, ring.ring_flows(graph)), rate))
    bound = model.pfc_goodput_floor_bps(fair)
    ctx.check(
        "tagger: every flow finishes at >= half its fair share",
        r["finished"] and all(v >= bound for v in r["goodput_bps"].values()),
        ", ".join(f"{k} {v / 1e6:.2f}" for k, v in r["goodput_bps"].items()) + " Mbit/s",
        f">= {bound / 1e6:.2f} Mbit/s (fair share {fair / 1e6:.2f}: two flows per ring link)",
    )


def plot(ctx: Context, results: dict) -> None:
    """Each flow's goodput over time in each mode, the watchdog's moment marked."""
    panels = []
    if "deadlock" in results:
        r = results["deadlock"]
        title = "clockwise routes: deadlock, then the watchdog"
        panels.append(
            ring.goodput_panel(title, r["timelines"], r["watchdog_on_at_s"], "watchdog on")
        )
    if "tagger" in results:
        panels.append(ring.goodput_panel("the same with Tagger", results["tagger"]["timelines"]))
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
