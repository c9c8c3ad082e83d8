"""What scenarios declare for `emu reproduce` (emu/figures.py), and that they alone declare it.

Each scenario module holds its own `REPRODUCE` entries (issue 30); emu/reproduce.py
only collects them. These tests hold every declaration to its own scenario, keep
ids unique, keep the collection order complete, and fail if a per-scenario table
of figures comes back into emu/reproduce.py.
"""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

import pytest

from emu import figures, reproduce, scenario
from emu.figures import Entry, Figure, per_key

ROOT = Path(__file__).resolve().parents[2]
# The scenario to copy: it stays under 100 lines and the docs quote nothing of it.
UNQUOTED = {"example"}


def declared() -> dict[str, tuple]:
    """Scenario name -> its REPRODUCE (an empty tuple where it declares none)."""
    return {name: getattr(mod, "REPRODUCE", ()) for name, mod in scenario.available().items()}


@pytest.mark.parametrize("name", sorted(scenario.available()))
def test_a_scenarios_entries_name_that_scenario(name):
    entries = declared()[name]
    assert isinstance(entries, tuple)
    for entry in entries:
        assert isinstance(entry, Entry), entry
        assert entry.scenario == name, f"scenarios/{name}: entry {entry.id!r} names another"
        assert entry.id == name or entry.id.startswith(f"{name}-"), entry.id
        assert entry.figures and all(isinstance(f, Figure) for f in entry.figures), entry.id


def test_every_scenario_but_the_example_declares_and_ids_are_unique():
    by_name = declared()
    assert {n for n, entries in by_name.items() if not entries} == UNQUOTED
    ids = [e.id for entries in by_name.values() for e in entries]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_reproduce_reads_every_declaration_in_the_results_order():
    by_name = declared()
    assert len(reproduce.RESULTS_ORDER) == len(set(reproduce.RESULTS_ORDER))
    assert set(reproduce.RESULTS_ORDER) == {n for n, entries in by_name.items() if entries}
    assert reproduce.quoted_entries() == tuple(
        e for name in reproduce.RESULTS_ORDER for e in by_name[name]
    )
    assert reproduce.ENTRIES == reproduce.quoted_entries()


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_reproduce_py_declares_no_figure_or_entry_itself():
    tree = ast.parse((ROOT / "emu" / "reproduce.py").read_text())
    # A table of figures in reproduce.py is what issue 30 moved beside the scenarios.
    assert not {"Figure", "Entry", "per_key"} & _calls(tree)


def _imports(tree: ast.AST) -> set[str]:
    """Every module a file imports, dotted: `from emu import reproduce` is emu.reproduce."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "scenarios").glob("[!_]*.py")), ids=lambda p: p.stem
)
def test_scenarios_declare_from_emu_figures_never_from_reproduce(path):
    assert "emu.reproduce" not in _imports(ast.parse(path.read_text()))


def test_per_key_repeats_the_specs_for_each_key_and_prefixes_other():
    figs = per_key(
        ("a", "b"),
        ("modes",),
        (("x", ("x",)), ("x + y", ("x",), {"op": "add", "other": ("y",), "scale": 2})),
    )
    assert [f.label for f in figs] == ["a: x", "a: x + y", "b: x", "b: x + y"]
    assert figs[3] == Figure("b: x + y", ("modes", "b", "x"), "add", ("modes", "b", "y"), 2)


def test_figures_doctests_pass():
    result = doctest.testmod(figures, verbose=False)
    assert result.attempted and not result.failed
