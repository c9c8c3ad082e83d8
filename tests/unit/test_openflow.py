"""Unit tests of the switch's OpenFlow 1.3 agent (emu/switch/openflow.py, ofcodec.py).

Golden vectors are os-ken's binary OF1.3 messages; replies are decoded with
os-ken's parser, and (when installed) ovs-ofctl talks to the agent over
loopback TCP. No root needed.
"""

from __future__ import annotations

import pathlib
import shutil
import socket
import struct
import threading
import time

import os_ken
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu import ofctl as emu_ofctl
from emu.switch.openflow import (
    FlowsRemoved,
    OpenFlowSession,
    PortChanged,
    Reply,
    SwitchModel,
    Transmit,
    reply_bytes,
)
from emu.switch.pipeline import PacketIn
from emu.switch.ports import OFPPC_NO_PACKET_IN, OFPPC_PORT_DOWN

from .fakes import decode, encode, errors, frame, mkmodel, session

GOLDEN = pathlib.Path(os_ken.__file__).parent / "tests" / "packet_data" / "of13"


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


# ----- golden vectors -----------------------------------------------------------------


def test_golden_echo_barrier_features_config() -> None:
    s = session()
    [r] = reply_bytes(s.feed(golden("4-13-ofp_echo_request.packet"), 0))
    req = decode(golden("4-13-ofp_echo_request.packet"))
    rep = decode(r)
    assert isinstance(rep, p.OFPEchoReply) and rep.xid == req.xid and rep.data == req.data
    [r] = reply_bytes(s.feed(golden("4-17-ofp_barrier_request.packet"), 0))
    assert isinstance(decode(r), p.OFPBarrierReply)
    [r] = reply_bytes(s.feed(golden("4-5-ofp_features_request.packet"), 0))
    f = decode(r)
    assert (f.datapath_id, f.n_buffers, f.n_tables) == (0x1234, 0, 8)
    assert (
        f.capabilities
        == ofp.OFPC_FLOW_STATS | ofp.OFPC_TABLE_STATS | ofp.OFPC_PORT_STATS | ofp.OFPC_GROUP_STATS
    )
    assert s.feed(golden("4-7-ofp_set_config.packet"), 0) == []
    [r] = reply_bytes(s.feed(golden("4-8-ofp_get_config_request.packet"), 0))
    c = decode(r)
    sent = decode_set_config(golden("4-7-ofp_set_config.packet"))
    assert (c.flags, c.miss_send_len) == sent


def decode_set_config(b: bytes) -> tuple[int, int]:
    return struct.unpack_from("!HH", b, 8)


def test_golden_flow_mod_rejects_unsupported_actions() -> None:
    s = session()
    b = golden("4-2-ofp_flow_mod.packet")
    [r] = reply_bytes(s.feed(b, 0))
    e = decode(r)
    assert (e.type, e.code) == (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_TYPE)
    assert e.xid == decode(b).xid and e.data == b[:64]
    assert s.model.pipeline.flow_stats() == []


def test_golden_group_mod_and_group_stats() -> None:
    s = session()
    assert s.feed(golden("4-21-ofp_group_mod.packet"), 0) == []
    g = s.model.pipeline.groups[1]
    assert g.type == ofp.OFPGT_ALL and len(g.buckets) == 1
    [r] = reply_bytes(s.feed(golden("4-33-ofp_group_desc_request.packet"), 0))
    [d] = decode(r).body
    assert d.group_id == 1 and d.buckets[0].actions[0].port == 2
    [r] = reply_bytes(s.feed(golden("4-57-ofp_group_stats_request.packet"), 0))
    assert isinstance(decode(r), p.OFPGroupStatsReply)
    [r] = reply_bytes(s.feed(golden("4-31-ofp_group_features_request.packet"), 0))
    assert decode(r).body.types == 0xF


