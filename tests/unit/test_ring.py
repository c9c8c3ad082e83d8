"""The ring all-reduce where it lives, with the NIC model (emu/host/ring.py), and the data
it reduces (emu/host/data.py): the pure ring against numpy on every rank count and
awkward size, its reduce-scatter and all-gather alone against their expected results,
its messages and errors, the inputs and the exact sum with its bound."""

from __future__ import annotations

import doctest
import random
import subprocess
import sys
from collections import deque

import numpy as np
import pytest

import emu.host.data
import emu.host.ring
from emu.host.data import (
    chunk_bounds,
    expected_all_gather,
    expected_reduce_scatter,
    expected_sum,
    rank_input,
)
from emu.host.ring import RingAllReduce

from .fakes import numpy_sum


@pytest.mark.parametrize("module", [emu.host.ring, emu.host.data])
def test_doctests_pass(module):
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


# ----------------------------------------------------------------- the pure ring


def run_ring(arrays, slice_bytes, seed=0, phase="all"):
    """Every rank's RingAllReduce; links are FIFO, the order across links is random."""
    n = len(arrays)
    ring = [RingAllReduce(r, n, arrays[r], slice_bytes=slice_bytes, phase=phase) for r in range(n)]
    wires = [deque(ring[r].start()) for r in range(n)]  # wires[r]: rank r -> rank r+1
    sent = [list(w) for w in wires]
    rng = random.Random(seed)
    while any(wires):
        r = rng.choice([i for i in range(n) if wires[i]])
        nxt = (r + 1) % n
        out = ring[nxt].on_message(wires[r].popleft())
        assert len(out) <= 1  # each received slice is forwarded at once, or is the last step
        wires[nxt].extend(out)
        sent[nxt].extend(out)
    return ring, sent


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize(
    "count,slice_bytes",
    [
        (4096, 1024),  # divisible by every n, several slices per chunk
        (10_007, 2048),  # a prime: uneven chunks, uneven slices
        (333, 64 * 1024),  # one slice per chunk
        (5, 4),  # tiny: chunks and slices of 0 or 1 element
        (1, 1024),  # a single element: every chunk but one is empty
    ],
)
def test_ring_equals_numpy_sum(n, dtype, count, slice_bytes):
    arrays = [rank_input(11, r, count, dtype) for r in range(n)]
    before = [a.copy() for a in arrays]
    ring, sent = run_ring(arrays, slice_bytes, seed=n * count)
    want = numpy_sum(arrays)
    results = [r.result for r in ring]
    assert all(r.done for r in ring)
    if dtype == "int32":
        for res in results:
            assert res.dtype == np.int32 and np.array_equal(res, want)
    else:
        # n-1 float32 additions per element: |error| <= gamma_{n-1} * sum|x| (Higham 4.4).
        k = (n - 1) * 2.0**-24
        bound = np.abs(np.stack(arrays)).astype(np.float64).sum(axis=0) * k / (1 - k)
        for res in results:
            assert res.dtype == np.float32
            assert np.all(np.abs(res.astype(np.float64) - want) <= bound)
    # All-gather copies: every rank holds the very same bytes.
    assert len({res.tobytes() for res in results}) == 1
    # Out of place: the inputs are untouched.
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))
    # Every rank sends 2(n-1) steps of its chunks: 2(n-1)/n of the array when n divides it.
    nslices = ring[0].nslices
    itemsize = arrays[0].itemsize
    for r in range(n):
        assert len(sent[r]) == 2 * (n - 1) * nslices
        assert max(len(m) for m in sent[r]) <= slice_bytes
        chunks = [(r - k) % n for k in range(2 * (n - 1))]
        want_bytes = (
            sum(ring[r].chunk_bounds(c)[1] - ring[r].chunk_bounds(c)[0] for c in chunks) * itemsize
        )
        assert sum(len(m) for m in sent[r]) == want_bytes
        if count % n == 0:
            assert want_bytes == 2 * (n - 1) * count // n * itemsize


