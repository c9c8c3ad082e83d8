"""pause-storm: one NIC stops draining and floods PAUSE; PFC watchdog off vs on.

      spine1          spine2
       |  \\          /  |
      leaf1   leaf2   leaf3   leaf4
      h1 h2   h3 h4   h5 h6   h7 h8      every host sends RoCEv2 to every other
                                          host (all-to-all, one lossless class)
      h1's NIC gets stuck at t = fault_at_s: it stops draining and sends
      PFC PAUSE for priority 3 at the refresh rate, forever.

Watchdog off: leaf1 stops sending to h1, its queue to h1 fills, leaf1's
ingress queues cross XOFF and it pauses the spines; the spines' queues toward
leaf1 fill and they pause every other leaf: the storm spreads through the
fabric and nearly every flow stalls, even those that never touch h1.
Watchdog on (SONiC semantics, detection 200 ms): leaf1 sees its queue to h1
paused with no progress for the detection time, drops what it holds and
everything that arrives for it, and ignores h1's PAUSE: the storm is contained
and the other flows recover.

Run:  emu run pause-storm
      emu run pause-storm --topo FILE [--set stuck_host=NAME]
                    (any topology file of two switches or more; the stuck
                    NIC is the file's first host unless named)
"""

from __future__ import annotations

import dataclasses
import threading
import time

from emu import fabric as fabric_mod
from emu import topopick
from emu.answers import WatchdogEvent
from emu.config import WatchdogSpec
from emu.faults import Faults
from emu.figures import Entry, per_key
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    choices,
    fabric_options,
    fabric_params,
)
from emu.telemetry import Panel, save_panels, start_capture
from emu.traffic.rdma import RdmaHosts, received_bps

DESCRIPTION = "a stuck NIC floods PAUSE: the storm spreads with the watchdog off, not on"
SLACK_S = 0.15
# The stuck host, the flows and their rates come from the graph, so a topology
# file may replace the shape parameters (emu/scenario.py).
TOPOLOGY_FILE = True

PARAMS = {
    # Time scale 1 (modelled_gbps 0: the link rate itself): the storm and the
    # watchdog live on SONiC's 200 ms scale, which a faster modelled NIC would
    # stretch past the run (x1250 at 25 Gbit/s: 250 s). The NICs' retransmit
    # timeout is then the IB local ACK timeout of 67 ms or, longer here, the
    # fabric's lossless buffer bound (emu/host/rto.py, 1.1 s on this fabric):
    # queue pairs held by the storm for longer time out and send again once
    # released, as a NIC stalled by a real storm does.
    # 20 Mbit/s since the NIC's transport runs in C (issue 29; docs/results.md).
    **fabric_params(rate_mbps=20.0),
    "load": Param(
        0.4,
        "each host's sending rate as a fraction of its link, spread over its flows",
        min=0.05,
        max=1.0,
    ),
    "fault_at_s": Param(3.0, "when the NIC gets stuck", min=1.0, max=60.0),
    "duration_s": Param(9.0, "how long the flows run", min=4.0, max=600.0),
    "stuck_host": Param("", "the host whose NIC gets stuck (empty: the fabric's first host)"),
    "modes": Param("off,on", "watchdog modes to run: off, on"),
}


def validate(params: dict) -> None:
    choices(params, "modes", ("off", "on"))
    if params["fault_at_s"] + 2.0 > params["duration_s"]:
        raise ScenarioError(
            f"parameter fault_at_s={params['fault_at_s']}: leave at least 2 s "
            f"before duration_s={params['duration_s']}"
        )
    graph = build_fabric_graph(params)
    # The victim comes from the graph (h1 on the builders' fabrics), so that a
    # topology file with hosts of its own names needs no stuck_host.
    params["stuck_host"] = params["stuck_host"] or fabric_mod.hosts(graph)[0]
    if params["stuck_host"] not in fabric_mod.hosts(graph):
        raise ScenarioError(
            f"parameter stuck_host={params['stuck_host']!r}: not a host of "
            f"this fabric ({', '.join(fabric_mod.hosts(graph))})"
        )
    leaf = graph.nodes[params["stuck_host"]]["leaf"]
    if not any(graph.nodes[n]["kind"] == "switch" for n in graph.neighbors(leaf)):
        raise ScenarioError(
            f"{params.get('topo') or 'the fabric'}: {params['stuck_host']}'s switch {leaf} has "
            "no other switch to pause: the storm needs a fabric of two switches or more"
        )


def all_to_all(graph) -> list[tuple[str, str]]:
    """Every ordered pair of hosts: lossless traffic between all hosts."""
    hosts = fabric_mod.hosts(graph)
    return [(s, d) for s in hosts for d in hosts if s != d]


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    flows = all_to_all(graph)
    ctx.metrics["flows"] = flows
    results = {}
    for mode in p["modes"].split(","):
        ctx.log(f"pause-storm: watchdog {mode}")
        results[mode] = run_mode(ctx, graph, mode, flows)
    ctx.metrics["modes"] = results
    report(ctx, results)
    plot(ctx, results)


