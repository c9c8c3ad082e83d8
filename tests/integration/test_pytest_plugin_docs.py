"""docs/pytest-plugin.md's examples run as they are written, so they cannot rot.

Every ```python block of the page is a whole test module: each is written to
a file of its own and the lot run by pytest in a subprocess, with the plugin
as a user gets it (its entry point) and pytest's rootdir at the repository
(the page's `topo=` paths are the repository's topology files).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "pytest-plugin.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_every_example_on_the_page_runs_and_passes(tmp_path):
    examples = blocks(DOC.read_text())
    tests = sum(len(re.findall(r"^def test_", code, re.M)) for code in examples)
    assert len(examples) >= 3 and tests >= 4, "the page lost its examples"
    for i, code in enumerate(examples, 1):
        (tmp_path / f"test_doc_example_{i}.py").write_text(code)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rx",  # an xfail's reason, to check it is the emulator's fidelity
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,  # not emu's own settings: a user's project has its own
            "--rootdir",
            str(REPO),
            "-W",
            "error::DeprecationWarning:emu.*",  # the page shows no deprecated spelling
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    summary = res.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|xfailed)", summary)}
    assert counts.get("passed", 0) + counts.get("xfailed", 0) == tests, res.stdout[-3000:]
    assert "skipped" not in summary and "xpassed" not in summary, summary
    # The one way a page example may not pass: a rate check in a run whose emulator
    # fell behind its links (the page's `xfail_if_unfaithful`), which names why.
    xfails = [line for line in res.stdout.splitlines() if line.startswith("XFAIL")]
    assert len(xfails) == counts.get("xfailed", 0), res.stdout[-3000:]
    assert all("in an unfaithful run: " in line for line in xfails), xfails


def test_the_readmes_plugin_examples_are_the_pages_own():
    readme = (REPO / "README.md").read_text()
    shown = [b for b in blocks(readme) if re.search(r"def test_\w+\((module_)?fabric\b", b)]
    if not shown:
        pytest.skip("the README shows no plugin example (it links docs/pytest-plugin.md)")
    page = DOC.read_text()
    for code in shown:
        assert code in page, f"README example not on docs/pytest-plugin.md:\n{code}"
