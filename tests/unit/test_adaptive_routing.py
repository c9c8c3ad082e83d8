"""Per-packet adaptive routing in the switch (issue 31): the model, its message, both data planes.

The model (emu/switch/adaptive.py) on a bare pipeline with queues the test
sets; emu's SET_SELECT_MODE in adaptive mode with every documented error; and
the two data planes (`Datapath`, the specification, and `FastDatapath`, whose
per-frame path is C) fed the same frames with the same queues and PAUSEs,
which must take the same ports: a port paused for the packet's priority is
passed over unless every port is, the bytes that count are those at the
packet's priority and above, ties go by the flow hash. No root.
"""

from __future__ import annotations

import collections
import struct

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu.proto import headers, ofext
from emu.switch import _fastpath, fastpath
from emu.switch.adaptive import SelectMode, packet_prio
from emu.switch.pipeline import P_ADAPTIVE, P_OUT, Pipeline
from emu.switch.scheduler import dscp_table

from .fakes import (
    ROCE,
    CSwitch,
    PythonSwitch,
    Queues,
    bucket,
    decode,
    encode,
    errors,
    experimenter,
    flow,
    group,
    make_switch,
    mkports,
    out,
    pause_frame,
    ports_taken,
    roce_frame,
    session,
    udp,
)

ADAPTIVE_3 = ofext.SetSelectMode(ofext.OFPG_ALL, ofext.SELECT_MODE_ADAPTIVE, 0, 1 << 3)


def ar_pipeline(mode: ofext.SetSelectMode = ADAPTIVE_3) -> tuple[Pipeline, Queues, dict]:
    q = Queues()
    ports = mkports(5)
    pl = Pipeline(ports=ports, egress=q)
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in range(2, 6)])
    flow(pl, {}, [p.OFPActionGroup(1)])
    pl.set_select_mode(mode)
    return pl, q, ports


def egress(pl: Pipeline, sport: int = 1000, tos: int = ROCE, now: float = 0.0) -> int:
    [(port, _frame, _q)] = pl.process(1, udp(sport=sport, tos=tos), now)[0]
    return port


# ----- the model -----------------------------------------------------------------------


def test_each_packet_takes_the_least_queued_port_and_moves_when_it_grows() -> None:
    pl, q, _ = ar_pipeline()
    q.depth.update({(2, 3): 9000, (3, 3): 3000, (4, 3): 500, (5, 3): 7000})
    assert egress(pl) == 4
    q.depth[(4, 3)] = 50_000  # the next packet of the same flow moves at once
    assert egress(pl) == 3
    counts = pl.adaptive.counts()
    assert counts == {
        "decisions": 2,
        "paused_skips": 0,
        "all_paused": 0,
        "picks": {3: 1, 4: 1},
        "ugal_decisions": 0,
        "ugal_nonminimal": 0,
    }
    assert [c.packets for c in pl.groups[1].bucket_ctrs] == [0, 1, 1, 0]
    assert pl.groups[1].ctr.packets == 2


def test_a_paused_port_is_passed_over_unless_every_port_is_paused() -> None:
    pl, q, _ = ar_pipeline()
    q.depth.update({(2, 3): 100, (3, 3): 200, (4, 3): 300, (5, 3): 400})
    q.paused |= {(2, 3), (3, 3)}
    assert egress(pl) == 4
    q.paused |= {(4, 3), (5, 3)}  # all paused: it waits where the least waits
    assert egress(pl) == 2
    assert pl.adaptive.counts()["paused_skips"] == 2
    assert pl.adaptive.counts()["all_paused"] == 1
    # A PAUSE for another priority does not stop priority 3.
    q.paused = {(2, 0), (2, 4)}
    assert egress(pl) == 2


def test_bytes_of_lower_priorities_do_not_count_higher_ones_do() -> None:
    """Strict priority: a packet of priority 3 leaves before priority 0's backlog."""
    pl, q, _ = ar_pipeline()
    q.depth.update({(2, 0): 10**6, (3, 3): 100, (4, 3): 100, (5, 3): 100})
    assert egress(pl) == 2
    q.depth[(2, 6)] = 200  # CNPs (priority 6) on port 2 leave first: they count
    assert egress(pl) in (3, 4, 5)


def test_ties_spread_flows_by_hash_and_keep_each_flow_on_one_port() -> None:
    pl, _q, _ = ar_pipeline()
    first = {s: egress(pl, s) for s in range(400)}
    assert set(collections.Counter(first.values())) == {2, 3, 4, 5}
    assert all(egress(pl, s) == port for s, port in first.items())


