"""UGAL in the switch (issue 31): a SELECT group whose weights are path lengths.

The model (emu/switch/adaptive.py `AdaptiveRouter.choose_ugal`) on a bare
pipeline with queues the test sets: q x H against q x H (plus the bias on
the long side), minimal on ties and on empty queues, paused ports passed
over, other classes hashed over the minimal buckets only; emu's
SET_SELECT_MODE in UGAL mode; and the two data planes (`Datapath`, the
specification, and `FastDatapath`, whose per-frame path is C's
FP_OP_UGAL) fed the same frames, queues and PAUSEs, which must take the
same ports. No root.
"""

from __future__ import annotations

import collections

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu.proto import ofext
from emu.switch import _fastpath, fastpath
from emu.switch.adaptive import ugal_minimal, ugal_weight
from emu.switch.pipeline import P_UGAL, Pipeline

from .fakes import (
    ROCE,
    CSwitch,
    PythonSwitch,
    Queues,
    bucket,
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
)
from .fakes import udp as udp_frame

# Ports 2 and 3 minimal (2 hops to the destination), 4 and 5 non-minimal (3 and 4).
HOPS = {2: 2, 3: 2, 4: 3, 5: 4}
WEIGHTS = {n: ugal_weight(h, n in (2, 3)) for n, h in HOPS.items()}  # 4, 4, 7, 9


def ugal_mode(bias: int = 0, classes: int = 1 << 3, gid: int = 1) -> ofext.SetSelectMode:
    return ofext.SetSelectMode(gid, ofext.SELECT_MODE_UGAL, bias, classes)


def ugal_pipeline(bias: int = 0, classes: int = 1 << 3) -> tuple[Pipeline, Queues, dict]:
    q = Queues()
    ports = mkports(5)
    pl = Pipeline(ports=ports, egress=q)
    buckets = [bucket([out(n)], weight=w, watch_port=n) for n, w in WEIGHTS.items()]
    group(pl, 1, ofp.OFPGT_SELECT, buckets)
    flow(pl, {}, [p.OFPActionGroup(1)])
    pl.set_select_mode(ugal_mode(bias, classes))
    return pl, q, ports


def egress(pl: Pipeline, sport: int = 1000, tos: int = ROCE) -> int:
    [(port, _frame, _q)] = pl.process(1, udp_frame(sport=sport, tos=tos), 0.0)[0]
    return port


# ----- the model -----------------------------------------------------------------------


def test_empty_queues_send_every_flow_minimally_spread_by_hash() -> None:
    pl, _q, _ = ugal_pipeline()
    taken = collections.Counter(egress(pl, s) for s in range(300))
    assert set(taken) == {2, 3}, taken  # never the long way on an idle switch
    counts = pl.adaptive.counts()
    assert counts["ugal_decisions"] == 300 and counts["ugal_nonminimal"] == 0
    assert counts["decisions"] == 0  # adaptive mode's count is its own


def test_queue_weighted_by_path_length_decides() -> None:
    pl, q, _ = ugal_pipeline()
    # Minimal: 2 x 3000 = 6000 (both). Port 4: 3 x 1900 = 5700 < 6000: it wins.
    q.depth.update({(2, 3): 3000, (3, 3): 3000, (4, 3): 1900, (5, 3): 10**6})
    assert egress(pl) == 4
    # 3 x 2000 = 6000 = 2 x 3000: a tie goes to the minimal path.
    q.depth[(4, 3)] = 2000
    assert egress(pl) in (2, 3)
    counts = pl.adaptive.counts()
    assert counts["ugal_decisions"] == 2 and counts["ugal_nonminimal"] == 1
    assert counts["picks"][4] == 1


def test_the_bias_keeps_a_few_queued_bytes_from_sending_packets_the_long_way() -> None:
    pl, q, _ = ugal_pipeline(bias=1500)
    q.depth.update({(2, 3): 700, (3, 3): 700, (5, 3): 10**6})  # 2 x 700 <= 3 x 0 + 1500
    assert egress(pl) in (2, 3)
    q.depth[(2, 3)] = q.depth[(3, 3)] = 800  # 1600 > 1500: port 4 (empty)
    assert egress(pl) == 4
    q.depth[(4, 3)] = 100  # 1600 <= 300 + 1500
    assert egress(pl) in (2, 3)


