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

import threading
import time

import networkx as nx

from emu import fabric as fabric_mod
from emu.figures import Entry, Figure
from emu.net import Fabric
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
)
from emu.switch.scheduler import MIN_BURST_S
from emu.telemetry import Panel, save_panels
from emu.traffic import iperf

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

# An ICMP echo request of ping's default 56-byte payload, as a frame on the wire.
ECHO_FRAME_BYTES = 14 + 20 + 8 + 56


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
        src, dst = cross_pair(graph)
        tcp_line_rate(ctx, fab, src, dst, rate_bps)
        ecmp_spreading(ctx, fab, graph, src, dst)
        if p["link_down"]:
            link_failure(ctx, fab, graph, src, dst)
            all_pairs_ping(ctx, fab, "all-pairs ping after link failure")
    plot(ctx, rate_bps)


def plot(ctx: Context, rate_bps: int) -> None:
    """smoke.png: pacing at the receiver's port, ECMP shares, pings across the failure."""
    m = ctx.metrics
    panels = []
    if "tcp" in m:
        tcp = m["tcp"]
        panels.append(
            Panel(
                f"TCP {tcp['src']} -> {tcp['dst']}: egress rate at the last hop",
                "time (s)",
                "Mbit/s",
                lines={
                    "250 ms windows": (tcp["window_end_s"], [w / 1e6 for w in tcp["windows_bps"]])
                },
                hline=rate_bps / 1e6,
                hline_label="link rate",
                step=True,
            )
        )
    if "ecmp" in m and "bytes_per_top_switch" not in m["ecmp"]:
        panels.append(
            Panel(
                f"ECMP: {m['ecmp']['flows']} flows, bytes {m['ecmp']['first_switch']} sent per "
                "first hop",
                "next hop",
                "MB",
                bars={k: v / 1e6 for k, v in m["ecmp"]["bytes_per_first_hop"].items()},
            )
        )
    if "ecmp" in m and "bytes_per_top_switch" in m["ecmp"]:
        panels.append(
            Panel(
                f"ECMP: {m['ecmp']['flows']} flows, bytes per top-tier switch",
                "switch",
                "MB",
                bars={k: v / 1e6 for k, v in m["ecmp"]["bytes_per_top_switch"].items()},
            )
        )
    if "link_failure" in m:
        lf = m["link_failure"]
        lines = {}
        for h, seqs in lf["replies"].items():
            # Each ping where it was sent (ping's own clock, emu/traffic/ping.py), on
            # the link-down line's clock: its loss shows when the link went down.
            got = set(seqs)
            xs = lf["sent_s"][h]
            lines[h] = (xs, [1 if i in got else 0 for i in range(1, len(xs) + 1)])
        panels.append(
            Panel(
                f"pings across link {'-'.join(lf['link'])} down, by when each was sent",
                "time (s)",
                "reply (1) / lost (0)",
                lines=lines,
                vline=lf["t_down_s"],
                vline_label="link down",
                step=True,
            )
        )
    if panels:
        path = save_panels(ctx.out_dir / "smoke.png", panels, title=m["fabric"]["name"])
        ctx.plots.append(path.name)


def cross_pair(graph) -> tuple[str, str]:
    """The first host and a far host whose switches ECMP can reach by two first hops.

    Far: on another switch, in another pod where there are pods; among those,
    the last one (on a leaf/spine, the last host of the last leaf) whose
    switch the first host's switch reaches by shortest paths through more
    than one neighbour. A fabric with no such pair gets the last far host,
    and its ECMP and link-failure checks then fail with what they saw.
    """
    hosts = fabric_mod.hosts(graph)
    src = hosts[0]
    far = [h for h in hosts if graph.nodes[h]["leaf"] != graph.nodes[src]["leaf"]]
    pods = [h for h in far if graph.nodes[h].get("pod", 0) != graph.nodes[src].get("pod", 0)]
    candidates = pods[::-1] + [h for h in far[::-1] if h not in pods]
    for dst in candidates:
        if len(first_hops(graph, graph.nodes[src]["leaf"], graph.nodes[dst]["leaf"])) > 1:
            return src, dst
    return src, (pods or far)[-1]