def test_golden_port_mod() -> None:
    model = mkmodel()
    b = golden("4-22-ofp_port_mod.packet")
    port_no, hw = struct.unpack_from("!I4x6s", b, 8)
    s = session(model)
    [err] = s.feed(b, 0)  # a rejected PortMod changes nothing: the error is all
    assert errors([err]) == [(ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_BAD_HW_ADDR)]
    model.ports[port_no].hw_addr = hw
    assert s.feed(b, 0) == [PortChanged(port_no)]
    _, _, config, mask = struct.unpack_from("!I4x6s2xII", b, 8)
    assert model.ports[port_no].config == config & mask


def test_golden_packet_out_all() -> None:
    s = session()
    [effect] = s.feed(golden("4-1-ofp_packet_out.packet"), 0)
    assert isinstance(effect, Transmit)
    assert [o[0] for o in effect.outputs] == [1, 2, 3, 4, 5, 6]  # OFPP_ALL from OFPP_CONTROLLER


def test_golden_role_async_multipart() -> None:
    s = session()
    [r] = reply_bytes(s.feed(golden("4-19-ofp_role_request.packet"), 0))
    rr = decode(r)
    req = struct.unpack_from("!I4xQ", golden("4-19-ofp_role_request.packet"), 8)
    assert (rr.role, rr.generation_id) == req
    assert s.feed(golden("4-44-ofp_set_async.packet"), 0) == []
    [r] = reply_bytes(s.feed(golden("4-42-ofp_get_async_request.packet"), 0))
    ga = decode(r)
    sa = struct.unpack_from("!6I", golden("4-44-ofp_set_async.packet"), 8)
    assert tuple(ga.packet_in_mask + ga.port_status_mask + ga.flow_removed_mask) == sa
    for name, cls in [
        ("4-24-ofp_desc_request.packet", p.OFPDescStatsReply),
        ("4-53-ofp_port_desc_request.packet", p.OFPPortDescStatsReply),
        ("4-29-ofp_port_stats_request.packet", p.OFPPortStatsReply),
        ("4-27-ofp_table_stats_request.packet", p.OFPTableStatsReply),
        ("4-11-ofp_flow_stats_request.packet", p.OFPFlowStatsReply),
        ("4-25-ofp_aggregate_stats_request.packet", p.OFPAggregateStatsReply),
    ]:
        replies = reply_bytes(s.feed(golden(name), 0))
        assert replies and all(isinstance(decode(r), cls) for r in replies), name
    [r] = reply_bytes(s.feed(golden("4-53-ofp_port_desc_request.packet"), 0))
    ports = decode(r).body
    assert [q.port_no for q in ports] == [1, 2, 3, 4, 5, 6]
    assert ports[0].name == b"s1-eth1" and ports[0].curr_speed == 100000
    # A table features request with a body would reconfigure tables: refused.
    assert errors(s.feed(golden("4-55-ofp_table_features_request.packet"), 0)) == [
        (ofp.OFPET_TABLE_FEATURES_FAILED, ofp.OFPTFFC_EPERM)
    ]
    [r] = reply_bytes(s.feed(encode(p.OFPTableFeaturesStatsRequest(None, 0, [])), 0))
    tf = decode(r).body
    assert [t.table_id for t in tf] == list(range(8))
    # os-ken's queue stats request (every port, every queue) is answered.
    [r] = reply_bytes(s.feed(golden("4-37-ofp_queue_stats_request.packet"), 0))
    assert decode(r).body == []  # mkmodel's switch has no queue counters
    # The golden meter mod has an experimenter band: METER_MOD_FAILED/BAD_BAND.
    for name in (
        "4-45-ofp_meter_mod.packet",
        "4-16-ofp_experimenter.packet",
        "4-6-ofp_features_reply.packet",
    ):
        assert len(errors(s.feed(golden(name), 0))) == 1, name


# ----- own messages ---------------------------------------------------------------------


def add_flow_msg(xid: int = 5, **kw) -> bytes:
    kw.setdefault("match", p.OFPMatch(eth_type=0x800))
    kw.setdefault(
        "instructions", [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(2)])]
    )
    m = p.OFPFlowMod(None, priority=kw.pop("priority", 10), **kw)
    m.xid = xid
    return encode(m)


