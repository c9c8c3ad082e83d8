"""Every check line of every run of a reproduction, in one markdown file (docs/runs/).

Owns reading the run directories that `emu reproduce` leaves under its
`--out` (`<configuration>/run-N/report.txt`) and rendering, per configuration
and run, the lines a reader needs to judge that run: each check with its value
and expectation, the scheduling and steal line, the whole machine's line
(idle CPU, CPU pressure), the summary, and for an
unfaithful run its one-line verdict. `docs/results.md` gives min/median/max;
this file is the evidence under them ("the closing note pastes the check
lines").

It does not run anything, judge anything or read metrics.json: the lines are
copied from what the scenario wrote (emu/scenario.py, `render`). Called by
`emu reproduce --check-lines PATH` (emu/cli.py); tested in
tests/unit/test_checklines.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

# What scenario.render writes: "  [PASS] name: value (expected ...)", the fidelity
# report's "scheduling of the N switch and NIC processes: ...", "the whole
# machine meanwhile: ...", the summary
# "N/M checks passed; results in DIR" and, for an unfaithful run, "unfaithful run...".
_KEEP = re.compile(
    r"^\s*(\[(PASS|FAIL)\] |scheduling of the |the whole machine meanwhile|"
    r"\d+/\d+ checks passed|unfaithful run)"
)
_RUN_DIR = re.compile(r"^run-(\d+)$")


def report_lines(text: str) -> list[str]:
    """The lines of one report.txt that say how the run went."""
    return [line.strip() for line in text.splitlines() if _KEEP.match(line)]


def _runs(config_dir: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in config_dir.iterdir() if (m := _RUN_DIR.match(p.name))]
    return [p for _n, p in sorted(found)]


def render(out_dir: Path, title: str, intro: str, order: Iterable[str] = ()) -> str:
    """Markdown: `# title`, `intro`, then `## config` and `### config run-N` with a code block.

    Args:
        out_dir: `emu reproduce --out` (one directory per configuration).
        title: the document's heading.
        intro: a paragraph that says which command and commit made the runs.
        order: configuration ids in the order to show them (e.g. reproduce's
            ENTRIES); directories not named there follow, sorted.

    Raises:
        ValueError: `out_dir` holds no run directory at all.
    """
    configs = {p.name: p for p in out_dir.iterdir() if p.is_dir() and _runs(p)}
    if not configs:
        raise ValueError(f"{out_dir}: no <configuration>/run-N directories")
    named = [c for c in order if c in configs]
    ids = named + sorted(set(configs) - set(named))
    lines = [f"# {title}", "", intro, ""]
    for config in ids:
        lines += [f"## {config}", ""]
        for run in _runs(configs[config]):
            lines += [f"### {config} {run.name}", "", "```"]
            try:
                kept = report_lines((run / "report.txt").read_text())
            except OSError as exc:
                kept = [f"no report.txt ({exc.strerror}): the run did not finish"]
            lines += kept or ["report.txt has no check lines"]
            lines += ["```", ""]
    return "\n".join(lines)
