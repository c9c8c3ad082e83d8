"""OpenFlow 1.3 families on a live emu switch, with real frames (issue 12).

Each test programs one switch (emu.testbed) the way a Ryu/os-ken app does
(os-ken message classes) or an operator does (`ovs-ofctl -O OpenFlow13`),
sends Scapy-built frames into a port and checks what leaves each port:
headers, checksums, counters. The field-by-field cases are in
tests/unit/test_of13_pipeline.py; here each family runs end to end through the
switch process, its sockets and the kernel.
"""

from __future__ import annotations

import math
import os
import re
import subprocess

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.sctp import SCTP
from scapy.packet import Raw

from emu.registry import wait_for
from emu.testbed import SwitchTestbed
from emu.traffic import iperf

from .. import of13_cases
from ..of13_cases import checksums_right

MAC1, MAC2 = "02:00:00:00:00:01", "02:00:00:00:00:02"


def add_flow(c, match: dict, actions: list, instructions: list | None = None, prio: int = 10):
    ins = instructions or [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    c.send(p.OFPFlowMod(c.datapath, priority=prio, match=p.OFPMatch(**match), instructions=ins))
    assert c.barrier() == []


def only(received: dict, port: int) -> list[bytes]:
    """The frames that left `port`, after checking no other port sent any."""
    others = {k: len(v) for k, v in received.items() if k != port and v}
    assert not others, f"frames left other ports: {others}"
    return received[port]


def test_a_tagged_frame_is_matched_on_its_vid_and_popped(testbed):
    with testbed.controller() as c:
        add_flow(
            c, {"in_port": 1, "vlan_vid": 0x1000 | 5}, [p.OFPActionPopVlan(), p.OFPActionOutput(2)]
        )
        add_flow(c, {"in_port": 1}, [p.OFPActionOutput(3)], prio=1)
    inner = Ether(src=MAC1, dst=MAC2) / IP() / UDP() / Raw(b"x" * 20)
    testbed.send(
        1, bytes(Ether(src=MAC1, dst=MAC2) / Dot1Q(vlan=5, prio=3) / IP() / UDP() / Raw(b"x" * 20))
    )
    [out] = only(testbed.receive(), 2)
    assert out == bytes(inner)  # the tag is gone, nothing else changed
    testbed.send(1, bytes(inner))
    assert len(only(testbed.receive(), 3)) == 1  # untagged: the other flow


def test_ovs_ofctl_rewrites_a_vid_and_pushes_an_802_1ad_tag(testbed):
    testbed.ofctl("add-flow", "in_port=1,dl_vlan=5,actions=mod_vlan_vid:7,output:2")
    testbed.ofctl(
        "add-flow", "in_port=3,actions=push_vlan:0x88a8,set_field:4196->vlan_vid,output:4"
    )
    testbed.send(1, bytes(Ether(src=MAC1, dst=MAC2) / Dot1Q(vlan=5) / IP() / UDP()))
    [out] = only(testbed.receive(), 2)
    assert Ether(out)[Dot1Q].vlan == 7
    testbed.send(3, bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()))
    [out] = only(testbed.receive(), 4)
    tagged = Ether(out)
    assert tagged.type == 0x88A8 and tagged[Dot1AD].vlan == 100 and tagged[Dot1AD].type == 0x800