def test_a_valiant_path_as_short_as_the_minimal_one_waits_for_a_queue() -> None:
    """Through a third group (two global hops) can be as short as local-global-local,
    or shorter: the weight's low bit, not the length, says which path is minimal."""
    q = Queues()
    pl = Pipeline(ports=mkports(5), egress=q)
    weights = {2: ugal_weight(3, True), 3: ugal_weight(2, False)}  # 6 and 5
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(n)], weight=w) for n, w in weights.items()])
    flow(pl, {}, [p.OFPActionGroup(1)])
    pl.set_select_mode(ugal_mode())
    assert {egress(pl, s) for s in range(100)} == {2}  # empty queues: minimal
    q.depth[(2, 3)] = q.depth[(3, 3)] = 1000  # 3 x 1000 > 2 x 1000: the shorter detour
    assert egress(pl) == 3
    assert {egress(pl, s, tos=0) for s in range(100)} == {2}  # other classes: minimal only
    assert ugal_minimal([6, 5]) == [True, False]
    assert ugal_minimal([7, 5, 9]) == [False, True, False]  # no minimal live: the shortest


def test_only_bytes_at_the_packets_priority_and_above_count() -> None:
    pl, q, _ = ugal_pipeline()
    q.depth.update({(2, 0): 10**6, (3, 0): 10**6})  # a lossy backlog on both minimal ports
    assert egress(pl) in (2, 3)
    q.depth.update({(2, 6): 5000, (3, 6): 5000})  # CNPs leave first: they count
    assert egress(pl) == 4


def test_a_paused_minimal_port_sends_packets_the_long_way() -> None:
    pl, q, _ = ugal_pipeline()
    q.paused |= {(2, 3), (3, 3)}
    assert egress(pl) == 4
    q.paused |= {(4, 3), (5, 3)}  # every port paused: all compete, empty: minimal
    assert egress(pl) in (2, 3)
    counts = pl.adaptive.counts()
    assert counts["paused_skips"] == 2 and counts["all_paused"] == 1


def test_other_classes_hash_over_the_minimal_buckets_only() -> None:
    pl, q, _ = ugal_pipeline()
    q.depth.update({(2, 0): 10**6, (3, 0): 10**6})
    taken = collections.Counter(egress(pl, s, tos=0) for s in range(300))
    assert set(taken) == {2, 3}, taken  # weights 3 and 4 would have hashed there
    assert min(taken.values()) > 100  # evenly: the weights are not shares
    assert pl.adaptive.counts()["ugal_decisions"] == 0


def test_when_the_minimal_buckets_die_the_shortest_survivors_are_minimal() -> None:
    pl, q, ports = ugal_pipeline()
    for n in (2, 3):
        ports[n].link_up = False
    pl.invalidate()
    assert {egress(pl, s) for s in range(50)} == {4}
    assert {egress(pl, s, tos=0) for s in range(50)} == {4}
    assert pl.adaptive.counts()["ugal_nonminimal"] == 0
    q.depth[(4, 3)] = 10_000  # 3 x 10000 > 4 x 0: port 5 is the detour now
    assert egress(pl) == 5
    assert pl.adaptive.counts()["ugal_nonminimal"] == 1


def test_trace_names_the_mode_the_path_lengths_and_the_choice() -> None:
    pl, q, _ = ugal_pipeline(bias=100)
    q.depth.update({(2, 3): 5000, (3, 3): 5000})
    t = pl.trace(1, udp_frame(tos=ROCE), now=1.0)
    assert t["adaptive"] == [
        {
            "group": 1,
            "prio": 3,
            "ports": [2, 3, 4, 5],
            "paused": [],
            "every_port_paused": False,
            "takes": 4,
            "mode": "ugal",
            "hops": [2, 2, 3, 4],
            "minimal": [2, 3],
            "bias_bytes": 100,
        }
    ]
    assert pl.adaptive.counts()["ugal_decisions"] == 0


