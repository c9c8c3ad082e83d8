"""The example scenario a newcomer copies (scenarios/example.py): it runs, its model holds."""

from __future__ import annotations

from pathlib import Path

from scenarios import example

from . import ROOT, assert_checks, emu_run

CHECKS = [
    "the last SEND completes when the receiver's link has carried every frame",
    "lossless: PFC pauses the senders, no frame dropped",
]


def test_the_example_stays_short_enough_to_read_in_one_sitting():
    assert len((Path(ROOT) / "scenarios" / "example.py").read_text().splitlines()) < 100


def test_the_example_runs_and_its_model_holds(tmp_path, no_leaks):
    out = tmp_path / "example"
    res, doc = emu_run(out, "example")
    assert_checks(res, doc, CHECKS, count=len(CHECKS))
    done = doc["metrics"]["completion_s"]
    assert sorted(done) == ["h1", "h2", "h3"]
    # The check's window is the model's, not the posts' spread: else it could not fail.
    m = doc["metrics"]
    assert m["posting_s"] < 0.05 * m["model_s"]
    assert m["model_s"] == example.model_s(3, 200_000, 10e6)[1]
    assert (out / "example.png").stat().st_size > 5_000