def test_mpls_push_set_label_and_pop(testbed):
    with testbed.controller() as c:
        add_flow(
            c,
            {"in_port": 1},
            [
                p.OFPActionPushMpls(0x8847),
                p.OFPActionSetField(mpls_label=1234),
                p.OFPActionDecMplsTtl(),
                p.OFPActionOutput(2),
            ],
        )
    testbed.ofctl("add-flow", "in_port=3,mpls,mpls_label=99,actions=pop_mpls:0x0800,output:4")
    testbed.send(1, bytes(Ether(src=MAC1, dst=MAC2) / IP(ttl=40) / UDP()))
    [out] = only(testbed.receive(), 2)
    label = Ether(out)[MPLS]
    assert (label.label, label.s, label.ttl) == (1234, 1, 39)
    ip = Ether(src=MAC1, dst=MAC2) / IP(ttl=40) / UDP()
    testbed.send(3, bytes(Ether(src=MAC1, dst=MAC2) / MPLS(label=99, ttl=7) / ip[IP]))
    [out] = only(testbed.receive(), 4)
    # The label is gone; the 42-byte IPv4/UDP frame leaves padded to Ethernet's 60.
    assert out == bytes(ip) + bytes(60 - len(ip))


def test_ipv6_set_field_keeps_the_udp_checksum_and_nd_target_matches(testbed):
    with testbed.controller() as c:
        add_flow(
            c,
            {"in_port": 1, "eth_type": 0x86DD, "ip_proto": 17},
            [p.OFPActionSetField(ipv6_dst="2001:db8::99"), p.OFPActionOutput(2)],
        )
    testbed.ofctl(
        "add-flow", "in_port=3,icmp6,icmp_type=135,nd_target=2001:db8::9,actions=output:4"
    )
    frame = Ether(src=MAC1, dst=MAC2) / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP()
    testbed.send(1, bytes(frame / Raw(b"y" * 30)))
    [out] = only(testbed.receive(), 2)
    assert Ether(out)[IPv6].dst == "2001:db8::99" and checksums_right(out)
    ns = Ether(src=MAC1, dst=MAC2) / IPv6() / ICMPv6ND_NS(tgt="2001:db8::9")
    testbed.send(3, bytes(ns / ICMPv6NDOptSrcLLAddr(lladdr=MAC1)))
    testbed.send(3, bytes(Ether(src=MAC1, dst=MAC2) / IPv6() / ICMPv6ND_NS(tgt="2001:db8::8")))
    assert len(only(testbed.receive(), 4)) == 1  # only the first target matches


def test_sctp_port_rewrite_recomputes_the_crc(testbed):
    with testbed.controller() as c:
        add_flow(
            c,
            {"in_port": 1, "eth_type": 0x800, "ip_proto": 132, "sctp_dst": 2905},
            [p.OFPActionSetField(sctp_dst=3868), p.OFPActionOutput(2)],
        )
    testbed.send(
        1, bytes(Ether(src=MAC1, dst=MAC2) / IP() / SCTP(sport=5, dport=2905) / Raw(b"z" * 16))
    )
    [out] = only(testbed.receive(), 2)
    assert Ether(out)[SCTP].dport == 3868 and checksums_right(out)


def test_a_weighted_select_group_splits_flows_in_proportion(testbed):
    with testbed.controller() as c:
        buckets = [
            p.OFPBucket(weight=3, actions=[p.OFPActionOutput(2)]),
            p.OFPBucket(weight=1, actions=[p.OFPActionOutput(3)]),
        ]
        c.send(p.OFPGroupMod(c.datapath, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, 1, buckets))
        add_flow(c, {"in_port": 1}, [p.OFPActionGroup(1)])
    flows = 400
    for sport in range(1000, 1000 + flows):
        testbed.send(1, bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP(sport=sport, dport=9)))
    got = testbed.receive(timeout_s=5.0)
    n2, n3 = len(got[2]), len(got[3])
    assert n2 + n3 == flows and not got[4]
    # Each flow lands on port 2 with probability 3/4: a binomial count, 4 sigma either way.
    sigma = math.sqrt(flows * 0.75 * 0.25)
    assert abs(n2 - 0.75 * flows) <= 4 * sigma, (n2, n3)


