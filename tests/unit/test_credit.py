"""Credit-based flow control: the wire format against Scapy, and the pure credit manager.

The manager's properties (emu/credit.py): a sender never sends beyond the
credit advertised, credits come back as the receiver frees its buffer, a lost
update or lost data never deadlocks the loop (the periodic refresh and the
FCTBS resync recover it), and blocked time is counted per VL.
"""

import random

import pytest
from scapy.layers.l2 import Ether

from emu.config import ConfigError, CreditSpec, flow_control_qos, parse_qos
from emu.credit import CreditLink
from emu.proto import credit, pfc
from emu.proto.layers import IBFlowControl

RATE = 10e6
FRAME = 1090  # a RoCEv2 frame with a 1024-byte payload: 18 blocks


# ----- wire format -------------------------------------------------------------


def test_frame_dissects_with_scapy():
    fc = credit.FcPacket(vl=3, fctbs=0xABC, fccl=0x123)
    frame = credit.build(credit.template("02:00:00:00:00:07"), fc)
    assert len(frame) == credit.FC_FRAME_BYTES
    pkt = Ether(frame)
    assert pkt.type == 0x88B5 and pkt.dst == credit.FC_DST_MAC and pkt.src == "02:00:00:00:00:07"
    layer = pkt[IBFlowControl]
    assert (layer.op, layer.fctbs, layer.vl, layer.fccl, layer.lpcrc) == (0, 0xABC, 3, 0x123, 0)


def test_scapy_built_packet_parses():
    frame = bytes(
        Ether(dst=credit.FC_DST_MAC, src="02:00:00:00:00:01")
        / IBFlowControl(op=1, fctbs=4095, vl=7, fccl=17)
    )
    assert credit.parse(frame) == credit.FcPacket(vl=7, fctbs=4095, fccl=17, op=1)


def test_field_layout_is_ibas():
    # Wireshark's dissect_infiniband_link: Op(4)|FCTBS(12), VL(4)|FCCL(12), LPCRC(16).
    frame = credit.build(credit.template("02:00:00:00:00:01"), credit.FcPacket(5, 0x001, 0xFFF))
    assert frame[14:20] == bytes.fromhex("0001 5fff 0000")


def test_counters_wrap_at_12_bits():
    frame = credit.build(credit.template("02:00:00:00:00:01"), credit.FcPacket(3, 4096 + 5, 8191))
    assert credit.parse(frame) == credit.FcPacket(3, 5, 4095)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        bytes(19),
        bytes(12) + b"\x08\x00" + bytes(46),
        bytes(12) + b"\x88\xb5" + b"\x20\x00" + bytes(44),  # Op 2: reserved
    ],
)
def test_not_flow_control_or_reserved_is_none(frame):
    assert credit.parse(frame) is None


def test_blocks_round_up():
    assert [credit.blocks(n) for n in (1, 64, 65, 1090)] == [1, 1, 2, 18]


# ----- configuration -------------------------------------------------------------


def test_flow_control_credit_turns_pfc_off():
    qos = parse_qos(flow_control_qos("credit", {"ecn": {"enabled": False}}))
    assert qos["credit"].enabled and not qos["pfc"].enabled and not qos["ecn"].enabled
    assert flow_control_qos("pfc", {"x": 1}) == {"x": 1}


def test_credit_and_pfc_together_is_an_error():
    with pytest.raises(ConfigError, match="one flow control"):
        parse_qos({"credit": {"enabled": True}})


@pytest.mark.parametrize(
    "key,value",
    [
        ("vl_buffer_bytes", 100),
        ("vl_buffer_bytes", 2049 * 64),
        ("update_fraction", 0),
        ("refresh_symbols", 0),
        ("priorities", (9,)),
    ],
)
def test_bad_credit_values_are_named(key, value):
    with pytest.raises(ConfigError, match=key):
        CreditSpec(**{key: value})


def test_unknown_mode_is_named():
    with pytest.raises(ConfigError, match="flow_control='ib'"):
        flow_control_qos("ib")


