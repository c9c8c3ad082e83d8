"""One TCP flow against its link: its goodput, its rate on the wire, and the last hop's pacing.

Owns the measurement behind "TCP reaches the link rate and the switch never
sends faster than it": an iperf3 test src -> dst (emu/traffic/iperf.py)
while the last switch's egress counter towards dst is sampled every
`window_s` (`sample_egress`; the switch stamps each answer itself, so the
windows are exact), and its result (`LineRate`): goodput as the receiver
counted it, the same payload as frames on the wire (emu/models/wire.py), the
retransmits, and the egress rate in each window with its peak. `report`
writes its metrics and table into a scenario's context and `panel` draws the
windows against the link rate; the scenario judges it (against
`wire.paced_peak_bps`, with a tolerance of its own).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emu.models.wire import tcp_wire_bps
from emu.telemetry import Panel
from emu.traffic import iperf

if TYPE_CHECKING:
    from emu.scenario import Context

# The egress counter's sampling period: the window of "the peak rate".
WINDOW_S = 0.25


@contextmanager
def sample_egress(fab, switch: str, port_no: int, window_s: float = WINDOW_S) -> Iterator[list]:
    """Within the block, (switch's time, tx bytes) of `switch`'s port `port_no` every `window_s`.

    Yields the list the samples go into; the sampler thread stops as the block ends.
    """
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            q = fab.queues(switch)
            samples.append((q.time, q.tx_bytes[port_no]))
            stop.wait(window_s)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield samples
    finally:
        stop.set()
        sampler.join()


@dataclass(frozen=True)
class LineRate:
    """One TCP flow's figures and its last hop's egress samples.

    Attributes:
        src, dst: the hosts.
        rate_bps: the link rate it is measured against.
        duration_s: how long the flow ran.
        goodput_bps: payload the receiver got, per second.
        wire_bps: that payload as full-segment frames on the wire.
        retransmits: TCP segments the sender resent.
        samples: (switch time, tx bytes) of the last hop's port towards dst.
        window_s: the sampling period.
        error: iperf3's error (then the figures are zeros), or None.
    """

    src: str
    dst: str
    rate_bps: float
    duration_s: float
    goodput_bps: float
    wire_bps: float
    retransmits: int
    samples: tuple[tuple[float, int], ...]
    window_s: float = WINDOW_S
    error: Any = None

    @classmethod
    def from_run(
        cls, doc: dict, samples, src: str, dst: str, rate_bps: float, duration_s: float, **kw
    ) -> LineRate:
        """The figures of iperf3's JSON `doc` and the egress `samples` (pure)."""
        if "error" in doc:
            zeros = (0.0, 0.0, 0, tuple(samples))
            return cls(src, dst, rate_bps, duration_s, *zeros, **kw, error=doc["error"])
        goodput = doc["end"]["sum_received"]["bits_per_second"]
        return cls(
            src,
            dst,
            rate_bps,
            duration_s,
            goodput,
            tcp_wire_bps(goodput, iperf.tcp_mss(doc)),
            doc["end"]["sum_sent"].get("retransmits", 0),
            tuple(samples),
            **kw,
        )

    @property
    def windows_bps(self) -> list[float]:
        """The egress rate over each sampling window (frames, bits per second)."""
        pairs = zip(self.samples, self.samples[1:])
        return [(b1 - b0) * 8 / (t1 - t0) for (t0, b0), (t1, b1) in pairs if t1 > t0]

    @property
    def window_end_s(self) -> list[float]:
        """When each window ended, in seconds from the first sample."""
        t_first = self.samples[0][0] if self.samples else 0.0
        return [t - t_first for t, _ in self.samples[1:]]

    @property
    def peak_window_bps(self) -> float:
        windows = self.windows_bps
        return max(windows) if windows else 0.0

    def metrics(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "goodput_bps": self.goodput_bps,
            "wire_bps": self.wire_bps,
            "retransmits": self.retransmits,
            "peak_window_bps": self.peak_window_bps,
            "windows_bps": self.windows_bps,
            "window_end_s": self.window_end_s,
        }

    def report(self, ctx: Context) -> None:
        """metrics.json's "tcp" and the report's table of the flow."""
        ctx.metrics["tcp"] = self.metrics()
        rate, wire = self.rate_bps, self.wire_bps
        peak = f"peak {self.window_s * 1000:.0f}ms Mb/s"
        columns = ["goodput Mb/s", "on wire Mb/s", "link Mb/s", "of link", peak]
        ctx.table(
            f"TCP {self.src} -> {self.dst} ({self.duration_s:.0f} s, one flow)",
            [*columns, "retransmits"],
            [
                [
                    self.goodput_bps / 1e6,
                    wire / 1e6,
                    rate / 1e6,
                    wire / rate,
                    self.peak_window_bps / 1e6,
                    self.retransmits,
                ]
            ],
        )

    def panel(self) -> Panel | None:
        """The egress rate in each window against the link rate; None after an error."""
        if self.error is not None:
            return None
        return Panel(
            f"TCP {self.src} -> {self.dst}: egress rate at the last hop",
            "time (s)",
            "Mbit/s",
            lines={
                f"{self.window_s * 1000:.0f} ms windows": (
                    self.window_end_s,
                    [w / 1e6 for w in self.windows_bps],
                )
            },
            hline=self.rate_bps / 1e6,
            hline_label="link rate",
            step=True,
        )


def measure(
    fab, src: str, dst: str, rate_bps: float, duration_s: float, window_s: float = WINDOW_S
) -> LineRate:
    """One TCP flow src -> dst for `duration_s`, its last hop's egress sampled every `window_s`."""
    last_hop = fab.graph.nodes[dst]["leaf"]
    port_no = fab.graph.edges[dst, last_hop]["ports"][last_hop]
    with sample_egress(fab, last_hop, port_no, window_s) as samples:
        doc = iperf.run(fab, src, dst, duration_s)
    return LineRate.from_run(doc, samples, src, dst, rate_bps, duration_s, window_s=window_s)