def test_a_meter_from_ovs_ofctl_limits_a_host_and_counts_what_it_dropped(testbed):
    testbed.ofctl("add-meter", "meter=1,pktps,burst,stats,bands=type=drop,rate=50,burst_size=20")
    testbed.ofctl("add-flow", "in_port=1,actions=meter:1,output:2")
    frame = bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP() / Raw(b"m" * 100))
    for _ in range(300):
        testbed.send(1, frame)  # a burst far above 50 frames/s: a few ms on the wire
    passed = len(only(testbed.receive(timeout_s=3.0), 2))
    # The bucket passes its 20-frame burst plus 50 frames/s for the burst's duration;
    # 300 sends take well under 0.5 s here, so at most 20 + 25 pass.
    assert 20 <= passed <= 45, passed
    stats = testbed.ofctl("meter-stats")
    assert "meter:1" in stats and "packet_in_count:300" in stats.replace(" ", "")
    dropped = int(re.search(r"packet_count:(\d+)", stats.split("band")[1]).group(1))
    assert dropped == 300 - passed
    assert "rate=50" in testbed.ofctl("dump-meters")


def test_normal_switches_like_a_learning_bridge_and_local_is_refused(testbed):
    testbed.ofctl("add-flow", "actions=NORMAL")
    a, b = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
    a_to_b = bytes(Ether(src=a, dst=b) / IP() / UDP())
    testbed.send(1, a_to_b)
    got = testbed.receive()
    assert got[2] == got[3] == got[4] == [a_to_b] and not got[1]  # b unknown: flooded
    testbed.send(3, bytes(Ether(src=b, dst=a) / IP() / UDP()))
    assert len(only(testbed.receive(), 1)) == 1  # a was learned on port 1
    testbed.send(1, a_to_b)
    assert only(testbed.receive(), 3) == [a_to_b]  # and b on port 3
    result = testbed.ofctl("add-flow", "in_port=1,actions=LOCAL", check=False)
    assert result.returncode != 0 and "OFPBAC_BAD_OUT_PORT" in result.stdout + result.stderr


RATE_LIMIT_KBPS = 4000
RATE_LIMIT_BURST_KB = 40
PAYLOAD_BYTES = 1000
# What a kbps meter counts per datagram: the Ethernet frame (UDP 8, IPv4 20, Ethernet 14).
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14


@pytest.mark.emu_fabric(leaves=2, spines=1, hosts_per_leaf=2, host_rate_bps=20_000_000)
def test_a_lab_rate_limits_one_host_with_a_meter_beside_the_routing_controller(fabric):
    """The README's "rate-limit this host": a meter and one flow added with ovs-ofctl."""
    h2 = fabric.graph.nodes["h2"]
    port = fabric.graph.edges["h2", "leaf1"]["ports"]["leaf1"]
    src_ip, dst_ip = fabric.graph.nodes["h1"]["ip"], h2["ip"]
    fabric.ofctl(
        "leaf1",
        "add-meter",
        f"meter=1,kbps,burst,stats,bands=type=drop,rate={RATE_LIMIT_KBPS},"
        f"burst_size={RATE_LIMIT_BURST_KB}",
    )
    # The same actions as routing's host route to h2, behind the meter.
    fabric.ofctl(
        "leaf1",
        "add-flow",
        f"priority=40000,ip,nw_src={src_ip},nw_dst={dst_ip},"
        f"actions=meter:1,set_field:{h2['mac']}->eth_dst,output:{port}",
    )
    seconds = 4
    result = iperf.run(fabric, "h1", "h2", seconds, udp=True, bitrate="12M", length=PAYLOAD_BYTES)
    total = result["end"]["sum"]  # the sender's counts, with the receiver's losses
    received = (total["packets"] - total["lost_packets"]) * PAYLOAD_BYTES * 8 / seconds / 1e6
    # The token bucket's model: its rate over the test plus one burst, in payload bits.
    model = (RATE_LIMIT_KBPS * 1e3 * seconds + RATE_LIMIT_BURST_KB * 1e3) / seconds / 1e6
    model *= PAYLOAD_BYTES / FRAME_BYTES
    assert 0.9 * model <= received <= model * 1.01, (received, model)
    stats = fabric.ofctl("leaf1", "meter-stats")
    dropped = int(re.search(r"packet_count:(\d+)", stats.split("band")[1]).group(1))
    assert dropped > 0