def test_flow_mod_then_flow_stats_roundtrip() -> None:
    s = session()
    assert s.feed(add_flow_msg(cookie=0xABC), 1.0) == []
    s.model.pipeline.process(1, frame(), 2.0)
    req = p.OFPFlowStatsRequest(
        None, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, p.OFPMatch()
    )
    [r] = reply_bytes(s.feed(encode(req), 3.5))
    [st] = decode(r).body
    assert (st.cookie, st.priority, st.packet_count, st.duration_sec) == (0xABC, 10, 1, 2)
    assert st.match["eth_type"] == 0x800 and st.instructions[0].actions[0].port == 2


def test_hello_negotiation_and_bad_version() -> None:
    s = OpenFlowSession(mkmodel())
    assert s.hello()[0] == 4 and decode(s.hello()).elements[0].versions == [4]
    # A Hello element of length 0 must not hang: HELLO_FAILED and close.
    r = reply_bytes(s.feed(bytes.fromhex("040000100000000100010000000000000"[:32]), 0))
    assert errors(r) == [(ofp.OFPET_HELLO_FAILED, ofp.OFPHFC_INCOMPATIBLE)] and s.closed
    s = OpenFlowSession(mkmodel())
    r = reply_bytes(s.feed(bytes.fromhex("0100000800000001"), 0))
    assert r and r[0][1] == ofp.OFPT_ERROR and s.closed
    s = session()
    msg = bytearray(add_flow_msg())
    msg[0] = 5
    assert errors(s.feed(bytes(msg), 0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_VERSION)]


def test_partial_feed_and_unframeable() -> None:
    s = session()
    echo = bytes.fromhex("0402000c0000000761626364")
    both = echo + echo
    out = []
    for i in range(len(both)):
        out += reply_bytes(s.feed(both[i : i + 1], 0))
    assert len(out) == 2 and all(isinstance(decode(r), p.OFPEchoReply) for r in out)
    r = reply_bytes(s.feed(bytes.fromhex("0402000400000009"), 0))
    assert errors(r) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)] and s.closed
    assert s.feed(echo, 0) == []


def test_roles_generation_and_slave() -> None:
    model = mkmodel()
    a, b = session(model), session(model)

    def role(s: OpenFlowSession, r: int, gen: int) -> list[bytes]:
        return reply_bytes(s.feed(encode(p.OFPRoleRequest(None, r, gen)), 0))

    assert decode(role(a, ofp.OFPCR_ROLE_MASTER, 10)[0]).role == ofp.OFPCR_ROLE_MASTER
    assert decode(role(b, ofp.OFPCR_ROLE_MASTER, 11)[0]).role == ofp.OFPCR_ROLE_MASTER
    assert a.role == ofp.OFPCR_ROLE_SLAVE
    assert errors(role(a, ofp.OFPCR_ROLE_MASTER, 9)) == [
        (ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE)
    ]
    assert errors(a.feed(add_flow_msg(), 0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)]
    rec = PacketIn(ofp.OFPR_ACTION, 0, 1, 1, frame(), 0xFFFF)
    assert a.packet_in(rec) is None and b.packet_in(rec) is not None
    assert decode(role(a, ofp.OFPCR_ROLE_EQUAL, 0)[0]).role == ofp.OFPCR_ROLE_EQUAL


def test_packet_in_port_status_flow_removed_encoding() -> None:
    model = mkmodel()
    s = session(model)
    f = frame()
    pin = decode(s.packet_in(PacketIn(ofp.OFPR_NO_MATCH, 2, 0x55, 3, f, 16, metadata=7)))
    assert (pin.reason, pin.table_id, pin.cookie, pin.total_len) == (0, 2, 0x55, len(f))
    assert pin.match["in_port"] == 3 and pin.match["metadata"] == 7 and pin.data == f[:16]
    assert pin.buffer_id == ofp.OFP_NO_BUFFER
    model.ports[3].config |= OFPPC_NO_PACKET_IN
    assert s.packet_in(PacketIn(ofp.OFPR_NO_MATCH, 0, 0, 3, f, 0xFFFF)) is None
    model.ports[2].config |= OFPPC_PORT_DOWN
    ps = decode(s.port_status(ofp.OFPPR_MODIFY, model.ports[2]))
    assert ps.reason == ofp.OFPPR_MODIFY and ps.desc.port_no == 2
    assert ps.desc.config == OFPPC_PORT_DOWN and ps.desc.hw_addr == "02:00:00:00:00:02"
    s.feed(add_flow_msg(idle_timeout=3, flags=ofp.OFPFF_SEND_FLOW_REM), 0.0)
    [e] = model.pipeline.expire(10.0)
    fr = decode(s.flow_removed(e, 10.0))
    assert fr.reason == ofp.OFPRR_IDLE_TIMEOUT and fr.idle_timeout == 3
    assert fr.duration_sec == 10 and fr.match["eth_type"] == 0x800


