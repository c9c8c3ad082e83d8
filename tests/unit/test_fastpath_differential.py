"""The compiled data plane against its specification: the same frames, the same decisions.

Both datapaths (`Datapath`, the Python specification, and `FastDatapath`,
whose per-frame path is emu/switch/csrc) are built with the same ports,
flow tables, groups and QoS, and fed the same frames at the same `now`:
the OpenFlow 1.3 cases of tests/of13_cases.py, random valid frames (TCP,
UDP, RoCEv2, ARP, ICMP, IPv6, tagged, PFC and 802.3x PAUSE, every DSCP and
ECN codepoint, TTLs down to 0), truncated frames and random bytes, in an
incast that fills queues, marks ECN and sends and honours PAUSE. RoCEv2 to
one host goes through a SELECT group in adaptive mode for priorities 0 and 3
(emu/switch/adaptive.py; the other classes hash), so every such packet is
placed by the queues and PAUSEs of that moment; RoCEv2 to another goes
through a UGAL group (two minimal buckets, two longer ones, a bias), so its
packets of priorities 0 and 3 weigh each port's queue by its path length and
take the long way when the short ones are deep, the other classes hash over
the minimal buckets. They must send the same
frames, in the same order, on the same ports, and end with the same port,
queue, buffer, PFC, flow, group and adaptive-routing counters.

Ports send into a capture (no sockets), so this runs without root; the
sanitizer build (scripts/sanitize) runs this file under ASan and UBSan.
EMU_DIFF_FRAMES sets how many random frames (default 100,000).
"""

from __future__ import annotations

import os
import random
import struct

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p

from emu.proto import headers, ofext
from emu.switch import fastpath

from ..of13_cases import MATCH_CASES, SET_CASES
from .fakes import (
    DIFF_HOSTS,
    DIFF_MACS,
    DIFF_PORTS,
    CSwitch,
    PythonSwitch,
    bucket,
    flow,
    flow_frame,
    group,
    make_switch,
    out,
    random_flow,
)

FRAMES = int(os.environ.get("EMU_DIFF_FRAMES", "100000"))


def install(pl) -> None:
    """Flow tables that exercise what the C path compiles, and what it leaves to Python."""
    group(pl, 1, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in (2, 3, 4)])
    group(
        pl, 2, ofp.OFPGT_ALL, [bucket([out(5)]), bucket([p.OFPActionSetField(ip_dscp=10), out(6)])]
    )
    group(pl, 3, ofp.OFPGT_FF, [bucket([out(6)], watch_port=6), bucket([out(4)], watch_port=4)])
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[1]}, [out(2)])
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[2]}, [p.OFPActionGroup(1)])
    flow(
        pl,
        {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[3]},
        [
            p.OFPActionSetField(eth_dst="02:00:00:00:00:99"),
            p.OFPActionSetField(eth_src="02:00:00:00:00:98"),
            p.OFPActionDecNwTtl(),
            out(3),
        ],
    )
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[4]}, [p.OFPActionGroup(2)])
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 17, "ipv4_dst": DIFF_HOSTS[5]},
        [
            p.OFPActionSetField(ipv4_src="192.0.2.7"),
            p.OFPActionSetField(udp_src=5555),
            p.OFPActionSetField(ip_ecn=1),
            p.OFPActionSetQueue(4),
            out(5),
        ],
    )
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 6, "ipv4_dst": DIFF_HOSTS[5]},
        [p.OFPActionSetField(tcp_dst=8080), p.OFPActionSetNwTtl(9), out(ofp.OFPP_IN_PORT)],
    )
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[6]}, [p.OFPActionGroup(3)])
    # Adaptive routing: RoCEv2 to 10.0.0.3 through group 4, per packet for
    # priorities 0 and 3 (DSCP 0 and 26), by hash for the others.
    group(pl, 4, ofp.OFPGT_SELECT, [bucket([out(i)], watch_port=i) for i in (2, 3, 4, 5)])
    pl.set_select_mode(ofext.SetSelectMode(4, ofext.SELECT_MODE_ADAPTIVE, 0, 0b1001))
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 17, "udp_dst": 4791, "ipv4_dst": DIFF_HOSTS[2]},
        [p.OFPActionGroup(4)],
        prio=12,
    )
    # UGAL: RoCEv2 to 10.0.0.5 through group 5, whose weights say paths (2 x hops,
    # + 1 off the minimal path): ports 2 and 6 minimal (2 hops), 3 and 5 non-minimal
    # (4 and 3 hops), a bias of 3000 bytes on the long ones; port 6 is the incast's,
    # so it fills.
    weights = {2: 4, 3: 9, 5: 7, 6: 4}
    group(
        pl,
        5,
        ofp.OFPGT_SELECT,
        [bucket([out(n)], weight=w, watch_port=n) for n, w in weights.items()],
    )
    pl.set_select_mode(
        ofext.SetSelectMode(5, ofext.SELECT_MODE_UGAL, 3000, 0b1001)  # bias in the 32 bits
    )
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 17, "udp_dst": 4791, "ipv4_dst": DIFF_HOSTS[4]},
        [p.OFPActionGroup(5)],
        prio=12,
    )
    # Meters (run in C for cached programs): UDP to 10.0.0.2 through a 2 Mbit/s
    # DROP band with a 20 kbit burst; TCP to 10.0.0.4 through a packets/s meter
    # whose lower band remarks AF DSCPs and whose upper band drops.
    kbps_burst = ofp.OFPMF_KBPS | ofp.OFPMF_BURST
    pl.meter_mod(ofp.OFPMC_ADD, kbps_burst, 1, [(ofp.OFPMBT_DROP, 2000, 20, 0)])
    pl.meter_mod(
        ofp.OFPMC_ADD,
        ofp.OFPMF_PKTPS | ofp.OFPMF_BURST,
        2,
        [(ofp.OFPMBT_DSCP_REMARK, 100, 3, 1), (ofp.OFPMBT_DROP, 400, 6, 0)],
    )
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 17, "ipv4_dst": DIFF_HOSTS[1]},
        prio=15,
        instructions=[
            p.OFPInstructionMeter(1),
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(2)]),
        ],
    )
    flow(
        pl,
        {"eth_type": 0x0800, "ip_proto": 6, "ipv4_dst": DIFF_HOSTS[3]},
        prio=15,
        instructions=[
            p.OFPInstructionMeter(2),
            p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out(3)]),
        ],
    )
    # Incast: everything to 10.0.0.8 leaves through port 6 (queues fill, PFC, ECN).
    flow(pl, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[7]}, [out(6)])
    flow(pl, {"eth_type": 0x0806}, [out(ofp.OFPP_FLOOD)])
    flow(pl, {"eth_type": 0x86DD}, [out(4)])
    flow(pl, {"eth_type": 0x0800, "ip_proto": 1}, [out(ofp.OFPP_CONTROLLER)], prio=20)
    flow(
        pl, {"eth_type": 0x0800, "ipv4_src": DIFF_HOSTS[0], "ipv4_dst": DIFF_HOSTS[2]}, [], prio=30
    )
    # A second table: frames to 10.0.0.1 go there and out of port 1.
    flow(
        pl,
        {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[0]},
        instructions=[p.OFPInstructionGotoTable(1)],
    )
    flow(pl, {}, [out(1)], table=1)