def test_a_port_that_went_down_and_up_forwards_again(testbed):
    """A downed interface leaves an error on the port's ring socket; the switch clears it."""
    testbed.ofctl("add-flow", "in_port=1,actions=output:2")
    switch_end = testbed.pairs[2][0]
    subprocess.run(["ip", "link", "set", switch_end, "down"], check=True)
    testbed.send(1, bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()))
    assert not any(testbed.receive(quiet_s=0.3).values())
    subprocess.run(["ip", "link", "set", switch_end, "up"], check=True)
    frame = bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP(dport=7))

    def forwarded() -> bool:
        testbed.send(1, frame)
        return frame in testbed.receive(quiet_s=0.1)[2]

    wait_for(forwarded, 5, "a frame forwarded after the port came back up")


# ----- every field through a live switch ------------------------------------------------


@pytest.fixture(scope="module")
def one_switch(tmp_path_factory):
    """One testbed for the per-field cases: flows are deleted between cases."""
    if os.geteuid() != 0:
        pytest.skip("needs root: it makes veth pairs")
    with SwitchTestbed(out_dir=tmp_path_factory.mktemp("of13")) as tb:
        yield tb


def fresh_flows(tb, c, flows: list[tuple[dict, list]]) -> None:
    delete = p.OFPFlowMod(
        c.datapath,
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=p.OFPMatch(),
    )
    c.send(delete)
    for match, actions, prio in flows:
        add_flow(c, match, actions, prio=prio)
    tb.drain()


@pytest.mark.parametrize(
    "name,match,hit,miss", of13_cases.MATCH_CASES, ids=[c[0] for c in of13_cases.MATCH_CASES]
)
def test_every_match_field_on_a_live_switch(one_switch, name, match, hit, miss):
    with one_switch.controller() as c:
        fresh_flows(
            one_switch,
            c,
            [(match, [p.OFPActionOutput(2)], 100), ({}, [p.OFPActionOutput(3)], 0)],
        )
    in_port = match.get("in_port", 1)
    one_switch.send(in_port, bytes(hit))
    assert only(one_switch.receive(), 2) == [bytes(hit)], f"{name}: the matching frame"
    if miss is not None:
        port, frame = miss if isinstance(miss, tuple) else (in_port, miss)
        one_switch.send(port, bytes(frame))
        got = one_switch.receive()
        assert not got[2] and len(got[3]) == 1, f"{name}: the other frame"


@pytest.mark.parametrize(
    "field,value,frame,want",
    of13_cases.SET_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(of13_cases.SET_CASES)],
)
def test_every_set_field_on_a_live_switch(one_switch, field, value, frame, want):
    with one_switch.controller() as c:
        actions = [p.OFPActionSetField(**{field: value}), p.OFPActionOutput(2)]
        fresh_flows(one_switch, c, [({"in_port": 1}, actions, 10)])
    one_switch.send(1, bytes(frame))
    [out] = only(one_switch.receive(), 2)
    layer, attr, expected = want
    if field != "icmpv6_type":  # Scapy dissects an echo reply as another class
        assert getattr(Ether(out)[layer], attr) == expected
    assert checksums_right(out), f"{field}: a checksum is wrong on the wire"


def _mpls_ip(ttl: int = 9, ip_ttl: int = 60) -> bytes:
    return bytes(Ether(src=MAC1, dst=MAC2) / MPLS(label=7, ttl=ttl) / IP(ttl=ip_ttl) / UDP())