def run_mode(ctx: Context, graph, mode: str, flows: list[tuple[str, str]]) -> dict:
    p = ctx.params
    stuck = p["stuck_host"]
    qos = {"watchdog": {"enabled": mode == "on"}, "ecn": {"enabled": False}}
    with ctx.fabric(graph, f"watchdog-{mode}", **fabric_options(p), qos=qos) as fab:
        hosts = fabric_mod.hosts(graph)
        nics = RdmaHosts(fab, hosts, dcqcn=False)
        faults = Faults(fab, nics)
        # The stuck host's link, for Wireshark: its PAUSE flood and what leaf1 does.
        stuck_leaf = graph.nodes[stuck]["leaf"]
        intf = graph.edges[stuck, stuck_leaf]["intfs"][stuck_leaf]
        capture = start_capture(fab, intf, ctx.out_dir / f"watchdog-{mode}" / f"{intf}.pcap")
        # Each host sends `load` of its own link's rate, spread over its flows.
        per_flow = {
            h: p["load"] * topopick.host_rate_bps(graph, h) / (len(hosts) - 1) for h in hosts
        }
        qps = {(s, d): nics.connect(s, d, max_rate_bps=per_flow[s]) for s, d in flows}
        for (s, _), q in qps.items():
            nics.post(s, q, 16384, int(per_flow[s] * p["duration_s"] / 8 / 16384) + 2)
        t0 = time.time()
        stop = threading.Event()
        stop.wait(p["fault_at_s"])
        faults.stuck_nic(stuck)
        t_fault = time.time()
        stop.wait(max(0.0, p["duration_s"] - (time.time() - t0)))
        fab.stop_proc(capture)
        samples = {h: nics.nic_samples(h) for h in hosts}
        collected_at = time.time()
        watchdog = {sw: fab.watchdog(sw) for sw in fabric_mod.switches(graph)}
        counters = {sw: fab.counters(sw) for sw in fabric_mod.switches(graph)}
    return measure(ctx, mode, graph, qps, samples, watchdog, counters, t_fault, collected_at)


def measure(ctx, mode, graph, qps, samples, watchdog, counters, t_fault, collected_at) -> dict:
    p = ctx.params
    stuck = p["stuck_host"]
    stuck_leaf = graph.nodes[stuck]["leaf"]
    per_flow = {}
    timelines = {}
    for (s, d), q in qps.items():
        series = samples[d]
        if not series:
            continue
        # Agent samples are on the agent's monotonic clock, and its last sample
        # was taken within one sample period of `collected_at`.
        end = series[-1].t
        fault = end - (collected_at - t_fault)
        before = received_bps(series, q, fault - 1.5, fault - 0.2)
        after = received_bps(series, q, end - 2.0, end)
        per_flow[f"{s}->{d}"] = {
            "before_bps": before,
            "after_bps": after,
            "involves_stuck": stuck in (s, d),
        }
        pts = [(x.t - fault, x.rx_bytes.get(q, 0)) for x in series]
        timelines[f"{s}->{d}"] = [
            (t1, (b1 - b0) * 8 / (t1 - t0_) / 1e6)
            for (t0_, b0), (t1, b1) in zip(pts, pts[1:])
            if t1 > t0_
        ]
    others = {k: v for k, v in per_flow.items() if not v["involves_stuck"]}
    stalled = [k for k, v in others.items() if v["after_bps"] < 0.1 * max(v["before_bps"], 1)]
    recovered = [k for k, v in others.items() if v["after_bps"] >= 0.5 * v["before_bps"]]
    paused_switches = sorted(
        sw
        for sw, c in counters.items()
        if any(v for v in c.pfc.pause_rx.values()) and sw != stuck_leaf
    )
    storms = [
        _event_doc(e, switch=sw)
        for sw, w in watchdog.items()
        for e in w.events
        if e.kind == "storm"
    ]
    return {
        "per_flow": per_flow,
        "timelines": timelines,
        "other_flows": len(others),
        "stalled": stalled,
        "recovered": recovered,
        "stalled_fraction": len(stalled) / len(others) if others else 0.0,
        "recovered_fraction": len(recovered) / len(others) if others else 0.0,
        "pause_reached_switches": paused_switches,
        "storm_events": storms,
        "detected_after_s": _detection_delay(storms, t_fault),
        "watchdog_drops": sum(w.drops for w in watchdog.values()),
        "storms_detected": sum(w.detected for w in watchdog.values()),
    }


