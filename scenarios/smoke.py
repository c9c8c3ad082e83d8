"""smoke: the fabric boots, routes, spreads, paces and heals.

    leaf_spine (default)                     fat_tree (--set topology=fat_tree --set k=4)

      spine1        spine2                          c1  c2  c3  c4
       |    \\      /    |                          (k/2)^2 core switches
       |     \\    /     |                           |   |   |   |
      leaf1  leaf2  leaf3  leaf4                  a1 a2 ... a8     aggregation (k per pod pair)
      |  |   |  |   |  |   |  |                   e1 e2 ... e8     edge
      h1 h2  h3 h4  h5 h6  h7 h8                  h1 ....... h16   k^3/4 hosts

    rail_optimized (nodes=2,                 torus (dims=3x3,        dragonfly (groups=3,
      gpus_per_node=2, spines=2)               hosts_per_leaf=1)       routers_per_group=2)

      spine1    spine2                       t0_0-t0_1-t0_2-+         g1r1==g1r2   local links
       |    \\  /    |                          |    |    |  (wrap)     \\     /    in a group,
      rail1    rail2                         t1_0-t1_1-t1_2-+         g2r2  g3r1   one global
      |   |    |   |                           ...  (wrap)            /  ||   || \\ link per pair
      h1  h3   h2  h4  (h1,h2: node 1)       each with its host      g2r1 ... g3r2  of groups

What it shows, step by step, on real packets through emu switches driven by
the routing controller over OpenFlow 1.3:
1. the fabric converges: LLDP finds every link, ARP finds every host;
2. all-pairs ping has 0% loss;
3. TCP (iperf3) between hosts on different switches reaches >= 90% of the
   link rate, and the switch never sends faster than the rate plus a burst
   (with host NIC pacing, the default, the sender's NIC paces too; `--set
   host_nic_pacing=false` leaves the pacing to the switches alone, as the
   scenario test does);
4. many TCP flows between two switches are spread over more than one first
   hop (ECMP with SELECT groups, visible in the first switch's port counters)
   and, in a fabric with tiers, over more than one top-tier switch;
5. a link out of the first switch, on the path the traffic took, taken down
   under ping traffic: reachability comes back over the other path without
   restarting anything; the report shows when.

The pair of hosts for steps 3-5 is read from the graph: the first host and a
host on another switch (in another pod where there are pods) whose switches
are joined by shortest paths that differ in their first hop, the ones the
routing controller's ECMP spreads over (on a leaf/spine and a fat tree, the
first host and the last host of another leaf or pod).

Each step's measurement is in emu/traffic (ping.py, line_rate.py,
ecmp_spread.py, outage.py) and its frame arithmetic in emu/models/wire.py;
this file says what runs, in which order, and what passes.

Run:  emu run smoke                     (2 spines, 4 leaves, 8 hosts)
      emu run smoke --set topology=fat_tree --set k=4 --out results/smoke
      emu run smoke --set topology=rail_optimized --set nodes=2 --set gpus_per_node=2
      emu run smoke --set topology=torus --set dims=3x3 --set hosts_per_leaf=1
      emu run smoke --set topology=dragonfly --set groups=3 --set routers_per_group=2 \\
                    --set hosts_per_leaf=1
      emu run smoke --topo topologies/leaf-spine-2x2.yaml
                                        (any topology file with two hosts whose
                                        switches have two disjoint first hops)
"""

from __future__ import annotations

import networkx as nx

from emu import fabric as fabric_mod
from emu import topopick
from emu.figures import Entry, Figure
from emu.models import wire
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
)
from emu.telemetry import Panel, save_panels
from emu.traffic import ecmp_spread, line_rate, outage, ping

DESCRIPTION = "fabric boots, all-pairs ping, TCP at line rate, ECMP spreading, link failure"

