"""Profiling a switch or NIC agent process on request: where its CPU goes.

Owns one switch: with `EMU_PROFILE_DIR` set in the environment, every switch
and NIC agent started then runs its loop under cProfile and writes
`<dir>/<name>.prof` when it stops (read it with `python -m pstats`). The
profiler slows every Python call, so a profiled run's results are not quoted
(bench/README.md); without the variable nothing is imported or measured.

    sudo EMU_PROFILE_DIR=/tmp/prof emu run incast
    python -m pstats /tmp/prof/leaf1.prof     # then: sort tottime, stats 20
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

ENV = "EMU_PROFILE_DIR"


def run(name: str, loop: Callable[[], None]) -> None:
    """Run `loop()`, under cProfile into $EMU_PROFILE_DIR/<name>.prof when that is set."""
    out_dir = os.environ.get(ENV)
    if not out_dir:
        loop()
        return
    import cProfile  # only when asked: the profiler costs every call

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    profiler = cProfile.Profile()
    try:
        profiler.runcall(loop)
    finally:
        profiler.dump_stats(str(Path(out_dir) / f"{name}.prof"))
