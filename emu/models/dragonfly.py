"""Dragonfly routing's throughput: minimal, Valiant and UGAL, from the graph.

Owns the figures a measurement of non-minimal routing on a dragonfly is held
to (`emu/traffic/dragonfly.py`, `controllers/ugal.py`), for a graph built by
`emu.fabric.dragonfly` or read from a topology file of one:

- the closed forms of Kim, Dally, Scott, Abts ("Technology-Driven,
  Highly-Scalable Dragonfly Topology", ISCA 2008, 4.1-4.2) for the
  adversarial pattern (every host of group i sends to group i+1): minimal
  routing shares the global links between two groups among the group's
  a x p hosts (`minimal_bound_bps`); Valiant's routing (Valiant and
  Brebner, STOC 1981) crosses two global links a packet, so it gets at most
  half of a group's global bandwidth whatever the pattern
  (`valiant_bound_bps`); UGAL (Singh, PhD thesis, Stanford 2005) picks per
  packet the better of the two, so its expected figure on a pattern is the
  larger (`ugal_expected_bps`): Valiant's on the adversarial pattern and
  minimal's on uniform random traffic, which Kim et al. measure UGAL-L
  within a few percent of;
- the same figures for the paths emu installs, per flow, as a fluid model:
  each flow's share of every link under routing's shortest-path ECMP
  (split evenly at each hop, the hash's expectation), under Valiant's
  candidates (the source router's global links to a third group, as
  `controllers/ugal.py` picks them, then minimally with no U-turn), and
  max-min fair rates over those shares (progressive filling, Bertsekas and
  Gallager, Data Networks, 6.5.2); UGAL as a greedy fluid choice between a
  flow's minimal path and each of its Valiant paths, a small increment at a
  time onto the option whose busiest link stays least loaded, ties to the
  minimal one: UGAL with global knowledge (Kim et al.'s UGAL-G), the most
  a per-packet choice among these paths can reach. `ugal_rates(...,
  local=True)` lets a flow leave its minimal path only where the source
  router's own link on it is full: UGAL-L without backpressure (a lossy
  class, no PFC), which cannot see a global link on another router of its
  group (Jiang, Kim, Dally, "Indirect Adaptive Routing on Large Scale
  Interconnection Networks", ISCA 2009).

Links are directed (u, v) pairs of the graph's nodes with the edge's
`rate_bps`; a flow is (source host, destination host) with a demand in
bit/s. Pure: graphs in, numbers out (tests/unit/test_models_dragonfly.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import networkx as nx

Link = tuple[str, str]
Split = dict[Link, float]  # a flow's share of each directed link it crosses (1: all of it)
Flow = tuple[str, str]


@dataclass(frozen=True)
class Shape:
    """A dragonfly's parameters as its graph says them (Kim et al.'s g, a, p, h).

    Attributes:
        groups, routers_per_group, hosts_per_router, global_links_per_router:
            g, a, p and h.
        host_bps, local_bps, global_bps: the rates of each tier's links.
    """

    groups: int
    routers_per_group: int
    hosts_per_router: int
    global_links_per_router: int
    host_bps: float
    local_bps: float
    global_bps: float

    @classmethod
    def of(cls, graph: nx.Graph) -> Shape:
        """Read from the graph's nodes (`group`) and links (`tier`, `rate_bps`).

        Raises:
            ValueError: not a dragonfly (no router carries a group).
        """
        routers = [n for n, d in graph.nodes(data=True) if d["kind"] == "switch" and "group" in d]
        if not routers:
            raise ValueError(f"{graph.graph.get('name')}: not a dragonfly (no router has a group)")
        groups = {graph.nodes[r]["group"] for r in routers}
        hosts = [n for n, d in graph.nodes(data=True) if d["kind"] == "host"]
        rates: dict[str, float] = {}
        globals_ = 0
        for _u, _v, d in graph.edges(data=True):
            rates.setdefault(d["tier"], float(d["rate_bps"]))
            globals_ += d["tier"] == "global"
        return cls(
            groups=len(groups),
            routers_per_group=len(routers) // len(groups),
            hosts_per_router=len(hosts) // len(routers),
            global_links_per_router=2 * globals_ // len(routers),
            host_bps=rates["host"],
            local_bps=rates.get("local", rates["host"]),
            global_bps=rates["global"],
        )

    @property
    def hosts_per_group(self) -> int:
        return self.routers_per_group * self.hosts_per_router

    @property
    def links_between_groups(self) -> float:
        """Global links joining each pair of groups: a x h / (g - 1)."""
        return self.routers_per_group * self.global_links_per_router / (self.groups - 1)


# ----- Kim et al.'s closed forms ---------------------------------------------------------


def minimal_bound_bps(shape: Shape) -> float:
    """Per host, the adversarial pattern under minimal routing: the global links between
    two groups shared by the a x p hosts of one (at most a host link)."""
    share = shape.links_between_groups * shape.global_bps / shape.hosts_per_group
    return min(shape.host_bps, share)


def valiant_bound_bps(shape: Shape) -> float:
    """Per host, any pattern under Valiant's routing: two global hops a packet, so a group's
    a x h global links carry at most half their bandwidth of its own traffic (at most a
    host link)."""
    per_group = shape.routers_per_group * shape.global_links_per_router * shape.global_bps / 2
    return min(shape.host_bps, per_group / shape.hosts_per_group)


def ugal_expected_bps(shape: Shape, pattern: str) -> float:
    """Per host, UGAL's expected figure: the better of minimal and Valiant on the pattern
    ("adversarial"; "uniform": uniform random traffic, which minimal routing carries
    at the host links' rate when global links are not the bottleneck)."""
    if pattern == "adversarial":
        return max(minimal_bound_bps(shape), valiant_bound_bps(shape))
    if pattern == "uniform":
        return uniform_minimal_bound_bps(shape)
    raise ValueError(f"pattern {pattern!r}: adversarial or uniform")


def uniform_minimal_bound_bps(shape: Shape) -> float:
    """Per host, uniform random traffic under minimal routing (one global hop a packet):
    of N = g a p hosts, a fraction (N - a p) / (N - 1) of each host's traffic leaves
    its group, over the group's a h global links (at most a host link)."""
    n = shape.groups * shape.hosts_per_group
    leaving = (n - shape.hosts_per_group) / (n - 1)
    global_out = shape.routers_per_group * shape.global_links_per_router * shape.global_bps
    return min(shape.host_bps, global_out / (shape.hosts_per_group * leaving))


# ----- the paths emu installs --------------------------------------------------------------


class Paths:
    """Minimal and Valiant splits of flows on one dragonfly graph: routers' minimal paths
    as routing computes them, and Valiant candidates as controllers/ugal.py picks them.

    Args:
        graph: the dragonfly.
        minimal: "dragonfly" (one global hop a path, what ``--dragonfly-routing``
            routes by: controllers/dragonfly_next_hops.py) or "shortest"
            (routing's plain shortest paths in hops).
    """

    def __init__(self, graph: nx.Graph, minimal: str = "dragonfly") -> None:
        if minimal not in ("dragonfly", "shortest"):
            raise ValueError(f"minimal={minimal!r}: dragonfly or shortest")
        self.graph = graph
        self.one_global_hop = minimal == "dragonfly"
        self.net = nx.Graph(
            (u, v)
            for u, v in graph.edges()
            if graph.nodes[u]["kind"] == "switch" and graph.nodes[v]["kind"] == "switch"
        )
        self._dist: dict[str, dict[str, int]] = {}

    def group(self, node: str) -> Optional[int]:
        return self.graph.nodes[node].get("group")

    def router(self, host: str) -> str:
        return self.graph.nodes[host]["leaf"]

    def allowed(self, u: str, v: str, dst: str) -> bool:
        """Whether a minimal path towards router `dst` may take u -> v: any link for
        shortest paths; a local link, or a global one into `dst`'s group, for one
        global hop."""
        if not self.one_global_hop:
            return True
        gu, gv, target = self.group(u), self.group(v), self.group(dst)
        return gu == gv or (gv == target and gu != target)

    def dist(self, dst: str) -> dict[str, int]:
        """Hops of the minimal path from every router to router `dst`."""
        if dst not in self._dist:
            rev = nx.DiGraph()
            rev.add_nodes_from(self.net)
            for u, v in self.net.edges():
                for a, b in ((u, v), (v, u)):
                    if self.allowed(a, b, dst):
                        rev.add_edge(b, a)
            self._dist[dst] = nx.single_source_shortest_path_length(rev, dst)
        return self._dist[dst]

    def next_hops(self, node: str, dst: str, avoid: Optional[str] = None) -> list[str]:
        """`node`'s minimal next hops towards router `dst` (less `avoid`)."""
        dist = self.dist(dst)
        return sorted(
            n
            for n in self.net[node]
            if n != avoid and dist.get(n, -1) == dist[node] - 1 and self.allowed(node, n, dst)
        )

    def minimal(self, src: str, dst: str, avoid: Optional[str] = None) -> Split:
        """Router `src` to router `dst`: ECMP split evenly at every hop (the hash's
        expectation); `avoid`: a next hop `src` does not take (a packet's U-turn)."""
        dist = self.dist(dst)
        mass = {src: 1.0}
        split: Split = {}
        for node in sorted((n for n in dist if dist[n] <= dist[src]), key=lambda n: -dist[n]):
            m = mass.pop(node, 0.0)
            if not m or node == dst:
                continue
            hops = self.next_hops(node, dst, avoid if node == src else None)
            for nxt in hops:
                split[(node, nxt)] = split.get((node, nxt), 0.0) + m / len(hops)
                mass[nxt] = mass.get(nxt, 0.0) + m / len(hops)
        return split

    def valiant_candidates(self, src: str, dst: str) -> list[str]:
        """The routers a Valiant packet from router `src` to router `dst` may cross to:
        `src`'s neighbours in a third group, off its minimal next hops, from which the
        way on is not only back (controllers/ugal.py's rule)."""
        mins = set(self.next_hops(src, dst))
        groups = (self.group(src), self.group(dst))
        return [
            n
            for n in sorted(self.net[src])
            if n not in mins and self.group(n) not in groups and self.next_hops(n, dst, avoid=src)
        ]

    def via(self, src: str, mid: str, dst: str) -> Split:
        """Router `src` over its link to `mid`, then minimally (no U-turn) to `dst`."""
        split = {(src, mid): 1.0}
        for link, share in self.minimal(mid, dst, avoid=src).items():
            split[link] = split.get(link, 0.0) + share
        return split

    def options(self, flow: Flow) -> list[tuple[int, Split]]:
        """A flow's (path length in router hops, split) choices for UGAL: the minimal
        split first, then one per Valiant candidate; host links included."""
        s, d = self.router(flow[0]), self.router(flow[1])
        ends = {(flow[0], s): 1.0, (d, flow[1]): 1.0}
        out = [(self.dist(d)[s], {**ends, **self.minimal(s, d)})]
        if self.group(s) != self.group(d):
            for mid in self.valiant_candidates(s, d):
                out.append((1 + self.dist(d)[mid], {**ends, **self.via(s, mid, d)}))
        return out

    def minimal_paths(
        self, src: str, dst: str, avoid: Optional[str] = None
    ) -> list[tuple[float, list[str]]]:
        """Router `src` to router `dst`: every minimal path with the share ECMP gives it
        (split evenly at each hop), routers in order."""
        if src == dst:
            return [(1.0, [dst])]
        hops = self.next_hops(src, dst, avoid)
        return [
            (share / len(hops), [src, *rest])
            for nxt in hops
            for share, rest in self.minimal_paths(nxt, dst)
        ]

    def paths(self, flow: Flow, routing: str) -> list[tuple[float, list[Link]]]:
        """A flow's paths under fixed routing ("minimal" or "valiant") with their shares,
        each as its links in order, host links included."""
        s, d = self.router(flow[0]), self.router(flow[1])
        mids = self.valiant_candidates(s, d) if routing == "valiant" else []
        if routing == "valiant" and self.group(s) != self.group(d) and mids:
            routes = [
                (share / len(mids), [s, *rest])
                for mid in mids
                for share, rest in self.minimal_paths(mid, d, avoid=s)
            ]
        else:
            routes = self.minimal_paths(s, d)
        return [(share, list(zip([flow[0], *nodes], [*nodes, flow[1]]))) for share, nodes in routes]

    def minimal_split(self, flow: Flow) -> Split:
        return self.options(flow)[0][1]

    def valiant_split(self, flow: Flow) -> Split:
        """Evenly over the Valiant candidates (minimal where there is none, or in-group)."""
        opts = self.options(flow)
        if len(opts) == 1:
            return opts[0][1]
        split: Split = {}
        for _hops, option in opts[1:]:
            for link, share in option.items():
                split[link] = split.get(link, 0.0) + share / (len(opts) - 1)
        for end in ((flow[0], self.router(flow[0])), (self.router(flow[1]), flow[1])):
            split[end] = 1.0
        return split

    def capacity(self, link: Link) -> float:
        return float(self.graph.edges[link]["rate_bps"])


# ----- rates ------------------------------------------------------------------------------


def max_min_rates(
    splits: Sequence[Split], demands: Sequence[float], capacity: Callable[[Link], float]
) -> list[float]:
    """Max-min fair rates of flows with fixed link shares (progressive filling), each at
    most its demand."""
    rates = [0.0] * len(splits)
    active = {i for i, d in enumerate(demands) if d > 0}
    left = {link: capacity(link) for s in splits for link in s}
    while active:
        load = {link: sum(splits[i].get(link, 0.0) for i in active) for link in left}
        steps = [left[link] / w for link, w in load.items() if w > 1e-12]
        steps += [demands[i] - rates[i] for i in active]
        step = max(0.0, min(steps))
        for i in active:
            rates[i] += step
        for link, w in load.items():
            left[link] -= step * w
        full = {link for link, w in load.items() if w > 1e-12 and left[link] <= 1e-6}
        active = {
            i
            for i in active
            if demands[i] - rates[i] > 1e-6 and not any(link in full for link in splits[i])
        }
    return rates


def lossy_rates(
    subflows: Sequence[tuple[int, float, Sequence[Link]]],
    capacity: Callable[[Link], float],
    n_flows: int,
    rounds: int = 200,
) -> list[float]:
    """Delivered rates of open-loop flows (UDP at a fixed rate) over drop-tail links: a
    full link drops the same fraction of every flow that arrives at it, what is
    dropped is gone for the links after it, so a flow that a later link will drop
    still takes its share of the earlier ones (the bandwidth max-min fairness
    would give another flow). Fixed point of each link's pass ratio, capacity /
    arrivals (at most 1), iterated `rounds` times.

    Args:
        subflows: (flow index, offered bit/s, links in order) of each path of a flow.
        capacity: a link's bit/s.
        n_flows: how many flows (the result's length).
    """
    ratio: dict[Link, float] = {k: 1.0 for _i, _o, links in subflows for k in links}
    for _ in range(rounds):
        arriving: dict[Link, float] = dict.fromkeys(ratio, 0.0)
        for _i, offered, links in subflows:
            rate = offered
            for link in links:
                arriving[link] += rate
                rate *= ratio[link]
        ratio = {k: min(1.0, capacity(k) / a) if a > 0 else 1.0 for k, a in arriving.items()}
    out = [0.0] * n_flows
    for i, offered, links in subflows:
        rate = offered
        for link in links:
            rate *= ratio[link]
        out[i] += rate
    return out


def ugal_rates(
    paths: Paths,
    flows: Sequence[Flow],
    demands: Sequence[float],
    local: bool = False,
    steps: int = 400,
) -> list[float]:
    """UGAL's fluid rates: each flow grows by small increments, each onto whichever of its
    options (`Paths.options`) keeps its busiest link least loaded, ties to the shorter;
    a flow stops when every option it may take is full or it has its demand.

    `local`: a flow takes a Valiant option only once its minimal option's first
    router link (the source router's own queue) cannot take the increment:
    UGAL-L without backpressure.
    """
    options = [paths.options(f) for f in flows]
    delta = max(demands, default=0.0) / steps
    load: dict[Link, float] = {}
    rates = [0.0] * len(flows)
    active = {i for i, d in enumerate(demands) if d > 0}

    def worst(split: Split, amount: float) -> float:
        return max((load.get(k, 0.0) + amount * w) / paths.capacity(k) for k, w in split.items())

    while active:
        for i in sorted(active):
            amount = min(delta, demands[i] - rates[i])
            allowed = options[i]
            if local and worst(_first_router_link(paths, allowed[0][1]), amount) <= 1 + 1e-9:
                allowed = allowed[:1]  # its own router's link has room: it stays minimal
            best = min(
                allowed, key=lambda o: (round(_queue_cost(o[0], worst(o[1], amount)), 9), o[0])
            )
            if worst(best[1], amount) > 1 + 1e-9:
                active.discard(i)
                continue
            for k, w in best[1].items():
                load[k] = load.get(k, 0.0) + amount * w
            rates[i] += amount
            if demands[i] - rates[i] <= 1e-9:
                active.discard(i)
    return rates


def _queue_cost(hops: int, load: float) -> float:
    """UGAL's q x H in the fluid: a link at utilisation rho holds rho / (1 - rho) packets
    on average (M/M/1), which grows without bound as it fills; H the path's length."""
    return math.inf if load >= 1 else hops * load / (1 - load)


def _first_router_link(paths: Paths, split: Split) -> Split:
    """The source router's own links in a split (those leaving the first router)."""
    hosts = {u for u, _v in split if paths.graph.nodes[u]["kind"] == "host"}
    first = {v for u, v in split if u in hosts}
    return {k: w for k, w in split.items() if k[0] in first}


def routed_rates(
    graph: nx.Graph,
    flows: Sequence[Flow],
    demands: Sequence[float],
    routing: str,
    minimal: str = "dragonfly",
) -> list[float]:
    """Per flow, the rate `routing` ("minimal", "valiant", "ugal", "ugal-local") gets it
    on `graph`'s paths (fluid; max-min fair for the fixed splits); `minimal` as
    `Paths` takes it. "minimal-lossy" and "valiant-lossy": the same routes carrying
    open-loop traffic at its demand over drop-tail links (`lossy_rates`): what
    UDP at a fixed rate gets, less than max-min fairness where a flow crosses
    two full links."""
    paths = Paths(graph, minimal)
    if routing in ("minimal-lossy", "valiant-lossy"):
        kind = routing.split("-")[0]
        subflows = [
            (i, demand * share, links)
            for i, (flow, demand) in enumerate(zip(flows, demands))
            for share, links in paths.paths(flow, kind)
        ]
        return lossy_rates(subflows, paths.capacity, len(flows))
    if routing == "minimal":
        return max_min_rates([paths.minimal_split(f) for f in flows], demands, paths.capacity)
    if routing == "valiant":
        return max_min_rates([paths.valiant_split(f) for f in flows], demands, paths.capacity)
    if routing in ("ugal", "ugal-local"):
        return ugal_rates(paths, flows, demands, local=routing == "ugal-local")
    raise ValueError(
        f"routing {routing!r}: minimal, valiant, ugal, ugal-local, minimal-lossy or valiant-lossy"
    )


def global_links(graph: nx.Graph) -> list[Link]:
    """Every global link, both directions."""
    out = []
    for u, v, d in graph.edges(data=True):
        if d["tier"] == "global":
            out += [(u, v), (v, u)]
    return sorted(out)
