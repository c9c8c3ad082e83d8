"""Every OpenFlow message and every frame emu's controller apps send, and the guarded packet-in parsers.

This module is the only place apps build OpenFlow 1.3 messages: each builder
takes plain parameters and returns an os-ken message object built without a
datapath (as Faucet's ``valve_of`` does), so that the pure managers hold no
connection.  The os-ken shim binds the switch's datapath when it sends the
message (``bound``); unit tests serialize it as it is.  Actions travel
through the apps as plain hashable tuples (``ACTION_*`` below), so a manager
can keep and diff its desired tables without holding os-ken objects.

It also builds the Ethernet frames the controller originates (LLDP for
discovery, ARP replies and probes for proxy ARP) and parses the only frames the
controller asks for (LLDP and ARP).  DESIGN.md: os-ken's packet library hangs
on some malformed input (a TCP option of length 0), so packet-ins are parsed
here with ``struct`` after checking the EtherType and every length; os-ken's
packet library is used only to *build* frames.

It does not decide what to install (the apps do) and does not own ids, cookies
or priorities (``controllers/layout.py`` does).
"""

from __future__ import annotations

import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple

from os_ken.lib.packet import arp, ethernet, lldp, packet
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from emu.proto import ofext

LOG = logging.getLogger(__name__)

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC
ARP_REQUEST = 1
ARP_REPLY = 2

ETH_HEADER_SIZE_BYTES = 14
#: Ethernet minimum frame without FCS (IEEE 802.3: 64 bytes including 4 FCS).
ETH_MIN_FRAME_BYTES = 60
#: Largest frame we are willing to parse (1500 MTU + header + one VLAN tag).
ETH_MAX_FRAME_BYTES = 1518
#: IEEE 802.1AB: LLDP to the nearest bridge, never forwarded by a bridge.
LLDP_DST_MAC = lldp.LLDP_MAC_NEAREST_BRIDGE
LLDP_TTL_S = 120
#: Chassis id format shared with Ryu's topology discovery: "dpid:<16 hex>".
LLDP_CHASSIS_PREFIX = b"dpid:"

# Action tuples (hashable, diffable); converted to os-ken actions by ``actions()``.
ACTION_OUTPUT = "output"  # ("output", port_no) or ("output", port_no, max_len)
ACTION_GROUP = "group"  # ("group", group_id)
ACTION_SET_FIELD = "set_field"  # ("set_field", field_name, value)
ACTION_SET_QUEUE = "set_queue"  # ("set_queue", queue_id): the egress priority queue

Action = Tuple[Any, ...]
Datapath = Any  # os-ken Datapath or any object with ofproto/ofproto_parser

OFP = ofproto_v1_3
PARSER = ofproto_v1_3_parser
#: Highest physical port number; ports above it are reserved (OpenFlow 1.3, 7.2.1).
OFPP_MAX = OFP.OFPP_MAX
OFPP_CONTROLLER = OFP.OFPP_CONTROLLER


class _Unbound:
    """The datapath a message is built for until it is sent: OpenFlow 1.3, no switch.

    os-ken's ``serialize`` reads only ``ofproto`` from a message's datapath, so
    a message built for this stand-in encodes to the same bytes as one built
    for a connected switch; Faucet builds with ``datapath=None`` the same way.
    """

    id = None
    ofproto = OFP
    ofproto_parser = PARSER


UNBOUND = _Unbound()


def bound(msg: Any, dp: Datapath) -> Any:
    """``msg`` with its datapath set to ``dp`` (the switch it is sent to); returns ``msg``."""
    msg.datapath = dp
    return msg


# --------------------------------------------------------------------------- flows


def actions(specs: Sequence[Action]) -> list:
    """Convert action tuples to os-ken OpenFlow 1.3 action objects.

    Args:
        specs: tuples ``("output", port)``, ``("group", gid)``,
            ``("set_field", "eth_dst", "aa:bb:cc:dd:ee:ff")``, ``("set_queue", 4)``.

    Returns:
        A list of os-ken ``OFPAction*`` objects in the same order.

    Raises:
        ValueError: on an unknown action kind.
    """
    ofp, parser = OFP, PARSER
    out = []
    for spec in specs:
        kind = spec[0]
        if kind == ACTION_OUTPUT:
            max_len = spec[2] if len(spec) > 2 else ofp.OFPCML_NO_BUFFER
            out.append(parser.OFPActionOutput(spec[1], max_len))
        elif kind == ACTION_GROUP:
            out.append(parser.OFPActionGroup(spec[1]))
        elif kind == ACTION_SET_FIELD:
            out.append(parser.OFPActionSetField(**{spec[1]: spec[2]}))
        elif kind == ACTION_SET_QUEUE:
            out.append(parser.OFPActionSetQueue(spec[1]))
        else:
            raise ValueError(
                f"unknown action kind {kind!r} in {spec!r}; "
                "allowed: output, group, set_field, set_queue"
            )
    return out


