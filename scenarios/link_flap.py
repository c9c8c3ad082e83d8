"""link-flap: a spine link flapping every few hundred milliseconds under load, static vs adaptive.

      spine1 ~~~~~~~ spine2          leaf1-spine1 goes down and up every
       |  \\          /  |             `period_s` for `flap_s` seconds while
      leaf1   leaf2   leaf3   leaf4  every host sends TCP to a host two
      h1 h2   h3 h4   h5 h6   h7 h8  leaves away and pings one on every leaf

A link that flaps makes ECMP reshuffle flows on every transition and makes
the controller recompute on every port status. Routing damps it (RFC 2439 on
links): three downs within 10 s take the link out of rotation until it has
been stable for 5 s. The adaptive controller (controllers.adaptive)
additionally gives a port that flapped the lowest SELECT weight before it is
damped and moves its elephants off at once.

The report prints, per mode: when the link was damped, how many route
recomputations the controller made, the TCP throughput before, during and
after the flapping, the longest ping outage of any pair, and whether any
switch or the controller died. Checks: damped, no flow stuck (every TCP flow
keeps moving bytes through the flapping and after it), everything alive, and
goodput during the flapping at least the flow-level model's floor
(emu/models/flap.py): max-min fair TCP over the ECMP paths, with the damped link
out of rotation, divided by the same before the flapping, at the worst of
every hash outcome (2/3 at the defaults), less the seconds a flow may still
sit in TCP's retransmission backoff from the downs before damping.

Run:  emu run link-flap [--set modes=static,adaptive --set flap_s=30]
      emu run link-flap --topo FILE
                    (any topology file with 3 or more switches with hosts,
                    every link at one rate and an uplink that can fail without
                    cutting the fabric: the first such uplink flaps)
"""

from __future__ import annotations

import json
import time

from emu import fabric as fabric_mod
from emu import topopick
from emu.config import BufferSpec
from emu.figures import Entry, per_key
from emu.models.flap import during_floor, goodput_floor
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    choices,
    fabric_options,
    fabric_params,
)
from emu.telemetry import Panel, save_panels
from emu.traffic import iperf

DESCRIPTION = "a spine link flapping under TCP load: damping, stuck flows, survival"
MODES = {"static": "controllers.routing", "adaptive": "controllers.adaptive"}
# The flapping link, the flows and the probes come from the graph (leaf1-spine1
# on a leaf/spine: emu/topopick.py, spare_uplink), so a topology file may
# replace the shape parameters (emu/scenario.py).
TOPOLOGY_FILE = True
FIRST_PORT = 5700

PARAMS = {
    **fabric_params(rate_mbps=20.0),  # twice the rate before the C data plane (issue 27)
    "modes": Param("static,adaptive", "comma list of static, adaptive"),
    "period_s": Param(0.3, "flap period (down half, up half)", min=0.05, max=10.0),
    "flap_s": Param(30.0, "how long the link flaps", min=1.0, max=600.0),
    "start_s": Param(3.0, "when the flapping starts", min=1.0, max=60.0),
    "after_s": Param(9.0, "how long traffic runs after the flapping", min=2.0, max=120.0),
    "ping_interval_s": Param(0.05, "probe interval between leaves", min=0.01, max=1.0),
    "alpha_lossy": Param(
        1 / 16,
        "lossy egress threshold factor of the shared buffer: TCP "
        "queues of tens of frames, not a second's worth",
        min=0.001,
        max=64.0,
    ),
    "stuck_s": Param(3.0, "a flow with no bytes for this long counts as stuck", min=1.0, max=60.0),
}


def validate(params: dict) -> None:
    choices(params, "modes", MODES)
    misfit = graph_misfit(build_fabric_graph(params))
    if misfit:
        raise ScenarioError(f"link-flap: {params.get('topo') or 'the fabric'} {misfit}")


def graph_misfit(graph) -> str | None:
    """Why the scenario's premises fail on `graph` (a phrase after its name), or None."""
    if len(topopick.hosts_by_leaf(graph)) < 3:
        return "has fewer than 3 switches with hosts (every host sends to one two leaves on)"
    if topopick.spare_uplink(graph) is None:
        return (
            "has no uplink whose loss leaves the fabric connected (traffic must have a "
            "path around the flapping link: a leaf with two uplinks, e.g. spines >= 2)"
        )
    odd = topopick.mixed_rates(graph)
    if odd:
        return f"has links at different rates ({odd}); the flow-level model needs one rate"
    return None


