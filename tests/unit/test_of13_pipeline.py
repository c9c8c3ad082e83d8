"""OpenFlow 1.3 completeness of the pipeline: every match field, set-field and action.

One case per OXM basic field (a frame that matches and one that does not), the
spec's prerequisites, set-field on every settable field with each checksum
checked by Scapy, the push/pop and TTL actions, and the action set's order.
The same families run on a live switch with real frames in
tests/integration/test_of13_switch.py. No root needed.
"""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
)
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.sctp import SCTP

from emu.switch import parse, rewrite
from emu.switch.pipeline import OFError, Pipeline

from ..of13_cases import (
    MAC1,
    MATCH_CASES,
    PAYLOAD,
    SET_CASES,
    checksums_right,
    eth,
    pbb,
    v4,
    v6,
)
from .fakes import flow, mkports, out


def one_flow(match: dict, table_miss_port: int = 3) -> Pipeline:
    pl = Pipeline(ports=mkports(4))
    flow(pl, match, [out(2)], prio=100)
    flow(pl, {}, [out(table_miss_port)], prio=0)
    return pl


def sent_to(pl: Pipeline, frame, in_port: int = 1) -> list[int]:
    outs, _ = pl.process(in_port, bytes(frame), 0.0)
    return [o[0] for o in outs]


@pytest.mark.parametrize("name,match,hit,miss", MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_every_match_field_selects_its_frames(name, match, hit, miss) -> None:
    pl = one_flow(match)
    assert sent_to(pl, hit) == [2], f"{name}: the matching frame missed"
    if miss is not None:
        in_port, frame = miss if isinstance(miss, tuple) else (1, miss)
        assert sent_to(pl, frame, in_port) != [2], f"{name}: the other frame matched"


def test_all_forty_oxm_fields_are_covered() -> None:
    """Every OXM basic field of OF1.3 has a case above (metadata: the goto test below)."""
    covered = {f for _n, m, _h, _x in MATCH_CASES for f in m} | {"metadata"}
    assert covered == set(parse.FIELD_INDEX) | {"metadata"}
    assert len(covered) == 40


def test_metadata_and_tunnel_id_carry_between_tables() -> None:
    pl = Pipeline(ports=mkports(4))
    flow(
        pl,
        {},
        instructions=[
            p.OFPInstructionWriteMetadata(0xAB00, 0xFF00),
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionSetField(tunnel_id=77)]),
            p.OFPInstructionGotoTable(1),
        ],
    )
    flow(pl, {"metadata": (0xAB00, 0xFF00), "tunnel_id": 77}, [out(2)], table=1, prio=5)
    flow(pl, {}, [out(3)], table=1, prio=0)
    assert sent_to(pl, v4() / UDP()) == [2]


PREREQ_CASES = [
    {"in_phy_port": 1},
    {"vlan_pcp": 3},
    {"ip_dscp": 1},
    {"eth_type": 0x806, "ip_ecn": 1},
    {"ipv4_src": "10.0.0.1"},
    {"eth_type": 0x86DD, "ipv4_dst": "10.0.0.1"},
    {"eth_type": 0x800, "tcp_src": 1},
    {"eth_type": 0x800, "ip_proto": 17, "tcp_dst": 1},
    {"eth_type": 0x800, "ip_proto": 6, "udp_src": 1},
    {"eth_type": 0x800, "ip_proto": 6, "sctp_src": 1},
    {"eth_type": 0x86DD, "ip_proto": 1, "icmpv4_type": 1},
    {"eth_type": 0x800, "arp_op": 1},
    {"eth_type": 0x800, "ipv6_src": "::1"},
    {"ipv6_flabel": 1},
    {"eth_type": 0x800, "ip_proto": 58, "icmpv6_type": 1},
    {"eth_type": 0x86DD, "ip_proto": 58, "ipv6_nd_target": "::1"},
    {"eth_type": 0x86DD, "ip_proto": 58, "icmpv6_type": 136, "ipv6_nd_sll": MAC1},
    {"eth_type": 0x86DD, "ip_proto": 58, "icmpv6_type": 135, "ipv6_nd_tll": MAC1},
    {"eth_type": 0x800, "mpls_label": 1},
    {"mpls_tc": 1},
    {"eth_type": 0x8100, "mpls_bos": 1},
    {"eth_type": 0x8847, "pbb_isid": 1},
    {"ipv6_exthdr": 1},
]


