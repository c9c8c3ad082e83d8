"""OpenFlow 1.3 test cases shared by the pipeline's unit tests and the live-switch tests.

One matching and one non-matching frame per OXM basic field (`MATCH_CASES`),
one rewrite per settable field with the Scapy field that must change
(`SET_CASES`), and `checksums_right`, which lets Scapy recompute every
checksum of a frame. tests/unit/test_of13_pipeline.py runs them through the
pipeline in-process; tests/integration/test_of13_switch.py through a live
switch with real frames.
"""

from __future__ import annotations

from scapy.contrib.mpls import MPLS
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.layers.sctp import SCTP
from scapy.packet import Raw

from emu.switch import parse

MAC1, MAC2 = "00:00:00:00:00:01", "00:00:00:00:00:02"
PAYLOAD = Raw(b"p" * 24)


def eth(**kw) -> Ether:
    return Ether(src=MAC1, dst=MAC2, **kw)


def v4(**kw) -> Ether:
    return eth() / IP(src="10.0.0.1", dst="10.0.0.2", **kw)


def v6(**kw) -> Ether:
    return eth() / IPv6(src="2001:db8::1", dst="2001:db8::2", **kw)


def pbb(isid: int) -> bytes:
    """An 802.1ah frame: B-DA, B-SA, 0x88E7, I-TAG, C-DA, C-SA, the customer's IPv4."""
    inner = bytes(v4() / UDP() / PAYLOAD)
    return bytes.fromhex("0000000000aa0000000000bb88e7") + isid.to_bytes(4, "big") + inner


def ns(target: str = "2001:db8::9", sll: str = "00:00:00:00:00:0a") -> Ether:
    return v6() / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=sll)


def na(target: str = "2001:db8::9", tll: str = "00:00:00:00:00:0b") -> Ether:
    return v6() / ICMPv6ND_NA(tgt=target) / ICMPv6NDOptDstLLAddr(lladdr=tll)