def test_refresh_is_65536_byte_times():
    # IBA: a flow control packet on every VL at least every 65,536 symbol times.
    assert CreditSpec().refresh_s(RATE) == pytest.approx(65536 * 8 / RATE)


# ----- the manager ---------------------------------------------------------------


class Wire:
    """Two link ends joined back to back, with a receive buffer drained on demand at B."""

    def __init__(self, capacity=16 * 1024, spec=None):
        self.spec = spec or CreditSpec(enabled=True, vl_buffer_bytes=capacity)
        self.a = CreditLink(self.spec, (3,), capacity, RATE, now=0.0)
        self.b = CreditLink(self.spec, (3,), capacity, RATE, now=0.0)
        self.held_b = 0  # bytes B's VL 3 buffers
        self.queue_b = []

    def exchange(self, now, lose_to_a=False, lose_to_b=False):
        for fc in self.b.due(now, {3: self.held_b}):
            if not lose_to_a:
                self.a.on_fc(fc, now)
        for fc in self.a.due(now, {3: 0}):
            if not lose_to_b:
                self.b.on_fc(fc, now)

    def send(self, now, size=FRAME, lose=False):
        if not self.a.may_send(3, size, now):
            return False
        self.a.sent(3, size)
        if not lose:
            assert self.b.received(3, size), "overrun: the sender exceeded the credit"
            self.held_b += size
            self.queue_b.append(size)
        return True

    def drain(self, n):
        for _ in range(min(n, len(self.queue_b))):
            self.held_b -= self.queue_b.pop(0)


def test_no_credit_before_the_first_update():
    w = Wire()
    assert not w.a.may_send(3, 64, 0.0)
    w.exchange(0.0)
    assert w.a.credit_blocks(3) == 16 * 1024 // 64


def test_sender_stops_at_the_advertised_credit():
    w = Wire(capacity=16 * 1024)
    w.exchange(0.0)
    sent = 0
    while w.send(0.001):
        sent += 1
    # 256 blocks of credit, 18 a frame: 14 frames, and no 15th.
    assert sent == 256 // 18
    assert w.held_b <= 16 * 1024
    assert w.b.stats(0.0)["3"]["overruns"] == 0


def test_credits_return_as_the_receiver_frees_its_buffer():
    w = Wire(capacity=16 * 1024)
    w.exchange(0.0)
    while w.send(0.001):
        pass
    before = w.a.credit_blocks(3)
    # The limit advertised is ABR + the free buffer in whole blocks: the first
    # drained frame raises it by 30 blocks, below the update threshold (1/8 of
    # 256 = 32 blocks), so nothing is sent; the second makes it 64, sent at once.
    w.drain(1)
    w.exchange(0.002)
    assert w.a.credit_blocks(3) == before
    w.drain(1)
    w.exchange(0.003)
    assert w.a.credit_blocks(3) == (16 * 1024 - len(w.queue_b) * FRAME) // 64 > before
    assert w.send(0.004)


def test_a_sender_that_ignores_credit_is_an_overrun():
    w = Wire(capacity=4 * 1024)
    w.exchange(0.0)
    while w.send(0.0):
        pass
    w.a.sent(3, FRAME)  # sent without asking
    assert not w.b.received(3, FRAME)
    assert w.b.stats(0.0)["3"]["overruns"] == 1


def test_lost_update_recovers_at_the_refresh():
    w = Wire(capacity=8 * 1024)
    w.exchange(0.0)
    while w.send(0.0):
        pass
    w.drain(10)
    w.exchange(0.001, lose_to_a=True)  # the update that returned the credit is lost
    assert not w.a.may_send(3, FRAME, 0.001)
    # Nothing more is freed: only the refresh can bring the credit back.
    refresh = w.spec.refresh_s(RATE)
    w.exchange(refresh * 0.99)
    assert not w.a.may_send(3, FRAME, refresh * 0.99)
    w.exchange(refresh + 0.001)
    assert w.a.may_send(3, FRAME, refresh + 0.001)