def test_a_class_that_is_not_enabled_hashes_as_hash_mode_does() -> None:
    hashed, _q, _ = ar_pipeline(ofext.SetSelectMode(1, ofext.SELECT_MODE_HASH, 0))
    ar, q, _ = ar_pipeline()
    q.depth.update({(2, 3): 10**6, (3, 3): 10**6, (4, 3): 10**6})  # empty port 5 would win
    for sport in range(100):
        assert egress(ar, sport, tos=0) == egress(hashed, sport, tos=0)
    assert ar.adaptive.counts()["decisions"] == 0
    assert egress(ar, 1, tos=ROCE) == 5
    assert ar.adaptive.counts()["decisions"] == 1


def test_every_class_and_the_set_queue_decide_the_class() -> None:
    pl, q, _ = ar_pipeline(ofext.SetSelectMode(1, ofext.SELECT_MODE_ADAPTIVE, 0, 0))
    q.depth.update({(2, 0): 10, (3, 0): 10, (4, 0): 10})
    assert egress(pl, tos=0) == 5  # classes 0 on the wire: every priority
    assert egress(pl, tos=48 << 2) in (2, 3, 4, 5)
    # A set_queue before the group makes the packet priority 1: a queue of
    # priority 0 does not hold it back any more, and class 1 is enabled here.
    flow(pl, {}, [p.OFPActionSetQueue(1), p.OFPActionGroup(1)], prio=20)
    q.depth.update({(5, 0): 10**6, (2, 1): 5, (3, 1): 5, (4, 1): 5})
    assert egress(pl, tos=0) == 5
    assert pl.modes.of(1).describe() == {"mode": "adaptive", "classes": list(range(8))}


def test_dead_buckets_are_not_candidates() -> None:
    pl, q, ports = ar_pipeline()
    q.depth.update({(3, 3): 5, (4, 3): 5, (5, 3): 5})
    assert egress(pl) == 2
    ports[2].link_up = False
    pl.invalidate()
    assert egress(pl) != 2


def test_trace_shows_the_choice_and_changes_nothing() -> None:
    pl, q, _ = ar_pipeline()
    q.depth.update({(2, 3): 100, (3, 3): 100, (4, 3): 1, (5, 3): 100})
    q.paused.add((4, 3))
    t = pl.trace(1, udp(tos=ROCE), now=1.0)
    assert t["adaptive"] == [
        {
            "group": 1,
            "prio": 3,
            "ports": [2, 3, 4, 5],
            "paused": [4],
            "every_port_paused": False,
            "takes": egress(pl),
        }
    ]
    assert t["adaptive"][0]["takes"] in (2, 3, 5)
    assert t["adaptive_counts"]["decisions"] == 0  # taken before the packet above
    assert pl.adaptive.counts()["decisions"] == 1


def test_the_compiled_program_holds_the_class_hash_and_every_live_bucket() -> None:
    pl, _q, _ = ar_pipeline()
    frame = udp(sport=7, tos=ROCE)
    pl.process(1, frame, 0.0)
    [op] = [op for op in pl.compiled(1, frame)[0] if op[0] == P_ADAPTIVE]
    _code, gid, prio, flow_hash, options = op
    assert (gid, prio) == (1, 3)
    assert flow_hash == pl.select_hash(pl._key({"frame": frame}, 1))
    assert [(i, port, sub) for i, port, sub, _c in options] == [
        (i, i + 2, [(P_OUT, i + 2, None)]) for i in range(4)
    ]
    ports = {n: None for n in range(1, 6)}
    slots = {id(c): n for n, (_i, _p, _s, c) in enumerate(options)}
    ops = fastpath.program_ops([op], ports, arm_slot=lambda c: slots[id(c)])
    assert ops[0] == (_fastpath.OP_ADAPT, 0, flow_hash, 3, 4, 8)
    assert ops[1:3] == [(_fastpath.OP_ARM, 2, 0, -1, 0, 1), (_fastpath.OP_OUT, 2, 0, -1, 0, 0)]
    assert fastpath.program_ops([op], ports) is None  # no counter slots: the slow path's


def test_packet_prio_follows_the_datapath_rule() -> None:
    table = dscp_table()
    assert packet_prio(udp(tos=ROCE), None, table) == 3
    assert packet_prio(udp(tos=48 << 2 | 3), None, table) == 6
    assert packet_prio(udp(tos=ROCE), 5, table) == 5
    tagged = headers.ethernet("02:00:00:00:00:01", "02:00:00:00:00:02", 0x8100)
    tagged += struct.pack("!HH", 5, 0x0800) + udp(tos=ROCE)[14:]
    assert packet_prio(tagged, None, table) == 3
    assert packet_prio(bytes(14), None, table) == 0


