"""What a scenario declares for `emu reproduce` and the README: its quoted configurations and figures.

Owns the declaration types and their vocabulary:

- `Entry`: one configuration the README quotes (a scenario, its `--set`
  overrides for the README's run and for `--quick`, a timeout) and its figures;
- `Figure`: one quoted number, a path into a run's `metrics.json["metrics"]`
  (dict keys, list indices, `WILDCARD`) plus, where the README shows a derived
  number (a sum, a ratio, a count), one named operation from `OPS`;
- `per_key`: the same figures for every mode or variant a scenario runs.

A scenario module declares its entries beside its code, as a module-level
`REPRODUCE: tuple[Entry, ...]`, importing from here only (never from
emu/reproduce.py, never from another scenario). A scenario the docs quote
nothing of declares no `REPRODUCE` at all: scenarios/example.py, which stays
short enough to copy. This module does not run anything or read a run:
`emu/reproduce.py` collects the declarations (in docs/results.md's order),
runs them, reads the figures out of each run and writes docs/results.md.
Tested in tests/unit/test_reproduce.py and tests/unit/test_figures.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

# A path into metrics.json["metrics"]: dict keys, list indices (-1 = last), or
# WILDCARD, which maps the rest of the path over every element of a list or
# dict and yields a list.
WILDCARD = "*"


def is_number(x: Any) -> bool:
    """An int or a float, not a bool (True is not a count of one)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(x: Any) -> list[float]:
    """The numbers among a list's items or a dict's values (None and text are skipped)."""
    if isinstance(x, dict):
        x = list(x.values())
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"expected a list or dict, got {type(x).__name__}")
    return [float(v) for v in x if is_number(v)]


def _share(x: dict, pick: Callable) -> float | None:
    vals = _numbers(x)
    total = sum(vals)
    return pick(vals) / total if vals and total else None


# op -> function of the value at `path` (and, for two-path ops, at `other`).
OPS: dict[str, Callable[..., Any]] = {
    "value": lambda a: a,
    "len": lambda a: len(a),
    "sum": lambda a: sum(_numbers(a)),
    "mean": lambda a: statistics.mean(_numbers(a)) if _numbers(a) else None,
    "min": lambda a: min(_numbers(a)) if _numbers(a) else None,
    "max": lambda a: max(_numbers(a)) if _numbers(a) else None,
    # Largest / smallest member's share of the total (ECMP: bytes per top-tier switch).
    "max_share": lambda a: _share(a, max),
    "min_share": lambda a: _share(a, min),
    "ratio": lambda a, b: a / b if b else None,
    "add": lambda a, b: a + b,
}
TWO_PATH_OPS = ("ratio", "add")


@dataclass(frozen=True)
class Figure:
    """One number the README quotes, and where a run's metrics.json holds it.

    `path` (and `other`, for ratio/add) lead into `metrics.json["metrics"]`;
    `op` names an entry of OPS; the result is multiplied by `scale` (units:
    the label says which). A figure a run did not produce (a mode not run, a
    crash) is None for that run, never an error.
    """

    label: str
    path: tuple
    op: str = "value"
    other: tuple = ()
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(
                f"figure {self.label!r}: op {self.op!r} is not one of {', '.join(OPS)}"
            )
        if (self.op in TWO_PATH_OPS) != bool(self.other):
            raise ValueError(
                f"figure {self.label!r}: op {self.op!r} "
                f"{'needs' if self.op in TWO_PATH_OPS else 'takes no'} `other`"
            )


@dataclass(frozen=True)
class Entry:
    """One configuration the README quotes: a scenario, its parameters, its figures."""

    id: str  # unique; the scenario name, or name-variant
    scenario: str  # what `emu run` takes
    title: str
    full: tuple = ()  # --set overrides of the README's configuration
    quick: tuple = ()  # --set overrides for `--quick` (the scenario tests' sizes)
    figures: tuple = ()
    timeout_s: float = 900.0  # per run, full configuration


def per_key(keys: tuple, prefix: tuple, specs: tuple) -> tuple[Figure, ...]:
    """The same figures for each key under `prefix` (each mode, variant or failure of a run).

    Args:
        keys: the keys at `metrics[prefix]`, in the order the README lists them.
        prefix: the path to the dict that holds one result per key.
        specs: `(label, sub_path)` or `(label, sub_path, {Figure keyword: value})`
            tuples; `sub_path` (and an `other` keyword) lead on from
            `prefix + (key,)`.

    Returns:
        One `Figure` per key and spec, labelled `"{key}: {label}"`, key by key.

    Examples:
        >>> [f.label for f in per_key(("off", "on"), ("modes",), (("stalled", ("stalled",)),))]
        ['off: stalled', 'on: stalled']
        >>> (ratio,) = per_key(("a",), ("modes",), (("x/y", ("x",), {"op": "ratio", "other": ("y",)}),))
        >>> ratio.path, ratio.other
        (('modes', 'a', 'x'), ('modes', 'a', 'y'))
    """
    out = []
    for key in keys:
        for label, sub, *rest in specs:
            kw = dict(rest[0]) if rest else {}
            if "other" in kw:
                kw["other"] = prefix + (key,) + kw["other"]
            out.append(Figure(f"{key}: {label}", prefix + (key,) + sub, **kw))
    return tuple(out)
