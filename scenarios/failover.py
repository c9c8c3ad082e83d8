"""failover: link and switch failures under traffic — how long until it flows again, what is lost.

      spine1          spine2
       |  \\          /  |
      leaf1   leaf2   leaf3   leaf4      every host pings one host on each other
      h1 h2   h3 h4   h5 h6   h7 h8      leaf every 20 ms while a failure happens

Three failures, each on a fresh fabric, injected at t = fail_at_s:
- link: the leaf1-spine1 cable is cut. leaf1's SELECT groups skip the dead
  uplink on their own (bucket liveness, no controller round trip); traffic
  from other leaves that hashed onto spine1 towards leaf1 waits for the
  controller to see the port go down and recompute.
- switch: spine1 crashes (its process is killed), then restarts later: the
  neighbours see carrier loss, the controller recomputes around it, and
  resynchronises it when it comes back.
- controller: the controller crashes and restarts; switches keep forwarding
  with the flows they have.
The report prints, per failure, the longest outage any pair saw, the pings
lost, and when the controller saw the failure.

Run:  emu run failover
      emu run failover --topo FILE
                    (any topology file where a leaf's uplink and a top-tier
                    switch can each fail without cutting a host off: the first
                    such uplink is cut, the first such switch crashes)
"""

from __future__ import annotations

import time

from emu import fabric as fabric_mod
from emu import topopick
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
from emu.telemetry import Panel, save_panels
from emu.traffic import outage

DESCRIPTION = "link, switch and controller failures under ping traffic: recovery time and loss"
FAILURES = ("link", "switch", "controller")
# The pairs, the cable cut and the switch crashed come from the graph
# (emu/topopick.py: leaf1-spine1 and spine1 on a leaf/spine), so a topology
# file may replace the shape parameters (emu/scenario.py).
TOPOLOGY_FILE = True

PARAMS = {
    # 40 Mbit/s: twice the fabric default, kept on time by the C data plane (issue 27).
    **fabric_params(rate_mbps=40.0),
    "failures": Param(",".join(FAILURES), "which of link,switch,controller to inject"),
    "fail_at_s": Param(1.5, "when the failure happens", min=0.5, max=60.0),
    "restart_after_s": Param(
        2.0, "a crashed switch or controller restarts this much later", min=0.5, max=60.0
    ),
    "duration_s": Param(6.0, "how long the pings run", min=3.0, max=600.0),
    "interval_s": Param(0.02, "ping interval", min=0.005, max=1.0),
    "max_outage_s": Param(1.0, "the longest outage a pair may see", min=0.05, max=60.0),
}


def validate(params: dict) -> None:
    chosen = choices(params, "failures", FAILURES)
    graph = build_fabric_graph(params)
    where = params.get("topo") or "the fabric"
    if "link" in chosen and topopick.spare_uplink(graph) is None:
        raise ScenarioError(
            f"failover: {where} has no switch-to-switch uplink whose loss leaves the fabric "
            "connected (a leaf with hosts needs two uplinks, e.g. spines >= 2)"
        )
    if "switch" in chosen and topopick.spare_top_switch(graph) is None:
        raise ScenarioError(
            f"failover: {where} has no top-tier switch without hosts whose crash leaves every "
            "host connected (a leaf/spine needs spines >= 2)"
        )
    if params["fail_at_s"] + params["restart_after_s"] + 1.0 > params["duration_s"]:
        raise ScenarioError(
            f"parameter duration_s={params['duration_s']}: too short for "
            f"fail_at_s + restart_after_s + 1 s"
        )


