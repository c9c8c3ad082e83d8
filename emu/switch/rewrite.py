"""Frame rewrites that OpenFlow 1.3 actions perform, with every checksum kept right.

Owns the bytes an action changes: set-field on every settable OXM field
(`SET_FIELD`), the TTL actions (set/decrement/copy for IP and MPLS), and the
tags pushed and popped (802.1Q/802.1ad, MPLS, PBB), plus the ECN mark that the
shared buffer sets (`set_ip_ecn`). Pure functions over `bytes`; a frame that
lacks the header an action needs comes back unchanged, as OVS leaves it.

Checksums: the IPv4 header checksum and the TCP, UDP, ICMPv4 and ICMPv6
checksums are updated incrementally (RFC 1624), so a frame that arrived with a
wrong checksum leaves with the same error and every other frame leaves with a
right one; a UDP checksum of zero (none, over IPv4) stays zero. SCTP's CRC32c
(RFC 4960 appendix B) cannot be updated in place and is computed anew. A later
IP fragment carries no L4 header, so only its IP header is fixed.

Does not own: reading the match key (`parse.py`) or deciding which action runs
(`pipeline.py`).
"""

from __future__ import annotations

import struct
from typing import Callable

from emu.switch.parse import (
    ETH_TYPE_IP,
    ETH_TYPE_IPV6,
    ETH_TYPE_PBB,
    IPPROTO_ICMP,
    IPPROTO_ICMPV6,
    IPPROTO_SCTP,
    IPPROTO_TCP,
    IPPROTO_UDP,
    MPLS_TYPES,
    ND_ADVERT,
    ND_SOLICIT,
    VLAN_TYPES,
    ipv6_upper_layer,
    nd_option,
)

_U16 = struct.Struct("!H")
_U16_AT = _U16.unpack_from
_U32 = struct.Struct("!I")
_U32_AT = _U32.unpack_from

# Where each L4 protocol keeps its checksum, and whether it covers the IP
# pseudo-header (RFC 768, 793, 792, 4443).
_L4_CSUM = {
    IPPROTO_TCP: (16, True),
    IPPROTO_UDP: (6, True),
    IPPROTO_ICMP: (2, False),
    IPPROTO_ICMPV6: (2, True),
}


# Ethernet's shortest frame without its FCS: a MAC pads anything shorter on
# the wire (IEEE 802.3 4.2.3.3), so a frame a pop made shorter leaves padded.
MIN_FRAME = 60


def _padded(frame: bytes) -> bytes:
    return frame if len(frame) >= MIN_FRAME else frame + bytes(MIN_FRAME - len(frame))


# ----- where the headers are ----------------------------------------------------


def l3_offset(frame: bytes) -> int:
    """Offset of the L3 header: 18 behind one 802.1Q/802.1ad tag, else 14."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in VLAN_TYPES:
        return 18
    return 14


def _ipv4_offset(frame: bytes) -> int:
    """Offset of a complete IPv4 header, or -1 when the frame carries none."""
    off = l3_offset(frame)
    if len(frame) < off + 20 or _U16_AT(frame, off - 2)[0] != ETH_TYPE_IP:
        return -1
    if frame[off] >> 4 != 4 or len(frame) < off + (frame[off] & 0x0F) * 4:
        return -1
    return off


def _ipv6_offset(frame: bytes) -> int:
    """Offset of a complete IPv6 base header, or -1."""
    off = l3_offset(frame)
    if len(frame) < off + 40 or _U16_AT(frame, off - 2)[0] != ETH_TYPE_IPV6:
        return -1
    if frame[off] >> 4 != 6:
        return -1
    return off


def _l4(frame: bytes) -> tuple[int, int, int, int]:
    """(IP version or 0, IP offset, upper-layer protocol, L4 offset or -1)."""
    off = _ipv4_offset(frame)
    if off >= 0:
        if _U16_AT(frame, off + 6)[0] & 0x1FFF:
            return 4, off, frame[off + 9], -1  # a later fragment: no L4 header
        return 4, off, frame[off + 9], off + (frame[off] & 0x0F) * 4
    off = _ipv6_offset(frame)
    if off >= 0:
        proto, l4, _flags, first = ipv6_upper_layer(frame, off)
        return 6, off, proto, l4 if first else -1
    return 0, -1, -1, -1


# ----- checksums -------------------------------------------------------------------


def _csum_adjust(csum: int, old: bytes, new: bytes) -> int:
    """RFC 1624 eqn. 3 over whole 16-bit words: HC' = ~(~HC + ~m + m')."""
    s = ~csum & 0xFFFF
    for i in range(0, len(old), 2):
        s += (~_U16_AT(old, i)[0] & 0xFFFF) + _U16_AT(new, i)[0]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32c (Castagnoli), as SCTP computes it (RFC 4960 appendix B)."""
    crc = 0xFFFFFFFF
    table = _CRC32C
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return ~crc & 0xFFFFFFFF


