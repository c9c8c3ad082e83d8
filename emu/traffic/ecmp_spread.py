"""Which ways ECMP sent a bundle of TCP flows between two hosts, from the switches themselves.

Owns the measurement behind "ECMP spreads flows over more than one first hop
and more than one top-tier switch": many parallel TCP streams src -> dst
(iperf3, emu/traffic/iperf.py), each stream's path asked of the switches
with its own 5-tuple (`Fabric.trace_path`, through the tables ECMP hashed it
in), and the bytes each first hop and each top-tier switch sent meanwhile,
from their port counters (`port_tx_bytes`, `switch_tx_bytes`). A switch
*carries* flows when its counters sent at least the payload the receiver
got on the flows traced through it (`carried_by`): data on the wire is
never less than its payload. So the figure is about ECMP's hash, not about
how fairly TCP shared the sender's link between the streams (drop-tail at
the host's 16-frame queue can starve a few for seconds).

The graph questions it asks (the first hops ECMP spreads over, the top
tier, a pair of hosts with more than one first hop) are emu/topopick.py's.
Its result (`EcmpSpread`) writes its metrics and tables into a scenario's
context and draws its bars; the scenario judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from emu.telemetry import Panel
from emu.topopick import first_hops, top_tier
from emu.traffic import iperf

if TYPE_CHECKING:
    from emu.scenario import Context

# The iperf3 server's port: with the streams' source ports, each stream's 5-tuple.
SERVER_PORT = 5202


def switch_tx_bytes(fab, switches: list[str]) -> dict[str, int]:
    """Bytes each switch has sent, over all its ports."""
    return {sw: sum(p.tx_bytes for p in fab.port_stats(sw).values()) for sw in switches}


def port_tx_bytes(fab, switch: str, peers: list[str]) -> dict[str, int]:
    """Bytes `switch` has sent towards each of `peers`, from its port counters."""
    ports = fab.port_stats(switch)
    return {n: ports[fab.graph.edges[switch, n]["ports"][switch]].tx_bytes for n in peers}


@dataclass(frozen=True)
class Carried:
    """What one switch (or first hop) did for the flows.

    Attributes:
        flows: traced flows through it.
        payload_bytes: what the receiver got on those flows.
        tx_bytes: what its counters sent meanwhile.
    """

    flows: int
    payload_bytes: int
    tx_bytes: int

    @property
    def carries(self) -> bool:
        """It sent at least its flows' payload (and they had some)."""
        return self.payload_bytes > 0 and self.tx_bytes >= self.payload_bytes


def carried_by(
    flows: dict[int, int],
    paths: dict[int, list[str]],
    nodes: list[str],
    sent: dict[str, int],
    where: Callable[[list[str], str], bool],
) -> dict[str, Carried]:
    """Per node: the traced flows through it (`where(path, node)`), with `sent[node]`.

    Args:
        flows: source port -> payload bytes the receiver got (iperf.received_by_stream).
        paths: source port -> the nodes its flow crossed (Fabric.trace_path).
        nodes: the switches (or first hops) to account for.
        sent: bytes each of `nodes` sent during the flows.
        where: whether a path goes through a node, the node's way.
    """
    out = {}
    for n in nodes:
        mine = [sp for sp, path in paths.items() if where(path, n)]
        out[n] = Carried(len(mine), sum(flows[sp] for sp in mine), sent[n])
    return out


def _table_rows(carried: dict[str, Carried]) -> list[list]:
    total = sum(c.tx_bytes for c in carried.values()) or 1
    return [
        [n, c.flows, c.payload_bytes / 1e6, c.tx_bytes / 1e6, c.tx_bytes / total]
        for n, c in carried.items()
    ]