def test_mode_records_describe_themselves() -> None:
    assert SelectMode().describe() == {"mode": "hash"}
    assert SelectMode(ofext.SELECT_MODE_ADAPTIVE, classes=9).adaptive_for(3)
    assert not SelectMode(ofext.SELECT_MODE_ADAPTIVE, classes=9).adaptive_for(4)


# ----- the message -----------------------------------------------------------------------


def with_groups(s) -> None:
    pl = s.model.pipeline
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)]) for i in (2, 3)])
    group(pl, 2, ofp.OFPGT_ALL, [bucket([out(4)])])


def test_the_adaptive_message_round_trips_and_is_applied() -> None:
    raw = ofext.set_select_mode_message(1, ofext.SELECT_MODE_ADAPTIVE, xid=5, classes=0b1001)
    assert len(raw) == ofext.SET_SELECT_MODE_LEN
    assert raw[8:] == experimenter(struct.pack("!IHHI", 1, 2, 0b1001, 0))[8:]
    assert ofext.unpack_set_select_mode(raw[16:]) == ofext.SetSelectMode(1, 2, 0, 0b1001)
    s = session()
    with_groups(s)
    assert s.feed(raw, 0.0) == []
    assert s.model.pipeline.modes.of(1).describe() == {"mode": "adaptive", "classes": [0, 3]}
    assert s.model.pipeline.modes.of(7).describe() == {"mode": "hash"}
    # The switch-wide default: every group, now and later; a group's own mode is dropped.
    everything = ofext.set_select_mode_message(ofext.OFPG_ALL, ofext.SELECT_MODE_ADAPTIVE)
    assert s.feed(everything, 0.0) == []
    assert s.model.pipeline.modes.of(1).classes == ofext.CLASSES_ALL
    assert s.model.pipeline.modes.of(99).classes == ofext.CLASSES_ALL


def _body(group_id: int, mode: int, classes: int, gap: int) -> bytes:
    return experimenter(struct.pack("!IHHI", group_id, mode, classes, gap))


BAD_CLASSES = (ofext.OFPET_EXPERIMENTER, ofext.SELECT_ERR_BAD_CLASSES)


@pytest.mark.parametrize(
    "msg, expected",
    [
        (_body(1, 2, 0x100, 0), BAD_CLASSES),  # a priority above 7
        (_body(1, 2, 0xFFFF, 0), BAD_CLASSES),
        (_body(1, 0, 8, 0), BAD_CLASSES),  # classes in hash mode
        (_body(1, 1, 8, 100), BAD_CLASSES),  # classes in flowlet mode
        (_body(1, 2, 8, 100), (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET)),  # a gap
        (_body(1, 0, 0, 100), (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET)),
        (_body(77, 2, 8, 0), (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP)),
        (_body(2, 2, 8, 0), (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE)),  # not SELECT
        (_body(1, 4, 8, 0), (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE)),  # no mode 4
        (experimenter(struct.pack("!IHHI", 1, 2, 8, 0) + b"\0"), (1, ofp.OFPBRC_BAD_LEN)),
        (experimenter(struct.pack("!IHH", 1, 2, 8)), (1, ofp.OFPBRC_BAD_LEN)),
    ],
)
def test_bad_adaptive_messages_get_the_documented_error_and_change_nothing(msg, expected):
    s = session()
    with_groups(s)
    s.feed(ofext.set_select_mode_message(1, ofext.SELECT_MODE_ADAPTIVE, classes=8), 0.0)
    before = s.model.pipeline.modes.of(1)
    if expected[0] == ofext.OFPET_EXPERIMENTER:
        [reply] = [e.data for e in s.feed(msg, 0.0)]
        err = decode(reply)
        assert (err.type, err.exp_type, err.experimenter) == (
            ofext.OFPET_EXPERIMENTER,
            ofext.SELECT_ERR_BAD_CLASSES,
            ofext.EMU_EXPERIMENTER_ID,
        )
        assert bytes(err.data) == msg[:64]
    else:
        assert errors(s.feed(msg, 0.0)) == [expected]
    assert s.model.pipeline.modes.of(1) == before
    [barrier] = [e.data for e in s.feed(encode(p.OFPBarrierRequest(None)), 0)]
    assert isinstance(decode(barrier), p.OFPBarrierReply)