def _sctp_fix(b: bytearray, l4: int, ip_off: int, version: int) -> None:
    if version == 4:
        end = ip_off + _U16_AT(b, ip_off + 2)[0]
    else:
        end = ip_off + 40 + _U16_AT(b, ip_off + 4)[0]
    end = min(end, len(b))
    if end < l4 + 12:
        return
    b[l4 + 8 : l4 + 12] = b"\0\0\0\0"
    # SCTP puts the CRC on the wire least significant byte first.
    b[l4 + 8 : l4 + 12] = struct.pack("<I", crc32c(bytes(b[l4:end])))


def _patch(frame: bytes, pos: int, new: bytes, ip_header: bool, l4: str) -> bytes:
    """Write `new` at `pos` and fix the checksums that cover it.

    `ip_header`: the bytes are in the IPv4 header. `l4`: "pseudo" when they
    are in the pseudo-header the L4 checksum covers (addresses), "header"
    when they are in the L4 header itself, "" for neither.
    """
    if pos < 0 or pos + len(new) > len(frame):
        return frame
    version, ip_off, proto, l4_off = _l4(frame)
    b = bytearray(frame)
    start, end = pos & ~1, (pos + len(new) + 1) & ~1
    old_words = bytes(b[start:end])
    b[pos : pos + len(new)] = new
    new_words = bytes(b[start:end])
    if old_words == new_words:
        return frame
    if ip_header and version == 4:
        at = ip_off + 10
        b[at : at + 2] = _U16.pack(_csum_adjust(_U16_AT(b, at)[0], old_words, new_words))
    if l4 and l4_off >= 0:
        if proto == IPPROTO_SCTP:
            if l4 == "header":  # SCTP's CRC does not cover a pseudo-header
                _sctp_fix(b, l4_off, ip_off, version)
            return bytes(b)
        where = _L4_CSUM.get(proto)
        if where is None or (l4 == "pseudo" and not where[1]):
            return bytes(b)
        at = l4_off + where[0]
        if at + 2 > len(b):
            return bytes(b)
        csum = _U16_AT(b, at)[0]
        if proto == IPPROTO_UDP and version == 4 and csum == 0:
            return bytes(b)  # no checksum was computed: none to keep right
        csum = _csum_adjust(csum, old_words, new_words)
        if proto == IPPROTO_UDP and csum == 0:
            csum = 0xFFFF  # RFC 768: a computed zero is sent as all ones
        b[at : at + 2] = _U16.pack(csum)
    return bytes(b)


# ----- IP fields -------------------------------------------------------------------