PARAMS = {
    # 40 Mbit/s: twice the fabric default, kept on time by the C data plane
    # (issue 27; docs/performance.md, "The hosts' own TCP/UDP scenarios").
    **fabric_params(rate_mbps=40.0),
    "iperf_s": Param(5.0, "duration of each iperf3 test in seconds", min=1.0, max=120.0),
    "ecmp_flows": Param(16, "parallel TCP flows for the ECMP spreading test", min=2, max=64),
    "link_down": Param(
        True, "take a link on the traffic's path down under traffic and measure recovery"
    ),
    "ping_count": Param(3, "pings per host pair", min=1, max=20),
}

# Every step reads the fabric from the graph, so a topology file may replace
# the shape parameters (emu/scenario.py).
TOPOLOGY_FILE = True

# A sender may exceed the link rate over a short window only by the scheduler's
# burst allowance (two full frames) plus one sampling period's jitter.
PACING_TOLERANCE = 0.02

# The link failure: pings every 20 ms for 4 s from each host on the sender's
# switch; their path is measured from 0.3 s and the link goes down at 1 s.
CUT_INTERVAL_S, CUT_DURATION_S = 0.02, 4.0


def validate(params: dict) -> None:
    """Build the graph now (no root needed), so that a bad shape is one line before any run."""
    fabric_graph(params)


def fabric_graph(params: dict):
    """The fabric to smoke: any shape, as long as every host can reach every other."""
    try:
        graph = build_fabric_graph(params)
    except fabric_mod.FabricSpecError as exc:
        raise ScenarioError(str(exc)) from None
    if not nx.is_connected(fabric_mod.network(graph)):
        # rail_optimized with spines=0 (rail-only): the rails are islands by design.
        raise ScenarioError(
            f"smoke pings every pair of hosts, and {graph.graph['name']} is not connected "
            "(rail-only: give spines >= 1)"
        )
    return graph


def run(ctx: Context) -> None:
    p = ctx.params
    graph = fabric_graph(p)
    rate_bps = int(p["rate_mbps"] * 1e6)
    counts = fabric_mod.expected_counts(graph)
    ctx.metrics["fabric"] = {"name": graph.graph["name"], **counts, "rate_bps": rate_bps}
    ctx.log(
        f"smoke: building {graph.graph['name']} ({counts['switches']} switches, "
        f"{counts['hosts']} hosts, {counts['switch_links']} fabric links)"
    )
    panels = []
    with ctx.fabric(graph, **fabric_options(p)) as fab:
        ctx.event("converged", after_s=round(fab.converged_after_s, 2))
        status = fab.controller_status()
        ctx.metrics["converge_s"] = fab.converged_after_s
        ctx.check(
            "LLDP found every link",
            len(status["links"]) == 2 * counts["switch_links"],
            len(status["links"]) // 2,
            f"{counts['switch_links']} links",
        )
        ctx.check(
            "ARP found every host",
            len(status["hosts"]) == counts["host_addresses"],
            len(status["hosts"]),
            f"{counts['host_addresses']} host addresses",
        )
        all_pairs_ping(ctx, fab, "all-pairs ping")
        if any(graph.nodes[s]["role"] == "nvswitch" for s in fabric_mod.switches(graph)):
            nvlink_ping(ctx, fab)
        src, dst = topopick.spread_pair(graph)
        panels.append(tcp_line_rate(ctx, fab, src, dst, rate_bps))
        panels.append(ecmp_spreading(ctx, fab, src, dst))
        if p["link_down"]:
            panels.append(link_failure(ctx, fab, src, dst))
            all_pairs_ping(ctx, fab, "all-pairs ping after link failure")
    # smoke.png: pacing at the receiver's port, ECMP shares, pings across the failure.
    panels = [panel for panel in panels if panel is not None]
    if panels:
        ctx.plots.append(save_panels(ctx.out_dir / "smoke.png", panels, graph.graph["name"]).name)


def all_pairs_ping(ctx: Context, fab, label: str) -> None:
    """Every host pings every other: every pair tested, none lost a ping."""
    pings = ping.all_pairs(fab, count=ctx.params["ping_count"])
    pings.report(ctx, label)
    ctx.check(
        f"{label}: every pair tested",
        pings.pairs == pings.expected_pairs,
        pings.pairs,
        f"{pings.expected_pairs} pairs",
    )
    ctx.check(f"{label}: 0% loss", pings.lossless, pings.loss_text(), "0% loss")


