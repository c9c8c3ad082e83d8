"""The host side of in-network all-reduce (emu/host/sharp.py) against real switch engines.

Four `SharpAllReduce` ranks talk to the hand-wired two-level tree of
test_aggregation_engine (two leaf engines, one root engine) in virtual time:
frames in flight can be lost, and the ranks' timeouts recover them. Results are
checked against numpy.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from emu.host.sharp import SharpAllReduce
from emu.proto import agg

from .fakes import HOSTS, JOB, JOB_IP, JOB_MAC, LEAF_AT, Tree

RATE_BPS = 10e6


def _ranks(data: dict[str, np.ndarray], nslots: int, first_seq: int = 0) -> dict:
    return {
        h: SharpAllReduce(
            data[h],
            rank=rank,
            job_id=JOB,
            job_ip=JOB_IP,
            job_mac=JOB_MAC,
            nslots=nslots,
            src_mac=mac,
            src_ip=ip,
            first_seq=first_seq,
            rate_bps=RATE_BPS,
            now=0.0,
        )
        for h, (_leaf, _port, mac, ip, rank) in HOSTS.items()
    }


def _run(
    tree: Tree,
    ranks: dict,
    loss: float = 0.0,
    seed: int = 1,
    max_steps: int = 10**6,
    lose=None,
    until=None,
):
    """Send what each rank may, deliver frames (some lost), advance time to the next timeout.

    `lose(src, port, pkt)` replaces random loss; `until()` replaces "every rank is done".
    """
    rng = random.Random(seed)
    tree.lose = lose or (lambda src, port, pkt: rng.random() < loss)
    now = 0.0
    for _ in range(max_steps):
        if until() if until else all(r.done for r in ranks.values()):
            return now
        progressed = False
        for h, r in ranks.items():
            frame = r.next_frame(now)
            while frame is not None:
                progressed = True
                if rng.random() >= loss:
                    tree.send(h, frame)
                frame = r.next_frame(now)
        while tree.pool:
            progressed = True
            tree.step()
            for h, box in tree.inbox.items():
                while box:
                    pkt = box.pop(0)
                    frame = agg.AggTemplate(
                        "02:00:00:00:ff:ff", "02:00:00:00:00:01", JOB_IP, pkt.dst_ip
                    ).frame(
                        pkt.kind,
                        pkt.dtype,
                        pkt.job_id,
                        pkt.seq,
                        pkt.slot,
                        pkt.payload,
                        rank=pkt.rank,
                    )
                    assert ranks[h].on_frame(frame, now)
        if not progressed:
            wakeups = [w for r in ranks.values() if (w := r.next_wakeup(now)) is not None]
            assert wakeups, "no rank is done and none has anything left to send: stalled"
            now = max(now, min(wakeups))
    raise AssertionError("did not finish")


def _inputs(dtype: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return {h: rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32) for h in HOSTS}
    return {h: rng.uniform(-1, 1, n).astype(np.float32) for h in HOSTS}


def _expected(data: dict[str, np.ndarray]) -> np.ndarray:
    stack = np.stack(list(data.values()))
    return np.sum(stack, axis=0, dtype=stack.dtype)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 5000])
def test_every_rank_gets_the_sum(dtype: str, n: int) -> None:
    data = _inputs(dtype, n)
    tree = Tree(nslots=8)
    ranks = _ranks(data, nslots=8)
    _run(tree, ranks)
    want = _expected(data)
    for r in ranks.values():
        if dtype == "int32":
            assert r.result.tobytes() == want.tobytes()
        else:
            np.testing.assert_allclose(r.result, want, rtol=1e-6, atol=1e-6)
        assert r.stats.retransmitted == 0 and r.stats.duplicate_results == 0
        # SHARP sends the data once: S bytes of payload per rank.
        assert r.stats.payload_bytes_sent == 4 * n


def test_lost_frames_are_recovered_by_timeouts_without_double_counting() -> None:
    data = _inputs("int32", 4000, seed=3)
    tree = Tree(nslots=4)
    ranks = _ranks(data, nslots=4)
    _run(tree, ranks, loss=0.05, seed=7)
    want = _expected(data)
    assert all(r.result.tobytes() == want.tobytes() for r in ranks.values())
    assert sum(r.stats.retransmitted for r in ranks.values()) > 0
    leaf = tree.engines["leaf1"].report()["jobs"][str(JOB)]
    assert leaf["duplicates"] > 0  # retransmissions reached the switch and were not re-added


class _LateRank:
    """A rank whose compute step ends at `at`: it sends nothing before."""

    def __init__(self, rank: SharpAllReduce, at: float) -> None:
        self.rank, self.at = rank, at

    done = property(lambda self: self.rank.done)
    result = property(lambda self: self.rank.result)

    def next_frame(self, now: float):
        return self.rank.next_frame(now) if now >= self.at else None

    def next_wakeup(self, now: float):
        return self.rank.next_wakeup(now) if now >= self.at else self.at

    def on_frame(self, frame: bytes, now: float) -> bool:
        return self.rank.on_frame(frame, now)


class _PacedRank(_LateRank):
    """A rank that sends at most one frame per `gap_s`, as its NIC's wire would."""

    def __init__(self, rank: SharpAllReduce, gap_s: float) -> None:
        super().__init__(rank, 0.0)
        self.gap_s, self.free_at = gap_s, 0.0

    def next_frame(self, now: float):
        if now < self.free_at:
            return None
        frame = self.rank.next_frame(now)
        if frame is not None:
            self.free_at = now + self.gap_s
        return frame

    def next_wakeup(self, now: float):
        t = self.rank.next_wakeup(now)
        return None if t is None else max(t, self.free_at)


