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
                    and optionally offline(lab: LabRun) -> None, the checks
                    `emu lab test` runs without root or fabric (pure functions,
                    the files read as `check` reads them).
    topology.png    the lab's fabric, drawn by emu.telemetry.draw_fabric
                    (`python -m emu.labs` redraws them; MORE_PICTURES: more fabrics)

A student works on a copy: `emu lab start NAME` copies the starting point to
`labs-work/NAME/` in the current directory (once; their edits are never
overwritten), and `emu lab check NAME` grades that copy, or the untouched
starting point when there is none; `--solution` grades `solution/`.
`emu lab reset NAME` moves the copy aside (a backup) and copies the start again.

Instances. A lab whose answers are facts of the fabric (the faulty link, the
stuck NIC, the ECMP hash's choices) builds them from a seed, so that students
do not share answers: `--seed N`, or a student's name (`--student NAME` or
$EMU_LAB_STUDENT) hashed to a seed, or a random one. `start` records it in the
copy (`instance.yaml`), and `check` grades that same instance. The solution
and the untouched starting point are the lab's reference instance
(`REFERENCE_SEED`, the lab's `SEED`), for which `solution/` is written.

Grading without revealing. `lab.check(...)` records a point with what was
measured against what was expected (thresholds, targets); `lab.grade(...)`
records a graded answer, which is printed as the student's answer and, when
wrong, what is wrong with it, never the right one. CI grades every lab twice
(tests/labs/): the solution must pass and the untouched starting point must
fail with a hint, so that no lab rots; tests/unit/test_labs_secrets.py feeds
every lab's grader every wrong answer and finds the right one in none of the
reports.

Does not own fabrics, scenarios or telemetry: labs use emu's public API
(`emu.net.Fabric`, `emu.scenario`, `emu.faults`, `emu.traffic`) as a user's
script would.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import os
import pkgutil
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import yaml

import labs as labs_package
from emu import fidelity
from emu.runs import RunFabrics

WORK_ROOT = "labs-work"
SOLUTION_DIR = "solution"
RESULTS_ROOT = "results/labs"
CONTRACT = ("TITLE", "MINUTES", "ORDER", "GRADES", "FILES", "start", "check")
INSTANCE_FILE = "instance.yaml"
ENV_STUDENT = "EMU_LAB_STUDENT"
ENV_SEED = "EMU_LAB_SEED"
# A lab without a SEED of its own: its instances differ in nothing the student answers.
REFERENCE_SEED = 0
MAX_SEED = 2**32 - 1
PICTURE = "topology.png"


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
    # A graded answer: `value` is the student's answer, `expected` what is wrong with
    # it (shown only when it failed); the right answer is never held here.
    graded: bool = False


@dataclass
class LabRun:
    """What a lab's `start` or `check` sees: where the work is, where results go, the checks."""

    name: str
    work: Path
    out_dir: Path
    solution: bool = False
    seed: int = REFERENCE_SEED
    student: str | None = None
    checks: list[LabCheck] = field(default_factory=list)
    log: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    # Why the emulator fell behind its links while this check measured ("" when it
    # kept up or nothing was judged): a failed check of such a run may be the
    # emulator's, not the student's, and is not evidence either way (DESIGN.md).
    unfaithful: str = ""
    # The fabrics this check opened and their fidelity (emu/runs.py), judged at its end.
    fabrics: RunFabrics = field(init=False)

    def __post_init__(self) -> None:
        self.fabrics = RunFabrics(self.out_dir)

    def fabric(self, graph, label: str = "", **options):
        """`with lab.fabric(graph(), qos=...) as fab:` a fabric (emu.net.Fabric's options)
        with its results in out_dir/label, its fidelity judged with the check's."""
        return self.fabrics.open(graph, label, **options)

    def check(self, name: str, passed: bool, value: Any, expected: str, hint: str) -> bool:
        """Record a measured point against its target (a threshold the student is meant to
        know, not an answer to find); `hint` is what a student who failed it should look at."""
        self.checks.append(LabCheck(name, bool(passed), value, expected, hint))
        return bool(passed)

    def grade(self, name: str, passed: bool, answer: Any, wrong: str, hint: str) -> bool:
        """Record a graded answer without its right value.

        Args:
            name: the question.
            passed: whether `answer` is right.
            answer: the student's answer as they wrote it (blank: None or "").
            wrong: what is wrong with `answer` when it failed ("the link you named
                carries no loss"); it must not name the right answer.
            hint: where to look; it must not name the right answer either.
        """
        shown = "(blank)" if answer is None or str(answer).strip() == "" else answer
        self.checks.append(LabCheck(name, bool(passed), shown, wrong, hint, graded=True))
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

    def open_fabric(self, name: str, hint: str, graph, label: str = "", **options):
        """A fabric built around the student's work (`fabric`'s arguments), up; or None.

        A fabric that the student's files keep from starting (a config a switch
        refuses, a policy that raises in the controller) is a failed check named
        `name`, with `hint` and the first line of the error, and is closed again;
        anything else propagates. The caller ends a fabric that started with
        `close_fabric`.
        """
        from emu.registry import FabricError

        try:
            return self.fabrics.start(graph, label, **options)
        except FabricError as exc:
            self.check(name, False, str(exc).splitlines()[0][:200], "the fabric up", hint)
            return None

    def close_fabric(self, fab) -> None:
        """End a fabric `open_fabric` gave, keeping what it measured of itself."""
        self.fabrics.stop(fab)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


def spelled(name: str) -> str:
    """A lab's name as `emu lab` takes it: dashes, as scenarios are spelled (`pause-storm`)."""
    return name.replace("_", "-")


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


@dataclass(frozen=True)
class Instance:
    """Which instance of a lab: its seed, and the student's name it came from, if any."""

    seed: int
    student: str | None = None
    source: str = "reference"  # --seed, --student, $EMU_LAB_STUDENT, $EMU_LAB_SEED, random

    def describe(self, reference: int) -> str:
        who = f", student {self.student}" if self.student else ""
        ref = ", the reference instance" if self.seed == reference and not self.student else ""
        return f"seed {self.seed}{who}{ref}"


def reference_seed(name: str) -> int:
    """The seed `solution/` is written for: the lab's SEED, else REFERENCE_SEED."""
    return int(getattr(load(name), "SEED", REFERENCE_SEED))


def parse_seed(text: Any, where: str) -> int:
    """An integer 0..MAX_SEED from `text`; LabError naming `where` otherwise."""
    try:
        seed = int(str(text).strip(), 10)
    except ValueError:
        seed = -1
    if isinstance(text, bool) or not 0 <= seed <= MAX_SEED:
        raise LabError(f"{where}: {text!r} is not a seed (an integer 0..{MAX_SEED})")
    return seed


def student_seed(name: str, student: str) -> int:
    """The seed of `student`'s instance of lab `name`: the same name, the same instance.

    The lab's name is hashed in, so that one student's answers differ from lab to
    lab; case and surrounding blanks are not, so that "Alice " is alice.
    """
    clean = student.strip().lower()
    if not clean or any(c in clean for c in "\n\r\0"):
        raise LabError(f"--student: {student!r} is not a name (one line, not blank)")
    digest = hashlib.sha256(f"emu-lab/{name}/{clean}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def requested_instance(
    name: str,
    student: str | None = None,
    seed: Any = None,
    environ: Any = None,
) -> Instance | None:
    """The instance the command line or the environment asks for; None when neither does."""
    environ = os.environ if environ is None else environ
    if student is not None and seed is not None:
        raise LabError("--student and --seed: give one of them, not both")
    if seed is not None:
        return Instance(parse_seed(seed, "--seed"), None, "--seed")
    if student is not None:
        return Instance(student_seed(name, student), student.strip(), "--student")
    if environ.get(ENV_STUDENT, "").strip():
        who = environ[ENV_STUDENT].strip()
        return Instance(student_seed(name, who), who, f"${ENV_STUDENT}")
    if environ.get(ENV_SEED, "").strip():
        return Instance(parse_seed(environ[ENV_SEED], f"${ENV_SEED}"), None, f"${ENV_SEED}")
    return None


def read_instance(work: Path) -> Instance | None:
    """The instance recorded in a student's copy; None when it has no record."""
    path = Path(work) / INSTANCE_FILE
    if not path.is_file():
        return None
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LabError(f"{path}: cannot be read ({exc}); `emu lab reset` writes it anew") from None
    if not isinstance(doc, dict) or "seed" not in doc:
        raise LabError(f"{path}: holds no 'seed:'; `emu lab reset` writes it anew")
    student = doc.get("student")
    return Instance(parse_seed(doc["seed"], f"{path}: seed"), student and str(student), "recorded")


def write_instance(work: Path, name: str, instance: Instance) -> None:
    lines = [
        f"# Which instance of lab {name} this copy is: `emu lab check {spelled(name)}` grades",
        "# this one. Do not edit: `emu lab reset NAME --student NAME` starts over as another.",
        f"lab: {name}",
        f"seed: {instance.seed}",
    ]
    if instance.student:
        lines.append(f"student: {json.dumps(instance.student)}")
    (Path(work) / INSTANCE_FILE).write_text("\n".join(lines) + "\n")


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


def instance_for(
    name: str, work: Path, solution: bool, student: str | None = None, seed: Any = None
) -> Instance:
    """The instance that grades `work`: the one recorded in it, else the one asked for,
    else the reference. The solution is written for the reference instance only."""
    asked = requested_instance(name, student, seed, environ={}) if not solution else None
    reference = Instance(reference_seed(name))
    if solution:
        if student is not None or seed is not None:
            raise LabError(
                f"lab {name}: solution/ answers the reference instance (seed "
                f"{reference.seed}) only; grade a student's copy with --work DIR"
            )
        return reference
    recorded = read_instance(work)
    if recorded is not None:
        if asked is not None and asked.seed != recorded.seed:
            raise LabError(
                f"{Path(work) / INSTANCE_FILE}: this copy is {recorded.describe(reference.seed)}, "
                f"not {asked.describe(reference.seed)}; `emu lab reset {spelled(name)}` starts over"
            )
        return recorded
    if asked is not None:
        return asked
    if Path(work).resolve() == lab_dir(name).resolve():
        return reference
    return requested_instance(name) or reference


def copy_starting_point(name: str, student: str | None = None, seed: Any = None) -> Path:
    """`labs-work/NAME/` with the lab's starting files and its instance (`read_instance`).

    An existing copy is left as it is, and keeps its instance (asking for another
    is a LabError that says how to start over); a new one gets the instance asked
    for (--seed, --student, the environment) or a random one, recorded in it.
    """
    dest = Path(WORK_ROOT) / name
    asked = requested_instance(name, student, seed)
    existing = read_instance(dest) if dest.is_dir() else None
    reference = reference_seed(name)
    if existing is not None and asked is not None and asked.seed != existing.seed:
        raise LabError(
            f"{dest}/ is {existing.describe(reference)}, not {asked.describe(reference)}: "
            f"`emu lab reset {spelled(name)}{_flags(asked)}` starts over (your copy is kept as a backup)"
        )
    if existing is None and dest.is_dir():
        # A copy made before instances were recorded was graded on the reference one.
        existing = asked or Instance(reference)
        write_instance(dest, name, existing)
    instance = existing or asked or Instance(secrets.randbelow(MAX_SEED + 1), None, "random")
    _copy_files(name, dest)
    if read_instance(dest) is None:
        write_instance(dest, name, instance)
    return dest


def _copy_files(name: str, dest: Path) -> None:
    """The lab's starting files into `dest`, each only where it is not there yet."""
    dest.mkdir(parents=True, exist_ok=True)
    for filename in load(name).FILES:
        target = dest / filename
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lab_dir(name) / filename, target)


