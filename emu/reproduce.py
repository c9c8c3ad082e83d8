"""`emu reproduce`: run every scenario the README quotes, several times, and write docs/results.md.

Owns three things:

- Reading what the README quotes (`ENTRIES`, from `quoted_entries()`): each
  scenario module declares its own configurations and figures beside its code
  (`REPRODUCE`, of `Entry` and `Figure` from emu/figures.py); this module only
  collects them, in the order of docs/results.md (`RESULTS_ORDER`, names only),
  and reads each `Figure` out of a run's `metrics.json["metrics"]` (`lookup`,
  `extract`).
- The pure aggregation of runs (`summarise`): min / median / max of each
  figure over the *faithful* runs only (a run whose fidelity checks failed is
  marked and its figures are left out: DESIGN.md, "a result from an unfaithful
  run is never quoted"), and each check's pass count over the runs, so that an
  unstable check shows. And the markdown (`render_markdown`).
- The thin shell that runs them (`run_once`, `reproduce`): each run is `emu run`
  in a subprocess, so that one crash does not end the reproduction and a run
  that exits non-zero still leaves its metrics.json to read.

It does not own the scenarios, their checks or the fidelity judgement
(`emu/scenario.py`, `emu/fidelity.py`); it only reads what they wrote. Called by
`emu reproduce` (emu/cli.py); tested in tests/unit/test_reproduce.py.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from emu import realtime, registry, scenario
from emu.figures import OPS, WILDCARD, Entry, Figure, is_number
from emu.scenario import ScenarioError

# How long a run that outlived its timeout gets to tear its fabric down after
# SIGTERM (emu run turns TERM into the same unwinding as Ctrl-C) before KILL.
TERM_GRACE_S = 60.0


# ----- the configurations the README quotes ---------------------------------------------

# The scenarios whose declarations `quoted_entries()` reads, in the order `emu
# reproduce` runs them and writes docs/results.md's sections (the README's
# scenario table's, but ecmp-vs-adaptive after straggler). Only names: each
# scenario declares its own figures (`REPRODUCE`, emu/figures.py). A scenario
# that declares some and is not named here comes last, in name order;
# tests/unit/test_figures.py holds this list to the scenarios that declare.
RESULTS_ORDER = (
    "smoke",
    "incast",
    "credit-vs-pfc",
    "pause-storm",
    "livelock",
    "pfc-deadlock",
    "mixed-traffic",
    "ecn-thresholds",
    "failover",
    "link-flap",
    "sharp-allreduce",
    "straggler",
    "ecmp-vs-adaptive",
    "adaptive-collectives",
    "rail-optimized",
    "training-step",
)


def quoted_entries() -> tuple[Entry, ...]:
    """Every configuration the README quotes: each scenario's `REPRODUCE`, in RESULTS_ORDER."""
    modules = scenario.available()
    rank = {name: i for i, name in enumerate(RESULTS_ORDER)}
    names = sorted(modules, key=lambda name: (rank.get(name, len(rank)), name))
    return tuple(e for name in names for e in getattr(modules[name], "REPRODUCE", ()))


# Read once, at import (it imports every scenario module: no cycle, as a scenario
# imports emu/figures.py and never this module).
ENTRIES: tuple[Entry, ...] = quoted_entries()


# ----- reading one run ------------------------------------------------------------------


def lookup(data: Any, path: tuple) -> Any:
    """The value at `path` in `data`, or None where the path does not lead anywhere.

    Examples:
        >>> lookup({"a": [{"b": 1}, {"b": 2}]}, ("a", -1, "b"))
        2
        >>> lookup({"a": [{"b": 1}, {"b": 2}]}, ("a", "*", "b"))
        [1, 2]
        >>> lookup({"a": 1}, ("nope",)) is None
        True
    """
    for i, key in enumerate(path):
        if key == WILDCARD:
            if isinstance(data, dict):
                items = list(data.values())
            elif isinstance(data, (list, tuple)):
                items = list(data)
            else:
                return None
            found = [lookup(x, path[i + 1 :]) for x in items]
            return [x for x in found if x is not None]
        if isinstance(data, dict) and not isinstance(key, int):
            data = data.get(key)
        elif (
            isinstance(data, (list, tuple))
            and isinstance(key, int)
            and -len(data) <= key < len(data)
        ):
            data = data[key]
        else:
            return None
        if data is None:
            return None
    return data


