"""The wire's frame arithmetic (emu/models/wire.py), by hand from the header sizes and
the scheduler's burst rule (emu/switch/scheduler.py)."""

from __future__ import annotations

import doctest

import pytest

from emu.models import wire
from emu.switch.scheduler import PortScheduler


def test_a_full_tcp_segment_is_1514_bytes_on_the_wire():
    # MSS 1448 + Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12 = 1514.
    assert 1448 + wire.TCP_FRAME_OVERHEAD_BYTES == wire.FULL_FRAME_BYTES
    # 38 Mbit/s of payload in 1448-byte segments: 38e6 x 1514 / 1448 on the wire.
    assert wire.tcp_wire_bps(38e6, 1448) == pytest.approx(38e6 * 1514 / 1448)
    # A smaller MSS costs more headers per payload bit.
    assert wire.tcp_wire_bps(38e6, 536) > wire.tcp_wire_bps(38e6, 1448)


def test_a_ping_stream_puts_one_98_byte_echo_request_on_the_link_per_interval():
    assert wire.ECHO_FRAME_BYTES == 98
    # 0.7 s at one ping every 20 ms: 35 requests, 3430 bytes.
    assert wire.ping_stream_bytes(0.7, 0.02) == pytest.approx(35 * 98)


def test_the_burst_is_two_full_frames_at_low_rates_and_a_millisecond_above():
    # 2 x 1514 x 8 = 24224 bits is a millisecond at 24.224 Mbit/s.
    assert wire.scheduler_burst_bits(10e6) == 2 * 1514 * 8
    assert wire.scheduler_burst_bits(40e6) == pytest.approx(40e6 * 0.001)


@pytest.mark.parametrize("rate_bps", [10e6, 40e6, 1e9])
def test_the_burst_is_the_schedulers_own(rate_bps):
    # The scheduler lets its clock lag by burst_s; the model's burst is that time at the rate.
    sched = PortScheduler(rate_bps=rate_bps)
    assert wire.scheduler_burst_bits(rate_bps) == pytest.approx(sched.burst_s * rate_bps)


def test_the_paced_peak_adds_the_tolerance_and_the_burst_over_the_window():
    # smoke's figures: 40 Mbit/s, 250 ms windows, 2%: 40.8 Mbit/s + 40000 bits / 0.25 s.
    assert wire.paced_peak_bps(40e6, 0.25, 0.02) == pytest.approx(40.8e6 + 160e3)
    # A longer window spreads the same burst thinner.
    assert wire.paced_peak_bps(40e6, 1.0, 0.02) < wire.paced_peak_bps(40e6, 0.25, 0.02)


def test_the_docstring_examples_hold():
    assert doctest.testmod(wire).failed == 0
