"""Header extraction and header rewriting for the switch's per-packet path.

Owns the byte-level view of an Ethernet frame that the pipeline matches on
(`extract_key`) and the in-place-style rewrites that OpenFlow actions perform
(set DSCP/ECN, decrement TTL, push/pop VLAN, set MAC addresses). Pure
functions over `bytes`: no Scapy, no sockets; tests dissect results with Scapy.

Does not own: matching semantics (`pipeline.py`) or OpenFlow encoding
(`openflow.py`). Called by `pipeline.py` only.

Key layout (`extract_key` returns a tuple indexed by the K_* constants):
integers everywhere (MACs and IPv4 addresses as big-endian ints) so that masked
matching is `value & mask == want`; None where the header is absent.
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
IPPROTO_ICMP = 1
IPPROTO_TCP = 6
IPPROTO_UDP = 17
OFPVID_PRESENT = 0x1000
OFPVID_NONE = 0x0000

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
) = range(22)
KEY_LEN = 22

# OXM field name -> key index; the pipeline compiles matches with this.
FIELD_INDEX: dict[str, int] = {
    "in_port": K_IN_PORT,
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
    "icmpv4_type": K_ICMPV4_TYPE,
    "icmpv4_code": K_ICMPV4_CODE,
    "arp_op": K_ARP_OP,
    "arp_spa": K_ARP_SPA,
    "arp_tpa": K_ARP_TPA,
    "arp_sha": K_ARP_SHA,
    "arp_tha": K_ARP_THA,
}

_U16 = struct.Struct("!H")
_U16_AT = _U16.unpack_from
_II = struct.Struct("!II").unpack_from
_I = struct.Struct("!I").unpack_from
_HH = struct.Struct("!HH").unpack_from
_BB = struct.Struct("!BB").unpack_from
_from_bytes = int.from_bytes

_NONE10 = (None,) * 10


def extract_key(frame: bytes, in_port: int) -> tuple:
    """Extract the OpenFlow match fields of an Ethernet frame.

    Args:
        frame: the whole frame, starting at the destination MAC.
        in_port: the OpenFlow port it arrived on.

    Returns:
        A tuple of KEY_LEN items indexed by the K_* constants. Fields of headers
        that are absent or truncated are None. Never raises on short input.
    """
    n = len(frame)
    if n < 14:
        dst = _from_bytes(frame[0:6], "big") if n >= 6 else None
        src = _from_bytes(frame[6:12], "big") if n >= 12 else None
        return (in_port, dst, src, None, OFPVID_NONE, None) + _NONE10 + (None,) * 6
    dst = _from_bytes(frame[0:6], "big")
    src = _from_bytes(frame[6:12], "big")
    eth_type = _U16_AT(frame, 12)[0]
    off = 14
    vid = OFPVID_NONE
    pcp = None
    if eth_type == ETH_TYPE_VLAN or eth_type == ETH_TYPE_QINQ:
        if n < 18:
            return (in_port, dst, src, None, OFPVID_NONE, None) + _NONE10 + (None,) * 6
        tci, eth_type = _HH(frame, 14)
        vid = OFPVID_PRESENT | (tci & 0x0FFF)
        pcp = tci >> 13
        off = 18
    if eth_type == ETH_TYPE_IP:
        if n < off + 20:
            return (in_port, dst, src, eth_type, vid, pcp) + _NONE10 + (None,) * 6
        vihl, tos = _BB(frame, off)
        proto = frame[off + 9]
        ip_src, ip_dst = _II(frame, off + 12)
        l4 = off + (vihl & 0x0F) * 4
        frag = _U16_AT(frame, off + 6)[0] & 0x1FFF
        ts = td = us = ud = it = ic = None
        if frag == 0 and (vihl & 0x0F) >= 5:
            if proto == IPPROTO_UDP:
                if n >= l4 + 4:
                    us, ud = _HH(frame, l4)
            elif proto == IPPROTO_TCP:
                if n >= l4 + 4:
                    ts, td = _HH(frame, l4)
            elif proto == IPPROTO_ICMP:
                if n >= l4 + 2:
                    it, ic = _BB(frame, l4)
        return (
            in_port,
            dst,
            src,
            eth_type,
            vid,
            pcp,
            tos >> 2,
            tos & 3,
            proto,
            ip_src,
            ip_dst,
            ts,
            td,
            us,
            ud,
            it,
            ic,
            None,
            None,
            None,
            None,
            None,
        )
    if eth_type == ETH_TYPE_ARP:
        if n < off + 28:
            return (in_port, dst, src, eth_type, vid, pcp) + _NONE10 + (None,) * 6
        op = _U16_AT(frame, off + 6)[0]
        sha = _from_bytes(frame[off + 8 : off + 14], "big")
        spa = _I(frame, off + 14)[0]
        tha = _from_bytes(frame[off + 18 : off + 24], "big")
        tpa = _I(frame, off + 24)[0]
        return (in_port, dst, src, eth_type, vid, pcp) + _NONE10 + (None, op, spa, tpa, sha, tha)
    return (in_port, dst, src, eth_type, vid, pcp) + _NONE10 + (None,) * 6


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


def l3_offset(frame: bytes) -> int:
    """Offset of the L3 header: 18 behind one 802.1Q tag, else 14."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in (ETH_TYPE_VLAN, ETH_TYPE_QINQ):
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