def flapping_link(graph) -> tuple[str, str]:
    """The first leaf's first uplink that can fail without cutting the fabric: leaf1-spine1."""
    return topopick.spare_uplink(graph)


def tcp_flows(graph) -> list[tuple[str, str]]:
    """Every host to the host of its rank on the switch two leaves on (switches with hosts,
    in the order of their first host), so that half the flows cross leaf1's uplinks."""
    leaves = list(topopick.hosts_by_leaf(graph).values())
    return [
        (h, leaves[(i + 2) % len(leaves)][j % len(leaves[(i + 2) % len(leaves)])])
        for i, members in enumerate(leaves)
        for j, h in enumerate(members)
    ]


def probes(graph) -> list[tuple[str, str]]:
    """From the first host of the flapping leaf to the first host of every other leaf, and back."""
    firsts = {leaf: members[0] for leaf, members in topopick.hosts_by_leaf(graph).items()}
    flapping = flapping_link(graph)[0]
    src = firsts[flapping]
    return [(src, d) for leaf, d in firsts.items() if leaf != flapping] + [
        (d, src) for leaf, d in firsts.items() if leaf != flapping
    ]


def run(ctx: Context) -> None:
    """Each mode on a fresh fabric, judged against the flow-level model's floor."""
    p = ctx.params
    graph = build_fabric_graph(p)
    results = {}
    for mode in [m for m in p["modes"].split(",") if m]:
        ctx.log(f"link-flap: {mode}")
        results[mode] = run_mode(ctx, graph, mode)
    link = flapping_link(graph)
    model = goodput_floor(graph, tcp_flows(graph), link)
    for r in results.values():
        r["during_floor"] = during_floor(
            model["worst_ratio"],
            p["flap_s"],
            p["period_s"],
            r["damped_after_s"],
            p["alpha_lossy"] * BufferSpec().size_bytes,
            p["rate_mbps"] * 1e6,
        )
        r["during_floor_mbps"] = r["during_floor"]["ratio"] * r["before_mbps"]
    ctx.metrics["model"] = model
    ctx.metrics["modes"] = {
        m: {k: v for k, v in r.items() if k != "timeline"} for m, r in results.items()
    }
    _modes_table(ctx, graph, link, results)
    ctx.text(
        f"flow-level model (max-min fair TCP over ECMP paths, {model['outcomes']} hash "
        f"outcomes{' sampled' if model['sampled'] else ''}): goodput with "
        f"{link[0]}-{link[1]} damped / before = {model['mean_ratio']:.3f} "
        f"on average, {model['worst_ratio']:.3f} at worst; floor = worst x (1 - RTO "
        f"backoff left in the window / window)"
    )
    for mode, r in results.items():
        _check_mode(ctx, mode, r, model)
    panels = [
        Panel(
            "aggregate TCP throughput",
            "time (s)",
            "Mbit/s",
            lines={m: r["timeline"] for m, r in results.items()},
            vline=p["start_s"],
            vline_label="flapping starts",
        )
    ]
    path = save_panels(ctx.out_dir / "link-flap.png", panels, title="link-flap")
    ctx.plots.append(path.name)


def _modes_table(ctx: Context, graph, link: tuple[str, str], results: dict) -> None:
    """One row per mode: damping, recomputations, goodput before, during and after, outages."""
    p = ctx.params
    rows = []
    for mode, r in results.items():
        rows.append(
            [
                mode,
                "-" if r["damped_after_s"] is None else f"{r['damped_after_s']:.2f}",
                r["flaps"],
                r["recomputations"],
                f"{r['before_mbps']:.1f}",
                f"{r['during_mbps']:.1f}",
                f"{r['during_floor_mbps']:.1f}",
                f"{r['after_mbps']:.1f}",
                f"{r['worst_outage_s'] * 1000:.0f}",
                r["stuck_flows"],
                ", ".join(r["dead"]) or "none",
            ]
        )
    ctx.table(
        f"{link[0]}-{link[1]} flapping every {p['period_s']:g} s for "
        f"{p['flap_s']:g} s under {len(tcp_flows(graph))} TCP flows",
        [
            "mode",
            "damped after (s)",
            "downs",
            "route recomputations",
            "TCP before (Mbit/s)",
            "during",
            "floor",
            "after",
            "worst ping outage (ms)",
            "stuck flows",
            "died",
        ],
        rows,
    )