def test_the_compiled_program_holds_each_path_length_and_the_bias() -> None:
    pl, _q, _ = ugal_pipeline(bias=777)
    frame = udp_frame(sport=9, tos=ROCE)
    pl.process(1, frame, 0.0)
    [op] = [op for op in pl.compiled(1, frame)[0] if op[0] == P_UGAL]
    _code, gid, prio, flow_hash, options, bias = op
    assert (gid, prio, bias) == (1, 3, 777)
    assert [(port, weight) for _i, port, _s, _c, weight in options] == list(WEIGHTS.items())
    slots = {id(o[3]): n for n, o in enumerate(options)}
    ops = fastpath.program_ops(
        [op], {n: None for n in range(1, 6)}, arm_slot=lambda c: slots[id(c)]
    )
    assert ops[0] == (_fastpath.OP_UGAL, 777, flow_hash, 3, 4, 8)
    assert [o for o in ops if o[0] == _fastpath.OP_ARM] == [
        (_fastpath.OP_ARM, n, i, w, 0, 1) for i, (n, w) in enumerate(WEIGHTS.items())
    ]


def test_mode_describes_itself() -> None:
    pl, _q, _ = ugal_pipeline(bias=9, classes=0)
    assert pl.modes.of(1).describe() == {
        "mode": "ugal",
        "classes": list(range(8)),
        "bias_bytes": 9,
    }


# ----- the message -----------------------------------------------------------------------


def test_the_ugal_message_round_trips_and_is_applied() -> None:
    raw = ofext.set_select_mode_message(
        1, ofext.SELECT_MODE_UGAL, xid=3, classes=0b1000, bias_bytes=4500
    )
    assert raw[8:] == experimenter(bytes.fromhex("000000010003000800001194"))[8:]
    req = ofext.unpack_set_select_mode(raw[16:])
    assert (req.mode, req.classes, req.bias_bytes) == (3, 8, 4500)
    s = session()
    group(s.model.pipeline, 1, ofp.OFPGT_SELECT, [bucket([out(2)], weight=2)])
    assert s.feed(raw, 0.0) == []
    assert s.model.pipeline.modes.of(1).describe() == {
        "mode": "ugal",
        "classes": [3],
        "bias_bytes": 4500,
    }
    # Flowlet mode's gap field is not UGAL's: a flowlet message carries no bias.
    assert ofext.pack_set_select_mode(1, ofext.SELECT_MODE_FLOWLET, 50, bias_bytes=9)[-4:] == (
        (50).to_bytes(4, "big")
    )


def test_the_builder_refuses_a_bias_out_of_range() -> None:
    with pytest.raises(ofext.ExtensionError, match="bias"):
        ofext.pack_set_select_mode(1, ofext.SELECT_MODE_UGAL, bias_bytes=-1)
    with pytest.raises(ofext.ExtensionError, match="bias"):
        ofext.pack_set_select_mode(1, ofext.SELECT_MODE_UGAL, bias_bytes=1 << 32)


# ----- both data planes ----------------------------------------------------------------


def c_or_python(cls, tmp_path, bias: int = 0):
    dp = make_switch(cls, tmp_path)
    pl = dp.pipeline
    group(
        pl,
        1,
        ofp.OFPGT_SELECT,
        [bucket([out(n)], weight=w, watch_port=n) for n, w in WEIGHTS.items() if n != 5],
    )
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}, [p.OFPActionGroup(1)])
    pl.set_select_mode(ugal_mode(bias, 0b1001))
    return dp


@pytest.fixture(params=[PythonSwitch, CSwitch], ids=["python", "c"])
def ugal_switch(request, tmp_path):
    dp = c_or_python(request.param, tmp_path)
    yield dp
    dp.close()


def test_a_flow_goes_the_long_way_once_the_short_queues_outweigh_it(ugal_switch) -> None:
    """Fed faster than ports send: minimal ports fill until 2 x q_min > 3 x q_port4."""
    taken = ports_taken(ugal_switch, [roce_frame(4000, size=1000)] * 50, 1.0)
    count = collections.Counter(taken)
    assert set(count) == {2, 3, 4}, count
    assert count[2] + count[3] > count[4] > 5, count  # 3 hops weigh more than 2
    assert taken[0] in (2, 3)  # the first goes minimally
    counts = ugal_switch.adaptive_counts()
    assert counts["ugal_decisions"] == 50 and counts["ugal_nonminimal"] == count[4]
    if isinstance(ugal_switch, CSwitch):  # the first packet was Python's, every other C's
        assert ugal_switch.fastpath_stats()["ar_ugal_decisions"] == 49


