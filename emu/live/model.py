"""The live view's page model: a fabric's graph and two switch samples -> the JSON the page draws.

Owns the pure part of the live view: where each node sits (hosts at the
bottom, then each switch tier, leaves below spines below cores), which
switch port ends which link, and how two successive answers of the switches'
`live` management command (emu/switch/reports.py) become per-link utilisation
and per-port state (queue depth, PAUSE received and sent per priority, ECN
marks, drops). No sockets, no clocks, no threads: emu/live/sampler.py feeds
it, emu/live/server.py serves what it returns, tests/unit/test_live_model.py
checks it.
"""

from __future__ import annotations

from typing import Any, Mapping

import networkx as nx

from emu import fabric as fabric_mod
from emu.fabric import natural_key

MODEL_VERSION = 1
# A port whose egress was paused for at least this share of the last interval
# (or is paused at the sample) is drawn paused. A share, not "paused now": a
# storm's PAUSE refreshes leave short gaps that a 4 Hz sample may fall into.
PAUSED_SHARE = 0.5
# Utilisation above 1 is measuring noise (two clocks, frames in flight): clamp.
MAX_UTILISATION = 1.0


def link_id(u: str, v: str) -> str:
    """One name per link whatever the order of its ends: 'h1~leaf1'."""
    a, b = sorted((u, v), key=natural_key)
    return f"{a}~{b}"


def layout(graph: nx.Graph) -> dict[str, tuple[float, float]]:
    """Node -> (x, y) in the unit square, y = 0 at the top.

    Rows from the bottom: hosts, then switches by tier (leaf/edge 0, spine/agg
    1, core 2; emu/fabric/'s contract). Within a row nodes are spread evenly
    in natural name order, and hosts follow their leaf's order so that a
    host sits under its leaf.

    Examples:
        >>> g = fabric_mod.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1)
        >>> pos = layout(g)
        >>> pos["spine1"][1] < pos["leaf1"][1] < pos["h1"][1]
        True
    """
    # A GPU server's NVSwitch (tier -1) gets the bottom row, under its GPUs.
    nvswitches = [s for s in fabric_mod.switches(graph) if graph.nodes[s]["tier"] < 0]
    switches = [s for s in fabric_mod.switches(graph) if graph.nodes[s]["tier"] >= 0]
    tiers = sorted({graph.nodes[s]["tier"] for s in switches})
    rows: list[list[str]] = [sorted(nvswitches, key=natural_key)]
    first_tier = sorted(
        (s for s in switches if graph.nodes[s]["tier"] == tiers[0]), key=natural_key
    )
    leaf_rank = {s: i for i, s in enumerate(first_tier)}
    rows.append(
        sorted(
            fabric_mod.hosts(graph),
            key=lambda h: (leaf_rank.get(graph.nodes[h].get("leaf"), 0), natural_key(h)),
        )
    )
    for tier in tiers:
        rows.append(
            sorted((s for s in switches if graph.nodes[s]["tier"] == tier), key=natural_key)
        )
    rows = [row for row in rows if row]
    pos = {}
    for r, row in enumerate(rows):
        # The bottom row at y = 0.9, the top one at y = 0.1.
        y = 0.5 if len(rows) == 1 else 0.9 - 0.8 * r / (len(rows) - 1)
        for i, node in enumerate(row):
            pos[node] = (round((i + 1) / (len(row) + 1), 4), round(y, 4))
    return pos


def topology(graph: nx.Graph) -> tuple[list[dict], list[dict]]:
    """The page's nodes (with positions) and links of `graph`, without any sample."""
    pos = layout(graph)
    nodes = [
        {
            "name": n,
            "kind": graph.nodes[n].get("kind"),
            "role": graph.nodes[n].get("role"),
            "x": pos[n][0],
            "y": pos[n][1],
        }
        for n in sorted(graph.nodes, key=natural_key)
    ]
    links = [
        {
            "id": link_id(u, v),
            "a": min((u, v), key=natural_key),
            "b": max((u, v), key=natural_key),
            "rate_bps": data["rate_bps"],
        }
        for u, v, data in sorted(graph.edges(data=True), key=lambda e: link_id(e[0], e[1]))
    ]
    return nodes, links


def _interfaces(graph: nx.Graph) -> dict[str, tuple[str, str]]:
    """Switch interface name -> (the link's id, the peer at its other end)."""
    out = {}
    for u, v, data in graph.edges(data=True):
        for end, peer in ((u, v), (v, u)):
            if graph.nodes[end].get("kind") == "switch":
                out[data["intfs"][end]] = (link_id(u, v), peer)
    return out


def _rate(now: float, before: float, dt_s: float) -> float:
    return max(0.0, now - before) / dt_s if dt_s > 0 else 0.0