def test_waiting_for_a_straggler_sends_one_chunk_again_per_timeout_not_the_window() -> None:
    # h4 starts 2 s late. The others' window (8 chunks, sent a frame time
    # apart) times out chunk after chunk; only the earliest goes again, at each
    # backed-off timeout (RFC 6298 5.4-5.6): a window sent again by every rank
    # would meet h4's contributions on the links.
    data = _inputs("int32", 5000, seed=4)  # 20 chunks
    tree = Tree(nslots=8)
    ranks = {
        h: _PacedRank(r, agg.PAYLOAD_OFFSET * 8 / RATE_BPS + 0.0008)
        for h, r in _ranks(data, nslots=8).items()
    }
    late_at = 2.0
    ranks["h4"] = _LateRank(ranks["h4"], late_at)
    _run(tree, ranks)
    want = _expected(data)
    assert all(r.result.tobytes() == want.tobytes() for r in ranks.values())
    base = ranks["h1"].rank.base_timeout_s
    rounds, t, timeout = 0, base, base  # the backed-off timeouts that fire before h4 starts
    while t < late_at:
        rounds, timeout = rounds + 1, min(2 * timeout, 2.0)
        t += timeout
    assert rounds == 3
    for h in ("h1", "h2", "h3"):
        assert ranks[h].rank.stats.retransmitted == rounds, (h, ranks[h].rank.stats)
    assert ranks["h4"].rank.rank.stats.retransmitted == 0


def test_a_second_all_reduce_continues_the_sequence() -> None:
    tree = Tree(nslots=4)
    first = _inputs("float32", 3000, seed=1)
    ranks = _ranks(first, nslots=4)
    _run(tree, ranks)
    next_seq = ranks["h1"].next_seq
    assert next_seq == agg.chunk_count(3000 * 4)
    second = _inputs("float32", 700, seed=2)
    ranks = _ranks(second, nslots=4, first_seq=next_seq)
    _run(tree, ranks)
    for r in ranks.values():
        np.testing.assert_allclose(r.result, _expected(second), rtol=1e-6, atol=1e-6)


def test_frames_that_are_not_this_all_reduces_results_are_left_alone() -> None:
    data = _inputs("int32", 300)
    rank = _ranks(data, nslots=4)["h1"]
    tmpl = agg.AggTemplate("02:00:00:00:ff:ff", "02:00:00:00:00:01", JOB_IP, "10.0.0.1")
    payload = np.arange(256, dtype=">i4").tobytes()
    assert not rank.on_frame(b"\x00" * 60, 0.0)
    assert not rank.on_frame(tmpl.frame(agg.KIND_CONTRIB, agg.DTYPE_INT32, JOB, 0, 0, payload), 0.0)
    assert rank.on_frame(tmpl.frame(agg.KIND_RESULT, agg.DTYPE_INT32, JOB + 1, 0, 0, payload), 0.0)
    assert rank.on_frame(tmpl.frame(agg.KIND_RESULT, agg.DTYPE_INT32, JOB, 99, 3, payload), 0.0)
    # A result of the wrong length for its chunk does not land in the array.
    assert rank.on_frame(tmpl.frame(agg.KIND_RESULT, agg.DTYPE_INT32, JOB, 1, 1, payload), 0.0)
    assert rank.stats.foreign_frames == 3 and rank.stats.results == 0 and not rank.done
    with pytest.raises(ValueError, match="1-D int32 or float32"):
        _ranks({h: np.zeros(3, dtype=np.float64) for h in HOSTS}, nslots=4)


