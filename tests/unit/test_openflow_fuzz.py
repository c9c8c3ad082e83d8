"""Fuzz the switch's OpenFlow agent: it must never hang, never raise, and answer.

Byte-level mutations of valid controller messages (bit flips, truncation,
length-field corruption in the header and inside instructions, actions,
buckets and hello elements, splicing), plus the inputs known to hang os-ken's
parsers. Deterministic seed; no root.
"""

from __future__ import annotations

import random
import struct
import time

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emu.proto import ofext
from emu.switch.openflow import (
    MALFORMED,
    Effect,
    FlowsRemoved,
    OpenFlowSession,
    PortChanged,
    Reply,
    SwitchModel,
    Transmit,
    reply_bytes,
)
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState

from .fakes import encode

HELLO = bytes.fromhex("0400000800000001")
ECHO = bytes.fromhex("0402000c0000004261626364")


def mkmodel() -> SwitchModel:
    ports = {i: PortState(i, f"s1-eth{i}", bytes([2, 0, 0, 0, 0, i]), 10**8) for i in range(1, 5)}
    return SwitchModel(1, Pipeline(ports=ports))


def seeds() -> list[bytes]:
    """Valid messages whose inner TLVs the mutator corrupts."""
    acts = [
        p.OFPActionSetField(ip_dscp=26),
        p.OFPActionPushVlan(0x8100),
        p.OFPActionSetField(vlan_vid=0x1005),
        p.OFPActionOutput(2),
        p.OFPActionGroup(1),
    ]
    fm = p.OFPFlowMod(
        None,
        priority=5,
        match=p.OFPMatch(
            eth_type=0x800, ip_proto=17, ipv4_dst=("10.0.0.0", "255.0.0.0"), udp_src=4
        ),
        instructions=[
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, acts),
            p.OFPInstructionWriteMetadata(1, 1),
            p.OFPInstructionGotoTable(2),
        ],
    )
    gm = p.OFPGroupMod(
        None,
        ofp.OFPGC_ADD,
        ofp.OFPGT_SELECT,
        1,
        [
            p.OFPBucket(1, 1, ofp.OFPG_ANY, [p.OFPActionOutput(1)]),
            p.OFPBucket(2, 2, ofp.OFPG_ANY, [p.OFPActionDecNwTtl(), p.OFPActionOutput(2)]),
        ],
    )
    po = p.OFPPacketOut(
        None,
        ofp.OFP_NO_BUFFER,
        1,
        [p.OFPActionOutput(ofp.OFPP_FLOOD)],
        bytes(Ether() / IP() / UDP()),
    )
    return [
        encode(gm),
        encode(fm),
        encode(po),
        encode(p.OFPPortMod(None, 2, "02:00:00:00:00:02", 1, 1, 0)),
        encode(
            p.OFPFlowStatsRequest(
                None, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, p.OFPMatch(in_port=1)
            )
        ),
        encode(p.OFPGroupStatsRequest(None, 0, ofp.OFPG_ALL)),
        encode(p.OFPRoleRequest(None, ofp.OFPCR_ROLE_EQUAL, 0)),
        encode(p.OFPSetConfig(None, 0, 128)),
        encode(p.OFPSetAsync(None, [3, 0], [7, 7], [15, 0])),
        encode(p.OFPHello(None, [p.OFPHelloElemVersionBitmap([4])])),
        ECHO,
        # emu's SELECT modes: adaptive routing for priority 3, flowlets (emu/proto/ofext.py).
        ofext.set_select_mode_message(ofext.OFPG_ALL, ofext.SELECT_MODE_ADAPTIVE, classes=8),
        ofext.set_select_mode_message(ofext.OFPG_ALL, ofext.SELECT_MODE_FLOWLET, 100),
    ]