def _apply(specs: Sequence[Action]) -> list:
    ofp, parser = OFP, PARSER
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions(specs))]


def flow_add(
    *,
    cookie: int,
    table_id: int,
    priority: int,
    match: Mapping[str, Any],
    action_specs: Sequence[Action],
) -> Any:
    """Build an OFPFC_ADD FlowMod applying ``action_specs`` (empty = drop).

    Examples:
        >>> flow_add(cookie=0x1 << 60, table_id=0, priority=0xF000,
        ...          match={"eth_type": 0x88CC}, action_specs=[("output", 0xFFFFFFFD)])
    """
    return _flow_mod(OFP.OFPFC_ADD, cookie, table_id, priority, match, action_specs)


def flow_modify_strict(
    *,
    cookie: int,
    table_id: int,
    priority: int,
    match: Mapping[str, Any],
    action_specs: Sequence[Action],
) -> Any:
    """Build an OFPFC_MODIFY_STRICT FlowMod replacing the actions of one exact flow (counters kept)."""
    return _flow_mod(OFP.OFPFC_MODIFY_STRICT, cookie, table_id, priority, match, action_specs)


def _flow_mod(
    command: int,
    cookie: int,
    table_id: int,
    priority: int,
    match: Mapping[str, Any],
    action_specs: Sequence[Action],
) -> Any:
    ofp, parser = OFP, PARSER
    return parser.OFPFlowMod(
        UNBOUND,
        cookie=cookie,
        table_id=table_id,
        command=command,
        priority=priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        match=parser.OFPMatch(**dict(match)),
        instructions=_apply(action_specs),
    )


def flow_delete_strict(
    *, cookie: int, table_id: int, priority: int, match: Mapping[str, Any]
) -> Any:
    """Build an OFPFC_DELETE_STRICT FlowMod for one exact flow of our cookie."""
    ofp, parser = OFP, PARSER
    return parser.OFPFlowMod(
        UNBOUND,
        cookie=cookie,
        cookie_mask=0xFFFF_FFFF_FFFF_FFFF,
        table_id=table_id,
        command=ofp.OFPFC_DELETE_STRICT,
        priority=priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**dict(match)),
    )


def flow_delete_by_cookie(*, cookie: int, cookie_mask: int, table_id: Optional[int] = None) -> Any:
    """Build an OFPFC_DELETE FlowMod removing every flow whose cookie matches under the mask.

    Args:
        table_id: one table, or ``None`` for all tables (``OFPTT_ALL``).
    """
    ofp, parser = OFP, PARSER
    return parser.OFPFlowMod(
        UNBOUND,
        cookie=cookie,
        cookie_mask=cookie_mask,
        table_id=ofp.OFPTT_ALL if table_id is None else table_id,
        command=ofp.OFPFC_DELETE,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(),
    )


# --------------------------------------------------------------------------- groups


def _watched_buckets(ports: Sequence[int], weights: Sequence[int]) -> list:
    # watch_port = the output port: a switch that tracks bucket liveness skips a
    # dead uplink by itself, before the controller has reacted (OF1.3 5.6.1).
    ofp, parser = OFP, PARSER
    return [
        parser.OFPBucket(
            weight=weight,
            watch_port=port,
            watch_group=ofp.OFPG_ANY,
            actions=[parser.OFPActionOutput(port, 0)],
        )
        for port, weight in zip(ports, weights)
    ]