def _set_tclass(frame: bytes, dscp: int | None, ecn: int | None) -> bytes:
    off = _ipv4_offset(frame)
    if off >= 0:
        tos = frame[off + 1]
        if dscp is not None:
            tos = (dscp & 0x3F) << 2 | (tos & 3)
        if ecn is not None:
            tos = (tos & 0xFC) | (ecn & 3)
        return _patch(frame, off + 1, bytes([tos]), True, "")
    off = _ipv6_offset(frame)
    if off >= 0:
        word = _U32_AT(frame, off)[0]
        tclass = (word >> 20) & 0xFF
        if dscp is not None:
            tclass = (dscp & 0x3F) << 2 | (tclass & 3)
        if ecn is not None:
            tclass = (tclass & 0xFC) | (ecn & 3)
        word = (word & 0xF00FFFFF) | tclass << 20
        return frame[:off] + _U32.pack(word) + frame[off + 4 :]
    return frame


def ip_dscp(frame: bytes) -> int | None:
    """The DSCP of an IPv4 or IPv6 packet, or None."""
    off = _ipv4_offset(frame)
    if off >= 0:
        return frame[off + 1] >> 2
    off = _ipv6_offset(frame)
    if off >= 0:
        return (_U32_AT(frame, off)[0] >> 22) & 0x3F
    return None


def set_ip_dscp(frame: bytes, dscp: int) -> bytes:
    """Rewrite the DSCP (IPv4 TOS or IPv6 traffic class); RoCEv2's ICRC masks it."""
    return _set_tclass(frame, dscp, None)


def set_ip_ecn(frame: bytes, ecn: int) -> bytes:
    """Rewrite the ECN bits (RFC 3168) of IPv4 or IPv6."""
    return _set_tclass(frame, None, ecn)


def set_ip_proto(frame: bytes, proto: int) -> bytes:
    """Rewrite the IPv4 protocol or the IPv6 base header's next header."""
    off = _ipv4_offset(frame)
    if off >= 0:
        return _patch(frame, off + 9, bytes([proto]), True, "")
    off = _ipv6_offset(frame)
    if off >= 0:
        return frame[: off + 6] + bytes([proto]) + frame[off + 7 :]
    return frame


def set_ipv4_addr(frame: bytes, dst: bool, addr: int) -> bytes:
    """Rewrite the IPv4 source or destination; IP and TCP/UDP checksums fixed."""
    off = _ipv4_offset(frame)
    if off < 0:
        return frame
    return _patch(frame, off + (16 if dst else 12), addr.to_bytes(4, "big"), True, "pseudo")


def set_ipv6_addr(frame: bytes, dst: bool, addr: int) -> bytes:
    """Rewrite the IPv6 source or destination; TCP/UDP/ICMPv6 checksums fixed."""
    off = _ipv6_offset(frame)
    if off < 0:
        return frame
    return _patch(frame, off + (24 if dst else 8), addr.to_bytes(16, "big"), False, "pseudo")


def set_ipv6_flabel(frame: bytes, label: int) -> bytes:
    """Rewrite the 20-bit IPv6 flow label (no checksum covers it)."""
    off = _ipv6_offset(frame)
    if off < 0:
        return frame
    word = (_U32_AT(frame, off)[0] & 0xFFF00000) | (label & 0xFFFFF)
    return frame[:off] + _U32.pack(word) + frame[off + 4 :]


def _set_ttl_at(frame: bytes, ttl: int) -> bytes:
    off = _ipv4_offset(frame)
    if off >= 0:
        return _patch(frame, off + 8, bytes([ttl & 0xFF]), True, "")
    off = _ipv6_offset(frame)
    if off >= 0:
        return frame[: off + 7] + bytes([ttl & 0xFF]) + frame[off + 8 :]
    return frame


def _ip_ttl(frame: bytes) -> int | None:
    off = _ipv4_offset(frame)
    if off >= 0:
        return frame[off + 8]
    off = _ipv6_offset(frame)
    if off >= 0:
        return frame[off + 7]
    return None


def set_nw_ttl(frame: bytes, ttl: int) -> bytes:
    """OFPAT_SET_NW_TTL: the IPv4 TTL or the IPv6 hop limit."""
    return _set_ttl_at(frame, ttl)


