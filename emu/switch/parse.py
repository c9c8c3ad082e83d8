"""Header extraction for the switch's per-packet path: the match key of a frame.

Owns the byte-level view of an Ethernet frame that the pipeline matches on:
`extract_key` reads every OpenFlow 1.3 basic match field (Ethernet, one VLAN
tag, IPv4, IPv6 with its extension-header chain, TCP/UDP/SCTP, ICMPv4/v6 and
neighbour discovery, ARP, MPLS, PBB), and `cache_key` is its cheap stand-in
for the common TCP/UDP-over-IPv4 frame. Pure functions over `bytes`: no Scapy,
no sockets; tests dissect frames with Scapy.

Does not own: rewriting frames (`rewrite.py`), matching semantics
(`pipeline.py`, `match.py`) or OpenFlow encoding (`ofcodec.py`).

Key layout (`extract_key` returns a tuple indexed by the K_* constants):
integers everywhere (MACs, IPv4 and IPv6 addresses as big-endian ints) so that
masked matching is `value & mask == want`; None where the header is absent.
`vlan_vid` follows the OXM convention: OFPVID_PRESENT | vid when tagged,
OFPVID_NONE (0) when untagged, so a match on OFPVID_NONE is a plain compare.
"""

from __future__ import annotations

import struct

ETH_TYPE_IP = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_VLAN = 0x8100
ETH_TYPE_QINQ = 0x88A8
ETH_TYPE_IPV6 = 0x86DD
ETH_TYPE_MPLS = 0x8847
ETH_TYPE_MPLS_MCAST = 0x8848
ETH_TYPE_PBB = 0x88E7
MPLS_TYPES = (ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST)
VLAN_TYPES = (ETH_TYPE_VLAN, ETH_TYPE_QINQ)
IPPROTO_ICMP = 1
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_SCTP = 132
IPPROTO_ICMPV6 = 58
OFPVID_PRESENT = 0x1000
OFPVID_NONE = 0x0000

# The ipv6_exthdr pseudo-field's bits (OF1.3 7.2.3.8, enum ofp_ipv6exthdr_flags).
IEH_NONEXT, IEH_ESP, IEH_AUTH, IEH_DEST, IEH_FRAG = 1, 2, 4, 8, 16
IEH_ROUTER, IEH_HOP, IEH_UNREP, IEH_UNSEQ = 32, 64, 128, 256
# IPv6 extension headers: next-header value -> (flag, rank in RFC 2460 4.1's
# recommended order; the Destination Options header has two places).
_EXT_HEADERS = {
    0: (IEH_HOP, 0),
    60: (IEH_DEST, 1),
    43: (IEH_ROUTER, 2),
    44: (IEH_FRAG, 3),
    51: (IEH_AUTH, 4),
    50: (IEH_ESP, 5),
}
ND_SOLICIT, ND_ADVERT = 135, 136

(
    K_IN_PORT,
    K_ETH_DST,
    K_ETH_SRC,
    K_ETH_TYPE,
    K_VLAN_VID,
    K_VLAN_PCP,
    K_IP_DSCP,
    K_IP_ECN,
    K_IP_PROTO,
    K_IPV4_SRC,
    K_IPV4_DST,
    K_TCP_SRC,
    K_TCP_DST,
    K_UDP_SRC,
    K_UDP_DST,
    K_ICMPV4_TYPE,
    K_ICMPV4_CODE,
    K_ARP_OP,
    K_ARP_SPA,
    K_ARP_TPA,
    K_ARP_SHA,
    K_ARP_THA,
    K_IN_PHY_PORT,
    K_SCTP_SRC,
    K_SCTP_DST,
    K_IPV6_SRC,
    K_IPV6_DST,
    K_IPV6_FLABEL,
    K_ICMPV6_TYPE,
    K_ICMPV6_CODE,
    K_IPV6_ND_TARGET,
    K_IPV6_ND_SLL,
    K_IPV6_ND_TLL,
    K_MPLS_LABEL,
    K_MPLS_TC,
    K_MPLS_BOS,
    K_PBB_ISID,
    K_TUNNEL_ID,
    K_IPV6_EXTHDR,
) = range(39)
KEY_LEN = 39

