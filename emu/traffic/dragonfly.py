"""Dragonfly workloads: the adversarial group-to-group pattern and uniform random traffic.

Owns what a measurement of a dragonfly's routing (minimal, UGAL, Valiant:
`Fabric(dragonfly_routing=...)`, controllers/ugal.py) sends and reads:

- the patterns: `adversarial_pairs` (host j of group i sends to host j of
  group i+1: under minimal routing every flow of a group crosses the global
  link to the next group, Kim et al.'s worst case, "WC", ISCA 2008 4.2) and
  `uniform_destinations` (every host sends each datagram to another host
  drawn at random, "UR");
- `run`: one UDP sender and receiver per host (`emu/traffic/spray.py`, in
  the host's namespace, all starting at one instant), the bytes each flow
  delivered inside the common measuring window, and what the switches
  counted meanwhile: the bytes every global link carried each way (port
  counters) and UGAL's decisions and the packets it sent non-minimally;
- `model_rates`: emu/models/dragonfly.py's fluid figures for the same flows.

Kernel UDP rides the lossy class unless `Load.tos` says otherwise: no PAUSE,
so a full global link drops and the throughput a flow gets is what its
routing found room for (controllers/ugal.py, "PFC and deadlock").

Callers: tests/integration/test_dragonfly_ugal.py; the scenario of issue
31 that compares the routings on collectives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import networkx as nx

from emu.fabric import hosts as fabric_hosts
from emu.models import dragonfly as model

if TYPE_CHECKING:
    from emu.net import Fabric

SPRAY_PORT = 5400
START_DELAY_S = 1.5  # time for every host's spray to start before the common start
PATTERNS = ("adversarial", "uniform")


@dataclass(frozen=True)
class Load:
    """What each host sends.

    Attributes:
        rate_bps: payload bit/s per host (a fraction of the host link leaves room
            for the headers: a 1400-byte datagram is 1442 bytes on the wire).
        size_bytes: payload bytes a datagram.
        duration_s: seconds of sending; `warmup_s` at each end are not measured.
        tos: the IP TOS byte (0: the lossy class).
        seed: the uniform pattern's draws (each host adds its index).
    """

    rate_bps: float
    size_bytes: int = 1400
    duration_s: float = 6.0
    warmup_s: float = 1.0
    tos: int = 0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.rate_bps <= 0 or self.size_bytes < 20 or self.duration_s <= 2 * self.warmup_s:
            raise ValueError(
                f"{self}: rate > 0, datagrams of 20 bytes or more, and a duration longer "
                "than the two warm-ups"
            )


@dataclass(frozen=True)
class DragonflyRun:
    """One pattern's run, as the switches and the receivers saw it.

    Attributes:
        pattern: "adversarial" or "uniform".
        window_s: the measuring window every receiver counted in.
        offered_bps: payload bit/s each host sent in the window, by host.
        flows: (source, destination) -> payload bit/s delivered in the window.
        global_bytes: (router, peer router) -> bytes sent on that global link
            over the whole run (port counters).
        ugal: router -> (packets UGAL placed, of them off the minimal path).
        send_errors, skipped: datagrams the hosts could not send (a full
            qdisc), or skipped behind their schedule (the host fell behind).
    """

    pattern: str
    window_s: float
    offered_bps: Mapping[str, float]
    flows: Mapping[tuple[str, str], float]
    global_bytes: Mapping[tuple[str, str], int]
    ugal: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    send_errors: int = 0
    skipped: int = 0

    @property
    def delivered_bps(self) -> float:
        return sum(self.flows.values())

    @property
    def offered_total_bps(self) -> float:
        return sum(self.offered_bps.values())

    @property
    def nonminimal(self) -> int:
        """Packets the source routers sent off the minimal path."""
        return sum(off for _placed, off in self.ugal.values())


# ----- patterns ----------------------------------------------------------------------


def groups_of(graph: nx.Graph) -> dict[int, list[str]]:
    """Group -> its hosts, in the builder's order (router, then host)."""
    out: dict[int, list[str]] = {}
    for h in fabric_hosts(graph):
        out.setdefault(graph.nodes[h]["group"], []).append(h)
    return dict(sorted(out.items()))


