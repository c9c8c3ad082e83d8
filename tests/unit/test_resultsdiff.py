"""emu/resultsdiff.py: two reproductions' figures side by side, on the project's own results."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import cli, resultsdiff
from emu.resultsdiff import MOVED, ONLY_AFTER, ONLY_BEFORE, OVERLAPS, WITHIN, Spread

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"
# A row of docs/results.md's smoke section, and its spread (1.22 .. 1.46).
CONVERGED = "| converged after (s) | 1.22 | 1.32 | 1.46 | 5/5 | — |"


def smoke_converged(changes: list) -> resultsdiff.FigureChange:
    (change,) = [
        c for c in changes if c.entry.startswith("smoke (") and c.label == "converged after (s)"
    ]
    return change


@pytest.mark.parametrize(
    "after, expected",
    [
        (Spread(1.0, 1.3, 2.0), WITHIN),  # median inside the earlier spread
        (Spread(1.22, 1.22, 1.22), WITHIN),  # the spread's ends belong to it
        (Spread(1.4, 1.5, 1.6), OVERLAPS),  # median outside, spreads still meet
        (Spread(1.5, 1.6, 1.7), MOVED),
        (Spread(0.1, 0.2, 1.21), MOVED),
    ],
)
def test_the_verdict_reads_the_later_median_against_the_earlier_spread(after, expected):
    assert resultsdiff.verdict(Spread(1.22, 1.32, 1.46), after) == expected


def test_a_figure_one_side_lacks_is_named_so():
    s = Spread(1, 1, 1)
    assert resultsdiff.verdict(None, s) == ONLY_AFTER
    assert resultsdiff.verdict(s, None) == ONLY_BEFORE


def test_the_results_against_themselves_are_all_within():
    text = RESULTS.read_text()
    changes = resultsdiff.compare(text, text)
    assert len(changes) > 50  # every configuration's figures, not an empty table
    # A figure no faithful run gave ("—" on both sides) is left out, not "within".
    assert {c.verdict for c in changes} == {WITHIN}


def test_a_moved_figure_and_a_dropped_one_are_found():
    text = RESULTS.read_text()
    assert CONVERGED in text
    moved = text.replace(CONVERGED, "| converged after (s) | 1.5 | 1.6 | 1.7 | 5/5 | — |")
    change = smoke_converged(resultsdiff.compare(text, moved))
    assert (change.verdict, change.after) == (MOVED, Spread(1.5, 1.6, 1.7))
    dropped = text.replace(CONVERGED + "\n", "")
    assert smoke_converged(resultsdiff.compare(text, dropped)).verdict == ONLY_BEFORE
    rendered = resultsdiff.render(resultsdiff.compare(text, moved))
    assert "| converged after (s) | 1.22 / 1.32 / 1.46 | 1.5 / 1.6 / 1.7 | moved |" in rendered
    assert "1 moved" in rendered.splitlines()[-1]


def test_the_command_prints_the_table_and_refuses_a_file_it_did_not_write(tmp_path, capsys):
    after = tmp_path / "after.md"
    after.write_text(RESULTS.read_text().replace(CONVERGED, CONVERGED.replace("1.32", "1.4")))
    assert cli.main(["reproduce", "--compare", str(RESULTS), "--doc", str(after)]) == 0
    out = capsys.readouterr().out
    assert "| converged after (s) | 1.22 / 1.32 / 1.46 | 1.22 / 1.4 / 1.46 | within |" in out
    readme = tmp_path / "README.md"
    readme.write_text("# not a reproduction\n")
    assert cli.main(["reproduce", "--compare", str(readme), "--doc", str(after)]) == 2
    assert "not written by emu reproduce" in capsys.readouterr().err
    assert cli.main(["reproduce", "--compare", str(tmp_path / "none.md")]) == 2
    assert "cannot read" in capsys.readouterr().err
