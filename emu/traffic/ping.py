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
    interval_s: float
    replied: tuple[int, ...]  # icmp_seq numbers that got a reply

    @property
    def lost(self) -> int:
        return self.sent - self.received

    @property
    def longest_outage_s(self) -> float:
        """The longest run of consecutive lost replies, in seconds."""
        got = set(self.replied)
        longest = run = 0
        for seq in range(1, self.sent + 1):
            run = 0 if seq in got else run + 1
            longest = max(longest, run)
        return longest * self.interval_s


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
            ["ping", "-n", "-i", str(interval_s), "-c", str(self.count), "-W", "1", ip],
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
            seqs = tuple(sorted(int(m) for m in re.findall(r"icmp_seq=(\d+)", out or "")))
            self._result = PingResult(self.count, len(set(seqs)), self.interval_s, seqs)
        return self._result

    def stop(self) -> None:
        self.fab.stop_proc(self.proc)