def adversarial_pairs(graph: nx.Graph) -> list[tuple[str, str]]:
    """Host j of group i to host j of group i+1 (the last group to the first).

    Examples:
        >>> from emu.fabric import dragonfly
        >>> adversarial_pairs(dragonfly(groups=3, routers_per_group=2))
        [('h1', 'h3'), ('h2', 'h4'), ('h3', 'h5'), ('h4', 'h6'), ('h5', 'h1'), ('h6', 'h2')]
    """
    groups = list(groups_of(graph).values())
    return [
        (hosts[j], groups[(i + 1) % len(groups)][j])
        for i, hosts in enumerate(groups)
        for j in range(len(hosts))
    ]


def uniform_destinations(graph: nx.Graph) -> dict[str, list[str]]:
    """Each host's destinations under uniform random traffic: every other host."""
    hosts = fabric_hosts(graph)
    return {h: [d for d in hosts if d != h] for h in hosts}


def destinations(graph: nx.Graph, pattern: str) -> dict[str, list[str]]:
    """Each host's destinations under `pattern` ("adversarial" or "uniform").

    Raises:
        ValueError: another pattern.
    """
    if pattern == "adversarial":
        return {src: [dst] for src, dst in adversarial_pairs(graph)}
    if pattern == "uniform":
        return uniform_destinations(graph)
    raise ValueError(f"pattern {pattern!r}: one of {', '.join(PATTERNS)}")


def model_rates(
    graph: nx.Graph, pattern: str, rate_bps: float, routing: str, size_bytes: int = 1400
) -> float:
    """The fluid model's delivered payload bit/s, all hosts together, for `pattern` at
    `rate_bps` of payload per host under `routing` (emu/models/dragonfly.py
    `routed_rates`): the model's links carry frames, so the demand goes in with its
    headers (`wire_share` of datagrams of `size_bytes`) and comes out without."""
    share = wire_share(size_bytes)
    dests = destinations(graph, pattern)
    flows = [(s, d) for s, ds in dests.items() for d in ds]
    demands = [rate_bps / share / len(dests[s]) for s, _d in flows]
    return share * sum(model.routed_rates(graph, flows, demands, routing))


def wire_share(size_bytes: int) -> float:
    """The payload's share of a datagram's bits on the wire (Ethernet 14 + FCS 4 + IPv4 20
    + UDP 8 bytes of headers; emu's links count frames without preamble or gap)."""
    return size_bytes / (size_bytes + 14 + 4 + 20 + 8)


# ----- a run on a fabric ----------------------------------------------------------------


