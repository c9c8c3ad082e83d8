"""emu/resultsdiff.py: two reproductions' figures side by side, on the project's own results."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import cli, resultsdiff
from emu.resultsdiff import MOVED, ONLY_AFTER, ONLY_BEFORE, OVERLAPS, WITHIN, Spread

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def row(text: str, label: str) -> str:
    """The first figure row of `label` in a results document (smoke's comes first)."""
    return next(line for line in text.splitlines() if line.startswith(f"| {label} |"))


# docs/results.md's smoke convergence row, whatever the last reproduction measured.
CONVERGED = row(RESULTS.read_text(), "converged after (s)")
LOW, MEDIAN, HIGH = (float(c) for c in CONVERGED.split("|")[2:5])


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
    far = (HIGH + 1, HIGH + 2, HIGH + 3)  # above the whole spread: moved
    moved = text.replace(CONVERGED, "| converged after (s) | %g | %g | %g | 3/3 | — |" % far, 1)
    change = smoke_converged(resultsdiff.compare(text, moved))
    assert (change.verdict, change.after) == (MOVED, Spread(*far))
    dropped = text.replace(CONVERGED + "\n", "", 1)
    assert smoke_converged(resultsdiff.compare(text, dropped)).verdict == ONLY_BEFORE
    rendered = resultsdiff.render(resultsdiff.compare(text, moved))
    line = next(x for x in rendered.splitlines() if "| converged after (s) |" in x)
    assert line.endswith("| moved |")
    assert "1 moved" in rendered.splitlines()[-1]


def test_the_command_prints_the_table_and_refuses_a_file_it_did_not_write(tmp_path, capsys):
    after = tmp_path / "after.md"
    inside = (LOW, (LOW + HIGH) / 2, HIGH)  # a new median inside the spread: within
    within = "| converged after (s) | %g | %g | %g | 3/3 | — |" % inside
    after.write_text(RESULTS.read_text().replace(CONVERGED, within, 1))
    assert cli.main(["reproduce", "--compare", str(RESULTS), "--doc", str(after)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "| converged after (s) |" in x)
    assert line.endswith("| within |") and Spread(*inside).text() in line
    readme = tmp_path / "README.md"
    readme.write_text("# not a reproduction\n")
    assert cli.main(["reproduce", "--compare", str(readme), "--doc", str(after)]) == 2
    assert "not written by emu reproduce" in capsys.readouterr().err
    assert cli.main(["reproduce", "--compare", str(tmp_path / "none.md")]) == 2
    assert "cannot read" in capsys.readouterr().err