def test_lost_data_returns_its_credit_through_fctbs():
    w = Wire(capacity=8 * 1024)
    w.exchange(0.0)
    while w.send(0.0, lose=True):  # every frame lost on the wire: nothing held at B
        pass
    assert not w.a.may_send(3, FRAME, 0.0)
    t = w.spec.refresh_s(RATE) + 0.001
    w.exchange(t)  # A's refresh carries FCTBS; B sets ABR to it and advertises again
    w.exchange(t + 0.0001)
    assert w.b.stats(t)["3"]["abr_resyncs"] == 1
    assert w.a.credit_blocks(3) == 8 * 1024 // 64


def test_blocked_time_is_counted_per_vl():
    w = Wire(capacity=4 * 1024)
    w.exchange(0.0)
    while w.send(0.5):  # the first refusal, at 0.5, starts the blocked time
        pass
    assert not w.a.may_send(3, FRAME, 1.0)
    assert w.a.blocked(3) and w.a.blocked_so_far(1.0) == {3: 0.5}
    w.drain(100)
    w.exchange(1.25)  # credit arrives at 1.25
    assert not w.a.blocked(3)
    assert w.a.blocked_so_far(2.0) == {3: 0.75}
    assert w.a.unblocked_at(3) == 1.25


def test_random_run_never_exceeds_credit():
    """Random traffic, drains and lost packets both ways: never an overrun, never stuck."""
    rng = random.Random(7)
    w = Wire(capacity=12 * 1024)
    refresh = w.spec.refresh_s(RATE)
    now, sent, last_progress = 0.0, 0, 0.0
    for _ in range(20000):
        now += rng.uniform(0, refresh / 50)
        w.exchange(now, lose_to_a=rng.random() < 0.3, lose_to_b=rng.random() < 0.3)
        size = rng.choice((64, 100, 600, FRAME, 1514))
        if w.send(now, size, lose=rng.random() < 0.05):
            sent += 1
            last_progress = now
        assert w.held_b <= w.b.capacity_bytes
        if rng.random() < 0.3:
            w.drain(rng.randint(1, 3))
        # Each refresh is lost with p = 0.3 each way: 12 lost in a row is a 1e-6 event.
        assert now - last_progress < 12 * refresh, "the credit loop stalled"
    assert sent > 1000
    assert w.b.stats(now)["3"]["overruns"] == 0


def test_update_rate_stays_small():
    """With the buffer drained at once, one update per update_fraction of the buffer."""
    w = Wire(capacity=64 * 1024)
    w.exchange(0.0)
    frames = 0
    t = 0.0
    for _ in range(2000):
        t += 1e-5
        if w.send(t):
            frames += 1
        w.drain(10)
        w.exchange(t)
    fc = w.b.stats(t)["3"]["fc_tx"]
    assert frames == 2000
    # 1024 blocks, an update every 128 freed: about one per 7 frames of 18 blocks.
    assert fc <= frames * 18 / 128 + 2


# ----- the switch's side: scheduler and shared buffer in credit mode -------------------

from emu.config import BufferSpec, EcnSpec, PfcSpec  # noqa: E402
from emu.switch.buffer import DROP_CREDIT_OVERRUN, HEADROOM, SharedBuffer  # noqa: E402
from emu.switch.scheduler import PortScheduler  # noqa: E402


def credit_port(capacity=8 * 1024):
    spec = CreditSpec(enabled=True, vl_buffer_bytes=capacity)
    link = CreditLink(spec, (3,), capacity, RATE, now=0.0)
    sched = PortScheduler(rate_bps=int(RATE))
    sched.credit = link
    return sched, link