def test_int32_sums_wrap_like_nccl():
    big = np.full(8, np.iinfo(np.int32).max, dtype=np.int32)
    ring, _ = run_ring([big, big, np.ones(8, np.int32)], slice_bytes=8)
    assert ring[0].result.tolist() == [-1] * 8  # 2*(2**31-1) + 1 = 2**32 - 1 -> -1


def test_single_rank_is_done_at_start():
    x = rank_input(1, 0, 100, "float32")
    ring = RingAllReduce(0, 1, x)
    assert ring.start() == [] and ring.done and np.array_equal(ring.result, x)


def test_first_step_sends_own_chunk_in_slices():
    x = np.arange(40, dtype=np.int32)
    ring = RingAllReduce(1, 4, x, slice_bytes=16)
    msgs = ring.start()
    lo, hi = ring.chunk_bounds(1)
    assert (lo, hi) == (10, 20) and ring.nslices == 3
    assert b"".join(msgs) == x[10:20].tobytes() and all(len(m) <= 16 for m in msgs)


@pytest.mark.parametrize(
    "args,match",
    [
        (dict(rank=4, nranks=4, data=np.zeros(4, np.int32)), "rank=4"),
        (dict(rank=0, nranks=0, data=np.zeros(4, np.int32)), "nranks=0"),
        (dict(rank=0, nranks=2, data=np.zeros((2, 2), np.int32)), "1-D"),
        (dict(rank=0, nranks=2, data=[1, 2]), "1-D numpy array"),
        (dict(rank=0, nranks=2, data=np.zeros(4, np.float64)), "dtype="),
        (dict(rank=0, nranks=2, data=np.zeros(4, np.int64)), "dtype="),
        (dict(rank=0, nranks=2, data=np.zeros(4, np.int32), slice_bytes=2), "slice_bytes=2"),
        (dict(rank=0, nranks=2, data=np.zeros(4, np.int32), phase="reduce"), "phase='reduce'"),
    ],
)
def test_ring_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        RingAllReduce(**args)


def test_ring_rejects_bad_messages():
    ring = RingAllReduce(0, 2, np.zeros(8, np.int32), slice_bytes=16)
    with pytest.raises(ValueError, match="before start"):
        ring.on_message(bytes(16))
    ring.start()
    with pytest.raises(ValueError, match="has 12 bytes, expected 16"):
        ring.on_message(bytes(12))
    ring.on_message(bytes(16))
    ring.on_message(bytes(16))
    assert ring.done
    with pytest.raises(ValueError, match="message 3 but the ring has 2"):
        ring.on_message(bytes(16))


def test_expected_sum_counts_wrong_elements():
    n, count = 4, 1000
    arrays = [rank_input(3, r, count, "float32") for r in range(n)]
    ring, _ = run_ring(arrays, 512)
    exp = expected_sum(3, n, count, "float32")
    assert exp.wrong(ring[0].result) == 0
    bad = ring[0].result.copy()
    bad[[5, 500]] += np.float32(1e-3)  # far beyond n * 2**-24 * 4
    bad[7] = np.nan
    assert exp.wrong(bad) == 3
    ints = expected_sum(3, n, count, "int32")
    good = numpy_sum([rank_input(3, r, count, "int32") for r in range(n)])
    assert ints.wrong(good) == 0
    good[999] ^= 1 << 30  # one flipped bit is caught: int32 is bit exact
    assert ints.wrong(good) == 1
    assert ints.wrong(good[:10]) == count  # a result of the wrong length is all wrong


def test_inputs_depend_on_seed_and_rank_only():
    a = rank_input(5, 2, 64, "int32")
    assert np.array_equal(a, rank_input(5, 2, 64, "int32"))
    assert not np.array_equal(a, rank_input(5, 3, 64, "int32"))
    assert not np.array_equal(a, rank_input(6, 2, 64, "int32"))
    f = rank_input(5, 2, 100_000, "float")
    assert f.dtype == np.float32 and f.min() >= -1 and f.max() < 1 and f.min() < -0.99
    with pytest.raises(ValueError, match="dtype='int64'"):
        rank_input(5, 2, 64, "int64")


