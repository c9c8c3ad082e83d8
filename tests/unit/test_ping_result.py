"""PingResult: which pings were lost when, from the replies' own times (ping -D)."""

from __future__ import annotations

import pytest

from emu.traffic.ping import PingResult


def result(sent: int, lost: set[int], step_s: float = 0.056, t0: float = 1000.0) -> PingResult:
    replied = tuple(s for s in range(1, sent + 1) if s not in lost)
    return PingResult(sent, len(replied), 0.05, replied, tuple(t0 + s * step_s for s in replied))


def test_the_real_interval_comes_from_the_replies_not_from_the_asked_one():
    r = result(200, {100, 101, 102})
    assert r.actual_interval_s == pytest.approx(0.056)
    assert r.longest_outage_s == pytest.approx(3 * 0.056)


def test_a_lost_ping_is_placed_between_the_replies_around_it():
    r = result(200, {100, 101, 102})
    assert r.sent_wall(101) == pytest.approx(1000.0 + 101 * 0.056)
    assert r.sent_wall(1) == pytest.approx(1000.056)


def test_losses_are_found_by_when_they_were_sent():
    r = result(260, {211, 212, 213})
    # Seq 211 was sent at 1011.8 s: after a window ending at 1011.0, inside one to 1012.
    assert r.lost_between(1000.5, 1011.0) == []
    assert r.lost_between(1000.5, 1012.0) == [211, 212, 213]


def test_losses_at_either_end_are_placed_by_the_interval():
    r = result(10, {1, 2, 10})
    assert r.sent_wall(1) == pytest.approx(1000.0 + 1 * 0.056)
    assert r.sent_wall(10) == pytest.approx(1000.0 + 10 * 0.056)
    assert r.lost_between(0.0, 2000.0) == [1, 2, 10]


def test_without_replies_every_ping_counts_as_lost_in_any_window():
    r = PingResult(5, 0, 0.05, ())
    assert r.sent_wall(3) is None
    assert r.lost_between(0.0, 1.0) == [1, 2, 3, 4, 5]
    assert r.actual_interval_s == 0.05