def _check_mode(ctx: Context, mode: str, r: dict, model: dict) -> None:
    """A mode's checks: damped, goodput at the floor, no flow stuck, all alive, reachable."""
    floor = r["during_floor"]
    ctx.check(
        f"{mode}: the flapping link is damped",
        r["damped_after_s"] is not None,
        r["damped_after_s"],
        "a link_damped event",
    )
    share = f" ({r['during_mbps'] / r['before_mbps']:.3f} of before)" if r["before_mbps"] else ""
    ctx.check(
        f"{mode}: goodput during the flapping >= the flow-level model's floor",
        r["during_mbps"] >= r["during_floor_mbps"],
        f"{r['during_mbps']:.1f} Mbit/s{share}",
        f">= {floor['ratio']:.3f} x {r['before_mbps']:.1f} Mbit/s before = "
        f"worst-hash model {model['worst_ratio']:.3f} x (1 - "
        f"{floor['backoff_in_window_s']:.2f} s of RTO backoff / "
        f"{floor['window_s']:.0f} s)",
    )
    stuck_text = "; ".join(
        f"{d['flow']} silent {d['silent_s']} s from t={d['silent_from_s']} s "
        f"(receiver got nothing; {d['retransmits_before']} retransmits in the "
        f"3 s before, {d['retransmits_during']} during)"
        for d in r["stuck_detail"]
    )
    ctx.check(
        f"{mode}: no flow stuck",
        r["stuck_flows"] == 0,
        f"{r['stuck_flows']}: {stuck_text}" if stuck_text else r["stuck_flows"],
        f"0 flows silent for >= {ctx.params['stuck_s']:g} s",
    )
    ctx.check(
        f"{mode}: no switch or controller died",
        not r["dead"],
        ", ".join(r["dead"]) or "none",
        "none",
    )
    ctx.check(
        f"{mode}: every probe pair reachable at the end",
        r["unreachable_after"] == 0,
        r["unreachable_after"],
        "0 pairs",
    )


def run_mode(ctx: Context, graph, mode: str) -> dict:
    p = ctx.params
    duration = p["start_s"] + p["flap_s"] + p["after_s"]
    flows = tcp_flows(graph)
    # With the buffer's default lossy threshold (1/2) one congested port holds a third of
    # a second of traffic; ACKs queued behind it can silence a TCP flow for seconds
    # whatever the routing does, which would read as a flow stuck by the flapping.
    qos = {"buffer": {"alpha_lossy": p["alpha_lossy"]}}
    with ctx.fabric(graph, mode, **fabric_options(p), apps=(MODES[mode],), qos=qos) as fab:
        clients = iperf.start_many(fab, flows, duration, first_port=FIRST_PORT, server_output=True)
        t0 = time.time()
        pings = {
            pair: fab.start(
                "ping",
                src=pair[0],
                dst=pair[1],
                interval_s=p["ping_interval_s"],
                duration_s=duration - 0.5,
            )
            for pair in probes(graph)
        }
        count = max(1, int(round(p["flap_s"] / p["period_s"])))
        fab.faults.flap(
            *flapping_link(graph),
            period_s=p["period_s"],
            count=count,
            at=p["start_s"] - (time.time() - t0),
        )
        docs = [iperf.finish(fab, c, timeout_s=duration + 30) for c in clients]
        save_flow_results(ctx.out_dir / mode / "flows", flows, docs)
        ping_results = {pair: job.wait() for pair, job in pings.items()}
        if fab.faults.errors:
            raise RuntimeError(f"fault injection failed: {'; '.join(fab.faults.errors)}")
        dead = [
            name
            for name in fabric_mod.switches(graph)
            if fab.switch(name).proc is None or fab.switch(name).proc.poll() is not None
        ]
        if fab.controller is None or fab.controller.poll() is not None:
            dead.append("controller")
        status = fab.controller_status() if "controller" not in dead else {}
        fab.wait_routes_installed()
        unreachable = fab.unreachable(probes(graph))
        ctx.events.extend(
            dict(e, kind=f"{mode}: {e['kind']}")
            for e in fab.faults.events
            if e["kind"] != "link_up" and e["kind"] != "link_down"
        )
    return summarise(
        p,
        t0,
        docs,
        ping_results,
        status,
        dead,
        unreachable,
        sum(1 for e in fab.faults.events if e["kind"] == "link_down"),
        flows,
    )


def silent_span(per_second: list[float], start: int, window: int) -> tuple[int, int] | None:
    """The first run of >= `window` zero intervals from `start` on: (first, length), or None."""
    first = next(
        (
            i
            for i in range(start, len(per_second) - window + 1)
            if all(x == 0 for x in per_second[i : i + window])
        ),
        None,
    )
    if first is None:
        return None
    last = first
    while last + 1 < len(per_second) and per_second[last + 1] == 0:
        last += 1
    return first, last - first + 1