def pairs(graph) -> list[tuple[str, str]]:
    """From every host, one host on each other leaf."""
    hosts = fabric_mod.hosts(graph)
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(graph.nodes[h]["leaf"], []).append(h)
    out = []
    for h in hosts:
        for leaf, members in sorted(by_leaf.items()):
            if leaf != graph.nodes[h]["leaf"]:
                out.append((h, members[hosts.index(h) % len(members)]))
    return out


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    results = {}
    for failure in p["failures"].split(","):
        ctx.log(f"failover: {failure}")
        results[failure] = run_failure(ctx, graph, failure)
    ctx.metrics["failures"] = results
    rows = [
        [
            f,
            r["pairs"],
            r["worst_outage_s"] * 1000,
            r["lost"],
            r["sent"],
            "-" if r["controller_saw_s"] is None else f"{r['controller_saw_s'] * 1000:.0f}",
            r["unreachable_after"],
        ]
        for f, r in results.items()
    ]
    ctx.table(
        f"failures at t={p['fail_at_s']:g} s under pings every {p['interval_s'] * 1000:g} "
        "ms between leaves",
        [
            "failure",
            "pairs",
            "worst outage ms",
            "pings lost",
            "pings sent",
            "controller saw it (ms)",
            "pairs unreachable at the end",
        ],
        rows,
    )
    for f, r in results.items():
        ctx.check(
            f"{f}: every pair reachable again",
            r["unreachable_after"] == 0,
            r["unreachable_after"],
            "0 pairs",
        )
        ctx.check(
            f"{f}: recovery bounded",
            r["worst_outage_s"] <= p["max_outage_s"],
            f"{r['worst_outage_s'] * 1000:.0f} ms",
            f"<= {p['max_outage_s'] * 1000:.0f} ms",
        )
    panels = [
        Panel(
            "pings lost per 100 ms, all pairs",
            "time (s)",
            "pings lost",
            lines={f: r["loss_timeline"] for f, r in results.items()},
            vline=p["fail_at_s"],
            vline_label="failure",
        )
    ]
    path = save_panels(ctx.out_dir / "failover.png", panels, title="failover")
    ctx.plots.append(path.name)


def run_failure(ctx: Context, graph, failure: str) -> dict:
    p = ctx.params
    flows = pairs(graph)
    with ctx.fabric(graph, failure, **fabric_options(p)) as fab:
        jobs = {
            (s, d): fab.start(
                "ping", src=s, dst=d, interval_s=p["interval_s"], duration_s=p["duration_s"]
            )
            for s, d in flows
        }
        faults = fab.faults
        t_fail = time.time() + p["fail_at_s"]
        if failure == "link":
            faults.link_down(*topopick.spare_uplink(graph), at=p["fail_at_s"])
        elif failure == "switch":
            victim = topopick.spare_top_switch(graph)
            faults.kill_switch(victim, at=p["fail_at_s"])
            faults.restart_switch(victim, at=p["fail_at_s"] + p["restart_after_s"])
        else:
            faults.kill_controller(at=p["fail_at_s"])
            faults.restart_controller(at=p["fail_at_s"] + p["restart_after_s"])
        results = {k: j.wait() for k, j in jobs.items()}
        if faults.errors:
            raise RuntimeError(f"fault injection failed: {'; '.join(faults.errors)}")
        status = fab.controller_status()
        if failure == "link":
            fab.wait_routes_installed()  # the cut cable stays cut
        else:
            fab.wait_converged()
        # Reachability at the end, on the healed fabric, one probe per pair.
        unreachable = fab.unreachable(flows)
        ctx.events.extend(dict(e, kind=f"{failure}: {e['kind']}") for e in faults.events)
    seen = outage.controller_events(status, ("link_down", "switch_leave"), t_fail, slack_s=0.2)
    saw = [e["t"] - t_fail for e in seen]
    sent = sum(r.sent for r in results.values())
    lost = sum(r.lost for r in results.values())
    bins: dict[float, int] = {}
    for r in results.values():
        got = set(r.replied)
        for seq in range(1, r.sent + 1):
            if seq not in got:
                slot = round(seq * r.actual_interval_s, 1)  # ping's real pace, not -i
                bins[slot] = bins.get(slot, 0) + 1
    times = [round(i * 0.1, 1) for i in range(int(p["duration_s"] * 10) + 1)]
    return {
        "pairs": len(flows),
        "sent": sent,
        "lost": lost,
        "worst_outage_s": max(r.longest_outage_s for r in results.values()),
        "outage_by_pair_s": {f"{s}->{d}": r.longest_outage_s for (s, d), r in results.items()},
        "controller_saw_s": min(saw) if saw else None,
        "unreachable_after": unreachable,
        "loss_timeline": (times, [bins.get(t, 0) for t in times]),
    }


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_FAILURE = (
    ("pairs", ("pairs",)),
    ("worst outage (ms)", ("worst_outage_s",), {"scale": 1e3}),
    ("pings lost", ("lost",)),
    ("pings sent", ("sent",)),
    ("controller saw it after (ms)", ("controller_saw_s",), {"scale": 1e3}),
    ("pairs unreachable at the end", ("unreachable_after",)),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "failover",
        "failover",
        "failover: link, switch and controller failures",
        figures=per_key(FAILURES, ("failures",), _FIGURES_PER_FAILURE),
        timeout_s=600,
    ),
)