def test_setting_up_a_large_ring_touches_no_page_of_its_working_copy():
    """A NIC agent builds a rank's ring in its loop: copying 16 MB into fresh pages
    there took ~17 ms of page faults while the other ranks sent to it (sharp-allreduce
    was unfaithful by one 30 ms stall). The working copy is written slice by slice
    as the ring goes; setting up faults in none of its 4096 pages."""
    code = """
import resource, numpy as np
from emu.host.ring import RingAllReduce
data = np.ones(4 * 1024 * 1024, dtype=np.int32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ring = RingAllReduce(0, 4, data)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 256, out.stdout


# ----------------------------------------------------------------- the phases alone

PHASE_CASES = [
    (4096, 1024),  # divisible by every n, several slices per chunk
    (10_007, 2048),  # a prime: uneven chunks, uneven slices
    (5, 4),  # tiny: chunks and slices of 0 or 1 element
    (7, 8),  # two slices per chunk of 1 or 2 elements: some slices empty
    (1, 1024),  # a single element: every chunk but one is empty
]


def sent_chunk_bytes(ring, chunks):
    return sum(ring.chunk_bounds(c)[1] - ring.chunk_bounds(c)[0] for c in chunks) * 4


def corrupt(result, dtype):
    """A copy of `result` with element 0 wrong (a flipped bit, or NaN for float32)."""
    bad = result.copy()
    if dtype == "int32":
        bad[0] ^= 1
    else:
        bad[0] = np.nan
    return bad


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("count,slice_bytes", PHASE_CASES)
def test_reduce_scatter_leaves_rank_r_chunk_r_plus_1_of_the_sum(n, dtype, count, slice_bytes):
    arrays = [rank_input(13, r, count, dtype) for r in range(n)]
    before = [a.copy() for a in arrays]
    ring, sent = run_ring(arrays, slice_bytes, seed=n + count, phase="reduce_scatter")
    full, _ = run_ring(arrays, slice_bytes, seed=n + count)  # the whole all-reduce
    for r in range(n):
        lo, hi = chunk_bounds(count, n, (r + 1) % n)
        res = ring[r].result
        assert ring[r].done and res.dtype == np.dtype(dtype) and res.shape == (hi - lo,)
        exp = expected_reduce_scatter(13, n, count, dtype, r)
        assert exp.wrong(res) == 0
        # The same additions in the same order as the all-reduce's first phase.
        assert res.tobytes() == full[r].result[lo:hi].tobytes()
        if hi > lo:
            assert exp.wrong(corrupt(res, dtype)) == 1
        assert exp.wrong(np.zeros(hi - lo + 1, dtype)) == hi - lo  # wrong length: all wrong
        # Steps 0..n-2: chunk (r-k) mod n, each in nslices messages.
        assert len(sent[r]) == (n - 1) * ring[r].nslices
        assert max((len(m) for m in sent[r]), default=0) <= slice_bytes
        want = sent_chunk_bytes(ring[r], [(r - k) % n for k in range(n - 1)])
        assert sum(len(m) for m in sent[r]) == want
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("count,slice_bytes", PHASE_CASES)
def test_all_gather_gives_every_rank_chunk_c_from_rank_c_minus_1(n, dtype, count, slice_bytes):
    arrays = [rank_input(17, r, count, dtype) for r in range(n)]
    before = [a.copy() for a in arrays]
    ring, sent = run_ring(arrays, slice_bytes, seed=n * count, phase="all_gather")
    exp = expected_all_gather(17, n, count, dtype)
    assert exp.tolerance is None  # copies: bit exact, float32 too
    for r in range(n):
        res = ring[r].result
        assert ring[r].done and res.dtype == np.dtype(dtype) and res.shape == (count,)
        assert exp.wrong(res) == 0
        for c in range(n):
            lo, hi = chunk_bounds(count, n, c)
            assert np.array_equal(res[lo:hi], arrays[(c - 1) % n][lo:hi])
        assert exp.wrong(corrupt(res, dtype)) == 1
        # Its own chunk r+1 first, then the chunks it received, (r-k) mod n.
        assert len(sent[r]) == (n - 1) * ring[r].nslices
        assert max((len(m) for m in sent[r]), default=0) <= slice_bytes
        want = sent_chunk_bytes(ring[r], [(r + 1 - k) % n for k in range(n - 1)])
        assert sum(len(m) for m in sent[r]) == want
    assert len({rk.result.tobytes() for rk in ring}) == 1
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))


def test_a_float32_all_gather_one_ulp_off_is_wrong():
    exp = expected_all_gather(3, 3, 100, "float32")
    near = exp.exact.copy()
    near[42] = np.nextafter(near[42], np.float32(2))
    assert exp.wrong(exp.exact.copy()) == 0 and exp.wrong(near) == 1


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_reduce_scatter_then_all_gather_is_the_all_reduce(n, dtype):
    """The two phases as jobs of their own compose into the all-reduce, bit for bit:
    rank r's reduce-scatter result is the chunk it owns in the all-gather."""
    count, slice_bytes = 1001, 256
    arrays = [rank_input(5, r, count, dtype) for r in range(n)]
    rs, _ = run_ring(arrays, slice_bytes, phase="reduce_scatter")
    handed = []
    for r in range(n):
        x = np.zeros(count, dtype)  # elements outside the owned chunk are never sent
        lo, hi = chunk_bounds(count, n, (r + 1) % n)
        x[lo:hi] = rs[r].result
        handed.append(x)
    ag, _ = run_ring(handed, slice_bytes, seed=1, phase="all_gather")
    full, _ = run_ring(arrays, slice_bytes, seed=2)
    assert all(ag[r].result.tobytes() == full[0].result.tobytes() for r in range(n))
    assert expected_sum(5, n, count, dtype).wrong(ag[0].result) == 0