def test_a_paused_minimal_port_is_routed_around_in_both(ugal_switch) -> None:
    ugal_switch.feed(2, pause_frame(1 << 3), 1.0)
    ugal_switch.feed(3, pause_frame(1 << 3), 1.0)
    taken = ports_taken(ugal_switch, [roce_frame(4000)] * 5, 1.0)
    assert set(taken) == {4}
    counts = ugal_switch.adaptive_counts()
    assert counts["paused_skips"] == 10 and counts["ugal_nonminimal"] == 5


def test_both_data_planes_take_the_same_ports(tmp_path) -> None:
    """Flows of three classes, PAUSEs and a bias on both: the same port for every packet."""
    taken, counts = {}, {}
    for cls in (PythonSwitch, CSwitch):
        dp = c_or_python(cls, tmp_path, bias=2500)
        seq, now = [], 1.0
        for i in range(600):
            if i % 89 == 0:
                dp.feed(2 + i % 3, pause_frame(1 << 3, quanta=300 + i), now)
            now += 0.0001 if i % 50 else 0.005
            dp.step(now)
            tos = (ROCE, 0, 48 << 2)[i % 3]
            seq += ports_taken(dp, [roce_frame(1000 + i % 11, tos=tos, size=200 + i % 900)], now)
        taken[cls.__name__] = seq
        if isinstance(dp, CSwitch):
            dp.drain()
        counts[cls.__name__] = (
            dp.adaptive_counts(),
            [(c.packets, c.bytes) for c in dp.pipeline.groups[1].bucket_ctrs],
        )
        dp.close()
    assert taken["PythonSwitch"] == taken["CSwitch"]
    assert counts["PythonSwitch"] == counts["CSwitch"]
    ar = counts["CSwitch"][0]
    assert ar["ugal_decisions"] == 400 and 0 < ar["ugal_nonminimal"] < 400, ar
    # Priority 6 is not enabled: it hashed over the minimal ports only.
    assert set(taken["CSwitch"][2::3]) <= {2, 3}


# ----- what C installs ------------------------------------------------------------------


def _ugal(span: int, options: int = 1, prio: int = 3, bias: int = 0):
    return (_fastpath.OP_UGAL, bias, 12345, prio, options, span)


def _arm(span: int, port: int = 2, slot: int = 0, weight: int = 4):
    return (_fastpath.OP_ARM, port, slot, weight, 0, span)


OUT2 = (_fastpath.OP_OUT, 2, 0, -1, 0, 0)

MALFORMED_UGAL = {
    "a weight of 0": [_ugal(2), _arm(1, weight=0), OUT2],
    "a weight of -1": [_ugal(2), _arm(1, weight=-1), OUT2],
    "a weight above 16 bits": [_ugal(2), _arm(1, weight=1 << 16), OUT2],
    "fewer options than it says": [_ugal(2, options=2), _arm(1), OUT2],
    "priority 8": [_ugal(2, prio=8), _arm(1), OUT2],
    "no options": [_ugal(0, options=0)],
    "65 options": [_ugal(130, options=65)] + [_arm(1), OUT2] * 65,
}


@pytest.mark.parametrize("name", sorted(MALFORMED_UGAL))
def test_c_installs_no_malformed_ugal_program(tmp_path, name) -> None:
    dp = make_switch(CSwitch, tmp_path)
    dp._slow_path = lambda *args: (1, list(MALFORMED_UGAL[name]))
    for _ in range(3):
        dp.csw.feed(1, roce_frame(1), 1.0)
    stats = dp.fastpath_stats()
    assert stats["cache_entries"] == 0 and stats["ar_ugal_decisions"] == 0, stats
    dp.close()


def test_c_runs_a_well_formed_ugal_program(tmp_path) -> None:
    dp = make_switch(CSwitch, tmp_path)
    out3 = (_fastpath.OP_OUT, 3, 0, -1, 0, 0)
    program = [_ugal(4, options=2, bias=0xFFFFFFFF), _arm(1, 2, 0, 2), OUT2, _arm(1, 3, 1, 9), out3]
    dp._slow_path = lambda *args: (1, program)
    for _ in range(5):
        dp.csw.feed(1, roce_frame(1), 1.0)
    stats = dp.fastpath_stats()
    assert stats["cache_entries"] == 1 and stats["ar_ugal_decisions"] == 4, stats
    assert stats["ar_ugal_nonminimal"] == 0  # the bias keeps the 9-hop option out
    dp.close()
