"""Switch-local adaptive routing: flowlet SELECT groups and the emu experimenter message (no root)."""

from __future__ import annotations

import collections
import struct

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu.proto import ofext
from emu.switch.openflow import OpenFlowSession, reply_bytes

from .fakes import (
    bucket,
    decode,
    encode,
    errors,
    flow,
    group,
    mkmodel,
    out,
    select_pipeline,
    session,
    udp,
)

GAP_S = 0.010


def flowlet_pipeline(depths: dict[int, int]):
    pl, ports = select_pipeline(queue_bytes=lambda port_no: depths.get(port_no, 0))
    pl.set_select_mode(ofext.SetSelectMode(ofext.OFPG_ALL, ofext.SELECT_MODE_FLOWLET, 10_000))
    return pl, ports


def egress(pl, sport: int, now: float) -> int:
    [(port, _frame, _q)] = pl.process(1, udp(sport=sport), now)[0]
    return port


def test_new_flowlet_takes_the_shortest_queue_and_stays_inside_the_gap() -> None:
    depths = {2: 9000, 3: 3000, 4: 500, 5: 7000}
    pl, _ = flowlet_pipeline(depths)
    assert egress(pl, 1, 0.000) == 4
    # The queue on 4 grows, but packets within the gap keep the flowlet on 4 (no reordering).
    depths[4] = 50_000
    for i in range(1, 20):
        assert egress(pl, 1, i * GAP_S * 0.9) == 4
    # A pause longer than the gap ends the flowlet: the next one goes to the shortest queue (3).
    assert egress(pl, 1, 19 * GAP_S * 0.9 + GAP_S * 1.5) == 3
    report = pl.flowlets.report()
    assert report["flowlets_started"] == 2 and report["bucket_changes"] == 1
    g = pl.groups[1]
    assert [c.packets for c in g.bucket_ctrs] == [0, 1, 20, 0]
    assert g.ctr.packets == 21


def test_a_dead_bucket_ends_its_flowlet_at_once() -> None:
    depths = {2: 0, 3: 100, 4: 100, 5: 100}
    pl, ports = flowlet_pipeline(depths)
    assert egress(pl, 7, 0.0) == 2
    ports[2].link_up = False
    pl.invalidate()
    assert egress(pl, 7, 0.001) in (3, 4, 5)


def test_idle_switch_spreads_flowlets_like_ecmp() -> None:
    pl, _ = flowlet_pipeline({})
    c = collections.Counter(egress(pl, 10_000 + s, 0.0) for s in range(1000))
    assert set(c) == {2, 3, 4, 5} and all(180 <= v <= 320 for v in c.values()), c


def test_per_group_mode_and_hash_mode_back() -> None:
    depths = {2: 0, 3: 10**6, 4: 10**6, 5: 10**6}
    pl, _ = select_pipeline(queue_bytes=lambda port_no: depths[port_no])
    hashed = collections.Counter(egress(pl, s, 0.0) for s in range(200))
    assert len(hashed) == 4
    pl.set_select_mode(ofext.SetSelectMode(1, ofext.SELECT_MODE_FLOWLET, 5000))
    assert {egress(pl, s, 1.0) for s in range(200)} == {2}
    pl.set_select_mode(ofext.SetSelectMode(1, ofext.SELECT_MODE_HASH, 0))
    assert collections.Counter(egress(pl, s, 2.0) for s in range(200)) == hashed
    # Deleting the group forgets its mode: a re-added group with the same id hashes.
    pl.set_select_mode(ofext.SetSelectMode(1, ofext.SELECT_MODE_FLOWLET, 5000))
    group(pl, 1, ofp.OFPGT_SELECT, [], cmd=ofp.OFPGC_DELETE)
    assert pl.flowlets.gap_of(1) is None


def test_flowlet_table_is_bounded(monkeypatch) -> None:
    from emu.switch import flowlet

    monkeypatch.setattr(flowlet, "MAX_FLOWLETS", 100)
    pl, _ = flowlet_pipeline({})
    for s in range(1000):
        egress(pl, s, s * 1.0)
    assert pl.flowlets.report()["active_flowlets"] <= 100