def extract(metrics: dict, fig: Figure) -> float | None:
    """The figure's number in one run's `metrics.json["metrics"]`, or None if it has none."""
    a = lookup(metrics, fig.path)
    if a is None:
        return None
    args = [a]
    if fig.other:
        b = lookup(metrics, fig.other)
        if b is None:
            return None
        args.append(b)
    try:
        value = OPS[fig.op](*args)
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # a value of another shape than the figure expects: no number
    if not is_number(value):
        return None
    return float(value) * fig.scale


@dataclass
class RunRecord:
    """What one `emu run` left: its exit status and metrics.json (None if it wrote none)."""

    index: int  # 1-based
    out_dir: str
    exit_code: int | None  # None: killed after its timeout
    doc: dict | None
    seconds: float = 0.0
    note: str = ""  # why there is no doc, or that it timed out

    @property
    def faithful(self) -> bool:
        """The run's own verdict (emu/scenario.py); no metrics.json is not faithful."""
        return bool(self.doc) and self.doc.get("faithful") is True

    @property
    def checks(self) -> list[dict]:
        return list(self.doc.get("checks", [])) if self.doc else []


def read_metrics(out_dir: Path) -> tuple[dict | None, str]:
    """metrics.json in `out_dir`, or None and why not."""
    path = Path(out_dir) / "metrics.json"
    if not path.exists():
        return None, f"no metrics.json in {out_dir}"
    try:
        return json.loads(path.read_text()), ""
    except (OSError, ValueError) as exc:
        return None, f"{path}: unreadable ({exc})"


# ----- aggregating runs -----------------------------------------------------------------