@pytest.mark.parametrize("match", PREREQ_CASES, ids=[str(m) for m in PREREQ_CASES])
def test_missing_prerequisites_are_refused_with_bad_prereq(match) -> None:
    with pytest.raises(OFError) as e:
        one_flow(match)
    assert (e.value.type, e.value.code) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ)


@pytest.mark.parametrize(
    "match", [{"eth_type": (0x800, 0xFF00)}, {"eth_type": 0x800, "ip_proto": (6, 0xF)}]
)
def test_masks_on_unmaskable_fields_are_refused(match) -> None:
    with pytest.raises(OFError) as e:
        one_flow(match)
    assert (e.value.type, e.value.code) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_MASK)


# ----- set-field ------------------------------------------------------------------------


def set_field_out(frame, **field) -> bytes:
    pl = Pipeline(ports=mkports(4))
    flow(pl, {}, [p.OFPActionSetField(**field), out(2)])
    outs, _ = pl.process(1, bytes(frame), 0.0)
    assert len(outs) == 1
    return outs[0][1]


@pytest.mark.parametrize(
    "field,value,frame,want", SET_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SET_CASES)]
)
def test_set_field_rewrites_the_field_and_keeps_checksums_right(field, value, frame, want) -> None:
    before = bytes(frame)
    assert checksums_right(before)
    after = set_field_out(frame, **{field: value})
    layer, attr, expected = want
    got = Ether(after)
    if field == "icmpv6_type":
        assert after[54] == value  # Scapy dissects an echo reply as another class
    else:
        assert getattr(got[layer], attr) == expected
    assert checksums_right(after), f"{field}: a checksum is wrong after the rewrite"
    assert len(after) == len(before)


def test_set_field_pbb_isid_and_udp_zero_checksum() -> None:
    after = set_field_out(pbb(1), pbb_isid=0xABCDEF)
    assert after[14:18] == (0xABCDEF).to_bytes(4, "big")
    zero = bytearray(bytes(v4() / UDP(sport=1) / PAYLOAD))
    zero[40:42] = b"\0\0"  # UDP over IPv4 without a checksum: it must stay without one
    after = set_field_out(bytes(zero), udp_src=99)
    assert after[34:36] == (99).to_bytes(2, "big") and after[40:42] == b"\0\0"


@pytest.mark.parametrize(
    "field,value",
    [("in_port", 3), ("metadata", 1), ("ipv6_exthdr", 1), ("vlan_pcp", 8), ("ip_dscp", 64)],
)
def test_set_field_refuses_unsettable_fields_and_values_that_do_not_fit(field, value) -> None:
    pl = Pipeline(ports=mkports(4))
    with pytest.raises(OFError) as e:
        flow(pl, {}, [p.OFPActionSetField(**{field: value}), out(2)])
    assert e.value.type == ofp.OFPET_BAD_ACTION
    assert e.value.code in (ofp.OFPBAC_BAD_SET_TYPE, ofp.OFPBAC_BAD_SET_ARGUMENT)


# ----- push, pop and TTL actions --------------------------------------------------------


def apply(frame, *actions) -> list[bytes]:
    pl = Pipeline(ports=mkports(4))
    flow(pl, {}, [*actions, out(2)])
    outs, _ = pl.process(1, bytes(frame), 0.0)
    return [o[1] for o in outs]


def test_push_and_pop_vlan_both_tpids() -> None:
    [f] = apply(v4() / UDP(), p.OFPActionPushVlan(0x88A8))
    got = Ether(f)
    assert got.type == 0x88A8 and got[Dot1AD].vlan == 0 and got[Dot1AD].type == 0x800
    [f] = apply(eth() / Dot1Q(vlan=5, prio=2) / IP() / UDP(), p.OFPActionPushVlan(0x8100))
    got = Ether(f)  # the new outer tag copies VID and PCP from the old one (OF1.3 5.12.1)
    assert got[Dot1Q].vlan == 5 and got[Dot1Q].prio == 2 and got[Dot1Q].type == 0x8100
    [f] = apply(eth() / Dot1Q(vlan=5) / IP() / UDP(), p.OFPActionPopVlan())
    assert f == bytes(v4(proto=17) / UDP()) or Ether(f).type == 0x800