# OXM field name -> key index; the pipeline compiles matches with this.
# (metadata is pipeline state, not a header: the pipeline keeps it apart.)
FIELD_INDEX: dict[str, int] = {
    "in_port": K_IN_PORT,
    "in_phy_port": K_IN_PHY_PORT,
    "eth_dst": K_ETH_DST,
    "eth_src": K_ETH_SRC,
    "eth_type": K_ETH_TYPE,
    "vlan_vid": K_VLAN_VID,
    "vlan_pcp": K_VLAN_PCP,
    "ip_dscp": K_IP_DSCP,
    "ip_ecn": K_IP_ECN,
    "ip_proto": K_IP_PROTO,
    "ipv4_src": K_IPV4_SRC,
    "ipv4_dst": K_IPV4_DST,
    "tcp_src": K_TCP_SRC,
    "tcp_dst": K_TCP_DST,
    "udp_src": K_UDP_SRC,
    "udp_dst": K_UDP_DST,
    "sctp_src": K_SCTP_SRC,
    "sctp_dst": K_SCTP_DST,
    "icmpv4_type": K_ICMPV4_TYPE,
    "icmpv4_code": K_ICMPV4_CODE,
    "arp_op": K_ARP_OP,
    "arp_spa": K_ARP_SPA,
    "arp_tpa": K_ARP_TPA,
    "arp_sha": K_ARP_SHA,
    "arp_tha": K_ARP_THA,
    "ipv6_src": K_IPV6_SRC,
    "ipv6_dst": K_IPV6_DST,
    "ipv6_flabel": K_IPV6_FLABEL,
    "icmpv6_type": K_ICMPV6_TYPE,
    "icmpv6_code": K_ICMPV6_CODE,
    "ipv6_nd_target": K_IPV6_ND_TARGET,
    "ipv6_nd_sll": K_IPV6_ND_SLL,
    "ipv6_nd_tll": K_IPV6_ND_TLL,
    "mpls_label": K_MPLS_LABEL,
    "mpls_tc": K_MPLS_TC,
    "mpls_bos": K_MPLS_BOS,
    "pbb_isid": K_PBB_ISID,
    "tunnel_id": K_TUNNEL_ID,
    "ipv6_exthdr": K_IPV6_EXTHDR,
}

_U16 = struct.Struct("!H")
_U16_AT = _U16.unpack_from
_II = struct.Struct("!II").unpack_from
_I = struct.Struct("!I").unpack_from
_HH = struct.Struct("!HH").unpack_from
_BB = struct.Struct("!BB").unpack_from
_from_bytes = int.from_bytes


def extract_key(frame: bytes, in_port: int) -> tuple:
    """Extract the OpenFlow 1.3 match fields of an Ethernet frame.

    Args:
        frame: the whole frame, starting at the destination MAC.
        in_port: the OpenFlow port it arrived on (also in_phy_port: every
            emu port is physical).

    Returns:
        A tuple of KEY_LEN items indexed by the K_* constants. Fields of headers
        that are absent or truncated are None; tunnel_id is 0 (no port of emu
        is a tunnel). Never raises on short input.
    """
    k: list = [None] * KEY_LEN
    k[K_IN_PORT] = k[K_IN_PHY_PORT] = in_port
    k[K_VLAN_VID] = OFPVID_NONE
    k[K_TUNNEL_ID] = 0
    n = len(frame)
    if n >= 6:
        k[K_ETH_DST] = _from_bytes(frame[0:6], "big")
    if n >= 12:
        k[K_ETH_SRC] = _from_bytes(frame[6:12], "big")
    if n < 14:
        return tuple(k)
    eth_type = _U16_AT(frame, 12)[0]
    off = 14
    if eth_type == ETH_TYPE_VLAN or eth_type == ETH_TYPE_QINQ:
        if n < 18:
            return tuple(k)
        tci, eth_type = _HH(frame, 14)
        k[K_VLAN_VID] = OFPVID_PRESENT | (tci & 0x0FFF)
        k[K_VLAN_PCP] = tci >> 13
        off = 18
    k[K_ETH_TYPE] = eth_type
    if eth_type == ETH_TYPE_IP:
        _ipv4_fields(frame, off, k)
    elif eth_type == ETH_TYPE_IPV6:
        _ipv6_fields(frame, off, k)
    elif eth_type == ETH_TYPE_ARP:
        if n >= off + 28:
            k[K_ARP_OP] = _U16_AT(frame, off + 6)[0]
            k[K_ARP_SHA] = _from_bytes(frame[off + 8 : off + 14], "big")
            k[K_ARP_SPA] = _I(frame, off + 14)[0]
            k[K_ARP_THA] = _from_bytes(frame[off + 18 : off + 24], "big")
            k[K_ARP_TPA] = _I(frame, off + 24)[0]
    elif eth_type in MPLS_TYPES:
        if n >= off + 4:
            lse = _I(frame, off)[0]
            k[K_MPLS_LABEL] = lse >> 12
            k[K_MPLS_TC] = (lse >> 9) & 7
            k[K_MPLS_BOS] = (lse >> 8) & 1
    elif eth_type == ETH_TYPE_PBB:
        if n >= off + 4:
            k[K_PBB_ISID] = _I(frame, off)[0] & 0xFFFFFF
    return tuple(k)