@dataclass(frozen=True)
class EcmpSpread:
    """Where the flows src -> dst went.

    Attributes:
        src, dst: the hosts.
        asked_flows: the streams asked for.
        traced_flows: the streams iperf3 reported and the switches traced.
        first_switch: src's switch.
        at_first_hop: per first hop of first_switch towards dst, what it carried.
        at_top: per top-tier switch, what it carried ({} in a flat fabric).
        error: iperf3's error, or None.
    """

    src: str
    dst: str
    asked_flows: int
    traced_flows: int
    first_switch: str
    at_first_hop: dict[str, Carried]
    at_top: dict[str, Carried] = field(default_factory=dict)
    error: str | None = None

    def used(self, level: dict[str, Carried]) -> list[str]:
        """The switches of `level` (at_first_hop or at_top) that carry flows."""
        return [n for n, c in level.items() if c.carries]

    def metrics(self) -> dict:
        out = {
            "flows": self.asked_flows,
            "traced_flows": self.traced_flows,
            "first_switch": self.first_switch,
            "bytes_per_first_hop": {n: c.tx_bytes for n, c in self.at_first_hop.items()},
            "flows_per_first_hop": {n: c.flows for n, c in self.at_first_hop.items()},
            "error": self.error,
        }
        if self.at_top:
            out["bytes_per_top_switch"] = {n: c.tx_bytes for n, c in self.at_top.items()}
            out["flows_per_top_switch"] = {n: c.flows for n, c in self.at_top.items()}
        return out

    def report(self, ctx: Context) -> None:
        """metrics.json's "ecmp", a table per first hop and, with tiers, per top-tier switch."""
        ctx.metrics["ecmp"] = self.metrics()
        what = f"{self.traced_flows} TCP flows {self.src} -> {self.dst}"
        ctx.table(
            f"ECMP: {what} through {self.first_switch}, per first hop "
            "(flows: the switches' trace of each flow's 5-tuple)",
            ["next hop", "flows", "received MB", "sent MB", "share of bytes"],
            _table_rows(self.at_first_hop),
        )
        if self.at_top:
            ctx.table(
                f"ECMP: {what}, per top-tier switch",
                ["switch", "flows", "received MB", "sent MB", "share of bytes"],
                _table_rows(self.at_top),
            )

    def panel(self) -> Panel:
        """MB per top-tier switch where there is a top tier, else per first hop."""
        if self.at_top:
            title, xlabel, level = "bytes per top-tier switch", "switch", self.at_top
        else:
            title, xlabel = f"bytes {self.first_switch} sent per first hop", "next hop"
            level = self.at_first_hop
        return Panel(
            f"ECMP: {self.asked_flows} flows, {title}",
            xlabel,
            "MB",
            bars={n: c.tx_bytes / 1e6 for n, c in level.items()},
        )


def measure(fab, src: str, dst: str, flows: int, duration_s: float) -> EcmpSpread:
    """`flows` parallel TCP streams src -> dst for `duration_s`; where each went, what each
    first hop and top-tier switch sent."""
    graph = fab.graph
    top = top_tier(graph)
    leaf = graph.nodes[src]["leaf"]
    hops = first_hops(graph, leaf, graph.nodes[dst]["leaf"])
    before, hops_before = switch_tx_bytes(fab, top), port_tx_bytes(fab, leaf, hops)
    doc = iperf.run(fab, src, dst, duration_s, parallel=flows, port=SERVER_PORT)
    after, hops_after = switch_tx_bytes(fab, top), port_tx_bytes(fab, leaf, hops)
    streams = iperf.received_by_stream(doc)
    paths = {sp: fab.trace_path(src, dst, "tcp", sp, SERVER_PORT) for sp in streams}
    per_hop = {n: hops_after[n] - hops_before[n] for n in hops}
    at_hop = carried_by(streams, paths, hops, per_hop, lambda path, n: path[2] == n)
    carried = {sw: after[sw] - before[sw] for sw in top}
    at_top = carried_by(streams, paths, top, carried, lambda path, n: n in path)
    return EcmpSpread(src, dst, flows, len(streams), leaf, at_hop, at_top, doc.get("error"))