def tlv_offsets(msg: bytes) -> list[int]:
    """Offsets of inner 16-bit length fields (instructions, actions, buckets, hello elems)."""
    t = msg[1]
    out: list[int] = []

    def actions(off: int, end: int) -> None:
        while off + 4 <= end:
            alen = struct.unpack_from("!H", msg, off + 2)[0]
            out.append(off + 2)
            if alen < 8:
                return
            off += alen

    if t == ofp.OFPT_FLOW_MOD:
        mlen = struct.unpack_from("!H", msg, 50)[0]
        out.append(50)
        off = 48 + (mlen + 7) // 8 * 8
        while off + 4 <= len(msg):
            itype, ilen = struct.unpack_from("!HH", msg, off)
            out.append(off + 2)
            if itype in (3, 4):
                actions(off + 8, off + ilen)
            if ilen < 8:
                break
            off += ilen
    elif t == ofp.OFPT_GROUP_MOD:
        off = 16
        while off + 16 <= len(msg):
            blen = struct.unpack_from("!H", msg, off)[0]
            out.append(off)
            actions(off + 16, off + blen)
            if blen < 16:
                break
            off += blen
    elif t == ofp.OFPT_PACKET_OUT:
        out.append(16)
        actions(24, 24 + struct.unpack_from("!H", msg, 16)[0])
    elif t == ofp.OFPT_HELLO:
        out.append(10)
    return out


def mutate(rng: random.Random, msg: bytes, pool: list[bytes]) -> tuple[bytes, bool]:
    """One mutation; returns (bytes, surely_malformed) where the latter is known."""
    b = bytearray(msg)
    kind = rng.randrange(6)
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), False
    if kind == 1 and len(b) > 8:
        # Truncate but keep the header's length consistent with the bytes sent.
        n = rng.randrange(8, len(b))
        b = b[:n]
        struct.pack_into("!H", b, 2, n)
        return bytes(b), False
    if kind == 2:
        struct.pack_into("!H", b, 2, rng.choice([8, 9, len(b) - 1, len(b) + 8, 0xFFFF]))
        return bytes(b), False
    offs = [o for o in tlv_offsets(msg) if o + 2 <= len(b)]
    if kind in (3, 4) and offs:
        off = rng.choice(offs)
        val = 0 if kind == 3 else rng.choice([1, 4, 7, 12, 0xFFF8, 0xFFFF])
        struct.pack_into("!H", b, off, val)
        return bytes(b), kind == 3 and msg[1] != ofp.OFPT_PACKET_OUT
    other = rng.choice(pool)
    cut = rng.randrange(8, len(b) + 1)
    spliced = bytearray(b[:cut] + other[rng.randrange(0, len(other)) :])
    struct.pack_into("!H", spliced, 2, len(spliced))
    return bytes(spliced), False


def feed_checked(s: OpenFlowSession, data: bytes) -> list[bytes]:
    t0 = time.monotonic()
    effects: list[Effect] = s.feed(data, 1.0)
    assert time.monotonic() - t0 < 2.0
    assert all(type(e) in (Reply, Transmit, PortChanged, FlowsRemoved) for e in effects)
    replies = reply_bytes(effects)
    for r in replies:
        assert (r[0] == 4 or r[1] == ofp.OFPT_ERROR) and struct.unpack_from("!H", r, 2)[0] == len(r)
    return replies


def assert_still_works(s: OpenFlowSession | None = None) -> None:
    # A session whose last message announced more bytes than were sent is
    # waiting for them (TCP framing); only an idle session can answer now.
    if s is None or s.closed or s._buf:
        s = OpenFlowSession(mkmodel())
    model = s.model
    s.feed(HELLO, 0)
    [r] = reply_bytes(s.feed(ECHO, 0))
    assert r[1] == ofp.OFPT_ECHO_REPLY and r[8:] == b"abcd"
    fm = p.OFPFlowMod(
        None,
        priority=0xFFFF,
        match=p.OFPMatch(in_port=1),
        instructions=[p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(3)])],
    )
    assert s.feed(encode(fm), 0) == []
    outs, _ = model.pipeline.process(1, bytes(Ether() / IP() / UDP()), 0)
    assert [o[0] for o in outs] == [3]


