"""OpenFlow 1.3 wire codec for the switch side: guarded readers and struct builders.

Owns every byte the switch agent reads or writes on the OpenFlow channel:
- readers for what a controller sends (FlowMod, GroupMod, PortMod, PacketOut,
  SetConfig, RoleRequest, SetAsync, Multipart request bodies, Hello);
- builders for what a switch sends (FeaturesReply, PacketIn, PortStatus,
  FlowRemoved, Multipart reply bodies, GetConfigReply, RoleReply, Error).

os-ken's piece parsers (OFPMatch, OFPAction) are reused, but only after this
module has checked every length and type itself: os-ken loops forever on an
instruction, action, bucket or hello element of length 0 and on an unknown
instruction type. A check that fails raises `OFError` with the spec's code.

Does not own session state (`openflow.py`) or pipeline semantics (`pipeline.py`).
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofpp

from emu.switch.pipeline import FlowEntry, OFError
from emu.switch.ports import PortState

OFP_VERSION = ofp.OFP_VERSION  # 0x04
OFP_HEADER = struct.Struct("!BBHI")
MAX_MSG = 0xFFFF
# Multipart replies are split so that each message stays under 64 KiB.
MP_CHUNK = 60000

# OXM basic field number -> value size in bytes: all 40 fields of OF1.3 (7.2.3.7).
OXM_SIZES = {
    ofp.OFPXMT_OFB_IN_PORT: 4,
    ofp.OFPXMT_OFB_IN_PHY_PORT: 4,
    ofp.OFPXMT_OFB_METADATA: 8,
    ofp.OFPXMT_OFB_ETH_DST: 6,
    ofp.OFPXMT_OFB_ETH_SRC: 6,
    ofp.OFPXMT_OFB_ETH_TYPE: 2,
    ofp.OFPXMT_OFB_VLAN_VID: 2,
    ofp.OFPXMT_OFB_VLAN_PCP: 1,
    ofp.OFPXMT_OFB_IP_DSCP: 1,
    ofp.OFPXMT_OFB_IP_ECN: 1,
    ofp.OFPXMT_OFB_IP_PROTO: 1,
    ofp.OFPXMT_OFB_IPV4_SRC: 4,
    ofp.OFPXMT_OFB_IPV4_DST: 4,
    ofp.OFPXMT_OFB_TCP_SRC: 2,
    ofp.OFPXMT_OFB_TCP_DST: 2,
    ofp.OFPXMT_OFB_UDP_SRC: 2,
    ofp.OFPXMT_OFB_UDP_DST: 2,
    ofp.OFPXMT_OFB_SCTP_SRC: 2,
    ofp.OFPXMT_OFB_SCTP_DST: 2,
    ofp.OFPXMT_OFB_ICMPV4_TYPE: 1,
    ofp.OFPXMT_OFB_ICMPV4_CODE: 1,
    ofp.OFPXMT_OFB_ARP_OP: 2,
    ofp.OFPXMT_OFB_ARP_SPA: 4,
    ofp.OFPXMT_OFB_ARP_TPA: 4,
    ofp.OFPXMT_OFB_ARP_SHA: 6,
    ofp.OFPXMT_OFB_ARP_THA: 6,
    ofp.OFPXMT_OFB_IPV6_SRC: 16,
    ofp.OFPXMT_OFB_IPV6_DST: 16,
    ofp.OFPXMT_OFB_IPV6_FLABEL: 4,
    ofp.OFPXMT_OFB_ICMPV6_TYPE: 1,
    ofp.OFPXMT_OFB_ICMPV6_CODE: 1,
    ofp.OFPXMT_OFB_IPV6_ND_TARGET: 16,
    ofp.OFPXMT_OFB_IPV6_ND_SLL: 6,
    ofp.OFPXMT_OFB_IPV6_ND_TLL: 6,
    ofp.OFPXMT_OFB_MPLS_LABEL: 4,
    ofp.OFPXMT_OFB_MPLS_TC: 1,
    ofp.OFPXMT_OFB_MPLS_BOS: 1,
    ofp.OFPXMT_OFB_PBB_ISID: 3,
    ofp.OFPXMT_OFB_TUNNEL_ID: 8,
    ofp.OFPXMT_OFB_IPV6_EXTHDR: 2,
}
# Action type -> exact length (None: variable, >= 8, multiple of 8).
ACTION_LENS = {
    ofp.OFPAT_OUTPUT: 16,
    ofp.OFPAT_COPY_TTL_OUT: 8,
    ofp.OFPAT_COPY_TTL_IN: 8,
    ofp.OFPAT_SET_MPLS_TTL: 8,
    ofp.OFPAT_DEC_MPLS_TTL: 8,
    ofp.OFPAT_PUSH_VLAN: 8,
    ofp.OFPAT_POP_VLAN: 8,
    ofp.OFPAT_PUSH_MPLS: 8,
    ofp.OFPAT_POP_MPLS: 8,
    ofp.OFPAT_SET_QUEUE: 8,
    ofp.OFPAT_GROUP: 8,
    ofp.OFPAT_SET_NW_TTL: 8,
    ofp.OFPAT_DEC_NW_TTL: 8,
    ofp.OFPAT_SET_FIELD: None,
    ofp.OFPAT_PUSH_PBB: 8,
    ofp.OFPAT_POP_PBB: 8,
}
_KNOWN_ACTIONS = set(range(0, 28)) | {ofp.OFPAT_EXPERIMENTER}


def bad(type_: int, code: int, text: str = "") -> OFError:
    return OFError(type_, code, text)


def _brc(code: int) -> OFError:
    return OFError(ofp.OFPET_BAD_REQUEST, code)


# ----- guarded readers --------------------------------------------------------


def check_oxm_list(buf: bytes, start: int, end: int, for_set_field: bool = False) -> None:
    """Validate OXM TLVs in buf[start:end] (each header 4 bytes, sizes exact)."""
    pos = start
    while pos < end:
        if pos + 4 > end:
            raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_LEN)
        cls_, fh, olen = struct.unpack_from("!HBB", buf, pos)
        field, hasmask = fh >> 1, fh & 1
        if pos + 4 + olen > end:
            raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_LEN)
        size = OXM_SIZES.get(field)
        if cls_ != ofp.OFPXMC_OPENFLOW_BASIC or size is None:
            if for_set_field:
                raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_TYPE)
            raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_FIELD)
        if olen != size * (2 if hasmask else 1):
            if for_set_field:
                raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_LEN)
            raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_LEN)
        if for_set_field and hasmask:
            raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_SET_ARGUMENT)
        pos += 4 + olen
        if for_set_field:
            return


def read_match(buf: bytes, off: int, end: int) -> tuple[Any, int]:
    """Parse an ofp_match at `off`; returns (OFPMatch, offset after padding)."""
    if off + 4 > end:
        raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_LEN)
    mtype, mlen = struct.unpack_from("!HH", buf, off)
    if mtype != ofp.OFPMT_OXM:
        raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_TYPE)
    padded = (mlen + 7) // 8 * 8
    if mlen < 4 or off + padded > end:
        raise bad(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_LEN)
    check_oxm_list(buf, off + 4, off + mlen)
    return ofpp.OFPMatch.parser(buf, off), off + padded


def read_actions(buf: bytes, off: int, end: int) -> list:
    """Parse an action list in buf[off:end], every length checked first."""
    out = []
    while off < end:
        if off + 8 > end:
            raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN)
        atype, alen = struct.unpack_from("!HH", buf, off)
        if alen < 8 or alen % 8 or off + alen > end:
            raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN)
        if atype not in ACTION_LENS:
            raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_TYPE)
        want = ACTION_LENS[atype]
        if want is not None and alen != want:
            raise bad(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN)
        if atype == ofp.OFPAT_SET_FIELD:
            check_oxm_list(buf, off + 4, off + alen, for_set_field=True)
        out.append(ofpp.OFPAction.parser(buf, off))
        off += alen
    return out


_INSTR_CLS = {
    ofp.OFPIT_APPLY_ACTIONS: ofp.OFPIT_APPLY_ACTIONS,
    ofp.OFPIT_WRITE_ACTIONS: ofp.OFPIT_WRITE_ACTIONS,
    ofp.OFPIT_CLEAR_ACTIONS: ofp.OFPIT_CLEAR_ACTIONS,
}


def read_instructions(buf: bytes, off: int, end: int) -> list:
    """Parse instructions in buf[off:end] into os-ken instruction objects."""
    out = []
    while off < end:
        if off + 8 > end:
            raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
        itype, ilen = struct.unpack_from("!HH", buf, off)
        if ilen < 8 or ilen % 8 or off + ilen > end:
            raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
        if itype == ofp.OFPIT_GOTO_TABLE:
            if ilen != 8:
                raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
            out.append(ofpp.OFPInstructionGotoTable(buf[off + 4]))
        elif itype == ofp.OFPIT_WRITE_METADATA:
            if ilen != 24:
                raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
            md, mask = struct.unpack_from("!QQ", buf, off + 8)
            out.append(ofpp.OFPInstructionWriteMetadata(md, mask))
        elif itype in _INSTR_CLS:
            acts = read_actions(buf, off + 8, off + ilen)
            if itype == ofp.OFPIT_CLEAR_ACTIONS and acts:
                raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
            out.append(ofpp.OFPInstructionActions(itype, acts))
        elif itype == ofp.OFPIT_METER:
            if ilen != 8:
                raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN)
            out.append(ofpp.OFPInstructionMeter(struct.unpack_from("!I", buf, off + 4)[0]))
        elif itype == ofp.OFPIT_EXPERIMENTER:
            raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_UNSUP_INST)
        else:
            raise bad(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_UNKNOWN_INST)
        off += ilen
    return out


def read_flow_mod(msg: bytes) -> Any:
    """ofp_flow_mod (spec A.3.4.1) -> os-ken OFPFlowMod."""
    if len(msg) < ofp.OFP_FLOW_MOD_SIZE:
        raise _brc(ofp.OFPBRC_BAD_LEN)
    (
        cookie,
        cookie_mask,
        table_id,
        command,
        idle,
        hard,
        prio,
        buffer_id,
        out_port,
        out_group,
        flags,
    ) = struct.unpack_from("!QQBBHHHIIIH", msg, 8)
    match, off = read_match(msg, 48, len(msg))
    instructions = read_instructions(msg, off, len(msg))
    return ofpp.OFPFlowMod(
        None,
        cookie,
        cookie_mask,
        table_id,
        command,
        idle,
        hard,
        prio,
        buffer_id,
        out_port,
        out_group,
        flags,
        match,
        instructions,
    )


def read_buckets(buf: bytes, off: int, end: int) -> list:
    out = []
    while off < end:
        if off + ofp.OFP_BUCKET_SIZE > end:
            raise bad(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET)
        blen, weight, watch_port, watch_group = struct.unpack_from("!HHII", buf, off)
        if blen < ofp.OFP_BUCKET_SIZE or blen % 8 or off + blen > end:
            raise bad(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET)
        acts = read_actions(buf, off + ofp.OFP_BUCKET_SIZE, off + blen)
        out.append(ofpp.OFPBucket(weight, watch_port, watch_group, acts))
        off += blen
    return out


def read_group_mod(msg: bytes) -> Any:
    if len(msg) < ofp.OFP_GROUP_MOD_SIZE:
        raise _brc(ofp.OFPBRC_BAD_LEN)
    command, gtype, gid = struct.unpack_from("!HBxI", msg, 8)
    buckets = read_buckets(msg, ofp.OFP_GROUP_MOD_SIZE, len(msg))
    return ofpp.OFPGroupMod(None, command, gtype, gid, buckets)


def read_meter_mod(msg: bytes) -> tuple[int, int, int, list[tuple]]:
    """ofp_meter_mod (A.3.4.4) -> (command, flags, meter_id, [(type, rate, burst, prec_level)])."""
    if len(msg) < ofp.OFP_METER_MOD_SIZE:
        raise _brc(ofp.OFPBRC_BAD_LEN)
    command, flags, meter_id = struct.unpack_from("!HHI", msg, 8)
    bands = []
    off = ofp.OFP_METER_MOD_SIZE
    while off < len(msg):
        if off + 16 > len(msg):
            raise bad(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_BAND)
        btype, blen, rate, burst = struct.unpack_from("!HHII", msg, off)
        if blen != 16 or off + blen > len(msg):
            raise bad(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_BAND)
        prec = msg[off + 12] if btype == ofp.OFPMBT_DSCP_REMARK else 0
        bands.append((btype, rate, burst, prec))
        off += blen
    return command, flags, meter_id, bands


def read_packet_out(msg: bytes) -> tuple[int, int, list, bytes]:
    """-> (buffer_id, in_port, actions, data)."""
    if len(msg) < ofp.OFP_PACKET_OUT_SIZE:
        raise _brc(ofp.OFPBRC_BAD_LEN)
    buffer_id, in_port, alen = struct.unpack_from("!IIH", msg, 8)
    end = ofp.OFP_PACKET_OUT_SIZE + alen
    if end > len(msg):
        raise _brc(ofp.OFPBRC_BAD_LEN)
    actions = read_actions(msg, ofp.OFP_PACKET_OUT_SIZE, end)
    return buffer_id, in_port, actions, bytes(msg[end:])


def read_port_mod(msg: bytes) -> tuple[int, bytes, int, int, int]:
    """-> (port_no, hw_addr, config, mask, advertise)."""
    if len(msg) != ofp.OFP_PORT_MOD_SIZE:
        raise _brc(ofp.OFPBRC_BAD_LEN)
    port_no, hw, config, mask, adv = struct.unpack_from("!I4x6s2xIII", msg, 8)
    return port_no, hw, config, mask, adv


def read_hello_versions(msg: bytes) -> Optional[set]:
    """Versions from the Hello's VERSIONBITMAP element, or None if there is none."""
    off = 8
    versions: Optional[set] = None
    while off + 4 <= len(msg):
        etype, elen = struct.unpack_from("!HH", msg, off)
        if elen < 4 or off + elen > len(msg):
            raise OFError(ofp.OFPET_HELLO_FAILED, ofp.OFPHFC_INCOMPATIBLE, "bad hello element")
        if etype == ofp.OFPHET_VERSIONBITMAP:
            versions = set()
            for i in range((elen - 4) // 4):
                (bits,) = struct.unpack_from("!I", msg, off + 4 + 4 * i)
                versions |= {32 * i + b for b in range(32) if bits >> b & 1}
        off += (elen + 7) // 8 * 8
    return versions


# ----- builders -----------------------------------------------------------------


def header(msg_type: int, body: bytes, xid: int) -> bytes:
    return OFP_HEADER.pack(OFP_VERSION, msg_type, 8 + len(body), xid) + body


def hello(xid: int = 0) -> bytes:
    # A VERSIONBITMAP element announcing 1.3 only (spec A.5.1).
    return header(ofp.OFPT_HELLO, struct.pack("!HHI", ofp.OFPHET_VERSIONBITMAP, 8, 1 << 4), xid)


def error(type_: int, code: int, offending: bytes, xid: int, version: int = OFP_VERSION) -> bytes:
    body = struct.pack("!HH", type_, code) + bytes(offending[:64])
    return OFP_HEADER.pack(version, ofp.OFPT_ERROR, 8 + len(body), xid) + body


def features_reply(xid: int, dpid: int, n_buffers: int, n_tables: int, caps: int) -> bytes:
    return header(
        ofp.OFPT_FEATURES_REPLY,
        struct.pack("!QIBB2xII", dpid, n_buffers, n_tables, 0, caps, 0),
        xid,
    )


_SPEEDS = [
    (10**7, ofp.OFPPF_10MB_FD),
    (10**8, ofp.OFPPF_100MB_FD),
    (10**9, ofp.OFPPF_1GB_FD),
    (10**10, ofp.OFPPF_10GB_FD),
    (4 * 10**10, ofp.OFPPF_40GB_FD),
    (10**11, ofp.OFPPF_100GB_FD),
    (10**12, ofp.OFPPF_1TB_FD),
]


def ofp_port(p: PortState) -> bytes:
    """ofp_port (spec A.2.1), 64 bytes."""
    feat = next((f for r, f in _SPEEDS if r == p.rate_bps), ofp.OFPPF_OTHER) | ofp.OFPPF_COPPER
    name = p.name.encode()[:15].ljust(16, b"\x00")
    return struct.pack(
        "!I4x6s2x16sIIIIIIII",
        p.port_no,
        bytes(p.hw_addr[:6]).ljust(6, b"\0"),
        name,
        p.config,
        p.state,
        feat,
        0,
        0,
        0,
        p.curr_speed_kbps,
        p.curr_speed_kbps,
    )


def port_status(reason: int, p: PortState, xid: int = 0) -> bytes:
    return header(ofp.OFPT_PORT_STATUS, struct.pack("!B7x", reason) + ofp_port(p), xid)


def _match_bytes(ofmatch: Any) -> bytes:
    b = bytearray()
    ofmatch.serialize(b, 0)
    return bytes(b)


def packet_in_match(in_port: int, metadata: int) -> bytes:
    """An OXM match with in_port (and metadata when set), padded to 8."""
    oxm = struct.pack("!II", 0x80000004, in_port)
    if metadata:
        oxm += struct.pack("!IQ", 0x80000408, metadata)
    length = 4 + len(oxm)
    return (struct.pack("!HH", ofp.OFPMT_OXM, length) + oxm).ljust((length + 7) // 8 * 8, b"\0")


def packet_in(
    xid: int,
    buffer_id: int,
    total_len: int,
    reason: int,
    table_id: int,
    cookie: int,
    in_port: int,
    metadata: int,
    data: bytes,
) -> bytes:
    body = struct.pack("!IHBBQ", buffer_id, total_len, reason, table_id, cookie)
    body += packet_in_match(in_port, metadata) + b"\0\0" + data
    return header(ofp.OFPT_PACKET_IN, body, xid)


def _duration(now: float, since: float) -> tuple[int, int]:
    d = max(0.0, now - since)
    return int(d), int((d - int(d)) * 1e9)


def flow_removed(e: FlowEntry, now: float, xid: int = 0) -> bytes:
    sec, nsec = _duration(now, e.created)
    body = struct.pack(
        "!QHBBIIHHQQ",
        e.cookie,
        e.priority,
        e.removed_reason or 0,
        e.table_id,
        sec,
        nsec,
        e.idle_timeout,
        e.hard_timeout,
        e.ctr.packets,
        e.ctr.bytes,
    )
    return header(ofp.OFPT_FLOW_REMOVED, body + _match_bytes(e.ofmatch), xid)


def flow_stats_entry(e: FlowEntry, now: float) -> bytes:
    sec, nsec = _duration(now, e.created)
    ins = bytearray()
    for i in e.ofinstructions:
        b = bytearray()
        i.serialize(b, 0)
        ins += b
    tail = _match_bytes(e.ofmatch) + bytes(ins)
    return (
        struct.pack(
            "!HBxIIHHHH4xQQQ",
            48 + len(tail),
            e.table_id,
            sec,
            nsec,
            e.priority,
            e.idle_timeout,
            e.hard_timeout,
            e.flags,
            e.cookie,
            e.ctr.packets,
            e.ctr.bytes,
        )
        + tail
    )


def port_stats_entry(p: PortState, now: float) -> bytes:
    c = p.counters
    sec, nsec = _duration(now, p.created_at)
    return struct.pack(
        "!I4x12QII",
        p.port_no,
        c.rx_packets,
        c.tx_packets,
        c.rx_bytes,
        c.tx_bytes,
        c.rx_dropped,
        c.tx_dropped,
        c.rx_errors,
        c.tx_errors,
        0,
        0,
        0,
        0,
        sec,
        nsec,
    )


def group_desc_entry(g: Any) -> bytes:
    bk = bytearray()
    for b in g.buckets:
        buf = bytearray()
        b.serialize(buf, 0)
        bk += buf
    return struct.pack("!HBxI", 8 + len(bk), g.type, g.group_id) + bytes(bk)


def group_stats_entry(g: Any, ref_count: int, now: float) -> bytes:
    sec, nsec = _duration(now, g.created)
    bc = b"".join(struct.pack("!QQ", c.packets, c.bytes) for c in g.bucket_ctrs)
    return (
        struct.pack(
            "!H2xII4xQQII",
            40 + len(bc),
            g.group_id,
            ref_count,
            g.ctr.packets,
            g.ctr.bytes,
            sec,
            nsec,
        )
        + bc
    )


def meter_bands(meter: Any) -> bytes:
    return b"".join(
        struct.pack("!HHIIB3x", b.type, 16, b.rate, b.burst_size, b.prec_level) for b in meter.bands
    )


def meter_config_entry(meter: Any) -> bytes:
    """ofp_meter_config (A.3.5.12) of one meter."""
    bands = meter_bands(meter)
    return struct.pack("!HHI", 8 + len(bands), meter.flags, meter.meter_id) + bands


def meter_stats_entry(meter: Any, flow_count: int, now: float) -> bytes:
    """ofp_meter_stats (A.3.5.11): the meter's counters and each band's."""
    sec, nsec = _duration(now, meter.created)
    bands = b"".join(struct.pack("!QQ", b.packets, b.bytes) for b in meter.bands)
    head = struct.pack(
        "!IH6xIQQII",
        meter.meter_id,
        40 + len(bands),
        flow_count,
        meter.packets_in,
        meter.bytes_in,
        sec,
        nsec,
    )
    return head + bands


def meter_features(features: tuple) -> bytes:
    """ofp_meter_features (A.3.5.13)."""
    return struct.pack("!IIIBB2x", *features)


def group_features(f: dict) -> bytes:
    return struct.pack("!II4I4I", f["types"], f["capabilities"], *f["max_groups"], *f["actions"])


def desc(dp_desc: str) -> bytes:
    def s(t: str, n: int) -> bytes:
        return t.encode()[: n - 1].ljust(n, b"\0")

    return (
        s("emu", 256)
        + s("emu python switch", 256)
        + s("emu 0.1", 256)
        + s("None", 32)
        + s(dp_desc, 256)
    )


def multipart_replies(mp_type: int, entries: list[bytes], xid: int) -> list[bytes]:
    """Pack reply entries into OFPT_MULTIPART_REPLY messages under 64 KiB each.

    Every message but the last carries OFPMPF_REPLY_MORE (spec 7.3.5).
    """
    chunks: list[list[bytes]] = [[]]
    size = 0
    for e in entries:
        if size + len(e) > MP_CHUNK and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(e)
        size += len(e)
    out = []
    for i, ch in enumerate(chunks):
        flags = ofp.OFPMPF_REPLY_MORE if i < len(chunks) - 1 else 0
        out.append(
            header(
                ofp.OFPT_MULTIPART_REPLY, struct.pack("!HH4x", mp_type, flags) + b"".join(ch), xid
            )
        )
    return out


def _prop(ptype: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return (struct.pack("!HH", ptype, length) + payload).ljust((length + 7) // 8 * 8, b"\0")


def table_features(table_id: int, n_tables: int, name: str) -> bytes:
    """One ofp_table_features (spec A.3.5.5) describing what the pipeline supports.

    ovs-ofctl asks for these before add-flow and rejects an empty reply.
    """
    instr = b"".join(
        struct.pack("!HH", t, 4)
        for t in (
            ofp.OFPIT_GOTO_TABLE,
            ofp.OFPIT_WRITE_METADATA,
            ofp.OFPIT_WRITE_ACTIONS,
            ofp.OFPIT_APPLY_ACTIONS,
            ofp.OFPIT_CLEAR_ACTIONS,
            ofp.OFPIT_METER,
        )
    )
    acts = b"".join(struct.pack("!HH", t, 4) for t in sorted(ACTION_LENS))
    oxms = b"".join(
        struct.pack("!I", (ofp.OFPXMC_OPENFLOW_BASIC << 16) | (f << 9) | s)
        for f, s in sorted(OXM_SIZES.items())
    )
    setf = b"".join(
        struct.pack("!I", (ofp.OFPXMC_OPENFLOW_BASIC << 16) | (f << 9) | s)
        for f, s in sorted(OXM_SIZES.items())
        if f in _SETTABLE
    )
    nxt = bytes(range(table_id + 1, n_tables))
    props = b"".join(
        [
            _prop(ofp.OFPTFPT_INSTRUCTIONS, instr),
            _prop(ofp.OFPTFPT_INSTRUCTIONS_MISS, instr),
            _prop(ofp.OFPTFPT_NEXT_TABLES, nxt),
            _prop(ofp.OFPTFPT_NEXT_TABLES_MISS, nxt),
            _prop(ofp.OFPTFPT_WRITE_ACTIONS, acts),
            _prop(ofp.OFPTFPT_WRITE_ACTIONS_MISS, acts),
            _prop(ofp.OFPTFPT_APPLY_ACTIONS, acts),
            _prop(ofp.OFPTFPT_APPLY_ACTIONS_MISS, acts),
            _prop(ofp.OFPTFPT_MATCH, oxms),
            _prop(ofp.OFPTFPT_WILDCARDS, oxms),
            _prop(ofp.OFPTFPT_WRITE_SETFIELD, setf),
            _prop(ofp.OFPTFPT_WRITE_SETFIELD_MISS, setf),
            _prop(ofp.OFPTFPT_APPLY_SETFIELD, setf),
            _prop(ofp.OFPTFPT_APPLY_SETFIELD_MISS, setf),
        ]
    )
    fixed = struct.pack(
        "!HB5x32sQQII",
        64 + len(props),
        table_id,
        name.encode()[:31].ljust(32, b"\0"),
        0xFFFFFFFFFFFFFFFF,
        0xFFFFFFFFFFFFFFFF,
        0,
        1 << 20,
    )
    return fixed + props


# set_field takes every header field: not in_port/in_phy_port/metadata (not
# headers) nor ipv6_exthdr (a pseudo-field); tunnel_id is the pipeline's.
_SETTABLE = set(OXM_SIZES) - {
    ofp.OFPXMT_OFB_IN_PORT,
    ofp.OFPXMT_OFB_IN_PHY_PORT,
    ofp.OFPXMT_OFB_METADATA,
    ofp.OFPXMT_OFB_IPV6_EXTHDR,
}
