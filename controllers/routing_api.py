"""What routing publishes: its view of the fabric, its events, and the request API.

Routing (``controllers/routing.py``) owns topology discovery and the host
table.  Other apps and managers never read its fields; they get:

* ``RoutingView``: a frozen copy of what routing knows at one instant
  (switches and their live ports, port speeds, directed links, hosts, damped
  ports, recent port flaps), with the few derived queries its users need.
* ``EventRoutingChanged``: sent by the routing app to its observers whenever
  routing's topology version moved (a link, a switch or a host came or went,
  or routes were recomputed); it carries the new view.  An app observes it
  with ``@set_ev_cls(EventRoutingChanged)`` as with os-ken's topology events.
* ``EventRoutingViewRequest`` / ``EventRoutingViewReply`` and ``get_view``:
  the current view on demand, as ``os_ken.topology.api`` serves its lists.
* ``RoutingExtension``: the contract of a manager that adds flows and bucket
  weights to routing's own per-switch updates in the same make-before-break
  order (adaptive routing, Tagger).  Routing calls each attached one with a
  view and ``now``; an extension keeps its own state and reaches routing only
  through public methods (``RoutingManager.view``, ``resync``, ``routes``,
  ``record_event``). ``ROUTING_EXTENSIONS`` names the ones the routing app can
  build (``--extensions``): each is a module of ``controllers/`` with a
  ``routing_extension(routing, options)`` factory.

os-ken apps find routing under the service name ``ROUTING_SERVICE``.  Nothing
here imports emu's switch or net, nor holds a socket or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Protocol, Sequence, Tuple

from os_ken.base import app_manager
from os_ken.controller import event

from emu import config

Msgs = List[Tuple[int, Any]]
PortKey = Tuple[int, int]  # (dpid, port_no)
Link = Tuple[int, int, int, int]  # directed: (src dpid, src port, dst dpid, dst port)
# A route at one switch: ("ecmp", frozenset of ports) or ("local", port, mac).
Route = Tuple[Any, ...]

#: The name the routing app registers under (``OSKenApp.name``), for requests.
ROUTING_SERVICE = "routing"

#: Extensions the routing app builds by name (``controllers.launch --extensions``), in
#: the order it attaches them when several are named: ``controllers/<name>.py``. The
#: names are emu.config's, which validates them wherever a user gives them.
ROUTING_EXTENSIONS = config.ROUTING_EXTENSIONS


class RoutingUnavailable(RuntimeError):
    """No routing app runs in this controller, so there is no view to ask for."""


@dataclass(frozen=True)
class Host:
    """A host learned from ARP (or an IPv4 miss): where it is attached."""

    ip: str
    mac: str
    dpid: int
    port: int


@dataclass(frozen=True)
class RoutingView:
    """What routing knew at one instant; copied, so it never changes under its reader.

    Attributes:
        version: routing's topology version when the view was taken.
        switches: connected switches: dpid -> live port -> port MAC.
        speeds: dpid -> port -> bit/s as the switch reported it (0: not said).
        links: directed links in the order routing discovered them.
        hosts: host IP -> ``Host``.
        damped: ports whose links are out of rotation at the view's instant
            (route-flap damping, ``RoutingConfig.flap_*``).
        flaps: port -> the times it went down within routing's flap window
            (a port leaves this map when its damping ends).
    """

    version: int
    switches: Mapping[int, Mapping[int, str]]
    speeds: Mapping[int, Mapping[int, int]]
    links: Tuple[Link, ...]
    hosts: Mapping[str, Host]
    damped: FrozenSet[PortKey]
    flaps: Mapping[PortKey, Tuple[float, ...]]

    def is_fabric_port(self, dpid: int, port_no: int) -> bool:
        """True when ``(dpid, port_no)`` is an end of a discovered inter-switch link."""
        key = (dpid, port_no)
        return any((s, sp) == key or (d, dp) == key for s, sp, d, dp in self.links)

    def port_towards(self, src: int, dst: int) -> Optional[int]:
        """The port of ``src`` on the first discovered, undamped link to ``dst`` (None if none)."""
        for s, sp, d, _dp in self.links:
            if s == src and d == dst and (s, sp) not in self.damped:
                return sp
        return None

    def speed_bps(self, dpid: int, port_no: int) -> int:
        """The port's speed as reported (0 when unknown)."""
        return self.speeds.get(dpid, {}).get(port_no, 0)


class RoutingExtension(Protocol):
    """A manager whose flows and weights go out inside routing's per-switch updates.

    Routing calls these (with its view where the extension needs one) and
    sends what they return; every method takes ``now`` from routing's caller.
    """

    def switch_enter(self, dpid: int, now: float) -> Msgs:
        """A switch (re)connected; returned messages go before routing's resync of it."""

    def before_resync(self, view: RoutingView, now: float) -> None:
        """Routing is about to recompute every route (its version was just bumped)."""

    def bucket_weights(
        self, view: RoutingView, dpid: int, ports: Sequence[int], now: float
    ) -> Tuple[int, ...]:
        """Weights of a SELECT group's buckets (one per port, ascending)."""

    def switch_flows(
        self,
        view: RoutingView,
        dpid: int,
        routes: Mapping[str, Route],
        flows: Mapping[str, Tuple[Any, ...]],
        now: float,
    ) -> Msgs:
        """Messages after routing's flows at ``dpid`` changed (``flows``: routing's, installed)."""

    def tick(self, now: float) -> Msgs:
        """Periodic work, after routing's own."""

    def status(self) -> Dict[str, Any]:
        """Keys merged into routing's status file."""

    # An extension that asks switches for statistics also has
    # ``flow_stats(dpid, [(priority, match fields, byte_count)], now) -> Msgs`` and/or
    # ``port_stats(dpid, [(port_no, tx_bytes)], now) -> Msgs``: the routing app hands
    # every reply to each extension that has the method.


class EventRoutingChanged(event.EventBase):
    """Routing's topology version moved; ``view`` is the new view."""

    def __init__(self, view: RoutingView) -> None:
        super().__init__()
        self.view = view


class EventRoutingViewRequest(event.EventRequestBase):
    """Ask routing for its current view (answered with ``EventRoutingViewReply``)."""

    def __init__(self) -> None:
        super().__init__()
        self.dst = ROUTING_SERVICE


class EventRoutingViewReply(event.EventReplyBase):
    """Routing's answer: ``view`` is its current view."""

    def __init__(self, dst: str, view: RoutingView) -> None:
        super().__init__(dst)
        self.view = view


def get_view(app: app_manager.OSKenApp) -> RoutingView:
    """Routing's current view, asked for from ``app`` (not from routing's own event thread).

    Raises:
        RoutingUnavailable: no routing app runs beside ``app`` (os-ken would
            drop the request and the call would never return).
    """
    if app_manager.lookup_service_brick(ROUTING_SERVICE) is None:
        raise RoutingUnavailable(
            f"no {ROUTING_SERVICE!r} service: run controllers.routing or controllers.adaptive "
            f"beside {app.name}"
        )
    return app.send_request(EventRoutingViewRequest()).view
