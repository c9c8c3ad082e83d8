"""Two reproductions side by side: did a change move any figure the README quotes?

`emu reproduce --compare BEFORE.md --doc AFTER.md` reads two files that `emu
reproduce` wrote (docs/results.md at two commits) and puts each figure's
min/median/max from both beside each other, with a verdict per figure:

- ``within``: the later median lies inside the earlier runs' [min, max], the
  spread the earlier reproduction saw from run to run: the change did not move
  the figure more than the emulator's own noise did;
- ``overlaps``: the later median is outside that spread, but the two spreads
  overlap: a shift no larger than run-to-run noise can explain at a few runs;
- ``moved``: the spreads do not overlap: the change (or the machine) moved it;
- ``only before`` / ``only after``: one side has no value for the figure
  (a figure added or dropped, or no faithful run measured it).

This is the table a redesign shows to say that nothing it did changed what
emu measures (issue 30's acceptance). It judges nothing on its own: a moved
figure is to be explained, not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu import reproduce

WITHIN, OVERLAPS, MOVED, ONLY_BEFORE, ONLY_AFTER = (
    "within",
    "overlaps",
    "moved",
    "only before",
    "only after",
)
_ORDER = (WITHIN, OVERLAPS, MOVED, ONLY_BEFORE, ONLY_AFTER)


@dataclass(frozen=True)
class Spread:
    """One figure's min, median and max over a reproduction's faithful runs."""

    low: float
    median: float
    high: float

    def text(self) -> str:
        return " / ".join(reproduce.fmt(v) for v in (self.low, self.median, self.high))


@dataclass(frozen=True)
class FigureChange:
    """A figure of one configuration in both reproductions, and the verdict."""

    entry: str  # the configuration, with the commits it was measured at
    label: str
    before: Spread | None
    after: Spread | None
    verdict: str


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "—": no faithful run gave it


def _spread(row: list[str]) -> Spread | None:
    values = [_number(c) for c in row[1:4]]
    if len(values) < 3 or any(v is None for v in values):
        return None
    return Spread(*values)


def verdict(before: Spread | None, after: Spread | None) -> str:
    """How `after` stands against `before` (the module's docstring defines the words)."""
    if before is None or after is None:
        return ONLY_AFTER if before is None else ONLY_BEFORE
    if before.low <= after.median <= before.high:
        return WITHIN
    if after.low <= before.high and before.low <= after.high:
        return OVERLAPS
    return MOVED


def compare(before_text: str, after_text: str) -> list[FigureChange]:
    """Every figure of every configuration that either document has, in the entries' order.

    Raises:
        ValueError: either text is not one `emu reproduce` wrote.
    """
    before = reproduce.parse_results(before_text)
    after = reproduce.parse_results(after_text)
    changes = []
    for entry in reproduce.ENTRIES:
        name = (
            f"{entry.id} (`{before.commits.get(entry.id, before.commit)}` -> "
            f"`{after.commits.get(entry.id, after.commit)}`)"
        )
        old = {row[0]: _spread(row) for row in before.figures.get(entry.id, [])}
        new = {row[0]: _spread(row) for row in after.figures.get(entry.id, [])}
        for label in [*new, *(k for k in old if k not in new)]:
            b, a = old.get(label), new.get(label)
            if b is None and a is None:
                continue
            changes.append(FigureChange(name, label, b, a, verdict(b, a)))
    return changes


def render(changes: list[FigureChange]) -> str:
    """A markdown table of `changes`, then the count of each verdict."""
    lines = [
        "| configuration (before -> after) | figure | before: min / median / max "
        "| after | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in changes:
        cells = [
            c.entry,
            c.label,
            c.before.text() if c.before else "—",
            c.after.text() if c.after else "—",
            c.verdict,
        ]
        lines.append("| " + " | ".join(reproduce._cell(x) for x in cells) + " |")
    counts = {v: sum(1 for c in changes if c.verdict == v) for v in _ORDER}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "no figures"]
    return "\n".join(lines) + "\n"