@pytest.mark.timeout(120)
def test_fuzz_mutations() -> None:
    rng = random.Random(0xE5)
    pool = seeds()
    n_errors = 0
    for i in range(10000):
        msg = rng.choice(pool)
        data, surely_bad = mutate(rng, msg, pool)
        model = mkmodel()
        s = OpenFlowSession(model)
        s.feed(HELLO, 0)
        replies = feed_checked(s, data)
        errs = [r for r in replies if r[1] == ofp.OFPT_ERROR]
        n_errors += bool(errs)
        if surely_bad:
            assert errs or s.closed, data.hex()
        if errs:
            assert errs[0][4:8] == data[4:8]  # same xid
        if i % 500 == 0:
            assert_still_works(s)
    assert n_errors > 3000
    assert sum(MALFORMED.values()) > 0
    assert_still_works()


@pytest.mark.timeout(60)
def test_fuzz_one_long_stream() -> None:
    """Many mutants on one session, split at random points, then recovery."""
    rng = random.Random(7)
    pool = seeds()
    s = OpenFlowSession(mkmodel())
    s.feed(HELLO, 0)
    for _ in range(2000):
        data, _ = mutate(rng, rng.choice(pool), pool)
        cut = rng.randrange(len(data) + 1)
        feed_checked(s, data[:cut])
        feed_checked(s, data[cut:])
        if s.closed:
            s = OpenFlowSession(mkmodel())
            s.feed(HELLO, 0)
    assert_still_works()


def _flow_mod_with(instr: bytes) -> bytes:
    base = bytearray(encode(p.OFPFlowMod(None, priority=1, match=p.OFPMatch(), instructions=[])))
    msg = base + instr
    struct.pack_into("!H", msg, 2, len(msg))
    return bytes(msg)


KNOWN_HANGERS = {
    "instruction_len_0": (
        _flow_mod_with(struct.pack("!HH4x", 4, 0)),
        (ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_BAD_LEN),
    ),
    "action_len_0": (
        _flow_mod_with(struct.pack("!HH4x", 4, 16) + struct.pack("!HH4x", 0, 0)),
        (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN),
    ),
    "unknown_instruction": (
        _flow_mod_with(struct.pack("!HH4x", 77, 8)),
        (ofp.OFPET_BAD_INSTRUCTION, ofp.OFPBIC_UNKNOWN_INST),
    ),
    "bucket_len_0": (
        bytes.fromhex("040f0028000000010000010000000001")
        + struct.pack("!HHII4x", 0, 1, 1, ofp.OFPG_ANY)
        + bytes(8),
        (ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_BUCKET),
    ),
    "bucket_action_len_0": (
        bytes.fromhex("040f0028000000010000010000000001")
        + struct.pack("!HHII4x", 24, 1, 1, ofp.OFPG_ANY)
        + struct.pack("!HH4x", 0, 0),
        (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN),
    ),
    "packet_out_action_len_0": (
        bytes.fromhex("040d002000000001ffffffff000000010008000000000000")
        + struct.pack("!HH4x", 0, 0),
        (ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_LEN),
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(KNOWN_HANGERS))
def test_known_os_ken_hangers(name: str) -> None:
    data, want = KNOWN_HANGERS[name]
    s = OpenFlowSession(mkmodel())
    s.feed(HELLO, 0)
    replies = feed_checked(s, data)
    assert [(r[1], struct.unpack_from("!HH", r, 8)) for r in replies] == [(ofp.OFPT_ERROR, want)]
    assert replies[0][12:] == data[:64]
    assert_still_works(s)


@pytest.mark.timeout(30)
def test_hello_element_len_0_and_short_header() -> None:
    s = OpenFlowSession(mkmodel())
    replies = feed_checked(s, bytes.fromhex("0400001000000001") + struct.pack("!HH4x", 1, 0))
    assert replies[0][1] == ofp.OFPT_ERROR and s.closed
    s = OpenFlowSession(mkmodel())
    replies = feed_checked(s, bytes.fromhex("0400000000000001"))
    assert replies[0][1] == ofp.OFPT_ERROR and s.closed
    assert_still_works()