def dec_nw_ttl(frame: bytes) -> tuple[bytes, bool]:
    """OFPAT_DEC_NW_TTL on IPv4 or IPv6.

    Returns:
        (frame, ok): ok is False when the TTL was already 0 or 1 (OF1.3: the
        packet is dropped). A frame without IP comes back unchanged, ok True.
    """
    ttl = _ip_ttl(frame)
    if ttl is None:
        return frame, True
    if ttl <= 1:
        return frame, False
    return _set_ttl_at(frame, ttl - 1), True


# ----- L4 fields --------------------------------------------------------------------


def _set_l4_port(frame: bytes, protos: tuple, dst: bool, port: int) -> bytes:
    _version, _off, proto, l4 = _l4(frame)
    if l4 < 0 or proto not in protos:
        return frame
    return _patch(frame, l4 + (2 if dst else 0), _U16.pack(port & 0xFFFF), False, "header")


def _set_icmp(frame: bytes, version: int, code: bool, value: int) -> bytes:
    v, _off, proto, l4 = _l4(frame)
    want = IPPROTO_ICMP if version == 4 else IPPROTO_ICMPV6
    if v != version or l4 < 0 or proto != want:
        return frame
    return _patch(frame, l4 + (1 if code else 0), bytes([value & 0xFF]), False, "header")


def _nd(frame: bytes) -> tuple[int, int]:
    """(L4 offset, ICMPv6 type) of a neighbour solicitation/advertisement, or (-1, 0)."""
    v, _off, proto, l4 = _l4(frame)
    if v != 6 or l4 < 0 or proto != IPPROTO_ICMPV6 or len(frame) < l4 + 24:
        return -1, 0
    if frame[l4] not in (ND_SOLICIT, ND_ADVERT):
        return -1, 0
    return l4, frame[l4]


def set_nd_target(frame: bytes, addr: int) -> bytes:
    l4, _kind = _nd(frame)
    if l4 < 0:
        return frame
    return _patch(frame, l4 + 8, addr.to_bytes(16, "big"), False, "header")


def _set_nd_lladdr(frame: bytes, opt_type: int, mac: bytes) -> bytes:
    l4, kind = _nd(frame)
    if l4 < 0 or kind != (ND_SOLICIT if opt_type == 1 else ND_ADVERT):
        return frame
    pos = nd_option(frame, l4, opt_type)
    if pos < 0 or pos + 6 > len(frame):
        return frame
    return _patch(frame, pos, mac, False, "header")


# ----- Ethernet, ARP, VLAN ------------------------------------------------------------


def set_eth_dst(frame: bytes, mac: bytes) -> bytes:
    """Rewrite the destination MAC (6 bytes)."""
    return mac + frame[6:]


def set_eth_src(frame: bytes, mac: bytes) -> bytes:
    """Rewrite the source MAC (6 bytes)."""
    return frame[:6] + mac + frame[12:]


def set_eth_type(frame: bytes, eth_type: int) -> bytes:
    """Rewrite the EtherType behind the outer tag (the one eth_type matches)."""
    off = l3_offset(frame)
    if len(frame) < off:
        return frame
    return frame[: off - 2] + _U16.pack(eth_type & 0xFFFF) + frame[off:]


_ARP_FIELDS = {"arp_op": (6, 2), "arp_sha": (8, 6), "arp_spa": (14, 4)}
_ARP_FIELDS.update({"arp_tha": (18, 6), "arp_tpa": (24, 4)})


def _set_arp(name: str) -> Callable[[bytes, bytes], bytes]:
    at, size = _ARP_FIELDS[name]

    def set_arp(frame: bytes, value: bytes) -> bytes:
        off = l3_offset(frame)
        if len(frame) < off + 28 or _U16_AT(frame, off - 2)[0] != 0x0806:
            return frame
        return frame[: off + at] + value[-size:] + frame[off + at + size :]

    return set_arp