@dataclass
class FigureStats:
    """One figure over the faithful runs that produced it."""

    label: str
    values: list[float]  # one per faithful run that has the figure
    faithful_runs: int  # the denominator: faithful runs of the entry
    # (run index, value) of the unfaithful runs: shown apart, never in min/median/max.
    left_out: list = field(default_factory=list)

    @property
    def min(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def max(self) -> float | None:
        return max(self.values) if self.values else None


@dataclass
class CheckCount:
    """How often one check passed: over every run with metrics.json, and over the faithful ones."""

    name: str
    fidelity: bool
    passed: int = 0
    runs: int = 0
    passed_faithful: int = 0
    runs_faithful: int = 0
    absent: int = 0  # runs with metrics.json that lack this check (count as failed)


@dataclass
class EntrySummary:
    entry: Entry
    overrides: tuple
    runs: list[RunRecord]
    figures: list[FigureStats]
    checks: list[CheckCount]
    plot_run: RunRecord | None  # the run whose plots the doc shows
    plots: list[str] = field(default_factory=list)  # file names relative to the doc

    @property
    def faithful_runs(self) -> list[RunRecord]:
        return [r for r in self.runs if r.faithful]


def count_checks(runs: list[RunRecord]) -> list[CheckCount]:
    """Each check's pass count, in the order the checks first appear."""
    counts: dict[str, CheckCount] = {}
    with_doc = [r for r in runs if r.doc is not None]
    for r in with_doc:
        for c in r.checks:
            counts.setdefault(c["name"], CheckCount(c["name"], bool(c.get("fidelity"))))
    for r in with_doc:
        by_name = {c["name"]: c for c in r.checks}
        for name, cc in counts.items():
            c = by_name.get(name)
            ok = bool(c and c.get("passed"))
            cc.runs += 1
            cc.passed += ok
            cc.absent += c is None
            if r.faithful:
                cc.runs_faithful += 1
                cc.passed_faithful += ok
    return list(counts.values())


def choose_plot_run(runs: list[RunRecord]) -> RunRecord | None:
    """The last faithful run with plots, else the last run with plots."""
    with_plots = [r for r in runs if r.doc and r.doc.get("plots")]
    faithful = [r for r in with_plots if r.faithful]
    return (faithful or with_plots or [None])[-1]


def summarise(entry: Entry, overrides: tuple, runs: list[RunRecord]) -> EntrySummary:
    """Min/median/max of every figure over the faithful runs; check pass counts over all."""
    good = [r for r in runs if r.faithful]
    bad = [r for r in runs if r.doc is not None and not r.faithful]
    figures = []
    for fig in entry.figures:
        values = [
            v for v in (extract(r.doc.get("metrics", {}), fig) for r in good) if v is not None
        ]
        left_out = [
            (r.index, v)
            for r, v in ((r, extract(r.doc.get("metrics", {}), fig)) for r in bad)
            if v is not None
        ]
        figures.append(FigureStats(fig.label, values, len(good), left_out))
    return EntrySummary(
        entry, tuple(overrides), list(runs), figures, count_checks(runs), choose_plot_run(runs)
    )


def overall(summaries: list[EntrySummary]) -> str:
    """'passed' (every check of every run), 'unfaithful' (only fidelity checks failed), 'failed'."""
    runs = [r for s in summaries for r in s.runs]
    if all(r.doc and r.doc.get("passed") is True for r in runs):
        return "passed"
    if all(r.doc and all(c.get("passed") for c in r.checks if not c.get("fidelity")) for r in runs):
        return "unfaithful"
    return "failed"


# ----- the markdown ---------------------------------------------------------------------


def fmt(value: float | None) -> str:
    """Three significant digits, integers as integers, '—' for no value."""
    if value is None:
        return "—"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def fidelity_row(run: RunRecord) -> list[str]:
    """One run's line of the fidelity table: exit, faithful, worst on-time, stall, drops."""
    exit_text = "timed out" if run.exit_code is None else str(run.exit_code)
    if run.doc is None:
        return [
            str(run.index),
            exit_text,
            "**no** (no metrics.json)",
            "—",
            "—",
            "—",
            "—",
            "—",
            f"{run.seconds:.0f}",
        ]
    checks = run.checks
    passed = f"{sum(bool(c.get('passed')) for c in checks)}/{len(checks)}"
    fid = run.doc.get("metrics", {}).get("fidelity")
    faithful = "yes" if run.faithful else "**no**"
    if not fid:
        return [
            str(run.index),
            exit_text,
            faithful + " (no fidelity record)",
            passed,
            "—",
            "—",
            "—",
            "—",
            f"{run.seconds:.0f}",
        ]
    worst = fid.get("worst", {})

    def at(measure: str, text: Callable[[float], str]) -> str:
        w = worst.get(measure)
        if not w:
            return "—"
        mark = "" if w.get("passed", True) else " **over the limit**"
        return f"{text(w['value'])} at {w['where']}{mark}"

    return [
        str(run.index),
        exit_text,
        faithful,
        passed,
        at("on_time", lambda v: f"{v:.2%}"),
        at("stall", lambda v: f"{v:g} frame times"),
        at("kernel_drops", lambda v: f"{v:g}"),
        machine_cell(fid),
        f"{run.seconds:.0f}",
    ]


def machine_cell(fid: dict) -> str:
    """The whole machine over the run's fabrics: idle CPU, CPU pressure (PSI), steal."""
    parts = []
    if fid.get("idle_share") is not None:
        parts.append(f"idle {fid['idle_share']:.0%}")
    if fid.get("cpu_pressure_share") is not None:
        parts.append(f"waited {fid['cpu_pressure_share']:.0%}")
    parts.append(f"steal {fid.get('steal_s', 0.0) * 1e3:.0f} ms")
    return ", ".join(parts)


def _plot_name(entry: Entry, name: str) -> str:
    """A plot's file name in the doc's directory: prefixed with the entry, unique per entry."""
    stem = Path(name).name
    if stem.startswith(entry.scenario):
        return entry.id + stem[len(entry.scenario) :]
    return f"{entry.id}-{stem}"


def _measured_line(commit: str, date: str, command: str) -> str:
    """A section's own provenance: sections of a merged doc come from different runs."""
    return f"Measured at {commit} on {date}: `{command}`."


def render_entry(s: EntrySummary, plots_dir_name: str, measured: str = "") -> list[str]:
    e = s.entry
    sets = " ".join(f"--set {shlex.quote(o)}" for o in s.overrides)
    good = s.faithful_runs
    lines = [
        f"## {e.title}",
        "",
        *([measured, ""] if measured else []),
        f"`emu run {e.scenario}{' ' + sets if sets else ''}`: {len(s.runs)} run(s), "
        f"{len(good)} faithful.",
        "",
    ]
    bad = [r for r in s.runs if not r.faithful]
    if bad:
        lines += [
            "Left out of the figures (unfaithful, or no metrics.json): "
            + ", ".join(f"run {r.index}" for r in bad)
            + ".",
            "",
        ]
    lines += _table(
        ["figure", "min", "median", "max", "runs", "unfaithful runs (not quoted)"],
        [
            [
                f.label,
                fmt(f.min),
                fmt(f.median),
                fmt(f.max),
                f"{len(f.values)}/{f.faithful_runs}",
                ", ".join(f"run {i}: {fmt(v)}" for i, v in f.left_out) or "—",
            ]
            for f in s.figures
        ],
    )
    lines += ["", "Checks (passed / runs; a check missing from a run counts as failed):", ""]
    rows = []
    for c in s.checks:
        all_runs = f"{c.passed}/{c.runs} passed" + (f" (absent in {c.absent})" if c.absent else "")
        rows.append(
            [c.name, all_runs, f"{c.passed_faithful}/{c.runs_faithful}" if c.runs_faithful else "—"]
        )
    lines += _table(["check", "all runs", "faithful runs"], rows) if rows else ["(no checks)"]
    lines += ["", "Fidelity per run (emu/fidelity.py; worst process or port of the run):", ""]
    lines += _table(
        [
            "run",
            "exit",
            "faithful",
            "checks passed",
            "worst on-time share",
            "longest stall",
            "worst kernel drops",
            "machine (CPUs idle, some task waited for a CPU, steal)",
            "time s",
        ],
        [fidelity_row(r) for r in s.runs],
    )
    notes = [f"run {r.index}: {r.note}" for r in s.runs if r.note]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if s.plots and s.plot_run:
        which = f"run {s.plot_run.index}" + ("" if s.plot_run.faithful else ", unfaithful")
        lines += ["", f"Plots ({which}):", ""]
        lines += [f"![{e.id}: {name}]({plots_dir_name}/{name})" for name in s.plots]
    return lines + [""]


def render_markdown(info: dict, summaries: list[EntrySummary], plots_dir_name: str) -> str:
    """docs/results.md: the header (commit, machine, date, command), then each entry.

    `info` holds "commit", "dirty", "machine" (from `machine_info()`), "date",
    "command", "runs" and "quick".
    """
    m = info["machine"]
    commit = f"`{info['commit']}`" + (
        " (dirty: the tree had uncommitted changes)" if info.get("dirty") else ""
    )
    runs = f"{info['runs']} per configuration"
    if info.get("quick"):
        runs += " (`--quick`: small parameters, not the README's configuration)"
    lines = [
        "# Reproduced figures",
        "",
        "Written by `emu reproduce` (emu/reproduce.py): every figure the README quotes, "
        "measured again. Do not edit by hand; run the command below.",
        "",
    ]
    lines += [
        f"- commit: {commit}",
        f"- machine: {m['cores']} cores, {m['cpu']}, kernel {m['kernel']}, {m['memory']} memory",
        f"- date: {info['date']}",
        f"- command: `{info['command']}`",
        f"- scheduling of switches and NIC agents: {info.get('scheduling', 'not recorded')}",
        f"- runs: {runs}",
    ]
    lines += [
        "",
        "Each figure is the min, median and max over the **faithful** runs only: a run "
        "whose fidelity checks failed (the emulator fell behind its links' clocks, "
        "emu/fidelity.py) is marked **no** below and its figures are left out, because "
        "a result from an unfaithful run is never quoted. `runs` says how many faithful "
        "runs gave the figure; the last column shows what the unfaithful runs measured, "
        "for diagnosis only. Check pass counts cover every run that wrote "
        "metrics.json, and separately the faithful ones.",
        "",
    ]
    lines += [
        "| configuration | runs | faithful | every check passed |",
        "| --- | --- | --- | --- |",
    ]
    for s in summaries:
        passed = sum(1 for r in s.runs if r.doc and r.doc.get("passed") is True)
        lines.append(
            f"| [{s.entry.id}](#{_anchor(s.entry.title)}) | {len(s.runs)} | "
            f"{len(s.faithful_runs)} | {passed} |"
        )
    lines.append("")
    measured = _measured_line(commit, info["date"], info["command"])
    for s in summaries:
        lines += render_entry(s, plots_dir_name, measured)
    return "\n".join(lines)


_SUMMARY_ROW = re.compile(r"^\| \[([A-Za-z0-9_-]+)\]\(#[^)]*\) \| \d+ \| \d+ \| \d+ \|$", re.M)
_MEASURED = re.compile(r"^Measured at (`[0-9a-f]+`(?: \(dirty[^)]*\))?) on ", re.M)
MERGED_NOTE = (
    "- merged: configurations this command did not run keep the figures of an earlier "
    "reproduction; every section names the commit, date and command it was measured with"
)


def _split_doc(text: str) -> tuple[str, dict]:
    """(header, {title: section}) of a doc render_markdown wrote."""
    head, *sections = re.split(r"^## ", text, flags=re.M)
    return head, {sec.partition("\n")[0].strip(): "## " + sec for sec in sections}


def merge_results(old: str, new: str, entries: tuple | None = None) -> str:
    """`new` (a run of some configurations) over `old` (docs/results.md as it was).

    The sections and summary rows of what `new` ran replace `old`'s; the others
    stay, each stamped with the commit, date and command of the reproduction
    that measured it (from `old`'s header when its section does not say).

    Raises:
        ValueError: either text is not one render_markdown wrote.
    """
    entries = ENTRIES if entries is None else entries
    for text in (old, new):
        parse_results(text, entries)  # ValueError when not ours
    old_head, old_secs = _split_doc(old)
    new_head, new_secs = _split_doc(new)

    def field(name: str) -> str:
        m = re.search(rf"^- {name}: (.*)$", old_head, re.M)
        return m.group(1) if m else "?"

    old_measured = _measured_line(field("commit"), field("date"), field("command").strip("`"))
    rows = {m.group(1): m.group(0) for m in _SUMMARY_ROW.finditer(old_head)}
    rows.update({m.group(1): m.group(0) for m in _SUMMARY_ROW.finditer(new_head)})
    sections = []
    for e in entries:
        if e.title in new_secs:
            sec = new_secs[e.title]
        elif e.title in old_secs:
            sec = old_secs[e.title]
            if not _MEASURED.search(sec):
                title, _, rest = sec.partition("\n")
                sec = f"{title}\n\n{old_measured}\n{rest}"
        else:
            continue
        # A blank line after each: a section that ends in a table (no plots) would
        # otherwise take the next section's heading in as a row.
        sections.append(sec.rstrip("\n") + "\n\n")
    table = "\n".join(rows[e.id] for e in entries if e.id in rows)
    head = _SUMMARY_ROW.sub("", new_head)
    head = re.sub(
        r"(\| --- \| --- \| --- \| --- \|\n)\n*", lambda m: m.group(1) + table + "\n\n", head
    )
    if MERGED_NOTE not in head:
        head = re.sub(
            r"^(- runs: .*)$", lambda m: m.group(1) + "\n" + MERGED_NOTE, head, count=1, flags=re.M
        )
    return (head + "".join(sections)).rstrip("\n") + "\n"


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


# ----- the README's copies -----------------------------------------------------------------

# A table copied from docs/results.md sits between these markers, in README.md
# or in a page of the docs site (docs/scenarios.md holds the scenarios'); `emu
# reproduce --update-readme` rewrites every block's body and a test checks them.
README_BLOCK = re.compile(
    r"<!-- reproduced:(?P<id>[A-Za-z0-9_-]+) -->\n(?P<body>.*?)"
    r"<!-- /reproduced -->",
    re.S,
)
_FIGURE_HEADER = "| figure | min | median | max | runs |"


@dataclass
class ResultsDoc:
    """What the README copies from docs/results.md: the commit and each entry's figures."""

    commit: str
    runs: dict = field(default_factory=dict)  # entry id -> (runs, faithful, all passed)
    commits: dict = field(default_factory=dict)  # entry id -> its section's commit, if it names one
    figures: dict = field(default_factory=dict)  # entry id -> [[label, min, median, max, runs]]


def parse_results(text: str, entries: tuple | None = None) -> ResultsDoc:
    """Read docs/results.md as `render_markdown` writes it.

    Raises:
        ValueError: no commit line (not a file this module wrote).
    """
    m = re.search(r"^- commit: `([0-9a-f]+)`(.*)$", text, re.M)
    if m is None:
        raise ValueError("no '- commit: `...`' line: not written by emu reproduce")
    doc = ResultsDoc(m.group(1) + (" (dirty)" if "dirty" in m.group(2) else ""))
    for m in re.finditer(
        r"^\| \[([A-Za-z0-9_-]+)\]\(#[^)]*\) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M
    ):
        doc.runs[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    by_title = {e.title: e.id for e in (ENTRIES if entries is None else entries)}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        entry_id = by_title.get(title.strip())
        if entry_id is None:
            continue
        measured = _MEASURED.search(body)
        if measured:
            c = re.match(r"`([0-9a-f]+)`(.*)", measured.group(1))
            doc.commits[entry_id] = c.group(1) + (" (dirty)" if "dirty" in c.group(2) else "")
        rows, in_table = [], False
        for line in body.splitlines():
            if line.startswith(_FIGURE_HEADER):
                in_table = True
            elif in_table and line.startswith("| ---"):
                continue
            elif in_table and line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                rows.append(cells[:5])
            elif in_table:
                break
        doc.figures[entry_id] = rows
    return doc


def quoting_pages(readme: str | Path, results: str | Path) -> list[Path]:
    """The pages whose blocks quote `results`: `readme`, then each docs/*.md beside it with one.

    docs/ is the folder beside `readme`; `results` itself is not a page that
    quotes, and docs/runs/ (evidence, not prose) is not searched.
    """
    readme = Path(readme)
    pages = [readme]
    docs = readme.parent / "docs"
    skip = Path(results).resolve()
    for page in sorted(docs.glob("*.md")) if docs.is_dir() else ():
        if page.resolve() != skip and "<!-- reproduced:" in page.read_text():
            pages.append(page)
    return pages


def results_link(page: str | Path, results: str | Path) -> str:
    """How `page` links to `results`: a relative path, as GitHub and MkDocs both resolve it."""
    rel = os.path.relpath(Path(results).resolve(), Path(page).resolve().parent)
    return rel.replace(os.sep, "/")


def readme_block(doc: ResultsDoc, entry_id: str, link: str = "docs/results.md") -> str:
    """The body of a block for `entry_id`: where from, then median and range.

    `link` is docs/results.md as the page holding the block reaches it
    (`results_link`): docs/results.md from the README, results.md from docs/.
    """
    entry = next(e for e in ENTRIES if e.id == entry_id)
    runs, faithful, passed = doc.runs.get(entry_id, (0, 0, 0))
    commit = doc.commits.get(entry_id, doc.commit)
    lines = [
        f"Reproduced at `{commit}` by `emu reproduce`: {runs} runs, {faithful} "
        f"faithful, every check passed in {passed}. Median and range over the faithful "
        f"runs; every run, check and plot in "
        f"[docs/results.md]({link}#{_anchor(entry.title)}).",
        "",
    ]
    rows = doc.figures.get(entry_id, [])
    if not any(r[2] != "—" for r in rows):
        return "\n".join(lines + ["No faithful run: no figure to quote.", ""])
    lines += ["| figure | median | min .. max | runs |", "| --- | ---: | --- | --- |"]
    for label, lo, med, hi, n in rows:
        lines.append(f"| {label} | {med} | {lo} .. {hi} | {n} |")
    return "\n".join(lines + [""])


def update_readme(
    readme: str, results: str, link: str = "docs/results.md"
) -> tuple[str, list[str]]:
    """Rewrite every block of a page from `results`; returns the new text and the unknown ids.

    `readme` is the text of README.md or of any page that quotes (`quoting_pages`);
    `link` is how that page reaches docs/results.md (`results_link`).
    """
    doc = parse_results(results)
    ids = {e.id for e in ENTRIES}
    unknown = []

    def body(m: re.Match) -> str:
        if m.group("id") not in ids:
            unknown.append(m.group("id"))
            return m.group(0)
        return (
            f"<!-- reproduced:{m.group('id')} -->\n{readme_block(doc, m.group('id'), link)}"
            "<!-- /reproduced -->"
        )

    return README_BLOCK.sub(body, readme), unknown


def readme_problems(readme: str, results: str, link: str = "docs/results.md") -> list[str]:
    """Blocks of a page that differ from what docs/results.md says (empty: the page matches it)."""
    fresh, unknown = update_readme(readme, results, link)
    problems = [f"block reproduced:{i}: no such configuration" for i in unknown]
    old = {m.group("id"): m.group("body") for m in README_BLOCK.finditer(readme)}
    new = {m.group("id"): m.group("body") for m in README_BLOCK.finditer(fresh)}
    problems += [
        f"block reproduced:{i} differs from docs/results.md (run emu reproduce --update-readme)"
        for i in old
        if old[i] != new.get(i)
    ]
    return problems


# ----- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    entries: tuple  # of Entry
    runs: int
    quick: bool

    def overrides(self, entry: Entry) -> tuple:
        return entry.quick if self.quick else entry.full


def make_plan(only: str | None, runs: int | None, quick: bool, entries: tuple = ENTRIES) -> Plan:
    """What to run; ScenarioError names a bad --only name or --runs value.

    `only` is a comma list of scenario names (every configuration of it, e.g.
    smoke's two topologies) or configuration ids (`smoke-fat-tree`). `runs`
    None means 3, or 1 with `quick`.
    """
    if runs is None:
        runs = 1 if quick else 3
    if runs < 1:
        raise ScenarioError(f"--runs {runs}: must be at least 1")
    chosen = list(entries)
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        if not names:
            raise ScenarioError(f"--only {only!r}: expected NAME[,NAME]")
        known = sorted({e.scenario for e in entries} | {e.id for e in entries})
        bad = [n for n in names if n not in known]
        if bad:
            raise ScenarioError(
                f"--only {','.join(bad)}: not a scenario the README quotes; "
                f"choose from {', '.join(known)}"
            )
        chosen = [e for e in entries if e.id in names or e.scenario in names]
    return Plan(tuple(chosen), runs, quick)


def check_overrides(plan: Plan) -> None:
    """Every chosen configuration's parameters parse (before any fabric is built)."""
    for e in plan.entries:
        scenario.resolve_params(scenario.load(e.scenario), list(plan.overrides(e)))


def command_line(plan_only: str | None, runs: int | None, quick: bool, out: str, doc: str) -> str:
    """The command as run, every option explicit, so that it can be run again."""
    argv = ["emu", "reproduce"]
    if runs is not None:
        argv += ["--runs", str(runs)]
    if quick:
        argv.append("--quick")
    if plan_only is not None:
        argv += ["--only", plan_only]
    argv += ["--out", str(out), "--doc", str(doc)]
    # The scheduling is part of what was run: the same command must ask for it
    # again, whatever the default is then.
    return f"{realtime.ENV}={realtime.configured_priority()} " + shlex.join(argv)


# ----- the shell: machine, git, running ---------------------------------------------------


def scheduling_info() -> str:
    """How the runs' switches and NIC agents are scheduled (EMU_RT_PRIORITY, emu/realtime.py)."""
    prio = realtime.configured_priority()
    if prio:
        return f"SCHED_RR {prio} asked ({realtime.ENV}={prio}; each run's report says what it got)"
    return f"normal ({realtime.ENV} unset or 0)"


def machine_info() -> dict:
    """Cores, CPU model, kernel release and total memory of this machine."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                break
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cores": os.cpu_count() or 0,
        "cpu": cpu,
        "kernel": platform.release(),
        "memory": memory,
    }


def git_info(repo: Path | None = None) -> tuple[str, bool]:
    """(short commit, dirty) of the tree emu runs from; ('unknown', False) outside git."""
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return commit.stdout.strip(), bool(status.stdout.strip())


def emu_run_argv(entry: Entry, overrides: tuple, out_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "emu.cli", "run", entry.scenario, "--out", str(out_dir)]
    for o in overrides:
        argv += ["--set", o]
    return argv


def run_once(
    argv: list[str],
    out_dir: Path,
    log_path: Path,
    timeout_s: float,
    index: int,
    after_kill: Callable[[], None] | None = None,
) -> RunRecord:
    """Run `argv` (an `emu run`), its output to `log_path`; read what it left in `out_dir`.

    A run past `timeout_s` gets SIGTERM (emu run tears its fabric down on it),
    then SIGKILL after TERM_GRACE_S, then `after_kill` (emu clean). Ctrl-C,
    SIGTERM or SIGHUP here (emu's main() makes each a KeyboardInterrupt) stops
    the child the same way before it propagates; a second one while the child
    tears down kills it at once, then `after_kill`.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = out_dir / "metrics.json"
    if stale.exists():
        stale.unlink()  # a previous reproduction's: never read it as this run's
    t0 = time.monotonic()
    note = ""
    proc: subprocess.Popen | None = None
    with open(log_path, "w") as log_file:
        try:
            # A signal while the child is being started is acted on once `proc` names
            # it, so that the child is stopped too.
            with registry.signals_held():
                # Its own session: a Ctrl-C at the terminal reaches only us, and we
                # send the child exactly one SIGTERM.
                proc = subprocess.Popen(
                    argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
                )
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code, note = None, f"timed out after {timeout_s:g} s; log {log_path}"
            _stop(proc, after_kill)
        except BaseException:
            if proc is not None:
                _stop(proc, after_kill)
            raise
    doc, why = read_metrics(out_dir)
    if doc is None:
        note = "; ".join(x for x in (note, why, f"log {log_path}") if x)
    return RunRecord(index, str(out_dir), code, doc, time.monotonic() - t0, note)


def _stop(proc: subprocess.Popen, after_kill: Callable[[], None] | None) -> None:
    """One SIGTERM to the run, then wait for it to tear its fabric down.

    Under `registry.signals_held`: a signal to us while we wait must not leave
    the run behind, tearing down on its own or hung. It ends the wait instead:
    the run is killed, `after_kill` (emu clean) removes what it left, and the
    signal is acted on afterwards.
    """
    if proc.poll() is not None:
        return
    with registry.signals_held() as held:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        while not held and time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.1)
                return
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is not None:
            return
        proc.kill()
        proc.wait()
        if after_kill is not None:
            after_kill()


def _emu_clean() -> None:
    subprocess.run([sys.executable, "-m", "emu.cli", "clean"], capture_output=True, timeout=300)


def copy_plots(summary: EntrySummary, plots_dir: Path) -> None:
    """Copy the chosen run's PNGs into `plots_dir`, named per entry; record their names."""
    run = summary.plot_run
    if run is None:
        return
    plots_dir.mkdir(parents=True, exist_ok=True)
    for name in run.doc.get("plots", []):
        src = Path(run.out_dir) / name
        if not src.exists():
            continue
        dst_name = _plot_name(summary.entry, name)
        shutil.copyfile(src, plots_dir / dst_name)
        summary.plots.append(dst_name)


def reproduce(
    plan: Plan, out_dir: str, doc_path: str, command: str, say: Callable[[str], None] = print
) -> list[EntrySummary]:
    """Run the plan, write the markdown to `doc_path` and plots beside it; return the summaries."""
    out = Path(out_dir).resolve()
    doc = Path(doc_path)
    plots_dir = doc.parent / doc.stem  # docs/results.md -> docs/results/
    total = len(plan.entries) * plan.runs
    done = 0
    summaries = []
    # Read before the runs: the commit they ran at (a tree edited meanwhile is not theirs).
    commit, dirty = git_info()
    scheduling = scheduling_info()
    for entry in plan.entries:
        overrides = plan.overrides(entry)
        timeout = entry.timeout_s
        runs = []
        for i in range(1, plan.runs + 1):
            done += 1
            run_dir = out / entry.id / f"run-{i}"
            say(
                f"[{done}/{total}] {entry.id} run {i}/{plan.runs}: emu run {entry.scenario} "
                + " ".join(f"--set {o}" for o in overrides)
            )
            rec = run_once(
                emu_run_argv(entry, overrides, run_dir),
                run_dir,
                out / entry.id / f"run-{i}.log",
                timeout,
                i,
                after_kill=_emu_clean,
            )
            runs.append(rec)
            say(
                f"    exit {'timeout' if rec.exit_code is None else rec.exit_code}, "
                f"{'faithful' if rec.faithful else 'NOT faithful'}, "
                f"{sum(bool(c.get('passed')) for c in rec.checks)}/{len(rec.checks)} checks, "
                f"{rec.seconds:.0f} s" + (f" ({rec.note})" if rec.note else "")
            )
        summary = summarise(entry, overrides, runs)
        copy_plots(summary, plots_dir)
        summaries.append(summary)
    info = {
        "commit": commit,
        "dirty": dirty,
        "machine": machine_info(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "runs": plan.runs,
        "quick": plan.quick,
        "scheduling": scheduling,
    }
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(info, summaries, plots_dir.name)
    if len(plan.entries) < len(ENTRIES) and doc.exists():
        try:
            text = merge_results(doc.read_text(), text)
        except ValueError as exc:
            say(f"{doc}: not a reproduction's doc ({exc}); written anew with these runs only")
    doc.write_text(text)
    return summaries