def test_the_builder_refuses_what_the_switch_would() -> None:
    with pytest.raises(ofext.ExtensionError, match="classes"):
        ofext.pack_set_select_mode(1, ofext.SELECT_MODE_ADAPTIVE, classes=0x100)
    with pytest.raises(ofext.ExtensionError, match="hash mode"):
        ofext.pack_set_select_mode(1, ofext.SELECT_MODE_HASH, classes=8)
    # Adaptive mode carries no gap, whatever the caller gives.
    assert ofext.pack_set_select_mode(1, ofext.SELECT_MODE_ADAPTIVE, 500, 8)[-4:] == bytes(4)


@pytest.mark.parametrize(
    "text, want",
    [
        ("3", {None: 8}),
        ("all", {None: 255}),
        (" 0, 3 ", {None: 9}),
        ("3;0x10001=none;65538=all", {None: 8, 0x10001: 0, 65538: 255}),
        ("0x10001=3,4", {0x10001: 24}),
    ],
)
def test_adaptive_specs(text: str, want: dict) -> None:
    assert ofext.parse_adaptive_spec(text) == want


@pytest.mark.parametrize("text", ["", "8", "3,", "x", "leaf1=3", "3;4", "1=3;0x1=4", "-1=3"])
def test_bad_adaptive_specs_are_named(text: str) -> None:
    with pytest.raises(ofext.ExtensionError):
        ofext.parse_adaptive_spec(text)


# ----- both data planes ----------------------------------------------------------------


@pytest.fixture(params=[PythonSwitch, CSwitch], ids=["python", "c"])
def ar_switch(request, tmp_path):
    dp = make_switch(request.param, tmp_path)
    pl = dp.pipeline
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in (2, 3, 4)])
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}, [p.OFPActionGroup(1)])
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.8"}, [out(4)])
    pl.set_select_mode(ADAPTIVE_3)
    yield dp
    dp.close()


def test_a_flow_spreads_over_the_ports_as_their_queues_build(ar_switch) -> None:
    taken = ports_taken(ar_switch, [roce_frame(4000)] * 30, 1.0)
    assert collections.Counter(taken) == {2: 10, 3: 10, 4: 10}, taken
    counts = ar_switch.adaptive_counts()
    assert counts["decisions"] == 30 and counts["picks"] == {2: 10, 3: 10, 4: 10}
    if isinstance(ar_switch, CSwitch):  # the first packet was Python's, every other C's
        assert ar_switch.fastpath_stats()["ar_decisions"] == 29


def test_a_flow_on_idle_ports_spreads_over_them_per_packet(ar_switch) -> None:
    """Every queue empty at each packet (a port sends in 3.3 ms what it got, the packets
    come 10 ms apart): all ports tie, and the rotation (adaptive.py tie_index) still
    spreads the flow, where the flow's hash alone would pin it to one port."""
    taken = []
    now = 1.0
    for _ in range(30):
        ar_switch.step(now)
        assert not any(sum(s.depth_bytes) for s in ar_switch.schedulers.values())
        taken += ports_taken(ar_switch, [roce_frame(4000)], now)
        now += 0.01
    assert collections.Counter(taken) == {2: 10, 3: 10, 4: 10}, taken
    assert ar_switch.adaptive_counts()["decisions"] == 30


def test_a_paused_port_is_not_chosen_unless_every_port_is(ar_switch) -> None:
    ar_switch.feed(3, pause_frame(1 << 3), 1.0)  # port 3's priority 3 stops for 3.4 s
    ar_switch.feed(4, pause_frame(1 << 0), 1.0)  # port 4's priority 0 only: no matter
    taken = ports_taken(ar_switch, [roce_frame(4000)] * 20, 1.0)
    assert 3 not in taken and set(taken) == {2, 4}
    counts = ar_switch.adaptive_counts()
    assert counts["paused_skips"] == 20 and counts["all_paused"] == 0
    ar_switch.feed(2, pause_frame(1 << 3), 1.0)
    ar_switch.feed(4, pause_frame(1 << 3), 1.0)
    # Every port paused: the packet waits where the least waits, the empty port 3.
    assert ports_taken(ar_switch, [roce_frame(4000)] * 3, 1.0)[0] == 3
    assert ar_switch.adaptive_counts()["all_paused"] == 3


def test_a_lossy_backlog_does_not_push_the_lossless_class_away(ar_switch) -> None:
    lossy = roce_frame(9, tos=0, size=1400, dst="10.0.0.8")
    for _ in range(20):
        ar_switch.feed(1, lossy, 1.0)  # priority 0 piles up on port 4
    assert ar_switch.schedulers[4].depth_bytes[0] > 10_000
    # Flows whose hash picks port 4 on an idle switch still take it.
    first = {s: ports_taken(ar_switch, [roce_frame(s)], 1.0)[0] for s in range(5000, 5030)}
    assert 4 in first.values()


