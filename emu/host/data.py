"""The data that collectives reduce, and its check: element types, each rank's input, the sum.

Owns the element types a collective carries (`DTYPES`, `dtype_name`), rank
r's input (`rank_input`), how an array is cut into one chunk per rank
(`chunk_bounds`, the ring's chunks too), and the exact result with the
bound a correct result keeps to (`ExpectedSum`): of an all-reduce
(`expected_sum`), of the ring's reduce-scatter (`expected_reduce_scatter`:
one rank's chunk of the sum) and of its all-gather (`expected_all_gather`:
every chunk copied from its owner's input), and of a hierarchical
all-reduce over nodes of GPUs whose phases hand their results on
(`expected_hierarchical`). Pure: no sockets, no clock.

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
sum (once per process: ranks whose NICs share a process share it); int32
must match bit for bit, float32 within the recursive-summation bound
gamma_{n-1} * sum_i |x_i| (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., eq. 4.4; gamma_k = k u / (1 - k u), u = 2**-24): the ring
adds each element's n terms in float32, in an order that depends on the
element's chunk, so results differ from a numpy sum in the last bits but
never by more than that bound. A reduce-scatter's chunk keeps to the same
bound, element by element; an all-gather only copies, so it must match bit
for bit in either type.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

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


def chunk_bounds(count: int, nranks: int, chunk: int) -> tuple[int, int]:
    """[lo, hi) element indices of chunk `chunk` when `count` elements are cut into `nranks`.

    Chunk c holds elements [c*count//n, (c+1)*count//n): sizes differ by at
    most one, and some are empty when count < n. The ring cuts its array so
    (emu/host/ring.py) and the reduce-scatter's check takes its chunk so.

    Raises:
        ValueError: a chunk out of 0..nranks-1.

    Examples:
        >>> [chunk_bounds(10, 3, c) for c in range(3)]
        [(0, 3), (3, 6), (6, 10)]
        >>> chunk_bounds(1, 2, 0)
        (0, 0)
    """
    if not 0 <= chunk < nranks:
        raise ValueError(f"chunk={chunk!r}: allowed 0..{nranks - 1}")
    return chunk * count // nranks, (chunk + 1) * count // nranks


@dataclass
class ExpectedSum:
    """The exact result of a job on one rank and how far a correct result may be from it."""

    exact: np.ndarray  # int32 (wrapped), float64 (exact: float32 terms on a 2**-23 grid), float32
    tolerance: np.ndarray | None  # per element bound on |result - exact|; None: bit exact
    whole: ExpectedSum | None = field(default=None, repr=False, compare=False)  # a chunk's sum

    def wrong(self, result: np.ndarray) -> int:
        """Elements of `result` that are not the expected ones (NaN counts as wrong)."""
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
    return _exact_sum([(seed, r) for r in range(nranks)], count, dtype)


#: Sums being held by some rank of this process, by what they sum: the ranks
#: whose NICs share a process (emu/traffic/rdma.py `nic_processes`) check
#: against one regeneration of every input instead of one each (at 8 ranks
#: that regeneration was half of the process's CPU, docs/performance.md); a
#: sum no rank holds any more is freed, as before. A chunk of one (a
#: reduce-scatter's, a hierarchical phase's) holds its whole sum.
_HELD_SUMS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_BUILDING: dict[tuple, threading.Lock] = {}  # a lock per sum being regenerated
_HELD_SUMS_LOCK = threading.Lock()  # ranks build on their agents' worker threads


def _exact_sum(inputs: list[tuple[int, int]], count: int, dtype: str) -> ExpectedSum:
    """The exact sum of the inputs `rank_input(seed, rank)` for (seed, rank) in `inputs`,
    shared with every rank of this process that holds the same one (read only).
    Different sums are regenerated at once (the rings of a rail phase, on threads)."""
    key = (tuple(inputs), int(count), dtype_name(dtype))
    with _HELD_SUMS_LOCK:
        held = _HELD_SUMS.get(key)
        if held is not None:
            return held
        building = _BUILDING.setdefault(key, threading.Lock())
    with building:
        with _HELD_SUMS_LOCK:
            held = _HELD_SUMS.get(key)  # regenerated by the rank this one waited for
        if held is None:
            held = _regenerate_sum(inputs, count, dtype)
            with _HELD_SUMS_LOCK:
                _HELD_SUMS[key] = held
        with _HELD_SUMS_LOCK:
            _BUILDING.pop(key, None)
    return held


def _chunk(whole: ExpectedSum, lo: int, hi: int) -> ExpectedSum:
    """Elements [lo, hi) of `whole`, holding `whole` so that the next rank shares it."""
    tolerance = None if whole.tolerance is None else whole.tolerance[lo:hi].copy()
    return ExpectedSum(whole.exact[lo:hi].copy(), tolerance, whole)


def _regenerate_sum(inputs: list[tuple[int, int]], count: int, dtype: str) -> ExpectedSum:
    name = dtype_name(dtype)
    if name == "int32":
        acc = np.zeros(count, dtype=np.int32)
        for seed, r in inputs:
            acc += rank_input(seed, r, count, name)
        acc.flags.writeable = False
        return ExpectedSum(acc, None)
    acc = np.zeros(count, dtype=np.float64)
    mag = np.zeros(count, dtype=np.float64)
    for seed, r in inputs:
        x = rank_input(seed, r, count, name)
        acc += x
        mag += np.abs(x)
    k = max(len(inputs) - 1, 0) * FLOAT32_UNIT_ROUNDOFF
    tolerance = mag * (k / (1 - k))
    acc.flags.writeable = tolerance.flags.writeable = False
    return ExpectedSum(acc, tolerance)


def expected_hierarchical(
    seeds: Sequence[int], gpus: int, count: int, dtype: str, chunk: int | None = None
) -> ExpectedSum:
    """The all-reduce of every GPU of every node: node k's GPU r holds rank_input(seeds[k], r).

    What a hierarchical all-reduce (reduce-scatter in each node, all-reduce
    of chunk c across the nodes on rail c, all-gather in each node) ends
    with on every GPU; with `chunk`, only chunk c of G (`chunk_bounds(count,
    gpus, c)`): what the all-reduce across the nodes leaves there. The
    float32 bound is the recursive-summation one over all N x G terms, which
    holds whatever the order the phases add them in.

    Raises:
        ValueError: no seed, or a chunk out of 0..gpus-1.

    Examples:
        >>> xs = [rank_input(s, r, 4, "int32") for s in (5, 6) for r in range(2)]
        >>> e = expected_hierarchical([5, 6], 2, 4, "int32", chunk=1)  # elements [2, 4)
        >>> e.wrong(sum(xs)[2:4]), e.wrong(sum(xs)[0:2])
        (0, 2)
    """
    if not seeds:
        raise ValueError("seeds=[]: one per node")
    full = _exact_sum([(s, r) for s in seeds for r in range(gpus)], count, dtype)
    if chunk is None:
        return full
    return _chunk(full, *chunk_bounds(count, gpus, chunk))


def expected_reduce_scatter(
    seed: int, nranks: int, count: int, dtype: str, rank: int
) -> ExpectedSum:
    """What rank `rank` holds after the ring's reduce-scatter: its chunk of the exact sum.

    The ring leaves rank r with chunk (r+1) mod n fully reduced
    (emu/host/ring.py); the sum and its float32 bound are `expected_sum`'s,
    restricted to that chunk's elements (`chunk_bounds`).

    Raises:
        ValueError: a rank out of 0..nranks-1.

    Examples:
        >>> xs = [rank_input(1, r, 5, "int32") for r in range(3)]
        >>> e = expected_reduce_scatter(1, 3, 5, "int32", rank=0)  # chunk 1: elements [1, 3)
        >>> e.wrong((xs[0] + xs[1] + xs[2])[1:3]), e.wrong((xs[0] + xs[1] + xs[2])[0:2])
        (0, 2)
    """
    if not 0 <= rank < nranks:
        raise ValueError(f"rank={rank!r}: allowed 0..{nranks - 1}")
    lo, hi = chunk_bounds(count, nranks, (rank + 1) % nranks)
    return _chunk(expected_sum(seed, nranks, count, dtype), lo, hi)


def expected_all_gather(seed: int, nranks: int, count: int, dtype: str) -> ExpectedSum:
    """What every rank holds after the ring's all-gather: chunk c from its owner's input.

    The owner of chunk c is rank (c-1) mod n, the rank that holds it after
    the ring's reduce-scatter (emu/host/ring.py), so that the two phases
    compose into the all-reduce. Copies only: bit exact in either type.

    Examples:
        >>> xs = [rank_input(2, r, 5, "float32") for r in range(3)]
        >>> gathered = np.concatenate([xs[2][0:1], xs[0][1:3], xs[1][3:5]])
        >>> e = expected_all_gather(2, 3, 5, "float32")
        >>> e.wrong(gathered), e.wrong(xs[0])
        (0, 3)
    """
    name = dtype_name(dtype)
    out = np.empty(count, dtype=DTYPES[name])
    for chunk in range(nranks):
        lo, hi = chunk_bounds(count, nranks, chunk)
        if hi > lo:
            out[lo:hi] = rank_input(seed, (chunk - 1) % nranks, count, name)[lo:hi]
    return ExpectedSum(out, None)
