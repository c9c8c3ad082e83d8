"""Tagger: PFC deadlock prevention by tagging packets that bounce (Hu et al., CoNEXT 2017).

A cyclic buffer dependency needs a cycle of lossless queues, each waiting
for the next. Tagger breaks every such cycle without changing the routes:
each packet carries a tag (its DSCP), every switch keeps one lossless
queue per tag, and a packet whose path goes against an up-down order (it
went *down* and now goes *up*: it *bounces*) gets the next tag and so the
next lossless queue; after the last lossless queue it goes to the lossy
class. Within one tag every path segment is up*/down*, and up*/down*
segments form no cyclic dependency (Autonet's theorem, Schroeder et al.,
IEEE JSAC 1991); a packet only ever moves to a higher tag, so the tags
cannot close a cycle between them either.

The up-down order: Tagger's paper takes the tiers of a Clos; a fabric
without tiers (a ring, where every switch has hosts) gets Autonet's:
breadth-first levels from the switch with the smallest dpid, ties broken by
dpid; a hop is *up* when it goes to a smaller (level, dpid). A switch's tier
is its distance from the nearest switch with hosts (a fat-tree's edge 0,
aggregation 1, core 2), and its level the tier's negative, so that up is
towards the core and a Clos's shortest paths never bounce. A host is below
every switch.

Two layers, as routing:

* ``tag_rules`` is pure: topology (directed links), hosts and routing's
  routes in, the rules out: per switch, ``(in_port, tag, ipv4_dst) ->
  new tag``, for every hop of every host-to-host path where the packet's
  tag is not the default one or changes. The paper computes its rules from
  the set of expected lossless paths the same way.
* ``TaggerManager`` is a ``RoutingExtension``: after every resync it turns
  the rules into flows (table 0, ``layout.PRIO_TAGGER``, cookie
  ``layout.TAGGER_COOKIE``) that match in_port, DSCP and destination, set
  the new tag's DSCP and queue, and then do routing's own actions for that
  destination; only the difference is sent. ``TaggerApp`` is routing with
  it attached (run ``controllers.tagger`` instead of ``controllers.routing``,
  or ``controllers.routing --extensions tagger`` beside other extensions).

Beside adaptive routing (``--extensions adaptive,tagger``): the rules are
computed over every next hop routing's routes allow, and adaptive pins an
elephant only onto those, so every path a packet can take is covered. Where a
packet carries a tag above the first or is re-tagged, Tagger's flow (a higher
priority than an elephant's) forwards it by routing's next hops: the
lossless queues stay free of cycles, and the elephant leaves its pinned path
for the rest of that hop only.

Tags: tag 1 is RoCE's DSCP 26 on priority 3 (DESIGN.md conventions), tag
``n`` is DSCP ``25 + n`` on the n-th of ``TaggerConfig.lossless_queues``;
past the last lossless queue the packet gets DSCP 0 and queue 0 (lossy).
The switches must run PFC on every queue of ``lossless_queues``.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import networkx as nx

from controllers import layout, ofmsg
from controllers.routing import RoutingApp, RoutingManager
from controllers.routing_api import Host, Link, Msgs, Route, RoutingView

LOG = logging.getLogger(__name__)

__all__ = ["TagRule", "TaggerApp", "TaggerConfig", "TaggerManager", "tag_rules", "updown_rank"]

#: Tag 1: RoCE's own DSCP (DESIGN.md conventions: DSCP 26 -> priority 3).
FIRST_TAG_DSCP = 26
LOSSY_DSCP = 0
LOSSY_QUEUE = 0


@dataclass(frozen=True)
class TaggerConfig:
    """Which queues the tags use.

    Attributes:
        lossless_queues: the lossless priority of tag 1, 2, ... (PFC must be on
            for each); the tag after the last is lossy. Tagger's paper needs
            two for a Clos with one bounce; so does a ring.
    """

    lossless_queues: Tuple[int, ...] = (3, 4)

    def __post_init__(self) -> None:
        if not self.lossless_queues or len(set(self.lossless_queues)) != len(self.lossless_queues):
            raise ValueError(
                f"lossless_queues={self.lossless_queues!r}: one or more distinct priorities"
            )
        for q in self.lossless_queues:
            if not 1 <= q <= 7:
                raise ValueError(f"lossless_queues: {q!r} is not a lossless priority 1..7")

    @property
    def lossy_tag(self) -> int:
        return len(self.lossless_queues) + 1

    def dscp(self, tag: int) -> int:
        """The DSCP that carries `tag`."""
        return LOSSY_DSCP if tag >= self.lossy_tag else FIRST_TAG_DSCP + tag - 1

    def queue(self, tag: int) -> int:
        """The egress priority queue of `tag`."""
        return LOSSY_QUEUE if tag >= self.lossy_tag else self.lossless_queues[tag - 1]


@dataclass(frozen=True, order=True)
class TagRule:
    """At switch `dpid`, a packet in on `in_port` with `tag` for `ipv4_dst` leaves with `new_tag`."""

    dpid: int
    in_port: int
    tag: int
    ipv4_dst: str
    new_tag: int


def updown_rank(
    switches: Iterable[int], links: Iterable[Link], edge: Iterable[int] = ()
) -> Dict[int, Tuple[int, int]]:
    """The up-down order: (level, dpid) per switch; a hop to a smaller one goes up.

    With `edge` (the switches that have hosts) a proper subset of a component's
    switches, the fabric has tiers: a switch's level is minus its distance from
    the nearest edge switch (Tagger's Clos order). Otherwise Autonet's:
    breadth-first level from the smallest dpid. A switch unreachable from that
    root is ranked after every reachable one (its own component's levels, from
    its smallest dpid).

    Examples:
        >>> ring = [(1, 1, 2, 1), (2, 2, 3, 1), (3, 2, 4, 1), (4, 2, 1, 2)]
        >>> updown_rank([1, 2, 3, 4], ring)
        {1: (0, 1), 2: (1, 2), 4: (1, 4), 3: (2, 3)}
    """
    g = nx.Graph()
    g.add_nodes_from(switches)
    g.add_edges_from((s, d) for s, _sp, d, _dp in links)
    edge = set(edge)
    rank: Dict[int, Tuple[int, int]] = {}
    base = 0
    for comp in sorted(nx.connected_components(g), key=min):
        sources = edge & comp
        if sources and sources != comp:
            tiers = nx.multi_source_dijkstra_path_length(g.subgraph(comp), sources)
            top = max(tiers.values())
            levels = {node: top - tier for node, tier in tiers.items()}
        else:
            levels = nx.single_source_shortest_path_length(g, min(comp))
        for node, level in sorted(levels.items(), key=lambda kv: (kv[1], kv[0])):
            rank[node] = (base + level, node)
        base += max(levels.values()) + 1
    return rank


def tag_rules(
    links: Sequence[Link],
    hosts: Mapping[str, Host],
    routes: Mapping[int, Mapping[str, Route]],
    config: TaggerConfig = TaggerConfig(),
) -> List[TagRule]:
    """Tagger's rules for routing's routes: every hop where a packet's tag is set or changes.

    Follows every host-to-host path that `routes` allow (every next hop of
    an ECMP set), starting with tag 1 at the sender's switch, and bumps the
    tag where the path goes down then up in `updown_rank`'s order. Where the
    next hops of one ECMP set disagree, the larger new tag is taken (a packet
    may always move to a higher tag: that adds no cycle). Hops that keep tag
    1 need no rule (routing's flow does it); a lossy packet needs none after
    the hop that made it lossy (DSCP 0 is lossy by default).

    Args:
        links: directed inter-switch links (src dpid, src port, dst dpid, dst port).
        hosts: IP -> where the host is attached.
        routes: dpid -> host IP -> ("ecmp", ports) or ("local", port, mac).
        config: the queues of the tags.

    Returns:
        The rules, sorted.
    """
    peer = {(s, sp): (d, dp) for s, sp, d, dp in links}
    switches = set(routes) | {s for s, *_ in links} | {d for _s, _sp, d, _dp in links}
    rank = updown_rank(switches, links, {h.dpid for h in hosts.values()})
    rules: Dict[Tuple[int, int, int, str], int] = {}
    for dst in sorted(hosts):
        for src in sorted(hosts):
            if src == dst or hosts[src].dpid == hosts[dst].dpid:
                continue
            _follow(hosts[src], dst, routes, peer, rank, config, rules)
    return sorted(
        TagRule(dpid, in_port, tag, ip, new)
        for (dpid, in_port, tag, ip), new in rules.items()
        if not tag == new == 1 and tag < config.lossy_tag
    )


def _follow(
    src: Host,
    dst_ip: str,
    routes: Mapping[int, Mapping[str, Route]],
    peer: Mapping[Tuple[int, int], Tuple[int, int]],
    rank: Mapping[int, Tuple[int, int]],
    config: TaggerConfig,
    rules: Dict[Tuple[int, int, int, str], int],
) -> None:
    """Walk every path from `src` to `dst_ip`, recording (dpid, in_port, tag, dst) -> new tag."""
    # State: (switch, in_port, arrived going down, tag). From a host a packet goes up.
    todo = collections.deque([(src.dpid, src.port, False, 1)])
    seen = set()
    while todo:
        state = todo.popleft()
        if state in seen:
            continue
        seen.add(state)
        dpid, in_port, went_down, tag = state
        route = routes.get(dpid, {}).get(dst_ip)
        if route is None:
            continue  # routing has no route here yet: nothing to tag
        if route[0] == "local":
            rules[(dpid, in_port, tag, dst_ip)] = tag
            continue
        hops = []
        for port in sorted(route[1]):
            nxt = peer.get((dpid, port))
            if nxt is None:
                continue
            up = rank[nxt[0]] < rank[dpid]
            bounce = went_down and up
            new = min(tag + 1, config.lossy_tag) if bounce else tag
            hops.append((nxt, not up, new))
        if not hops:
            continue
        # The state fixes the hops (whether it arrived going down follows from
        # in_port), so a key gets one new tag; `seen` ends a looping route.
        new_tag = max(new for _, _, new in hops)
        rules[(dpid, in_port, tag, dst_ip)] = new_tag
        for (nxt_dpid, nxt_port), down, _new in hops:
            todo.append((nxt_dpid, nxt_port, down, new_tag))


@dataclass
class TaggerManager:
    """Installs ``tag_rules`` as flows beside routing's, in routing's updates (a ``RoutingExtension``)."""

    routing: RoutingManager
    config: TaggerConfig = field(default_factory=TaggerConfig)
    _rules: Dict[int, List[TagRule]] = field(default_factory=dict)
    # Installed: dpid -> (in_port, tag, ip) -> actions
    _installed: Dict[int, Dict[Tuple[int, int, str], Tuple[Any, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.routing.attach(self)

    # -- RoutingExtension

    def switch_enter(self, dpid: int, now: float) -> Msgs:
        # A (re)connected switch starts without our flows: forget what we sent it.
        self._installed.pop(dpid, None)
        return [
            (
                dpid,
                ofmsg.flow_delete_by_cookie(
                    cookie=layout.TAGGER_COOKIE,
                    cookie_mask=0xFFFF_FFFF_FFFF_FFFF,
                    table_id=layout.ROUTING_TABLE,
                ),
            )
        ]

    def before_resync(self, view: RoutingView, now: float) -> None:
        by_switch: Dict[int, List[TagRule]] = collections.defaultdict(list)
        for rule in tag_rules(view.links, view.hosts, self.routing.routes(), self.config):
            by_switch[rule.dpid].append(rule)
        self._rules = dict(by_switch)

    def bucket_weights(
        self, view: RoutingView, dpid: int, ports: Sequence[int], now: float
    ) -> Tuple[int, ...]:
        return (1,) * len(ports)

    def switch_flows(
        self,
        view: RoutingView,
        dpid: int,
        routes: Mapping[str, Route],
        flows: Mapping[str, Tuple[Any, ...]],
        now: float,
    ) -> Msgs:
        """Tagger's flows at ``dpid``: the new tag's DSCP and queue, then routing's actions."""
        wanted: Dict[Tuple[int, int, str], Tuple[Any, ...]] = {}
        for rule in self._rules.get(dpid, ()):
            forward = flows.get(rule.ipv4_dst)
            if forward is None:
                continue
            wanted[(rule.in_port, rule.tag, rule.ipv4_dst)] = (
                (ofmsg.ACTION_SET_FIELD, "ip_dscp", self.config.dscp(rule.new_tag)),
                (ofmsg.ACTION_SET_QUEUE, self.config.queue(rule.new_tag)),
            ) + tuple(forward)
        have = self._installed.setdefault(dpid, {})
        common = dict(
            cookie=layout.TAGGER_COOKIE, table_id=layout.ROUTING_TABLE, priority=layout.PRIO_TAGGER
        )
        msgs: Msgs = []
        for key in sorted(wanted):
            if have.get(key) == wanted[key]:
                continue
            build = ofmsg.flow_add if key not in have else ofmsg.flow_modify_strict
            msgs.append((dpid, build(match=self._match(key), action_specs=wanted[key], **common)))
            have[key] = wanted[key]
        for key in sorted(set(have) - set(wanted)):
            msgs.append((dpid, ofmsg.flow_delete_strict(match=self._match(key), **common)))
            del have[key]
        return msgs

    def tick(self, now: float) -> Msgs:
        return []

    def status(self) -> Dict[str, Any]:
        return {
            "tagger": {
                "lossless_queues": list(self.config.lossless_queues),
                "rules": sum(len(r) for r in self._rules.values()),
                "installed": sum(len(f) for f in self._installed.values()),
                "bounces": sum(1 for rs in self._rules.values() for r in rs if r.new_tag != r.tag),
            }
        }

    def _match(self, key: Tuple[int, int, str]) -> Dict[str, Any]:
        in_port, tag, ip = key
        return {
            "in_port": in_port,
            "eth_type": ofmsg.ETH_TYPE_IPV4,
            "ip_dscp": self.config.dscp(tag),
            "ipv4_dst": ip,
        }


def routing_extension(routing: RoutingManager, options: Any = None) -> TaggerManager:
    """Tagger attached to ``routing`` (its lossless queues: ``TaggerConfig``'s defaults)."""
    return TaggerManager(routing)


class TaggerApp(RoutingApp):
    """os-ken shim: the routing service with ``TaggerManager`` always attached."""

    EXTENSIONS = ("tagger",)


def rules_table(rules: Sequence[TagRule], names: Optional[Mapping[int, str]] = None) -> List[List]:
    """The rules as report rows: switch, in port, tag -> new tag, destination."""
    names = names or {}
    return [
        [names.get(r.dpid, f"{r.dpid:#x}"), r.in_port, r.ipv4_dst, r.tag, r.new_tag] for r in rules
    ]