def push_vlan(frame: bytes, tpid: int = 0x8100) -> bytes:
    """Push an 802.1Q/802.1ad tag; OF1.3 copies VID/PCP from an existing tag, else 0."""
    if len(frame) < 14:
        return frame
    tci = 0
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in VLAN_TYPES:
        tci = _U16_AT(frame, 14)[0]
    return frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]


def pop_vlan(frame: bytes, _arg: object = None) -> bytes:
    """Pop the outermost tag; untagged frames come back unchanged."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in VLAN_TYPES:
        return _padded(frame[:12] + frame[16:])
    return frame


def set_vlan_vid(frame: bytes, vid: int) -> bytes:
    """Rewrite the VID of the outermost tag (no-op when untagged)."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in VLAN_TYPES:
        tci = (_U16_AT(frame, 14)[0] & 0xF000) | (vid & 0x0FFF)
        return frame[:14] + _U16.pack(tci) + frame[16:]
    return frame


def set_vlan_pcp(frame: bytes, pcp: int) -> bytes:
    """Rewrite the PCP of the outermost tag (no-op when untagged)."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in VLAN_TYPES:
        tci = (_U16_AT(frame, 14)[0] & 0x1FFF) | ((pcp & 7) << 13)
        return frame[:14] + _U16.pack(tci) + frame[16:]
    return frame


# ----- MPLS ------------------------------------------------------------------------------


def _mpls_offset(frame: bytes) -> int:
    off = l3_offset(frame)
    if len(frame) < off + 4 or _U16_AT(frame, off - 2)[0] not in MPLS_TYPES:
        return -1
    return off


def _set_lse(frame: bytes, mask: int, value: int) -> bytes:
    off = _mpls_offset(frame)
    if off < 0:
        return frame
    lse = (_U32_AT(frame, off)[0] & ~mask) | (value & mask)
    return frame[:off] + _U32.pack(lse & 0xFFFFFFFF) + frame[off + 4 :]


def set_mpls_label(frame: bytes, label: int) -> bytes:
    return _set_lse(frame, 0xFFFFF000, (label & 0xFFFFF) << 12)


def set_mpls_tc(frame: bytes, tc: int) -> bytes:
    return _set_lse(frame, 0x00000E00, (tc & 7) << 9)


def set_mpls_bos(frame: bytes, bos: int) -> bytes:
    return _set_lse(frame, 0x00000100, (bos & 1) << 8)


def set_mpls_ttl(frame: bytes, ttl: int) -> bytes:
    """OFPAT_SET_MPLS_TTL on the outermost label."""
    return _set_lse(frame, 0xFF, ttl & 0xFF)


def dec_mpls_ttl(frame: bytes) -> tuple[bytes, bool]:
    """OFPAT_DEC_MPLS_TTL: (frame, ok); ok False when the TTL was 0 or 1 (dropped)."""
    off = _mpls_offset(frame)
    if off < 0:
        return frame, True
    ttl = frame[off + 3]
    if ttl <= 1:
        return frame, False
    return frame[: off + 3] + bytes([ttl - 1]) + frame[off + 4 :], True


def _inner_ttl(frame: bytes, off: int) -> tuple[int, int]:
    """(offset of the TTL byte next-to-outermost behind the MPLS label at `off`, kind).

    kind: 1 an inner label, 4 IPv4, 6 IPv6, 0 none. Behind the bottom of the
    stack the payload's first nibble says which IP it is (RFC 3032 has no
    type field; OVS and Linux guess the same way).
    """
    lse = _U32_AT(frame, off)[0]
    inner = off + 4
    if not lse & 0x100:
        return (inner + 3, 1) if len(frame) >= inner + 4 else (-1, 0)
    if len(frame) >= inner + 20 and frame[inner] >> 4 == 4:
        return inner + 8, 4
    if len(frame) >= inner + 40 and frame[inner] >> 4 == 6:
        return inner + 7, 6
    return -1, 0


def copy_ttl_out(frame: bytes, _arg: object = None) -> bytes:
    """OFPAT_COPY_TTL_OUT: the next-to-outermost TTL into the outermost label."""
    off = _mpls_offset(frame)
    if off < 0:
        return frame
    at, _kind = _inner_ttl(frame, off)
    if at < 0:
        return frame
    return frame[: off + 3] + frame[at : at + 1] + frame[off + 4 :]


def copy_ttl_in(frame: bytes, _arg: object = None) -> bytes:
    """OFPAT_COPY_TTL_IN: the outermost label's TTL into the next-to-outermost header."""
    off = _mpls_offset(frame)
    if off < 0:
        return frame
    at, kind = _inner_ttl(frame, off)
    if at < 0:
        return frame
    b = bytearray(frame)
    ttl = frame[off + 3]
    if kind == 4:
        ip = off + 4
        old = bytes(b[ip + 8 : ip + 10])
        b[at] = ttl
        csum = _csum_adjust(_U16_AT(b, ip + 10)[0], old, bytes(b[ip + 8 : ip + 10]))
        b[ip + 10 : ip + 12] = _U16.pack(csum)
    else:
        b[at] = ttl
    return bytes(b)