def test_push_pop_mpls_and_its_ttls() -> None:
    [f] = apply(v4(ttl=33) / UDP(), p.OFPActionPushMpls(0x8847))
    got = Ether(f)
    assert got.type == 0x8847 and got[MPLS].s == 1 and got[MPLS].ttl == 33
    assert got[MPLS].label == 0
    [f] = apply(
        eth() / MPLS(label=7, cos=2, ttl=9, s=1) / IP() / UDP(), p.OFPActionPushMpls(0x8847)
    )
    outer = Ether(f)[MPLS]
    assert (outer.label, outer.cos, outer.ttl, outer.s) == (7, 2, 9, 0)
    [f] = apply(v4(ttl=7) / UDP(), p.OFPActionPushMpls(0x8848))  # multicast MPLS
    assert f[12:18] == bytes.fromhex("8848 0000 0107")
    [f] = apply(eth() / MPLS(label=7, ttl=9) / IP(ttl=50) / UDP(), p.OFPActionPopMpls(0x800))
    got = Ether(f)
    assert got.type == 0x800 and got[IP].ttl == 50 and checksums_right(f)
    [f] = apply(eth() / MPLS(label=7, ttl=9) / IP() / UDP(), p.OFPActionSetMplsTtl(100))
    assert Ether(f)[MPLS].ttl == 100
    [f] = apply(eth() / MPLS(label=7, ttl=9) / IP() / UDP(), p.OFPActionDecMplsTtl())
    assert Ether(f)[MPLS].ttl == 8
    assert apply(eth() / MPLS(label=7, ttl=1) / IP() / UDP(), p.OFPActionDecMplsTtl()) == []
    [f] = apply(eth() / MPLS(label=7, ttl=9) / IP(ttl=60) / UDP(), p.OFPActionCopyTtlIn())
    assert Ether(f)[IP].ttl == 9 and checksums_right(f)
    [f] = apply(eth() / MPLS(label=7, ttl=9) / IP(ttl=60) / UDP(), p.OFPActionCopyTtlOut())
    assert Ether(f)[MPLS].ttl == 60
    [f] = apply(
        eth() / MPLS(label=7, ttl=9, s=0) / MPLS(label=8, ttl=4, s=1) / IP(),
        p.OFPActionCopyTtlOut(),
    )
    assert Ether(f)[MPLS].ttl == 4


def test_a_frame_a_pop_shortens_leaves_padded_to_the_ethernet_minimum() -> None:
    """IEEE 802.3: a MAC pads a frame below 60 bytes (the os-ken tester expects it)."""
    inner = bytes(eth() / IP() / ICMP())  # 42 bytes
    for frame, action in (
        (bytes(eth() / MPLS(label=1) / IP() / ICMP()), p.OFPActionPopMpls(0x800)),
        (bytes(eth() / Dot1Q(vlan=2) / IP() / ICMP()), p.OFPActionPopVlan()),
    ):
        [f] = apply(frame, action)
        assert f == inner + bytes(18)


def test_nw_ttl_on_ipv4_and_ipv6() -> None:
    [f] = apply(v4(ttl=10) / UDP(), p.OFPActionSetNwTtl(99))
    assert Ether(f)[IP].ttl == 99 and checksums_right(f)
    [f] = apply(v6(hlim=10) / UDP(), p.OFPActionDecNwTtl())
    assert Ether(f)[IPv6].hlim == 9
    assert apply(v6(hlim=1) / UDP(), p.OFPActionDecNwTtl()) == []


def test_push_and_pop_pbb() -> None:
    inner = bytes(eth() / Dot1Q(vlan=3, prio=5) / IP() / UDP())
    [f] = apply(inner, p.OFPActionPushPbb(0x88E7))
    assert f[12:14] == b"\x88\xe7" and f[14] >> 5 == 5  # I-PCP from the VLAN PCP
    assert f[:12] == inner[:12] and f[18:] == inner  # B-DA/B-SA start as the customer's
    [f] = apply(pbb(0x42), p.OFPActionPopPbb())
    assert f == pbb(0x42)[18:]


def test_push_actions_refuse_wrong_ethertypes() -> None:
    for action in (
        p.OFPActionPushVlan(0x800),
        p.OFPActionPushMpls(0x8100),
        p.OFPActionPushPbb(0x8847),
    ):
        pl = Pipeline(ports=mkports(4))
        with pytest.raises(OFError) as e:
            flow(pl, {}, [action, out(2)])
        assert (e.value.type, e.value.code) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_ARGUMENT)


