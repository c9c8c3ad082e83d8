"""Table ids, cookie bands, group-id bands and priority bands of every controller app.

This module owns the shared vocabulary that keeps emu's controller apps from
stepping on each other inside one switch: which table an app writes, which
cookie band marks its flows (so an app can delete exactly its own flows with a
cookie mask after a restart), which group ids it may allocate, which
priorities it uses, and which transaction ids (xids) its barriers carry.  It
holds constants and the one xid allocator; ``controllers/ofmsg.py`` builds the
messages and the apps (``controllers/routing.py`` ...) decide what to install.

Cookie layout (64 bit)::

    bits 63..60  app band    (0x1 = routing, 0x2 = adaptive, 0x3 = aggregation,
                              0x4 = tagger, 0x5 = ugal)
    bits 59..0   free for the app (routing keeps them 0)

Routing (``controllers/routing.py``), table 0:

    ==========================  ========  ==========================================
    what                        priority  match / action
    ==========================  ========  ==========================================
    LLDP punt                   0xF000    eth_type=0x88cc -> CONTROLLER
    ARP punt                    0xF000    eth_type=0x0806 -> CONTROLLER
    host route                  0x8000    eth_type=0x0800, ipv4_dst=H/32 -> group G
                                          (or set eth_dst + output at H's switch)
    unknown IPv4 destination    0x0002    eth_type=0x0800 -> CONTROLLER (128 bytes)
    default drop                0x0001    (any) -> no actions
    ==========================  ========  ==========================================

Adaptive routing (``controllers/adaptive.py``: attached to routing, adds these), table 0,
cookie ``ADAPTIVE_COOKIE``, groups from ``ADAPTIVE_GROUP_BASE``:

    ==========================  ========  ==========================================
    elephant hop                0x8200    eth_type=0x0800, ipv4_src=S, ipv4_dst=D
                                          -> FAST_FAILOVER group (chosen port first)
    pair monitor (source's      0x8100    eth_type=0x0800, ipv4_src=S, ipv4_dst=D
    switch only)                          -> the same actions as routing's host route
    ==========================  ========  ==========================================

Aggregation manager (``controllers/aggregation.py``, beside routing or adaptive),
table 0, cookie ``AGGREGATION_COOKIE | job_id``, on every switch of a job's tree:

    ==========================  ========  ==========================================
    steer a job to the engine   0x9000    eth_type=0x0800, ip_proto=17,
                                          ipv4_dst=job address, udp_dst=4792
                                          -> output AGG_PORT (emu/proto/ofext.py)
    ==========================  ========  ==========================================

Tagger (``controllers/tagger.py``: attached to routing, adds these), table 0,
cookie ``TAGGER_COOKIE``, on every switch a tagged packet crosses:

    ==========================  ========  ==========================================
    re-tag / queue a hop        0x8400    eth_type=0x0800, in_port=P, ip_dscp=tag's,
                                          ipv4_dst=H -> set ip_dscp (new tag's),
                                          set_queue (its priority), routing's actions
    ==========================  ========  ==========================================

UGAL on a dragonfly (``controllers/ugal.py``: attached to routing, adds these),
table 0, cookie ``UGAL_COOKIE``, groups from ``UGAL_GROUP_BASE``, at every
router with hosts, for every host of another group:

    ==========================  ========  ==========================================
    a host's packet to another  0x8300    eth_type=0x0800, in_port=host port,
    group                                 ipv4_dst=H -> SELECT group in emu's UGAL
                                          mode (minimal and Valiant next hops,
                                          weights = path lengths; or, ``valiant``,
                                          the Valiant ones hashed)
    ==========================  ========  ==========================================

Group ids of routing are ``ROUTING_GROUP_BASE + n`` (one SELECT group per
distinct set of next-hop ports, per switch).  OpenFlow 1.3 groups carry no
cookie, so a resync deletes groups with ``OFPG_ALL``: an app that shares a
switch with routing must reinstall its groups after routing's resync (it
receives the same switch-enter event).

Barrier xids: every app that waits for a barrier reply gives its barriers xids
from its own band (``XidBand``), so that two apps in one controller, which both
see every barrier reply, never take each other's reply for their own:

    ===========================  ===========================
    routing (and adaptive)       0x4000_0000 .. 0x4FFF_FFFF
    aggregation                  0x5000_0000 .. 0x5FFF_FFFF
    ===========================  ===========================

os-ken numbers the other messages from a per-datapath counter that may pass
through a band; a reply is matched on (dpid, xid) of a barrier the app sent,
so such a collision can at worst end a wait one message early.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Mask selecting the app band of a cookie (OpenFlow 1.3 ``cookie_mask``).
COOKIE_BAND_MASK = 0xF000_0000_0000_0000

#: Routing app: all of its flows carry exactly this cookie.
ROUTING_COOKIE = 0x1000_0000_0000_0000
#: Reserved for the adaptive-routing app (``controllers/adaptive.py``).
ADAPTIVE_COOKIE = 0x2000_0000_0000_0000
#: Reserved for the aggregation manager (``controllers/aggregation.py``).
AGGREGATION_COOKIE = 0x3000_0000_0000_0000

#: Tagger (``controllers/tagger.py``): every flow it installs.
TAGGER_COOKIE = 0x4000_0000_0000_0000
#: UGAL on a dragonfly (``controllers/ugal.py``): every flow it installs.
UGAL_COOKIE = 0x5000_0000_0000_0000

#: Routing writes table 0 only (the first table every OpenFlow switch has).
ROUTING_TABLE = 0

#: Punts of frames the controller asked for (LLDP, ARP): above everything of routing.
PRIO_PUNT = 0xF000
#: Per-host IPv4 routes: the middle of the band, leaving room above for adaptive overrides.
PRIO_HOST_ROUTE = 0x8000
#: Adaptive routing: one counting copy of the host route per (source, destination) pair.
PRIO_PAIR_MONITOR = 0x8100
#: Adaptive routing: an elephant pinned to its placed path, above its pair monitor.
PRIO_ELEPHANT = 0x8200
#: UGAL: a packet from a host port to another group's host (match in_port too): above
#: routing's host route and an elephant's pinned hop (the source router decides).
PRIO_UGAL = 0x8300
#: Tagger: a hop of a tagged packet (match in_port and tag too): above every route.
PRIO_TAGGER = 0x8400
#: Aggregation frames of a job, steered to the switch's reduction engine: above every route.
PRIO_AGGREGATION = 0x9000
#: IPv4 that no host route matched: punted (first 128 bytes) so that the
#: controller learns the sender and looks for the destination. This is how a
#: restarted controller finds hosts whose ARP caches are still warm.
PRIO_IPV4_MISS = 0x0002
IPV4_MISS_MAX_LEN = 128
#: Explicit drop of everything else (OpenFlow 1.3 table-miss is drop too; the
#: explicit flow makes the behaviour the same on switches whose miss is "controller").
PRIO_DEFAULT_DROP = 0x0001

#: Group ids routing allocates from (one per distinct next-hop port set).
ROUTING_GROUP_BASE = 0x1000_0000
#: Group ids reserved for other apps start here.
ADAPTIVE_GROUP_BASE = 0x2000_0000
AGGREGATION_GROUP_BASE = 0x3000_0000
UGAL_GROUP_BASE = 0x5000_0000


@dataclass(frozen=True)
class XidBand:
    """A range of OpenFlow transaction ids one app gives its barriers.

    Attributes:
        first: the first xid of the band.
        size: how many xids the band holds (``first .. first + size - 1``).

    Examples:
        >>> band = XidBand(0x4000_0000, 0x1000_0000)
        >>> hex(band.next(0x4FFF_FFFF))
        '0x40000000'
    """

    first: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.first <= self.first + self.size - 1 <= 0xFFFF_FFFF:
            raise ValueError(
                f"xid band first={self.first:#x} size={self.size:#x}: "
                "must be non-empty and inside 0..0xFFFFFFFF"
            )

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    def __contains__(self, xid: object) -> bool:
        return isinstance(xid, int) and self.first <= xid <= self.last

    def next(self, xid: int) -> int:
        """The xid after ``xid``, wrapping around inside the band."""
        return self.first + (xid + 1 - self.first) % self.size


#: Barriers of routing (and of adaptive routing, which shares routing's barriers).
ROUTING_BARRIER_XIDS = XidBand(0x4000_0000, 0x1000_0000)
#: Barriers of the aggregation manager (job install and removal confirmations).
AGGREGATION_BARRIER_XIDS = XidBand(0x5000_0000, 0x1000_0000)

#: Source MAC of frames the controller originates (ARP probes for unknown
#: targets); locally administered, so it never collides with a host NIC.  ARP
#: packet-ins whose sender is this MAC are our own frames leaking over a not yet
#: discovered inter-switch port and teach nothing.
CONTROLLER_MAC = "0e:00:00:00:00:01"

#: Egress queue of the frames the controller sends for itself (LLDP): the
#: highest of the switch's 8 strict priorities, where switches keep their own
#: control protocols (IEEE 802.1Q Annex I: priority 7, network control), so
#: that no data class can starve discovery.
CONTROL_QUEUE = 7
