"""Unit tests of the aggregation wire formats: emu/proto/agg.py and ofext's job messages.

Scapy builds and dissects aggregation frames independently of the struct
codec; os-ken encodes the experimenter messages a controller sends and parses
the experimenter error the switch answers. No root needed.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from emu.proto import agg, layers, ofext
from emu.switch import openflow

from .fakes import decode, encode

HOST_MAC, JOB_MAC = "02:00:00:00:00:01", "02:00:00:00:aa:01"
HOST_IP, JOB_IP = "10.0.0.1", "10.255.0.1"


def template() -> agg.AggTemplate:
    return agg.AggTemplate(HOST_MAC, JOB_MAC, HOST_IP, JOB_IP)


def elements(values, dtype: int = agg.DTYPE_INT32) -> bytes:
    return np.asarray(values, dtype=agg.WIRE_DTYPES[dtype]).tobytes()


def scapy_frame(payload: bytes, **hdr) -> bytes:
    fields = dict(
        kind=agg.KIND_CONTRIB,
        dtype=agg.DTYPE_INT32,
        job_id=7,
        slot=1,
        seq=9,
        count=len(payload) // 4,
        rank=2,
    )
    fields.update(hdr)
    return bytes(
        Ether(src=HOST_MAC, dst=JOB_MAC)
        / IP(src=HOST_IP, dst=JOB_IP, tos=26 << 2)
        / UDP(sport=5000, dport=agg.AGG_UDP_PORT)
        / layers.AggHeader(**fields)
        / Raw(payload)
    )


def checksum_ok(frame: bytes) -> bool:
    ip = Ether(frame)[IP]
    got = ip.chksum
    del ip.chksum
    return got == IP(bytes(ip)).chksum


# ----- the Scapy layer and the struct codec ------------------------------------------


def test_header_golden_bytes() -> None:
    h = layers.AggHeader(
        kind=agg.KIND_RESULT,
        dtype=agg.DTYPE_FLOAT32,
        job_id=0x0102,
        slot=3,
        seq=0x0A0B0C0D,
        count=2,
        rank=agg.RANK_SWITCH,
    )
    assert bytes(h) == bytes.fromhex("01 01 01 00 0102 0003 0a0b0c0d 0002 ffff")
    assert len(bytes(layers.AggHeader())) == agg.HEADER_BYTES == 16


def test_template_frame_dissected_by_scapy() -> None:
    payload = elements([1, -2, 2**31 - 1])
    frame = template().frame(agg.KIND_CONTRIB, agg.DTYPE_INT32, 7, 9, 1, payload, rank=3)
    pkt = Ether(frame)
    assert (pkt.src, pkt.dst) == (HOST_MAC, JOB_MAC)
    assert (pkt[IP].src, pkt[IP].dst, pkt[IP].tos) == (HOST_IP, JOB_IP, 26 << 2 | 0b10)
    assert pkt[IP].len == len(frame) - 14 and checksum_ok(frame)
    assert (pkt[UDP].dport, pkt[UDP].len, pkt[UDP].chksum) == (4792, 8 + 16 + 12, 0)
    h = pkt[layers.AggHeader]
    assert (h.version, h.kind, h.dtype, h.flags) == (1, agg.KIND_CONTRIB, agg.DTYPE_INT32, 0)
    assert (h.job_id, h.slot, h.seq, h.count, h.rank) == (7, 1, 9, 3, 3)
    assert bytes(h.payload) == payload
    # A second frame from the same template patches lengths and checksum again.
    frame2 = template().frame(
        agg.KIND_RESULT, agg.DTYPE_FLOAT32, 7, 10, 2, elements([1.5] * 256, agg.DTYPE_FLOAT32)
    )
    assert checksum_ok(frame2) and Ether(frame2)[layers.AggHeader].count == 256


def test_scapy_frame_parsed_by_codec() -> None:
    payload = elements([0.5, -3.25], agg.DTYPE_FLOAT32)
    pkt = agg.parse(scapy_frame(payload, dtype=agg.DTYPE_FLOAT32, kind=agg.KIND_RESULT))
    assert pkt is not None
    assert (pkt.kind, pkt.dtype, pkt.job_id, pkt.slot, pkt.seq, pkt.count, pkt.rank) == (
        agg.KIND_RESULT,
        agg.DTYPE_FLOAT32,
        7,
        1,
        9,
        2,
        2,
    )
    assert (pkt.src_mac, pkt.src_ip, pkt.dst_ip) == (HOST_MAC, HOST_IP, JOB_IP)
    assert pkt.payload == payload and pkt.array().tolist() == [0.5, -3.25]


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00" * 13,
        bytes(Ether() / ARP()),
        bytes(Ether() / IP() / TCP(dport=4792)),
        bytes(Ether() / IP() / UDP(dport=4791) / (b"\x00" * 40)),
        bytes(Ether() / IP(options=b"\x01\x01\x01\x00") / UDP(dport=4792) / (b"\x00" * 40)),
    ],
    ids=["empty", "short", "arp", "tcp", "roce", "ip-options"],
)
def test_parse_ignores_other_frames(frame: bytes) -> None:
    assert agg.parse(frame) is None and not agg.is_agg(frame)


def _patch(frame: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(frame)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


GOOD = template().frame(agg.KIND_CONTRIB, agg.DTYPE_INT32, 7, 9, 1, elements([1, 2]))
HDR = 42  # the aggregation header's offset


@pytest.mark.parametrize(
    "frame, field",
    [
        (_patch(GOOD, HDR, "!B", 2), "version"),
        (_patch(GOOD, HDR + 1, "!B", 5), "kind"),
        (_patch(GOOD, HDR + 2, "!B", 9), "dtype"),
        (_patch(GOOD, HDR + 12, "!H", 0), "count"),
        (_patch(GOOD, HDR + 12, "!H", 257), "count"),
        (_patch(GOOD, HDR + 12, "!H", 3), "payload"),
        (_patch(GOOD, 16, "!H", 2000), "IPv4 total length"),
        (_patch(GOOD, 38, "!H", 12), "UDP length"),
        (GOOD[:50], "IPv4 total length"),
    ],
    ids=["version", "kind", "dtype", "count0", "count257", "payload", "iplen", "udplen", "cut"],
)
def test_parse_names_the_bad_field(frame: bytes, field: str) -> None:
    with pytest.raises(agg.MalformedAgg, match=field):
        agg.parse(frame)


def test_parse_short_header() -> None:
    # IPv4 and UDP lengths agree, but leave room for only 8 of the 16 header bytes.
    frame = _patch(_patch(GOOD[:50], 16, "!H", 36), 38, "!H", 16)
    with pytest.raises(agg.MalformedAgg, match="header bytes"):
        agg.parse(frame)


def test_parse_every_truncation_raises_or_ignores() -> None:
    for n in range(len(GOOD)):
        try:
            assert agg.parse(GOOD[:n]) is None
        except agg.MalformedAgg:
            pass
    # Ethernet padding after the IPv4 datagram is not payload.
    assert agg.parse(GOOD + b"\x00" * 8).payload == elements([1, 2])


def test_retarget() -> None:
    new = elements([5, 6])
    out = agg.retarget(
        GOOD,
        dst_mac="02:00:00:00:00:09",
        dst_ip="10.0.0.9",
        src_mac="02:00:00:00:00:0a",
        kind=agg.KIND_RESULT,
        rank=agg.RANK_SWITCH,
        payload=new,
    )
    pkt = agg.parse(out)
    assert (pkt.kind, pkt.rank, pkt.dst_ip, pkt.src_mac, pkt.payload) == (
        agg.KIND_RESULT,
        agg.RANK_SWITCH,
        "10.0.0.9",
        "02:00:00:00:00:0a",
        new,
    )
    assert Ether(out).dst == "02:00:00:00:00:09" and checksum_ok(out)
    with pytest.raises(ValueError):
        agg.retarget(GOOD, payload=elements([1, 2, 3]))


def test_template_refuses_bad_payloads() -> None:
    for payload in (b"", b"\x00" * 5, b"\x00" * 4 * 257):
        with pytest.raises(ValueError):
            template().frame(agg.KIND_CONTRIB, agg.DTYPE_INT32, 1, 0, 0, payload)


def test_chunk_count() -> None:
    assert [agg.chunk_count(n) for n in (1, 4, 1024, 1025, 4096)] == [1, 1, 1, 2, 4]


# ----- ofext: the job messages ---------------------------------------------------------

JOB = ofext.AggJobSet(
    job_id=0x0102,
    nslots=8,
    root=False,
    parent_port=3,
    job_ip=JOB_IP,
    job_mac=JOB_MAC,
    children=(
        ofext.AggChild(1, HOST_MAC, HOST_IP),
        ofext.AggChild(2, "02:00:00:00:00:02", "10.0.0.2"),
    ),
)


def test_job_set_golden_bytes_and_round_trip() -> None:
    data = ofext.pack_agg_job_set(JOB)
    assert data[:24] == bytes.fromhex("0102000800020000000000030aff000102000000aa010000")
    assert data[24:40] == bytes.fromhex("0000000102000000000100000a000001")
    assert len(data) == 24 + 2 * 16
    assert ofext.unpack_agg_job_set(data) == JOB
    root = ofext.AggJobSet(9, 1, True, 0, JOB_IP, JOB_MAC, JOB.children[:1])
    assert ofext.unpack_agg_job_set(ofext.pack_agg_job_set(root)) == root
    assert ofext.unpack_agg_job_del(ofext.pack_agg_job_del(5)) == 5
    assert ofext.pack_agg_job_del(ofext.AGG_JOB_ALL) == b"\xff\xff\x00\x00"


@pytest.mark.parametrize(
    "exp_type, data",
    [
        (ofext.EXP_AGG_JOB_SET, ofext.pack_agg_job_set(JOB)),
        (ofext.EXP_AGG_JOB_DEL, ofext.pack_agg_job_del(0x0102)),
    ],
)
def test_os_ken_encodes_the_same_bytes(exp_type: int, data: bytes) -> None:
    ours = ofext.experimenter_message(exp_type, data, xid=0x55)
    theirs = encode(
        p.OFPExperimenter(
            None, experimenter=ofext.EMU_EXPERIMENTER_ID, exp_type=exp_type, data=data
        )
    )
    assert ours[:4] == theirs[:4] and ours[8:] == theirs[8:]
    msg = decode(ours)
    assert isinstance(msg, p.OFPExperimenter) and msg.xid == 0x55
    assert (msg.experimenter, msg.exp_type, bytes(msg.data)) == (
        ofext.EMU_EXPERIMENTER_ID,
        exp_type,
        data,
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 23,
        ofext.pack_agg_job_set(JOB)[:-1],
        ofext.pack_agg_job_set(JOB) + b"\x00" * 16,
        struct.pack("!HHBBxxI4s6sxx", 1, 4, 0, 0, 3, b"\n\0\0\1", b"\2" * 6),  # 0 children
        ofext.pack_agg_job_set(JOB)[:2] + b"\x00\x00" + ofext.pack_agg_job_set(JOB)[4:],  # 0 slots
        b"\xff\xff" + ofext.pack_agg_job_set(JOB)[2:],  # AGG_JOB_ALL is not a job id
    ],
    ids=["empty", "short", "cut-child", "extra-child", "no-children", "no-slots", "job-all"],
)
def test_job_set_unpack_refuses(data: bytes) -> None:
    with pytest.raises(ofext.ExtensionError):
        ofext.unpack_agg_job_set(data)


def test_job_pack_refuses() -> None:
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_agg_job_set(ofext.AggJobSet(1, 1, True, 0, JOB_IP, JOB_MAC, ()))
    many = tuple(ofext.AggChild(i, HOST_MAC, HOST_IP) for i in range(65))
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_agg_job_set(ofext.AggJobSet(1, 1, True, 0, JOB_IP, JOB_MAC, many))
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_agg_job_set(ofext.AggJobSet(1, 1, True, 0, "10.0.0.300", JOB_MAC, many[:1]))
    with pytest.raises(ofext.ExtensionError):
        ofext.pack_agg_job_set(ofext.AggJobSet(1, 1, True, 0, JOB_IP, "02:00", many[:1]))
    with pytest.raises(ofext.ExtensionError):
        ofext.unpack_agg_job_del(b"\x00\x01")


def test_experimenter_error_parsed_by_os_ken() -> None:
    request = ofext.experimenter_message(ofext.EXP_AGG_JOB_SET, ofext.pack_agg_job_set(JOB), xid=77)
    raw = openflow._experimenter_error(ofext.AGG_ERR_NO_SLOTS, request, 77)
    err = decode(raw)
    assert isinstance(err, p.OFPErrorMsg) and err.xid == 77
    assert err.type == ofp.OFPET_EXPERIMENTER == ofext.OFPET_EXPERIMENTER
    assert (err.exp_type, err.experimenter) == (ofext.AGG_ERR_NO_SLOTS, ofext.EMU_EXPERIMENTER_ID)
    assert bytes(err.data) == request[:64]