def test_flow_mod_errors_and_flows_removed_effect() -> None:
    s = session()
    bad_prereq = add_flow_msg(match=p.OFPMatch(ipv4_dst="10.0.0.1"))
    assert errors(s.feed(bad_prereq, 0)) == [(ofp.OFPET_BAD_MATCH, ofp.OFPBMC_BAD_PREREQ)]
    assert errors(s.feed(add_flow_msg(table_id=9), 0)) == [
        (ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_BAD_TABLE_ID)
    ]
    goto_back = add_flow_msg(table_id=2, instructions=[p.OFPInstructionGotoTable(1)])
    assert errors(s.feed(goto_back, 0)) == [(ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_TABLE_ID)]
    s.feed(add_flow_msg(flags=ofp.OFPFF_SEND_FLOW_REM), 0)
    delete = add_flow_msg(
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=p.OFPMatch(),
    )
    [effect] = s.feed(delete, 0)
    assert isinstance(effect, FlowsRemoved) and len(effect.entries) == 1
    assert effect.entries[0].removed_reason == ofp.OFPRR_DELETE
    po = p.OFPPacketOut(None, 7, ofp.OFPP_CONTROLLER, [p.OFPActionOutput(1)])
    assert errors(s.feed(encode(po), 0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN)]
    ps = p.OFPPortStatsRequest(None, 0, 99)
    assert errors(s.feed(encode(ps), 0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT)]
    gm = p.OFPGroupMod(None, ofp.OFPGC_MODIFY, ofp.OFPGT_ALL, 4, [])
    assert errors(s.feed(encode(gm), 0)) == [
        (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP)
    ]


def test_multipart_split_under_64k() -> None:
    s = session()
    for i in range(1500):
        s.feed(add_flow_msg(match=p.OFPMatch(eth_type=0x800, ipv4_dst=i + 1), priority=100 + i), 0)
    req = p.OFPFlowStatsRequest(
        None, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, p.OFPMatch()
    )
    replies = reply_bytes(s.feed(encode(req), 1))
    assert len(replies) > 1 and all(len(r) < 65536 for r in replies)
    decoded = [decode(r) for r in replies]
    assert [d.flags for d in decoded] == [1] * (len(replies) - 1) + [0]
    assert sum(len(d.body) for d in decoded) == 1500


# ----- effects: what feed(bytes, now) asks the datapath to do ---------------------------


def packet_out_msg(actions: list, in_port: int = ofp.OFPP_CONTROLLER, xid: int = 3) -> bytes:
    m = p.OFPPacketOut(None, ofp.OFP_NO_BUFFER, in_port, actions, frame())
    m.xid = xid
    return encode(m)


def test_packet_out_returns_frames_to_send_and_no_reply() -> None:
    s = session()
    msg = packet_out_msg([p.OFPActionSetQueue(3), p.OFPActionOutput(2)])
    assert s.feed(msg, 4.0) == [Transmit([(2, frame(), 3)])]
    # The session sends nothing itself and calls nobody: nothing left to do.
    assert s.feed(b"", 5.0) == []


