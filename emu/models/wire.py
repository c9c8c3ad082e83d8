"""What a workload puts on the wire, in whole frames, behind the figures its tools report.

Owns the frame arithmetic that scenarios hold switch counters to, so that a
check compares bytes on a link with bytes on a link:

- TCP on the wire: iperf3 reports goodput (payload); a switch counts frames.
  A full segment carries the MSS in a frame of Ethernet 14 + IPv4 20 + TCP 20
  + the timestamps option 12 bytes (RFC 7323; Linux puts it in every
  segment, which is why its MSS on a 1500-byte MTU is 1448): 66 bytes of
  headers, 1514 on the wire.
- A ping stream: one ICMP echo request per interval, each a frame of
  Ethernet 14 + IPv4 20 + ICMP 8 + iputils' default 56-byte payload = 98 bytes.
- The most a paced port may show over a window: emu's scheduler
  (emu/switch/scheduler.py, `PortScheduler.set_rate`) lets a port's clock lag
  by a burst of at least two full frames or MIN_BURST_S of its rate, so over
  a window of w seconds a port at rate R sends at most R x w plus that burst;
  the caller adds its sampling jitter as a tolerance on R.

Rates are of Ethernet frames as handed to the veth (no FCS, preamble or gap),
as the scheduler paces them. Pure arithmetic: numbers in, numbers out
(tests/unit/test_models_wire.py).
"""

from __future__ import annotations

from emu.switch.scheduler import MIN_BURST_S

# Ethernet 14 + IPv4 20 + TCP 20 + timestamps option 12 around a full segment's payload.
TCP_FRAME_OVERHEAD_BYTES = 66
# A full Ethernet frame without FCS: the scheduler's unit of burst (two of them).
FULL_FRAME_BYTES = 1514
# An ICMP echo request of iputils ping's default 56-byte payload, as a frame on the wire.
ECHO_FRAME_BYTES = 14 + 20 + 8 + 56


def tcp_wire_bps(goodput_bps: float, mss_bytes: int) -> float:
    """The frame rate on the wire that carries `goodput_bps` of payload in full segments.

    Example:
        >>> tcp_wire_bps(1448e3, 1448)
        1514000.0
    """
    return goodput_bps * (mss_bytes + TCP_FRAME_OVERHEAD_BYTES) / mss_bytes


def ping_stream_bytes(window_s: float, interval_s: float) -> float:
    """Bytes one ping stream's echo requests put on a link in `window_s` (one per interval).

    Example:
        >>> ping_stream_bytes(0.7, 0.02)
        3430.0
    """
    return window_s / interval_s * ECHO_FRAME_BYTES


def scheduler_burst_bits(rate_bps: float) -> float:
    """The burst a paced port of `rate_bps` may send above its rate (emu/switch/scheduler.py).

    Example:
        >>> scheduler_burst_bits(40e6)  # 1 ms of 40 Mbit/s, above two 1514-byte frames
        40000.0
    """
    return max(2 * FULL_FRAME_BYTES * 8, rate_bps * MIN_BURST_S)


def paced_peak_bps(rate_bps: float, window_s: float, tolerance: float) -> float:
    """The highest mean rate a paced port may show over any window of `window_s` seconds.

    The rate, `tolerance` above it (the sampler's jitter, the caller's to choose),
    plus the scheduler's burst spread over the window.
    """
    return rate_bps * (1 + tolerance) + scheduler_burst_bits(rate_bps) / window_s
