"""Code size (issue 30): no function over MAX_FUNCTION_LINES lines; scenarios small.

A long function hides its steps; a scenario that a newcomer reads in an hour
is a few hundred lines that call the library (emu/traffic, emu/models,
emu/answers.py) rather than carry it. Measured on the source, no fabric.
"""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 100  # issue 30's limit, def line to last line, docstring included
# The mean length of a scenario module that issue 30 asks for.
MEAN_SCENARIO_LINES = 350


def python_sources() -> list[Path]:
    return sorted(
        p
        for top in ("emu", "controllers", "scenarios", "labs", "bench")
        for p in (REPO / top).rglob("*.py")
    )


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`name (lines)` of each function in `path` longer than `limit` lines."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1})"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > limit
    ]


@pytest.mark.parametrize("path", python_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_function_is_over_the_limit(path: Path) -> None:
    assert long_functions(path) == [], path


def test_the_length_checker_counts_the_whole_function(tmp_path: Path) -> None:
    src = tmp_path / "mine.py"
    src.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 100)
    assert long_functions(src) == ["long (101)"]


def scenario_lines() -> dict[str, int]:
    return {
        p.name: len(p.read_text().splitlines())
        for p in (REPO / "scenarios").glob("*.py")
        if p.name != "__init__.py"
    }


def test_the_average_scenario_is_under_the_issue_s_limit() -> None:
    """335.8 lines when the scenarios' workloads and models moved to emu/traffic and
    emu/models; a scenario that grows past the mean carries library code."""
    mean = statistics.mean(scenario_lines().values())
    assert mean < MEAN_SCENARIO_LINES, f"mean scenario module {mean:.0f} lines"
