"""OpenFlow 1.3 meters (emu/switch/meter.py) through the pipeline and the agent.

The rates are checked against the token bucket's own model: over T seconds a
band passes rate x T plus its burst, to within one packet. No root needed.
"""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emu.switch.meter import remark_dscp
from emu.switch.openflow import reply_bytes
from emu.switch.pipeline import OFError, Pipeline

from .fakes import decode, encode, errors, flow, mkports, out, session

FRAME_BYTES = 1000


def frame(dscp: int = 0) -> bytes:
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=dscp << 2) / UDP()
    return bytes(pkt / (b"x" * (FRAME_BYTES - len(pkt))))


def metered(flags: int, bands: list[tuple]) -> Pipeline:
    pl = Pipeline(ports=mkports(4))
    pl.meter_mod(ofp.OFPMC_ADD, flags, 1, bands)
    flow(
        pl,
        {},
        instructions=[
            p.OFPInstructionMeter(1),
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(2)]),
        ],
    )
    return pl


def bucket_model(rate: float, burst: float, rate_pps: float, seconds: float, cost: float) -> float:
    """What a token bucket lets through: its burst plus its rate until the last arrival."""
    last = (int(rate_pps * seconds) - 1) / rate_pps
    return (burst + rate * last) / cost


def near(passed: int, model: float) -> bool:
    """Whole frames only: the count is the model rounded down, or one below it."""
    return model - 1 <= passed <= model + 1e-9


def offer(pl: Pipeline, rate_pps: float, seconds: float, dscp: int = 0) -> list[bytes]:
    """Send frames at `rate_pps` for `seconds` of pipeline time; what left port 2."""
    sent = []
    n = int(rate_pps * seconds)
    f = frame(dscp)
    for i in range(n):
        outs, _ = pl.process(1, f, i / rate_pps)
        sent += [o[1] for o in outs]
    return sent


def test_a_kbps_drop_band_passes_its_rate_plus_its_burst() -> None:
    # 1 Mbit/s with a 100 kbit burst, offered 10 Mbit/s (1250 frames/s) for 2 s.
    pl = metered(
        ofp.OFPMF_KBPS | ofp.OFPMF_BURST | ofp.OFPMF_STATS, [(ofp.OFPMBT_DROP, 1000, 100, 0)]
    )
    passed = len(offer(pl, 1250, 2.0))
    assert near(passed, bucket_model(1_000_000, 100_000, 1250, 2.0, FRAME_BYTES * 8))
    meter = pl.meters.meters[1]
    assert meter.packets_in == 2500 and meter.bands[0].packets == 2500 - passed
    assert pl.dropped_meter == 2500 - passed


@pytest.mark.parametrize("flags", [ofp.OFPMF_PKTPS, ofp.OFPMF_PKTPS | ofp.OFPMF_BURST])
def test_a_band_without_a_burst_gets_one_second_of_its_rate_as_ovs_does(flags) -> None:
    # OVS (dpif-netdev and dpif-netlink): burst_size = rate when the flag is off or it is 0.
    pl = metered(flags, [(ofp.OFPMBT_DROP, 100, 0, 0)])
    passed = len(offer(pl, 1000, 3.0))
    assert near(passed, bucket_model(100, 100, 1000, 3.0, 1))


def test_a_default_burst_passes_the_rate_of_bursty_arrivals() -> None:
    """os-ken's switch tester offers 2 Mbit/s as 10 frames every 17 ms (its 10 ms timer,
    late): a 1 Mbit/s meter must pass 1 Mbit/s of it, which a 10 ms bucket did not."""
    pl = metered(ofp.OFPMF_KBPS, [(ofp.OFPMBT_DROP, 1000, 0, 0)])
    passed, t = 0, 0.0
    while t < 30.0:
        for _ in range(10):
            outs, _ = pl.process(1, frame(0), t)
            passed += len(outs)
        t += 0.017
    offered_bps = 10 * FRAME_BYTES * 8 / 0.017
    rate = passed * FRAME_BYTES * 8 / 30.0
    # Above the meter's rate by at most its one-second burst spread over 30 s.
    assert 1e6 <= rate <= 1e6 * (1 + 1 / 30) + FRAME_BYTES * 8, (rate, offered_bps)


def test_dscp_remark_raises_af_drop_precedence_and_the_higher_drop_band_wins() -> None:
    assert remark_dscp(10, 1) == 12  # AF11 -> AF12
    assert remark_dscp(10, 3) == 14  # capped at AF13
    assert remark_dscp(46, 1) == 46  # EF is not AF: unchanged
    # Remark above 1 Mbit/s, drop above 4 Mbit/s; offered 2 Mbit/s (250 frames/s).
    pl = metered(
        ofp.OFPMF_KBPS | ofp.OFPMF_BURST,
        [(ofp.OFPMBT_DSCP_REMARK, 1000, 10, 1), (ofp.OFPMBT_DROP, 4000, 10, 0)],
    )
    sent = offer(pl, 250, 2.0, dscp=10)
    assert len(sent) == 500  # nothing above the drop band's rate
    remarked = sum(1 for f in sent if f[15] >> 2 == 12)
    untouched = sum(1 for f in sent if f[15] >> 2 == 10)
    assert remarked + untouched == 500
    assert near(untouched, bucket_model(1_000_000, 10_000, 250, 2.0, FRAME_BYTES * 8))
    # At 8 Mbit/s the drop band (the highest exceeded rate) applies instead.
    pl = metered(
        ofp.OFPMF_KBPS | ofp.OFPMF_BURST,
        [(ofp.OFPMBT_DSCP_REMARK, 1000, 10, 1), (ofp.OFPMBT_DROP, 4000, 10, 0)],
    )
    sent = offer(pl, 1000, 1.0, dscp=10)
    assert near(len(sent), bucket_model(4_000_000, 10_000, 1000, 1.0, FRAME_BYTES * 8))


