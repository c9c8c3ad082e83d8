"""The compiled data plane's own seams: the datapath choice, the compiled programs,
the views of C state, the frame pool's bound and the engine's loop.

What the C path decides per frame is held to the Python model by
test_fastpath_differential.py; this file tests what only the C side has.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofpp

from emu.switch import _fastpath, fastpath, rewrite
from emu.switch.pipeline import P_CTRL, P_DECTTL, P_METER, P_OUT, P_SUB, P_XF

from .fakes import CSwitch, flow, flow_frame, make_switch, out, random_flow


@pytest.mark.parametrize(
    "env,credit,want",
    [("", False, "c"), ("c", False, "c"), ("python", False, "python"), ("", True, "python")],
)
def test_the_datapath_is_c_unless_asked_otherwise_or_credit(monkeypatch, env, credit, want):
    monkeypatch.setenv(fastpath.DATAPATH_ENV, env)
    assert fastpath.choice(credit=credit) == want


def test_an_unknown_datapath_is_named(monkeypatch):
    monkeypatch.setenv(fastpath.DATAPATH_ENV, "ovs")
    with pytest.raises(fastpath.DatapathChoiceError, match="EMU_DATAPATH='ovs'.*c, python"):
        fastpath.choice()


def test_programs_compile_to_c_ops_and_the_slow_classes_stay_python():
    ports = {2: object(), 3: object()}
    mac = bytes.fromhex("020000000099")
    prog = [
        (P_XF, rewrite.SET_FIELD["eth_dst"][0], mac),
        (P_DECTTL, rewrite.dec_nw_ttl),
        (P_SUB, [(P_OUT, 2, None), (P_XF, rewrite.SET_FIELD["ip_dscp"][0], 10)]),
        (P_OUT, 3, 4),
    ]
    assert fastpath.program_ops(prog, ports) == [
        (_fastpath.OP_SET, 0, int.from_bytes(mac, "big"), -1, 0, 0),
        (_fastpath.OP_DECTTL, 0, 0, -1, 0, 0),
        (_fastpath.OP_SUB, 0, 0, -1, 0, 2),
        (_fastpath.OP_OUT, 2, 0, -1, 0, 0),
        (_fastpath.OP_SET, 0, 10, -1, 4, 0),
        (_fastpath.OP_OUT, 3, 0, 4, 0, 0),
    ]
    assert fastpath.program_ops([], ports) == []  # a cached drop
    slow = [
        [(P_CTRL, 0, 0, 0, 128, 0)],  # a packet-in
        [(P_OUT, 0xFFFFFE00, None)],  # the aggregation engine
        [(P_XF, rewrite.SET_FIELD["vlan_vid"][0], 5), (P_OUT, 2, None)],
        [(P_DECTTL, rewrite.dec_mpls_ttl)],
    ]
    for prog in slow:
        assert fastpath.program_ops(prog, ports) is None, prog
    metered = [(P_METER, "a meter"), (P_OUT, 2, None)]
    assert fastpath.program_ops(metered, ports) is None  # no slots given: the slow path's
    assert fastpath.program_ops(metered, ports, {"a meter": 7}.get) == [
        (_fastpath.OP_METER, 0, 7, -1, 0, 0),
        (_fastpath.OP_OUT, 2, 0, -1, 0, 0),
    ]


@pytest.fixture
def switch(tmp_path):
    dp = make_switch(CSwitch, tmp_path)
    flow(dp.pipeline, {"eth_type": 0x0800}, [out(2)])
    yield dp
    dp.close()


def one_frame(size: int = 64) -> bytes:
    rng = random.Random(1)
    f = random_flow(rng, incast=False) | {"kind": 0.0, "ttl": 64, "frag": 0}
    frame = flow_frame(rng, f)
    return frame[:size] if size <= len(frame) else frame + bytes(size - len(frame))


def test_port_counters_are_read_and_written_in_c(switch):
    c = switch.ports[1].counters
    switch.csw.feed(1, one_frame(), 1.0)
    assert (c.rx_packets, c.rx_bytes) == (1, 64)
    c.rx_dropped += 5  # as _read_kernel_drops does
    assert switch.csw.port_counters(1)[4] == 5


def test_the_cache_counts_go_to_the_flow_entry(switch):
    for i in range(10):
        switch.csw.feed(1, one_frame(), 1.0 + i)
    stats = switch.fastpath_stats()
    assert (stats["cache_misses"], stats["cache_hits"]) == (1, 9)
    switch.drain()
    entry = [e for e in switch.pipeline.flow_stats() if e.priority == 10][0]
    assert (entry.ctr.packets, entry.ctr.bytes, entry.ctr.used) == (10, 640, 10.0)


def test_a_frame_longer_than_a_slot_is_dropped_and_counted(switch):
    long = one_frame(switch.fastpath_stats()["pool_slot_bytes"] + 200)
    switch.csw.feed(1, long, 1.0)
    assert switch.fastpath_stats()["pool_drops"] == 1
    assert switch.ports[2].counters.tx_dropped == 1
    assert switch.buffer.snapshot()["shared_used_bytes"] == 0  # given back


def test_a_flush_gives_every_byte_back(switch):
    for _ in range(20):
        switch.csw.feed(1, one_frame(1000), 1.0)  # 20 kB into a 10 Mbit/s port at once
    assert switch.schedulers[2].pending > 0
    switch._flush_port(2)
    assert switch.schedulers[2].pending == 0
    assert switch.buffer.snapshot()["shared_used_bytes"] == 0
    assert switch.ports[2].counters.tx_dropped == sum(
        c.dropped_packets for c in switch.schedulers[2].counters
    )


def test_the_engine_calls_python_on_its_timers_and_when_its_sockets_are_ready():
    engine = _fastpath.Engine()
    r, w = os.pipe()
    calls = []

    def callback(now, py_ready):
        calls.append((now, py_ready))
        if py_ready:
            os.read(r, 1)
            return None  # stop
        if len(calls) == 3:
            os.write(w, b"x")
        return now + 0.005, "timer"

    started = time.monotonic()
    engine.run(r, callback)
    os.close(r)
    os.close(w)
    assert [ready for _now, ready in calls] == [0, 0, 0, 1]
    timer_gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:3])]
    assert all(gap >= 0.005 for gap in timer_gaps), timer_gaps  # slept until due
    assert engine.passes() >= 2
    assert time.monotonic() - started < 5


def test_the_engine_stops_when_python_raises():
    engine = _fastpath.Engine()

    def callback(now, py_ready):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.run(-1, callback)


def test_a_switch_added_twice_to_engines_is_refused(switch):
    engine = _fastpath.Engine()
    engine.add(switch.csw)
    with pytest.raises(ValueError, match="already has an engine"):
        _fastpath.Engine().add(switch.csw)
    engine.remove(switch.csw)


def test_bad_switch_configs_are_named():
    with pytest.raises(ValueError, match="dscp_to_prio"):
        _fastpath.Switch("s1", print, {"dscp_to_prio": [0] * 3})
    with pytest.raises(ValueError, match="dscp_to_prio\\[0\\]=9"):
        _fastpath.Switch("s1", print, {"dscp_to_prio": [9] + [0] * 63})


def test_a_metered_flow_runs_in_c_and_its_meter_counts_there(switch):
    """Hits run the meter's buckets in C; a meter-mod takes C's counts back first."""
    kbps = ofp.OFPMF_KBPS | ofp.OFPMF_BURST
    switch.pipeline.meter_mod(ofp.OFPMC_ADD, kbps, 1, [(ofp.OFPMBT_DROP, 100, 2, 0)])
    flow(
        switch.pipeline,
        {"eth_type": 0x0800},
        prio=20,
        instructions=[
            ofpp.OFPInstructionMeter(1),
            ofpp.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(2)]),
        ],
    )
    for i in range(10):  # 10 x 512 bits at once into a 2 kbit bucket: 3 pass
        switch.csw.feed(1, one_frame(), 1.0 + i * 1e-6)
    stats = switch.fastpath_stats()
    assert (stats["cache_misses"], stats["cache_hits"], stats["upcalls"]) == (1, 9, 1)
    switch.drain()
    meter = switch.pipeline.meters.meters[1]
    assert (meter.packets_in, meter.bytes_in) == (10, 640)
    assert (meter.bands[0].packets, switch.pipeline.dropped_meter) == (7, 7)
    # OpenFlow messages run after a drain (FastDatapath.on_ready), as here.
    switch.pipeline.meter_mod(ofp.OFPMC_MODIFY, kbps, 1, [(ofp.OFPMBT_DROP, 100, 2, 0)])
    assert switch.fastpath_stats()["cache_entries"] == 0
    assert switch.pipeline.meters.meters[1].packets_in == 10  # kept across the modify