def _csum_update(csum: int, old_word: int, new_word: int) -> int:
    """RFC 1624 eqn. 3 incremental update: HC' = ~(~HC + ~m + m')."""
    s = (~csum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4_checksum(header: bytes) -> int:
    """The IPv4 header checksum of `header` with its checksum field zeroed."""
    h = bytearray(header)
    h[10:12] = b"\x00\x00"
    if len(h) % 2:
        h.append(0)
    s = sum(struct.unpack("!%dH" % (len(h) // 2), h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _set_tos(frame: bytes, off: int, tos: int) -> bytes:
    old_word = _U16_AT(frame, off)[0]
    new_word = (old_word & 0xFF00) | tos
    if new_word == old_word:
        return frame
    csum = _csum_update(_U16_AT(frame, off + 10)[0], old_word, new_word)
    b = bytearray(frame)
    b[off + 1] = tos
    b[off + 10 : off + 12] = _U16.pack(csum)
    return bytes(b)


def set_ip_dscp(frame: bytes, dscp: int) -> bytes:
    """Rewrite the IPv4 DSCP, fixing only the IPv4 header checksum.

    RoCEv2's ICRC masks the tos byte, so nothing else needs fixing. Frames
    without an IPv4 header are returned unchanged.
    """
    off = _ipv4_offset(frame)
    if off < 0:
        return frame
    return _set_tos(frame, off, ((dscp & 0x3F) << 2) | (frame[off + 1] & 0x03))


def set_ip_ecn(frame: bytes, ecn: int) -> bytes:
    """Rewrite the IPv4 ECN bits (RFC 3168), fixing the IPv4 header checksum."""
    off = _ipv4_offset(frame)
    if off < 0:
        return frame
    return _set_tos(frame, off, (frame[off + 1] & 0xFC) | (ecn & 0x03))


def dec_ip_ttl(frame: bytes) -> tuple[bytes, bool]:
    """Decrement the IPv4 TTL with an incremental checksum fix.

    Returns:
        (frame, ok): ok is False when the TTL was already 0 or 1 (OF1.3: the
        packet is then dropped, or sent to the controller if so configured).
        Non-IPv4 frames come back unchanged with ok True.
    """
    off = _ipv4_offset(frame)
    if off < 0:
        return frame, True
    ttl = frame[off + 8]
    if ttl <= 1:
        return frame, False
    old_word = _U16_AT(frame, off + 8)[0]
    new_word = old_word - 0x100
    csum = _csum_update(_U16_AT(frame, off + 10)[0], old_word, new_word)
    b = bytearray(frame)
    b[off + 8] = ttl - 1
    b[off + 10 : off + 12] = _U16.pack(csum)
    return bytes(b), True


def set_ipv4_addr(frame: bytes, dst: bool, addr: int) -> bytes:
    """Rewrite the IPv4 source or destination; header checksum recomputed.

    L4 checksums are left alone (optional action, documented limitation).
    """
    off = _ipv4_offset(frame)
    if off < 0:
        return frame
    pos = off + (16 if dst else 12)
    b = bytearray(frame)
    b[pos : pos + 4] = addr.to_bytes(4, "big")
    ihl = (b[off] & 0x0F) * 4
    b[off + 10 : off + 12] = _U16.pack(ipv4_checksum(bytes(b[off : off + ihl])))
    return bytes(b)


def set_eth_dst(frame: bytes, mac: bytes) -> bytes:
    """Rewrite the destination MAC (6 bytes)."""
    return mac + frame[6:]


def set_eth_src(frame: bytes, mac: bytes) -> bytes:
    """Rewrite the source MAC (6 bytes)."""
    return frame[:6] + mac + frame[12:]


def push_vlan(frame: bytes, tpid: int = ETH_TYPE_VLAN) -> bytes:
    """Push an 802.1Q tag; OF1.3 copies VID/PCP from an existing tag, else 0."""
    if len(frame) < 14:
        return frame
    tci = 0
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in (ETH_TYPE_VLAN, ETH_TYPE_QINQ):
        tci = _U16_AT(frame, 14)[0]
    return frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]


def pop_vlan(frame: bytes) -> bytes:
    """Pop the outermost 802.1Q tag; untagged frames come back unchanged."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in (ETH_TYPE_VLAN, ETH_TYPE_QINQ):
        return frame[:12] + frame[16:]
    return frame


def set_vlan_vid(frame: bytes, vid: int) -> bytes:
    """Rewrite the VID of the outermost tag (no-op when untagged)."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in (ETH_TYPE_VLAN, ETH_TYPE_QINQ):
        tci = (_U16_AT(frame, 14)[0] & 0xF000) | (vid & 0x0FFF)
        return frame[:14] + _U16.pack(tci) + frame[16:]
    return frame


def set_vlan_pcp(frame: bytes, pcp: int) -> bytes:
    """Rewrite the PCP of the outermost tag (no-op when untagged)."""
    if len(frame) >= 18 and _U16_AT(frame, 12)[0] in (ETH_TYPE_VLAN, ETH_TYPE_QINQ):
        tci = (_U16_AT(frame, 14)[0] & 0x1FFF) | ((pcp & 7) << 13)
        return frame[:14] + _U16.pack(tci) + frame[16:]
    return frame