def port_states(
    graph: nx.Graph,
    samples: Mapping[str, dict],
    previous: Mapping[str, dict] | None = None,
) -> list[dict]:
    """Every sampled switch port's state; rates and shares need `previous` (else 0).

    Args:
        graph: the fabric (emu/fabric/).
        samples: switch -> its latest `live` answer (emu/switch/reports.py).
        previous: switch -> the answer before it, for bytes/s and paused share.

    Returns:
        One dict per port, ordered by switch and port number: `id`
        ("leaf1:1"), `switch`, `port_no`, `name`, `peer`, `link`, `link_up`,
        `rate_bps`, `tx_bps`, `rx_bps`, `queue_bytes` (all priorities),
        `depth_bytes` (per priority), `paused_prios` (egress stopped by PAUSE
        received), `paused_share` (of the interval, worst priority),
        `pausing_prios` (this switch holds the peer with XOFF),
        `pause_rx_frames` / `pause_tx_frames` / `ecn_marks` (per priority,
        totals), `drops` (total) and `state`: "paused", "pausing" or "ok".
    """
    intfs = _interfaces(graph)
    previous = previous or {}
    out = []
    for switch in sorted(samples, key=natural_key):
        sample = samples[switch]
        before = {p["port_no"]: p for p in (previous.get(switch) or {}).get("ports", [])}
        dt_s = sample["mono"] - previous[switch]["mono"] if switch in previous else 0.0
        for port in sample["ports"]:
            link, peer = intfs.get(port["name"], (None, None))
            old = before.get(port["port_no"])
            if old is not None and dt_s > 0:
                tx_bps = _rate(port["tx_bytes"], old["tx_bytes"], dt_s) * 8
                rx_bps = _rate(port["rx_bytes"], old["rx_bytes"], dt_s) * 8
                shares = [
                    min(1.0, _rate(now, then, dt_s))
                    for now, then in zip(port["paused_s"], old["paused_s"])
                ]
            else:
                tx_bps = rx_bps = 0.0
                shares = [0.0] * len(port["paused_s"])
            paused = sorted(
                set(port["paused_now"]) | {p for p, s in enumerate(shares) if s >= PAUSED_SHARE}
            )
            pausing = list(port["pausing"])
            out.append(
                {
                    "id": f"{switch}:{port['port_no']}",
                    "switch": switch,
                    "port_no": port["port_no"],
                    "name": port["name"],
                    "peer": peer,
                    "link": link,
                    "link_up": port["link_up"],
                    "rate_bps": port["rate_bps"],
                    "tx_bps": round(tx_bps),
                    "rx_bps": round(rx_bps),
                    "queue_bytes": sum(port["depth_bytes"]),
                    "depth_bytes": list(port["depth_bytes"]),
                    "paused_prios": paused,
                    "paused_share": round(max(shares, default=0.0), 3),
                    "pausing_prios": pausing,
                    "pause_rx_frames": list(port["pause_rx_frames"]),
                    "pause_tx_frames": list(port["pause_tx_frames"]),
                    "ecn_marks": list(port["ecn_marks"]),
                    "drops": port["drops"],
                    "state": "paused" if paused else "pausing" if pausing else "ok",
                }
            )
    return out


def link_utilisation(links: list[dict], ports: list[dict]) -> list[dict]:
    """`links` with `util_ab`, `util_ba` (a -> b and b -> a, shares of the rate),
    `util` (the busier direction) and `up`, read from the switch ends' ports.

    A direction is measured at the switch that sends it (tx) or, on a host's
    link, at the switch that receives it (rx); a link none of whose ends was
    sampled has no utilisation (None).
    """
    by_link: dict[str, list[dict]] = {}
    for port in ports:
        if port["link"] is not None:
            by_link.setdefault(port["link"], []).append(port)
    out = []
    for link in links:
        ends = by_link.get(link["id"], [])
        ab = ba = None
        for port in ends:
            # This port's switch is one end: its tx leaves towards the peer.
            sent, received = port["tx_bps"], port["rx_bps"]
            if port["switch"] == link["a"]:
                ab, ba = sent, ba if ba is not None else received
            else:
                ba, ab = sent, ab if ab is not None else received
        rate = link["rate_bps"] or 1
        util_ab = None if ab is None else round(min(MAX_UTILISATION, ab / rate), 3)
        util_ba = None if ba is None else round(min(MAX_UTILISATION, ba / rate), 3)
        measured = [u for u in (util_ab, util_ba) if u is not None]
        out.append(
            {
                **link,
                "util_ab": util_ab,
                "util_ba": util_ba,
                "util": max(measured) if measured else None,
                "up": all(p["link_up"] for p in ends),
            }
        )
    return out


def page_model(
    graph: nx.Graph | None,
    samples: Mapping[str, dict],
    previous: Mapping[str, dict] | None = None,
    *,
    phase: str,
    fabric: dict[str, Any] | None = None,
    results: dict[str, Any] | None = None,
    sampled_at: float | None = None,
    interval_s: float | None = None,
    message: str = "",
) -> dict:
    """The JSON document of `/api/state`: everything the page draws at one moment.

    Args:
        graph: the running fabric, or None while none runs.
        samples, previous: as in `port_states`.
        phase: "waiting" (no fabric yet, or between a scenario's fabrics),
            "running" or "finished" (the run ended; `results` says where).
        fabric: what names the fabric on the page (run id, name, kind).
        results: the finished run's report text and plot URLs.
        sampled_at: wall time of the samples.
        interval_s: the sampling period, so that the page can say it.
        message: one line for the page's status bar.
    """
    doc: dict[str, Any] = {
        "version": MODEL_VERSION,
        "phase": phase,
        "fabric": fabric,
        "sampled_at": sampled_at,
        "interval_s": interval_s,
        "message": message,
        "nodes": [],
        "links": [],
        "ports": [],
        "results": results,
    }
    if graph is None:
        return doc
    nodes, links = topology(graph)
    ports = port_states(graph, samples, previous)
    doc.update(nodes=nodes, links=link_utilisation(links, ports), ports=ports)
    return doc
