"""OpenFlow 1.3 match fields for the pipeline: conversion, prerequisites, relations.

Owns the translation of an os-ken OFPMatch into the pipeline's compiled form
({field: (value, mask)} and key-index triples), the OF1.3 prerequisite and
mask rules, and the relations flow mods need (non-strict cover, overlap).
Pure functions; called by `pipeline.py` only.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable, Optional

from os_ken.ofproto import ofproto_v1_3 as ofp

from emu.switch import parse
from emu.switch.parse import FIELD_INDEX


class OFError(Exception):
    """An OpenFlow error to report to the controller (ofp_error_msg type/code)."""

    def __init__(self, type_: int, code: int, text: str = "") -> None:
        super().__init__(f"OFPET {type_} code {code} {text}".strip())
        self.type = type_
        self.code = code


# OF1.3 table 11: the fields that may carry a mask.
_MASKABLE = {
    "metadata",
    "eth_dst",
    "eth_src",
    "vlan_vid",
    "ipv4_src",
    "ipv4_dst",
    "arp_spa",
    "arp_tpa",
    "arp_sha",
    "arp_tha",
    "ipv6_src",
    "ipv6_dst",
    "ipv6_flabel",
    "pbb_isid",
    "tunnel_id",
    "ipv6_exthdr",
}
_MAC_FIELDS = {"eth_dst", "eth_src", "arp_sha", "arp_tha", "ipv6_nd_sll", "ipv6_nd_tll"}
_IP4_FIELDS = {"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa"}
_IP6_FIELDS = {"ipv6_src", "ipv6_dst", "ipv6_nd_target"}
# Every OXM basic field of OF1.3 and its width in bits.
_FIELD_BITS = {
    "in_port": 32,
    "in_phy_port": 32,
    "metadata": 64,
    "eth_dst": 48,
    "eth_src": 48,
    "eth_type": 16,
    "vlan_vid": 13,
    "vlan_pcp": 3,
    "ip_dscp": 6,
    "ip_ecn": 2,
    "ip_proto": 8,
    "ipv4_src": 32,
    "ipv4_dst": 32,
    "tcp_src": 16,
    "tcp_dst": 16,
    "udp_src": 16,
    "udp_dst": 16,
    "sctp_src": 16,
    "sctp_dst": 16,
    "icmpv4_type": 8,
    "icmpv4_code": 8,
    "arp_op": 16,
    "arp_spa": 32,
    "arp_tpa": 32,
    "arp_sha": 48,
    "arp_tha": 48,
    "ipv6_src": 128,
    "ipv6_dst": 128,
    "ipv6_flabel": 20,
    "icmpv6_type": 8,
    "icmpv6_code": 8,
    "ipv6_nd_target": 128,
    "ipv6_nd_sll": 48,
    "ipv6_nd_tll": 48,
    "mpls_label": 20,
    "mpls_tc": 3,
    "mpls_bos": 1,
    "pbb_isid": 24,
    "tunnel_id": 64,
    "ipv6_exthdr": 9,
}


def _exact(m: dict, name: str) -> Optional[int]:
    v = m.get(name)
    if v is None or v[1] is not None:
        return None
    return v[0]


def _is_ip(m: dict) -> bool:
    return _exact(m, "eth_type") in (parse.ETH_TYPE_IP, parse.ETH_TYPE_IPV6)


def _eth_type_is(*types: int) -> Callable[[dict], bool]:
    return lambda m: _exact(m, "eth_type") in types


def _ip_proto_is(proto: int, *eth_types: int) -> Callable[[dict], bool]:
    return lambda m: _exact(m, "eth_type") in eth_types and _exact(m, "ip_proto") == proto


_IP_TYPES = (parse.ETH_TYPE_IP, parse.ETH_TYPE_IPV6)

# OF1.3 table 12: what each field needs matched before it (OFPBMC_BAD_PREREQ).
_PREREQ: dict[str, Callable[[dict], bool]] = {
    "in_phy_port": lambda m: "in_port" in m,
    "vlan_pcp": lambda m: "vlan_vid" in m and m["vlan_vid"] != (parse.OFPVID_NONE, None),
    "ip_dscp": _is_ip,
    "ip_ecn": _is_ip,
    "ip_proto": _is_ip,
    "ipv4_src": _eth_type_is(parse.ETH_TYPE_IP),
    "ipv4_dst": _eth_type_is(parse.ETH_TYPE_IP),
    "tcp_src": _ip_proto_is(parse.IPPROTO_TCP, *_IP_TYPES),
    "tcp_dst": _ip_proto_is(parse.IPPROTO_TCP, *_IP_TYPES),
    "udp_src": _ip_proto_is(parse.IPPROTO_UDP, *_IP_TYPES),
    "udp_dst": _ip_proto_is(parse.IPPROTO_UDP, *_IP_TYPES),
    "sctp_src": _ip_proto_is(parse.IPPROTO_SCTP, *_IP_TYPES),
    "sctp_dst": _ip_proto_is(parse.IPPROTO_SCTP, *_IP_TYPES),
    "icmpv4_type": _ip_proto_is(parse.IPPROTO_ICMP, parse.ETH_TYPE_IP),
    "icmpv4_code": _ip_proto_is(parse.IPPROTO_ICMP, parse.ETH_TYPE_IP),
    "ipv6_src": _eth_type_is(parse.ETH_TYPE_IPV6),
    "ipv6_dst": _eth_type_is(parse.ETH_TYPE_IPV6),
    "ipv6_flabel": _eth_type_is(parse.ETH_TYPE_IPV6),
    "ipv6_exthdr": _eth_type_is(parse.ETH_TYPE_IPV6),
    "icmpv6_type": _ip_proto_is(parse.IPPROTO_ICMPV6, parse.ETH_TYPE_IPV6),
    "icmpv6_code": _ip_proto_is(parse.IPPROTO_ICMPV6, parse.ETH_TYPE_IPV6),
    "ipv6_nd_target": lambda m: (
        _ip_proto_is(parse.IPPROTO_ICMPV6, parse.ETH_TYPE_IPV6)(m)
        and _exact(m, "icmpv6_type") in (parse.ND_SOLICIT, parse.ND_ADVERT)
    ),
    "ipv6_nd_sll": lambda m: (
        _ip_proto_is(parse.IPPROTO_ICMPV6, parse.ETH_TYPE_IPV6)(m)
        and _exact(m, "icmpv6_type") == parse.ND_SOLICIT
    ),
    "ipv6_nd_tll": lambda m: (
        _ip_proto_is(parse.IPPROTO_ICMPV6, parse.ETH_TYPE_IPV6)(m)
        and _exact(m, "icmpv6_type") == parse.ND_ADVERT
    ),
    "mpls_label": _eth_type_is(*parse.MPLS_TYPES),
    "mpls_tc": _eth_type_is(*parse.MPLS_TYPES),
    "mpls_bos": _eth_type_is(*parse.MPLS_TYPES),
    "pbb_isid": _eth_type_is(parse.ETH_TYPE_PBB),
}
for _f in ("arp_op", "arp_spa", "arp_tpa", "arp_sha", "arp_tha"):
    _PREREQ[_f] = _eth_type_is(parse.ETH_TYPE_ARP)


def _to_int(name: str, v: Any) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big")
    if name in _MAC_FIELDS:
        return int(str(v).replace(":", "").replace("-", ""), 16)
    if name in _IP4_FIELDS:
        return int(ipaddress.IPv4Address(v))
    if name in _IP6_FIELDS:
        return int(ipaddress.IPv6Address(v))
    return int(v)


def convert_match(ofmatch: Any) -> dict[str, tuple[int, Optional[int]]]:
    """Turn an os-ken OFPMatch into {field: (value, mask or None)}, validated.

    Raises:
        OFError: BAD_MATCH with BAD_FIELD, DUP_FIELD, BAD_MASK, BAD_VALUE or BAD_PREREQ.
    """
    out: dict[str, tuple[int, Optional[int]]] = {}
    fields = getattr(ofmatch, "_fields2", None)
    if fields is None:
        fields = list(ofmatch.items()) if ofmatch is not None else []
    for name, raw in fields:
        if name not in _FIELD_BITS:
            raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_FIELD, name)
        if name in out:
            raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_DUP_FIELD, name)
        try:
            if isinstance(raw, tuple):
                if name not in _MASKABLE:
                    raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_MASK, name)
                val, mask = _to_int(name, raw[0]), _to_int(name, raw[1])
            else:
                val, mask = _to_int(name, raw), None
        except (ValueError, TypeError) as e:
            raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_VALUE, name) from e
        full = (1 << _FIELD_BITS[name]) - 1
        if val < 0 or val > full or (mask is not None and (mask < 0 or mask > full)):
            raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_VALUE, name)
        if mask == full:
            mask = None
        if mask is not None:
            val &= mask
        out[name] = (val, mask)
    for name in out:
        pre = _PREREQ.get(name)
        if pre is not None and not pre(out):
            raise OFError(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ, name)
    return out


def _compile_match(m: dict) -> tuple:
    """(key index, value, mask) triples; metadata gets index -1."""
    return tuple((FIELD_INDEX.get(name, -1), v, mask) for name, (v, mask) in m.items())


def _covers(req: dict, entry: dict) -> bool:
    """Non-strict: is `entry` at least as specific as `req` (OF1.3 6.4)?"""
    for name, (rv, rm) in req.items():
        e = entry.get(name)
        if e is None:
            return False
        ev, em = e
        if rm is None:
            if em is not None or ev != rv:
                return False
        else:
            if em is not None and (em & rm) != rm:
                return False
            if ev & rm != rv:
                return False
    return True


def _overlap(a: dict, b: dict) -> bool:
    """Could one packet match both `a` and `b`?"""
    for name, (av, am) in a.items():
        if name in b:
            bv, bm = b[name]
            full = (1 << _FIELD_BITS[name]) - 1
            m = (am if am is not None else full) & (bm if bm is not None else full)
            if av & m != bv & m:
                return False
    return True
