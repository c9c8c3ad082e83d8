"""The egress scheduler: strict priority, pacing at the link rate, tail drop."""

import pytest

from emu import fidelity
from emu.fidelity import frame_time_s
from emu.switch.scheduler import PortScheduler


def frame(n: int = 1000) -> bytes:
    return bytes(n)


def test_strict_priority_serves_highest_first():
    s = PortScheduler(rate_bps=10**9)
    s.enqueue(b"low" + bytes(60), 0)
    s.enqueue(b"cnp" + bytes(60), 6)
    s.enqueue(b"roce" + bytes(60), 3)
    order = []
    now = 0.0
    while s.pending:
        item = s.dequeue(now)
        if item is None:
            now = s.ready_at()
            continue
        order.append(item[1])
    assert order == [6, 3, 0]


def test_paced_rate_never_exceeds_rate_plus_burst():
    rate = 10_000_000
    s = PortScheduler(rate_bps=rate)
    for _ in range(2000):
        s.enqueue(frame(1500), 0)
    sent_bytes, now, times = 0, 0.0, []
    while s.pending:
        item = s.dequeue(now)
        if item is None:
            now = s.ready_at()
            continue
        sent_bytes += len(item[0])
        times.append((now, sent_bytes))
    duration = times[-1][0]
    # Over the whole run the rate is the link rate (within one frame).
    assert sent_bytes * 8 / duration == pytest.approx(rate, rel=0.01)
    # Over any window the excess is at most the burst allowance.
    burst_bytes = s.burst_s * rate / 8
    for (t0, b0), (t1, b1) in zip(times, times[200:]):
        assert (b1 - b0) - (t1 - t0) * rate / 8 <= burst_bytes + 1500


def test_late_wakeup_catches_up_only_by_the_burst():
    rate = 10_000_000
    s = PortScheduler(rate_bps=rate)
    for _ in range(100):
        s.enqueue(frame(1500), 0)
    # The loop wakes 10 ms late: it may send the burst at once, not 10 ms of backlog.
    now = 0.010
    sent = 0
    while s.dequeue(now) is not None:
        sent += 1500
    assert sent <= s.burst_s * rate / 8 + 1500
    assert sent >= 1500


def test_frame_due_within_a_quarter_frame_leaves_early_without_gaining_rate(monkeypatch):
    monkeypatch.setattr(fidelity, "EARLY_FRAMES", 0.25)  # a quarter frame, whatever the default
    rate = 10_000_000
    s = PortScheduler(rate_bps=rate)
    for _ in range(3):
        s.enqueue(frame(1500), 0, now=0.0)
    assert s.dequeue(0.0) is not None  # the first frame: wire free at 0
    due = 1500 * 8 / rate  # the second frame's slot
    assert s.early_s == pytest.approx(0.25 * frame_time_s(rate))
    assert s.dequeue(due - 1.5 * s.early_s) is None  # too early: not yet
    assert s.dequeue(due - 0.5 * s.early_s) is not None  # awake anyway: goes now
    # The wire's clock moved on from the slot, not from the early send.
    assert s.ready_at() == pytest.approx(2 * due)
    assert s.clock.hist[0] == 2 and s.clock.deficit_s == 0.0


def test_tail_drop_at_queue_limit_counts():
    s = PortScheduler(rate_bps=10**6, queue_limit_bytes=3000)
    assert s.enqueue(frame(1500), 0)
    assert s.enqueue(frame(1500), 0)
    assert not s.enqueue(frame(1500), 0)
    assert s.counters[0].dropped_packets == 1
    assert s.counters[0].watermark_bytes == 3000


def test_paused_priority_is_skipped_but_others_flow():
    s = PortScheduler(rate_bps=10**9)
    s.enqueue(frame(100), 3, meta="m3")
    s.enqueue(frame(100), 0)
    s.pause(3, until=5.0, now=1.0)
    item = s.dequeue(1.0)
    assert item[1] == 0
    assert s.dequeue(2.0) is None
    assert s.ready_at() == 5.0  # the paused queue is eligible when its pause ends
    assert s.dequeue(5.0) == (frame(100), 3, "m3")
    assert s.paused_s[3] == pytest.approx(4.0)


def test_xon_ends_a_pause_early_and_paused_time_counts_only_what_passed():
    s = PortScheduler(rate_bps=10**9)
    s.enqueue(frame(100), 3)
    s.pause(3, until=10.0, now=0.0)
    s.pause(3, until=2.0, now=2.0)  # XON (quanta 0) at t=2
    assert s.paused_s[3] == pytest.approx(2.0)
    assert s.dequeue(2.0)[1] == 3


def test_requeue_front_restores_order_and_counters():
    s = PortScheduler(rate_bps=10**9)
    s.enqueue(b"a" * 100, 0)
    s.enqueue(b"b" * 100, 0)
    f, prio, meta = s.dequeue(0.0)
    s.requeue_front(f, prio, meta)
    assert s.counters[0].tx_packets == 0
    assert s.dequeue(1.0)[0] == b"a" * 100


def test_flush_drops_everything():
    s = PortScheduler(rate_bps=10**6)
    for prio in range(8):
        s.enqueue(frame(100), prio)
    assert len(s.flush()) == 8
    assert s.pending == 0 and s.ready_at() is None


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate_bps"):
        PortScheduler(rate_bps=0)
