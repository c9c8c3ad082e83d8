r"""Routing app: LLDP topology discovery, host discovery and proxy ARP, shortest-path ECMP, failover.

Two layers, as in Faucet:

* ``RoutingManager`` is pure: it owns the discovered topology (switches, ports,
  directed links), the hosts, the desired and the installed flow/group state of
  every switch and the convergence bookkeeping.  Its methods take an event and
  ``now`` and return a list of ``(dpid, message)`` to send; it owns no socket,
  thread or clock, so the unit tests drive it with synthetic events.
* ``RoutingApp`` is the thin os-ken shim: one handler per OpenFlow event, a hub
  thread for the periodic LLDP tick, a lock around the manager, and the status
  file that emu waits on.  It is the ``routing`` service: it tells observers
  when the topology or host table changed (``EventRoutingChanged``) and
  answers requests for the current view (``EventRoutingViewRequest``); both
  are defined in ``controllers/routing_api.py`` with the view they carry.

Managers that add flows and bucket weights to routing's per-switch updates
(adaptive routing, Tagger) are attached as ``RoutingExtension``\ s, as many as
make sense together (Faucet's valve dispatches each event to a list of
managers the same way): routing calls each, in the order they were attached,
with a ``RoutingView`` and ``now`` at fixed points and sends what they return
in routing's make-before-break order; none reads routing's fields or another
extension's. ``RoutingApp`` builds the ones named by ``--extensions`` (and the
one an app like ``controllers.adaptive`` stands for).

What goes into a switch (table, cookie and priorities from ``layout.py``): punt
LLDP and ARP to the controller, a default drop, and per known host an IPv4 route
``ipv4_dst=H -> SELECT group`` whose buckets are every next-hop port on a
shortest path to H's switch (one group per distinct port set, watch_port = the
output port), or ``set eth_dst, output`` at H's own switch.  After each
topology change only the difference is sent, followed by a barrier per switch;
the barrier replies tell which topology version is installed everywhere. A
proxy ARP reply waits for that: a host is answered only once the routes that
its question (or its target's answer) made are in place on every switch.

Messages are built only by ``controllers/ofmsg.py``, without a datapath; the
manager knows switches by dpid and the shim binds each message to its switch
when it sends it.  This module never imports emu's switch: it drives any
OpenFlow 1.3 switch.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

import networkx as nx
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controllers import layout, ofmsg
from controllers.launch import app_options
from controllers.routing_api import (
    ROUTING_EXTENSIONS,
    ROUTING_SERVICE,
    EventRoutingChanged,
    EventRoutingViewReply,
    EventRoutingViewRequest,
    Host,
    Msgs,
    PortKey,
    Route,
    RoutingExtension,
    RoutingView,
)
from emu.proto import ofext

LOG = logging.getLogger(__name__)

__all__ = [
    "Host",
    "Msgs",
    "PortInfo",
    "PortKey",
    "Route",
    "RoutingApp",
    "RoutingConfig",
    "RoutingManager",
    "RoutingView",
    "write_status",
]

ZERO_IP = "0.0.0.0"
ZERO_MAC = "00:00:00:00:00:00"


class RoutingInvariantError(RuntimeError):
    """The manager's own bookkeeping is inconsistent (a bug, not bad input)."""


@dataclass(frozen=True)
class RoutingConfig:
    """Timers and expectations of the routing manager.

    Attributes:
        lldp_interval_s: period of LLDP on every port once converged (Ryu's
            topology discovery also uses about 1 s).
        lldp_burst_interval_s: faster LLDP period right after a switch connects,
            so that discovery converges in well under a second per hop.
        lldp_burst_duration_s: how long after connect the burst period applies.
        link_timeout_intervals: a link is removed when this many LLDP frames went
            out of its source port unanswered and as many intervals passed (Ryu
            removes a link after 5 unanswered LLDPs). Counting frames sent, not
            only time, keeps a controller or switch that fell behind under CPU
            load from expiring links that are up; and an LLDP counts as
            unanswered only if the controller took packet-ins from the link's
            peer switch between it and the previous one, so a peer whose
            packet-ins wait in a backed-up channel or event queue (32 links
            of a k=4 fat-tree expired within 2 s that way under adaptive
            routing's load) does not look like a dead link. A cut that port
            status reports removes the link at once whatever this says.
        expect_switches, expect_links, expect_hosts: counts emu expects; links
            are cables (a cable counts when both directions were discovered).
        arp_flood_holddown_s: minimum time between two floods for the same unknown target.
        arp_pending_timeout_s: how long a requester waits for an unknown target.
        arp_route_wait_s: how long a proxy ARP reply waits for every switch to
            acknowledge the routes it makes usable; then it goes anyway. One
            retransmit interval of a Linux host's ARP (1 s, `retrans_time_ms`):
            a switch that never answers its barrier (hung, or its reply lost)
            costs a host one retry, not its answer.
        max_events: how many recent events the status keeps.
        flap_threshold, flap_window_s, damp_hold_s: a port that goes down
            `flap_threshold` times within `flap_window_s` is damped: its link
            stays out of rotation until it has been stable for `damp_hold_s`
            (route-flap damping as in RFC 2439, on links instead of routes).
        set_eth_dst: rewrite eth_dst to the host's MAC at the last hop.
        flowlet_gap_us: when set, every SELECT group of every switch runs in
            flowlet mode with this gap (switch-local adaptive routing, set with
            emu's OpenFlow extension, emu/proto/ofext.py); None keeps hashing.
        adaptive_routing: which switches place each packet of which classes
            on the least-queued port of its SELECT group (per-packet adaptive
            routing, emu's extension): a spec as `ofext.parse_adaptive_spec`
            reads it (``"3"``: priority 3 on every switch; ``"0,3;0x10001=none"``:
            priorities 0 and 3 on every switch but dpid 0x10001). A switch
            it enables runs adaptive mode on every SELECT group (the classes
            not named hash); the others keep `flowlet_gap_us` or hashing.
            None: no adaptive routing.
    """

    lldp_interval_s: float = 1.0
    flap_threshold: int = 3
    flap_window_s: float = 10.0
    damp_hold_s: float = 5.0
    lldp_burst_interval_s: float = 0.1
    lldp_burst_duration_s: float = 2.0
    link_timeout_intervals: int = 5
    expect_switches: Optional[int] = None
    expect_links: Optional[int] = None
    expect_hosts: Optional[int] = None
    arp_flood_holddown_s: float = 0.5
    arp_pending_timeout_s: float = 5.0
    arp_route_wait_s: float = 1.0
    max_events: int = 200
    set_eth_dst: bool = True
    flowlet_gap_us: Optional[int] = None
    adaptive_routing: Optional[str] = None
    # Where each switch sends a destination switch's traffic; None: every shortest-path
    # next hop (ECMP). A lab's student writes one (`NextHops`, `--next-hops FILE`).
    next_hops: Optional["NextHops"] = None

    def __post_init__(self) -> None:
        for name in (
            "lldp_interval_s",
            "lldp_burst_interval_s",
            "arp_pending_timeout_s",
            "arp_route_wait_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be > 0")
        if self.link_timeout_intervals < 1:
            raise ValueError(
                f"link_timeout_intervals={self.link_timeout_intervals!r}: must be >= 1"
            )
        for name in ("expect_switches", "expect_links", "expect_hosts"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}={value!r}: must be >= 0 or None")
        if self.flowlet_gap_us is not None and not 0 < self.flowlet_gap_us < 2**32:
            raise ValueError(f"flowlet_gap_us={self.flowlet_gap_us!r}: must be 1..2^32-1 or None")
        if self.adaptive_routing is not None:
            try:
                ofext.parse_adaptive_spec(self.adaptive_routing)
            except ofext.ExtensionError as exc:
                raise ValueError(f"adaptive_routing={self.adaptive_routing!r}: {exc}") from None

    def adaptive_classes(self, dpid: int) -> int:
        """The priorities (a mask) switch `dpid` routes adaptively; 0: none."""
        if self.adaptive_routing is None:
            return 0
        spec = ofext.parse_adaptive_spec(self.adaptive_routing)
        return spec.get(dpid, spec.get(None, 0))

    def select_mode(self, dpid: int) -> Optional[Any]:
        """The SET_SELECT_MODE switch `dpid` gets on connect, or None (it keeps hashing)."""
        classes = self.adaptive_classes(dpid)
        if classes:
            return ofmsg.set_select_mode(group_id=None, adaptive_classes=classes)
        if self.flowlet_gap_us is not None:
            return ofmsg.set_select_mode(group_id=None, flowlet_gap_us=self.flowlet_gap_us)
        return None