# field, match, a frame it matches, a frame it does not (in on port 1 unless a tuple).
MATCH_CASES = [
    ("in_port", {"in_port": 1}, v4() / UDP(), (4, v4() / UDP())),
    (
        "in_phy_port",
        {"in_port": 1, "in_phy_port": 1},
        v4() / UDP(),
        (2, v4() / UDP()),
    ),
    ("eth_dst", {"eth_dst": MAC2}, eth(type=0x1234), Ether(src=MAC1, dst=MAC1, type=0x1234)),
    (
        "eth_src masked",
        {"eth_src": ("00:00:00:00:00:00", "ff:ff:ff:ff:ff:00")},
        eth(type=0x1234),
        Ether(src="00:00:00:00:01:01", dst=MAC2, type=0x1234),
    ),
    ("eth_type", {"eth_type": 0x1234}, eth(type=0x1234), eth(type=0x1235)),
    (
        "vlan_vid",
        {"vlan_vid": 0x1000 | 7},
        eth() / Dot1Q(vlan=7) / IP(),
        eth() / Dot1Q(vlan=8) / IP(),
    ),
    (
        "vlan_vid present",
        {"vlan_vid": (0x1000, 0x1000)},
        eth() / Dot1Q(vlan=9) / IP(),
        v4(),
    ),
    ("vlan_vid none", {"vlan_vid": 0}, v4(), eth() / Dot1Q(vlan=9) / IP()),
    (
        "vlan_pcp",
        {"vlan_vid": (0x1000, 0x1000), "vlan_pcp": 5},
        eth() / Dot1Q(vlan=3, prio=5) / IP(),
        eth() / Dot1Q(vlan=3, prio=4) / IP(),
    ),
    (
        "802.1ad vlan_vid",
        {"vlan_vid": 0x1000 | 30},
        eth() / Dot1AD(vlan=30) / IP(),
        eth() / Dot1AD(vlan=31) / IP(),
    ),
    ("ip_dscp", {"eth_type": 0x800, "ip_dscp": 26}, v4(tos=26 << 2), v4(tos=25 << 2)),
    ("ip_ecn", {"eth_type": 0x800, "ip_ecn": 3}, v4(tos=3), v4(tos=2)),
    ("ip_dscp ipv6", {"eth_type": 0x86DD, "ip_dscp": 10}, v6(tc=10 << 2), v6(tc=11 << 2)),
    ("ip_ecn ipv6", {"eth_type": 0x86DD, "ip_ecn": 1}, v6(tc=1), v6(tc=2)),
    ("ip_proto", {"eth_type": 0x800, "ip_proto": 17}, v4() / UDP(), v4() / TCP()),
    (
        "ipv4_src masked",
        {"eth_type": 0x800, "ipv4_src": ("10.0.0.0", "255.255.255.0")},
        v4(),
        eth() / IP(src="10.0.1.1"),
    ),
    ("ipv4_dst", {"eth_type": 0x800, "ipv4_dst": "10.0.0.2"}, v4(), eth() / IP(dst="10.0.0.3")),
    (
        "tcp_src",
        {"eth_type": 0x800, "ip_proto": 6, "tcp_src": 1234},
        v4() / TCP(sport=1234),
        v4() / TCP(sport=1235),
    ),
    (
        "tcp_dst",
        {"eth_type": 0x800, "ip_proto": 6, "tcp_dst": 80},
        v4() / TCP(dport=80),
        v4() / TCP(dport=81),
    ),
    (
        "udp_src",
        {"eth_type": 0x800, "ip_proto": 17, "udp_src": 53},
        v4() / UDP(sport=53),
        v4() / UDP(sport=54),
    ),
    (
        "udp_dst ipv6",
        {"eth_type": 0x86DD, "ip_proto": 17, "udp_dst": 4791},
        v6() / UDP(dport=4791),
        v6() / UDP(dport=4792),
    ),
    (
        "sctp_src",
        {"eth_type": 0x800, "ip_proto": 132, "sctp_src": 38412},
        v4() / SCTP(sport=38412),
        v4() / SCTP(sport=38413),
    ),
    (
        "sctp_dst",
        {"eth_type": 0x800, "ip_proto": 132, "sctp_dst": 2905},
        v4() / SCTP(dport=2905),
        v4() / SCTP(dport=2906),
    ),
    (
        "icmpv4_type",
        {"eth_type": 0x800, "ip_proto": 1, "icmpv4_type": 8},
        v4() / ICMP(type=8),
        v4() / ICMP(type=0),
    ),
    (
        "icmpv4_code",
        {"eth_type": 0x800, "ip_proto": 1, "icmpv4_code": 3},
        v4() / ICMP(type=3, code=3),
        v4() / ICMP(type=3, code=1),
    ),
    ("arp_op", {"eth_type": 0x806, "arp_op": 2}, eth() / ARP(op=2), eth() / ARP(op=1)),
    (
        "arp_spa masked",
        {"eth_type": 0x806, "arp_spa": ("10.0.0.0", "255.0.0.0")},
        eth() / ARP(psrc="10.1.2.3"),
        eth() / ARP(psrc="11.1.2.3"),
    ),
    (
        "arp_tpa",
        {"eth_type": 0x806, "arp_tpa": "10.0.0.9"},
        eth() / ARP(pdst="10.0.0.9"),
        eth() / ARP(pdst="10.0.0.8"),
    ),
    (
        "arp_sha",
        {"eth_type": 0x806, "arp_sha": "00:00:00:00:00:0a"},
        eth() / ARP(hwsrc="00:00:00:00:00:0a"),
        eth() / ARP(hwsrc="00:00:00:00:00:0b"),
    ),
    (
        "arp_tha",
        {"eth_type": 0x806, "arp_tha": "00:00:00:00:00:0c"},
        eth() / ARP(hwdst="00:00:00:00:00:0c"),
        eth() / ARP(hwdst="00:00:00:00:00:0d"),
    ),
    (
        "ipv6_src masked",
        {"eth_type": 0x86DD, "ipv6_src": ("2001:db8::", "ffff:ffff::")},
        v6(),
        eth() / IPv6(src="2001:db9::1"),
    ),
    (
        "ipv6_dst",
        {"eth_type": 0x86DD, "ipv6_dst": "2001:db8::2"},
        v6(),
        eth() / IPv6(dst="2001:db8::3"),
    ),
    ("ipv6_flabel", {"eth_type": 0x86DD, "ipv6_flabel": 0xABCDE}, v6(fl=0xABCDE), v6(fl=1)),
    (
        "icmpv6_type",
        {"eth_type": 0x86DD, "ip_proto": 58, "icmpv6_type": 128},
        v6() / ICMPv6EchoRequest(),
        ns(),
    ),
    (
        "icmpv6_code",
        {"eth_type": 0x86DD, "ip_proto": 58, "icmpv6_code": 0},
        v6() / ICMPv6EchoRequest(code=0),
        v6() / ICMPv6EchoRequest(code=1),
    ),
    (
        "ipv6_nd_target",
        {"eth_type": 0x86DD, "ip_proto": 58, "icmpv6_type": 135, "ipv6_nd_target": "2001:db8::9"},
        ns(),
        ns(target="2001:db8::8"),
    ),
    (
        "ipv6_nd_sll",
        {
            "eth_type": 0x86DD,
            "ip_proto": 58,
            "icmpv6_type": 135,
            "ipv6_nd_sll": "00:00:00:00:00:0a",
        },
        ns(),
        ns(sll="00:00:00:00:00:0f"),
    ),
    (
        "ipv6_nd_tll",
        {
            "eth_type": 0x86DD,
            "ip_proto": 58,
            "icmpv6_type": 136,
            "ipv6_nd_tll": "00:00:00:00:00:0b",
        },
        na(),
        na(tll="00:00:00:00:00:0f"),
    ),
    (
        "mpls_label",
        {"eth_type": 0x8847, "mpls_label": 1000},
        eth() / MPLS(label=1000) / IP(),
        eth() / MPLS(label=1001) / IP(),
    ),
    (
        "mpls_tc",
        {"eth_type": 0x8847, "mpls_tc": 5},
        eth() / MPLS(label=1, cos=5) / IP(),
        eth() / MPLS(label=1, cos=4) / IP(),
    ),
    (
        "mpls_bos",
        {"eth_type": 0x8847, "mpls_bos": 0},
        eth() / MPLS(label=1, s=0) / MPLS(label=2, s=1) / IP(),
        eth() / MPLS(label=1, s=1) / IP(),
    ),
    ("pbb_isid", {"eth_type": 0x88E7, "pbb_isid": 0x123456}, pbb(0x123456), pbb(0x123457)),
    ("tunnel_id", {"tunnel_id": 0}, v4(), None),
    (
        "ipv6_exthdr",
        {"eth_type": 0x86DD, "ipv6_exthdr": (parse.IEH_FRAG, parse.IEH_FRAG)},
        v6() / IPv6ExtHdrFragment() / UDP(),
        v6() / UDP(),
    ),
    (
        "ipv6_exthdr hop then routing",
        {"eth_type": 0x86DD, "ipv6_exthdr": parse.IEH_HOP | parse.IEH_ROUTER},
        v6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting() / UDP(),
        v6() / IPv6ExtHdrRouting() / IPv6ExtHdrHopByHop() / UDP(),
    ),
]