def test_packet_out_to_controller_answers_only_this_channel() -> None:
    model = mkmodel()
    s, other = session(model), session(model)
    [reply] = s.feed(packet_out_msg([p.OFPActionOutput(ofp.OFPP_CONTROLLER, 64)]), 0.0)
    assert isinstance(reply, Reply)  # a packet-in for this channel; no frame to send
    pin = decode(reply.data)
    assert isinstance(pin, p.OFPPacketIn) and pin.reason == ofp.OFPR_ACTION
    assert pin.data == frame() and pin.match["in_port"] == ofp.OFPP_CONTROLLER
    assert other.feed(b"", 0.0) == []


def test_port_mod_returns_a_port_change_after_applying_it() -> None:
    model = mkmodel()
    s = session(model)
    pm = p.OFPPortMod(None, 4, "02:00:00:00:00:04", OFPPC_PORT_DOWN, OFPPC_PORT_DOWN, 0)
    assert s.feed(encode(pm), 0.0) == [PortChanged(4)]
    assert model.ports[4].config == OFPPC_PORT_DOWN and not model.ports[4].live
    # A PortMod for a port that does not exist changes nothing and says so.
    [err] = s.feed(encode(p.OFPPortMod(None, 9, "02:00:00:00:00:09", 0, 1, 0)), 0.0)
    assert errors([err]) == [(ofp.OFPET_PORT_MOD_FAILED, ofp.OFPPMFC_BAD_PORT)]


def test_flow_delete_returns_flows_removed_only_when_entries_went() -> None:
    s = session()
    s.feed(add_flow_msg(flags=ofp.OFPFF_SEND_FLOW_REM, cookie=7), 1.0)
    delete = add_flow_msg(
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=p.OFPMatch(),
    )
    [removed] = s.feed(delete, 2.0)
    assert isinstance(removed, FlowsRemoved)
    [entry] = removed.entries
    assert entry.cookie == 7 and entry.removed_reason == ofp.OFPRR_DELETE
    fr = decode(s.flow_removed(entry))  # what the datapath sends on each channel
    assert fr.reason == ofp.OFPRR_DELETE and fr.cookie == 7
    assert s.feed(delete, 3.0) == []  # nothing left to remove


def test_malformed_message_returns_an_error_and_the_session_keeps_running() -> None:
    s = session()
    bad = bytearray(add_flow_msg(xid=0x77))
    bad[-14:-12] = b"\x00\x00"  # the output action's length: 0 (os-ken would loop forever)
    [err] = s.feed(bytes(bad), 0.0)
    assert isinstance(err, Reply) and not s.closed
    e = decode(err.data)
    assert isinstance(e, p.OFPErrorMsg) and e.xid == 0x77 and e.data == bytes(bad[:64])
    [r] = reply_bytes(s.feed(encode(p.OFPBarrierRequest(None)), 0.0))
    assert isinstance(decode(r), p.OFPBarrierReply)


def test_effects_come_back_in_message_order_from_one_chunk() -> None:
    """One TCP read holding several messages: each effect in the order it was asked for."""
    s = session()
    bad = bytearray(add_flow_msg(xid=0x77))
    bad[-14:-12] = b"\x00\x00"
    pm = encode(p.OFPPortMod(None, 2, "02:00:00:00:00:02", OFPPC_PORT_DOWN, OFPPC_PORT_DOWN, 0))
    chunk = (
        packet_out_msg([p.OFPActionOutput(1)]) + bytes(bad) + pm + encode(p.OFPBarrierRequest(None))
    )
    effects = s.feed(chunk[:50], 1.0) + s.feed(chunk[50:], 1.0)
    assert [type(e) for e in effects] == [Transmit, Reply, PortChanged, Reply]
    assert effects[0] == Transmit([(1, frame(), None)]) and effects[2] == PortChanged(2)
    assert errors([effects[1]]) == [(ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN)]
    assert isinstance(decode(effects[3].data), p.OFPBarrierReply)


def test_unframeable_stream_returns_an_error_and_closes() -> None:
    s = session()
    [err] = s.feed(bytes.fromhex("0402000400000009"), 0.0)  # length 4 < a header
    assert errors([err]) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)] and s.closed
    assert s.feed(encode(p.OFPEchoRequest(None)), 0.0) == []


# ----- ovs-ofctl over loopback TCP ---------------------------------------------------


