"""Unit tests of emu/switch/parse.py and emu/switch/pipeline.py (no root)."""

from __future__ import annotations

import collections

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from emu.switch import parse, rewrite
from emu.switch.pipeline import OFError, Pipeline
from emu.switch.ports import OFPPC_NO_FWD, PortState

from .fakes import bucket, flow, group, mkports, out, select_pipeline, udp


def ports_of(outs: list) -> list[int]:
    return [o[0] for o in outs]


# ----- parse ----------------------------------------------------------------------


def test_extract_key_udp_vlan_ip_options() -> None:
    f = bytes(
        Ether(src="00:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff")
        / Dot1Q(vlan=5, prio=3)
        / IP(src="1.2.3.4", dst="5.6.7.8", tos=0x69, options=b"\x01\x01\x01\x00")
        / UDP(sport=11, dport=22)
    )
    k = parse.extract_key(f, 7)
    assert k[parse.K_IN_PORT] == 7
    assert k[parse.K_ETH_DST] == 0xFFFFFFFFFFFF and k[parse.K_ETH_SRC] == 1
    assert k[parse.K_ETH_TYPE] == 0x0800
    assert k[parse.K_VLAN_VID] == 0x1000 | 5 and k[parse.K_VLAN_PCP] == 3
    assert (k[parse.K_IP_DSCP], k[parse.K_IP_ECN]) == (0x69 >> 2, 1)
    assert k[parse.K_IPV4_SRC] == 0x01020304 and k[parse.K_IPV4_DST] == 0x05060708
    assert (k[parse.K_UDP_SRC], k[parse.K_UDP_DST]) == (11, 22)
    assert k[parse.K_TCP_SRC] is None


def test_frames_with_the_same_cache_key_have_the_same_match_key() -> None:
    """The microflow cache keys on `cache_key`: it must determine `extract_key`.

    Every kind of frame, then the same frame with every byte the fast key leaves
    out changed (IPv4 length, id, checksum, payload), and with each byte it keeps
    changed: equal cache keys always mean equal match keys, and the per-packet
    bytes never split a flow into several cache entries."""
    import random

    rng = random.Random(5)
    frames = [
        bytes(
            Ether()
            / IP(src="10.0.0.1", dst="10.0.0.2", tos=0x68)
            / UDP(sport=5, dport=6)
            / (b"x" * 30)
        ),
        bytes(Ether() / IP(ttl=3) / TCP(sport=5, dport=6)),
        bytes(Ether() / IP() / ICMP(type=8, code=0) / (b"y" * 20)),
        bytes(Ether() / IP(frag=5, proto=17) / (b"z" * 30)),  # a later fragment: no ports
        bytes(Ether() / IP(options=b"\x01\x01\x01\x00") / UDP(sport=1, dport=2)),
        bytes(Ether() / Dot1Q(vlan=5) / IP() / UDP(sport=7, dport=8) / (b"w" * 20)),
        bytes(Ether() / ARP(psrc="10.0.0.1", pdst="10.0.0.2")),
        bytes(Ether() / IP() / UDP(sport=1, dport=2))[:37],  # truncated
    ]
    seen: dict = {}
    for f in frames:
        variants = [f]
        for _ in range(30):
            g = bytearray(f)
            for i in (16, 17, 18, 19, 24, 25, *range(38, len(g))):
                if i < len(g) and rng.random() < 0.5:
                    g[i] = rng.randrange(256)
            variants.append(bytes(g))
        for i in range(min(len(f), 38)):
            g = bytearray(f)
            g[i] ^= 0x01
            variants.append(bytes(g))
        for v in variants:
            ck, mk = parse.cache_key(v, 3), parse.extract_key(v, 3)
            assert seen.setdefault(ck, mk) == mk, v.hex()
    # One flow is one entry, whatever changes from packet to packet: a UDP flow's
    # ids and lengths, a ping's sequence numbers (and so its ICMP checksum), a
    # fragmented datagram's offsets and payload.
    f = frames[0]
    keys = {parse.cache_key(f[:16] + bytes([i, i]) + f[18:], 3) for i in range(50)}
    assert len(keys) == 1
    pings = [bytes(Ether() / IP() / ICMP(type=8, id=7, seq=s) / (b"p" * 8)) for s in range(50)]
    assert len({parse.cache_key(p, 3) for p in pings}) == 1
    fragments = [
        bytes(Ether() / IP(id=9, flags="MF", frag=o, proto=17) / (bytes([o % 256]) * 24))
        for o in range(1, 50)
    ]
    assert len({parse.cache_key(p, 3) for p in fragments}) == 1


