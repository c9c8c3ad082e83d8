"""emu/profiling.py: a process profiles its loop only when EMU_PROFILE_DIR says where."""

from __future__ import annotations

import pstats

from emu import profiling


def busy() -> None:
    sum(i * i for i in range(20000))


def test_without_the_variable_the_loop_just_runs(monkeypatch, tmp_path):
    monkeypatch.delenv(profiling.ENV, raising=False)
    ran = []
    profiling.run("leaf1", lambda: ran.append(1))
    assert ran == [1] and list(tmp_path.iterdir()) == []


def test_with_it_the_process_leaves_its_profile_under_its_name(monkeypatch, tmp_path):
    monkeypatch.setenv(profiling.ENV, str(tmp_path / "prof"))
    profiling.run("leaf1", busy)
    stats = pstats.Stats(str(tmp_path / "prof" / "leaf1.prof"))
    assert any(func[2] == "busy" for func in stats.stats)