def run(fab: Fabric, pattern: str, load: Load) -> DragonflyRun:
    """Send `pattern` at `load` from every host at once; what arrived and what the
    switches counted.

    Raises:
        RuntimeError: a host's spray failed (its log is in the fabric's log dir).
    """
    graph = fab.graph
    dests = destinations(graph, pattern)
    before = global_tx_bytes(fab)
    ugal_before = ugal_counts(fab)
    start_at = time.time() + START_DELAY_S
    out_dir = fab.log_dir()
    procs = {}
    for index, (host, dsts) in enumerate(sorted(dests.items())):
        argv = _spray_argv(graph, host, dsts, load, start_at, index, out_dir, pattern)
        log = open(os.path.join(out_dir, f"spray-{pattern}-{host}.log"), "ab")
        procs[host] = fab.popen(host, argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
    deadline = start_at + load.duration_s + 15.0
    for host, proc in procs.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            fab.stop_proc(proc)
            raise RuntimeError(f"{host}: the spray did not end; see {out_dir}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"{host}: the spray failed ({proc.returncode}); see {out_dir}")
        fab.stop_proc(proc)
    results = {h: _read(out_dir, pattern, h) for h in procs}
    return collect(
        graph, pattern, results, before, global_tx_bytes(fab), ugal_before, ugal_counts(fab)
    )


def _spray_argv(graph, host, dsts, load, start_at, index, out_dir, pattern) -> list[str]:
    return [
        sys.executable,
        "-m",
        "emu.traffic.spray",
        "--bind",
        graph.nodes[host]["ip"],
        "--port",
        str(SPRAY_PORT),
        "--dst",
        ",".join(graph.nodes[d]["ip"] for d in dsts),
        "--rate-bps",
        repr(load.rate_bps),
        "--size",
        str(load.size_bytes),
        "--start-at",
        repr(start_at),
        "--duration",
        repr(load.duration_s),
        "--warmup",
        repr(load.warmup_s),
        "--seed",
        str(load.seed + index),
        "--tos",
        str(load.tos),
        "--out",
        os.path.join(out_dir, f"spray-{pattern}-{host}.json"),
    ]


def _read(out_dir: str, pattern: str, host: str) -> dict:
    with open(os.path.join(out_dir, f"spray-{pattern}-{host}.json"), encoding="utf-8") as f:
        return json.load(f)


def collect(
    graph: nx.Graph,
    pattern: str,
    results: Mapping[str, dict],
    before: Mapping[tuple[str, str], int],
    after: Mapping[tuple[str, str], int],
    ugal_before: Mapping[str, tuple[int, int]],
    ugal_after: Mapping[str, tuple[int, int]],
) -> DragonflyRun:
    """A `DragonflyRun` from every host's spray result and the counters around the run."""
    by_ip = {graph.nodes[h]["ip"]: h for h in fabric_hosts(graph)}
    window_s = min(r["window_s"] for r in results.values())
    flows: dict[tuple[str, str], float] = {}
    offered: dict[str, float] = {}
    for host, res in results.items():
        offered[host] = sum(c[2] for c in res["sent"].values()) * 8 / window_s
        for src_ip, count in res["received"].items():
            if src_ip in by_ip:
                flows[(by_ip[src_ip], host)] = count[2] * 8 / window_s
    return DragonflyRun(
        pattern=pattern,
        window_s=window_s,
        offered_bps=offered,
        flows=flows,
        global_bytes={k: after[k] - before.get(k, 0) for k in after},
        ugal={
            sw: (n - ugal_before.get(sw, (0, 0))[0], off - ugal_before.get(sw, (0, 0))[1])
            for sw, (n, off) in ugal_after.items()
        },
        send_errors=sum(r["send_errors"] for r in results.values()),
        skipped=sum(r["skipped"] for r in results.values()),
    )


def global_tx_bytes(fab: Fabric) -> dict[tuple[str, str], int]:
    """(router, peer) -> bytes the router has sent on its global link to the peer."""
    out: dict[tuple[str, str], int] = {}
    graph = fab.graph
    stats = {}
    for u, v, d in graph.edges(data=True):
        if d.get("tier") != "global":
            continue
        for a, b in ((u, v), (v, u)):
            if a not in stats:
                stats[a] = fab.port_stats(a)
            out[(a, b)] = stats[a][d["ports"][a]].tx_bytes
    return out


def ugal_counts(fab: Fabric) -> dict[str, tuple[int, int]]:
    """Router -> (packets its UGAL groups placed, those sent off the minimal path),
    from its counters (emu.answers.AdaptiveState)."""
    out = {}
    for sw in sorted(n for n, d in fab.graph.nodes(data=True) if d["kind"] == "switch"):
        adaptive = fab.counters(sw).adaptive
        out[sw] = (adaptive.ugal_decisions, adaptive.ugal_nonminimal)
    return out


def table(runs: Mapping[str, DragonflyRun], models: Mapping[str, float]) -> list[list]:
    """Report rows: routing, pattern, delivered Mbit/s, of offered, model, packets off
    the minimal path."""
    rows = []
    for name, r in runs.items():
        rows.append(
            [
                name,
                r.pattern,
                round(r.delivered_bps / 1e6, 2),
                round(r.delivered_bps / r.offered_total_bps, 3) if r.offered_total_bps else 0.0,
                round(models.get(name, 0.0) / 1e6, 2),
                r.nonminimal,
            ]
        )
    return rows
