"""Reachability probes: a ping stream between two hosts, and what it lost when.

Owns running `ping` in a host's namespace as a background job and turning its
output into the figures failure tests assert on: packets sent and received,
when each was sent, and the longest run of lost replies (the outage a failure
caused). Its result (`PingResult`) is the ping workload's one result type
(`Fabric.start("ping", ...)`), with ping's own output kept in `raw`.

When each ping was sent comes from ping's own clock, not from its sequence
number times the interval asked for (ping's timer runs late: asked for 50 ms
it sent every 56 ms on the 2-core VM): a reply's time (`-D`) less its round
trip, and for a lost one the "no answer yet" line that `-O` prints as the
next one leaves.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from emu.traffic.iperf import resolve_duration

# iputils ping with -D: "[1700000000.123456] 64 bytes from ...: icmp_seq=3 ttl=64 time=0.21 ms"
_REPLY = re.compile(
    r"^\[(\d+\.\d+)\] \d+ bytes from .*?icmp_seq=(\d+)(?:.*?time=([\d.]+) ms)?", re.M
)
# ...and with -O, as it sends the next request: "[1700000000.2] no answer yet for icmp_seq=3"
_NO_ANSWER = re.compile(r"^\[(\d+\.\d+)\] no answer yet for icmp_seq=(\d+)", re.M)


@dataclass(frozen=True)
class PingResult:
    """What one ping stream saw.

    Attributes:
        sent: requests sent.
        received: requests that got a reply.
        interval_s: the interval ping was asked for.
        replied: the icmp_seq numbers that got a reply, ascending.
        reply_wall: when each reply arrived (unix time, ping -D), in the order of `replied`.
        sent_at: (seq, unix time) of the requests whose send time ping's output
            gives: a reply's time less its round trip, and the request after
            each "no answer yet" line.
        raw: ping's output, for whoever wants more than the figures.
    """

    sent: int
    received: int
    interval_s: float
    replied: tuple[int, ...]
    reply_wall: tuple[float, ...] = ()
    sent_at: tuple[tuple[int, float], ...] = ()
    raw: str = ""

    @property
    def lost(self) -> int:
        return self.sent - self.received

    @property
    def actual_interval_s(self) -> float:
        """The interval ping really kept, from its own times.

        ping's timer runs late: asked for 50 ms it sent every 56 ms on the
        2-core VM, so seq n is not sent at n x interval_s.
        """
        known = self._known_sends()
        seqs = sorted(known)
        if len(seqs) < 2 or seqs[-1] == seqs[0]:
            return self.interval_s
        span = known[seqs[-1]] - known[seqs[0]]
        return max(span / (seqs[-1] - seqs[0]), self.interval_s)

    @property
    def longest_outage_s(self) -> float:
        """The longest run of consecutive lost replies, in seconds (of ping's real interval)."""
        got = set(self.replied)
        longest = run = 0
        for seq in range(1, self.sent + 1):
            run = 0 if seq in got else run + 1
            longest = max(longest, run)
        return longest * self.actual_interval_s

    def _known_sends(self) -> dict[int, float]:
        # Without send times (a result made from replies alone), a reply's time
        # stands for its request's: a round trip here is under a millisecond.
        return dict(self.sent_at) if self.sent_at else dict(zip(self.replied, self.reply_wall))

    def sent_wall(self, seq: int) -> float | None:
        """When `seq` was sent (unix time); None when ping's output placed nothing in time.

        From ping's own times where it gave one (`sent_at`), else between the
        nearest requests around it whose times are known, else one real
        interval per seq beyond the last (or before the first) of them.
        """
        known = self._known_sends()
        if not known:
            return None
        if seq in known:
            return known[seq]
        step = self.actual_interval_s
        below = [s for s in known if s < seq]
        above = [s for s in known if s > seq]
        if below and above:
            lo, hi = max(below), min(above)
            return known[lo] + (known[hi] - known[lo]) * (seq - lo) / (hi - lo)
        if below:
            lo = max(below)
            return known[lo] + step * (seq - lo)
        hi = min(above)
        return known[hi] - step * (hi - seq)

    def timeline(self) -> list[tuple[float | None, bool]]:
        """(when it was sent, whether it got a reply) for seq 1..sent, in order: what to plot."""
        got = set(self.replied)
        return [(self.sent_wall(seq), seq in got) for seq in range(1, self.sent + 1)]

    def lost_between(self, start_wall: float, end_wall: float) -> list[int]:
        """The seqs sent within [start_wall, end_wall] (unix time) that got no reply.

        With no time at all nothing can be placed: every lost seq counts.
        """
        got = set(self.replied)
        lost = []
        for seq in range(1, self.sent + 1):
            if seq in got:
                continue
            at = self.sent_wall(seq)
            if at is None or start_wall <= at <= end_wall:
                lost.append(seq)
        return lost

    def restored_wall(self, after_wall: float) -> float | None:
        """When replies came back after the last loss of pings sent from `after_wall` on.

        The reply time of the first answered seq after that loss; None if no
        ping sent from `after_wall` on was lost, or none answered after it.
        """
        lost = self.lost_between(after_wall, float("inf"))
        if not lost:
            return None
        after = [w for s, w in zip(self.replied, self.reply_wall) if s > lost[-1]]
        return after[0] if after else None


def parse(output: str, sent: int, interval_s: float) -> PingResult:
    """A PingResult from the output of `ping -D -O -c sent -i interval_s` (pure)."""
    replies: dict[int, float] = {}
    sends: dict[int, float] = {}
    for wall, seq, rtt_ms in _REPLY.findall(output or ""):
        seq_no = int(seq)
        if seq_no in replies:
            continue  # a duplicate keeps the first
        replies[seq_no] = float(wall)
        if rtt_ms:
            sends[seq_no] = float(wall) - float(rtt_ms) / 1000
    for wall, seq in _NO_ANSWER.findall(output or ""):
        # Printed as the request after `seq` leaves (iputils' pinger, just before it sends).
        if int(seq) < sent:
            sends.setdefault(int(seq) + 1, float(wall))
    seqs = tuple(sorted(replies))
    return PingResult(
        sent,
        len(seqs),
        interval_s,
        seqs,
        tuple(replies[s] for s in seqs),
        tuple(sorted(sends.items())),
        output or "",
    )


class PingJob:
    """`ping` from `src` to `dst` every `interval_s` for `duration_s`, in the background.

    Args:
        fab: the running fabric (emu.net.Fabric).
        src, dst: host names.
        interval_s: between requests.
        duration_s: how long the stream runs (the workloads' one duration keyword).
        seconds: the old name of `duration_s` (a DeprecationWarning).

    Example:
        >>> job = PingJob(fab, "h1", "h4", interval_s=0.02, duration_s=4)  # doctest: +SKIP
        >>> job.wait().longest_outage_s < 0.5                              # doctest: +SKIP
    """

    def __init__(
        self,
        fab,
        src: str,
        dst: str,
        interval_s: float = 0.05,
        duration_s: float | None = None,
        *,
        seconds: float | None = None,
    ) -> None:
        duration_s = resolve_duration(duration_s, seconds, "ping")
        if not interval_s > 0 or interval_s == float("inf"):
            raise ValueError(f"interval_s={interval_s!r}: must be a number of seconds > 0")
        self.fab = fab
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.count = max(1, int(duration_s / interval_s))
        ip = fab.graph.nodes[dst]["ip"]
        self.started_wall = time.time()
        self.proc = fab.popen(
            src,
            # -D: each line's time; -O: a line as each request after a lost one leaves.
            ["ping", "-D", "-O", "-n", "-i", str(interval_s), "-c", str(self.count), "-W", "1", ip],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._result: PingResult | None = None

    def wait(self, timeout_s: float | None = None) -> PingResult:
        """Wait for the stream to finish; returns what it saw."""
        if self._result is None:
            limit = timeout_s or self.count * self.interval_s + 15
            try:
                out, _ = self.proc.communicate(timeout=limit)
            finally:
                self.fab.stop_proc(self.proc)
            self._result = parse(out, self.count, self.interval_s)
        return self._result

    def stop(self) -> None:
        self.fab.stop_proc(self.proc)
