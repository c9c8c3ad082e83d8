"""Reachability probes: a ping stream between two hosts, and what it lost when;
every pair of hosts pinged at once; a node's GPUs pinged over NVLink.

Owns running `ping` in a host's namespace as a background job and turning its
output into the figures failure tests assert on: packets sent and received,
when each was sent, and the longest run of lost replies (the outage a failure
caused). Its result (`PingResult`) is the ping workload's one result type
(`Fabric.start("ping", ...)`), with ping's own output kept in `raw`.

Also owns the two sweeps a scenario runs to say "every host reaches every
other": `all_pairs` (every ordered pair of hosts, one thread per source, its
`AllPairs` with the loss and the lossy pairs) and `nvlink_ping` (every GPU to
the other GPUs of its node at their NVLink addresses, with the frames the
NVSwitches received meanwhile); each result writes its own metrics and table
into a scenario's context (`report`), and the scenario judges it.

When each ping was sent comes from ping's own clock, not from its sequence
number times the interval asked for (ping's timer runs late: asked for 50 ms
it sent every 56 ms on the 2-core VM): a reply's time (`-D`) less its round
trip, and for a lost one the "no answer yet" line that `-O` prints as the
next one leaves.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emu import fabric as fabric_mod
from emu.traffic.iperf import resolve_duration

if TYPE_CHECKING:
    from emu.scenario import Context

# The sweeps' probes: each pair gets `count` pings this far apart, each waited for this long.
SWEEP_INTERVAL_S = 0.05
SWEEP_TIMEOUT_S = 1.0
# How many lossy pairs metrics.json lists, and how many a report line names.
LOSSY_PAIRS_LISTED = 20
LOSSY_PAIRS_NAMED = 5

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


@dataclass(frozen=True)
class AllPairs:
    """What pinging every ordered pair of hosts saw.

    Attributes:
        hosts: the hosts swept, in order.
        results: (src, dst) -> (sent, received), for every pair that was pinged.
    """

    hosts: tuple[str, ...]
    results: dict[tuple[str, str], tuple[int, int]]

    @property
    def pairs(self) -> int:
        return len(self.results)

    @property
    def expected_pairs(self) -> int:
        """Every ordered pair of distinct hosts: n (n - 1)."""
        return len(self.hosts) * (len(self.hosts) - 1)

    @property
    def sent(self) -> int:
        return sum(s for s, _ in self.results.values())

    @property
    def received(self) -> int:
        return sum(r for _, r in self.results.values())

    @property
    def loss_pct(self) -> float:
        """Pings lost, in % of those sent; 100 when none was sent (nothing reached anything)."""
        sent = self.sent
        return 100.0 * (sent - self.received) / sent if sent else 100.0

    @property
    def lossy_pairs(self) -> list[str]:
        """ "src->dst" of every pair that lost a ping, sorted."""
        return sorted(f"{s}->{d}" for (s, d), (a, b) in self.results.items() if b < a)

    @property
    def lossless(self) -> bool:
        """Something was sent and every ping came back."""
        return self.sent > 0 and self.received == self.sent

    def loss_text(self) -> str:
        """The loss as a report line says it: "0.00% loss", then the first lossy pairs."""
        failed = self.lossy_pairs
        named = f" ({', '.join(failed[:LOSSY_PAIRS_NAMED])})" if failed else ""
        return f"{self.loss_pct:.2f}% loss" + named

    def metrics(self) -> dict:
        return {
            "pairs": self.pairs,
            "sent": self.sent,
            "received": self.received,
            "loss_pct": self.loss_pct,
            "lossy_pairs": self.lossy_pairs[:LOSSY_PAIRS_LISTED],
        }

    def report(self, ctx: Context, label: str) -> None:
        """metrics.json's ping[label] and the report's table titled `label`."""
        ctx.metrics.setdefault("ping", {})[label] = self.metrics()
        row = [self.pairs, self.sent, self.received, self.loss_pct]
        ctx.table(label, ["pairs", "sent", "received", "loss %"], [row])


def all_pairs(fab, hosts: list[str] | None = None, count: int = 3) -> AllPairs:
    """Ping every ordered pair of `hosts` (default: every host of `fab`), `count` pings each.

    One thread per source: the pairs of different sources run at the same
    time, each source's one after the other.
    """
    hosts = list(fabric_mod.hosts(fab.graph) if hosts is None else hosts)
    results: dict[tuple[str, str], tuple[int, int]] = {}
    lock = threading.Lock()

    def from_source(src: str) -> None:
        for dst in hosts:
            if dst != src:
                got = fab.ping(
                    src, dst, count=count, timeout_s=SWEEP_TIMEOUT_S, interval_s=SWEEP_INTERVAL_S
                )
                with lock:
                    results[(src, dst)] = got

    threads = [threading.Thread(target=from_source, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return AllPairs(tuple(hosts), results)


@dataclass(frozen=True)
class NvlinkPing:
    """What pinging every GPU's node-mates over NVLink saw.

    Attributes:
        pairs: ordered pairs of GPUs of one node pinged.
        sent, received: pings, over all pairs.
        nvswitch_rx_frames: frames the NVSwitches received meanwhile (ARP included).
    """

    pairs: int
    sent: int
    received: int
    nvswitch_rx_frames: int

    @property
    def lossless(self) -> bool:
        return self.sent > 0 and self.received == self.sent

    def metrics(self) -> dict:
        return {
            "pairs": self.pairs,
            "sent": self.sent,
            "received": self.received,
            "nvswitch_rx_frames": self.nvswitch_rx_frames,
        }

    def report(self, ctx: Context, label: str = "NVLink ping") -> None:
        """metrics.json's ping[label] and the report's table titled `label`."""
        ctx.table(
            label,
            ["pairs", "sent", "received", "NVSwitch rx frames"],
            [[self.pairs, self.sent, self.received, self.nvswitch_rx_frames]],
        )
        ctx.metrics.setdefault("ping", {})[label] = self.metrics()


def nvlink_ping(fab, count: int = 3) -> NvlinkPing:
    """Every GPU pings the other GPUs of its node at their NVLink addresses.

    The NVSwitches' receive counters are read before and after, so that the
    result also says whether the echoes crossed the node's NVSwitch rather
    than the network (the rail leaves see none of them).
    """
    domains = fabric_mod.nvlink_domains(fab.graph)
    nvswitches = [f"nvsw{node}" for node in domains]

    def rx_frames() -> int:
        return sum(port.rx_packets for sw in nvswitches for port in fab.port_stats(sw).values())

    before = rx_frames()
    sent = received = pairs = 0
    for gpus in domains.values():
        for src in gpus:
            for dst in gpus:
                if src != dst:
                    a, b = fab.ping(
                        src,
                        dst,
                        count=count,
                        timeout_s=SWEEP_TIMEOUT_S,
                        interval_s=SWEEP_INTERVAL_S,
                        port="nvlink",
                    )
                    sent, received, pairs = sent + a, received + b, pairs + 1
    return NvlinkPing(pairs, sent, received, rx_frames() - before)
