"""The data that collectives reduce, and its check: element types, each rank's input, the sum.

Owns the element types a collective carries (`DTYPES`, `dtype_name`), rank
r's input (`rank_input`) and the exact result with the bound a correct
result keeps to (`expected_sum`, `ExpectedSum`). Pure: no sockets, no clock.

Who uses it: a rank inside a host agent builds its input and checks its own
result (emu/host/collective.py, `RankData`); the ring (emu/host/ring.py)
takes its element types from here; the driver in the test or scenario
process (emu/traffic/collectives.py) checks its arguments with the same
names. Not owned here: the algorithms (emu/host/ring.py, emu/host/sharp.py),
the report (emu/traffic/collectives.py).

Data: rank r's input is `rank_input(seed, r, count, dtype)` (numpy's
default_rng seeded with (seed, r)): int32 over its whole range (sums wrap
modulo 2**32, which is exact whatever the order), float32 uniform in [-1, 1).
Every rank regenerates all inputs, one array at a time, to know the exact
sum; int32 must match bit for bit, float32 within the recursive-summation
bound gamma_{n-1} * sum_i |x_i| (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., eq. 4.4; gamma_k = k u / (1 - k u), u = 2**-24): the ring
adds each element's n terms in float32, in an order that depends on the
element's chunk, so results differ from a numpy sum in the last bits but
never by more than that bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Little-endian on the wire and in memory, whatever the machine.
DTYPES = {"int32": np.dtype("<i4"), "float32": np.dtype("<f4")}
_DTYPE_ALIASES = {"int32": "int32", "int": "int32", "float32": "float32", "float": "float32"}
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def is_int(value: Any) -> bool:
    """An int that is not a bool (JSON arguments)."""
    return isinstance(value, int) and not isinstance(value, bool)


def dtype_name(dtype: str | np.dtype) -> str:
    """The canonical name ("int32" or "float32") of `dtype`.

    Raises:
        ValueError: any other type.

    Examples:
        >>> dtype_name("float"), dtype_name(np.int32)
        ('float32', 'int32')
    """
    try:
        key = dtype if isinstance(dtype, str) else str(np.dtype(dtype))
    except (TypeError, ValueError):
        key = None
    name = _DTYPE_ALIASES.get(key) if isinstance(key, str) else None
    if name is None:
        raise ValueError(f"dtype={dtype!r}: allowed {sorted(_DTYPE_ALIASES)}")
    return name


def rank_input(seed: int, rank: int, count: int, dtype: str) -> np.ndarray:
    """Rank `rank`'s input: `count` elements from numpy's default_rng((seed, rank)).

    Examples:
        >>> a = rank_input(7, 1, 4, "float32")
        >>> a.dtype.name, bool((a >= -1).all() and (a < 1).all())
        ('float32', True)
        >>> bool((a == rank_input(7, 1, 4, "float32")).all())
        True
    """
    name = dtype_name(dtype)
    rng = np.random.default_rng([int(seed), int(rank)])
    if name == "int32":
        info = np.iinfo(np.int32)
        return rng.integers(info.min, info.max, size=count, dtype=np.int32, endpoint=True)
    # k * 2**-24 in [0, 1) -> 2x - 1 is exact in float32: [-1, 1) on a 2**-23 grid.
    return rng.random(count, dtype=np.float32) * np.float32(2) - np.float32(1)


@dataclass
class ExpectedSum:
    """The exact all-reduce result of a job and how far a correct result may be from it."""

    exact: np.ndarray  # int32 (wrapped) or float64 (exact: float32 terms on a 2**-23 grid)
    tolerance: np.ndarray | None  # float32 only: per element bound on |result - exact|

    def wrong(self, result: np.ndarray) -> int:
        """Elements of `result` that are not the sum (NaN counts as wrong)."""
        if result.shape != self.exact.shape:
            return int(self.exact.size)
        if self.tolerance is None:
            return int(np.count_nonzero(result != self.exact))
        ok = np.abs(result.astype(np.float64) - self.exact) <= self.tolerance
        return int(ok.size - np.count_nonzero(ok))


def expected_sum(seed: int, nranks: int, count: int, dtype: str) -> ExpectedSum:
    """Regenerate every rank's input, one array at a time, and sum them exactly.

    int32 sums wrap modulo 2**32 like the ring's (exact, any order). float32
    terms are multiples of 2**-23 in [-1, 1), so their float64 sum is exact
    for fewer than 2**29 ranks; the tolerance is gamma_{n-1} * sum |x_i|.

    Examples:
        >>> e = expected_sum(1, 3, 5, "int32")
        >>> r = rank_input(1, 0, 5, "int32") + rank_input(1, 1, 5, "int32") \\
        ...     + rank_input(1, 2, 5, "int32")
        >>> e.wrong(r)
        0
    """
    name = dtype_name(dtype)
    if name == "int32":
        acc = np.zeros(count, dtype=np.int32)
        for r in range(nranks):
            acc += rank_input(seed, r, count, name)
        return ExpectedSum(acc, None)
    acc = np.zeros(count, dtype=np.float64)
    mag = np.zeros(count, dtype=np.float64)
    for r in range(nranks):
        x = rank_input(seed, r, count, name)
        acc += x
        mag += np.abs(x)
    k = max(nranks - 1, 0) * FLOAT32_UNIT_ROUNDOFF
    return ExpectedSum(acc, mag * (k / (1 - k)))