def checksums_right(frame: bytes) -> bool:
    """Scapy recomputes every checksum of the frame; the bytes must not change."""
    pkt = Ether(frame)
    layer = pkt
    while layer:
        for name in ("chksum", "cksum"):
            if name in layer.fields:
                setattr(layer, name, None)
        layer = layer.payload
    return bytes(pkt) == frame


# field, value, frame, (scapy layer, attribute, expected value)
SET_CASES = [
    ("eth_dst", "02:00:00:00:00:09", v4() / UDP(), (Ether, "dst", "02:00:00:00:00:09")),
    ("eth_src", "02:00:00:00:00:08", v4() / UDP(), (Ether, "src", "02:00:00:00:00:08")),
    ("eth_type", 0x88B5, eth(type=0x88B6) / PAYLOAD, (Ether, "type", 0x88B5)),
    ("vlan_vid", 0x1000 | 42, eth() / Dot1Q(vlan=1) / IP() / UDP(), (Dot1Q, "vlan", 42)),
    ("vlan_pcp", 6, eth() / Dot1Q(vlan=1) / IP() / UDP(), (Dot1Q, "prio", 6)),
    ("ip_dscp", 46, v4() / TCP(), (IP, "tos", 46 << 2)),
    ("ip_ecn", 3, v4(tos=2) / UDP(), (IP, "tos", 3)),
    ("ip_dscp", 46, v6() / TCP(), (IPv6, "tc", 46 << 2)),
    ("ip_ecn", 3, v6(tc=2) / UDP(), (IPv6, "tc", 3)),
    ("ip_proto", 253, v4() / PAYLOAD, (IP, "proto", 253)),
    ("ipv4_src", "192.0.2.1", v4() / TCP() / PAYLOAD, (IP, "src", "192.0.2.1")),
    ("ipv4_dst", "192.0.2.2", v4() / UDP() / PAYLOAD, (IP, "dst", "192.0.2.2")),
    ("ipv4_dst", "192.0.2.3", v4() / ICMP() / PAYLOAD, (IP, "dst", "192.0.2.3")),
    ("tcp_src", 4000, v4() / TCP(sport=1) / PAYLOAD, (TCP, "sport", 4000)),
    ("tcp_dst", 4001, v6() / TCP(dport=1) / PAYLOAD, (TCP, "dport", 4001)),
    ("udp_src", 4002, v4() / UDP(sport=1) / PAYLOAD, (UDP, "sport", 4002)),
    ("udp_dst", 4003, v6() / UDP(dport=1) / PAYLOAD, (UDP, "dport", 4003)),
    ("sctp_src", 4004, v4() / SCTP(sport=1) / PAYLOAD, (SCTP, "sport", 4004)),
    ("sctp_dst", 4005, v6() / SCTP(dport=1) / PAYLOAD, (SCTP, "dport", 4005)),
    ("icmpv4_type", 13, v4() / ICMP(type=8) / PAYLOAD, (ICMP, "type", 13)),
    ("icmpv4_code", 2, v4() / ICMP(type=8, code=1) / PAYLOAD, (ICMP, "code", 2)),
    ("arp_op", 2, eth() / ARP(op=1), (ARP, "op", 2)),
    ("arp_spa", "10.9.9.9", eth() / ARP(), (ARP, "psrc", "10.9.9.9")),
    ("arp_tpa", "10.9.9.8", eth() / ARP(), (ARP, "pdst", "10.9.9.8")),
    ("arp_sha", "02:00:00:00:00:07", eth() / ARP(), (ARP, "hwsrc", "02:00:00:00:00:07")),
    ("arp_tha", "02:00:00:00:00:06", eth() / ARP(), (ARP, "hwdst", "02:00:00:00:00:06")),
    ("ipv6_src", "2001:db8::aa", v6() / TCP() / PAYLOAD, (IPv6, "src", "2001:db8::aa")),
    ("ipv6_dst", "2001:db8::bb", v6() / UDP() / PAYLOAD, (IPv6, "dst", "2001:db8::bb")),
    (
        "ipv6_dst",
        "2001:db8::cc",
        v6() / ICMPv6EchoRequest() / PAYLOAD,
        (IPv6, "dst", "2001:db8::cc"),
    ),
    ("ipv6_flabel", 0x12345, v6() / UDP(), (IPv6, "fl", 0x12345)),
    ("icmpv6_type", 129, v6() / ICMPv6EchoRequest() / PAYLOAD, (IPv6, "nh", 58)),
    ("icmpv6_code", 1, v6() / ICMPv6EchoRequest() / PAYLOAD, (ICMPv6EchoRequest, "code", 1)),
    ("ipv6_nd_target", "2001:db8::77", ns(), (ICMPv6ND_NS, "tgt", "2001:db8::77")),
    (
        "ipv6_nd_sll",
        "02:00:00:00:00:05",
        ns(),
        (ICMPv6NDOptSrcLLAddr, "lladdr", "02:00:00:00:00:05"),
    ),
    (
        "ipv6_nd_tll",
        "02:00:00:00:00:04",
        na(),
        (ICMPv6NDOptDstLLAddr, "lladdr", "02:00:00:00:00:04"),
    ),
    ("mpls_label", 2000, eth() / MPLS(label=1) / IP(), (MPLS, "label", 2000)),
    ("mpls_tc", 3, eth() / MPLS(label=1) / IP(), (MPLS, "cos", 3)),
    ("mpls_bos", 0, eth() / MPLS(label=1, s=1) / IP(), (MPLS, "s", 0)),
]
