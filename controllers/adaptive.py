"""Congestion-aware routing: Hedera-style elephant placement and SELECT re-weighting on top of routing.

``controllers.adaptive`` runs *instead of* ``controllers.routing`` (it is
routing plus the following), so that a scenario switches adaptive routing on
or off by naming one app or the other, and static ECMP, adaptive routing and
the non-blocking ideal run the same traffic; ``controllers.routing
--extensions adaptive,tagger`` runs it beside Tagger.

What it adds to routing, every ``poll_interval_s``:

* Measurement. At every switch with hosts it installs one *pair monitor* flow
  per (local source host, remote destination host) that does exactly what
  routing's host route does, but counts the pair's bytes. It polls those
  counters (flow stats, its own cookie band) and every port's tx bytes (port
  stats).
* Elephants (Hedera, NSDI 2010). A pair sending above ``elephant_fraction``
  of its NIC rate (10 %) is an elephant. Its *natural* demand -- what it would
  get if only NICs limited it -- comes from Hedera's demand estimator
  (``estimate_demands``), since the measured rate of a flow on a congested path
  says nothing about what it would get elsewhere.
* Global first fit. Each new elephant goes onto the first shortest path whose
  every link still has room for its demand (links reserved by elephants
  already placed); when none has, onto the path whose busiest link is least
  loaded. The path is installed hop by hop as a FAST_FAILOVER group whose
  first bucket is the chosen port and whose other buckets are routing's other
  next hops, so a link failure moves the elephant at once, without a
  controller round trip. An elephant quiet for ``idle_polls`` polls, or whose
  path lost a link, is removed and falls back to ECMP.
* Re-weighting. A SELECT group's bucket weight drops for a port that is hot
  (tx above ``hot_fraction`` of its rate until it cools below
  ``cool_fraction``) or that flapped within routing's flap window without
  being damped yet (damped links are out of rotation in routing already).

All logic is in ``AdaptiveManager`` (pure: events and ``now`` in,
``(dpid, message)`` out).  It is not a routing manager: it has its own state
and is attached to routing's manager as its ``RoutingExtension``
(``controllers/routing_api.py``), so that its pair monitors, elephant hops and
bucket weights go out inside routing's per-switch updates, before routing's
barrier, in the order they always did; it reads routing only through the
``RoutingView`` routing hands it and routing's public methods.
``routing_extension`` builds it for the routing app (``--extensions``);
``AdaptiveApp`` is the routing service with it always on.  Cookie band, priorities and group ids come from
``controllers/layout.py``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from controllers import layout, ofmsg
from controllers.routing import RoutingApp, RoutingManager
from controllers.routing_api import Host, Msgs, PortKey, Route, RoutingView

Pair = Tuple[str, str]  # (source host IP, destination host IP)
Hop = Tuple[int, int]  # (dpid, output port)

WEIGHT_NORMAL = 4
WEIGHT_HOT = 2
WEIGHT_FLAPPING = 1
# Every flow adaptive installs: in its cookie band (switch_enter deletes by it), routing's table.
_FLOW_TABLE = dict(cookie=layout.ADAPTIVE_COOKIE, table_id=layout.ROUTING_TABLE)


@dataclass(frozen=True)
class AdaptiveConfig:
    """Knobs of the adaptive manager (defaults: Hedera; see DESIGN.md's table).

    Attributes:
        poll_interval_s: statistics period and scheduling period. Hedera runs
            every 5 s of hardware time; emu's flows last seconds, so the default
            is 1 s of real time and scenarios set it.
        elephant_fraction: a pair above this fraction of its NIC rate is an elephant.
        idle_polls: an elephant below the threshold for this many polls is unplaced.
        hot_fraction, cool_fraction: a port is hot above the first and cools
            below the second (hysteresis keeps groups from being rewritten each poll).
        reweight: re-weight SELECT groups at all.
        pin_reverse: send the reverse pair of every placed elephant (its ACKs,
            a mouse) back along the elephant's own path, unless that pair is an
            elephant itself. Hashed, the ACK streams piled onto some links
            that already carry an elephant (every fabric link does under a
            permutation like stride 4) and left others empty: a link with its
            elephant and two ACK streams is oversubscribed, and its queue
            delays and drops both. Reversed, the placed paths are as
            link-disjoint as the elephants' own.
    """

    poll_interval_s: float = 1.0
    elephant_fraction: float = 0.1
    idle_polls: int = 2
    hot_fraction: float = 0.9
    cool_fraction: float = 0.6
    reweight: bool = True
    pin_reverse: bool = True

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s={self.poll_interval_s!r}: must be > 0")
        if not 0 < self.elephant_fraction < 1:
            raise ValueError(f"elephant_fraction={self.elephant_fraction!r}: must be in (0, 1)")
        if not 0 < self.cool_fraction < self.hot_fraction:
            raise ValueError("need 0 < cool_fraction < hot_fraction")
        if self.idle_polls < 1:
            raise ValueError(f"idle_polls={self.idle_polls!r}: must be >= 1")


@dataclass
class Placement:
    """An elephant on its path: the hops that carry it (the last switch routes it locally)."""

    hops: Tuple[Hop, ...]
    links: Tuple[Tuple[int, int], ...]  # (dpid, dpid) per hop
    demand: float
    placed_s: float
    quiet_polls: int = 0


@dataclass
class _Counters:
    """Last byte counter readings, to turn counters into rates."""

    readings: Dict[Any, Tuple[int, float]] = field(default_factory=dict)
    rates_bps: Dict[Any, float] = field(default_factory=dict)

    def update(self, key: Any, value: int, now: float) -> None:
        old = self.readings.get(key)
        self.readings[key] = (value, now)
        if old is None or now <= old[1]:
            return
        # A counter that went backwards was reinstalled: count from zero.
        delta = value - old[0] if value >= old[0] else value
        self.rates_bps[key] = 8.0 * delta / (now - old[1])


def estimate_demands(pairs: Iterable[Pair], max_rounds: int = 100) -> Dict[Pair, float]:
    """Hedera's demand estimator: each pair's max-min fair share limited only by NICs.

    Demands are fractions of a NIC's rate. Senders split their NIC equally
    among their unconverged flows; receivers that are oversubscribed cap their
    flows at an equal share of what the smaller senders leave (Al-Fares et
    al., NSDI 2010, Fig. 7), until nothing changes.
    """
    pairs = sorted(set(pairs))
    demand = {f: 0.0 for f in pairs}
    converged = {f: False for f in pairs}
    by_src: Dict[str, List[Pair]] = collections.defaultdict(list)
    by_dst: Dict[str, List[Pair]] = collections.defaultdict(list)
    for f in pairs:
        by_src[f[0]].append(f)
        by_dst[f[1]].append(f)
    for _ in range(max_rounds):
        before = dict(demand), dict(converged)
        for flows in by_src.values():
            done = sum(demand[f] for f in flows if converged[f])
            open_ = [f for f in flows if not converged[f]]
            for f in open_:
                demand[f] = max(0.0, 1.0 - done) / len(open_)
        for flows in by_dst.values():
            if sum(demand[f] for f in flows) <= 1.0 + 1e-12:
                continue
            limited = set(flows)
            small = 0.0
            share = 1.0 / len(flows)
            while True:
                shrink = {f for f in limited if demand[f] < share}
                if not shrink:
                    break
                small += sum(demand[f] for f in shrink)
                limited -= shrink
                if not limited:
                    break
                share = (1.0 - small) / len(limited)
            for f in limited:
                demand[f] = share
                converged[f] = True
        if (demand, converged) == before:
            break
    return demand


class AdaptiveManager:
    """Elephant placement and re-weighting beside routing; see the module docstring.

    It keeps its own state (rates, placements, its flows and groups per
    switch) and sees routing only through public methods and ``RoutingView``:
    it attaches itself to ``routing`` as its ``RoutingExtension``, so that
    routing calls it at every switch connect and route update, and it calls
    ``routing.view``, ``routes``, ``installed_flows``, ``converged`` and
    ``resync``.  Every method takes ``now``; none reads a clock.

    Args:
        routing: the routing manager to extend (it calls this one back).
        config: adaptive knobs.

    Examples:
        >>> routing = RoutingManager(RoutingConfig(expect_switches=20))  # controllers.routing
        >>> adaptive = AdaptiveManager(routing, AdaptiveConfig(poll_interval_s=0.5))
        >>> msgs = routing.tick(now=0.0)  # routing's work, then adaptive's
    """

    def __init__(self, routing: RoutingManager, config: Optional[AdaptiveConfig] = None) -> None:
        self.routing = routing
        self.adaptive = config or AdaptiveConfig()
        self.placements: Dict[Pair, Placement] = {}
        self._pair_bytes = _Counters()  # key (pair, priority)
        self._port_bytes = _Counters()  # key (dpid, port)
        self._hot: Set[PortKey] = set()
        self._flapping: Set[PortKey] = set()
        self._monitors: Dict[int, Dict[Pair, Tuple[ofmsg.Action, ...]]] = {}
        self._hop_groups: Dict[int, Dict[Pair, Tuple[int, Tuple[int, ...]]]] = {}
        self._free_gids: Dict[int, List[int]] = {}
        self._next_gid: Dict[int, int] = {}
        # Hops of every pair on a chosen path (pinned_paths), kept with the
        # placements: every switch's flow sync reads it.
        self._pinned: Dict[Pair, Tuple[Hop, ...]] = {}
        self._next_poll_s: Optional[float] = None
        # Hedera's scheduler starts once the fabric has been built (routing converged
        # once); after that it keeps working through failures, when placement matters
        # most (a link down leaves routing unconverged until the cable is back).
        self._started = False
        self.placed_total = 0
        self.unplaced_total = 0
        routing.attach(self)

    # ------------------------------------------------------------------ measurement in

    def flow_stats(
        self, dpid: int, stats: Iterable[Tuple[int, Mapping[str, Any], int]], now: float
    ) -> Msgs:
        """Flow stats of our cookie band at ``dpid``: (priority, match fields, byte_count)."""
        for priority, match, byte_count in stats:
            src, dst = match.get("ipv4_src"), match.get("ipv4_dst")
            if src is None or dst is None:
                continue
            host = self.routing.host(src)
            if host is None or host.dpid != dpid:
                continue  # only the source's switch counts a pair once
            self._pair_bytes.update(((src, dst), priority), byte_count, now)
        return []

    def port_stats(self, dpid: int, stats: Iterable[Tuple[int, int]], now: float) -> Msgs:
        """Port stats: (port_no, tx_bytes) per port of ``dpid``."""
        for port_no, tx_bytes in stats:
            self._port_bytes.update((dpid, port_no), tx_bytes, now)
        return []

    def pair_rates_bps(self) -> Dict[Pair, float]:
        rates: Dict[Pair, float] = collections.defaultdict(float)
        for (pair, _prio), bps in self._pair_bytes.rates_bps.items():
            rates[pair] += bps
        return dict(rates)

    # ------------------------------------------------------------------ periodic work

    def tick(self, now: float) -> Msgs:
        """Scheduling and a statistics round every poll interval, from when routing first
        converged on.

        Routing calls it after its own periodic work (``RoutingManager.tick``).
        """
        if self._next_poll_s is None:
            self._next_poll_s = now + self.adaptive.poll_interval_s
        if not self._started:
            self._started = self.routing.converged()
        if now < self._next_poll_s or not self._started:
            return []
        self._next_poll_s = now + self.adaptive.poll_interval_s
        msgs = self.schedule(now)
        for dpid in self.routing.switches:
            msgs.append((dpid, ofmsg.port_stats_request()))
            if self._monitors.get(dpid):
                msgs.append(
                    (
                        dpid,
                        ofmsg.flow_stats_request(
                            cookie=layout.ADAPTIVE_COOKIE,
                            cookie_mask=layout.COOKIE_BAND_MASK,
                            table_id=layout.ROUTING_TABLE,
                        ),
                    )
                )
        return msgs

    def schedule(self, now: float) -> Msgs:
        """One Hedera round on the latest rates: age, estimate, place; then re-weight."""
        view = self.routing.view(now)
        rates = self.pair_rates_bps()
        elephants = {
            pair
            for pair, bps in rates.items()
            if self._host_rate(view, pair[0])
            and bps > self.adaptive.elephant_fraction * self._host_rate(view, pair[0])
        }
        pinned_before = self._pinned
        changed: Set[int] = set()
        for pair in list(self.placements):
            pl = self.placements[pair]
            pl.quiet_polls = 0 if pair in elephants else pl.quiet_polls + 1
            if pl.quiet_polls >= self.adaptive.idle_polls:
                changed |= self._unplace(pair, now, "idle")
        demands = estimate_demands(elephants | set(self.placements))
        reserved: Dict[Tuple[int, int], float] = collections.defaultdict(float)
        for pair, pl in self.placements.items():
            pl.demand = demands.get(pair, pl.demand)
            for link in pl.links:
                reserved[link] += pl.demand
        new = sorted(
            (p for p in elephants if p not in self.placements), key=lambda p: (-demands[p], p)
        )
        # Routing's routes, computed once for the round: the paths adaptive may take.
        routes = self.routing.routes() if new or self.placements else {}
        for pair in new:
            path = self._first_fit(view, routes, pair, demands[pair], reserved)
            if path is None:
                continue
            hops, links = path
            self.placements[pair] = Placement(hops, links, demands[pair], now)
            self.placed_total += 1
            for link in links:
                reserved[link] += demands[pair]
            changed |= {dpid for dpid, _ in hops}
            self.routing.record_event(
                now,
                "elephant_placed",
                src=pair[0],
                dst=pair[1],
                demand=round(demands[pair], 3),
                path=[f"{d:x}:{p}" for d, p in hops],
            )
        # Reverse pairs pinned, moved or released: their hops' switches too.
        pinned = self._pinned = self.pinned_paths(view, routes)
        for pair in set(pinned) | set(pinned_before):
            if pinned.get(pair) != pinned_before.get(pair):
                changed |= {dpid for dpid, _ in pinned.get(pair, ())}
                changed |= {dpid for dpid, _ in pinned_before.get(pair, ())}
        msgs: Msgs = []
        if self.adaptive.reweight and self._update_hot(view, now):
            msgs += self.routing.resync(now)
        else:
            if changed and not routes:
                routes = self.routing.routes()
            for dpid in sorted(changed & set(view.switches)):
                msgs += self.switch_flows(
                    view, dpid, routes.get(dpid, {}), self.routing.installed_flows(dpid), now
                )
        return msgs

    # ------------------------------------------------------------------ placement

    def _host_rate(self, view: RoutingView, ip: str) -> float:
        host = view.hosts.get(ip)
        if host is None or host.dpid not in view.switches:
            return 0.0
        return float(view.speed_bps(host.dpid, host.port))

    def _capacity(self, view: RoutingView, link: Tuple[int, int], nic_bps: float) -> float:
        """A link's capacity in NIC units (1.0 when the switch reports no speed)."""
        port = view.port_towards(*link)
        speed = view.speed_bps(link[0], port) if port is not None else 0
        return speed / nic_bps if speed and nic_bps else 1.0

    @staticmethod
    def _allowed(routes: Mapping[int, Mapping[str, Any]], dpid: int, ip: str) -> FrozenSet[int]:
        """The next-hop ports routing's route to ``ip`` allows at ``dpid`` (none: it is local)."""
        route = routes.get(dpid, {}).get(ip)
        return route[1] if route is not None and route[0] == "ecmp" else frozenset()

    def _paths(
        self, view: RoutingView, routes: Mapping[int, Mapping[str, Any]], src_dpid: int, dst: Host
    ) -> List[Tuple[Tuple[Hop, ...], Tuple]]:
        """Every path to ``dst`` that routing's routes allow from ``src_dpid``, in node order.

        Adaptive routing chooses among the next hops routing gives each switch (every
        shortest one by default; a ``--next-hops`` policy's otherwise), as a GPU
        fabric's adaptive routing picks within its ECMP set: so a policy, and what
        another extension derived from the routes (Tagger's rules), hold for its paths.
        """
        peer = {
            (s, sp): d
            for s, sp, d, _dp in view.links
            if s in view.switches and d in view.switches and (s, sp) not in view.damped
        }
        found: List[Tuple[Tuple[int, ...], Tuple[Hop, ...]]] = []

        def walk(nodes: List[int], hops: List[Hop]) -> None:
            here = nodes[-1]
            if here == dst.dpid:
                found.append((tuple(nodes), tuple(hops)))
                return
            for port in sorted(self._allowed(routes, here, dst.ip)):
                nxt = peer.get((here, port))
                if nxt is not None and nxt not in nodes:
                    walk(nodes + [nxt], hops + [(here, port)])

        walk([src_dpid], [])
        found.sort(key=lambda p: p[0])
        return [(hops, tuple(zip(nodes, nodes[1:]))) for nodes, hops in found]

    def _first_fit(
        self,
        view: RoutingView,
        routes: Mapping[int, Mapping[str, Any]],
        pair: Pair,
        demand: float,
        reserved: Mapping[Tuple[int, int], float],
    ) -> Optional[Tuple]:
        src, dst = view.hosts.get(pair[0]), view.hosts.get(pair[1])
        if src is None or dst is None or src.dpid == dst.dpid:
            return None
        paths = self._paths(view, routes, src.dpid, dst)
        if not paths:
            return None
        nic = self._host_rate(view, pair[0])
        for path in paths:
            if all(
                reserved.get(link, 0.0) + demand <= self._capacity(view, link, nic) + 1e-9
                for link in path[1]
            ):
                return path
        # Nothing has room: the path whose busiest link is least loaded.
        return min(
            paths,
            key=lambda p: max(
                reserved.get(link, 0.0) / self._capacity(view, link, nic) for link in p[1]
            ),
        )

    def _unplace(self, pair: Pair, now: float, why: str) -> Set[int]:
        pl = self.placements.pop(pair)
        self.unplaced_total += 1
        self.routing.record_event(now, "elephant_unplaced", src=pair[0], dst=pair[1], why=why)
        return {dpid for dpid, _ in pl.hops}

    def pinned_paths(
        self, view: RoutingView, routes: Mapping[int, Mapping[str, Any]]
    ) -> Dict[Pair, Tuple[Hop, ...]]:
        """The hops of every pair on a chosen path: elephants, and their reverse pairs
        where `routes` (routing's) allow the reverse path (a one-way policy does not)."""
        paths = {pair: pl.hops for pair, pl in self.placements.items()}
        if not self.adaptive.pin_reverse:
            return paths
        for (src, dst), pl in self.placements.items():
            if (dst, src) in self.placements:
                continue
            hops = tuple((b, view.port_towards(b, a)) for a, b in reversed(pl.links))
            if all(port is not None and port in self._allowed(routes, b, src) for b, port in hops):
                paths[(dst, src)] = hops
        return paths

    # ------------------------------------------------------------------ RoutingExtension

    def before_resync(self, view: RoutingView, now: float) -> None:
        """Routing recomputes: a placement whose path lost a link goes back to ECMP first.

        So the flows routing then asks for (``switch_flows``) are already right.
        """
        routes = self.routing.routes() if self.placements else {}
        for pair, pl in list(self.placements.items()):
            if any(view.port_towards(a, b) != port for (a, port), (_, b) in zip(pl.hops, pl.links)):
                self._unplace(pair, now, "path_lost")
            elif any(port not in self._allowed(routes, a, pair[1]) for a, port in pl.hops):
                self._unplace(pair, now, "route_changed")  # routing no longer allows a hop
        self._pinned = self.pinned_paths(view, routes)  # links changed: reverse ports too

    def _update_hot(self, view: RoutingView, now: float) -> bool:
        """Update hot and flapping ports; True when either set changed (weights change)."""
        flapping = {key for key in view.flaps if self._recently_flapped(view, key, now)}
        flapping_changed = flapping != self._flapping
        self._flapping = flapping
        hot = set(self._hot)
        for key, bps in self._port_bytes.rates_bps.items():
            if not view.is_fabric_port(*key):
                continue  # only ports in SELECT groups have a weight to change
            speed = view.speed_bps(*key) if key[0] in view.switches else 0
            if not speed:
                continue
            if bps > self.adaptive.hot_fraction * speed:
                hot.add(key)
            elif bps < self.adaptive.cool_fraction * speed:
                hot.discard(key)
        if hot == self._hot:
            return flapping_changed
        self._hot = hot
        return True

    def _recently_flapped(self, view: RoutingView, key: PortKey, now: float) -> bool:
        window_s = self.routing.config.flap_window_s
        return any(now - t <= window_s for t in view.flaps.get(key, ()))

    def bucket_weights(
        self, view: RoutingView, dpid: int, ports: Sequence[int], now: float
    ) -> Tuple[int, ...]:
        """Lower weights for ports that flapped recently or run hot (RoutingExtension)."""
        if not self.adaptive.reweight:
            return (1,) * len(ports)
        weights = []
        for port in ports:
            if self._recently_flapped(view, (dpid, port), now):
                weights.append(WEIGHT_FLAPPING)
            elif (dpid, port) in self._hot:
                weights.append(WEIGHT_HOT)
            else:
                weights.append(WEIGHT_NORMAL)
        return tuple(weights)

    def switch_enter(self, dpid: int, now: float) -> Msgs:
        """A switch (re)connected: delete our cookie band and forget what we installed there."""
        self._monitors[dpid] = {}
        self._hop_groups[dpid] = {}
        self._free_gids[dpid] = []
        self._next_gid[dpid] = layout.ADAPTIVE_GROUP_BASE
        return [
            (
                dpid,
                ofmsg.flow_delete_by_cookie(
                    cookie=layout.ADAPTIVE_COOKIE, cookie_mask=layout.COOKIE_BAND_MASK
                ),
            )
        ]

    def switch_flows(
        self,
        view: RoutingView,
        dpid: int,
        routes: Mapping[str, Route],
        flows: Mapping[str, Tuple[ofmsg.Action, ...]],
        now: float,
    ) -> Msgs:
        """Pair monitors and elephant hops at ``dpid``, after routing's ``flows`` there changed."""
        if dpid not in view.switches:
            return []
        return self._monitor_msgs(view, dpid, flows) + self._elephant_msgs(dpid, routes)

    def _monitor_msgs(
        self, view: RoutingView, dpid: int, flows: Mapping[str, Tuple[ofmsg.Action, ...]]
    ) -> Msgs:
        """Add, modify or delete pair monitors at ``dpid`` so they follow routing's ``flows``."""
        # Pair monitors: routing's action for the destination, counted per source.
        wanted: Dict[Pair, Tuple[ofmsg.Action, ...]] = {}
        for src in view.hosts.values():
            if src.dpid != dpid:
                continue
            for dst_ip, acts in flows.items():
                if dst_ip != src.ip:
                    wanted[(src.ip, dst_ip)] = acts
        msgs: Msgs = []
        have = self._monitors.setdefault(dpid, {})
        for pair in sorted(wanted):
            if have.get(pair) == wanted[pair]:
                continue
            build = ofmsg.flow_add if pair not in have else ofmsg.flow_modify_strict
            msgs.append(
                (
                    dpid,
                    build(
                        priority=layout.PRIO_PAIR_MONITOR,
                        match=_pair_match(pair),
                        action_specs=wanted[pair],
                        **_FLOW_TABLE,
                    ),
                )
            )
            have[pair] = wanted[pair]
        for pair in sorted(set(have) - set(wanted)):
            msgs.append(
                (
                    dpid,
                    ofmsg.flow_delete_strict(
                        priority=layout.PRIO_PAIR_MONITOR, match=_pair_match(pair), **_FLOW_TABLE
                    ),
                )
            )
            del have[pair]
        return msgs

    def _elephant_msgs(self, dpid: int, routes: Mapping[str, Route]) -> Msgs:
        """Add, modify or delete elephant hop groups and flows at ``dpid`` for the pinned paths."""
        # Elephant hops: FAST_FAILOVER(chosen port, then routing's other next hops).
        hops: Dict[Pair, Tuple[int, ...]] = {}
        for pair, path in self._pinned.items():
            for hop_dpid, port in path:
                route = routes.get(pair[1])
                if hop_dpid != dpid or route is None or route[0] != "ecmp":
                    continue
                hops[pair] = (port,) + tuple(sorted(set(route[1]) - {port}))
        msgs: Msgs = []
        groups = self._hop_groups.setdefault(dpid, {})
        for pair in sorted(hops):
            old = groups.get(pair)
            if old is not None and old[1] == hops[pair]:
                continue
            gid = old[0] if old is not None else self._alloc_gid(dpid)
            msgs.append(
                (
                    dpid,
                    ofmsg.fast_failover_group(
                        group_id=gid, ports=hops[pair], modify=old is not None
                    ),
                )
            )
            if old is None:
                msgs.append(
                    (
                        dpid,
                        ofmsg.flow_add(
                            priority=layout.PRIO_ELEPHANT,
                            match=_pair_match(pair),
                            action_specs=((ofmsg.ACTION_GROUP, gid),),
                            **_FLOW_TABLE,
                        ),
                    )
                )
            groups[pair] = (gid, hops[pair])
        for pair in sorted(set(groups) - set(hops)):
            gid, _ = groups.pop(pair)
            msgs.append(
                (
                    dpid,
                    ofmsg.flow_delete_strict(
                        priority=layout.PRIO_ELEPHANT, match=_pair_match(pair), **_FLOW_TABLE
                    ),
                )
            )
            msgs.append((dpid, ofmsg.group_delete(group_id=gid)))
            self._free_gids[dpid].append(gid)
        return msgs

    def _alloc_gid(self, dpid: int) -> int:
        free = self._free_gids.setdefault(dpid, [])
        if free:
            return free.pop()
        gid = self._next_gid.get(dpid, layout.ADAPTIVE_GROUP_BASE)
        self._next_gid[dpid] = gid + 1
        return gid

    def status(self) -> Dict[str, Any]:
        """The ``adaptive`` key of routing's status file."""
        return {
            "adaptive": {
                "placements": {
                    f"{s}->{d}": {
                        "path": [f"{dp:x}:{p}" for dp, p in pl.hops],
                        "demand": round(pl.demand, 3),
                    }
                    for (s, d), pl in sorted(self.placements.items())
                },
                "reverse_pinned": sorted(
                    f"{s}->{d}" for s, d in self._pinned if (s, d) not in self.placements
                ),
                "placed_total": self.placed_total,
                "unplaced_total": self.unplaced_total,
                "hot_ports": sorted(f"{d:x}:{p}" for d, p in self._hot),
            }
        }


def _pair_match(pair: Pair) -> Dict[str, Any]:
    return {"eth_type": ofmsg.ETH_TYPE_IPV4, "ipv4_src": pair[0], "ipv4_dst": pair[1]}


# ---------------------------------------------------------------------------- os-ken shim


def routing_extension(routing: RoutingManager, options: Any) -> AdaptiveManager:
    """The adaptive manager attached to ``routing``, with the launcher's options
    (``controllers.launch.AppOptions``: poll interval, elephant fraction)."""
    return AdaptiveManager(
        routing,
        AdaptiveConfig(
            poll_interval_s=options.poll_interval_s, elephant_fraction=options.elephant_fraction
        ),
    )


class AdaptiveApp(RoutingApp):
    """os-ken shim: the routing service with ``AdaptiveManager`` always attached (the
    routing app hands it the flow and port statistics replies)."""

    EXTENSIONS = ("adaptive",)