def test_extract_key_tcp_icmp_arp_ipv6() -> None:
    k = parse.extract_key(bytes(Ether() / IP() / TCP(sport=5, dport=6)), 1)
    assert (k[parse.K_IP_PROTO], k[parse.K_TCP_SRC], k[parse.K_TCP_DST]) == (6, 5, 6)
    assert k[parse.K_VLAN_VID] == parse.OFPVID_NONE and k[parse.K_VLAN_PCP] is None
    k = parse.extract_key(bytes(Ether() / IP() / ICMP(type=8, code=0)), 1)
    assert (k[parse.K_ICMPV4_TYPE], k[parse.K_ICMPV4_CODE]) == (8, 0)
    k = parse.extract_key(
        bytes(Ether() / ARP(op=2, psrc="10.0.0.1", pdst="10.0.0.9", hwsrc="00:00:00:00:00:0a")), 1
    )
    assert k[parse.K_ARP_OP] == 2 and k[parse.K_ARP_SPA] == 0x0A000001
    assert k[parse.K_ARP_TPA] == 0x0A000009 and k[parse.K_ARP_SHA] == 0x0A
    k = parse.extract_key(bytes(Ether(type=0x86DD) / (b"\0" * 40)), 1)
    assert k[parse.K_ETH_TYPE] == 0x86DD and k[parse.K_IP_PROTO] is None


def test_extract_key_truncated_never_raises() -> None:
    f = bytes(Ether() / Dot1Q() / IP() / TCP())
    for n in range(len(f) + 1):
        k = parse.extract_key(f[:n], 1)
        assert len(k) == parse.KEY_LEN


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda f: rewrite.set_ip_ecn(f, 3),
        lambda f: rewrite.set_ip_dscp(f, 26),
        lambda f: rewrite.dec_nw_ttl(f)[0],
        lambda f: rewrite.set_ipv4_addr(f, True, 0x0B000001),
    ],
)
@pytest.mark.parametrize("tagged", [False, True])
def test_ipv4_checksum_after_rewrite(rewrite, tagged: bool) -> None:
    pkt = (
        Ether()
        / IP(src="10.0.0.1", dst="10.0.0.2", tos=0x61, ttl=9, options=b"\x01" * 4)
        / UDP(sport=1, dport=4791)
    )
    if tagged:
        pkt = Ether() / Dot1Q(vlan=3) / pkt[IP]
    f2 = rewrite(bytes(pkt))
    ip = Ether(f2)[IP]
    got = ip.chksum
    del ip.chksum
    assert got == IP(bytes(ip)).chksum


def test_ecn_dscp_values_and_ttl_expiry() -> None:
    f = rewrite.set_ip_dscp(rewrite.set_ip_ecn(udp(tos=0), 3), 26)
    assert Ether(f)[IP].tos == (26 << 2) | 3
    f, ok = rewrite.dec_nw_ttl(udp(ttl=1))
    assert not ok


# ----- matching and instructions ------------------------------------------------------


def test_priority_and_masks() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {"eth_type": 0x800, "ipv4_dst": ("10.0.0.0", "255.0.0.0")}, [out(2)], prio=5)
    flow(pl, {"eth_type": 0x800, "ipv4_dst": "10.0.0.2"}, [out(3)], prio=20)
    flow(pl, {"eth_dst": ("00:00:00:00:00:00", "ff:00:00:00:00:00")}, [out(4)], prio=1)
    assert ports_of(pl.process(1, udp(dst="10.0.0.2"), 0)[0]) == [3]
    assert ports_of(pl.process(1, udp(dst="10.9.0.2"), 0)[0]) == [2]
    assert ports_of(pl.process(1, udp(dst="11.0.0.2"), 0)[0]) == [4]


def test_vlan_vid_present_and_none() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {"vlan_vid": (0x1000, 0x1000)}, [out(2)])
    flow(pl, {"vlan_vid": 0x0000}, [out(3)])
    tagged = bytes(Ether() / Dot1Q(vlan=9) / IP() / UDP())
    assert ports_of(pl.process(1, tagged, 0)[0]) == [2]
    assert ports_of(pl.process(1, udp(), 0)[0]) == [3]