@pytest.mark.parametrize("phase", ["reduce_scatter", "all_gather"])
def test_a_single_rank_phase_is_its_input_at_start(phase):
    x = rank_input(1, 0, 100, "float32")
    ring = RingAllReduce(0, 1, x, phase=phase)
    assert ring.start() == [] and ring.done and np.array_equal(ring.result, x)
    assert ring.result is not x  # out of place
    exp = (
        expected_reduce_scatter(1, 1, 100, "float32", 0)
        if phase == "reduce_scatter"
        else expected_all_gather(1, 1, 100, "float32")
    )
    assert exp.wrong(ring.result) == 0


@pytest.mark.parametrize("phase", ["reduce_scatter", "all_gather"])
def test_a_phase_refuses_messages_beyond_its_steps(phase):
    ring = RingAllReduce(0, 2, np.zeros(8, np.int32), slice_bytes=16, phase=phase)
    ring.start()
    ring.on_message(bytes(16))
    assert ring.done
    with pytest.raises(ValueError, match="message 2 but the ring has 1"):
        ring.on_message(bytes(16))


@pytest.mark.parametrize("count", [1, 5, 7, 40, 10_007])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_chunk_bounds_tile_the_array_as_the_ring_cuts_it(count, n):
    bounds = [chunk_bounds(count, n, c) for c in range(n)]
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(bounds[c][1] == bounds[c + 1][0] for c in range(n - 1))
    assert max(hi - lo for lo, hi in bounds) - min(hi - lo for lo, hi in bounds) <= 1
    ring = RingAllReduce(0, n, np.zeros(count, np.int32), slice_bytes=8)
    assert [ring.chunk_bounds(c) for c in range(n)] == bounds


def test_phase_checks_name_a_bad_chunk_or_rank():
    with pytest.raises(ValueError, match="chunk=3: allowed 0..2"):
        chunk_bounds(10, 3, 3)
    with pytest.raises(ValueError, match="rank=3: allowed 0..2"):
        expected_reduce_scatter(0, 3, 10, "int32", 3)