# ----- the OpenFlow extension ------------------------------------------------------------


def experimenter(
    data: bytes, exp_id: int = ofext.EMU_EXPERIMENTER_ID, exp_type: int = ofext.EXP_SET_SELECT_MODE
) -> bytes:
    """Built by os-ken's own encoder: an independent check of our wire format."""
    return encode(p.OFPExperimenter(None, experimenter=exp_id, exp_type=exp_type, data=data))


def with_groups(s: OpenFlowSession) -> None:
    pl = s.model.pipeline
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)]) for i in (2, 3)])
    group(pl, 2, ofp.OFPGT_ALL, [bucket([out(4)])])
    flow(pl, {}, [p.OFPActionGroup(1)])


def test_set_select_mode_over_openflow() -> None:
    s = session()
    with_groups(s)
    raw = ofext.set_select_mode_message(1, ofext.SELECT_MODE_FLOWLET, 2500, xid=9)
    assert (
        raw
        == experimenter(ofext.pack_set_select_mode(1, ofext.SELECT_MODE_FLOWLET, 2500))[:4]
        + struct.pack("!I", 9)
        + raw[8:]
    )
    assert s.feed(raw, 0.0) == []
    assert s.model.pipeline.flowlets.gap_of(1) == pytest.approx(0.0025)
    assert (
        s.feed(
            experimenter(
                ofext.pack_set_select_mode(ofext.OFPG_ALL, ofext.SELECT_MODE_FLOWLET, 100)
            ),
            0,
        )
        == []
    )
    assert s.model.pipeline.flowlets.gap_of(7) == pytest.approx(0.0001)
    [reply] = reply_bytes(s.feed(encode(p.OFPBarrierRequest(None)), 0))
    assert isinstance(decode(reply), p.OFPBarrierReply)


@pytest.mark.parametrize(
    "msg, expected",
    [
        (
            experimenter(b"\x00" * 12, exp_id=0x00002320),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXPERIMENTER),
        ),
        (experimenter(b"\x00" * 12, exp_type=99), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXP_TYPE)),
        (experimenter(b"\x00" * 11), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)),
        (experimenter(b""), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN)),
        (
            experimenter(struct.pack("!IHxxI", 77, 1, 100)),
            (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_UNKNOWN_GROUP),
        ),
        (
            experimenter(struct.pack("!IHxxI", 2, 1, 100)),
            (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE),
        ),
        (
            experimenter(struct.pack("!IHxxI", 1, 9, 100)),
            (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE),
        ),
        (
            experimenter(struct.pack("!IHxxI", 1, 1, 0)),
            (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET),
        ),
    ],
)
def test_bad_extension_messages_get_the_documented_error(msg: bytes, expected: tuple) -> None:
    s = session()
    with_groups(s)
    assert errors(s.feed(msg, 0.0)) == [expected]
    assert s.model.pipeline.flowlets.gap_of(1) is None
    # The session lives on.
    assert isinstance(
        decode(reply_bytes(s.feed(encode(p.OFPBarrierRequest(None)), 0))[0]), p.OFPBarrierReply
    )


def test_slave_may_not_set_modes() -> None:
    s = OpenFlowSession(mkmodel(), is_controller_channel=True)
    s.feed(bytes.fromhex("0400000800000001"), 0)
    with_groups(s)
    s.feed(encode(p.OFPRoleRequest(None, ofp.OFPCR_ROLE_SLAVE, 1)), 0)
    raw = ofext.set_select_mode_message(1, ofext.SELECT_MODE_FLOWLET, 100)
    assert errors(s.feed(raw, 0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)]


def test_gap_scaling() -> None:
    # 100 us at 1 Gbit/s modelled on a 10 Mbit/s link: 100x longer.
    assert ofext.gap_us_for(10e6, 1.0) == 10_000
    # Below three full frames' time the floor wins (3 x 1514 B at 1 Gbit/s = 36 us).
    assert ofext.gap_us_for(1e9, 0.1) == 36
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_set_select_mode(1, 5)
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_set_select_mode(1, ofext.SELECT_MODE_FLOWLET, 0)