def test_prerequisites_rejected() -> None:
    pl = Pipeline(ports=mkports())
    for m in (
        {"ipv4_dst": "10.0.0.1"},
        {"eth_type": 0x800, "udp_src": 5},
        {"vlan_pcp": 3},
        {"arp_op": 1},
    ):
        with pytest.raises(OFError) as ei:
            flow(pl, m, [out(2)])
        assert (ei.value.type, ei.value.code) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ)
    with pytest.raises(OFError) as ei:
        flow(pl, {"eth_type": (0x800, 0xFF00)}, [out(2)])
    assert ei.value.code == ofp.OFPBMC_BAD_MASK


def test_goto_metadata_write_and_clear_actions() -> None:
    pl = Pipeline(ports=mkports())
    flow(
        pl,
        {},
        instructions=[
            p.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS, [out(2)]),
            p.OFPInstructionWriteMetadata(0x50, 0xF0),
            p.OFPInstructionGotoTable(1),
        ],
    )
    flow(
        pl,
        {"metadata": (0x50, 0xF0)},
        table=1,
        instructions=[
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(4)]),
            p.OFPInstructionGotoTable(2),
        ],
    )
    flow(pl, {}, table=2, prio=0, instructions=[])
    assert ports_of(pl.process(1, udp(), 0)[0]) == [4, 2]
    flow(
        pl, {}, table=2, prio=0, instructions=[p.OFPInstructionActions(ofp.OFPIT_CLEAR_ACTIONS, [])]
    )
    assert ports_of(pl.process(1, udp(), 0)[0]) == [4]
    with pytest.raises(OFError) as ei:
        flow(pl, {}, table=2, instructions=[p.OFPInstructionGotoTable(1)])
    assert ei.value.code == ofp.OFPBIC_BAD_TABLE_ID


def test_actions_rewrite_and_queue() -> None:
    pl = Pipeline(ports=mkports())
    flow(
        pl,
        {},
        [
            p.OFPActionSetField(eth_dst="00:00:00:00:00:aa"),
            p.OFPActionSetField(ip_ecn=3),
            p.OFPActionSetField(ip_dscp=26),
            p.OFPActionDecNwTtl(),
            p.OFPActionPushVlan(0x8100),
            p.OFPActionSetField(vlan_vid=0x1000 | 7),
            p.OFPActionSetField(vlan_pcp=3),
            p.OFPActionSetQueue(3),
            out(2),
        ],
    )
    outs, _ = pl.process(1, udp(ttl=5), 0)
    [(port, f, q)] = outs
    e = Ether(f)
    assert (port, q) == (2, 3)
    assert e.dst == "00:00:00:00:00:aa" and e[Dot1Q].vlan == 7 and e[Dot1Q].prio == 3
    assert e[IP].tos == (26 << 2) | 3 and e[IP].ttl == 4
    chk = e[IP].chksum
    del e[IP].chksum
    assert IP(bytes(e[IP])).chksum == chk
    # pop_vlan, and a later table sees the rewritten header.
    pl2 = Pipeline(ports=mkports())
    flow(
        pl2,
        {},
        instructions=[
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionPopVlan()]),
            p.OFPInstructionGotoTable(1),
        ],
    )
    flow(pl2, {"vlan_vid": 0}, [out(3)], table=1)
    outs, _ = pl2.process(1, f, 0)
    assert ports_of(outs) == [3] and Dot1Q not in Ether(outs[0][1])


def test_ttl_expired_dropped() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {}, [p.OFPActionDecNwTtl(), out(2)])
    assert pl.process(1, udp(ttl=1), 0) == ([], [])
    assert pl.dropped_ttl == 1


