"""Per-port egress queues of the emu switch: 8 priorities, strict priority, paced.

Owns the frames waiting on one egress port and the decision of which one leaves
next and when. Pure: the datapath passes `now` and performs the send. The link
rate is enforced with a virtual clock (the time the wire becomes free); a small
burst allowance lets the event loop catch up after a late wake-up without ever
exceeding `rate_bps * T + burst` over any interval T.

Admission (how many bytes may wait) is the shared buffer's decision
(`emu/switch/buffer.py`); the per-queue byte limit here is only a backstop.
Each queued frame carries an opaque `meta` (the buffer's accounting) that
comes back out with it. A PFC PAUSE stops one priority until a given time;
the scheduler skips it meanwhile and accounts the paused time. On a credit
link (`credit`, an `emu.credit.CreditLink`) a priority that is a virtual
lane sends its head frame only with credit for it; without, the scheduler
skips it as if paused, the link counts the blocked time, and the port waits
for a credit update (`ready_at` is None while every waiting lane is blocked).

Fidelity (emu/fidelity.py): each dequeued frame's *slot* is when the wire was
free for it and it was eligible (queued, not paused); how late it left against
that slot goes into `clock`, and link time that the catch-up burst could not
recover goes into the clock's pacing deficit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from emu.fidelity import PortClock, early_departure_s

N_PRIORITIES = 8

# DESIGN.md conventions: DSCP 26 -> priority 3 (RoCE, lossless); DSCP 48 ->
# priority 6 (CNP); everything else -> priority 0. Besides: DSCP 34 (AF41) ->
# priority 4, a second class that a fabric may make lossless (PFC's
# lossless_priorities, or a second virtual lane on a credit link) for QPs
# that ask for it (emu/host/rnic.py, connect(dscp=34)).
DEFAULT_DSCP_TO_PRIO = {26: 3, 34: 4, 48: 6}


def dscp_table(mapping: dict[int, int] = DEFAULT_DSCP_TO_PRIO) -> list[int]:
    """The priority of each of the 64 DSCPs (the ones `mapping` leaves out: 0)."""
    table = [0] * 64
    for dscp, prio in mapping.items():
        table[dscp] = prio
    return table


# Bytes counted per frame on the wire: the frame as handed to the veth. Like
# tc/HTB, the 4-byte FCS, preamble and inter-frame gap are not modelled, so a
# configured rate is the rate of Ethernet frames (header + payload).
DEFAULT_QUEUE_LIMIT_BYTES = 16 * 1024 * 1024
MIN_BURST_S = 0.001


@dataclass
class QueueCounters:
    """Counters of one (port, priority) queue."""

    enqueued_packets: int = 0
    enqueued_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    dropped_packets: int = 0
    dropped_bytes: int = 0
    watermark_bytes: int = 0


@dataclass
class PortScheduler:
    """Egress side of one port.

    Args:
        rate_bps: link rate to pace at.
        queue_limit_bytes: tail-drop limit of each priority queue.
        burst_s: how far the virtual clock may lag behind real time (catch-up
            credit after a late wake-up); at least two full frames' time and 1 ms.
    """

    rate_bps: int
    queue_limit_bytes: int = DEFAULT_QUEUE_LIMIT_BYTES
    burst_s: float = 0.0
    queues: list = field(default_factory=lambda: [deque() for _ in range(N_PRIORITIES)])
    depth_bytes: list = field(default_factory=lambda: [0] * N_PRIORITIES)
    counters: list = field(default_factory=lambda: [QueueCounters() for _ in range(N_PRIORITIES)])
    free_at: float = 0.0
    # Until when each priority is stopped by a received PFC PAUSE (monotonic s).
    paused_until: list = field(default_factory=lambda: [0.0] * N_PRIORITIES)
    paused_s: list = field(default_factory=lambda: [0.0] * N_PRIORITIES)
    # The port's credit state on a credit link (emu/credit.py); None: no credits.
    credit: object = None

    def __post_init__(self) -> None:
        self._burst_floor_s = self.burst_s
        self.clock = PortClock(self.rate_bps if self.rate_bps > 0 else 1.0)
        self._undo = (0.0, float("-inf"), 0.0)  # what requeue_front restores
        self.set_rate(self.rate_bps)
        self.pending = 0
        # Bit p set while queue p holds frames: dequeue visits only those, highest first.
        self.nonempty = 0
        # The latest end of any PAUSE received: at or before free_at, no pause
        # can hold the next frame back (ready_at's fast path).
        self.pauses_end = 0.0

    def set_rate(self, rate_bps: float) -> None:
        """Pace at `rate_bps` from now on (a degraded link, a slow host's port)."""
        if rate_bps <= 0:
            raise ValueError(f"rate_bps must be positive, got {rate_bps}")
        self.rate_bps = rate_bps
        self.s_per_byte = 8.0 / self.rate_bps
        self.clock.set_rate(rate_bps)
        # The Python event loop may spend a millisecond between two transmit
        # passes (a receive batch, an OpenFlow burst); the clock may lag that
        # much so that the time is not lost, at the price of that burst.
        self.burst_s = max(self._burst_floor_s, 2 * 1514 * self.s_per_byte, MIN_BURST_S)
        self.early_s = early_departure_s(rate_bps)

    def enqueue(self, frame: bytes, prio: int, meta=None, now: float = float("-inf")) -> bool:
        """Queue a frame (and its `meta`) at `now` on priority `prio`; False when tail-dropped."""
        size = len(frame)
        c = self.counters[prio]
        if self.depth_bytes[prio] + size > self.queue_limit_bytes:
            c.dropped_packets += 1
            c.dropped_bytes += size
            return False
        self.queues[prio].append((frame, meta, now))
        self.nonempty |= 1 << prio
        depth = self.depth_bytes[prio] + size
        self.depth_bytes[prio] = depth
        if depth > c.watermark_bytes:
            c.watermark_bytes = depth
        c.enqueued_packets += 1
        c.enqueued_bytes += size
        self.pending += 1
        return True

    def pause(self, prio: int, until: float, now: float) -> None:
        """A PFC frame for `prio`: stopped until `until` (a time <= now resumes it)."""
        old = self.paused_until[prio]
        if old > now:
            self.paused_s[prio] += max(until, now) - old
        elif until > now:
            self.paused_s[prio] += until - now
        self.paused_until[prio] = until
        self.pauses_end = max(self.paused_until)

    def paused_so_far(self, now: float) -> list[float]:
        """Seconds each priority has been paused up to `now` (not counting the rest of a PAUSE)."""
        return [
            round(total - max(0.0, until - now), 6)
            for total, until in zip(self.paused_s, self.paused_until)
        ]

    def is_paused(self, prio: int, now: float) -> bool:
        return self.paused_until[prio] > now

    def ready_at(self) -> float | None:
        """When the next frame may leave; None if nothing is queued."""
        if not self.pending:
            return None
        credit = self.credit
        if credit is not None:
            left = self.nonempty
            while left:
                prio = left.bit_length() - 1
                left ^= 1 << prio
                st = credit.by_prio[prio]
                if st is None or st.blocked_since is None:
                    break
            else:
                return None  # every waiting lane waits for credit: a credit update wakes it
        if self.pauses_end <= self.free_at:
            return self.free_at
        return max(
            self.free_at, min(self.paused_until[p] for p in range(N_PRIORITIES) if self.queues[p])
        )

    def dequeue(self, now: float) -> tuple[bytes, int, object] | None:
        """Pop the highest-priority eligible (frame, prio, meta) if the wire is free at `now`.

        "Free" includes up to `early_s` before the wire's clock (see
        emu.fidelity.EARLY_FRAMES); the clock then advances from its own time,
        not from `now`, so the early frame takes no extra rate.
        """
        if not self.pending or self.free_at > now + self.early_s:
            return None
        queues = self.queues
        paused_until = self.paused_until
        credit = self.credit
        left = self.nonempty
        while left:
            prio = left.bit_length() - 1
            left ^= 1 << prio
            if paused_until[prio] > now:
                continue
            q = queues[prio]
            lane = credit.by_prio[prio] if credit is not None else None
            if lane is not None:
                if not credit.may_send(prio, len(q[0][0]), now):
                    continue
                credit.sent(prio, len(q[0][0]))
            frame, meta, queued_at = q.popleft()
            if not q:
                self.nonempty ^= 1 << prio
            size = len(frame)
            self.depth_bytes[prio] -= size
            self.pending -= 1
            c = self.counters[prio]
            c.tx_packets += 1
            c.tx_bytes += size
            # The slot: the wire was free and the frame could go (queued, not paused).
            slot = self.free_at
            if queued_at > slot:
                slot = queued_at
            if paused_until[prio] > slot:
                slot = paused_until[prio]
            if lane is not None and lane.unblocked_at > slot:
                slot = lane.unblocked_at  # it waited for credit until then
            self.clock.departed(now, slot, size * self.s_per_byte)
            earliest = now - self.burst_s
            lost = 0.0
            if self.free_at > earliest:
                start = self.free_at
            else:
                start = earliest
                if slot < earliest and slot == self.free_at:
                    # Backlogged on the wire clock and beyond the burst: link time
                    # lost. (A frame that found the port idle is only late.)
                    lost = earliest - slot
                    self.clock.lost(lost)
            self._undo = (self.free_at, queued_at, lost)
            self.free_at = start + size * self.s_per_byte
            return frame, prio, meta
        return None

    def requeue_front(self, frame: bytes, prio: int, meta=None) -> None:
        """Put back a frame the kernel refused (socket buffer full); undo its accounting."""
        size = len(frame)
        if self.credit is not None and self.credit.by_prio[prio] is not None:
            self.credit.unsend(prio, size)
        free_at, queued_at, lost = self._undo
        self.queues[prio].appendleft((frame, meta, queued_at))
        self.nonempty |= 1 << prio
        self.depth_bytes[prio] += size
        self.pending += 1
        c = self.counters[prio]
        c.tx_packets -= 1
        c.tx_bytes -= size
        self.free_at = free_at
        self.clock.undo_last()
        self.clock.lost(-lost)

    def flush(self, prios: range | tuple = range(N_PRIORITIES)) -> list[tuple[bytes, int, object]]:
        """Drop what is queued on `prios` (all: port down); returns the (frame, prio, meta)."""
        dropped = []
        for prio in prios:
            q = self.queues[prio]
            self.counters[prio].dropped_packets += len(q)
            self.counters[prio].dropped_bytes += self.depth_bytes[prio]
            dropped.extend((frame, prio, meta) for frame, meta, _ in q)
            self.pending -= len(q)
            q.clear()
            self.nonempty &= ~(1 << prio)
            self.depth_bytes[prio] = 0
        return dropped