def first_hops(graph, a: str, b: str) -> list[str]:
    """The neighbours of switch `a` on a shortest path to switch `b` (hop count, as routing)."""
    switch_graph = graph.subgraph(fabric_mod.switches(graph))
    dist = nx.single_source_shortest_path_length(switch_graph, b)
    if a not in dist:
        return []
    return [n for n in switch_graph.neighbors(a) if dist.get(n) == dist[a] - 1]


def nvlink_ping(ctx: Context, fab: Fabric) -> None:
    """Every GPU pings the other GPUs of its node at their NVLink addresses.

    Judged by the NVSwitches' counters too: the replies come back, and the
    echo frames crossed the node's NVSwitch, not the network (the rail
    leaves see none of them).
    """
    graph = fab.graph
    domains = fabric_mod.nvlink_domains(graph)
    count = ctx.params["ping_count"]
    nvswitches = [f"nvsw{node}" for node in domains]

    def rx_frames(switches: list[str]) -> int:
        return sum(port.rx_packets for sw in switches for port in fab.port_stats(sw).values())

    before = rx_frames(nvswitches)
    sent = recv = pairs = 0
    for gpus in domains.values():
        for src in gpus:
            for dst in gpus:
                if src != dst:
                    a, b = fab.ping(
                        src, dst, count=count, timeout_s=1.0, interval_s=0.05, port="nvlink"
                    )
                    sent, recv, pairs = sent + a, recv + b, pairs + 1
    crossed = rx_frames(nvswitches) - before
    ctx.table(
        "NVLink ping",
        ["pairs", "sent", "received", "NVSwitch rx frames"],
        [[pairs, sent, recv, crossed]],
    )
    ctx.metrics.setdefault("ping", {})["NVLink ping"] = {
        "pairs": pairs,
        "sent": sent,
        "received": recv,
        "nvswitch_rx_frames": crossed,
    }
    ctx.check(
        "NVLink ping: 0% loss inside every node", sent > 0 and recv == sent, f"{recv}/{sent}", "all"
    )
    # An echo request and its reply each cross the NVSwitch once (ARP adds a few).
    ctx.check(
        "NVLink ping: through the NVSwitches",
        crossed >= 2 * recv,
        crossed,
        f">= {2 * recv} frames (request + reply per echo)",
    )