def nvlink_ping(ctx: Context, fab) -> None:
    """Every GPU pings the other GPUs of its node at their NVLink addresses.

    Judged by the NVSwitches' counters too: the replies come back, and the
    echo frames crossed the node's NVSwitch, not the network (the rail
    leaves see none of them).
    """
    nv = ping.nvlink_ping(fab, count=ctx.params["ping_count"])
    nv.report(ctx)
    ctx.check(
        "NVLink ping: 0% loss inside every node", nv.lossless, f"{nv.received}/{nv.sent}", "all"
    )
    # An echo request and its reply each cross the NVSwitch once (ARP adds a few).
    ctx.check(
        "NVLink ping: through the NVSwitches",
        nv.nvswitch_rx_frames >= 2 * nv.received,
        nv.nvswitch_rx_frames,
        f">= {2 * nv.received} frames (request + reply per echo)",
    )


def tcp_line_rate(ctx: Context, fab, src: str, dst: str, rate_bps: int) -> Panel | None:
    """One TCP flow src -> dst: >= 90% of the link rate on the wire, and the last
    hop's egress never above the link rate plus the scheduler's burst."""
    tcp = line_rate.measure(fab, src, dst, rate_bps, ctx.params["iperf_s"])
    if tcp.error is not None:
        ctx.check("TCP reaches >= 90% of link rate", False, tcp.error, ">= 0.9")
        return None
    tcp.report(ctx)
    ctx.check(
        "TCP reaches >= 90% of link rate",
        tcp.wire_bps >= 0.9 * rate_bps,
        round(tcp.wire_bps / rate_bps, 3),
        ">= 0.9 of the link rate (frames on the wire)",
    )
    allowed = wire.paced_peak_bps(rate_bps, tcp.window_s, PACING_TOLERANCE)
    ctx.check(
        "pacing: never above link rate + burst",
        bool(tcp.windows_bps) and tcp.peak_window_bps <= allowed,
        f"{tcp.peak_window_bps / 1e6:.2f} Mb/s peak",
        f"<= {allowed / 1e6:.2f} Mb/s",
    )
    return tcp.panel()


def ecmp_spreading(ctx: Context, fab, src: str, dst: str) -> Panel:
    """Many TCP flows src -> dst: more than one first hop (and top-tier switch) carries them.

    Which way each flow went is the switches' own trace of its 5-tuple, and a
    switch carries flows when its counters sent at least the payload the
    receiver got on them (emu/traffic/ecmp_spread.py).
    """
    duration_s = max(2.0, ctx.params["iperf_s"] / 2)
    spread = ecmp_spread.measure(fab, src, dst, ctx.params["ecmp_flows"], duration_s)
    spread.report(ctx)
    used = spread.used(spread.at_first_hop)
    flows = ", ".join(f"{n}: {c.flows}" for n, c in spread.at_first_hop.items())
    ctx.check(
        "ECMP spreads flows over more than one first hop",
        len(used) > 1,
        f"{len(used)} of {len(spread.at_first_hop)} carry flows ({flows})",
        "> 1 (each with its flows' received payload on its port counter)",
    )
    # In a flat fabric (torus, dragonfly) every switch is "top": only the first hop says anything.
    if spread.at_top:
        used_top = spread.used(spread.at_top)
        ctx.check(
            "ECMP spreads flows over more than one top-tier switch",
            len(used_top) > 1,
            f"{len(used_top)} of {len(spread.at_top)} carry flows",
            "> 1 (each with its flows' received payload on its port counters)",
        )
    return spread.panel()