# Every action on the wire: the actions, the frame sent, what must hold of the frame out.
ACTION_CASES = [
    (
        "push_vlan",
        [p.OFPActionPushVlan(0x8100)],
        bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()),
        lambda f: Ether(f)[Dot1Q].vlan == 0,
    ),
    (
        "pop_vlan",
        [p.OFPActionPopVlan()],
        bytes(Ether(src=MAC1, dst=MAC2) / Dot1Q(vlan=4) / IP() / UDP()),
        lambda f: Ether(f).type == 0x800,
    ),
    (
        "push_mpls",
        [p.OFPActionPushMpls(0x8847)],
        bytes(Ether(src=MAC1, dst=MAC2) / IP(ttl=20) / UDP()),
        lambda f: Ether(f)[MPLS].ttl == 20,
    ),
    ("pop_mpls", [p.OFPActionPopMpls(0x800)], _mpls_ip(), lambda f: Ether(f).type == 0x800),
    ("set_mpls_ttl", [p.OFPActionSetMplsTtl(33)], _mpls_ip(), lambda f: Ether(f)[MPLS].ttl == 33),
    ("dec_mpls_ttl", [p.OFPActionDecMplsTtl()], _mpls_ip(), lambda f: Ether(f)[MPLS].ttl == 8),
    ("copy_ttl_in", [p.OFPActionCopyTtlIn()], _mpls_ip(), lambda f: Ether(f)[IP].ttl == 9),
    ("copy_ttl_out", [p.OFPActionCopyTtlOut()], _mpls_ip(), lambda f: Ether(f)[MPLS].ttl == 60),
    (
        "set_nw_ttl",
        [p.OFPActionSetNwTtl(77)],
        bytes(Ether(src=MAC1, dst=MAC2) / IP(ttl=5) / UDP()),
        lambda f: Ether(f)[IP].ttl == 77,
    ),
    (
        "dec_nw_ttl ipv6",
        [p.OFPActionDecNwTtl()],
        bytes(Ether(src=MAC1, dst=MAC2) / IPv6(hlim=5) / UDP()),
        lambda f: Ether(f)[IPv6].hlim == 4,
    ),
    (
        "push_pbb",
        [p.OFPActionPushPbb(0x88E7)],
        bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()),
        lambda f: f[12:14] == b"\x88\xe7" and f[18:30] == f[:12],
    ),
    (
        "pop_pbb",
        [p.OFPActionPopPbb()],
        of13_cases.pbb(5),
        lambda f: f == of13_cases.pbb(5)[18:],
    ),
    (
        "set_queue",
        [p.OFPActionSetQueue(5)],
        bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()),
        lambda f: Ether(f).type == 0x800,
    ),
]


@pytest.mark.parametrize("name,actions,frame,holds", ACTION_CASES, ids=[c[0] for c in ACTION_CASES])
def test_every_action_on_a_live_switch(one_switch, name, actions, frame, holds):
    with one_switch.controller() as c:
        fresh_flows(one_switch, c, [({"in_port": 1}, [*actions, p.OFPActionOutput(2)], 10)])
    one_switch.send(1, frame)
    [out] = only(one_switch.receive(), 2)
    assert holds(out), f"{name}: {out.hex()}"
    assert checksums_right(out), f"{name}: a checksum is wrong on the wire"


def test_set_queue_puts_the_frame_in_that_priority_and_queue_stats_count_it(one_switch):
    with one_switch.controller() as c:
        fresh_flows(
            one_switch, c, [({"in_port": 1}, [p.OFPActionSetQueue(5), p.OFPActionOutput(2)], 10)]
        )

    def queue_packets() -> int:
        stats = one_switch.ofctl("queue-stats", "2", "5")
        return int(re.search(r"pkts=(\d+)", stats).group(1))

    before = queue_packets()
    for _ in range(3):
        one_switch.send(1, bytes(Ether(src=MAC1, dst=MAC2) / IP() / UDP()))
    assert len(only(one_switch.receive(), 2)) == 3
    assert queue_packets() == before + 3
