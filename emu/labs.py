"""Teaching labs: the catalogue, a student's copy of a lab, and grading it on real packets.

Owns what `emu lab list|start|check` do and the contract every lab keeps. A
lab is a package `labs/<name>/` (shipped with emu) holding:

    README.md       goal, background with sources, numbered steps, questions,
                    the expected time
    the starting    the files named by `FILES` (answers to fill in, a config
      point         to tune, a skeleton app with TODOs)
    solution/       the same files, done
    __init__.py     TITLE, MINUTES, ORDER, GRADES (one line: what the check
                    measures), FILES, and two functions:
                      start(lab: LabRun) -> None   build the lab's fabric, open the CLI
                      check(lab: LabRun) -> None   measure the work on real
                                                   packets; lab.check(...) per point

A student works on a copy: `emu lab start NAME` copies the starting point to
`labs-work/NAME/` in the current directory (once; their edits are never
overwritten), and `emu lab check NAME` grades that copy, or the untouched
starting point when there is none; `--solution` grades `solution/`. Each
check prints PASS or FAIL with what was measured against what was expected,
and a failed one its hint. CI grades every lab twice (tests/labs/): the
solution must pass and the untouched starting point must fail with a hint,
so that no lab rots.

Does not own fabrics, scenarios or telemetry: labs use emu's public API
(`emu.net.Fabric`, `emu.scenario`, `emu.faults`, `emu.traffic`) as a user's
script would.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import yaml

import labs as labs_package

WORK_ROOT = "labs-work"
SOLUTION_DIR = "solution"
RESULTS_ROOT = "results/labs"
CONTRACT = ("TITLE", "MINUTES", "ORDER", "GRADES", "FILES", "start", "check")


class LabError(ValueError):
    """A lab name, a lab's files or a student's file is wrong; the message names it."""


@dataclass
class LabCheck:
    """One graded point: what was measured against what was expected, and a hint if it failed."""

    name: str
    passed: bool
    value: Any
    expected: str
    hint: str = ""


@dataclass
class LabRun:
    """What a lab's `start` or `check` sees: where the work is, where results go, the checks."""

    name: str
    work: Path
    out_dir: Path
    solution: bool = False
    checks: list[LabCheck] = field(default_factory=list)
    log: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)

    def check(self, name: str, passed: bool, value: Any, expected: str, hint: str) -> bool:
        """Record one graded point; `hint` is what a student who failed it should look at."""
        self.checks.append(LabCheck(name, bool(passed), value, expected, hint))
        return bool(passed)

    def path(self, filename: str) -> Path:
        """A file of the work (the student's copy, the starting point or the solution)."""
        return self.work / filename

    def answers(self, filename: str = "answers.yaml", keys: tuple[str, ...] = ()) -> dict:
        """The YAML mapping in `filename`; a syntax error is a LabError naming file and line.

        `keys`: the only keys the lab reads; any other is a LabError naming it, so
        that a student's typo is not silently a blank answer.
        """
        path = self.path(filename)
        try:
            text = path.read_text()
        except OSError as exc:
            raise LabError(f"{path}: cannot read: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise LabError(f"{where}: not valid YAML: {problem}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise LabError(f"{path}: expected 'key: value' lines, found {type(data).__name__}")
        unknown = sorted(set(map(str, data)) - set(keys)) if keys else []
        if unknown:
            raise LabError(f"{path}: {', '.join(unknown)}: this lab reads {', '.join(keys)} only")
        return data

    def open_fabric(self, fab: Any, name: str, hint: str) -> bool:
        """Open `fab` (an unopened emu.net.Fabric built around the student's work).

        A fabric that the student's files keep from starting (a config a switch
        refuses, a policy that raises in the controller) is a failed check named
        `name`, with `hint` and the first line of the error, and is closed again;
        anything else propagates. The caller closes a fabric that started.
        """
        from emu.registry import FabricError

        try:
            fab.open()
        except FabricError as exc:
            fab.close()  # what open() built before it failed
            self.check(name, False, str(exc).splitlines()[0][:200], "the fabric up", hint)
            return False
        return True

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


def available() -> dict[str, ModuleType]:
    """Every lab package under `labs/`, in the catalogue's order."""
    found = {}
    for info in pkgutil.iter_modules(labs_package.__path__):
        if info.ispkg:
            module = importlib.import_module(f"labs.{info.name}")
            missing = [name for name in CONTRACT if not hasattr(module, name)]
            if missing:
                raise LabError(f"lab {info.name}: labs/{info.name}/__init__.py lacks {missing}")
            found[info.name] = module
    return dict(sorted(found.items(), key=lambda kv: (kv[1].ORDER, kv[0])))


def load(name: str) -> ModuleType:
    labs = available()
    if name not in labs:
        raise LabError(f"unknown lab {name!r}; labs: {', '.join(labs)}")
    return labs[name]


def lab_dir(name: str) -> Path:
    return Path(load(name).__file__).resolve().parent


def work_dir(name: str, solution: bool = False, work: str | None = None) -> Path:
    """Which files to grade: `work` if given, the solution, the student's copy, or the start."""
    module = load(name)
    if work is not None:
        chosen = Path(work)
    elif solution:
        chosen = lab_dir(name) / SOLUTION_DIR
    elif (Path(WORK_ROOT) / name).is_dir():
        chosen = Path(WORK_ROOT) / name
    else:
        chosen = lab_dir(name)
    for filename in module.FILES:
        if not (chosen / filename).is_file():
            raise LabError(f"lab {name}: {chosen / filename} is missing")
    return chosen


def copy_starting_point(name: str) -> Path:
    """`labs-work/NAME/` with the lab's starting files; an existing copy is left as it is."""
    module = load(name)
    dest = Path(WORK_ROOT) / name
    dest.mkdir(parents=True, exist_ok=True)
    for filename in module.FILES:
        target = dest / filename
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lab_dir(name) / filename, target)
    return dest


def new_run(name: str, work: Path, out: str | None, solution: bool, log=print) -> LabRun:
    out_dir = Path(out or f"{RESULTS_ROOT}/{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    return LabRun(name=name, work=work, out_dir=out_dir, solution=solution, log=log)


def check(
    name: str,
    solution: bool = False,
    work: str | None = None,
    out: str | None = None,
    log: Callable[[str], None] = print,
) -> LabRun:
    """Grade lab `name`'s work; returns the run with its checks (also when a check raised)."""
    module = load(name)
    run = new_run(name, work_dir(name, solution, work), out, solution, log)
    try:
        module.check(run)
    except LabError as exc:
        run.check("the work can be read", False, str(exc), "valid files", str(exc))
    if not run.checks:
        run.check("the lab graded something", False, 0, ">= 1 check", "a lab defect: report it")
    return run


def render(run: LabRun) -> str:
    """The grading report: one line per check, its hint under a failed one, a verdict."""
    lines = [f"lab {run.name}: grading {run.work}"]
    for c in run.checks:
        lines.append(
            f"  [{'PASS' if c.passed else 'FAIL'}] {c.name}: {c.value} (expected {c.expected})"
        )
        if not c.passed and c.hint:
            lines.append(f"         hint: {c.hint}")
    passed = sum(c.passed for c in run.checks)
    verdict = "PASSED" if run.passed else "NOT YET"
    lines.append(
        f"{verdict}: {passed} of {len(run.checks)} checks passed ({time.monotonic() - run.started:.0f} s)"
    )
    return "\n".join(lines)