def _flags(instance: Instance) -> str:
    if instance.student:
        return f" --student {json.dumps(instance.student)}"
    return f" --seed {instance.seed}"


@dataclass
class Reset:
    """What `reset` did: the fresh copy, where the old one went, the instance kept or chosen."""

    work: Path
    backup: Path | None
    instance: Instance
    files: tuple[str, ...]


def reset(name: str, student: str | None = None, seed: Any = None) -> Reset:
    """Put `labs-work/NAME/` back to the starting point; the old copy becomes a backup.

    The instance stays the copy's own unless --student/--seed (or the
    environment) asks for another. The backup is `labs-work/NAME.backup-TIME/`,
    never deleted by emu.
    """
    module = load(name)
    dest = Path(WORK_ROOT) / name
    asked = requested_instance(name, student, seed)
    backup = None
    old = None
    if dest.exists():
        try:
            old = read_instance(dest)
        except LabError:
            old = None  # a broken record is one more reason to reset
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = dest.with_name(f"{name}.backup-{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = dest.with_name(f"{name}.backup-{stamp}-{n}")
        dest.rename(backup)
    instance = asked or old or Instance(secrets.randbelow(MAX_SEED + 1), None, "random")
    _copy_files(name, dest)
    write_instance(dest, name, instance)
    return Reset(dest, backup, instance, tuple(module.FILES))


def new_run(
    name: str,
    work: Path,
    out: str | None,
    solution: bool,
    log=print,
    instance: Instance | None = None,
) -> LabRun:
    out_dir = Path(out or f"{RESULTS_ROOT}/{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    instance = instance or Instance(reference_seed(name))
    return LabRun(
        name=name,
        work=work,
        out_dir=out_dir,
        solution=solution,
        log=log,
        seed=instance.seed,
        student=instance.student,
    )


def check(
    name: str,
    solution: bool = False,
    work: str | None = None,
    out: str | None = None,
    log: Callable[[str], None] = print,
    student: str | None = None,
    seed: Any = None,
) -> LabRun:
    """Grade lab `name`'s work; returns the run with its checks (also when a check raised)."""
    module = load(name)
    chosen = work_dir(name, solution, work)
    instance = instance_for(name, chosen, solution, student, seed)
    run = new_run(name, chosen, out, solution, log, instance)
    try:
        module.check(run)
    except LabError as exc:
        run.check("the work can be read", False, str(exc), "valid files", str(exc))
    if not run.checks:
        run.check("the lab graded something", False, 0, ">= 1 check", "a lab defect: report it")
    judge_fidelity(run)
    return run


def judge_fidelity(run: LabRun) -> None:
    """Whether the emulator kept up with every fabric this check ran (the records
    each kept as it closed, emu/runs.py); the reasons, when it did not, go to
    `run.unfaithful`."""
    records = run.fabrics.records()
    verdict = fidelity.judge(records)
    if records and not verdict.faithful:
        run.unfaithful = "; ".join(f.text for f in verdict.failures())


def offline(
    name: str, solution: bool = False, work: str | None = None, log: Callable[[str], None] = print
) -> LabRun:
    """Run lab `name`'s offline tests (no root, no fabric) on its work; returns the run.

    Raises:
        LabError: the lab has none (its work is graded on packets only).
    """
    module = load(name)
    if not hasattr(module, "offline"):
        raise LabError(
            f"lab {name} has no offline tests: its work is graded on real packets "
            f"(sudo emu lab check {spelled(name)})"
        )
    chosen = work_dir(name, solution, work)
    run = LabRun(name=name, work=chosen, out_dir=chosen, solution=solution, log=log)
    run.seed = instance_for(name, chosen, solution).seed
    try:
        module.offline(run)
    except LabError as exc:
        run.check("the work can be read", False, str(exc), "valid files", str(exc))
    if not run.checks:
        run.check("the lab tested something", False, 0, ">= 1 check", "a lab defect: report it")
    return run


def picture(name: str) -> Path:
    """The lab's topology picture, shipped beside its handout."""
    return lab_dir(name) / PICTURE


def draw_picture(name: str, path: Path | None = None) -> Path:
    """Draw lab `name`'s fabric (its `graph()`) with emu's own drawing code.

    The PNGs in labs/ are made with this (`python -m emu.labs`), so that a
    lab whose fabric changes gets its picture redrawn the same way.
    """
    from emu.telemetry import draw_fabric

    module = load(name)
    if not hasattr(module, "graph"):
        raise LabError(f"lab {name}: no graph() to draw")
    return draw_fabric(module.graph(), Path(path or picture(name)))


def describe_instance(run: LabRun) -> str:
    if not hasattr(load(run.name), "SEED"):
        return "one instance for everyone: nothing it grades depends on a seed"
    return Instance(run.seed, run.student).describe(reference_seed(run.name))


def render(run: LabRun) -> str:
    """The grading report: one line per check, its hint under a failed one, a verdict."""
    lines = [f"lab {run.name}: grading {run.work} ({describe_instance(run)})"]
    for c in run.checks:
        if c.graded:
            # A graded answer shows what the student wrote and what is wrong with it.
            said = f"your answer {c.value}" + ("" if c.passed else f": {c.expected}")
            lines.append(f"  [{'PASS' if c.passed else 'FAIL'}] {c.name}: {said}")
        else:
            lines.append(
                f"  [{'PASS' if c.passed else 'FAIL'}] {c.name}: {c.value} (expected {c.expected})"
            )
        if not c.passed and c.hint:
            lines.append(f"         hint: {c.hint}")
    if run.unfaithful and not run.passed:
        lines.append(
            f"  the emulator fell behind its links during this check ({run.unfaithful}): "
            "a failed check may be the machine's, not your work's; close other programs "
            "and check again"
        )
    passed = sum(c.passed for c in run.checks)
    verdict = "PASSED" if run.passed else "NOT YET"
    lines.append(
        f"{verdict}: {passed} of {len(run.checks)} checks passed ({time.monotonic() - run.started:.0f} s)"
    )
    return "\n".join(lines)


if __name__ == "__main__":  # python -m emu.labs: redraw every lab's topology pictures
    from emu.telemetry import draw_fabric

    for lab_name, lab_module in available().items():
        print(f"drew {draw_picture(lab_name)}")
        # A lab graded on more than one fabric: {file name: graph builder}.
        for filename, build in getattr(lab_module, "MORE_PICTURES", {}).items():
            print(f"drew {draw_fabric(build(), lab_dir(lab_name) / filename)}")