def test_both_data_planes_take_the_same_ports(tmp_path) -> None:
    """Many flows and PAUSEs on both: the same port for every packet, the same counts."""
    taken = {}
    counts = {}
    for cls in (PythonSwitch, CSwitch):
        dp = make_switch(cls, tmp_path)
        pl = dp.pipeline
        group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in (2, 3, 4, 5)])
        flow(pl, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}, [p.OFPActionGroup(1)])
        pl.set_select_mode(ofext.SetSelectMode(1, ofext.SELECT_MODE_ADAPTIVE, 0, 0b1001))
        seq = []
        now = 1.0
        for i in range(600):
            if i % 97 == 0:
                dp.feed(2 + i % 4, pause_frame(1 << 3, quanta=200 + i), now)
            now += 0.0004 if i % 7 else 0.002
            dp.step(now)
            seq += ports_taken(dp, [roce_frame(1000 + i % 13, tos=(ROCE, 0, 48 << 2)[i % 3])], now)
        taken[cls.__name__] = seq
        if isinstance(dp, CSwitch):
            dp.drain()
        counts[cls.__name__] = (
            dp.adaptive_counts(),
            [(c.packets, c.bytes) for c in pl.groups[1].bucket_ctrs],
        )
        dp.close()
    assert taken["PythonSwitch"] == taken["CSwitch"]
    assert counts["PythonSwitch"] == counts["CSwitch"]
    ar = counts["CSwitch"][0]
    assert ar["decisions"] == 400 and ar["paused_skips"] > 0 and len(ar["picks"]) == 4


# ----- what C installs ------------------------------------------------------------------


def _adapt(span: int, options: int = 1, prio: int = 3):
    return (_fastpath.OP_ADAPT, 0, 12345, prio, options, span)


def _arm(span: int, port: int = 2, slot: int = 0):
    return (_fastpath.OP_ARM, port, slot, -1, 0, span)


OUT2 = (_fastpath.OP_OUT, 2, 0, -1, 0, 0)

MALFORMED_PROGRAMS = {
    "arm outside an adapt": [_arm(1), OUT2],
    "no options": [_adapt(0, options=0)],
    "fewer options than it says": [_adapt(2, options=2), _arm(1), OUT2],
    "more options than it says": [_adapt(4, options=1), _arm(1), OUT2, _arm(1), OUT2],
    "adapt longer than the list": [_adapt(5), _arm(1), OUT2],
    "arm longer than its adapt": [_adapt(2), _arm(3), OUT2, OUT2],
    "not an arm inside": [_adapt(2), OUT2, OUT2],
    "priority 8": [_adapt(2, prio=8), _arm(1), OUT2],
    "priority -1": [_adapt(2, prio=-1), _arm(1), OUT2],
    "a slot out of range": [_adapt(2), _arm(1, slot=1 << 20), OUT2],
    "a bad op inside an arm": [_adapt(2), _arm(1), (99, 0, 0, -1, 0, 0)],
    "65 options": [_adapt(130, options=65)] + [_arm(1), OUT2] * 65,
    "a port over 32 bits": [_adapt(2), _arm(1, port=1 << 33), OUT2],
}


@pytest.mark.parametrize("name", sorted(MALFORMED_PROGRAMS))
def test_c_installs_no_malformed_adaptive_program(tmp_path, name) -> None:
    dp = make_switch(CSwitch, tmp_path)
    dp._slow_path = lambda *args: (1, list(MALFORMED_PROGRAMS[name]))
    for _ in range(3):
        dp.csw.feed(1, roce_frame(1), 1.0)
    stats = dp.fastpath_stats()
    assert stats["cache_entries"] == 0 and stats["ar_decisions"] == 0, stats
    dp.close()


def test_c_runs_a_well_formed_adaptive_program(tmp_path) -> None:
    dp = make_switch(CSwitch, tmp_path)
    program = [_adapt(4, options=2), _arm(1, 2, 0), OUT2, _arm(1, 3, 1), OUT2[:1] + (3,) + OUT2[2:]]
    dp._slow_path = lambda *args: (1, program)
    for _ in range(5):
        dp.csw.feed(1, roce_frame(1), 1.0)
    stats = dp.fastpath_stats()
    assert stats["cache_entries"] == 1 and stats["ar_decisions"] == 4, stats
    drained = dp.csw.arm_drain()
    assert sum(n for _slot, n, _b, _t in drained) == 4
    assert dp.csw.arm_drain() == []  # taken
    dp.close()
