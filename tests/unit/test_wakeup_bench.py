"""bench/wakeup.py: the pinned wake-ups run where asked and leave the caller's CPUs as they were."""

from __future__ import annotations

import errno
import os

import pytest

from bench import wakeup


def test_a_pinned_ping_pong_times_its_round_trips_and_restores_the_callers_cpus() -> None:
    before = os.sched_getaffinity(0)
    cpu = sorted(before)[0]
    cpu_s, wall_s = wakeup.ping_pong(200, (cpu, cpu))
    assert 0 < cpu_s and 0 < wall_s < 0.1  # per round trip
    assert os.sched_getaffinity(0) == before


def test_the_table_has_the_pinned_rows(capsys) -> None:
    assert wakeup.main(["--rounds", "200"]) == 0
    out = capsys.readouterr().out
    assert "idle CPUs as the kernel chooses" in out
    assert "  both on one CPU" in out
    assert ("  on two CPUs" in out) is (len(os.sched_getaffinity(0)) > 1)


def test_idle_poll_without_the_device_is_a_one_line_error(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(wakeup, "PM_QOS_DEVICE", str(tmp_path / "no-such-device"))
    with pytest.raises(SystemExit) as exc:
        wakeup.main(["--rounds", "200", "--idle-poll"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--idle-poll:" in err and "no-such-device" in err and "Traceback" not in err


def test_idle_poll_lets_go_of_its_request_when_the_bench_ends(monkeypatch, tmp_path) -> None:
    held = []

    def hold() -> int:
        held.append(os.open(tmp_path / "qos", os.O_WRONLY | os.O_CREAT))
        return held[-1]

    monkeypatch.setattr(wakeup, "hold_idle_poll", hold)
    assert wakeup.main(["--rounds", "200", "--idle-poll"]) == 0
    with pytest.raises(OSError):
        os.fstat(held[0])  # closed: the kernel drops a PM QoS request with its descriptor


def test_idle_poll_refused_names_root(monkeypatch, capsys) -> None:
    def refused() -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(wakeup, "hold_idle_poll", refused)
    with pytest.raises(SystemExit):
        wakeup.main(["--rounds", "200", "--idle-poll"])
    assert "Permission denied (it needs root)" in capsys.readouterr().err