def _l4_ports(frame: bytes, l4: int, proto: int, k: list) -> None:
    """TCP/UDP/SCTP ports and ICMPv4 type/code of an unfragmented packet."""
    n = len(frame)
    if proto == IPPROTO_UDP:
        if n >= l4 + 4:
            k[K_UDP_SRC], k[K_UDP_DST] = _HH(frame, l4)
    elif proto == IPPROTO_TCP:
        if n >= l4 + 4:
            k[K_TCP_SRC], k[K_TCP_DST] = _HH(frame, l4)
    elif proto == IPPROTO_SCTP:
        if n >= l4 + 4:
            k[K_SCTP_SRC], k[K_SCTP_DST] = _HH(frame, l4)


def _ipv4_fields(frame: bytes, off: int, k: list) -> None:
    n = len(frame)
    if n < off + 20:
        return
    vihl, tos = _BB(frame, off)
    if vihl >> 4 != 4:
        return
    proto = frame[off + 9]
    k[K_IP_DSCP], k[K_IP_ECN], k[K_IP_PROTO] = tos >> 2, tos & 3, proto
    k[K_IPV4_SRC], k[K_IPV4_DST] = _II(frame, off + 12)
    l4 = off + (vihl & 0x0F) * 4
    # A later fragment carries no L4 header: its ports are absent, not its payload.
    if _U16_AT(frame, off + 6)[0] & 0x1FFF or (vihl & 0x0F) < 5:
        return
    if proto == IPPROTO_ICMP:
        if n >= l4 + 2:
            k[K_ICMPV4_TYPE], k[K_ICMPV4_CODE] = _BB(frame, l4)
    else:
        _l4_ports(frame, l4, proto, k)


def _ipv6_fields(frame: bytes, off: int, k: list) -> None:
    n = len(frame)
    if n < off + 40:
        return
    word = _I(frame, off)[0]
    if word >> 28 != 6:
        return
    tclass = (word >> 20) & 0xFF
    k[K_IP_DSCP], k[K_IP_ECN] = tclass >> 2, tclass & 3
    k[K_IPV6_FLABEL] = word & 0xFFFFF
    k[K_IPV6_SRC] = _from_bytes(frame[off + 8 : off + 24], "big")
    k[K_IPV6_DST] = _from_bytes(frame[off + 24 : off + 40], "big")
    proto, l4, exthdr, first_fragment = ipv6_upper_layer(frame, off)
    k[K_IP_PROTO] = proto
    k[K_IPV6_EXTHDR] = exthdr
    if l4 < 0 or not first_fragment:
        return
    if proto == IPPROTO_ICMPV6:
        if n < l4 + 2:
            return
        icmp_type, code = _BB(frame, l4)
        k[K_ICMPV6_TYPE], k[K_ICMPV6_CODE] = icmp_type, code
        if icmp_type in (ND_SOLICIT, ND_ADVERT) and n >= l4 + 24:
            k[K_IPV6_ND_TARGET] = _from_bytes(frame[l4 + 8 : l4 + 24], "big")
            want = 1 if icmp_type == ND_SOLICIT else 2  # source / target link-layer address
            opt = nd_option(frame, l4, want)
            # Absent options match as all zeros, as OVS reads them (nicira-ext.h).
            mac = _from_bytes(frame[opt : opt + 6], "big") if opt >= 0 else 0
            k[K_IPV6_ND_SLL if want == 1 else K_IPV6_ND_TLL] = mac
    else:
        _l4_ports(frame, l4, proto, k)