@pytest.mark.parametrize(
    "command,flags,meter_id,bands,code",
    [
        (ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 0, [(ofp.OFPMBT_DROP, 1, 0, 0)], ofp.OFPMMFC_INVALID_METER),
        (ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 2, [(ofp.OFPMBT_DROP, 0, 0, 0)], ofp.OFPMMFC_BAD_RATE),
        (ofp.OFPMC_ADD, ofp.OFPMF_KBPS | ofp.OFPMF_PKTPS, 2, [(1, 1, 0, 0)], ofp.OFPMMFC_BAD_FLAGS),
        (ofp.OFPMC_ADD, 0, 2, [(ofp.OFPMBT_DSCP_REMARK, 1, 0, 0)], ofp.OFPMMFC_BAD_BAND_VALUE),
        (ofp.OFPMC_ADD, 0, 2, [(0xFFFF, 1, 0, 0)], ofp.OFPMMFC_BAD_BAND),
        (ofp.OFPMC_ADD, 0, 1, [(ofp.OFPMBT_DROP, 1, 0, 0)], ofp.OFPMMFC_METER_EXISTS),
        (ofp.OFPMC_MODIFY, 0, 9, [(ofp.OFPMBT_DROP, 1, 0, 0)], ofp.OFPMMFC_UNKNOWN_METER),
        (7, 0, 2, [(ofp.OFPMBT_DROP, 1, 0, 0)], ofp.OFPMMFC_BAD_COMMAND),
    ],
)
def test_meter_mod_errors_carry_the_specs_codes(command, flags, meter_id, bands, code) -> None:
    pl = metered(ofp.OFPMF_KBPS, [(ofp.OFPMBT_DROP, 1000, 0, 0)])
    with pytest.raises(OFError) as e:
        pl.meter_mod(command, flags, meter_id, bands)
    assert (e.value.type, e.value.code) == (ofp.OFPET_METER_MOD_FAILED, code)


def test_a_flow_naming_an_unknown_meter_is_refused_and_deleting_a_meter_removes_its_flows() -> None:
    pl = Pipeline(ports=mkports(4))
    with pytest.raises(OFError) as e:
        flow(pl, {}, instructions=[p.OFPInstructionMeter(5)])
    assert (e.value.type, e.value.code) == (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER)
    pl = metered(ofp.OFPMF_KBPS, [(ofp.OFPMBT_DROP, 1000, 0, 0)])
    flow(pl, {"in_port": 3}, [out(4)])
    removed = pl.meter_mod(ofp.OFPMC_DELETE, 0, 1, [])
    assert len(removed) == 1 and removed[0].meter_id == 1
    assert [e.meter_id for t in pl.tables for e in t.entries] == [None]


def test_meters_over_openflow_mod_stats_config_and_features() -> None:
    s = session()
    mod = p.OFPMeterMod(
        None,
        ofp.OFPMC_ADD,
        ofp.OFPMF_KBPS | ofp.OFPMF_BURST | ofp.OFPMF_STATS,
        3,
        [p.OFPMeterBandDrop(rate=1000, burst_size=50)],
    )
    assert s.feed(encode(mod), 0.0) == []
    fm = p.OFPFlowMod(
        None,
        priority=5,
        match=p.OFPMatch(),
        instructions=[
            p.OFPInstructionMeter(3),
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(2)]),
        ],
    )
    assert s.feed(encode(fm), 0.0) == []
    pl = s.model.pipeline
    passed = sum(len(pl.process(1, frame(), i / 1250)[0]) for i in range(1250))
    assert near(passed, bucket_model(1_000_000, 50_000, 1250, 1.0, FRAME_BYTES * 8))
    [r] = reply_bytes(s.feed(encode(p.OFPMeterStatsRequest(None, 0, ofp.OFPM_ALL)), 1.0))
    [st] = decode(r).body
    assert (st.meter_id, st.flow_count, st.packet_in_count) == (3, 1, 1250)
    assert st.band_stats[0].packet_band_count == 1250 - passed
    [r] = reply_bytes(s.feed(encode(p.OFPMeterConfigStatsRequest(None, 0, 3)), 1.0))
    [cfg] = decode(r).body
    assert cfg.meter_id == 3 and cfg.bands[0].rate == 1000 and cfg.bands[0].burst_size == 50
    [r] = reply_bytes(s.feed(encode(p.OFPMeterFeaturesStatsRequest(None, 0)), 1.0))
    [feat] = decode(r).body
    assert feat.band_types == (1 << ofp.OFPMBT_DROP) | (1 << ofp.OFPMBT_DSCP_REMARK)
    assert feat.max_meter >= 1 and feat.max_bands >= 2
    bad = p.OFPMeterMod(None, ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 3, [p.OFPMeterBandDrop(rate=1)])
    assert errors(s.feed(encode(bad), 2.0)) == [
        (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_METER_EXISTS)
    ]