def test_local_output_is_refused_with_bad_out_port() -> None:
    pl = Pipeline(ports=mkports(4))
    with pytest.raises(OFError) as e:
        flow(pl, {}, [out(ofp.OFPP_LOCAL)])
    assert (e.value.type, e.value.code) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_PORT)


def test_normal_learns_floods_the_unknown_and_forgets_after_the_age() -> None:
    ports = mkports(4)
    pl = Pipeline(ports=ports)
    flow(pl, {}, [out(ofp.OFPP_NORMAL)])
    a_to_b = bytes(Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / IP() / UDP())
    b_to_a = bytes(Ether(src="02:00:00:00:00:0b", dst="02:00:00:00:00:0a") / IP() / UDP())
    bcast = bytes(Ether(src="02:00:00:00:00:0b", dst="ff:ff:ff:ff:ff:ff") / IP())
    assert sent_to(pl, a_to_b, 1) == [2, 3, 4]  # b unknown: flooded
    assert sent_to(pl, b_to_a, 2) == [1]  # a learned on port 1
    assert sent_to(pl, a_to_b, 1) == [2]  # b learned on port 2
    assert sent_to(pl, bcast, 2) == [1, 3, 4]
    assert sent_to(pl, a_to_b, 2) == []  # b is behind the port it came from
    outs, _ = pl.process(1, a_to_b, 301.0)  # b not seen for 300 s: flooded again
    assert [o[0] for o in outs] == [2, 3, 4]
    ports[3].link_up = False
    pl.invalidate()
    outs, _ = pl.process(2, bcast, 302.0)
    assert [o[0] for o in outs] == [1, 4]  # never to a dead port


def test_action_set_runs_in_the_specs_order_not_the_written_one() -> None:
    """OF1.3 5.10: push-VLAN before set-field, so the set VID lands in the new tag."""
    pl = Pipeline(ports=mkports(4))
    written = [
        out(2),
        p.OFPActionSetField(vlan_vid=0x1000 | 77),
        p.OFPActionDecNwTtl(),
        p.OFPActionPushVlan(0x8100),
    ]
    flow(pl, {}, instructions=[p.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS, written)])
    outs, _ = pl.process(1, bytes(v4(ttl=5) / UDP()), 0.0)
    [(port, f, _q)] = outs
    got = Ether(f)
    assert port == 2 and got[Dot1Q].vlan == 77 and got[IP].ttl == 4 and checksums_right(f)


def test_ipv6_extension_header_flags() -> None:
    def flags(pkt) -> int:
        return parse.extract_key(bytes(pkt), 1)[parse.K_IPV6_EXTHDR]

    assert flags(v6() / UDP()) == 0
    assert flags(v6(nh=59)) == parse.IEH_NONEXT
    assert flags(v6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / UDP()) == (
        parse.IEH_HOP | parse.IEH_DEST
    )
    assert flags(v6() / IPv6ExtHdrFragment() / IPv6ExtHdrFragment() / UDP()) == (
        parse.IEH_FRAG | parse.IEH_UNREP
    )
    assert flags(v6() / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / UDP()) & parse.IEH_UNSEQ
    key = parse.extract_key(bytes(v6() / IPv6ExtHdrHopByHop() / UDP(dport=9)), 1)
    assert key[parse.K_IP_PROTO] == 17 and key[parse.K_UDP_DST] == 9


def test_sctp_crc_matches_scapys() -> None:
    frame = bytes(v4() / SCTP(sport=1, dport=2) / PAYLOAD)
    after = rewrite.SET_FIELD["sctp_dst"][0](frame, 7)
    assert after[36:38] == b"\x00\x07" and checksums_right(after)


def test_select_spreads_arp_by_the_addresses_it_resolves() -> None:
    """ARP between the same two MACs (a router's) still spreads over a SELECT group's buckets:
    os-ken's switch tester (group 01_SELECT_IP) sends it with random spa/tpa and expects both."""
    from scapy.layers.l2 import ARP

    from .fakes import bucket, group

    pl = Pipeline(ports=mkports(4))
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(2)]), bucket([out(3)])])
    flow(pl, {}, [p.OFPActionGroup(1)], prio=1)
    eth = Ether(src="00:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff")
    ports = {
        port
        for i in range(64)
        for port in sent_to(pl, eth / ARP(psrc=f"10.0.{i}.1", pdst=f"10.1.{i}.9"))
    }
    assert ports == {2, 3}