def ipv6_upper_layer(frame: bytes, off: int) -> tuple[int, int, int, bool]:
    """Walk an IPv6 packet's extension headers (RFC 8200 4).

    Returns:
        (upper-layer protocol, its offset or -1 when the chain is cut short or
        ends in ESP/no-next-header, the ipv6_exthdr flags, whether this is the
        first fragment or no fragment).
    """
    n = len(frame)
    nh = frame[off + 6]
    pos = off + 40
    flags = 0
    last_rank = -1
    seen: set = set()
    first_fragment = True
    while True:
        if nh == 59:
            return nh, -1, flags | IEH_NONEXT, first_fragment
        ext = _EXT_HEADERS.get(nh)
        if ext is None:
            return nh, pos, flags, first_fragment
        flag, rank = ext
        if flag == IEH_DEST and last_rank >= 2:
            rank = 6  # past the routing header's place: the final Destination Options
        if rank in seen:
            flags |= IEH_UNREP
        if rank < last_rank:
            flags |= IEH_UNSEQ
        seen.add(rank)
        last_rank = max(last_rank, rank)
        flags |= flag
        if flag == IEH_ESP:
            return nh, -1, flags, first_fragment  # the rest is encrypted
        if n < pos + 8:
            return nh, -1, flags, first_fragment
        if flag == IEH_FRAG:
            first_fragment = first_fragment and _U16_AT(frame, pos + 2)[0] & 0xFFF8 == 0
            size = 8
        elif flag == IEH_AUTH:
            size = (frame[pos + 1] + 2) * 4
        else:
            size = (frame[pos + 1] + 1) * 8
        nh = frame[pos]
        pos += size


def nd_option(frame: bytes, l4: int, opt_type: int) -> int:
    """Offset of the link-layer address in a neighbour discovery option, or -1."""
    pos = l4 + 24
    n = len(frame)
    while pos + 8 <= n:
        length = frame[pos + 1] * 8
        if length == 0:
            return -1  # RFC 4861 4.6: a zero-length option is invalid
        if frame[pos] == opt_type:
            return pos + 2
        pos += length
    return -1


_IPV4_NO_OPTIONS = b"\x08\x00\x45"  # ethertype IPv4, version 4, header of 5 words


def cache_key(frame: bytes, in_port: int) -> tuple:
    """A key that determines `extract_key(frame, in_port)`, cheaper to compute.

    For TCP and UDP in untagged IPv4 without options or fragmentation, which is
    nearly every data frame, it is the bytes `extract_key` reads (Ethernet,
    version and TOS, fragment field, TTL and protocol, addresses and ports)
    without the ones that change per packet (total length, id, checksum): 4
    slices instead of parsing 16 fields. Any other frame falls back to
    `extract_key` itself (a longer tuple, so the two kinds never collide): an
    ICMP echo's bytes 34-38 hold its checksum and a later fragment's hold
    payload, and keyed on them every such packet would miss the cache.
    """
    if (
        len(frame) >= 38
        and frame[12:15] == _IPV4_NO_OPTIONS
        and (frame[23] == IPPROTO_TCP or frame[23] == IPPROTO_UDP)
        and not (frame[20] & 0x1F or frame[21])
    ):
        return (in_port, frame[:16], frame[20:24], frame[26:38])
    return extract_key(frame, in_port)