def test_flood_all_in_port_controller() -> None:
    ports = mkports(5)
    ports[3].config |= OFPPC_NO_FWD
    ports[4].link_up = False
    pl = Pipeline(ports=ports)
    flow(pl, {"udp_src": 1, "eth_type": 0x800, "ip_proto": 17}, [out(ofp.OFPP_FLOOD)])
    flow(pl, {"udp_src": 2, "eth_type": 0x800, "ip_proto": 17}, [out(ofp.OFPP_ALL)])
    flow(pl, {"udp_src": 3, "eth_type": 0x800, "ip_proto": 17}, [out(ofp.OFPP_IN_PORT)])
    flow(pl, {"udp_src": 4, "eth_type": 0x800, "ip_proto": 17}, [out(4)])
    flow(pl, {}, [out(ofp.OFPP_CONTROLLER, 128)], prio=0, cookie=0x77)
    assert ports_of(pl.process(1, udp(1), 0)[0]) == [2, 5]
    assert ports_of(pl.process(1, udp(2), 0)[0]) == [2, 3, 5]
    assert ports_of(pl.process(2, udp(3), 0)[0]) == [2]
    assert pl.process(1, udp(4), 0) == ([], []) and ports[4].counters.tx_dropped == 1
    outs, pins = pl.process(1, udp(99), 0)
    assert outs == [] and pins[0].reason == ofp.OFPR_NO_MATCH and pins[0].cookie == 0x77
    assert pins[0].max_len == 128 and pins[0].in_port == 1


def test_counters_and_table_stats() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {}, [out(2)])
    f = udp()
    for _ in range(3):
        pl.process(1, f, 1.0)
    [e] = pl.flow_stats()
    assert (e.ctr.packets, e.ctr.bytes) == (3, 3 * len(f))
    assert pl.table_stats()[0] == (0, 1, 3, 3)
    assert pl.aggregate_stats() == (3, 3 * len(f), 1)


# ----- flow mods ---------------------------------------------------------------------


def test_modify_delete_strict_cookie_out_port() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {"eth_type": 0x800}, [out(2)], prio=10, cookie=0x11)
    flow(pl, {"eth_type": 0x800, "ip_proto": 17}, [out(3)], prio=20, cookie=0x22)
    flow(pl, {}, [out(4)], prio=0, cookie=0x21)
    flow(pl, {"eth_type": 0x800}, [out(5)], cmd=ofp.OFPFC_MODIFY_STRICT, prio=10)
    assert pl.tables[0].entries[1].apply.ports == {5}
    removed = flow(
        pl,
        {},
        cmd=ofp.OFPFC_DELETE,
        cookie=0x20,
        cookie_mask=0xF0,
        table=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
    )
    assert sorted(e.cookie for e in removed) == [0x21, 0x22]
    flow(pl, {"eth_type": 0x800}, [out(3)], prio=30)
    removed = flow(
        pl,
        {"eth_type": 0x800},
        cmd=ofp.OFPFC_DELETE,
        table=ofp.OFPTT_ALL,
        out_port=3,
        out_group=ofp.OFPG_ANY,
    )
    assert [e.priority for e in removed] == [30]
    assert (
        flow(
            pl,
            {"eth_type": 0x800},
            cmd=ofp.OFPFC_DELETE_STRICT,
            prio=11,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
        )
        == []
    )
    assert (
        len(
            flow(
                pl,
                {"eth_type": 0x800},
                cmd=ofp.OFPFC_DELETE_STRICT,
                prio=10,
                out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY,
            )
        )
        == 1
    )


def test_check_overlap() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {"eth_type": 0x800, "ipv4_dst": ("10.0.0.0", "255.0.0.0")}, [out(2)])
    with pytest.raises(OFError) as ei:
        flow(
            pl, {"eth_type": 0x800, "ipv4_dst": "10.1.2.3"}, [out(2)], flags=ofp.OFPFF_CHECK_OVERLAP
        )
    assert ei.value.code == ofp.OFPFMFC_OVERLAP
    flow(pl, {"eth_type": 0x800, "ipv4_dst": "11.1.2.3"}, [out(2)], flags=ofp.OFPFF_CHECK_OVERLAP)


def test_timeouts_with_injected_time() -> None:
    pl = Pipeline(ports=mkports())
    pl.flow_mod(
        p.OFPFlowMod(
            None,
            priority=2,
            match=p.OFPMatch(eth_type=0x800),
            idle_timeout=5,
            flags=ofp.OFPFF_SEND_FLOW_REM,
            instructions=[],
        ),
        0.0,
    )
    pl.flow_mod(
        p.OFPFlowMod(None, priority=1, match=p.OFPMatch(), hard_timeout=8, instructions=[]), 0.0
    )
    pl.process(1, udp(), 4.0)
    assert pl.expire(8.5)[0].removed_reason == ofp.OFPRR_HARD_TIMEOUT
    assert pl.expire(8.9) == []
    [e] = pl.expire(9.0)
    assert e.removed_reason == ofp.OFPRR_IDLE_TIMEOUT