def select_group(
    *,
    group_id: int,
    ports: Sequence[int],
    weights: Optional[Sequence[int]] = None,
    modify: bool = False,
) -> Any:
    """Build a GroupMod (ADD, or MODIFY when ``modify``) for a SELECT group over ``ports``.

    Each bucket has ``watch_port`` = its output port and outputs to it; weights
    pair with the ports in ascending order (default all 1). Ports are emitted in
    ascending order so equal port sets give equal bytes.
    """
    ofp, parser = OFP, PARSER
    ports = sorted(ports)
    weights = [1] * len(ports) if weights is None else list(weights)
    if len(weights) != len(ports) or min(weights, default=1) < 1:
        raise ValueError(f"weights {weights} do not fit ports {ports} (one weight >= 1 per port)")
    return parser.OFPGroupMod(
        UNBOUND,
        command=ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD,
        type_=ofp.OFPGT_SELECT,
        group_id=group_id,
        buckets=_watched_buckets(ports, weights),
    )


def fast_failover_group(*, group_id: int, ports: Sequence[int], modify: bool = False) -> Any:
    """Build a GroupMod for a FAST_FAILOVER group: the first live port of ``ports`` (order kept) wins."""
    ofp, parser = OFP, PARSER
    return parser.OFPGroupMod(
        UNBOUND,
        command=ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD,
        type_=ofp.OFPGT_FF,
        group_id=group_id,
        buckets=_watched_buckets(list(ports), [0] * len(ports)),
    )


def group_delete(*, group_id: Optional[int] = None) -> Any:
    """Build a GroupMod DELETE for one group, or for all groups (``OFPG_ALL``) when ``group_id`` is None.

    OpenFlow 1.3 deletes the flows that forward to a deleted group too.
    """
    ofp, parser = OFP, PARSER
    return parser.OFPGroupMod(
        UNBOUND,
        command=ofp.OFPGC_DELETE,
        type_=ofp.OFPGT_ALL,
        group_id=ofp.OFPG_ALL if group_id is None else group_id,
        buckets=[],
    )


# --------------------------------------------------------------------------- misc messages


def packet_out(
    *,
    data: bytes,
    ports: Sequence[int],
    in_port: Optional[int] = None,
    queue: Optional[int] = None,
) -> Any:
    """Build a PacketOut sending ``data`` out of each of ``ports`` (in_port defaults to
    CONTROLLER), on egress priority queue ``queue`` when given (set_queue first)."""
    ofp, parser = OFP, PARSER
    actions = [] if queue is None else [parser.OFPActionSetQueue(queue)]
    return parser.OFPPacketOut(
        UNBOUND,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=ofp.OFPP_CONTROLLER if in_port is None else in_port,
        actions=actions + [parser.OFPActionOutput(port, 0) for port in ports],
        data=bytes(data),
    )


def barrier(*, xid: Optional[int] = None) -> Any:
    """Build a BarrierRequest; with ``xid`` set, the reply can be matched to it."""
    msg = PARSER.OFPBarrierRequest(UNBOUND)
    if xid is not None:
        msg.set_xid(xid)
    return msg


def port_desc_request() -> Any:
    """Build a PortDesc multipart request (OFPMP_PORT_DESC)."""
    return PARSER.OFPPortDescStatsRequest(UNBOUND, 0)


def port_stats_request() -> Any:
    """Build a PortStats multipart request for every port (OFPMP_PORT_STATS)."""
    return PARSER.OFPPortStatsRequest(UNBOUND, 0, OFP.OFPP_ANY)


def flow_stats_request(*, cookie: int, cookie_mask: int, table_id: int) -> Any:
    """Build a FlowStats multipart request for one table's flows of one cookie band."""
    ofp, parser = OFP, PARSER
    return parser.OFPFlowStatsRequest(
        UNBOUND, 0, table_id, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, cookie_mask, parser.OFPMatch()
    )