def push_mpls(frame: bytes, eth_type: int) -> bytes:
    """OFPAT_PUSH_MPLS behind any VLAN tag (OF1.3 5.12.1's copy rules)."""
    off = l3_offset(frame)
    if len(frame) < off:
        return frame
    inner = _U16_AT(frame, off - 2)[0]
    if inner in MPLS_TYPES and len(frame) >= off + 4:
        lse = _U32_AT(frame, off)[0] & ~0x100  # label, TC and TTL copied; not the bottom
    else:
        ttl = _ip_ttl(frame) or 0
        lse = 0x100 | ttl  # label 0, TC 0, bottom of stack, TTL from IP (else 0)
    return frame[: off - 2] + _U16.pack(eth_type) + _U32.pack(lse) + frame[off:]


def pop_mpls(frame: bytes, eth_type: int) -> bytes:
    """OFPAT_POP_MPLS: drop the outermost label; `eth_type` names what is behind it."""
    off = _mpls_offset(frame)
    if off < 0:
        return frame
    return _padded(frame[: off - 2] + _U16.pack(eth_type) + frame[off + 4 :])


# ----- PBB (802.1ah) ---------------------------------------------------------------------


def push_pbb(frame: bytes, eth_type: int = ETH_TYPE_PBB) -> bytes:
    """OFPAT_PUSH_PBB: a backbone header whose B-DA/B-SA start as the customer's MACs.

    The I-TAG's PCP comes from the outer VLAN tag and its I-SID from an
    existing I-TAG, else 0 (OF1.3 5.12.1); C-DA/C-SA are the old MACs.
    """
    if len(frame) < 14:
        return frame
    outer = _U16_AT(frame, 12)[0]
    isid, pcp = 0, 0
    if outer in VLAN_TYPES and len(frame) >= 18:
        pcp = frame[14] >> 5
    elif outer == ETH_TYPE_PBB and len(frame) >= 18:
        isid = _U32_AT(frame, 14)[0] & 0xFFFFFF
    itag = _U32.pack(pcp << 29 | isid)
    return frame[:12] + _U16.pack(eth_type) + itag + frame[:12] + frame[12:]


def pop_pbb(frame: bytes, _arg: object = None) -> bytes:
    """OFPAT_POP_PBB: the customer frame behind the I-TAG."""
    if len(frame) >= 30 and _U16_AT(frame, 12)[0] == ETH_TYPE_PBB:
        return _padded(frame[18:])
    return frame