def test_a_rebuilt_tree_cannot_finish_a_chunk_some_ranks_already_have() -> None:
    # Why run_allreduce starts an all-reduce over when its tree is reset
    # (controllers/aggregation.py's epoch): the cut lost the root's result on
    # its way to leaf1 after leaf2's ranks had it.
    data = _inputs("int32", 256)  # one chunk
    ranks = _ranks(data, nslots=1)
    _run(
        Tree(nslots=1),
        ranks,
        lose=lambda src, port, pkt: (src, port) == ("root", LEAF_AT["leaf1"]),
        until=lambda: ranks["h3"].done and ranks["h4"].done,
    )
    assert not ranks["h1"].done and not ranks["h2"].done
    rebuilt = Tree(nslots=1)  # the new tree's engines hold nothing of the old one
    with pytest.raises(AssertionError, match="did not finish"):
        _run(rebuilt, ranks, max_steps=200)  # h1 and h2 retransmit; h3 and h4 never will
    again = _ranks(data, nslots=1, first_seq=ranks["h1"].next_seq)
    _run(rebuilt, again)
    for r in again.values():
        np.testing.assert_array_equal(r.result, _expected(data))


def test_frames_on_the_nic_are_on_its_fidelity_clock() -> None:
    # The NIC's frames of in-network aggregation count in the run's fidelity
    # like its RoCE frames: a frame sent when its slot came is on time, one sent
    # by a loop that came back late is late, and the wire time it missed is lost.
    from types import SimpleNamespace

    from emu.host.rnic import WIRE_CATCH_UP_S, NicConfig, Rnic
    from emu.host.sharp import SharpOnNic

    from .fakes import A

    nic = Rnic(NicConfig(rate_bps=RATE_BPS, dcqcn=False, **A), now=0.0)
    spec = SimpleNamespace(
        options={"job_id": JOB, "job_ip": JOB_IP, "job_mac": JOB_MAC, "nslots": 3}, rank=0, job="j"
    )
    algo = SharpOnNic(spec, nic, np.arange(4 * agg.MAX_ELEMENTS, dtype=np.int32))
    algo.start(1.0)
    frame_s = nic.clock.frame_s
    now = 1.0
    for _ in range(2):  # on the wire's clock: each when the one before it is through
        assert algo.next_frame(now) is not None
        now = nic.free_at
    late_by = 10 * frame_s
    assert algo.next_frame(now + late_by) is not None  # the loop came back late
    assert nic.clock.frames == 3
    assert nic.clock.max_late_s == pytest.approx(late_by)
    assert nic.clock.deficit_s == pytest.approx(late_by - WIRE_CATCH_UP_S)
    assert nic.clock.hist[0] == 2  # the first two left within their frame time
    # The window (3 slots) is full: chunk 3 may go only once chunk 0's result is
    # in, and is not late for the time it waited for that result.
    result_at = nic.free_at + 0.05
    assert algo.next_frame(result_at) is None
    result = agg.AggTemplate("02:00:00:00:ff:ff", A["mac"], JOB_IP, A["ip"]).frame(
        agg.KIND_RESULT,
        agg.DTYPE_INT32,
        JOB,
        0,
        0,
        np.arange(agg.MAX_ELEMENTS, dtype=">i4").tobytes(),
    )
    assert algo.on_frame(result, result_at)
    assert algo.next_frame(result_at + frame_s / 2) is not None
    assert nic.clock.frames == 4
    assert nic.clock.max_late_s == pytest.approx(late_by)
    assert nic.clock.deficit_s == pytest.approx(late_by - WIRE_CATCH_UP_S)


def test_sequence_numbers_are_the_nics_and_keep_growing_across_all_reduces() -> None:
    # A switch starts a new round on a slot only for a higher seq: every
    # all-reduce of a job on a NIC starts where the one before it ended, and
    # the NIC keeps that (it outlives the collective jobs, one per size).
    from types import SimpleNamespace

    from emu.host.rnic import NicConfig, Rnic
    from emu.host.sharp import SharpOnNic

    from .fakes import A, B

    def spec(job_id: int) -> SimpleNamespace:
        return SimpleNamespace(
            options={"job_id": job_id, "job_ip": JOB_IP, "job_mac": JOB_MAC, "nslots": 2},
            rank=0,
            job="j",
        )

    nic, other = (Rnic(NicConfig(rate_bps=RATE_BPS, dcqcn=False, **x)) for x in (A, B))
    three_chunks = np.zeros(3 * agg.MAX_ELEMENTS, dtype=np.int32)
    one_chunk = np.zeros(5, dtype=np.float32)
    firsts = [
        SharpOnNic(spec(JOB), nic, d).sharp.first_seq
        for d in (three_chunks, one_chunk, three_chunks)
    ]
    assert firsts == [0, 3, 4]
    assert SharpOnNic(spec(JOB + 1), nic, one_chunk).sharp.first_seq == 0  # per job
    assert SharpOnNic(spec(JOB), other, one_chunk).sharp.first_seq == 0  # per NIC
    assert nic.agg_next_seq == {JOB: 7, JOB + 1: 1} and other.agg_next_seq == {JOB: 1}