@dataclass(frozen=True)
class PortInfo:
    """One switch port as reported by PortDesc or PortStatus."""

    port_no: int
    hw_addr: str
    live: bool
    speed_bps: int = 0  # PortDesc curr_speed; 0 when the switch does not say


# A next-hop policy: (topology, switch, destination switch) -> output ports.
NextHops = Callable[[nx.DiGraph, int, int], Iterable[int]]


def load_next_hops(path: str) -> NextHops:
    """The `next_hops` function of the Python file at `path` (a lab's or a user's policy).

    Raises:
        ValueError: the file cannot be loaded or defines no callable `next_hops`.
    """
    spec = importlib.util.spec_from_file_location("emu_next_hops", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--next-hops {path!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a student's file: any error is theirs to see, named
        raise ValueError(f"--next-hops {path!r}: {type(exc).__name__}: {exc}") from None
    policy = getattr(module, "next_hops", None)
    if not callable(policy):
        raise ValueError(
            f"--next-hops {path!r}: defines no function next_hops(topology, switch, destination)"
        )
    return policy


FlowKey = Tuple[int, str]  # (priority, ipv4_dst)


@dataclass
class _Switch:
    ports: Dict[int, str]  # live ports: port_no -> hw_addr
    entered_s: float
    next_lldp_s: float
    acked_version: int = 0
    # Barriers sent and not yet answered: xid -> the version they close.
    barriers: Dict[int, int] = field(default_factory=dict)
    # The newest version that sent this switch nothing: it is in place as soon as
    # every barrier sent before it is answered.
    quiet_version: int = 0
    flows: Dict[str, Tuple[ofmsg.Action, ...]] = field(
        default_factory=dict
    )  # installed: ipv4_dst -> actions
    groups: Dict[int, FrozenSet[int]] = field(default_factory=dict)  # installed: gid -> ports
    group_weights: Dict[int, Tuple[int, ...]] = field(default_factory=dict)  # gid -> bucket weights
    speeds: Dict[int, int] = field(default_factory=dict)  # port_no -> bit/s
    gid_by_ports: Dict[FrozenSet[int], int] = field(default_factory=dict)
    next_gid: int = layout.ROUTING_GROUP_BASE


@dataclass
class _Pending:
    requester: Host
    expires_s: float


@dataclass
class _HeldReply:
    """A proxy ARP reply waiting for the routes it makes usable (see ``_reply_when_routed``)."""

    version: int  # the topology version that must be installed on every switch
    message: Tuple[int, Any]
    send_by_s: float  # then it goes whatever the barriers say (arp_route_wait_s)


def _host_match(ip: str) -> Dict[str, Any]:
    return {"eth_type": ofmsg.ETH_TYPE_IPV4, "ipv4_dst": ip}


class RoutingManager:
    """Pure routing logic: events in, ``(dpid, message)`` out.

    Args:
        config: timers and expectations.

    Examples:
        >>> mgr = RoutingManager(RoutingConfig(expect_switches=1))
        >>> msgs = mgr.switch_enter(1, [PortInfo(1, "02:00:00:00:00:01", True)], now=0.0)
    """

    def __init__(self, config: Optional[RoutingConfig] = None) -> None:
        self.config = config or RoutingConfig()
        self._extensions: List[RoutingExtension] = []
        self._switches: Dict[int, _Switch] = {}
        # directed link: (src dpid, src port) -> (dst dpid, dst port); last refresh separately
        self._links: Dict[PortKey, PortKey] = {}
        self._link_seen_s: Dict[PortKey, float] = {}
        self._lldp_unanswered: Dict[PortKey, int] = collections.defaultdict(int)
        # Packet-ins taken from each switch, and the link's peer's count when its
        # source last sent LLDP: an LLDP counts as unanswered only if its peer's
        # packet-ins were being processed meanwhile (see RoutingConfig).
        self._packet_ins: Dict[int, int] = collections.defaultdict(int)
        self._peer_packet_ins_at_lldp: Dict[PortKey, int] = {}
        self._flaps: Dict[PortKey, List[float]] = {}
        self._damped: Dict[PortKey, float] = {}  # port -> out of rotation until
        self._hosts: Dict[str, Host] = {}
        self._resync_due = False  # hosts learned whose routes the next tick sends
        # Each switch's ECMP ports towards each host switch, for the links and
        # switches they were computed on: learning a host changes neither, and
        # recomputing them per learned host was most of a k=8 fabric's boot.
        self._next_hops_for: Optional[Tuple[FrozenSet, FrozenSet]] = None
        self._next_hops_to: Dict[int, Dict[int, FrozenSet[int]]] = {}
        self._pending: Dict[str, List[_Pending]] = {}
        self._held_replies: List[_HeldReply] = []
        self._flooded_s: Dict[str, float] = {}
        self._next_xid = layout.ROUTING_BARRIER_XIDS.first
        self._events: Deque[Dict[str, Any]] = collections.deque(maxlen=self.config.max_events)
        # Damping decisions on their own: a long flap would push them out of `_events`.
        self._damping: Deque[Dict[str, Any]] = collections.deque(maxlen=self.config.max_events)
        self.topology_version = 0

    # ------------------------------------------------------------------ queries

    @property
    def switches(self) -> List[int]:
        return sorted(self._switches)

    @property
    def links(self) -> List[Tuple[int, int, int, int]]:
        return sorted((s, sp, d, dp) for (s, sp), (d, dp) in self._links.items())

    @property
    def hosts(self) -> List[Host]:
        return sorted(self._hosts.values(), key=lambda h: tuple(int(x) for x in h.ip.split(".")))

    def host(self, ip: str) -> Optional[Host]:
        """The host with address ``ip``, or None when routing has not learned it."""
        return self._hosts.get(ip)

    def view(self, now: float) -> RoutingView:
        """A frozen copy of what routing knows at ``now`` (see ``RoutingView``)."""
        return RoutingView(
            version=self.topology_version,
            switches={d: dict(sw.ports) for d, sw in self._switches.items()},
            speeds={d: dict(sw.speeds) for d, sw in self._switches.items()},
            links=tuple((s, sp, d, dp) for (s, sp), (d, dp) in self._links.items()),
            hosts=dict(self._hosts),
            damped=frozenset(k for k, until in self._damped.items() if now < until),
            flaps={k: tuple(ts) for k, ts in self._flaps.items()},
        )

    def attach(self, extension: RoutingExtension) -> None:
        """Call ``extension`` at routing's fixed points from now on, after those attached before.

        Raises:
            RoutingInvariantError: an extension of the same kind is attached already
                (two would install the same flows twice).
        """
        if extension in self._extensions:
            return
        kind = type(extension).__name__
        if any(type(e).__name__ == kind for e in self._extensions):
            raise RoutingInvariantError(f"routing already has a {kind} attached")
        self._extensions.append(extension)

    @property
    def extensions(self) -> Tuple[RoutingExtension, ...]:
        """The attached extensions, in the order routing calls them."""
        return tuple(self._extensions)

    def record_event(self, now: float, kind: str, **fields: Any) -> None:
        """Add an event to the status file's ``events`` (for an extension's decisions)."""
        self._event(now, kind, **fields)

    def cable_count(self) -> int:
        """Number of links discovered in both directions."""
        both = sum(1 for src, dst in self._links.items() if self._links.get(dst) == src)
        return both // 2

    def switch_installed_version(self, dpid: int) -> int:
        """The newest topology version in place at ``dpid`` (acknowledged by its barriers)."""
        return self._switches[dpid].acked_version

    def installed_version(self) -> int:
        """The topology version acknowledged by a barrier on every connected switch."""
        if not self._switches:
            return self.topology_version
        return min(sw.acked_version for sw in self._switches.values())

    def converged(self) -> bool:
        cfg = self.config
        if cfg.expect_switches is not None and len(self._switches) < cfg.expect_switches:
            return False
        if cfg.expect_links is not None and self.cable_count() < cfg.expect_links:
            return False
        if cfg.expect_hosts is not None and len(self._hosts) < cfg.expect_hosts:
            return False
        return self.installed_version() == self.topology_version

    def edge_ports(self, dpid: int, fabric: Optional[Set[PortKey]] = None) -> List[int]:
        """Live ports of ``dpid`` that are not an end of any discovered inter-switch link.

        ``fabric``: the link ends (``_fabric_ports()``), when the caller asks for many switches.
        """
        sw = self._switches.get(dpid)
        if sw is None:
            return []
        if fabric is None:
            fabric = self._fabric_ports()
        return sorted(p for p in sw.ports if (dpid, p) not in fabric)

    def installed_groups(self, dpid: int) -> Dict[int, FrozenSet[int]]:
        return dict(self._switches[dpid].groups)

    def installed_flows(self, dpid: int) -> Dict[str, Tuple[ofmsg.Action, ...]]:
        return dict(self._switches[dpid].flows)

    def status(self) -> Dict[str, Any]:
        """The convergence status emu waits on (written as JSON by the app).

        Keys: ``switches`` (dpids), ``links`` (``[src_dpid, src_port, dst_dpid,
        dst_port]``, one per discovered direction), ``hosts`` (``{"ip", "mac",
        "dpid", "port"}``), ``topology_version`` (bumped on every link up/down,
        host learned/removed, switch enter/leave), ``installed_version`` (the
        version whose messages every connected switch acknowledged with a barrier
        reply), ``converged`` (expected counts met, links counted as cables seen
        in both directions, and installed == topology version), ``expected``
        (the expected counts, null when not given), ``damped_ports`` and
        ``damping`` (the last damp/undamp decisions), and ``events`` (the last
        ``max_events`` of ``{"t": unix time, "kind": link_up|link_down|
        host_learned|host_removed|switch_enter|switch_leave, ...}``).
        """
        return {
            "switches": self.switches,
            "links": [list(link) for link in self.links],
            "hosts": [
                {"ip": h.ip, "mac": h.mac, "dpid": h.dpid, "port": h.port} for h in self.hosts
            ],
            "topology_version": self.topology_version,
            "installed_version": self.installed_version(),
            "converged": self.converged(),
            "damped_ports": [[d, p] for (d, p) in sorted(self._damped)],
            "damping": list(self._damping),
            "expected": {
                "switches": self.config.expect_switches,
                "links": self.config.expect_links,
                "hosts": self.config.expect_hosts,
            },
            "events": list(self._events),
            **{k: v for e in self._extensions for k, v in e.status().items()},
        }

    # ------------------------------------------------------------------ switch events

    def switch_enter(self, dpid: int, ports: Iterable[PortInfo], now: float) -> Msgs:
        """A switch connected (or reconnected): resync it, punt LLDP/ARP, discover, route.

        Resync deletes every flow of routing's cookie band and every group first,
        so the tables equal what a freshly started controller installs.  An
        attached extensions' messages for the switch go first.
        """
        msgs: Msgs = []
        for extension in self._extensions:
            msgs += extension.switch_enter(dpid, now)
        if dpid in self._switches:
            # A reconnect overtook the old connection's teardown.
            msgs += self.switch_leave(dpid, now)
        sw = _Switch(ports={}, entered_s=now, next_lldp_s=now)
        self._switches[dpid] = sw
        # A flood made before this switch connected never reached its hosts: the next
        # miss floods again rather than waiting out the holddown. When the controller
        # restarts, switches reconnect one by one; without this a host behind a late
        # switch stayed unknown for the holddown (0.5 s) after its switch was back.
        self._flooded_s.clear()
        for p in ports:
            if p.live and p.port_no <= ofmsg.OFPP_MAX:
                sw.ports[p.port_no] = p.hw_addr
                sw.speeds[p.port_no] = p.speed_bps
        msgs += [
            (
                dpid,
                ofmsg.flow_delete_by_cookie(
                    cookie=layout.ROUTING_COOKIE, cookie_mask=layout.COOKIE_BAND_MASK
                ),
            ),
            (dpid, ofmsg.group_delete()),
        ]
        select_mode = self.config.select_mode(dpid)
        if select_mode is not None:
            msgs.append((dpid, select_mode))
        # The entry's barriers say nothing about a topology version: a switch whose
        # flush is acknowledged has empty tables. It counts as installed from the
        # resync below (its barrier, or `_quiet` once these are answered), so a
        # held proxy ARP reply never waits on a switch that has no routes yet.
        msgs.append((dpid, self._barrier(dpid, 0)))
        common = dict(cookie=layout.ROUTING_COOKIE, table_id=layout.ROUTING_TABLE)
        to_ctrl = (ofmsg.ACTION_OUTPUT, ofmsg.OFPP_CONTROLLER)
        # (priority, match, actions) of the flows every switch gets on connect.
        base_flows = [
            (layout.PRIO_PUNT, {"eth_type": ofmsg.ETH_TYPE_LLDP}, [to_ctrl]),
            (layout.PRIO_PUNT, {"eth_type": ofmsg.ETH_TYPE_ARP}, [to_ctrl]),
            (
                layout.PRIO_IPV4_MISS,
                {"eth_type": ofmsg.ETH_TYPE_IPV4},
                [to_ctrl + (layout.IPV4_MISS_MAX_LEN,)],
            ),
            (layout.PRIO_DEFAULT_DROP, {}, []),
        ]
        msgs += [
            (dpid, ofmsg.flow_add(priority=prio, match=match, action_specs=acts, **common))
            for prio, match, acts in base_flows
        ]
        # The barrier above orders the flush before the adds; this one is what says
        # the base flows are in: the resync below may send this switch nothing.
        msgs.append((dpid, self._barrier(dpid, 0)))
        msgs.append((dpid, ofmsg.port_desc_request()))
        msgs += self._lldp_out(dpid, sorted(sw.ports))
        sw.next_lldp_s = now + self.config.lldp_burst_interval_s
        self._event(now, "switch_enter", dpid=dpid)
        LOG.info("switch %016x entered with ports %s", dpid, sorted(sw.ports))
        msgs += self.resync(now)
        return msgs

    def switch_leave(self, dpid: int, now: float) -> Msgs:
        """A switch disconnected: forget its links (hosts stay: they come back with it)."""
        if self._switches.pop(dpid, None) is None:
            return []
        for src, dst in list(self._links.items()):
            if src[0] == dpid or dst[0] == dpid:
                self._remove_link(src, now)
        self._event(now, "switch_leave", dpid=dpid)
        LOG.info("switch %016x left", dpid)
        # A switch that left owes no barrier: replies held for it may go now.
        return self.resync(now) + self._release_replies(now)

    def port_desc(self, dpid: int, ports: Iterable[PortInfo], now: float) -> Msgs:
        """A PortDesc reply (part): update the live ports, LLDP on new ones, drop links on dead ones."""
        msgs: Msgs = []
        for p in ports:
            msgs += self.port_status(dpid, p, now)
        return msgs

    def port_status(self, dpid: int, port: PortInfo, now: float, deleted: bool = False) -> Msgs:
        """A port came up, went down, appeared or was deleted.

        Down: the links on it (either direction) are removed and routes
        recomputed at once; the switch's group liveness bridges the gap. Up:
        LLDP goes out of it immediately.
        """
        sw = self._switches.get(dpid)
        if sw is None or port.port_no > ofmsg.OFPP_MAX:
            return []
        if port.live and not deleted:
            was_live = port.port_no in sw.ports
            sw.ports[port.port_no] = port.hw_addr
            sw.speeds[port.port_no] = port.speed_bps
            return [] if was_live else self._lldp_out(dpid, [port.port_no])
        sw.ports.pop(port.port_no, None)
        self._note_flap((dpid, port.port_no), now)
        changed = False
        for src, dst in list(self._links.items()):
            if (dpid, port.port_no) in (src, dst):
                self._remove_link(src, now)
                changed = True
        return self.resync(now) if changed else []

    def barrier_reply(self, dpid: int, xid: int, now: float) -> Msgs:
        """A barrier reply: everything sent to ``dpid`` before it is in place.

        A switch answers barriers in the order it got them (OpenFlow 1.3, 6.2), so
        this reply also stands for every earlier barrier of the switch whose reply
        was not seen: one lost reply does not hold the switch back for good.
        """
        sw = self._switches.get(dpid)
        if sw is None or xid not in sw.barriers:
            return []  # not ours, or sent on a connection that is gone
        version = 0
        for sent in list(sw.barriers):  # oldest first (insertion order)
            version = max(version, sw.barriers.pop(sent))
            if sent == xid:
                break
        if not sw.barriers:
            version = max(version, sw.quiet_version)
        sw.acked_version = max(sw.acked_version, version)
        return self._release_replies(now)

    # ------------------------------------------------------------------ packet-ins

    def packet_in(self, dpid: int, in_port: int, data: bytes, now: float) -> Msgs:
        """A punted frame: our LLDP teaches a link, ARP teaches a host and asks for proxy ARP."""
        if dpid not in self._switches:
            return []
        self._packet_ins[dpid] += 1
        etype = ofmsg.eth_type(data)
        if etype == ofmsg.ETH_TYPE_LLDP:
            peer = ofmsg.parse_lldp(data)
            return [] if peer is None else self._lldp_in(peer, (dpid, in_port), now)
        if etype == ofmsg.ETH_TYPE_ARP:
            info = ofmsg.parse_arp(data)
            return [] if info is None else self._arp_in(dpid, in_port, info, now)
        if etype == ofmsg.ETH_TYPE_IPV4:
            return self._ipv4_miss(dpid, in_port, data, now)
        return []

    def _ipv4_miss(self, dpid: int, in_port: int, data: bytes, now: float) -> Msgs:
        """IPv4 that no route matched: learn its sender, look for its destination."""
        addrs = ofmsg.parse_ipv4_addrs(data)
        if addrs is None or self._is_fabric_port(dpid, in_port):
            return []
        src_mac, src_ip, dst_ip = addrs
        msgs = self._learn_host(Host(src_ip, src_mac, dpid, in_port), now)
        last = self._flooded_s.get(dst_ip)
        if dst_ip not in self._hosts and (
            last is None or now - last >= self.config.arp_flood_holddown_s
        ):
            self._flooded_s[dst_ip] = now
            msgs += self._arp_flood(dst_ip, exclude=(dpid, in_port))
        return msgs

    def _note_flap(self, key: PortKey, now: float) -> None:
        """Count a port going down; damp it after too many downs in the window."""
        cfg = self.config
        downs = [t for t in self._flaps.get(key, []) if now - t <= cfg.flap_window_s] + [now]
        self._flaps[key] = downs
        if len(downs) >= cfg.flap_threshold:
            if key not in self._damped:
                self._event(now, "link_damped", dpid=key[0], port=key[1], downs=len(downs))
                self._damping.append(
                    {
                        "t": now,
                        "kind": "damped",
                        "dpid": key[0],
                        "port": key[1],
                        "downs": len(downs),
                    }
                )
                LOG.warning(
                    "port %016x:%d flapped %d times in %.0f s: damped",
                    key[0],
                    key[1],
                    len(downs),
                    cfg.flap_window_s,
                )
            self._damped[key] = now + cfg.damp_hold_s

    def _is_damped(self, key: PortKey, now: float) -> bool:
        until = self._damped.get(key)
        if until is None:
            return False
        if now < until:
            return True
        del self._damped[key]
        self._flaps.pop(key, None)
        self._event(now, "link_undamped", dpid=key[0], port=key[1])
        self._damping.append({"t": now, "kind": "undamped", "dpid": key[0], "port": key[1]})
        return False

    def _lldp_in(self, src: PortKey, dst: PortKey, now: float) -> Msgs:
        if src[0] not in self._switches or src == dst or src[0] == dst[0]:
            return []
        if self._is_damped(src, now) or self._is_damped(dst, now):
            return []  # a flapping link stays out of rotation until it is stable
        if src[1] not in self._switches[src[0]].ports:
            return []  # stale frame from a port that went down meanwhile
        self._link_seen_s[src] = now
        self._lldp_unanswered[src] = 0
        if self._links.get(src) == dst:
            return []
        if src in self._links:
            self._remove_link(src, now)
        # A port has at most one peer: a different link into dst is stale.
        for other_src, other_dst in list(self._links.items()):
            if other_dst == dst:
                self._remove_link(other_src, now)
        self._links[src] = dst
        self._link_seen_s[src] = now
        self._event(
            now, "link_up", src_dpid=src[0], src_port=src[1], dst_dpid=dst[0], dst_port=dst[1]
        )
        LOG.info("link up %016x:%d -> %016x:%d", src[0], src[1], dst[0], dst[1])
        for ip, host in list(self._hosts.items()):
            if (host.dpid, host.port) in (src, dst):
                # Seen on what is in fact a fabric port: it was a leaked frame.
                del self._hosts[ip]
                self._event(
                    now, "host_removed", ip=host.ip, mac=host.mac, dpid=host.dpid, port=host.port
                )
        return self.resync(now)

    def _arp_in(self, dpid: int, in_port: int, info: ofmsg.ArpInfo, now: float) -> Msgs:
        if self._is_fabric_port(dpid, in_port) or info.src_mac == layout.CONTROLLER_MAC:
            return []  # our own probe leaking over a fabric port teaches nothing
        msgs: Msgs = []
        if info.src_ip != ZERO_IP:
            msgs += self._learn_host(Host(info.src_ip, info.src_mac, dpid, in_port), now)
        if info.op != ofmsg.ARP_REQUEST or info.dst_ip == info.src_ip or info.src_ip == ZERO_IP:
            return msgs
        requester = Host(info.src_ip, info.src_mac, dpid, in_port)
        target = self._hosts.get(info.dst_ip)
        if target is not None:
            return msgs + self._reply_when_routed(requester, target, now)
        self._pending.setdefault(info.dst_ip, []).append(
            _Pending(requester, now + self.config.arp_pending_timeout_s)
        )
        last = self._flooded_s.get(info.dst_ip)
        if last is None or now - last >= self.config.arp_flood_holddown_s:
            self._flooded_s[info.dst_ip] = now
            msgs += self._arp_flood(info.dst_ip, exclude=(dpid, in_port))
        return msgs

    def _learn_host(self, host: Host, now: float) -> Msgs:
        old = self._hosts.get(host.ip)
        msgs: Msgs = []
        if old != host:
            self._hosts[host.ip] = host
            self._event(
                now, "host_learned", ip=host.ip, mac=host.mac, dpid=host.dpid, port=host.port
            )
            LOG.info("host %s %s at %016x:%d", host.ip, host.mac, host.dpid, host.port)
            self._resync_at_tick()
        for pending in self._pending.pop(host.ip, []):
            if pending.expires_s >= now and pending.requester.dpid in self._switches:
                msgs += self._reply_when_routed(pending.requester, host, now)
        self._flooded_s.pop(host.ip, None)
        return msgs

    def _resync_at_tick(self) -> None:
        """Send the routes of a learned host with the next tick's resync, together
        with those of every host learned until then.

        A resync per learned host sent every switch its difference and a barrier
        each time: a k=8 fat-tree's 128 hosts, announced at once, were learned
        one after another, ~45 ms each, most of its boot. The version moves now,
        so that ARP replies that need the host's routes wait for them
        (`_reply_when_routed`) and the fabric is not converged meanwhile.
        """
        if not self._resync_due:
            self._resync_due = True
            self.topology_version += 1

    def _reply_when_routed(self, requester: Host, target: Host, now: float) -> Msgs:
        """The proxy ARP reply to ``requester`` once every switch has acknowledged the
        routes of the current topology version: now if they have, else when the
        barrier replies say so (``_release_replies``).

        A host sends its first packet as soon as it has its answer; answered while
        the routes that learning a host (the target, or the requester itself) sent
        are still on their way, that packet meets a table miss and is lost. Mininet's
        pingall under emu's routing lost such a first echo (h1 to h3: the echo left
        h1 right after the reply, and no switch on its way forwarded it) on a loaded
        machine.
        A reply still held after ``arp_route_wait_s`` goes anyway: one switch
        that never answers its barrier must not leave every host unanswered.
        """
        reply = self._arp_reply(requester, target)
        if self.installed_version() >= self.topology_version:
            return [reply]
        self._held_replies.append(
            _HeldReply(self.topology_version, reply, now + self.config.arp_route_wait_s)
        )
        return []

    def _release_replies(self, now: float) -> Msgs:
        """Held proxy ARP replies whose routes are now installed everywhere, or whose
        wait is over. One whose requester's switch is not connected waits for it
        (a reconnect that overtook the old connection's teardown) until its time."""
        if not self._held_replies:
            return []
        installed = self.installed_version()
        out: Msgs = []
        held: List[_HeldReply] = []
        for h in self._held_replies:
            due = h.version <= installed or now >= h.send_by_s
            if due and h.message[0] in self._switches:
                out.append(h.message)
            elif now < h.send_by_s:
                held.append(h)
        self._held_replies = held
        return out

    def _arp_reply(self, requester: Host, target: Host) -> Tuple[int, Any]:
        frame = ofmsg.arp_frame(
            op=ofmsg.ARP_REPLY,
            src_mac=target.mac,
            src_ip=target.ip,
            dst_mac=requester.mac,
            dst_ip=requester.ip,
        )
        return requester.dpid, ofmsg.packet_out(data=frame, ports=[requester.port])

    def _arp_flood(self, target_ip: str, exclude: PortKey) -> Msgs:
        # An ARP probe (sender IP 0.0.0.0, RFC 5227) from the controller's own MAC:
        # the target answers to that MAC (punted to us) and learns nothing wrong.
        frame = ofmsg.arp_frame(
            op=ofmsg.ARP_REQUEST,
            src_mac=layout.CONTROLLER_MAC,
            src_ip=ZERO_IP,
            dst_mac=ZERO_MAC,
            dst_ip=target_ip,
        )
        msgs: Msgs = []
        fabric = self._fabric_ports()  # once per flood, not once per port (O(links) each)
        for dpid in sorted(self._switches):
            ports = [p for p in self.edge_ports(dpid, fabric) if (dpid, p) != exclude]
            if ports:
                msgs.append((dpid, ofmsg.packet_out(data=frame, ports=ports)))
        return msgs

    # ------------------------------------------------------------------ timers

    def tick(self, now: float) -> Msgs:
        """Periodic work: LLDP on every live port when due, link expiry, the routes of
        hosts learned since the last tick (`_resync_at_tick`), pending-ARP expiry."""
        cfg = self.config
        msgs: Msgs = []
        for dpid, sw in sorted(self._switches.items()):
            if now >= sw.next_lldp_s:
                msgs += self._lldp_out(dpid, sorted(sw.ports))
                in_burst = now - sw.entered_s < cfg.lldp_burst_duration_s
                sw.next_lldp_s = now + (
                    cfg.lldp_burst_interval_s if in_burst else cfg.lldp_interval_s
                )
        timeout_s = cfg.link_timeout_intervals * cfg.lldp_interval_s
        expired = [
            src
            for src in self._links
            if now - self._link_seen_s.get(src, now) > timeout_s
            and self._lldp_unanswered[src] >= cfg.link_timeout_intervals
        ]
        for src in expired:
            LOG.info("link %016x:%d expired", *src)
            self._remove_link(src, now)
        if expired or self._resync_due:
            msgs += self.resync(now)
        for ip in list(self._pending):
            alive = [p for p in self._pending[ip] if p.expires_s >= now]
            if alive:
                self._pending[ip] = alive
            else:
                del self._pending[ip]
                self._flooded_s.pop(ip, None)
        msgs += self._release_replies(now)
        for extension in self._extensions:
            msgs += extension.tick(now)
        return msgs

    def next_wakeup_s(self) -> Optional[float]:
        """When ``tick`` has work next: LLDP when due (None without switches), at
        once (0.0) while learned hosts' routes wait for it."""
        if self._resync_due:
            return 0.0
        return min((sw.next_lldp_s for sw in self._switches.values()), default=None)

    # ------------------------------------------------------------------ internals

    def _event(self, now: float, kind: str, **fields: Any) -> None:
        self._events.append({"t": now, "kind": kind, **fields})

    def _is_fabric_port(self, dpid: int, port_no: int) -> bool:
        key = (dpid, port_no)
        return key in self._links or any(dst == key for dst in self._links.values())

    def _fabric_ports(self) -> Set[PortKey]:
        """Both ends of every discovered link."""
        return set(self._links) | set(self._links.values())

    def _remove_link(self, src: PortKey, now: float) -> None:
        dst = self._links.pop(src)
        self._link_seen_s.pop(src, None)
        self._lldp_unanswered.pop(src, None)
        self._peer_packet_ins_at_lldp.pop(src, None)
        self._event(
            now, "link_down", src_dpid=src[0], src_port=src[1], dst_dpid=dst[0], dst_port=dst[1]
        )
        LOG.info("link down %016x:%d -> %016x:%d", src[0], src[1], dst[0], dst[1])

    def _lldp_out(self, dpid: int, ports: Iterable[int]) -> Msgs:
        sw = self._switches[dpid]
        msgs: Msgs = []
        for port in ports:
            peer = self._links.get((dpid, port))
            if peer is not None:
                seen = self._packet_ins[peer[0]]
                if self._peer_packet_ins_at_lldp.get((dpid, port)) != seen:
                    self._lldp_unanswered[(dpid, port)] += 1
                self._peer_packet_ins_at_lldp[(dpid, port)] = seen
            src_mac = sw.ports.get(port) or "02:00:00:00:00:00"
            frame = ofmsg.lldp_frame(dpid=dpid, port_no=port, src_mac=src_mac)
            # On the highest queue, as switches send their own control protocols
            # (IEEE 802.1Q Annex I: network control, priority 7): on queue 0 a
            # lossless class at line rate starved LLDP and a busy link expired.
            msgs.append(
                (dpid, ofmsg.packet_out(data=frame, ports=[port], queue=layout.CONTROL_QUEUE))
            )
        return msgs

    def _barrier(self, dpid: int, version: int) -> Any:
        xid = self._next_xid
        self._next_xid = layout.ROUTING_BARRIER_XIDS.next(xid)
        self._switches[dpid].barriers[xid] = version
        return ofmsg.barrier(xid=xid)

    def _quiet(self, dpid: int, version: int) -> None:
        """``version`` sent ``dpid`` nothing: it is in place once earlier barriers are answered.

        Without this every change would cost a barrier round trip on every
        switch: at k=8 (80 switches) discovery made 42,000 barrier replies, each
        a handler call in the controller, for the ~11,000 messages that changed
        anything.
        """
        sw = self._switches[dpid]
        if sw.barriers:
            sw.quiet_version = version
        else:
            sw.acked_version = max(sw.acked_version, version)

    def _graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self._switches)
        for (s, _sp), (d, _dp) in self._links.items():
            if s in self._switches and d in self._switches:
                g.add_edge(s, d)
        return g

    def topology(self) -> nx.DiGraph:
        """Switches (dpids) and directed links; edge u->v carries "port", u's port towards v."""
        g = nx.DiGraph()
        g.add_nodes_from(self._switches)
        for (s, sp), (d, _dp) in self._links.items():
            if s in self._switches and d in self._switches:
                g.add_edge(s, d, port=sp)
        return g

    def routes(self) -> Dict[int, Dict[str, Route]]:
        """Desired route per switch per host IP: ECMP over every shortest-path next hop."""
        if self.config.next_hops is not None:
            return self._routes_by(self.config.next_hops)
        state = (frozenset(self._links.items()), frozenset(self._switches))
        if state != self._next_hops_for:
            self._next_hops_for, self._next_hops_to = state, {}
        result: Dict[int, Dict[str, Route]] = {dpid: {} for dpid in self._switches}
        fabric = None  # the reversed graph and each switch's out-links, once a call
        for host in self._hosts.values():
            if host.dpid not in self._switches:
                continue
            towards = self._next_hops_to.get(host.dpid)
            if towards is None:
                fabric = fabric or self._reversed_fabric()
                towards = self._next_hops_to[host.dpid] = self._ports_towards(host.dpid, *fabric)
            for dpid, ports in towards.items():
                result[dpid][host.ip] = ("ecmp", ports)
            result[host.dpid][host.ip] = ("local", host.port, host.mac)
        return result

    def _reversed_fabric(self) -> Tuple[nx.DiGraph, Dict[int, List[Tuple[int, int]]]]:
        """The switch graph reversed, and each switch's (port, peer) out-links."""
        out_links: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
        for (s, sp), (d, _dp) in self._links.items():
            out_links[s].append((sp, d))
        return self._graph().reverse(copy=False), out_links

    def _ports_towards(
        self, target: int, rev: nx.DiGraph, out_links: Mapping[int, List[Tuple[int, int]]]
    ) -> Dict[int, FrozenSet[int]]:
        """Every other switch's ports on a shortest path to switch `target` (ECMP's set)."""
        dist = nx.single_source_shortest_path_length(rev, target)
        towards: Dict[int, FrozenSet[int]] = {}
        for dpid in self._switches:
            if dpid == target or dpid not in dist:
                continue
            ports = frozenset(
                sp for sp, d in out_links[dpid] if d in dist and dist[d] == dist[dpid] - 1
            )
            if not ports:
                raise RoutingInvariantError(
                    f"switch {dpid:016x} at distance {dist[dpid]} has no next hop"
                )
            towards[dpid] = ports
        return towards

    def _routes_by(self, next_hops: "NextHops") -> Dict[int, Dict[str, Route]]:
        """`routes()` with another policy: it names the ports, routing checks them."""
        topology = self.topology()
        result: Dict[int, Dict[str, Route]] = {dpid: {} for dpid in self._switches}
        for host in self._hosts.values():
            if host.dpid not in self._switches:
                continue
            for dpid in self._switches:
                if dpid == host.dpid:
                    result[dpid][host.ip] = ("local", host.port, host.mac)
                    continue
                ports = frozenset(next_hops(topology, dpid, host.dpid) or ())
                links = {data["port"] for _, _, data in topology.out_edges(dpid, data=True)}
                if not ports <= links:
                    raise RoutingInvariantError(
                        f"next_hops(topology, {dpid}, {host.dpid}) returned {sorted(ports)}: "
                        f"switch {dpid}'s links to other switches are on ports {sorted(links)}"
                    )
                if ports:
                    result[dpid][host.ip] = ("ecmp", ports)
        return result

    def resync(self, now: float) -> Msgs:
        """Bump the topology version, send every switch its difference and, if it had one, a barrier.

        Routing calls it on every change it sees; an extension calls it when
        what it adds to every switch changed (bucket weights).
        """
        self.topology_version += 1
        self._resync_due = False
        view = None
        if self._extensions:
            view = self.view(now)
            for extension in self._extensions:
                extension.before_resync(view, now)
        routes = self.routes()
        msgs: Msgs = []
        for dpid in sorted(self._switches):
            changes = self._sync_switch(dpid, routes.get(dpid, {}), view, now)
            if changes:
                msgs += changes
                msgs.append((dpid, self._barrier(dpid, self.topology_version)))
            else:
                self._quiet(dpid, self.topology_version)
        return msgs

    def _sync_switch(
        self, dpid: int, routes: Mapping[str, Route], view: Optional[RoutingView], now: float
    ) -> Msgs:
        sw = self._switches[dpid]
        wanted_sets: Set[FrozenSet[int]] = {r[1] for r in routes.values() if r[0] == "ecmp"}
        group_adds: Msgs = []
        for ports in sorted(wanted_sets, key=sorted):
            gid = sw.gid_by_ports.get(ports)
            if gid is None:
                gid = sw.gid_by_ports[ports] = sw.next_gid
                sw.next_gid += 1
            weights = self._bucket_weights(view, dpid, sorted(ports), now)
            if gid not in sw.groups or sw.group_weights.get(gid) != weights:
                group_adds.append(
                    (
                        dpid,
                        ofmsg.select_group(
                            group_id=gid,
                            ports=sorted(ports),
                            weights=weights,
                            modify=gid in sw.groups,
                        ),
                    )
                )
                sw.groups[gid] = ports
                sw.group_weights[gid] = weights
        flow_msgs: Msgs = []
        common = dict(
            cookie=layout.ROUTING_COOKIE,
            table_id=layout.ROUTING_TABLE,
            priority=layout.PRIO_HOST_ROUTE,
        )
        for ip in sorted(routes):
            route = routes[ip]
            if route[0] == "ecmp":
                acts: Tuple[ofmsg.Action, ...] = ((ofmsg.ACTION_GROUP, sw.gid_by_ports[route[1]]),)
            else:
                _kind, port, mac = route
                acts = ((ofmsg.ACTION_OUTPUT, port),)
                if self.config.set_eth_dst:
                    acts = ((ofmsg.ACTION_SET_FIELD, "eth_dst", mac),) + acts
            old = sw.flows.get(ip)
            if old == acts:
                continue
            builder = ofmsg.flow_add if old is None else ofmsg.flow_modify_strict
            flow_msgs.append((dpid, builder(match=_host_match(ip), action_specs=acts, **common)))
            sw.flows[ip] = acts
        for ip in sorted(set(sw.flows) - set(routes)):
            flow_msgs.append((dpid, ofmsg.flow_delete_strict(match=_host_match(ip), **common)))
            del sw.flows[ip]
        group_dels: Msgs = []
        for gid, ports in sorted(sw.groups.items()):
            if ports not in wanted_sets:
                group_dels.append((dpid, ofmsg.group_delete(group_id=gid)))
                del sw.groups[gid]
                del sw.gid_by_ports[ports]
                sw.group_weights.pop(gid, None)
        # Make before break: new groups, then flows (routing's, then another app's that
        # use routing's groups), then the groups nothing points to any more.
        app_flows: Msgs = []
        if view is not None:
            for extension in self._extensions:
                app_flows += extension.switch_flows(view, dpid, routes, dict(sw.flows), now)
        return group_adds + flow_msgs + app_flows + group_dels

    def _bucket_weights(
        self, view: Optional[RoutingView], dpid: int, ports: Sequence[int], now: float
    ) -> Tuple[int, ...]:
        """Weights of a SELECT group's buckets (one per port, ascending): equal unless extended.

        With several extensions a bucket's weight is the product of theirs (each
        scales the share it would give that port); with one, its own weights.
        """
        weights = [1] * len(ports)
        if view is None:
            return tuple(weights)
        for extension in self._extensions:
            theirs = extension.bucket_weights(view, dpid, ports, now)
            if len(theirs) != len(ports) or any(w < 0 for w in theirs):
                raise RoutingInvariantError(
                    f"{type(extension).__name__} gave weights {theirs} for ports {tuple(ports)}"
                )
            weights = [w * t for w, t in zip(weights, theirs)]
        return tuple(weights)


# ---------------------------------------------------------------------------- os-ken shim


def build_extension(name: str, routing: RoutingManager, options: Any) -> RoutingExtension:
    """The extension ``name`` (``routing_api.ROUTING_EXTENSIONS``), attached to ``routing``.

    Raises:
        ValueError: ``name`` is not one of them.
    """
    if name not in ROUTING_EXTENSIONS:
        raise ValueError(
            f"unknown routing extension {name!r}; extensions: {', '.join(ROUTING_EXTENSIONS)}"
        )
    module = importlib.import_module(f"controllers.{name}")
    return module.routing_extension(routing, options)


def next_hops_of(options: Any) -> Optional[NextHops]:
    """The next-hop policy the launcher's options ask for: ``--next-hops FILE``'s, or on
    a dragonfly (``--dragonfly-routing``) its minimal routing with one global hop
    (controllers/dragonfly_next_hops.py, the routers' groups from
    ``--dragonfly-groups`` or their dpids); None: every shortest-path next hop."""
    if options.next_hops:
        return load_next_hops(options.next_hops)
    if getattr(options, "dragonfly_routing", None):
        from controllers.dragonfly_next_hops import minimal_next_hops

        groups = getattr(options, "dragonfly_groups", None)
        return minimal_next_hops(ofext.parse_dragonfly_groups(groups) if groups else None)
    return None


def write_status(path: str, status: Mapping[str, Any]) -> None:
    """Write ``status`` as JSON atomically (tmp file in the same directory + os.replace)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(status, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _port_info(dp: Any, port: Any) -> PortInfo:
    ofp = dp.ofproto
    live = not (port.state & ofp.OFPPS_LINK_DOWN) and not (port.config & ofp.OFPPC_PORT_DOWN)
    return PortInfo(port.port_no, port.hw_addr, live, int(port.curr_speed) * 1000)


class RoutingApp(app_manager.OSKenApp):
    """os-ken shim around ``RoutingManager``: one handler per event, a tick thread, the status file.

    It is the ``routing`` service (``routing_api.ROUTING_SERVICE``): after
    every batch of messages whose handling moved the topology version it
    sends ``EventRoutingChanged`` with the new view to its observers, and it
    answers ``EventRoutingViewRequest``.  It builds and attaches the
    extensions ``--extensions`` names (and those of ``EXTENSIONS``: an app
    such as ``controllers.adaptive`` is this one with its extension always on)
    and hands them the statistics replies they asked for; a handler an
    extension needs beyond these goes through ``handle``.
    """

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _EVENTS = [EventRoutingChanged]
    TICK_S = 0.05
    #: Extensions (``routing_api.ROUTING_EXTENSIONS``) this app always runs.
    EXTENSIONS: Tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = ROUTING_SERVICE
        opts = app_options()
        self.manager = RoutingManager(
            RoutingConfig(
                lldp_interval_s=opts.lldp_interval_s,
                expect_switches=opts.expect_switches,
                expect_links=opts.expect_links,
                expect_hosts=opts.expect_hosts,
                flowlet_gap_us=opts.flowlet_gap_us,
                adaptive_routing=opts.adaptive_routing,
                next_hops=next_hops_of(opts),
            )
        )
        names = list(self.EXTENSIONS) + [n for n in opts.extensions if n not in self.EXTENSIONS]
        self.extensions = [build_extension(name, self.manager, opts) for name in names]
        self._status_file = opts.status_file
        self._lock = threading.Lock()
        self._dps: Dict[int, Any] = {}
        self._last_status: Optional[str] = None
        self._published_version: Optional[int] = None
        self._running = True
        self._write_status()

    def handle(self, dp: Any, call: Callable[[float], Msgs]) -> None:
        """Run ``call(now)`` under the lock if ``dp`` is the switch's current connection; send.

        The one way in for handlers of an app that extends routing, so that
        its manager sees events in the same order as routing's.
        """
        with self._lock:
            if self._dps.get(dp.id) is dp:
                self._apply(call(time.time()))

    def start(self) -> Any:
        thread = super().start()
        self.threads.append(hub.spawn(self._tick_loop))
        return thread

    def stop(self) -> None:
        self._running = False
        super().stop()

    # -- plumbing

    def _apply(self, msgs: Msgs) -> None:
        for dpid, msg in msgs:
            dp = self._dps.get(dpid)
            if dp is None:
                continue
            dp.send_msg(ofmsg.bound(msg, dp))
        # The status file is the tick's to write, every TICK_S: writing it after
        # every handler call (each barrier reply and LLDP packet-in) was 85% of the
        # controller's CPU while a k=8 fat-tree came up (0.55 ms per call, 41 KB).
        self._publish()

    def _publish(self) -> None:
        """Tell observers (aggregation) about a new topology version, with its view."""
        version = self.manager.topology_version
        if version == self._published_version:
            return
        self._published_version = version
        self.send_event_to_observers(EventRoutingChanged(self.manager.view(time.time())))

    def _write_status(self) -> None:
        if not self._status_file:
            return
        status = self.manager.status()
        text = json.dumps(status, sort_keys=True)
        if text == self._last_status:
            return
        self._last_status = text
        write_status(self._status_file, status)

    def _tick_loop(self) -> None:
        while self._running:
            with self._lock:
                self._apply(self.manager.tick(time.time()))
                self._write_status()
            hub.sleep(self.TICK_S)

    # -- handlers, one per event

    @set_ev_cls(EventRoutingViewRequest)
    def view_request_handler(self, req: EventRoutingViewRequest) -> None:
        with self._lock:
            view = self.manager.view(time.time())
        self.reply_to_request(req, EventRoutingViewReply(req.src, view))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change_handler(self, ev: Any) -> None:
        dp = ev.datapath
        with self._lock:
            if ev.state == MAIN_DISPATCHER:
                self._dps[dp.id] = dp
                ports = [_port_info(dp, p) for p in dp.ports.values()]
                self._apply(self.manager.switch_enter(dp.id, ports, time.time()))
            elif ev.state == DEAD_DISPATCHER and dp.id is not None and self._dps.get(dp.id) is dp:
                del self._dps[dp.id]
                self._apply(self.manager.switch_leave(dp.id, time.time()))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_desc_handler(self, ev: Any) -> None:
        dp = ev.msg.datapath
        ports = [_port_info(dp, p) for p in ev.msg.body]
        self.handle(dp, lambda now: self.manager.port_desc(dp.id, ports, now))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status_handler(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        deleted = msg.reason == dp.ofproto.OFPPR_DELETE
        info = _port_info(dp, msg.desc)
        self.handle(dp, lambda now: self.manager.port_status(dp.id, info, now, deleted=deleted))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in_handler(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        in_port = msg.match.get("in_port")
        if in_port is None:
            return
        data = bytes(msg.data)
        self.handle(dp, lambda now: self.manager.packet_in(dp.id, in_port, data, now))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats_handler(self, ev: Any) -> None:
        takers = [e for e in self.extensions if hasattr(e, "flow_stats")]
        if takers:
            dp = ev.msg.datapath
            stats = [(s.priority, dict(s.match.items()), s.byte_count) for s in ev.msg.body]
            self.handle(
                dp, lambda now: [m for e in takers for m in e.flow_stats(dp.id, stats, now)]
            )

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_handler(self, ev: Any) -> None:
        takers = [e for e in self.extensions if hasattr(e, "port_stats")]
        if takers:
            dp = ev.msg.datapath
            stats = [(s.port_no, s.tx_bytes) for s in ev.msg.body]
            self.handle(
                dp, lambda now: [m for e in takers for m in e.port_stats(dp.id, stats, now)]
            )

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply_handler(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        self.handle(dp, lambda now: self.manager.barrier_reply(dp.id, msg.xid, now))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error_handler(self, ev: Any) -> None:
        msg = ev.msg
        LOG.warning(
            "switch %s error type=%d code=%d data=%s",
            msg.datapath.id,
            msg.type,
            msg.code,
            bytes(msg.data[:64]).hex(),
        )
