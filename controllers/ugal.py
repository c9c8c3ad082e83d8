"""UGAL on a dragonfly: non-minimal adaptive routing chosen at the source router.

A dragonfly (Kim, Dally, Scott, Abts, "Technology-Driven, Highly-Scalable
Dragonfly Topology", ISCA 2008) joins each pair of groups by few global
links, so a pattern where every host of group i sends to group i+1 loads the
one link between them and minimal routing gets that link's bandwidth shared
by the whole group. Valiant's routing (to a random intermediate group, then
minimally) spreads any pattern over every global link for twice the global
hops; UGAL (Singh, "Load-Balanced Routing in Interconnection Networks", PhD
thesis, Stanford 2005) chooses per packet between the two from queue depth
weighted by path length, q_min x H_min against q_nonmin x H_nonmin, and
UGAL-L does it with the source router's own queues (Kim et al. 4.2).

Minimal here is the literature's: one global hop a path. With
``--dragonfly-routing`` (``Fabric(dragonfly_routing=...)``) the routing app
routes by `controllers/dragonfly_next_hops.py`, whose shortest paths use
local links and the global links into the destination's group only;
routing's plain shortest paths in hops would often cross a third group
already (the builder's consecutive arrangement), Valiant-like.

What this extension installs, at every router with hosts and for every host
of another group, beside routing's own routes:

* a SELECT group in emu's UGAL mode (`emu/proto/ofext.py`: bucket weights say
  the path, 2 x its router hops, + 1 off the minimal path): the minimal next hops routing computed for
  that host, weighted by the hops routing's route takes from the router, and
  the *Valiant candidates*, the router's global links to a third group, each
  weighted 1 + the hops of routing's route from the router it lands on; the switch then
  places each packet on the least queue x H (a bias on the long side, ties
  to the minimal path, `emu/switch/adaptive.py`);
* a flow at ``layout.PRIO_UGAL`` that sends the host's traffic to that group
  only for packets that came *from a host port* of this router (``in_port``).

Everything else (a packet that arrived over a global or local link) matches
routing's own route and goes minimally. So a packet sent the Valiant way
takes exactly one non-minimal hop, the global link out of its source
router, and every hop after it brings it one hop closer to its destination
(shortest-path routing): no second non-minimal choice, no loop. Only the
source router's own global links are Valiant candidates: a detour through
another router of the group would be routed minimally from there on.

One exception to "routing's own route", for routing's plain shortest paths
(the extension without ``--dragonfly-routing``): in the builder's
consecutive arrangement a shortest path from the intermediate router may
lead straight back over the global link the packet came in on (through the
source group: as short as through its own; one-global-hop routes never do).
OpenFlow 1.3 sends nothing back out of ``in_port``, so such a packet
would be lost; the extension installs, at the intermediate router, a flow
for packets in on that link to that host that takes routing's other next
hops (no U-turn, `UgalPlan.no_uturn`; still shortest, so the path length
holds), and a candidate from which the only way on is back is no candidate.
Minimal traffic never arrives on such a link for such a host (it would be
going away from its destination), so these flows only catch Valiant packets.

``valiant`` mode installs the same flows with groups of the Valiant candidates
only, hashed (the baseline of Valiant's bound); a router with no global link
to a third group keeps routing's minimal route.

Groups: which group a router is in comes from ``UgalConfig.groups`` (``emu.net``
passes the graph's ``group`` attributes with ``--dragonfly-groups``), else
from the dpid the dragonfly builder gives (``0x1GGRR``, emu/fabric/gpu.py).

PFC and deadlock. A dragonfly's channel dependencies are cyclic already
under minimal routing (local -> global -> local of the next group -> its
global ...): Kim et al. give minimal routing two virtual channels and
non-minimal routing three, one per hop phase. emu does not model those
VCs: its switch charges a packet's ingress buffer to the priority it
*leaves* with (`emu/switch/buffer.py`), so a class change per phase would
PAUSE the upstream's new priority while the upstream sends the old one,
and the frames would overrun the headroom. UGAL therefore changes no
class: on a lossless class it can close a cycle of PAUSEs, as routing's
minimal dragonfly routes already can, and what breaks one is the PFC
watchdog (on by default) and DCQCN keeping queues under XOFF. The traffic
UGAL is measured with (`emu/traffic/dragonfly.py`) is lossy UDP, where no
PAUSE is sent; `UgalConfig.classes` (``ugal:CLASSES``) keeps UGAL to the
classes named and leaves the others minimal. The issue's brief, not
DESIGN.md, decided this; say so if VCs are ever modelled.

Two layers, as routing's other extensions: ``ugal_plan`` is pure (links,
hosts, routes and groups in; per router the buckets and no-U-turn hops out), and
``UgalManager`` is a ``RoutingExtension`` that turns them into groups and
flows and sends only the difference. ``UgalApp`` is routing with it attached
(``controllers.ugal``, or ``controllers.routing --extensions ugal``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

from controllers import layout, ofmsg
from controllers.dragonfly_next_hops import builder_group
from controllers.routing import RoutingApp, RoutingManager
from controllers.routing_api import Host, Link, Msgs, Route, RoutingView
from emu.proto import ofext

LOG = logging.getLogger(__name__)

__all__ = ["UgalApp", "UgalConfig", "UgalManager", "UgalPlan", "builder_group", "ugal_plan"]

#: A UGAL group's buckets: (port, weight), by port; the weight says the path through
#: the port (`ofext.ugal_weight`: 2 x hops, + 1 off the minimal path).
Buckets = Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class UgalConfig:
    """What the extension installs.

    Attributes:
        mode: "ugal" (minimal and Valiant next hops, chosen per packet by the
            switch) or "valiant" (the Valiant ones only, hashed).
        classes: the priorities UGAL groups place per packet (a mask; the
            others hash over the minimal buckets).
        bias_bytes: the bias of a UGAL group's non-minimal buckets.
        groups: dpid -> dragonfly group; None: `builder_group`.
    """

    mode: str = "ugal"
    classes: int = ofext.CLASSES_ALL
    bias_bytes: int = 0
    groups: Optional[Mapping[int, int]] = None

    def __post_init__(self) -> None:
        if self.mode not in ("ugal", "valiant"):
            raise ValueError(f"mode={self.mode!r}: ugal or valiant")
        if not 0 < self.classes <= ofext.CLASSES_ALL:
            raise ValueError(f"classes={self.classes!r}: a mask of priorities 0..7, not empty")
        if not 0 <= self.bias_bytes < 2**32:
            raise ValueError(f"bias_bytes={self.bias_bytes!r}: 0..2^32-1")

    def group(self, dpid: int) -> Optional[int]:
        """The dragonfly group of router `dpid` (None: not a router of a known group)."""
        if self.groups is not None:
            return self.groups.get(dpid)
        return builder_group(dpid)


@dataclass(frozen=True)
class UgalPlan:
    """What the extension installs, per router.

    Attributes:
        buckets: source router -> host IP of another group -> its UGAL group's
            buckets, (port, weight), by port (only hosts with a Valiant
            candidate there).
        no_uturn: intermediate router -> (in_port, host IP) -> the next hops a
            packet that came the Valiant way takes: routing's, less the port
            it came in on (where routing's include it, a U-turn OpenFlow would
            drop: OF1.3 sends nothing back out of in_port).
    """

    buckets: Mapping[int, Mapping[str, Buckets]]
    no_uturn: Mapping[int, Mapping[Tuple[int, str], FrozenSet[int]]]


def route_hops(
    links: Sequence[Link], routes: Mapping[int, Mapping[str, Route]]
) -> Callable[[int, str], Optional[int]]:
    """(router, host IP) -> the router hops routing's routes take there (None: no route,
    or one that does not arrive within 64 hops). Every next hop of a route is on one
    of routing's shortest paths under its own metric (hops, or a policy's), so
    following the lowest port measures them all."""
    peer = {(s, sp): d for s, sp, d, _dp in links}
    memo: Dict[Tuple[int, str], Optional[int]] = {}

    def hops(dpid: int, ip: str, depth: int = 0) -> Optional[int]:
        key = (dpid, ip)
        if key not in memo:
            route = routes.get(dpid, {}).get(ip)
            if route is None or depth > 64:
                return None
            if route[0] == "local":
                memo[key] = 0
            else:
                nxt = peer.get((dpid, min(route[1])))
                rest = None if nxt is None else hops(nxt, ip, depth + 1)
                memo[key] = None if rest is None else 1 + rest
        return memo[key]

    return hops


def ugal_plan(
    links: Sequence[Link],
    hosts: Mapping[str, Host],
    routes: Mapping[int, Mapping[str, Route]],
    group: Callable[[int], Optional[int]],
    mode: str = "ugal",
) -> UgalPlan:
    """Every router's UGAL groups and the intermediate routers' no-U-turn next hops.

    At a router S with hosts, for a host H of another group: the minimal
    buckets are routing's next hops for H at S, of path length the hops
    routing's route takes from S; a Valiant candidate is a global link of S
    to a router M of a third group, of path length 1 + the hops of routing's
    route from M, provided M can go on without coming straight back
    (routing's next hops at M, less its port to S, are not empty); where
    routing's include that port, M gets a no-U-turn entry. In "valiant" mode
    the buckets are the candidates only.

    Args:
        links: directed inter-switch links (src dpid, src port, dst dpid, dst port).
        hosts: IP -> where the host is attached.
        routes: routing's routes: dpid -> IP -> ("ecmp", ports) or ("local", ...).
        group: dpid -> dragonfly group (None: not a router).
        mode: "ugal" or "valiant".

    Examples:
        >>> links = [(1, 2, 3, 1), (3, 1, 1, 2), (1, 3, 5, 1), (5, 1, 1, 3),
        ...          (3, 2, 5, 2), (5, 2, 3, 2)]
        >>> hosts = {ip: Host(ip, "m", int(ip[5]), 9) for ip in ("10.0.1.1", "10.0.3.1")}
        >>> routes = {1: {"10.0.3.1": ("ecmp", frozenset({2}))},
        ...           3: {"10.0.3.1": ("local", 9, "m")},
        ...           5: {"10.0.3.1": ("ecmp", frozenset({2}))}}
        >>> ugal_plan(links, hosts, routes, lambda d: d).buckets[1]  # weights 2 H (+1)
        {'10.0.3.1': ((2, 2), (3, 5))}
    """
    hops = route_hops(links, routes)
    peer = {(s, sp): (d, dp) for s, sp, d, dp in links}
    buckets: Dict[int, Dict[str, Buckets]] = {}
    no_uturn: Dict[int, Dict[Tuple[int, str], FrozenSet[int]]] = {}
    for src in sorted({h.dpid for h in hosts.values()}):
        src_group = group(src)
        if src_group is None:
            continue
        globals_out = sorted((sp, dst) for (s, sp), dst in peer.items() if s == src)
        for ip, host in sorted(hosts.items()):
            route = routes.get(src, {}).get(ip)
            h_min = hops(src, ip)
            dst_group = group(host.dpid)
            if dst_group in (None, src_group) or h_min is None or route[0] != "ecmp":
                continue
            minimal = {port: ofext.ugal_weight(h_min, True) for port in route[1]}
            valiant: Dict[int, int] = {}
            for port, (mid, back) in globals_out:
                if port in minimal or group(mid) in (None, src_group, dst_group):
                    continue
                onward = _onward(routes.get(mid, {}).get(ip), back)
                h_mid = hops(mid, ip)
                if onward is None or h_mid is None:
                    continue  # from `mid` the only way on is back: no candidate
                valiant[port] = ofext.ugal_weight(1 + h_mid, False)
                if onward[1]:
                    no_uturn.setdefault(mid, {})[(back, ip)] = onward[0]
            if valiant:
                chosen = {**minimal, **valiant} if mode == "ugal" else valiant
                buckets.setdefault(src, {})[ip] = tuple(sorted(chosen.items()))
    return UgalPlan(buckets, no_uturn)


def _onward(route: Optional[Route], back: int) -> Optional[Tuple[FrozenSet[int], bool]]:
    """(routing's next hops less `back`, whether that removed one), or None when
    nothing is left (or routing has no route there)."""
    if route is None:
        return None
    if route[0] == "local":
        return frozenset(), False
    rest = frozenset(route[1]) - {back}
    if not rest:
        return None
    return rest, back in route[1]


@dataclass
class _Installed:
    """What one switch holds of ours: groups by what they hold, flows by (in_port, ip)."""

    groups: Dict[Tuple[str, Buckets], int] = field(default_factory=dict)
    flows: Dict[Tuple[int, str], int] = field(default_factory=dict)
    next_gid: int = layout.UGAL_GROUP_BASE


@dataclass
class UgalManager:
    """Installs ``ugal_plan`` as groups and flows beside routing's (a ``RoutingExtension``)."""

    routing: RoutingManager
    config: UgalConfig = field(default_factory=UgalConfig)
    _installed: Dict[int, _Installed] = field(default_factory=dict)
    plan: UgalPlan = field(default_factory=lambda: UgalPlan({}, {}))

    def __post_init__(self) -> None:
        self.routing.attach(self)

    # -- RoutingExtension

    def switch_enter(self, dpid: int, now: float) -> Msgs:
        """A (re)connected switch: delete our flows (routing deletes every group) and forget."""
        self._installed[dpid] = _Installed()
        return [
            (
                dpid,
                ofmsg.flow_delete_by_cookie(
                    cookie=layout.UGAL_COOKIE,
                    cookie_mask=layout.COOKIE_BAND_MASK,
                    table_id=layout.ROUTING_TABLE,
                ),
            )
        ]

    def before_resync(self, view: RoutingView, now: float) -> None:
        links = tuple(link for link in view.links if (link[0], link[1]) not in view.damped)
        self.plan = ugal_plan(
            links, view.hosts, self.routing.routes(), self.config.group, self.config.mode
        )

    def bucket_weights(
        self, view: RoutingView, dpid: int, ports: Sequence[int], now: float
    ) -> Tuple[int, ...]:
        return (1,) * len(ports)  # routing's own groups: UGAL's are separate

    def switch_flows(
        self,
        view: RoutingView,
        dpid: int,
        routes: Mapping[str, Route],
        flows: Mapping[str, Tuple[Any, ...]],
        now: float,
    ) -> Msgs:
        """Our groups and flows at ``dpid`` after routing's changed: only the difference."""
        have = self._installed.setdefault(dpid, _Installed())
        wanted = self._wanted(view, dpid)
        msgs: Msgs = []
        for content in sorted(set(wanted.values()) - set(have.groups)):
            msgs += self._add_group(dpid, have, content)
        common = dict(
            cookie=layout.UGAL_COOKIE, table_id=layout.ROUTING_TABLE, priority=layout.PRIO_UGAL
        )
        for key in sorted(wanted):
            gid = have.groups[wanted[key]]
            if have.flows.get(key) == gid:
                continue
            build = ofmsg.flow_add if key not in have.flows else ofmsg.flow_modify_strict
            acts = ((ofmsg.ACTION_GROUP, gid),)
            msgs.append((dpid, build(match=_match(key), action_specs=acts, **common)))
            have.flows[key] = gid
        for key in sorted(set(have.flows) - set(wanted)):
            msgs.append((dpid, ofmsg.flow_delete_strict(match=_match(key), **common)))
            del have.flows[key]
        used = set(have.flows.values())
        for content, gid in sorted(have.groups.items()):
            if gid not in used:
                msgs.append((dpid, ofmsg.group_delete(group_id=gid)))
                del have.groups[content]
        return msgs

    def tick(self, now: float) -> Msgs:
        return []

    def status(self) -> Dict[str, Any]:
        return {
            "ugal": {
                "mode": self.config.mode,
                "classes": ofext.classes_of(self.config.classes),
                "bias_bytes": self.config.bias_bytes,
                "routers": len(self.plan.buckets),
                "destinations": sum(len(b) for b in self.plan.buckets.values()),
                "no_uturn": sum(len(u) for u in self.plan.no_uturn.values()),
                "groups": sum(len(i.groups) for i in self._installed.values()),
                "flows": sum(len(i.flows) for i in self._installed.values()),
            }
        }

    # -- internals

    def _wanted(self, view: RoutingView, dpid: int) -> Dict[Tuple[int, str], Tuple[str, Buckets]]:
        """(in_port, host IP) -> (kind, buckets) of the group its packets go to at ``dpid``:
        "choose" (UGAL mode, or Valiant's hashed candidates) for packets from this
        router's host ports, "hash" for a Valiant packet's next hops at an intermediate."""
        out: Dict[Tuple[int, str], Tuple[str, Buckets]] = {}
        host_ports = sorted({h.port for h in view.hosts.values() if h.dpid == dpid})
        for ip, buckets in self.plan.buckets.get(dpid, {}).items():
            for port in host_ports:
                out[(port, ip)] = ("choose", buckets)
        for key, ports in self.plan.no_uturn.get(dpid, {}).items():
            out[key] = ("hash", tuple((port, 1) for port in sorted(ports)))
        return out

    def _add_group(self, dpid: int, have: _Installed, content: Tuple[str, Buckets]) -> Msgs:
        kind, buckets = content
        gid = have.next_gid
        have.next_gid += 1
        have.groups[content] = gid
        ports = [port for port, _weight in buckets]
        ugal = kind == "choose" and self.config.mode == "ugal"
        weights = [weight for _port, weight in buckets] if ugal else None
        msgs: Msgs = [(dpid, ofmsg.select_group(group_id=gid, ports=ports, weights=weights))]
        if ugal:
            mode = ofmsg.set_select_mode(
                group_id=gid, ugal_classes=self.config.classes, bias_bytes=self.config.bias_bytes
            )
            msgs.append((dpid, mode))
        return msgs


def _match(key: Tuple[int, str]) -> Dict[str, Any]:
    in_port, ip = key
    return {"in_port": in_port, "eth_type": ofmsg.ETH_TYPE_IPV4, "ipv4_dst": ip}


def config_from(options: Any) -> UgalConfig:
    """The extension's config from the launcher's options (``--dragonfly-routing SPEC``,
    ``--dragonfly-groups DPID=GROUP,...``; without them: UGAL on every class, groups
    from the builder's dpids).

    Raises:
        ValueError: a spec of minimal (nothing to install: run routing alone) or a
            malformed one.
    """
    spec = ofext.parse_dragonfly_routing(getattr(options, "dragonfly_routing", None) or "ugal")
    if spec.mode == "minimal":
        raise ValueError("dragonfly routing minimal is routing's own: do not attach ugal")
    text = getattr(options, "dragonfly_groups", None)
    groups = ofext.parse_dragonfly_groups(text) if text else None
    return UgalConfig(spec.mode, spec.classes, spec.bias_bytes, groups)


def routing_extension(routing: RoutingManager, options: Any = None) -> UgalManager:
    """UGAL attached to ``routing``, configured by the launcher's options."""
    return UgalManager(routing, config_from(options))


class UgalApp(RoutingApp):
    """os-ken shim: the routing service with ``UgalManager`` always attached."""

    EXTENSIONS = ("ugal",)