# ----- frames ---------------------------------------------------------------------


def random_frame(rng: random.Random, flows: list) -> bytes:
    """Mostly frames of `flows`; besides, ARP, IPv6, PAUSE, truncated frames and noise."""
    kind = rng.random()
    if kind < 0.85:
        return flow_frame(rng, rng.choice(flows))
    if kind < 0.88:
        arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + rng.randbytes(20)
        return headers.ethernet(rng.choice(DIFF_MACS), rng.choice(DIFF_MACS), 0x0806) + arp
    if kind < 0.9:
        size = rng.randrange(200)
        v6 = struct.pack("!IHBB", 0x60000000, 8 + size, 17, 64) + rng.randbytes(32)
        udp = struct.pack("!HHHH", 1, 2, 8 + size, 0) + bytes(size)
        return headers.ethernet(rng.choice(DIFF_MACS), rng.choice(DIFF_MACS), 0x86DD) + v6 + udp
    if kind < 0.93:
        opcode, vector = rng.choice([(0x0101, rng.randrange(256)), (0x0001, 0)])
        quanta = [rng.choice([0, 10, 0xFFFF, rng.randrange(65536)]) for _ in range(8)]
        body = struct.pack("!HH8H", opcode, vector, *quanta)
        return (
            headers.ethernet("01:80:c2:00:00:01", rng.choice(DIFF_MACS), 0x8808) + body + bytes(26)
        )
    if kind < 0.97:
        whole = flow_frame(rng, rng.choice(flows))
        return whole[: rng.randrange(len(whole) + 1)]  # truncated anywhere
    return rng.randbytes(rng.randrange(80))  # noise


def of13_frames(rng: random.Random) -> list[tuple[int, bytes]]:
    """Each case's frames, on a random port or the in_port the case names."""
    frames = []
    for _name, _match, hit, miss in MATCH_CASES:
        for case in (hit, miss):
            in_port, pkt = case if isinstance(case, tuple) else (rng.choice(DIFF_PORTS), case)
            if pkt is None:
                continue
            frames.append((in_port, bytes(pkt)))
    for _field, _value, frame, _want in SET_CASES:
        frames.append((rng.choice(DIFF_PORTS), bytes(frame)))
    return frames