def save_flow_results(out_dir, flows: list[tuple[str, str]], docs: list[dict]) -> None:
    """Every flow's iperf3 result (sender and receiver intervals) for a post-mortem."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for (src, dst), doc in zip(flows, docs):
        (out_dir / f"{src}-{dst}.json").write_text(json.dumps(doc, indent=1))


def summarise(
    p: dict,
    t0: float,
    docs: list[dict],
    pings: dict,
    status: dict,
    dead: list,
    unreachable: int,
    downs: int,
    flows: list[tuple[str, str]] = (),
) -> dict:
    bad = [doc.get("error") for doc in docs if "error" in doc]
    if bad:
        raise RuntimeError(f"iperf3 failed: {bad}")
    # Goodput is what the receivers got (Mbit/s per second of the test).
    per_flow = [iperf.received_mbps(doc) for doc in docs]
    n = min(len(f) for f in per_flow)
    total = [sum(f[i] for f in per_flow) for i in range(n)]
    start, end = p["start_s"], p["start_s"] + p["flap_s"]

    def mean_over(lo: float, hi: float) -> float:
        vals = [total[i] for i in range(n) if lo <= i and i + 1 <= hi]
        return sum(vals) / len(vals) if vals else 0.0

    # A flow is stuck if, once the link is flapping, its receiver gets no bytes for
    # stuck_s in a row. The sender's intervals cannot say it: they count bytes written
    # into the socket, and a sender whose socket buffer is full writes nothing for
    # seconds while the buffer drains at a few hundred kbit/s.
    window = max(1, int(round(p["stuck_s"])))
    stuck_detail = []
    for k, doc in enumerate(docs):
        name = "->".join(flows[k]) if k < len(flows) else str(k)
        intervals = doc["intervals"]
        span = silent_span(per_flow[k], int(start), window)
        if span is None:
            continue
        first, length = span
        # Which flow, when (s since the flows began) and for how long, and the
        # sender's retransmissions around it: the report must let the reader
        # tell an RTO backoff from a black hole.
        stuck_detail.append(
            {
                "flow": name,
                "silent_from_s": first,
                "silent_s": length,
                "retransmits_before": sum(
                    iv["sum"].get("retransmits", 0) or 0
                    for iv in intervals[max(0, first - 3) : first]
                ),
                "retransmits_during": sum(
                    iv["sum"].get("retransmits", 0) or 0 for iv in intervals[first : first + length]
                ),
            }
        )
    stuck = len(stuck_detail)
    damping = status.get("damping", [])
    damped = [e["t"] - t0 - start for e in damping if e["kind"] == "damped"]
    return {
        "damped_after_s": min(damped) if damped else None,
        # The downs routing had processed when it damped (its flap_threshold);
        # downs_before_damping in during_floor counts those on the wire, from the time.
        "damped_at_down": next((e.get("downs") for e in damping if e["kind"] == "damped"), None),
        "undamped": sum(1 for e in damping if e["kind"] == "undamped"),
        "flaps": downs,
        # Every topology change is one recomputation and one round of flow mods.
        "recomputations": status.get("topology_version"),
        "before_mbps": mean_over(1, start),
        "during_mbps": mean_over(start + 1, end),
        "after_mbps": mean_over(end + 6, n),
        "worst_outage_s": max(r.longest_outage_s for r in pings.values()),
        "stuck_flows": stuck,
        "stuck_detail": stuck_detail,
        "dead": dead,
        "unreachable_after": unreachable,
        "adaptive": status.get("adaptive"),
        "timeline": (list(range(1, n + 1)), total),
    }


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_MODE = (
    ("damped after (s)", ("damped_after_s",)),
    ("downs", ("flaps",)),
    ("route recomputations", ("recomputations",)),
    ("TCP before (Mbit/s)", ("before_mbps",)),
    ("TCP during (Mbit/s)", ("during_mbps",)),
    ("TCP after (Mbit/s)", ("after_mbps",)),
    ("worst ping outage (ms)", ("worst_outage_s",), {"scale": 1e3}),
    ("stuck flows", ("stuck_flows",)),
    ("switches or controller died", ("dead",), {"op": "len"}),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "link-flap",
        "link-flap",
        "link-flap: a spine link flapping under load, static vs adaptive",
        quick=("flap_s=10",),
        figures=per_key(tuple(MODES), ("modes",), _FIGURES_PER_MODE),
        timeout_s=900,
    ),
)