def _event_doc(event: WatchdogEvent, **extra) -> dict:
    """`event` as metrics.json records it: the switch's own keys ("wall" only when the
    switch stamped one), then `extra`."""
    doc = {k: v for k, v in dataclasses.asdict(event).items() if k != "wall" or v is not None}
    return {**doc, **extra}


def _detection_delay(storms: list[dict], t_fault: float) -> float | None:
    """Seconds from the fault to the first storm event (switch events carry wall time)."""
    walls = [e["wall"] for e in storms if "wall" in e]
    return min(walls) - t_fault if walls else None


def report(ctx: Context, results: dict) -> None:
    wd = ctx.params
    rows = []
    for mode, r in results.items():
        rows.append(
            [
                mode,
                r["other_flows"],
                len(r["stalled"]),
                len(r["recovered"]),
                ", ".join(r["pause_reached_switches"]) or "-",
                len(r["storm_events"]),
                "-" if r["detected_after_s"] is None else f"{r['detected_after_s']:.2f}",
                r["watchdog_drops"],
            ]
        )
    ctx.table(
        f"NIC of {wd['stuck_host']} stuck at t={wd['fault_at_s']:g} s; "
        f"{len(ctx.metrics['flows'])} flows, each host at {wd['load']:.0%} of its link",
        [
            "watchdog",
            "other flows",
            "stalled",
            "recovered",
            "PAUSE reached (beyond the stuck leaf)",
            "storms",
            "detected after s",
            "watchdog drops",
        ],
        rows,
    )
    # The watchdog's detection in emulated seconds: SONiC's modelled 200 ms on
    # the fabric's clock (emu/fabric/, "The time scale").
    spec = WatchdogSpec()
    detection = spec.detection_s * build_fabric_graph(wd).graph["time_scale"]
    poll = spec.poll_s
    if "off" in results:
        r = results["off"]
        ctx.check(
            "watchdog off: >= 90% of the other flows stall",
            r["stalled_fraction"] >= 0.9,
            f"{len(r['stalled'])}/{r['other_flows']}",
            ">= 90%",
        )
        ctx.check(
            "watchdog off: PAUSE spreads beyond the faulty host's leaf",
            len(r["pause_reached_switches"]) > 0,
            ", ".join(r["pause_reached_switches"]) or "none",
            "other switches paused",
        )
    if "on" in results:
        r = results["on"]
        delay = r["detected_after_s"]
        ctx.check(
            "watchdog on: storm detected within detection time + one poll",
            delay is not None and delay <= detection + poll + SLACK_S,
            "not detected" if delay is None else f"{delay:.2f} s after the fault",
            f"<= {detection + poll:.1f} s (+{SLACK_S} s for the fault to reach the NIC "
            "and the queue to fill)",
        )
        ctx.check(
            "watchdog on: the faulty queue is isolated",
            r["watchdog_drops"] > 0,
            r["watchdog_drops"],
            "> 0 frames dropped for it",
        )
        ctx.check(
            "watchdog on: the other flows recover",
            r["recovered_fraction"] >= 0.9,
            f"{len(r['recovered'])}/{r['other_flows']}",
            ">= 90% at >= half their rate",
        )


def plot(ctx: Context, results: dict) -> None:
    stuck = ctx.params["stuck_host"]
    panels = []
    for mode, r in results.items():
        groups: dict[str, dict[float, float]] = {
            f"flows not touching {stuck}": {},
            f"flows to/from {stuck}": {},
        }
        for name, series in r["timelines"].items():
            key = (
                f"flows to/from {stuck}"
                if r["per_flow"][name]["involves_stuck"]
                else f"flows not touching {stuck}"
            )
            for t, mbps in series:
                slot = round(t * 5) / 5  # 200 ms bins: receivers sample on their own clocks
                groups[key][slot] = groups[key].get(slot, 0.0) + mbps / 2
        lines = {k: (sorted(v), [v[t] for t in sorted(v)]) for k, v in groups.items()}
        panels.append(
            Panel(
                f"watchdog {mode}: total goodput",
                "time since the fault (s)",
                "Mbit/s",
                lines=lines,
                vline=0.0,
                vline_label="NIC stuck",
            )
        )
    if panels:
        path = save_panels(ctx.out_dir / "pause-storm.png", panels, title="pause storm")
        ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_MODE = (
    ("other flows", ("other_flows",)),
    ("stalled", ("stalled",), {"op": "len"}),
    ("recovered", ("recovered",), {"op": "len"}),
    ("switches PAUSE reached beyond the stuck leaf", ("pause_reached_switches",), {"op": "len"}),
    ("storms detected", ("storm_events",), {"op": "len"}),
    ("detected after (s)", ("detected_after_s",)),
    ("watchdog drops", ("watchdog_drops",)),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "pause-storm",
        "pause-storm",
        "pause-storm: watchdog off vs on",
        figures=per_key(("off", "on"), ("modes",), _FIGURES_PER_MODE),
        timeout_s=600,
    ),
)
