"""docs/architecture.md names only what exists: every path, file and module it mentions.

The map is kept by whoever changes the structure (issue 30); a module renamed or
removed without the map following fails here, naming the stale mention.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
TOP = ("emu/", "controllers/", "scenarios/", "tests/", "bench/", "scripts/", "labs/", "docs/")
SOURCE_SUFFIXES = (".py", ".c", ".h", ".json")


def mentions() -> tuple[set[str], set[str], set[str]]:
    """(paths from the top of the tree, bare file names, dotted emu modules) the map names."""
    text = DOC.read_text()
    tokens = set(re.findall(r"`([^`\s]+)", text))
    # The diagram's first column: `emu/fabric/   networkx graph ...`.
    tokens |= set(
        re.findall(r"^\s*(?:[|+\->\s]*)((?:emu|controllers|scenarios)/[\w/.<>]*)", text, re.M)
    )
    paths = {t.rstrip(",.;:") for t in tokens if t.startswith(TOP) and "<" not in t}
    names = {t for t in tokens if "/" not in t and t.endswith(SOURCE_SUFFIXES)}
    modules = {t for t in tokens if re.fullmatch(r"emu(\.\w+)+", t)}
    return paths, names, modules


def test_the_map_names_only_paths_files_and_modules_that_exist():
    paths, names, modules = mentions()
    assert len(paths) > 40 and len(names) > 20 and modules  # the map is read, not skipped
    stale = [p for p in sorted(paths) if not (ROOT / p).exists()]
    in_tree = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    stale += [n for n in sorted(names) if n not in in_tree]
    extensions = (ROOT / "setup.py").read_text()  # compiled modules: built by setup.py
    for m in sorted(modules):
        base = ROOT / Path(*m.split("."))
        if not (base.with_suffix(".py").exists() or base.is_dir() or f'"{m}"' in extensions):
            stale.append(m)
    assert not stale, f"docs/architecture.md names what is not in the tree: {stale}"
