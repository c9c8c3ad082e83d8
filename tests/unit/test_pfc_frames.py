"""PFC frames: built as 802.1Qbb says, read back by Scapy, quanta arithmetic."""

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from emu.proto import pfc


def test_xoff_frame_dissects_with_scapy():
    frame = pfc.build(pfc.template("02:00:00:00:00:07"), {3: 0xFFFF})
    pkt = Ether(frame)
    assert pkt.dst == "01:80:c2:00:00:01" and pkt.type == 0x8808
    layer = pkt[MACControlClassBasedFlowControl]
    assert layer._op_code == 0x0101
    assert layer.c3_enabled == 1 and layer.c3_pause_time == 0xFFFF
    assert layer.c0_enabled == 0 and layer.c4_enabled == 0
    assert len(frame) == pfc.PFC_FRAME_BYTES


def test_the_template_is_the_frame_scapy_builds():
    scapy = bytes(
        Ether(dst=pfc.PFC_DST_MAC, src="02:00:00:00:00:07") / MACControlClassBasedFlowControl()
    )
    assert pfc.template("02:00:00:00:00:07") == scapy


def test_round_trip_and_xon():
    tmpl = pfc.template("02:00:00:00:00:07")
    parsed = pfc.parse(pfc.build(tmpl, {3: 100, 6: 0}))
    assert parsed.enabled() == [3, 6]
    assert parsed.quanta[3] == 100 and parsed.quanta[6] == 0


def test_link_pause_is_all_priorities():
    frame = bytes.fromhex("0180c2000001020000000001880800010010") + bytes(42)
    parsed = pfc.parse(frame)
    assert parsed.enabled() == list(range(8)) and parsed.quanta == (16,) * 8


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        bytes(17),
        bytes(12) + b"\x08\x00" + bytes(50),
        bytes(12) + b"\x88\x08\x01\x01" + bytes(4),
    ],
)
def test_not_pfc_or_truncated_is_none(frame):
    assert pfc.parse(frame) is None


def test_quanta_are_512_bit_times_at_the_port_rate():
    # 802.1Qbb: 0xFFFF quanta at 100 Gbit/s is 335.5 us; at 20 Mbit/s, 1.68 s.
    assert pfc.quanta_to_s(0xFFFF, 100e9) == pytest.approx(335.5e-6, rel=1e-3)
    assert pfc.quanta_to_s(0xFFFF, 20e6) == pytest.approx(1.6776, rel=1e-3)
    assert pfc.s_to_quanta(pfc.quanta_to_s(1000, 20e6), 20e6) == 1000
    assert pfc.s_to_quanta(100.0, 20e6) == 0xFFFF