def test_cache_invalidation_on_flow_add_and_liveness() -> None:
    ports = mkports()
    pl = Pipeline(ports=ports)
    flow(pl, {}, [out(2)], prio=1)
    f = udp()
    assert ports_of(pl.process(1, f, 0)[0]) == [2]
    flow(pl, {"eth_type": 0x800}, [out(3)], prio=5)
    assert ports_of(pl.process(1, f, 0)[0]) == [3]
    flow(pl, {}, [out(ofp.OFPP_FLOOD)], prio=9)
    assert ports_of(pl.process(1, f, 0)[0]) == [2, 3, 4, 5]
    ports[3].link_up = False
    pl.invalidate()
    assert ports_of(pl.process(1, f, 0)[0]) == [2, 4, 5]
    ports[6] = PortState(6, "s1-eth6", bytes(6), 10**8)  # new port: noticed without a call
    assert ports_of(pl.process(1, f, 0)[0]) == [2, 4, 5, 6]


# ----- groups ------------------------------------------------------------------------


def spread(pl: Pipeline) -> dict[int, int]:
    c: collections.Counter = collections.Counter()
    for sp in range(1000):
        for port, _, _ in pl.process(1, udp(sport=10000 + sp), 0)[0]:
            c[port] += 1
    return c


def test_select_spreads_and_depends_on_seed() -> None:
    pl, _ = select_pipeline(seed=0)
    c = spread(pl)
    assert sum(c.values()) == 1000 and set(c) == {2, 3, 4, 5}
    assert all(180 <= v <= 320 for v in c.values()), c
    pl1, _ = select_pipeline(seed=1)
    choices0 = [pl.process(1, udp(sport=s), 0)[0][0][0] for s in range(200)]
    choices1 = [pl1.process(1, udp(sport=s), 0)[0][0][0] for s in range(200)]
    assert choices0 != choices1
    g = pl.groups[1]
    assert g.ctr.packets == 1200 and sum(b.packets for b in g.bucket_ctrs) == 1200


def test_select_skips_dead_buckets_and_weights() -> None:
    pl, ports = select_pipeline()
    ports[3].link_up = False
    pl.invalidate()
    c = spread(pl)
    assert set(c) == {2, 4, 5}
    pl2 = Pipeline(ports=mkports())
    group(pl2, 1, ofp.OFPGT_SELECT, [bucket([out(2)], weight=3), bucket([out(3)], weight=1)])
    flow(pl2, {}, [p.OFPActionGroup(1)])
    c = spread(pl2)
    assert 650 <= c[2] <= 850


def test_fast_failover_and_indirect_and_all() -> None:
    ports = mkports()
    pl = Pipeline(ports=ports)
    group(
        pl,
        1,
        ofp.OFPGT_FF,
        [bucket([out(2)], 0, 2), bucket([out(3)], 0, 3), bucket([out(4)], 0, 4)],
    )
    group(pl, 2, ofp.OFPGT_INDIRECT, [bucket([p.OFPActionGroup(1)], 0)])
    group(pl, 3, ofp.OFPGT_ALL, [bucket([out(5)], 0), bucket([p.OFPActionGroup(2)], 0)])
    flow(pl, {}, [p.OFPActionGroup(3)])
    assert ports_of(pl.process(1, udp(), 0)[0]) == [5, 2]
    ports[2].link_up = False
    pl.invalidate()
    assert ports_of(pl.process(1, udp(), 0)[0]) == [5, 3]
    ports[3].config |= 1  # OFPPC_PORT_DOWN
    pl.invalidate()
    assert ports_of(pl.process(1, udp(), 0)[0]) == [5, 4]
    assert pl.group_ref_count(1) == 1