# ----- the comparison --------------------------------------------------------------------


def state(dp) -> dict:
    """What the two datapaths must agree on, in plain values."""
    if isinstance(dp, fastpath.FastDatapath):
        dp.drain()
    out = {
        "ports": {
            n: vars(p.counters) if hasattr(p.counters, "__dict__") else None
            for n, p in dp.ports.items()
        },
        "port_counters": {
            n: [getattr(p.counters, f) for f in fastpath._PORT_FIELDS] for n, p in dp.ports.items()
        },
        "queues": {n: [vars(c) for c in s.counters] for n, s in dp.schedulers.items()},
        "depth": {n: list(s.depth_bytes) for n, s in dp.schedulers.items()},
        "buffer": dp.buffer.snapshot(),
        "pause_rx": dict(dp.pause_rx),
        "pfc_tx": {n: v for n, v in dp.pfc_tx_frames.items() if v},
        "lost": {n: v for n, v in dp.lost_frames.items() if v},
        "malformed": dp.malformed_frames,
        "flows": [
            (e.table_id, e.priority, e.ctr.packets, e.ctr.bytes) for e in dp.pipeline.flow_stats()
        ],
        "groups": {
            gid: [g.ctr.packets, g.ctr.bytes] + [(c.packets, c.bytes) for c in g.bucket_ctrs]
            for gid, g in dp.pipeline.groups.items()
        },
        "dropped": (dp.pipeline.dropped_port_down, dp.pipeline.dropped_ttl),
        "adaptive": dp.adaptive_counts(),
        "dropped_meter": dp.pipeline.dropped_meter,
        "meters": {
            mid: (m.packets_in, m.bytes_in, [(b.packets, b.bytes, b.tokens) for b in m.bands])
            for mid, m in dp.pipeline.meters.meters.items()
        },
    }
    del out["ports"]
    return out


def differences(py, c) -> list[str]:
    found = []
    for n in DIFF_PORTS:
        a, b = py.sent(n), c.sent(n)
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            found.append(
                f"port {n}: {len(a)} frames from Python, {len(b)} from C; first difference "
                f"at frame {at}: {a[at].hex() if at < len(a) else None} vs "
                f"{b[at].hex() if at < len(b) else None}"
            )
    sa, sb = state(py), state(c)
    for key in sa:
        if sa[key] != sb[key]:
            found.append(f"{key}: Python {sa[key]} vs C {sb[key]}")
    return found


# Gaps between frames: bursts (a third of the frames into one 10 Mbit/s port at
# about 30 Mbit/s) with pauses in which queues drain.
BURSTY = [0.0] * 16 + [1e-5, 1e-4, 1e-4, 2e-3]


def run(py, c, frames: list[tuple[int, bytes]], rng: random.Random, now: float = 1000.0) -> float:
    for in_port, frame in frames:
        now += rng.choice(BURSTY)
        for dp in (py, c):
            dp.feed(in_port, frame, now)
            dp.step(now)
    for _ in range(4000):  # drain the queues
        now += 1e-3
        for dp in (py, c):
            dp.step(now)
    return now


@pytest.fixture
def pair(tmp_path):
    py, c = make_switch(PythonSwitch, tmp_path), make_switch(CSwitch, tmp_path)
    for dp in (py, c):
        install(dp.pipeline)
    yield py, c
    for dp in (py, c):
        dp.close()


def test_the_of13_cases_leave_both_datapaths_alike(pair) -> None:
    py, c = pair
    rng = random.Random(1)
    frames = of13_frames(rng) * 3
    run(py, c, frames, rng)
    assert differences(py, c) == []
    assert c.fastpath_stats()["cache_hits"] > 0  # the C path forwarded some itself


def test_random_valid_truncated_and_malformed_frames_leave_both_alike(pair) -> None:
    """FRAMES frames of 300 flows, a third of them an incast into port 6 that fills its queues."""
    py, c = pair
    rng = random.Random(7)
    py._set_port_loss(3, 0.05, 7)
    c._set_port_loss(3, 0.05, 7)
    flows = [random_flow(rng, incast=i < 100) for i in range(300)]
    frames = [(rng.choice(DIFF_PORTS[:5]), random_frame(rng, flows)) for _ in range(FRAMES)]
    run(py, c, frames, rng)
    assert differences(py, c) == []
    stats, buffer = c.fastpath_stats(), c.buffer.snapshot()
    # The run covered what it claims to: C forwarded most frames itself, queues
    # filled to PAUSE and ECN, PAUSE frames arrived, a lossy link lost frames.
    assert stats["cache_hits"] > FRAMES // 4, stats
    assert buffer["xoff_sent"] and buffer["xon_sent"] and buffer["ecn_marks"], buffer
    assert c.pause_rx and c.lost_frames and c.malformed_frames > 0
    # Both meters dropped frames, the remarking band remarked some, in C.
    bands = {mid: m.bands for mid, m in c.pipeline.meters.meters.items()}
    assert c.pipeline.dropped_meter > 0 and all(b.packets for b in bands[2]), bands
    # Adaptive routing placed packets in C, passed paused ports over, used every port;
    # UGAL sent packets both ways, in C too.
    ar = c.adaptive_counts()
    assert stats["ar_decisions"] > 0 and ar["paused_skips"] > 0 and len(ar["picks"]) == 5, ar
    assert stats["ar_ugal_decisions"] > 0 and stats["ar_ugal_nonminimal"] > 0, stats
    assert 0 < ar["ugal_nonminimal"] < ar["ugal_decisions"], ar