def set_select_mode(
    *,
    group_id: Optional[int],
    flowlet_gap_us: Optional[int] = None,
    adaptive_classes: Optional[int] = None,
    ugal_classes: Optional[int] = None,
    bias_bytes: int = 0,
) -> Any:
    """Build emu's experimenter message setting a SELECT group's mode (emu/proto/ofext.py).

    Args:
        group_id: one group, or None for the switch-wide default (OFPG_ALL).
        flowlet_gap_us: flowlet mode with this gap.
        adaptive_classes: per-packet adaptive routing for these priorities, a
            mask (bit p: priority p; ofext.CLASSES_ALL: all of them).
        ugal_classes: UGAL mode for these priorities (the group's bucket
            weights are path lengths), with `bias_bytes` on its non-minimal buckets.
        With none of them: hash mode (OpenFlow's).

    Raises:
        ValueError: several modes asked for; ofext.ExtensionError (a ValueError):
            a gap, class mask or bias out of range.
    """
    asked = [x is not None for x in (flowlet_gap_us, adaptive_classes, ugal_classes)]
    if sum(asked) > 1:
        raise ValueError("a SELECT group runs in one mode: flowlet, adaptive or UGAL")
    classes = adaptive_classes if adaptive_classes is not None else ugal_classes
    if classes is not None and not 0 < classes <= ofext.CLASSES_ALL:
        raise ofext.ExtensionError(f"classes={classes!r}: a mask of priorities 0..7, not empty")
    if adaptive_classes is not None:
        mode = ofext.SELECT_MODE_ADAPTIVE
    elif ugal_classes is not None:
        mode = ofext.SELECT_MODE_UGAL
    elif flowlet_gap_us is not None:
        mode = ofext.SELECT_MODE_FLOWLET
    else:
        mode = ofext.SELECT_MODE_HASH
    data = ofext.pack_set_select_mode(
        ofext.OFPG_ALL if group_id is None else group_id,
        mode,
        flowlet_gap_us or 0,
        classes or 0,
        bias_bytes,
    )
    return PARSER.OFPExperimenter(
        UNBOUND,
        experimenter=ofext.EMU_EXPERIMENTER_ID,
        exp_type=ofext.EXP_SET_SELECT_MODE,
        data=data,
    )


def agg_job_set(job: ofext.AggJobSet) -> Any:
    """emu's experimenter message configuring an aggregation job on a switch's engine."""
    return PARSER.OFPExperimenter(
        UNBOUND,
        experimenter=ofext.EMU_EXPERIMENTER_ID,
        exp_type=ofext.EXP_AGG_JOB_SET,
        data=ofext.pack_agg_job_set(job),
    )


def agg_job_delete(*, job_id: int) -> Any:
    """emu's experimenter message removing an aggregation job (and freeing its slots)."""
    return PARSER.OFPExperimenter(
        UNBOUND,
        experimenter=ofext.EMU_EXPERIMENTER_ID,
        exp_type=ofext.EXP_AGG_JOB_DEL,
        data=ofext.pack_agg_job_del(job_id),
    )


# --------------------------------------------------------------------------- frames


def _pad(frame: bytes) -> bytes:
    return (
        frame + b"\x00" * (ETH_MIN_FRAME_BYTES - len(frame))
        if len(frame) < ETH_MIN_FRAME_BYTES
        else frame
    )


def lldp_frame(*, dpid: int, port_no: int, src_mac: str) -> bytes:
    """Build the discovery LLDP frame sent out of ``port_no`` of switch ``dpid``.

    Chassis id (locally assigned) = ``b"dpid:%016x"``, port id (port component)
    = port number as 4 bytes big endian, as Ryu's topology discovery does.

    Examples:
        >>> parse_lldp(lldp_frame(dpid=1, port_no=3, src_mac="02:00:00:00:00:01"))
        (1, 3)
    """
    tlvs = [
        lldp.ChassisID(
            subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED,
            chassis_id=LLDP_CHASSIS_PREFIX + b"%016x" % dpid,
        ),
        lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=struct.pack("!I", port_no)),
        lldp.TTL(ttl=LLDP_TTL_S),
        lldp.End(),
    ]
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=LLDP_DST_MAC, src=src_mac, ethertype=ETH_TYPE_LLDP))
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return _pad(bytes(pkt.data))


def arp_frame(
    *, op: int, src_mac: str, src_ip: str, dst_mac: str, dst_ip: str, eth_dst: Optional[str] = None
) -> bytes:
    """Build an Ethernet+ARP frame (padded to 60 bytes).

    Args:
        op: ``ARP_REQUEST`` or ``ARP_REPLY``.
        src_mac, src_ip: ARP sender hardware/protocol address (also Ethernet source).
        dst_mac, dst_ip: ARP target hardware/protocol address.
        eth_dst: Ethernet destination; defaults to ``dst_mac`` for a reply and
            broadcast for a request.
    """
    if eth_dst is None:
        eth_dst = dst_mac if op == ARP_REPLY else "ff:ff:ff:ff:ff:ff"
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=eth_dst, src=src_mac, ethertype=ETH_TYPE_ARP))
    pkt.add_protocol(
        arp.arp(opcode=op, src_mac=src_mac, src_ip=src_ip, dst_mac=dst_mac, dst_ip=dst_ip)
    )
    pkt.serialize()
    return _pad(bytes(pkt.data))