def test_scheduler_sends_a_lane_only_with_credit_and_other_lanes_meanwhile():
    sched, link = credit_port()
    sched.enqueue(bytes(FRAME), 3, now=0.0)
    sched.enqueue(bytes(100), 0, now=0.0)  # priority 0 is not a credit lane
    item = sched.dequeue(0.0)
    assert item is not None and item[1] == 0  # lane 3 has no credit yet: 0 goes first
    assert link.blocked(3)
    assert sched.ready_at() is None  # only a blocked lane waits: no busy loop
    link.on_fc(credit.FcPacket(3, 0, 18), 0.5)  # exactly one frame's credit
    now = max(sched.ready_at(), 0.5)
    frame, prio, _ = sched.dequeue(now)
    assert prio == 3 and link.credit_blocks(3) == 0
    assert link.blocked_so_far(1.0) == {3: 0.5}


def test_scheduler_never_sends_beyond_credit():
    sched, link = credit_port()
    link.on_fc(credit.FcPacket(3, 0, 100), 0.0)  # 100 blocks: 5 frames of 18
    for _ in range(20):
        sched.enqueue(bytes(FRAME), 3, now=0.0)
    sent, now = 0, 0.0
    while True:
        ready = sched.ready_at()
        if ready is None:
            break
        now = max(now, ready)
        if sched.dequeue(now) is not None:
            sent += 1
    assert sent == 100 // 18 and sched.pending == 20 - sent


def test_a_frame_the_kernel_refused_gives_its_credit_back():
    sched, link = credit_port()
    link.on_fc(credit.FcPacket(3, 0, 18), 0.0)
    sched.enqueue(bytes(FRAME), 3, now=0.0)
    frame, prio, meta = sched.dequeue(0.0)
    assert link.credit_blocks(3) == 0
    sched.requeue_front(frame, prio, meta)
    assert link.credit_blocks(3) == 18 and sched.pending == 1


def make_buffer(capacity=8 * 1024, ports=(1, 2)):
    return SharedBuffer(
        BufferSpec(size_bytes=1 << 20),
        PfcSpec(enabled=False),
        EcnSpec(enabled=False),
        {p: int(RATE) for p in ports},
        credit=CreditSpec(enabled=True, vl_buffer_bytes=capacity),
    )


def test_buffer_reserves_each_ports_credit_pool():
    buf = make_buffer()
    assert buf.reserved == 2 * 8 * 1024 and buf.paused_upstream == {}
    # A credit lane's frames fill their (port, VL) pool, never a PFC threshold.
    for _ in range(7):
        assert buf.admit(1, 3, 2, FRAME, False, 0.0) == (HEADROOM, False)
    assert buf.credit_held(1, 3) == 7 * FRAME
    assert buf.pfc_due(0.0) == []
    # The eighth would exceed the 8 KiB the credits advertised: the sender's overrun.
    assert buf.admit(1, 3, 2, FRAME, False, 0.0) is None
    assert buf.counters.drops[DROP_CREDIT_OVERRUN] == 1
    buf.release(1, 3, 2, FRAME, HEADROOM)
    assert buf.credit_held(1, 3) == 6 * FRAME


def test_buffer_too_small_for_the_credit_pools_is_named():
    with pytest.raises(ValueError, match="vl_buffer_bytes"):
        SharedBuffer(
            BufferSpec(size_bytes=64 * 1024),
            PfcSpec(enabled=False),
            EcnSpec(enabled=False),
            {p: int(RATE) for p in range(1, 5)},
            credit=CreditSpec(enabled=True, vl_buffer_bytes=16 * 1024),
        )


# ----- the NIC's side (emu/host/rnic.py), two NICs back to back ------------------------

from emu.host.rnic import NicConfig, Rnic  # noqa: E402

NIC_A = dict(mac="02:00:00:00:00:01", ip="10.0.0.1")
NIC_B = dict(mac="02:00:00:00:00:02", ip="10.0.0.2")


def credit_nics(**kw):
    spec = CreditSpec(enabled=True)
    a = Rnic(NicConfig(rate_bps=int(RATE), dcqcn=False, credit=spec, **NIC_A, **kw))
    b = Rnic(NicConfig(rate_bps=int(RATE), dcqcn=False, credit=spec, **NIC_B, **kw))
    a.connect(1, 7, NIC_B["mac"], NIC_B["ip"], 49152, 0.0)
    b.connect(7, 1, NIC_A["mac"], NIC_A["ip"], 49153, 0.0)
    return a, b


