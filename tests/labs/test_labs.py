"""Every lab graded twice on real packets: its solution passes, its starting point fails with hints.

So that no lab rots: a change to emu that breaks what a lab teaches (a hash,
a counter, a scenario) fails here, naming the lab and the check.
"""

from __future__ import annotations

import pytest

from emu import labs

LABS = list(labs.available())


@pytest.mark.parametrize("name", LABS)
def test_the_solution_passes(name, tmp_path):
    run = labs.check(name, solution=True, out=str(tmp_path / "solution"), log=lambda _: None)
    assert run.passed, labs.render(run)


@pytest.mark.parametrize("name", LABS)
def test_the_untouched_starting_point_fails_with_a_hint(name, tmp_path):
    run = labs.check(
        name, work=str(labs.lab_dir(name)), out=str(tmp_path / "start"), log=lambda _: None
    )
    failed = [c for c in run.checks if not c.passed]
    assert failed, labs.render(run)
    assert all(c.hint for c in failed), labs.render(run)