def link_failure(ctx: Context, fab, src: str, dst: str) -> Panel:
    """Pings every 20 ms from each host on src's switch to dst; a first hop goes down at t=1 s.

    The link cut is the one, among src's switch's links on a shortest path to
    dst's (each with another beside it: `spread_pair` chose dst so), that
    carried the most of the pings in the 0.7 s before the cut: the path the
    pings took, so that the cut is on it.
    """
    graph = fab.graph
    leaf = graph.nodes[src]["leaf"]
    senders = [h for h in fabric_mod.hosts(graph) if graph.nodes[h]["leaf"] == leaf]
    hops = topopick.first_hops(graph, leaf, graph.nodes[dst]["leaf"])
    cut = outage.cut_under_pings(
        fab, leaf, hops, senders, dst, interval_s=CUT_INTERVAL_S, duration_s=CUT_DURATION_S
    )
    cut.report(ctx)
    # The model: one sender's echo requests, one frame per interval; half of
    # them leaves room for the window's edges.
    expected = 0.5 * wire.ping_stream_bytes(cut.window_s, CUT_INTERVAL_S)
    ctx.check(
        "the link cut carried the pings before the cut",
        cut.victim_bytes >= expected,
        f"{cut.victim_bytes} bytes in {cut.window_s:.2f} s",
        f">= {expected:.0f} bytes",
    )
    worst = cut.worst_outage_s
    ctx.check(
        "reachability returns after link down (no restart)",
        worst is not None and worst < CUT_DURATION_S - 1.5,
        f"worst outage {1000 * worst:.0f} ms" if worst is not None else "no data",
        f"< {1000 * (CUT_DURATION_S - 1.5):.0f} ms",
    )
    return cut.panel()


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_QUOTED_FIGURES = (
    Figure("converged after (s)", ("converge_s",)),
    Figure("all-pairs ping: pairs", ("ping", "all-pairs ping", "pairs")),
    Figure("all-pairs ping: loss %", ("ping", "all-pairs ping", "loss_pct")),
    Figure("TCP goodput (Mbit/s)", ("tcp", "goodput_bps"), scale=1e-6),
    Figure("TCP on the wire (Mbit/s)", ("tcp", "wire_bps"), scale=1e-6),
    Figure("TCP on the wire / link rate", ("tcp", "wire_bps"), "ratio", ("fabric", "rate_bps")),
    Figure("TCP peak 250 ms window (Mbit/s)", ("tcp", "peak_window_bps"), scale=1e-6),
    Figure("TCP retransmits", ("tcp", "retransmits")),
    Figure("ECMP: largest top-tier switch's share", ("ecmp", "bytes_per_top_switch"), "max_share"),
    Figure("ECMP: smallest top-tier switch's share", ("ecmp", "bytes_per_top_switch"), "min_share"),
    Figure("ECMP: largest first hop's share", ("ecmp", "bytes_per_first_hop"), "max_share"),
    Figure("ECMP: smallest first hop's share", ("ecmp", "bytes_per_first_hop"), "min_share"),
    Figure(
        "link down: longest outage of any sender (ms)",
        ("link_failure", "outage_s"),
        "max",
        scale=1e3,
    ),
    Figure("link down: controller saw it after (ms)", ("controller_reaction_s",), scale=1e3),
    Figure(
        "all-pairs ping after the link failure: loss %",
        ("ping", "all-pairs ping after link failure", "loss_pct"),
    ),
)

# Two configurations: the default leaf/spine, and the k=4 fat-tree the docs
# show as "What a run looks like".
REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "smoke",
        "smoke",
        "smoke on a leaf/spine (2 spines, 4 leaves, 8 hosts)",
        full=(),
        quick=("hosts_per_leaf=1", "iperf_s=4"),
        figures=_QUOTED_FIGURES,
        timeout_s=600,
    ),
    Entry(
        "smoke-fat-tree",
        "smoke",
        "smoke on a k=4 fat-tree (What a run looks like)",
        full=("topology=fat_tree", "k=4"),
        quick=("topology=fat_tree", "k=4", "iperf_s=3", "ping_count=1"),
        figures=_QUOTED_FIGURES,
        timeout_s=900,
    ),
)