def test_group_errors_and_delete_removes_flows() -> None:
    pl = Pipeline(ports=mkports())
    group(pl, 1, ofp.OFPGT_ALL, [bucket([out(2)], 0)])
    with pytest.raises(OFError) as ei:
        group(pl, 1, ofp.OFPGT_ALL, [])
    assert ei.value.code == ofp.OFPGMFC_GROUP_EXISTS
    with pytest.raises(OFError) as ei:
        group(pl, 9, ofp.OFPGT_ALL, [], cmd=ofp.OFPGC_MODIFY)
    assert ei.value.code == ofp.OFPGMFC_UNKNOWN_GROUP
    with pytest.raises(OFError) as ei:
        group(pl, ofp.OFPG_ALL, ofp.OFPGT_ALL, [])
    assert ei.value.code == ofp.OFPGMFC_INVALID_GROUP
    group(pl, 2, ofp.OFPGT_ALL, [bucket([p.OFPActionGroup(1)], 0)])
    with pytest.raises(OFError) as ei:
        group(pl, 1, ofp.OFPGT_ALL, [bucket([p.OFPActionGroup(2)], 0)], cmd=ofp.OFPGC_MODIFY)
    assert ei.value.code == ofp.OFPGMFC_LOOP
    with pytest.raises(OFError) as ei:
        group(pl, 5, ofp.OFPGT_FF, [bucket([out(2)], 0)])
    assert ei.value.code == ofp.OFPGMFC_BAD_WATCH
    with pytest.raises(OFError) as ei:
        group(pl, 1, 0, [], cmd=ofp.OFPGC_DELETE)
    assert ei.value.code == ofp.OFPGMFC_CHAINED_GROUP
    flow(pl, {}, [p.OFPActionGroup(2)], prio=3)
    flow(pl, {}, [out(3)], prio=1)
    removed = group(pl, 2, 0, [], cmd=ofp.OFPGC_DELETE)
    assert [e.priority for e in removed] == [3]
    assert removed[0].removed_reason == ofp.OFPRR_GROUP_DELETE
    assert ports_of(pl.process(1, udp(), 0)[0]) == [3]
    with pytest.raises(OFError) as ei:
        flow(pl, {}, [p.OFPActionGroup(2)])
    assert ei.value.code == ofp.OFPBAC_BAD_OUT_GROUP


def test_packet_out_table_and_ports() -> None:
    pl = Pipeline(ports=mkports())
    flow(pl, {}, [out(4)])
    outs, _ = pl.packet_out(ofp.OFPP_CONTROLLER, [out(ofp.OFPP_TABLE)], udp(), 0)
    assert ports_of(outs) == [4]
    outs, _ = pl.packet_out(ofp.OFPP_CONTROLLER, [out(2), out(ofp.OFPP_ALL)], udp(), 0)
    assert ports_of(outs) == [2, 1, 2, 3, 4, 5]
    with pytest.raises(OFError):
        flow(pl, {}, [out(ofp.OFPP_TABLE)])


# ----- trace -------------------------------------------------------------------------


def test_trace_gives_the_select_choice_process_makes_and_changes_nothing() -> None:
    pl, ports = select_pipeline(seed=7)
    flow(
        pl,
        {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"},
        [p.OFPActionSetField(eth_dst="02:00:00:00:00:09"), out(4)],
        prio=20,
        cookie=0x99,
    )
    before = (pl.groups[1].ctr.packets, pl.cache_misses, len(pl._cache))
    for sp in range(50):
        t = pl.trace(1, udp(sport=sp))
        assert t["dropped"] is None and t["entries"] == [(0, 10, 0)]
        [(port, queue, _frame)] = t["outputs"]
        assert queue is None
        assert (pl.groups[1].ctr.packets, pl.cache_misses, len(pl._cache)) == before
        assert ports_of(pl.process(1, udp(sport=sp), 0)[0]) == [port]
        before = (pl.groups[1].ctr.packets, pl.cache_misses, len(pl._cache))
    # The frame as it leaves: the rewrite is applied, the entry named.
    t = pl.trace(1, udp(dst="10.0.0.9"))
    [(port, _q, frame)] = t["outputs"]
    assert port == 4 and t["entries"] == [(0, 20, 0x99)]
    assert Ether(bytes.fromhex(frame)).dst == "02:00:00:00:00:09"
    # A dead bucket's port is not chosen; no flow at all is a drop by table miss.
    ports[4].link_up = False
    pl.invalidate()
    assert {pl.trace(1, udp(sport=s))["outputs"][0][0] for s in range(100)} == {2, 3, 5}
    assert Pipeline(ports=mkports()).trace(1, udp()) == {
        "entries": [],
        "outputs": [],
        "controller": 0,
        "flowlet": [],
        "adaptive": [],
        "adaptive_counts": {
            "decisions": 0,
            "paused_skips": 0,
            "all_paused": 0,
            "picks": {},
            "ugal_decisions": 0,
            "ugal_nonminimal": 0,
        },
        "dropped": "no match",
    }
