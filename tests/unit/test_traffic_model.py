"""The all-reduce time model (emu/traffic/model.py) against the code that puts frames on the wire.

Byte counts are checked against the NIC model and the aggregation host sending
real frames (emu/host/rnic.py, emu/host/sharp.py) and message sizes against
the pure ring; times against the closed forms of the module docstring.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from emu.host.ring import RingAllReduce
from emu.host.rnic import NicConfig, Rnic
from emu.host.sharp import SharpAllReduce
from emu.proto import agg, roce
from emu.traffic import collectives, model

RATE = 10_000_000
A = dict(mac="02:00:00:00:00:01", ip="10.0.0.1")
B = dict(mac="02:00:00:00:00:02", ip="10.0.0.2")

# ----------------------------------------------------------------- frames and bytes


def test_header_sizes_are_those_of_real_frames():
    tmpl = roce.DataTemplate(A["mac"], B["mac"], A["ip"], B["ip"], 49152, 7)
    for payload in (0, 4, 1024):
        frame = tmpl.frame(roce.SEND_MIDDLE, 5, payload)
        assert len(frame) == payload + model.ROCE_SEND_OVERHEAD_BYTES == payload + 58
    # Payloads are padded to whole words (BTH pad count).
    assert len(tmpl.frame(roce.SEND_ONLY, 5, 1)) == 4 + 58
    assert len(tmpl.ack_frame(5, 1)) == model.ROCE_ACK_FRAME_BYTES == 62
    elements = bytes(agg.MAX_ELEMENTS * agg.ELEMENT_BYTES)
    frame = agg.AggTemplate(A["mac"], B["mac"], A["ip"], B["ip"]).frame(
        agg.KIND_CONTRIB, agg.DTYPE_FLOAT32, 1, 0, 0, elements
    )
    assert len(frame) - len(elements) == model.AGG_OVERHEAD_BYTES == 58


def _nic_pair():
    a = Rnic(NicConfig(rate_bps=RATE, dcqcn=False, **A))
    b = Rnic(NicConfig(rate_bps=RATE, dcqcn=False, **B))
    a.connect(1, 7, B["mac"], B["ip"], 49152, 0.0)
    b.connect(7, 1, A["mac"], A["ip"], 49153, 0.0)
    return a, b


@pytest.mark.parametrize("sizes", [[32 << 10], [1, 1023, 1024, 1025], [5000, 0, 70_000, 3]])
def test_message_frames_and_acks_are_what_the_nic_sends(sizes):
    a, b = _nic_pair()
    for s in sizes:
        a.post_send(1, s, 0.0, data=bytes(s))
    acks = []
    now = 0.0
    while now < 1.0:
        frame = a.next_frame(now)
        while frame is not None:
            for reply in b.receive(frame, now):
                acks.append(len(reply))
                a.receive(reply, now)
            frame = a.next_frame(now)
        now += 1e-4
    assert len(a.send_qps[1].completed) == len(sizes)
    packets = frame_bytes = asked = psn = 0
    for s in sizes:
        p, nbytes, k = model.roce_message_frames(s, psn)
        psn += p
        packets, frame_bytes, asked = packets + p, frame_bytes + nbytes, asked + k
    qp = a.send_qps[1]
    assert (qp.tx_packets, qp.tx_bytes, qp.retransmitted) == (packets, frame_bytes, 0)
    assert acks == [model.ROCE_ACK_FRAME_BYTES] * asked


@pytest.mark.parametrize(
    "n,count,slice_bytes", [(8, 65536, 64 << 10), (3, 10_007, 2048), (4, 5, 4), (5, 1, 1024)]
)
def test_ring_messages_are_those_of_the_pure_ring(n, count, slice_bytes):
    arrays = [np.arange(count, dtype=np.int32) for _ in range(n)]
    wires = [deque() for _ in range(n)]  # wires[r]: rank r -> rank r+1
    ring = [RingAllReduce(r, n, arrays[r], slice_bytes=slice_bytes) for r in range(n)]
    sent = [[] for _ in range(n)]
    for r in range(n):
        for m in ring[r].start():
            wires[r].append(m)
            sent[r].append(len(m))
    while any(wires):
        for r in range(n):
            while wires[r]:
                nxt = (r + 1) % n
                for m in ring[nxt].on_message(wires[r].popleft()):
                    wires[nxt].append(m)
                    sent[nxt].append(len(m))
    chunks = model.ring_step_messages(count * 4, n, 4, slice_bytes)
    for r in range(n):
        want = [m for k in range(2 * (n - 1)) for m in chunks[(r - k) % n]]
        assert sent[r] == want


def test_sharp_bytes_are_the_frames_a_rank_sends():
    for count in (65536, 1000, 1):
        rank = SharpAllReduce(
            np.ones(count, dtype=np.float32),
            rank=0,
            job_id=1,
            job_ip="10.255.0.1",
            job_mac="02:00:00:00:ff:01",
            nslots=1 << 20,
            src_mac=A["mac"],
            src_ip=A["ip"],
            first_seq=0,
            rate_bps=RATE,
            now=0.0,
        )
        frames = []
        while (f := rank.next_frame(0.0)) is not None:
            frames.append(len(f))
        load = model.sharp_allreduce(count * 4, 8, RATE).loads[0]
        assert (load.up_frames, load.up_bytes, load.payload_bytes) == (
            len(frames),
            sum(frames),
            count * 4,
        )


# ----------------------------------------------------------------- times


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_time_is_2n_minus_1_steps_of_one_chunk_and_its_acks(n):
    size = 1 << 20
    chunk = size // n
    packets = -(-chunk // 1024)
    step_bytes = chunk + packets * 58 + -(-packets // 4) * 62  # aligned PSNs: every 4th asks
    p = model.ring_allreduce(size, n, RATE)
    assert p.time_s == pytest.approx(2 * (n - 1) * step_bytes * 8 / RATE)
    assert p.wire_s == p.time_s
    for load in p.loads:
        assert load.payload_bytes == collectives.model_bytes_per_host("ring", size, n)
        assert load.up_bytes == load.down_bytes == 2 * (n - 1) * step_bytes


def test_sharp_time_is_s_up_in_kib_frames():
    size = 1 << 20
    p = model.sharp_allreduce(size, 8, RATE)
    assert p.time_s == pytest.approx((size + 1024 * 58) * 8 / RATE)
    assert p.loads[0].payload_bytes == collectives.model_bytes_per_host("sharp", size, 8)
    assert p.goodput_fraction == pytest.approx(1024 / 1082)


@pytest.mark.parametrize("algo", model.ALGOS)
@pytest.mark.parametrize("factor", [1.5, 2.0, 4.0])
def test_a_slow_nic_slows_the_whole_all_reduce_by_its_factor(algo, factor):
    healthy = model.predict_allreduce(algo, 256 << 10, 8, RATE)
    for slow_rank in (0, 5):
        slow = model.predict_allreduce(
            algo, 256 << 10, 8, RATE, nic_factor=factor, slow_rank=slow_rank
        )
        assert slow.time_s == pytest.approx(factor * healthy.time_s)
        assert slow.wire_s == pytest.approx(healthy.time_s)


def test_uneven_ring_chunks_take_the_largest_per_step():
    # 10 elements on 3 ranks: chunks of 3, 3, 4 elements; every step has a 4-element message.
    p = model.ring_allreduce(40, 3, RATE)
    one = (16 + 58 + 62) * 8 / RATE
    assert p.time_s == pytest.approx(4 * one)
    # Rank r sends chunks r, r-1, r-2, r-3 (mod 3) in its 4 steps: 12 + 16 + 12 + 12 B or so.
    assert sorted(ld.payload_bytes for ld in p.loads) == [52, 52, 56]


def test_in_network_aggregation_beats_the_ring_by_about_2_n_minus_1_over_n():
    ring = model.ring_allreduce(4 << 20, 8, RATE)
    sharp = model.sharp_allreduce(4 << 20, 8, RATE)
    # The ring also carries ACKs (62 B every 4 packets): 1.4% more than its data frames.
    assert ring.time_s / sharp.time_s == pytest.approx(2 * 7 / 8 * (1 + 62 / 4 / 1082), rel=1e-3)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: model.predict_allreduce("tree", 1024, 4, RATE), "algo='tree'"),
        (lambda: model.ring_allreduce(1024, 1, RATE), "nranks=1"),
        (lambda: model.ring_allreduce(1022, 4, RATE), "size_bytes=1022"),
        (lambda: model.sharp_allreduce(1024, 4, 0), "link_rate_bps=0"),
        (lambda: model.sharp_allreduce(6, 4, RATE), "size_bytes=6"),
        (lambda: model.ring_allreduce(1024, 4, RATE, nic_factor=0.5), "nic_factor=0.5"),
        (lambda: model.sharp_allreduce(1024, 4, RATE, nic_factor=2, slow_rank=4), "slow_rank=4"),
        (lambda: model.roce_message_frames(-1), "size_bytes=-1"),
    ],
)
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