def test_the_comparison_fails_when_the_tables_differ(pair) -> None:
    """Shown on purpose: one flow more on the C side is found in what the ports send."""
    py, c = pair
    flow(c.pipeline, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[1]}, [out(4)], prio=50)
    rng = random.Random(3)
    flows = [random_flow(rng, incast=False) for _ in range(50)]
    frames = [(1, random_frame(rng, flows)) for _ in range(400)]
    run(py, c, frames, rng)
    found = differences(py, c)
    assert any(line.startswith("port 2:") for line in found), found
    assert any(line.startswith("port 4:") for line in found), found


def test_a_flow_mod_clears_the_compiled_cache_and_keeps_the_counts(pair) -> None:
    py, c = pair
    rng = random.Random(5)
    one = random_flow(rng, incast=False) | {"kind": 0.0, "dst": DIFF_HOSTS[1], "ttl": 64, "frag": 0}
    frame = flow_frame(rng, one)
    frames = [(1, frame)] * 50
    now = run(py, c, frames, rng)
    assert c.fastpath_stats()["cache_entries"] >= 1
    for dp in (py, c):
        flow(dp.pipeline, {"eth_type": 0x0800, "ipv4_dst": DIFF_HOSTS[1]}, [out(5)], prio=40)
    assert c.fastpath_stats()["cache_entries"] == 0
    run(py, c, frames, rng, now)
    assert differences(py, c) == []
    assert len(c.sent(5)) == 50 and len(c.sent(2)) == 50


def malformed_corpus(rng: random.Random) -> list[bytes]:
    """Every prefix of one frame of each kind, and each header byte of them set to 0x00,
    0xff and a random value: lengths and fields that lie about the bytes that follow."""
    corpus = []
    flows = [random_flow(rng, incast=False) | {"kind": k} for k in (0.1, 0.6, 0.87, 0.95)]
    flows[0]["frag"] = 0
    flows[1]["frag"] = 0
    # RoCEv2 of priority 3 to 10.0.0.3 and 10.0.0.5: adaptive routing's and UGAL's
    # groups (install).
    for host in (DIFF_HOSTS[2], DIFF_HOSTS[4]):
        roce = {"kind": 0.1, "frag": 0, "ttl": 64, "dst": host, "dport": 4791, "tos": 26 << 2}
        flows.append(random_flow(rng, incast=False) | roce)
    whole = [flow_frame(rng, f) for f in flows]
    whole.append(random_frame(random.Random(2), flows))
    pause = headers.ethernet("01:80:c2:00:00:01", DIFF_MACS[0], 0x8808)
    whole.append(pause + struct.pack("!HH8H", 0x0101, 0xFF, *range(8)) + bytes(26))
    for frame in whole:
        corpus += [frame[:n] for n in range(len(frame) + 1) if n <= 80 or n == len(frame)]
        for at in range(min(len(frame), 60)):
            for value in (0x00, 0xFF, rng.randrange(256)):
                corpus.append(frame[:at] + bytes([value]) + frame[at + 1 :])
    corpus += [bytes(n) for n in range(0, 70, 7)] + [b"\xff" * 1514, rng.randbytes(9000)]
    return corpus


def test_a_malformed_frame_corpus_leaves_both_alike(pair) -> None:
    """Run by scripts/sanitize under ASan and UBSan: no read beyond what arrived."""
    py, c = pair
    rng = random.Random(11)
    corpus = malformed_corpus(rng)
    frames = [(DIFF_PORTS[i % 5], f) for i, f in enumerate(corpus * 2)]  # twice: misses, then hits
    run(py, c, frames, rng)
    assert differences(py, c) == []
    assert c.fastpath_stats()["cache_hits"] > 0
    assert c.fastpath_stats()["ar_decisions"] > 0
    assert c.fastpath_stats()["ar_ugal_decisions"] > 0
    fed = sum(c.ports[n].counters.rx_packets for n in DIFF_PORTS)
    assert fed == len(frames)