def all_pairs_ping(ctx: Context, fab: Fabric, label: str) -> None:
    hosts = fabric_mod.hosts(fab.graph)
    count = ctx.params["ping_count"]
    results: dict[tuple[str, str], tuple[int, int]] = {}
    lock = threading.Lock()

    def from_source(src: str) -> None:
        for dst in hosts:
            if dst != src:
                sent, recv = fab.ping(src, dst, count=count, timeout_s=1.0, interval_s=0.05)
                with lock:
                    results[(src, dst)] = (sent, recv)

    # One thread per source: pairs from different sources run concurrently.
    threads = [threading.Thread(target=from_source, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent = sum(s for s, _ in results.values())
    recv = sum(r for _, r in results.values())
    loss = 100.0 * (sent - recv) / sent if sent else 100.0
    failed = sorted(f"{s}->{d}" for (s, d), (a, b) in results.items() if b < a)
    ctx.metrics.setdefault("ping", {})[label] = {
        "pairs": len(results),
        "sent": sent,
        "received": recv,
        "loss_pct": loss,
        "lossy_pairs": failed[:20],
    }
    ctx.table(label, ["pairs", "sent", "received", "loss %"], [[len(results), sent, recv, loss]])
    expected_pairs = len(hosts) * (len(hosts) - 1)
    ctx.check(
        f"{label}: every pair tested",
        len(results) == expected_pairs,
        len(results),
        f"{expected_pairs} pairs",
    )
    ctx.check(
        f"{label}: 0% loss",
        sent > 0 and recv == sent,
        f"{loss:.2f}% loss" + (f" ({', '.join(failed[:5])})" if failed else ""),
        "0% loss",
    )


def tcp_line_rate(ctx: Context, fab: Fabric, src: str, dst: str, rate_bps: int) -> None:
    dst_leaf = fab.graph.nodes[dst]["leaf"]
    port_no = fab.graph.edges[dst, dst_leaf]["ports"][dst_leaf]
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        # The switch stamps its answer itself, so the windows are exact.
        while not stop.is_set():
            q = fab.queues(dst_leaf)
            samples.append((q.time, q.tx_bytes[port_no]))
            stop.wait(0.25)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        doc = iperf.run(fab, src, dst, ctx.params["iperf_s"])
    finally:
        stop.set()
        sampler.join()
    if "error" in doc:
        ctx.check("TCP reaches >= 90% of link rate", False, doc["error"], ">= 0.9")
        return
    goodput = doc["end"]["sum_received"]["bits_per_second"]
    retrans = doc["end"]["sum_sent"].get("retransmits", 0)
    # Frame bits on the wire per goodput bit for MSS-sized TCP segments.
    mss = doc["start"].get("tcp_mss_default", 1448) or 1448
    wire = goodput * (mss + 66) / mss
    windows = [
        (b1 - b0) * 8 / (t1 - t0) for (t0, b0), (t1, b1) in zip(samples, samples[1:]) if t1 > t0
    ]
    peak = max(windows) if windows else 0.0
    burst_bits = max(2 * 1514 * 8, rate_bps * MIN_BURST_S)  # the scheduler's burst allowance
    allowed = rate_bps * (1 + PACING_TOLERANCE) + burst_bits / 0.25
    t_first = samples[0][0] if samples else 0.0
    ctx.metrics["tcp"] = {
        "src": src,
        "dst": dst,
        "goodput_bps": goodput,
        "wire_bps": wire,
        "retransmits": retrans,
        "peak_window_bps": peak,
        "windows_bps": windows,
        "window_end_s": [t - t_first for t, _ in samples[1:]],
    }
    ctx.table(
        f"TCP {src} -> {dst} ({ctx.params['iperf_s']:.0f} s, one flow)",
        ["goodput Mb/s", "on wire Mb/s", "link Mb/s", "of link", "peak 250ms Mb/s", "retransmits"],
        [[goodput / 1e6, wire / 1e6, rate_bps / 1e6, wire / rate_bps, peak / 1e6, retrans]],
    )
    ctx.check(
        "TCP reaches >= 90% of link rate",
        wire >= 0.9 * rate_bps,
        round(wire / rate_bps, 3),
        ">= 0.9 of the link rate (frames on the wire)",
    )
    ctx.check(
        "pacing: never above link rate + burst",
        bool(windows) and peak <= allowed,
        f"{peak / 1e6:.2f} Mb/s peak",
        f"<= {allowed / 1e6:.2f} Mb/s",
    )


def _tx_bytes(fab: Fabric, switches: list[str]) -> dict[str, int]:
    """Bytes each switch has sent, over all its ports."""
    return {sw: sum(p.tx_bytes for p in fab.port_stats(sw).values()) for sw in switches}


def _port_tx(fab: Fabric, graph, switch: str, peers: list[str]) -> dict[str, int]:
    """Bytes `switch` has sent towards each of `peers`, from its port counters."""
    ports = fab.port_stats(switch)
    return {n: ports[graph.edges[switch, n]["ports"][switch]].tx_bytes for n in peers}


def _flows(doc: dict) -> dict[int, int]:
    """iperf3's streams: source port -> payload bytes the server received on it."""
    port = {c["socket"]: c["local_port"] for c in doc.get("start", {}).get("connected", [])}
    return {
        port[st["receiver"]["socket"]]: int(st["receiver"]["bytes"])
        for st in doc.get("end", {}).get("streams", [])
        if st.get("receiver", {}).get("socket") in port
    }


def ecmp_spreading(ctx: Context, fab: Fabric, graph, src: str, dst: str) -> None:
    """Many TCP flows src -> dst: more than one first hop (and top-tier switch) carries them.

    Which way each flow went is the switches' own answer (`Fabric.trace_path`
    with the flow's 5-tuple, through the tables ECMP hashed it in), so the
    check is about ECMP, not about how fairly TCP shared the sender's link
    between the flows (drop-tail at the host's 16-frame queue can starve a
    few flows for seconds). A switch "carries" flows when its port counters
    sent at least the payload the receiver got on them: data on the wire is
    never less than its payload.
    """
    tier = max(graph.nodes[n]["tier"] for n in fabric_mod.switches(graph))
    # In a fabric with tiers the flows must also cross more than one top-tier
    # switch; in a flat one (torus, dragonfly: every switch tier 0) every switch
    # is "top", so only the first hop says anything.
    top = [n for n in fabric_mod.switches(graph) if graph.nodes[n]["tier"] == tier] if tier else []
    leaf = graph.nodes[src]["leaf"]
    hops = first_hops(graph, leaf, graph.nodes[dst]["leaf"])
    before, hops_before = _tx_bytes(fab, top), _port_tx(fab, graph, leaf, hops)
    port = 5202
    doc = iperf.run(
        fab,
        src,
        dst,
        max(2.0, ctx.params["iperf_s"] / 2),
        parallel=ctx.params["ecmp_flows"],
        port=port,
    )
    after, hops_after = _tx_bytes(fab, top), _port_tx(fab, graph, leaf, hops)
    flows = _flows(doc)
    paths = {sport: fab.trace_path(src, dst, "tcp", sport, port) for sport in flows}
    per_hop = {n: hops_after[n] - hops_before[n] for n in hops}
    hop_total = sum(per_hop.values()) or 1
    at_hop = _carried_by(flows, paths, hops, per_hop, lambda path, n: path[2] == n)
    ctx.metrics["ecmp"] = {
        "flows": ctx.params["ecmp_flows"],
        "traced_flows": len(flows),
        "first_switch": leaf,
        "bytes_per_first_hop": per_hop,
        "flows_per_first_hop": {n: v["flows"] for n, v in at_hop.items()},
        "error": doc.get("error"),
    }
    ctx.table(
        f"ECMP: {len(flows)} TCP flows {src} -> {dst} through {leaf}, per first hop "
        "(flows: the switches' trace of each flow's 5-tuple)",
        ["next hop", "flows", "received MB", "sent MB", "share of bytes"],
        [
            [
                n,
                v["flows"],
                v["payload_bytes"] / 1e6,
                v["tx_bytes"] / 1e6,
                v["tx_bytes"] / hop_total,
            ]
            for n, v in at_hop.items()
        ],
    )
    used = [n for n, v in at_hop.items() if v["carries"]]
    spread = ", ".join(f"{n}: {v['flows']}" for n, v in at_hop.items())
    ctx.check(
        "ECMP spreads flows over more than one first hop",
        len(used) > 1,
        f"{len(used)} of {len(hops)} carry flows ({spread})",
        "> 1 (each with its flows' received payload on its port counter)",
    )
    if not top:
        return
    carried = {sw: after[sw] - before[sw] for sw in top}
    at_top = _carried_by(flows, paths, top, carried, lambda path, n: n in path)
    _top_tier_spreading(ctx, f"{len(flows)} TCP flows {src} -> {dst}", carried, at_top)


def _top_tier_spreading(ctx: Context, what: str, carried: dict[str, int], at_top: dict) -> None:
    """The top-tier switches' table and check: more than one of them carries the flows.

    Args:
        what: the flows, as the table's title names them.
        carried: bytes each top-tier switch sent during the flows.
        at_top: `_carried_by`'s answer for the top-tier switches.
    """
    total = sum(carried.values()) or 1
    ctx.metrics["ecmp"]["bytes_per_top_switch"] = carried
    ctx.metrics["ecmp"]["flows_per_top_switch"] = {n: v["flows"] for n, v in at_top.items()}
    ctx.table(
        f"ECMP: {what}, per top-tier switch",
        ["switch", "flows", "received MB", "sent MB", "share of bytes"],
        [
            [n, v["flows"], v["payload_bytes"] / 1e6, v["tx_bytes"] / 1e6, v["tx_bytes"] / total]
            for n, v in at_top.items()
        ],
    )
    used_top = [n for n, v in at_top.items() if v["carries"]]
    ctx.check(
        "ECMP spreads flows over more than one top-tier switch",
        len(used_top) > 1,
        f"{len(used_top)} of {len(at_top)} carry flows",
        "> 1 (each with its flows' received payload on its port counters)",
    )


def _carried_by(
    flows: dict[int, int],
    paths: dict[int, list[str]],
    nodes: list[str],
    sent: dict[str, int],
    where,
) -> dict[str, dict]:
    """Per node: the traced flows through it (`where(path, node)`), their received payload,
    what its counters sent, and whether it carries them (sent at least that payload)."""
    out = {}
    for n in nodes:
        mine = [sp for sp, path in paths.items() if where(path, n)]
        payload = sum(flows[sp] for sp in mine)
        out[n] = {
            "flows": len(mine),
            "payload_bytes": payload,
            "tx_bytes": sent[n],
            "carries": payload > 0 and sent[n] >= payload,
        }
    return out


def link_failure(ctx: Context, fab: Fabric, graph, src: str, dst: str) -> None:
    """Pings every 20 ms from each host on src's switch to dst; a first hop goes down at t=1 s.

    The link cut is the one, among src's switch's links on a shortest path to
    dst's (each with another beside it: `cross_pair` chose dst so), that
    carried the most of the pings in the 0.7 s before the cut: the path the
    pings took, so that the cut is on it.
    """
    leaf = graph.nodes[src]["leaf"]
    senders = [h for h in fabric_mod.hosts(graph) if graph.nodes[h]["leaf"] == leaf]
    hops = first_hops(graph, leaf, graph.nodes[dst]["leaf"])
    interval, duration = 0.02, 4.0
    jobs = {
        h: fab.start("ping", src=h, dst=dst, interval_s=interval, duration_s=duration)
        for h in senders
    }
    count = jobs[senders[0]].count
    # The plot's and the events' zero: the pings' start, on the clock ping stamps with.
    wall0 = min(job.started_wall for job in jobs.values())
    t0 = time.monotonic()
    # A schedule, not a wait: the pings run for 0.3 s, then their path is measured
    # for 0.7 s, then the link goes down at t = 1 s.
    time.sleep(0.3)
    before, t_before = _port_tx(fab, graph, leaf, hops), time.monotonic()
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    after, t_after = _port_tx(fab, graph, leaf, hops), time.monotonic()
    pinged = {n: after[n] - before[n] for n in hops}
    victim = max(hops, key=lambda n: pinged[n])
    wall_down = time.time()
    fab.set_link(leaf, victim, up=False)
    t_down = wall_down - wall0
    ctx.event("link_down", at=wall_down, link=f"{leaf}-{victim}")
    results = {h: job.wait() for h, job in jobs.items()}
    outages = {h: r.longest_outage_s for h, r in results.items()}
    replies = {h: list(r.replied) for h, r in results.items()}
    sent_s = {
        h: [
            round((at if at is not None else wall0 + seq * interval) - wall0, 4)
            for seq, (at, _) in enumerate(r.timeline(), start=1)
        ]
        for h, r in results.items()
    }
    restored = [w for w in (r.restored_wall(wall_down) for r in results.values()) if w]
    status = fab.controller_status()
    seen = [
        e
        for e in status.get("events", [])
        if e.get("kind") == "link_down" and e.get("t", 0) >= wall_down - 0.5
    ]
    if seen:
        saw = min(e["t"] for e in seen)  # the controller's own unix time
        ctx.metrics["controller_reaction_s"] = saw - wall_down
        ctx.event(
            "controller saw link down",
            at=saw,
            after_ms=round(1000 * ctx.metrics["controller_reaction_s"]),
        )
    worst = max(outages.values()) if outages else None
    ctx.metrics["link_failure"] = {
        "link": [leaf, victim],
        "ping_bytes_per_first_hop": pinged,
        "t_down_s": t_down,
        "interval_s": interval,
        "count": count,
        "outage_s": outages,
        "replies": replies,
        "sent_s": sent_s,
        "controller_events": seen[-4:],
    }
    # When the last sender's replies came back (none lost: when the link went down).
    ctx.event(
        "reachability restored",
        at=max(restored, default=wall_down),
        worst_outage_ms=round(1000 * worst) if worst is not None else None,
    )
    ctx.table(
        f"link {leaf}-{victim} down at t={t_down:.2f} s (from the pings' start), pings every "
        f"{interval * 1000:.0f} ms to {dst}",
        ["sender", "longest outage ms"],
        [[h, 1000 * o] for h, o in outages.items()],
    )
    # The model: one sender's echo requests, each a 98-byte frame (iputils'
    # 56-byte payload + ICMP 8 + IPv4 20 + Ethernet 14), one per interval; half
    # of them leaves room for the window's edges.
    expected = 0.5 * (t_after - t_before) / interval * ECHO_FRAME_BYTES
    ctx.check(
        "the link cut carried the pings before the cut",
        pinged[victim] >= expected,
        f"{pinged[victim]} bytes in {t_after - t_before:.2f} s",
        f">= {expected:.0f} bytes",
    )
    ctx.check(
        "reachability returns after link down (no restart)",
        worst is not None and worst < duration - 1.5,
        f"worst outage {1000 * worst:.0f} ms" if worst is not None else "no data",
        f"< {1000 * (duration - 1.5):.0f} ms",
    )


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
