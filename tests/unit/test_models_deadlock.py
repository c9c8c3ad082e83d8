"""PFC deadlock's model (emu/models/deadlock.py), by hand and against the switch's own
buffer and watchdog: the refresh period and the XON point are what emu/switch/buffer.py
does, the watchdog's bound is never beaten by emu/switch/watchdog.py."""

from __future__ import annotations

import doctest
import random

import pytest

from emu.config import BufferSpec, EcnSpec, PfcSpec, WatchdogSpec
from emu.models import deadlock
from emu.models.deadlock import (
    fair_share_bps,
    pause_refresh_s,
    pfc_goodput_floor_bps,
    stays_paused,
    watchdog_detection_bound_s,
    xon_bytes,
)
from emu.switch.buffer import HEADROOM, SharedBuffer
from emu.switch.watchdog import PfcWatchdog, QueueView

RATE = 10_000_000
FRAME = 1000


def _buffer() -> SharedBuffer:
    return SharedBuffer(
        BufferSpec(size_bytes=1 << 20),
        PfcSpec(),
        EcnSpec(enabled=False),
        {p: RATE for p in (1, 2, 3)},
        rng=random.Random(1),
    )


def _fill_past_xoff(buf: SharedBuffer) -> list[int]:
    """Frames into ingress (1, 3) until one spills into the headroom; their charges."""
    charges = []
    while True:
        charge, _ = buf.admit(1, 3, 2, FRAME, False, 0.0)
        charges.append(charge)
        if charge == HEADROOM:
            return charges


def test_a_standing_pause_is_refreshed_every_half_pause_time():
    # 65535 quanta x 512 bit / 10 Mbit/s = 3.355 s; half of it 1.677696 s.
    assert pause_refresh_s(RATE) == pytest.approx(65535 * 512 / RATE / 2)
    assert pause_refresh_s(RATE, quanta=1000) == pytest.approx(1000 * 512 / RATE / 2)


def test_the_switch_refreshes_its_pause_when_the_model_says():
    buf = _buffer()
    _fill_past_xoff(buf)
    assert buf.pfc_due(0.0) == [(1, {3: 0xFFFF})]  # XOFF
    refresh = pause_refresh_s(RATE)
    assert buf.pfc_due(refresh - 1e-6) == []
    assert buf.pfc_due(refresh) == [(1, {3: 0xFFFF})]


def test_xon_is_xoff_less_two_frames_of_hysteresis():
    spec = BufferSpec()
    assert xon_bytes(100_000) == 100_000 - spec.resume_offset_bytes
    assert xon_bytes(100_000, BufferSpec(resume_offset_bytes=0)) == 100_000


@pytest.mark.parametrize(
    ("ingress", "headroom", "paused"),
    [
        (96_000, 0, True),  # inside the hysteresis band: still paused
        (95_000, 0, False),  # at XON: resumed
        (10_000, 1500, True),  # frames in the headroom keep it paused
        (0, 0, False),
    ],
)
def test_a_queue_stays_paused_above_xon_or_with_headroom_in_use(ingress, headroom, paused):
    assert stays_paused(ingress, headroom, 95_000) is paused


def test_the_switch_lifts_its_pause_exactly_when_the_model_stops_holding_it():
    buf = _buffer()
    charges = _fill_past_xoff(buf)
    buf.pfc_due(0.0)
    key = (1, 3)
    while charges:
        buf.release(1, 3, 2, FRAME, charges.pop())
        held = stays_paused(
            buf.ingress[key], buf.headroom_used[key], xon_bytes(buf.xoff_threshold())
        )
        sent = buf.pfc_due(0.001)
        assert (sent == [(1, {3: 0})]) is (not held)
        if sent:
            break
    assert charges, "XON came only once the queue was empty"


def test_the_watchdog_bound_is_detection_on_the_fabrics_clock_plus_two_polls():
    # SONiC: 200 ms detection, emu polls every 100 ms; x10: 2 s + 0.2 s.
    assert watchdog_detection_bound_s(10.0) == pytest.approx(2.2)
    assert watchdog_detection_bound_s(1.0, WatchdogSpec(detection_s=0.5, poll_s=0.05)) == (
        pytest.approx(0.6)
    )


@pytest.mark.parametrize("phase", [0.001, 0.03, 0.05, 0.099, 0.1])
def test_the_watchdog_declares_a_queue_stuck_before_it_was_on_within_the_bound(phase):
    """A queue paused with frames long before the watchdog is turned on at t=0; the
    watchdog's polls start `phase` later. The storm falls within the model's bound."""
    scale = 10.0
    wd = PfcWatchdog(WatchdogSpec(time_scale=scale))
    stuck = QueueView(3, 3, 50_000, 7, True, last_pause_rx=0.0)
    t, declared = phase, None
    while declared is None and t < 10.0:
        if wd.poll(t, [stuck]):
            declared = t
        t += WatchdogSpec().poll_s
    assert declared is not None
    # Later than the detection time alone (the polls' slack is real), never past the bound.
    assert scale * WatchdogSpec().detection_s < declared <= watchdog_detection_bound_s(scale) + 1e-9


def test_two_flows_on_every_ring_link_get_half_a_link_and_a_floor_of_a_quarter():
    # h1->h3 over s1 s2 s3, h2->h4 over s2 s3 s4, ...: every ring link carries two.
    ring = ["s1", "s2", "s3", "s4"]
    paths = [
        [
            (f"h{i + 1}", ring[i]),
            (ring[i], ring[(i + 1) % 4]),
            (ring[(i + 1) % 4], ring[(i + 2) % 4]),
        ]
        for i in range(4)
    ]
    fair = fair_share_bps(paths, RATE)
    assert fair == [RATE / 2] * 4
    assert pfc_goodput_floor_bps(min(fair)) == RATE / 4


def test_a_flow_alone_on_its_links_gets_the_whole_link():
    assert fair_share_bps([[("a", "b")], [("c", "d")]], RATE) == [RATE, RATE]


def test_the_models_doctests_pass():
    result = doctest.testmod(deadlock, verbose=False)
    assert result.attempted >= 3 and result.failed == 0