def set_pbb_isid(frame: bytes, isid: int) -> bytes:
    off = l3_offset(frame)
    if len(frame) < off + 4 or _U16_AT(frame, off - 2)[0] != ETH_TYPE_PBB:
        return frame
    itag = (_U32_AT(frame, off)[0] & 0xFF000000) | (isid & 0xFFFFFF)
    return frame[:off] + _U32.pack(itag) + frame[off + 4 :]


# ----- set-field -------------------------------------------------------------------------


def _mac(value: int) -> bytes:
    return value.to_bytes(6, "big")


# OXM field -> (rewrite(frame, arg), how the field's integer value becomes arg).
# Not here: in_port, in_phy_port and metadata (not header fields; metadata has
# its own instruction), ipv6_exthdr (a pseudo-field) and tunnel_id (pipeline
# state, handled by pipeline.py).
SET_FIELD: dict[str, tuple[Callable, Callable[[int], object]]] = {
    "eth_dst": (set_eth_dst, _mac),
    "eth_src": (set_eth_src, _mac),
    "eth_type": (set_eth_type, int),
    "vlan_vid": (set_vlan_vid, lambda v: v & 0xFFF),
    "vlan_pcp": (set_vlan_pcp, lambda v: v & 7),
    "ip_dscp": (set_ip_dscp, lambda v: v & 0x3F),
    "ip_ecn": (set_ip_ecn, lambda v: v & 3),
    "ip_proto": (set_ip_proto, lambda v: v & 0xFF),
    "ipv4_src": (lambda f, a: set_ipv4_addr(f, False, a), int),
    "ipv4_dst": (lambda f, a: set_ipv4_addr(f, True, a), int),
    "tcp_src": (lambda f, a: _set_l4_port(f, (IPPROTO_TCP,), False, a), int),
    "tcp_dst": (lambda f, a: _set_l4_port(f, (IPPROTO_TCP,), True, a), int),
    "udp_src": (lambda f, a: _set_l4_port(f, (IPPROTO_UDP,), False, a), int),
    "udp_dst": (lambda f, a: _set_l4_port(f, (IPPROTO_UDP,), True, a), int),
    "sctp_src": (lambda f, a: _set_l4_port(f, (IPPROTO_SCTP,), False, a), int),
    "sctp_dst": (lambda f, a: _set_l4_port(f, (IPPROTO_SCTP,), True, a), int),
    "icmpv4_type": (lambda f, a: _set_icmp(f, 4, False, a), int),
    "icmpv4_code": (lambda f, a: _set_icmp(f, 4, True, a), int),
    "arp_op": (_set_arp("arp_op"), lambda v: v.to_bytes(2, "big")),
    "arp_spa": (_set_arp("arp_spa"), lambda v: v.to_bytes(4, "big")),
    "arp_tpa": (_set_arp("arp_tpa"), lambda v: v.to_bytes(4, "big")),
    "arp_sha": (_set_arp("arp_sha"), _mac),
    "arp_tha": (_set_arp("arp_tha"), _mac),
    "ipv6_src": (lambda f, a: set_ipv6_addr(f, False, a), int),
    "ipv6_dst": (lambda f, a: set_ipv6_addr(f, True, a), int),
    "ipv6_flabel": (set_ipv6_flabel, int),
    "icmpv6_type": (lambda f, a: _set_icmp(f, 6, False, a), int),
    "icmpv6_code": (lambda f, a: _set_icmp(f, 6, True, a), int),
    "ipv6_nd_target": (set_nd_target, int),
    "ipv6_nd_sll": (lambda f, a: _set_nd_lladdr(f, 1, a), _mac),
    "ipv6_nd_tll": (lambda f, a: _set_nd_lladdr(f, 2, a), _mac),
    "mpls_label": (set_mpls_label, int),
    "mpls_tc": (set_mpls_tc, int),
    "mpls_bos": (set_mpls_bos, int),
    "pbb_isid": (set_pbb_isid, int),
}