def _serve(model: SwitchModel, srv: socket.socket, stop: threading.Event) -> None:
    srv.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=_conn, args=(model, conn, stop), daemon=True).start()


def _conn(model: SwitchModel, conn: socket.socket, stop: threading.Event) -> None:
    s = OpenFlowSession(model, is_controller_channel=False)
    conn.settimeout(0.1)
    with conn:
        conn.sendall(s.hello())
        while not stop.is_set() and not s.closed:
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            for r in reply_bytes(s.feed(data, time.monotonic())):
                conn.sendall(r)
    s.close()


@pytest.mark.skipif(shutil.which("ovs-ofctl") is None, reason="ovs-ofctl not installed")
@pytest.mark.timeout(60)
def test_ovs_ofctl_talks_to_agent() -> None:
    model = mkmodel()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()
    t = threading.Thread(target=_serve, args=(model, srv, stop), daemon=True)
    t.start()
    addr = ("127.0.0.1", srv.getsockname()[1])

    def ofctl(*args: str) -> str:
        return emu_ofctl.run(addr, args, timeout_s=10).stdout

    try:
        ofctl(
            "add-group",
            "group_id=1,type=select,bucket=weight:1,watch_port:1,output:1,"
            "bucket=weight:2,watch_port:2,output:2",
        )
        ofctl(
            "add-flow", "table=0,priority=20,udp,tp_src=5,actions=set_field:3->ip_dscp,goto_table:1"
        )
        ofctl("add-flow", "table=1,priority=5,in_port=3,actions=group:1")
        ofctl("add-flow", "table=0,priority=10,ip,nw_dst=10.0.0.1,actions=output:2")
        flows = ofctl("dump-flows")
        assert "nw_dst=10.0.0.1 actions=output:2" in flows and "goto_table:1" in flows
        assert "actions=group:1" in flows
        assert "group_id=1,type=select" in ofctl("dump-groups")
        assert "ref_count=1" in ofctl("dump-group-stats")
        assert "port  2: rx pkts=0" in ofctl("dump-ports", "2")
        assert "s1-eth3" in ofctl("show")
        assert "flow_count=3" in ofctl("dump-aggregate")
        ofctl("mod-port", "2", "down")
        assert model.ports[2].config & OFPPC_PORT_DOWN
        ofctl("del-flows", "ip")
        assert "nw_dst" not in ofctl("dump-flows")
        ofctl("del-groups")
        assert "group:1" not in ofctl("dump-flows") and model.pipeline.groups == {}
    finally:
        stop.set()
        t.join(2)
        srv.close()


def test_queue_stats_and_config_report_the_eight_priorities() -> None:
    """set_queue names emu's priorities 0-7: OFPMP_QUEUE and QUEUE_GET_CONFIG list them."""
    counters = {1: [(100 * q, q, 0) for q in range(8)], 2: [(0, 0, 5)] + [(0, 0, 0)] * 7}
    model = mkmodel()
    model.queue_counters = lambda: counters
    s = session(model)
    [r] = reply_bytes(s.feed(encode(p.OFPQueueStatsRequest(None, 0, 1, 3)), 2.5))
    [st] = decode(r).body
    assert (st.port_no, st.queue_id, st.tx_bytes, st.tx_packets, st.duration_sec) == (
        1,
        3,
        300,
        3,
        2,
    )
    [r] = reply_bytes(
        s.feed(encode(p.OFPQueueStatsRequest(None, 0, ofp.OFPP_ANY, ofp.OFPQ_ALL)), 3)
    )
    body = decode(r).body
    assert len(body) == 16 and body[8].tx_errors == 5
    assert errors(s.feed(encode(p.OFPQueueStatsRequest(None, 0, 1, 8)), 3)) == [
        (ofp.OFPET_QUEUE_OP_FAILED, ofp.OFPQOFC_BAD_QUEUE)
    ]
    [r] = reply_bytes(s.feed(encode(p.OFPQueueGetConfigRequest(None, 1)), 3))
    assert sorted(q.queue_id for q in decode(r).queues) == list(range(8))