# --------------------------------------------------------------------------- guarded parsers


def parse_ipv4_addrs(data: bytes) -> Optional[Tuple[str, str, str]]:
    """(eth src, IPv4 src, IPv4 dst) of an untagged IPv4 frame; None if it is not one.

    struct only: os-ken's packet library is never given IPv4 (it hangs on a TCP
    option of length 0; DESIGN.md).
    """
    if len(data) < 34 or data[12:14] != b"\x08\x00" or data[14] >> 4 != 4:
        return None
    src_mac = ":".join(f"{b:02x}" for b in data[6:12])
    return (src_mac, socket.inet_ntoa(data[26:30]), socket.inet_ntoa(data[30:34]))


def eth_type(data: bytes) -> Optional[int]:
    """Return the EtherType of an untagged frame, or None when too short or too long to be sane."""
    if not ETH_HEADER_SIZE_BYTES <= len(data) <= ETH_MAX_FRAME_BYTES:
        return None
    return struct.unpack_from("!H", data, 12)[0]


def parse_lldp(data: bytes) -> Optional[Tuple[int, int]]:
    """Return ``(dpid, port_no)`` from one of our discovery LLDP frames, or None for anything else.

    Walks the TLVs with explicit bounds checks (a TLV of length 0 is legal here
    only for End); never hands the bytes to os-ken's parser.
    """
    if eth_type(data) != ETH_TYPE_LLDP:
        return None
    off, end = ETH_HEADER_SIZE_BYTES, len(data)
    dpid: Optional[int] = None
    port_no: Optional[int] = None
    while off + 2 <= end:
        (header,) = struct.unpack_from("!H", data, off)
        tlv_type, tlv_len = header >> 9, header & 0x1FF
        off += 2
        if tlv_type == 0:  # End of LLDPDU
            break
        if off + tlv_len > end:
            return None
        value = data[off : off + tlv_len]
        off += tlv_len
        if tlv_type == 1:  # Chassis ID
            if (
                tlv_len != 1 + len(LLDP_CHASSIS_PREFIX) + 16
                or value[0] != lldp.ChassisID.SUB_LOCALLY_ASSIGNED
            ):
                return None
            if not value[1:].startswith(LLDP_CHASSIS_PREFIX):
                return None
            try:
                dpid = int(value[1 + len(LLDP_CHASSIS_PREFIX) :], 16)
            except ValueError:
                return None
        elif tlv_type == 2:  # Port ID
            if tlv_len != 5 or value[0] != lldp.PortID.SUB_PORT_COMPONENT:
                return None
            (port_no,) = struct.unpack("!I", value[1:5])
    if dpid is None or port_no is None:
        return None
    return dpid, port_no


@dataclass(frozen=True)
class ArpInfo:
    """The fields of an Ethernet/IPv4 ARP packet the controller uses."""

    op: int
    eth_src: str
    src_mac: str
    src_ip: str
    dst_mac: str
    dst_ip: str


def _mac(b: bytes) -> str:
    return ":".join("%02x" % x for x in b)


def _ip(b: bytes) -> str:
    return "%d.%d.%d.%d" % tuple(b)


def parse_arp(data: bytes) -> Optional[ArpInfo]:
    """Return the ARP fields of an untagged Ethernet/IPv4 ARP frame, or None for anything else."""
    if eth_type(data) != ETH_TYPE_ARP or len(data) < ETH_HEADER_SIZE_BYTES + 28:
        return None
    htype, ptype, hlen, plen, op = struct.unpack_from("!HHBBH", data, ETH_HEADER_SIZE_BYTES)
    if (
        htype != 1
        or ptype != ETH_TYPE_IPV4
        or hlen != 6
        or plen != 4
        or op not in (ARP_REQUEST, ARP_REPLY)
    ):
        return None
    o = ETH_HEADER_SIZE_BYTES + 8
    return ArpInfo(
        op=op,
        eth_src=_mac(data[6:12]),
        src_mac=_mac(data[o : o + 6]),
        src_ip=_ip(data[o + 6 : o + 10]),
        dst_mac=_mac(data[o + 10 : o + 16]),
        dst_ip=_ip(data[o + 16 : o + 20]),
    )
