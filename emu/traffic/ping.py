"""Reachability probes: a ping stream between two hosts, and what it lost when.

Owns running `ping` in a host's namespace as a background job and turning its
replies into the figures failure tests assert on: packets sent and received
and the longest run of lost replies (the outage a failure caused).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class PingResult:
    sent: int
    received: int
    interval_s: float  # what ping was asked for
    replied: tuple[int, ...]  # icmp_seq numbers that got a reply
    # When each reply arrived (wall clock, ping -D), in the order of `replied`.
    reply_wall: tuple[float, ...] = ()

    @property
    def lost(self) -> int:
        return self.sent - self.received

    @property
    def actual_interval_s(self) -> float:
        """The interval ping really kept, from its replies' times.

        ping's timer runs late: asked for 50 ms it sent every 56 ms on the
        2-core VM, so seq n is not sent at n x interval_s.
        """
        if len(self.reply_wall) < 2 or self.replied[-1] == self.replied[0]:
            return self.interval_s
        span = self.reply_wall[-1] - self.reply_wall[0]
        return max(span / (self.replied[-1] - self.replied[0]), self.interval_s)

    @property
    def longest_outage_s(self) -> float:
        """The longest run of consecutive lost replies, in seconds (of ping's real interval)."""
        got = set(self.replied)
        longest = run = 0
        for seq in range(1, self.sent + 1):
            run = 0 if seq in got else run + 1
            longest = max(longest, run)
        return longest * self.actual_interval_s

    def sent_wall(self, seq: int) -> float | None:
        """When `seq` was sent (wall clock), from the replies around it; None without replies.

        A reply comes a round trip (under a millisecond here) after its
        request; a lost one is placed between the replies before and after it.
        """
        if not self.reply_wall:
            return None
        times = dict(zip(self.replied, self.reply_wall))
        if seq in times:
            return times[seq]
        step = self.actual_interval_s
        below = [s for s in self.replied if s < seq]
        above = [s for s in self.replied if s > seq]
        if below and above:
            lo, hi = below[-1], above[0]
            return times[lo] + (times[hi] - times[lo]) * (seq - lo) / (hi - lo)
        if below:
            return times[below[-1]] + step * (seq - below[-1])
        return times[above[0]] - step * (above[0] - seq)

    def lost_between(self, start_wall: float, end_wall: float) -> list[int]:
        """The seqs sent within [start_wall, end_wall] (wall clock) that got no reply.

        With no reply at all nothing can be placed in time: every seq counts.
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


class PingJob:
    """`ping` from `src` to `dst` every `interval_s` for `duration_s`, in the background.

    Example:
        >>> job = PingJob(fab, "h1", "h4", interval_s=0.02, duration_s=4)  # doctest: +SKIP
        >>> job.wait().longest_outage_s < 0.5                              # doctest: +SKIP
    """

    def __init__(
        self, fab, src: str, dst: str, interval_s: float = 0.05, duration_s: float = 5.0
    ) -> None:
        self.fab = fab
        self.interval_s = interval_s
        self.count = max(1, int(duration_s / interval_s))
        ip = fab.graph.nodes[dst]["ip"]
        self.proc = fab.popen(
            src,
            # -D: each reply's time, since ping's interval drifts (actual_interval_s).
            ["ping", "-D", "-n", "-i", str(interval_s), "-c", str(self.count), "-W", "1", ip],
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
            replies = {}
            for wall, seq in re.findall(r"^\[(\d+\.\d+)\].*icmp_seq=(\d+)", out or "", re.M):
                replies.setdefault(int(seq), float(wall))  # a duplicate keeps the first
            seqs = tuple(sorted(replies))
            self._result = PingResult(
                self.count, len(seqs), self.interval_s, seqs, tuple(replies[s] for s in seqs)
            )
        return self._result

    def stop(self) -> None:
        self.fab.stop_proc(self.proc)