def wire(a, b, until, start=0.0, step=1e-4):
    """Both directions of one link from `start`; returns the most bytes b's buffer ever held."""
    now, peak = start, 0.0
    while now < until:
        for f in a.tick(now):
            assert not b.receive(f, now)  # a flow control frame asks for no reply
        for f in b.tick(now):
            a.receive(f, now)
        frame = a.next_frame(now)
        while frame is not None:
            for reply in b.receive(frame, now):
                a.receive(reply, now)
            peak = max(peak, b.rx_buffer)
            frame = a.next_frame(now)
        now += step
    return peak


def test_nic_sends_nothing_before_credit_and_completes_with_it():
    a, b = credit_nics()
    a.post_send(1, 100_000, 0.0)
    assert a.next_frame(0.0) is None  # no credit from b yet
    wire(a, b, 0.2)
    assert len(a.send_qps[1].completed) == 1 and b.recv_qps[7].rx_bytes == 100_000
    assert a.pause_tx == b.pause_tx == 0
    assert a.fc_rx > 0 and b.fc_tx > 0


def test_slow_receiver_is_never_overrun_and_the_sender_waits():
    a, b = credit_nics(drain_rate_bps=RATE / 4)
    a.post_send(1, 400_000, 0.0)
    peak = wire(a, b, 0.6)
    stats_b = b.stats(0.6)
    assert stats_b["rx_overflow"] == 0 and stats_b["credit"]["3"]["overruns"] == 0
    assert stats_b["pause_tx"] == 0  # credits, not PAUSE
    assert peak <= b.credit.capacity_bytes
    assert a.stats(0.6)["credit"]["3"]["blocked_s"] > 0.1
    # Goodput follows the drain, not the link: 0.6 s at a quarter of the rate, plus the
    # buffer the credits covered at the start.
    assert b.recv_qps[7].rx_bytes <= 0.6 * RATE / 4 / 8 + b.credit.capacity_bytes + 2048


def test_stuck_nic_returns_no_credit():
    a, b = credit_nics()
    a.post_send(1, 2_000_000, 0.0)
    wire(a, b, 0.05)
    b.stuck = True
    before = b.recv_qps[7].rx_bytes
    wire(a, b, 0.5, start=0.05)
    # What was in flight and the credit already granted, then nothing: at most one buffer.
    assert b.recv_qps[7].rx_bytes - before <= b.credit.capacity_bytes
    assert b.pause_tx == 0


def test_a_qp_on_its_own_class_goes_while_the_other_lane_waits():
    """Per-VL isolation at the NIC: lane 3 paused (PFC) or without credit, lane 4 sends."""
    for mode in ("pfc", "credit"):
        spec = CreditSpec(enabled=True, priorities=(3, 4)) if mode == "credit" else None
        a = Rnic(NicConfig(rate_bps=int(RATE), dcqcn=False, credit=spec, **NIC_A))
        a.connect(1, 7, NIC_B["mac"], NIC_B["ip"], 49152, 0.0)
        a.connect(2, 8, NIC_B["mac"], NIC_B["ip"], 49153, 0.0, dscp=34)
        a.post_send(1, 10_000, 0.0)
        a.post_send(2, 10_000, 0.0)
        if mode == "pfc":
            a.receive(pfc.build(pfc.template(NIC_B["mac"]), {3: 0xFFFF}), 0.0)
        else:
            a.credit.on_fc(credit.FcPacket(4, 0, 1024), 0.0)  # lane 4 only
        frames, now = [], 0.0
        while now < 0.05:
            f = a.next_frame(now)
            if f is None:
                now += 1e-4
            else:
                frames.append(f)
        assert len(frames) == 10, mode  # all of QP 2's message, nothing of QP 1's
        assert {f[15] >> 2 for f in frames} == {34}, mode
