"""The PFC watchdog's detection and restoration (SONiC semantics), time injected."""

import pytest

from emu.config import ConfigError, WatchdogSpec
from emu.switch.watchdog import PfcWatchdog, QueueView

POLL = 0.1


def run(wd, t_end, view_at, t0=0.0):
    """Poll every POLL s from t0 to t_end; view_at(t) gives the queue's state then."""
    events, t = [], t0
    while t <= t_end + 1e-9:
        events += [(round(t, 3),) + e for e in wd.poll(t, [view_at(t)])]
        t += POLL
    return events


def stuck_from(start, pause_until=99.0):
    def view(t):
        paused = start <= t < pause_until
        return QueueView(
            1,
            3,
            5000 if paused else 0,
            10 if t >= start else int(t * 100),
            paused,
            last_pause_rx=min(t, pause_until),
        )

    return view


def test_storm_detected_within_detection_time_plus_one_poll():
    wd = PfcWatchdog(WatchdogSpec())
    events = run(wd, 1.0, stuck_from(0.3))
    storms = [e for e in events if e[1] == "storm"]
    assert len(storms) == 1 and storms[0][2:] == (1, 3)
    assert 0.3 + 0.2 <= storms[0][0] <= 0.3 + 0.2 + POLL + 1e-9
    assert wd.stormed() == {(1, 3)} and wd.events[0]["kind"] == "storm"


def test_a_paused_queue_that_still_drains_is_not_a_storm():
    wd = PfcWatchdog(WatchdogSpec())

    def view(t):  # paused on and off, but transmits between polls
        return QueueView(1, 3, 5000, int(t * 1000), True, last_pause_rx=t)

    assert run(wd, 2.0, view) == []


def test_restored_after_restoration_time_without_pause():
    wd = PfcWatchdog(WatchdogSpec())
    events = run(wd, 2.0, stuck_from(0.3, pause_until=1.0))
    kinds = [(e[1], e[0]) for e in events]
    assert kinds[0][0] == "storm"
    restored = [t for k, t in kinds if k == "restored"]
    assert restored and 1.0 + 0.2 <= restored[0] <= 1.0 + 0.2 + POLL + 1e-9
    assert wd.stormed() == set()


def test_disabled_watchdog_never_acts_and_restores_on_disable():
    wd = PfcWatchdog(WatchdogSpec(enabled=False))
    assert run(wd, 1.0, stuck_from(0.0)) == []
    wd = PfcWatchdog(WatchdogSpec())
    run(wd, 1.0, stuck_from(0.0))
    wd.spec = WatchdogSpec(enabled=False)
    assert wd.poll(1.1, []) == [("restored", 1, 3)]


def test_events_carry_the_wall_time_the_poller_gives():
    """The datapath passes wall-clock time in; the watchdog stamps it (reports align processes)."""
    wd = PfcWatchdog(WatchdogSpec())
    view = stuck_from(0.0)
    t = 0.0
    while not wd.poll(t, [view(t)], wall=1e9 + t):
        t += POLL
    assert wd.events == [{"t": t, "kind": "storm", "port": 1, "prio": 3, "wall": 1e9 + t}]
    wd.spec = WatchdogSpec(enabled=False)
    assert wd.poll(t + POLL, []) == [("restored", 1, 3)]
    assert "wall" not in wd.events[-1]  # none given, none recorded


def test_time_scale_stretches_detection():
    wd = PfcWatchdog(WatchdogSpec(time_scale=5.0))
    storms = [e for e in run(wd, 3.0, stuck_from(0.0)) if e[1] == "storm"]
    assert 1.0 <= storms[0][0] <= 1.0 + POLL + 1e-9


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"action": "reboot"}, "action='reboot'"),
        ({"detection_s": 0}, "detection_s=0"),
        ({"poll_s": -1}, "poll_s=-1"),
    ],
)
def test_bad_spec_names_the_key(kw, message):
    with pytest.raises(ConfigError, match=message):
        WatchdogSpec(**kw)
