"""README.md and the docs site's pages (docs/*.md): links that resolve, commits that exist, no machine paths.

What `mkdocs build --strict` (scripts/run-tests) cannot see: README.md is not a
page of the site, and a commit hash or a developer's path is text, not a link.
Anchors are checked with the rule the site uses (mkdocs_hooks.py, GitHub's), so
one `#anchor` works on GitHub and on the site. docs/runs/ is evidence written
by `emu reproduce --check-lines`, not prose, and is left out.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


github_slug = _hooks().github_slug


def pages() -> list[Path]:
    """README.md and docs/*.md (not docs/runs/)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text: str):
    """(line number, line) outside fenced and indented code blocks."""
    fenced, previous_blank = False, True
    indented = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()) and not indented:
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("    ") and (previous_blank or indented):
            indented = True
            continue
        indented = False if line.strip() else indented
        previous_blank = not line.strip()
        yield n, line


def heading_text(markdown: str) -> str:
    """A heading's text as rendered: code spans, links and tags reduced to their text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "")


def anchors(path: Path) -> set[str]:
    """Every anchor a page offers: its headings' slugs (repeats get -1, -2, as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text()):
        found.update(HTML_ID.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(heading_text(m.group(2)))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(path: Path):
    """(line number, target) of every inline link and image in a page's prose."""
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            yield n, m.group(1)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of a page: a missing file, a missing anchor."""
    problems = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        where = f"{path.relative_to(root)}:{n}: {target}"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif root not in dest.parents:
            problems.append(f"{where}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading makes #{anchor}")
    return problems


def test_slugs_follow_githubs_rule():
    assert github_slug("`incast`: lossy vs PFC vs PFC + ECN/DCQCN") == (
        "incast-lossy-vs-pfc-vs-pfc--ecndcqcn"
    )
    assert github_slug(heading_text("The hardware first (`EMU_RT_PRIORITY`, default 10)")) == (
        "the-hardware-first-emu_rt_priority-default-10"
    )
    assert github_slug(heading_text("[Where](x.md) does a flow go?")) == "where-does-a-flow-go"


def test_the_checker_finds_a_missing_file_a_missing_anchor_and_skips_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# A\n\n[ok](docs/b.md#two-words) [again](docs/b.md#two-words-1) [self](#a)\n"
        "[gone](docs/c.md) [no anchor](docs/b.md#three) ![pic](docs/none.png)\n"
        "`[code](nowhere.md)` [web](https://example.org/x) [up](../x.md)\n\n"
        "```\n[fenced](nowhere.md)\n```\n\n    [indented](nowhere.md)\n"
    )
    (tmp_path.parent / "x.md").touch()
    assert broken_links(page, tmp_path) == [
        "README.md:4: docs/c.md: no such file",
        "README.md:4: docs/b.md#three: no heading makes #three",
        "README.md:4: docs/none.png: no such file",
        "README.md:5: ../x.md: outside the repository",
    ]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


# A commit as the pages cite one: a backticked hex word, or "commit" and a hex word.
COMMIT = re.compile(r"`([0-9a-f]{7,40})`|\bcommits?\s+([0-9a-f]{7,40})\b")


def cited_commits(text: str) -> set[str]:
    """Hex words of 7-40 digits that look like commits (a digit and a letter: not a number)."""
    words = {a or b for a, b in COMMIT.findall(text)}
    return {w for w in words if re.search(r"[0-9]", w) and re.search(r"[a-f]", w)}


def test_cited_commits_are_found_backticked_or_after_the_word_commit():
    text = "at `1c40fbb` (commit 42ef4fe), `0x8808`, `16777216`, `deadbeef`, 3d59130 alone"
    assert cited_commits(text) == {"1c40fbb", "42ef4fe"}


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_commit_exists(page):
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the cited commits cannot be looked up")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone: older commits are not in it")
    missing = sorted(
        c
        for c in cited_commits(page.read_text())
        if _git("cat-file", "-e", f"{c}^{{commit}}").returncode != 0
    )
    assert missing == [], f"{page.name} cites commits that are not in git history: {missing}"


# A developer's machine in a path: the checkout's place on the build machine, a home.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users)/[^\s`'\")]*")


def test_machine_paths_are_found():
    assert MACHINE_PATH.findall("grading /work/main/labs/x and `/home/me/emu`") == [
        "/work/main/labs/x",
        "/home/me/emu",
    ]
    assert MACHINE_PATH.findall("labs-work/NAME/ and /run/emu/runs/ and ~/emu") == []


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_specific_paths(page):
    found = [
        f"{n}: {path}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for path in MACHINE_PATH.findall(line)
    ]
    assert found == [], f"{page.name} prints paths of one machine: {found}"


def test_the_readme_is_a_front_door():
    """Under 400 lines, with its two commands, each a script that exists and runs."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 400
    for script in ("scripts/run-demo", "scripts/run-tests"):
        assert re.search(rf"^\s+{re.escape(script)}\b", readme, re.M), script
        assert os.access(ROOT / script, os.X_OK), script
    assert "mkdocs" in (ROOT / "scripts" / "run-tests").read_text()
