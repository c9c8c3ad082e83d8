"""Collectives on real data, without a network: real payloads through RoCE frames
and the NIC model (losses, duplicates), the agent-side collective hook driving
NICs wired back to back (time injected), the driver's ring QPs and job names,
and the nccl-tests report. The pure ring is tested in test_ring.py."""

from __future__ import annotations

import dataclasses
import doctest
import random
import zlib
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emu import scenario
from emu.fabric import HostPort
from emu.host import agent as agent_mod
from emu.host import collective as coll_host
from emu.host.collective import GPU_MEMORY_PREFIX, CollectiveRank, CollectiveSpec, RankData
from emu.host.data import (
    chunk_bounds,
    expected_all_gather,
    expected_hierarchical,
    expected_reduce_scatter,
    expected_sum,
    rank_input,
)
from emu.host.rnic import NicConfig, Rnic
from emu.proto import roce
from emu.scenario import ScenarioError
from emu.traffic import collectives as coll
from emu.traffic import rdma
from emu.traffic.collectives import AllReduceResult, nccl_header, nccl_row, nccl_table
from emu.traffic.rdma import RdmaHosts

from .fakes import RATE, A, B, numpy_sum, pair, run

# ----------------------------------------------------------------- payloads in frames


@pytest.fixture
def tmpl():
    return roce.DataTemplate(
        "02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 49152, dest_qp=0x42
    )


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 1023, 1024])
def test_payload_round_trips_through_frame_scapy_and_parse(tmpl, n):
    data = bytes(random.Random(n).randrange(256) for _ in range(n))
    frame = tmpl.frame(roce.SEND_MIDDLE, 9, payload=memoryview(data))
    info = roce.parse(frame, verify_icrc=True)
    assert info.ok is True and info.payload_len == n
    assert bytes(roce.payload(frame, info)) == data
    pkt = Ether(frame)
    assert pkt[BTH].padcount == -n & 3
    load = bytes(pkt[Raw].load) if Raw in pkt else b""
    assert load[:n] == data  # Scapy sees our bytes (then the pad bytes)


def test_payload_after_reth_and_lengths_must_agree(tmpl):
    frame = tmpl.frame(
        roce.RDMA_WRITE_FIRST, 1, payload=b"\x01\x02\x03\x04\x05", reth=(0x1000, 7, 5)
    )
    info = roce.parse(frame, verify_icrc=True)
    assert info.reth == (0x1000, 7, 5) and bytes(roce.payload(frame, info)) == b"\1\2\3\4\5"
    assert tmpl.frame(roce.SEND_ONLY, 1, 3, payload=b"abc") == tmpl.frame(
        roce.SEND_ONLY, 1, payload=b"abc"
    )
    with pytest.raises(ValueError, match="payload_len=4 but the payload has 3 bytes"):
        tmpl.frame(roce.SEND_ONLY, 1, 4, payload=b"abc")
    with pytest.raises(ValueError, match="give payload_len"):
        tmpl.frame(roce.SEND_ONLY, 1)
    with pytest.raises(ValueError, match="payload_len=9217"):
        tmpl.frame(roce.SEND_ONLY, 1, payload=bytes(9217))
    # Pattern frames are unchanged: the payload starts where parse says.
    pattern = tmpl.frame(roce.SEND_ONLY, 1, 300)
    assert bytes(roce.payload(pattern, roce.parse(pattern))) == bytes(range(256)) + bytes(range(44))


def test_is_rocev2(tmpl):
    assert roce.is_rocev2(tmpl.frame(roce.SEND_ONLY, 1, 8)) and roce.is_rocev2(tmpl.ack_frame(1, 1))
    other = bytearray(tmpl.frame(roce.SEND_ONLY, 1, 8))
    other[36:38] = (4792).to_bytes(2, "big")  # a SHARP-like aggregation frame
    assert (
        not roce.is_rocev2(bytes(other))
        and not roce.is_rocev2(b"")
        and not roce.is_rocev2(bytes(60))
    )


# ----------------------------------------------------------------- data through the NIC model


def nic_pair(**kw):
    """Two NIC models back to back (test_rnic's pair); b hands whole messages up on QP 7."""
    a, b = pair(**dict(dict(dcqcn=False, rto_modelled_s=0.02, modelled_rate_bps=RATE), **kw))
    b.set_deliver_data(7)
    return a, b


def test_messages_arrive_whole_and_in_order_despite_losses_and_duplicates():
    a, b = nic_pair()
    rng = np.random.default_rng(0)
    msgs = [
        rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        for size in (5000, 1, 0, 1024, 3000, 70_000)
    ]
    for m in msgs:
        a.post_send(1, len(m), 0.0, data=m)
    lost = {3, 4, 40, 41, 42, 80}
    sent = run(a, b, 0.5, drop=lambda i, f: i in lost, repeat=lambda i, f: i % 7 == 0)
    got = b.take_messages(7)
    assert [m for _, m in got] == msgs
    assert [msn for msn, _ in got] == list(range(1, len(msgs) + 1))
    qp, rq = a.send_qps[1], b.recv_qps[7]
    assert qp.retransmitted > 0 and qp.naks > 0 and rq.duplicates > 0 and rq.out_of_order > 0
    assert sent > sum(-(-len(m) // 1024) or 1 for m in msgs)
    assert len(qp.completed) == len(msgs) and qp.sizes == {} and qp.sent_at == {}
    assert rq.inbox_bytes == 0 and rq.parts == [] and b.take_messages(7) == []
    assert qp.tx_payload_bytes > sum(map(len, msgs))  # retransmissions are counted too


def test_lost_tail_is_retransmitted_by_timer_with_its_data():
    a, b = nic_pair()
    a.post_send(1, 4096, 0.0, data=bytes(range(256)) * 16)
    run(a, b, 0.3, drop=lambda i, f: i == 4)
    assert [m for _, m in b.take_messages(7)] == [bytes(range(256)) * 16]
    assert a.send_qps[1].timeouts >= 1


def test_pattern_messages_keep_no_bytes():
    a, b = nic_pair()
    b.set_deliver_data(7, False)
    a.post_send(1, 50_000, 0.0)
    run(a, b, 0.1)
    rq = b.recv_qps[7]
    assert rq.rx_bytes == 50_000 and rq.messages_received == 1
    assert not rq.inbox and rq.parts == [] and b.take_messages(7) == []


def test_full_inbox_answers_rnr_nak_and_recovers_when_taken():
    a, b = nic_pair(inbox_max_bytes=3000)
    a.post_send(1, 2000, 0.0, data=bytes(2000))
    a.post_send(1, 2000, 0.0, data=b"\x07" * 2000)
    run(a, b, 0.05)
    assert len(b.recv_qps[7].inbox) == 1 and b.recv_qps[7].rnr_naks_sent >= 1
    assert a.send_qps[1].rnr_naks >= 1 and len(a.send_qps[1].completed) == 1
    assert b.take_messages(7) == [(1, bytes(2000))]
    run(a, b, 0.2)  # the RNR timer (0.64 ms) passes, the requester resends
    assert b.take_messages(7) == [(2, b"\x07" * 2000)]


def test_bad_data_work_requests_are_named():
    a, b = nic_pair()
    with pytest.raises(ValueError, match="data has 3 bytes but size_bytes=4"):
        a.post_send(1, 4, 0.0, data=b"abc")
    with pytest.raises(ValueError, match="contiguous"):
        a.post_send(1, 8, 0.0, data=np.arange(4, dtype=np.int32)[::2])
    with pytest.raises(ValueError, match="unknown QP 3"):
        b.take_messages(3)
    with pytest.raises(ValueError, match="unknown QP 3"):
        b.set_deliver_data(3)


# ----------------------------------------------------------------- the agent hook, back to back


class RingOfNics:
    """n NICs in a ring of QPs (QP r: rank r -> r+1) and one CollectiveRank each,
    driven as the agent's loop drives them, frames delivered at once."""

    def __init__(
        self,
        n,
        dtype,
        count,
        iters=1,
        compute_s=None,
        slice_bytes=4096,
        drop=None,
        algo="ring",
        seed=9,
        options=None,
    ):
        self.n = n
        macs = [f"02:00:00:00:01:{r:02x}" for r in range(n)]
        ips = [f"10.0.1.{r + 1}" for r in range(n)]
        self.nics = [
            Rnic(
                NicConfig(
                    mac=macs[r],
                    ip=ips[r],
                    rate_bps=RATE,
                    dcqcn=False,
                    rto_modelled_s=0.02,
                    modelled_rate_bps=RATE,
                )
            )
            for r in range(n)
        ]
        self.by_ip = dict(zip(ips, self.nics))
        for r in range(n):
            nxt = (r + 1) % n
            self.nics[r].connect(100 + r, 100 + r, macs[nxt], ips[nxt], 49152 + r, 0.0)
            self.nics[nxt].connect(100 + r, 100 + r, macs[r], ips[r], 49152 + r, 0.0)
        compute_s = compute_s or [0.0] * n
        self.jobs = []
        for r in range(n):
            spec = CollectiveSpec(
                job="j",
                rank=r,
                nranks=n,
                dtype=dtype,
                count=count,
                seed=seed,
                algo=algo,
                iters=iters,
                compute_s=compute_s[r],
                slice_bytes=slice_bytes,
                send_qpn=100 + r,
                recv_qpn=100 + (r - 1) % n,
                options=(options or [{}] * n)[r],
            )
            job = CollectiveRank(spec, self.nics[r])
            for q in job.recv_qpns:
                self.nics[r].set_deliver_data(q)
            self.jobs.append(job)
        self.drop = drop or (lambda frame: False)

    def run(self, until, step=1e-4):
        now = 0.0
        for job in self.jobs:
            job.start(0.001)
        while now < until and not all(j.state == "done" for j in self.jobs):
            for r, nic in enumerate(self.nics):
                self.jobs[r].tick(now)
                frame = nic.next_frame(now)
                while frame is not None:
                    if not self.drop(frame):
                        dst = self.by_ip[roce.parse(frame).dst_ip]
                        for reply in dst.receive(frame, now):
                            nic.receive(reply, now)
                    frame = nic.next_frame(now)
            for r, nic in enumerate(self.nics):
                for q in self.jobs[r].recv_qpns:
                    for msn, data in nic.take_messages(q):
                        self.jobs[r].on_message(q, msn, data, now)
            now += step
        return now


@pytest.mark.parametrize(
    "n,dtype,count", [(2, "int32", 3001), (4, "float32", 4096), (5, "int32", 3)]
)
def test_collective_rank_on_nics_checks_itself(n, dtype, count):
    ring = RingOfNics(n, dtype, count, iters=2)
    ring.run(5.0)
    # Not checked until asked: the check costs CPU that ranks still sending need.
    early = ring.jobs[0].status(0.0)
    assert early["done"] and early["wrong"] is None and early["digest"] is None
    st = [j.status(0.0, check=True) for j in ring.jobs]
    assert all(s["done"] and s["iters_done"] == 2 and s["wrong"] == 0 for s in st)
    assert all(s["wrong_per_iter"] == [0, 0] for s in st)
    assert len({s["digest"] for s in st}) == 1
    want = numpy_sum([rank_input(9, r, count, dtype) for r in range(n)])
    if dtype == "int32":
        assert zlib.crc32(want.tobytes()) == st[0]["digest"]
    # Payload bytes per rank: 2(n-1) chunk transfers per iteration, no loss here.
    r0 = ring.jobs[0].algo.ring
    per_iter = (
        sum(
            r0.chunk_bounds((0 - k) % n)[1] - r0.chunk_bounds((0 - k) % n)[0]
            for k in range(2 * (n - 1))
        )
        * 4
    )
    assert st[0]["tx_payload_bytes"] == 2 * per_iter and st[0]["retransmitted"] == 0
    assert st[0]["tx_frame_bytes"] > st[0]["tx_payload_bytes"]
    assert all(0 < e < 5.0 for s in st for e in s["elapsed_s"])


def test_the_agent_counts_a_ranks_data_work_where_it_runs(monkeypatch):
    # A rank's input, exact sum and checks are the test's oracle, not the NIC's
    # work (bench/fabric_cpu.py reports the NIC without them). The agent times
    # each on the thread that does it (the management worker), and the status
    # carries the sum. A thread clock that advances 0.25 s per reading.
    readings = iter(np.arange(1000) * 0.25)
    monkeypatch.setattr(agent_mod.time, "thread_time", lambda: float(next(readings)))
    spec = CollectiveSpec(job="j", rank=0, nranks=2, dtype="float32", count=1000)
    data, cpu_s = agent_mod.thread_cpu_timed(RankData.build, spec)
    assert cpu_s == 0.25 and data.input.shape == (1000,)
    ring = RingOfNics(2, "int32", 3001, iters=1)
    ring.run(5.0)
    agent = object.__new__(agent_mod.Agent)  # only its collective calls
    agent.jobs, agent.job_errors = {"j": ring.jobs[0]}, {}
    ring.jobs[0].data_cpu_s = cpu_s  # as _coll_install adds the set-up's
    deferred = agent._coll_status("j", check=True)
    status = deferred.then(deferred.work())
    assert status["wrong"] == 0 and status["data_cpu_s"] == 0.5


@pytest.mark.parametrize("algo", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize(
    "n,dtype,count",
    [(2, "int32", 3001), (4, "float32", 4096), (3, "int32", 2), (3, "float32", 1000)],
)
def test_the_rings_phases_run_as_jobs_and_each_rank_checks_itself(algo, n, dtype, count):
    ring = RingOfNics(n, dtype, count, iters=2, algo=algo)
    ring.run(5.0)
    st = [j.status(0.0, check=True) for j in ring.jobs]
    assert all(s["done"] and s["algo"] == algo and s["wrong_per_iter"] == [0, 0] for s in st)
    for r, job in enumerate(ring.jobs):
        res = job.algo.result
        if algo == "reduce_scatter":
            lo, hi = chunk_bounds(count, n, (r + 1) % n)
            want = expected_reduce_scatter(9, n, count, dtype, r).exact
            assert res.shape == (hi - lo,)
            sent = [(r - k) % n for k in range(n - 1)]
        else:
            want = expected_all_gather(9, n, count, dtype).exact
            assert res.shape == (count,)
            sent = [(r + 1 - k) % n for k in range(n - 1)]
        if dtype == "int32" or algo == "all_gather":  # bit exact: the digest is the expected bytes
            assert st[r]["digest"] == zlib.crc32(want.astype(res.dtype).tobytes())
        # Payload bytes: n-1 chunk transfers per iteration (half the all-reduce's).
        r_ring = job.algo.ring
        per_iter = sum(r_ring.chunk_bounds(c)[1] - r_ring.chunk_bounds(c)[0] for c in sent) * 4
        assert st[r]["tx_payload_bytes"] == 2 * per_iter and st[r]["retransmitted"] == 0
    if algo == "all_gather":
        assert len({s["digest"] for s in st}) == 1


def run_checked(ring):
    ring.run(5.0)
    return [j.status(0.0, check=True) for j in ring.jobs]


def hierarchical(tmp_path, dtype, seeds, gpus, count, skip_rails=False, memory=False):
    """A hierarchical all-reduce as the rail scenario runs it, one phase after the other,
    each rank's input the previous phase's file, or with `memory` its result in the GPU
    memory of the process (`GPU_MEMORY`); returns the all-gathers' statuses."""

    def f(phase, k, r):
        if memory:
            return f"{GPU_MEMORY_PREFIX}{tmp_path.name}-{phase}-{k}-{r}"
        return str(tmp_path / f"{phase}-{k}-{r}.npy")

    nodes = len(seeds)
    for k, seed in enumerate(seeds):  # 1. reduce-scatter inside each node
        opts = [{"chain_output": f("rs", k, r)} for r in range(gpus)]
        st = run_checked(
            RingOfNics(gpus, dtype, count, algo="reduce_scatter", seed=seed, options=opts)
        )
        assert all(s["wrong"] == 0 for s in st)
    for r in range(gpus):  # 2. chunk (r+1) mod G all-reduced across the nodes, on rail r
        c = (r + 1) % gpus
        lo, hi = chunk_bounds(count, gpus, c)
        want = {"seeds": seeds, "gpus": gpus, "count": count, "chunk": c}
        opts = [
            {"chain_input": f("rs", k, r), "chain_output": f("ar", k, r), "chain_expect": want}
            for k in range(nodes)
        ]
        if not skip_rails:
            st = run_checked(RingOfNics(nodes, dtype, hi - lo, options=opts))
            assert all(s["wrong"] == 0 for s in st)
    out = []
    for k in range(nodes):  # 3. all-gather inside each node: every GPU the global sum
        want = {"seeds": seeds, "gpus": gpus, "count": count, "chunk": None}
        phase = "rs" if skip_rails else "ar"
        opts = [
            {
                "chain_input": f(phase, k, r),
                "chain_input_chunk": (r + 1) % gpus,
                "chain_expect": want,
            }
            for r in range(gpus)
        ]
        out += run_checked(RingOfNics(gpus, dtype, count, algo="all_gather", options=opts))
    return out


@pytest.mark.parametrize("memory", [False, True], ids=["file", "gpu-memory"])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("nodes,gpus,count", [(3, 2, 1000), (2, 4, 4096)])
def test_a_chained_hierarchical_all_reduce_leaves_every_gpu_the_global_sum(
    tmp_path, dtype, nodes, gpus, count, memory
):
    seeds = [11 + k for k in range(nodes)]
    st = hierarchical(tmp_path, dtype, seeds, gpus, count, memory=memory)
    assert len(st) == nodes * gpus and all(s["wrong"] == 0 for s in st)
    if memory:  # nothing went through a file
        assert not list(tmp_path.glob("*.npy"))
    # One result on every GPU of every node: the rails' sums, gathered.
    assert len({s["digest"] for s in st}) == 1
    if dtype == "int32":
        exact = expected_hierarchical(seeds, gpus, count, dtype).exact
        assert st[0]["digest"] == zlib.crc32(exact.tobytes())


def test_a_hierarchy_without_its_rail_phase_is_caught_by_the_gpus_themselves(tmp_path):
    # Each node's own sum gathered, the other nodes' data never added: every element wrong.
    st = hierarchical(tmp_path, "int32", [11, 12], 2, 1000, skip_rails=True)
    assert all(s["wrong"] == 1000 for s in st)


def test_a_chained_input_that_does_not_fit_is_refused_by_name(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(7, dtype="<i4"))
    spec = dict(job="j", rank=0, nranks=2, dtype="int32", count=10, algo="all_gather")
    with pytest.raises(ValueError, match=r"chain_input=.*x.npy.*7 elements, the chunk has 5"):
        RankData.build(
            CollectiveSpec(**spec, options={"chain_input": str(path), "chain_input_chunk": 1})
        )
    with pytest.raises(ValueError, match=r"chain_input='gpu:nowhere': no such result in this"):
        RankData.build(CollectiveSpec(**spec, options={"chain_input": "gpu:nowhere"}))
    with pytest.raises(ValueError, match=r"options \['chain_inptu'\]: unknown"):
        RankData.build(CollectiveSpec(**spec, options={"chain_inptu": str(path)}))
    with pytest.raises(ValueError, match="chain_expect=.*expected seeds, gpus, count"):
        RankData.build(CollectiveSpec(**spec, options={"chain_expect": {"gpus": 2}}))


@pytest.mark.parametrize("algo", ["ring", "reduce_scatter", "all_gather"])
def test_a_rank_counts_its_own_wrong_elements_in_every_ring_algorithm(algo):
    ring = RingOfNics(3, "int32", 300, algo=algo)
    ring.run(5.0)
    ring.jobs[1].algo.result[7] ^= 1 << 20  # the result the rank will check, one bit off
    st = [j.status(0.0, check=True) for j in ring.jobs]
    assert [s["wrong"] for s in st] == [0, 1, 0]


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_rank_data_is_the_result_each_algorithm_must_reach(dtype):
    n, count, rank = 4, 10, 2

    def build(algo):
        spec = CollectiveSpec(
            job="j", rank=rank, nranks=n, dtype=dtype, count=count, seed=4, algo=algo
        )
        return RankData.build(spec)

    full = expected_sum(4, n, count, dtype)
    for algo in ("ring", "sharp"):
        data = build(algo)
        assert np.array_equal(data.input, rank_input(4, rank, count, dtype))
        assert np.array_equal(data.expected.exact, full.exact)
    rs = build("reduce_scatter").expected
    lo, hi = chunk_bounds(count, n, (rank + 1) % n)
    assert (lo, hi) == (7, 10) and np.array_equal(rs.exact, full.exact[lo:hi])
    if dtype == "float32":
        assert np.array_equal(rs.tolerance, full.tolerance[lo:hi])
    else:
        assert rs.tolerance is None
    ag = build("all_gather").expected
    assert ag.tolerance is None
    assert np.array_equal(ag.exact, expected_all_gather(4, n, count, dtype).exact)


def test_collective_rank_survives_drops():
    rng = random.Random(3)
    ring = RingOfNics(3, "float32", 6000, drop=lambda f: rng.random() < 0.02)
    ring.run(10.0)
    st = [j.status(0.0, check=True) for j in ring.jobs]
    assert all(s["done"] and s["wrong"] == 0 for s in st)
    assert sum(s["retransmitted"] for s in st) > 0


def test_straggler_delays_everyone_and_early_messages_wait():
    compute = [0.0, 0.0, 0.3, 0.0]
    ring = RingOfNics(4, "int32", 2048, iters=2, compute_s=compute)
    ring.run(5.0)
    st = [j.status(0.0, check=True) for j in ring.jobs]
    assert all(s["done"] and s["wrong"] == 0 for s in st)
    # Rank 3 waits for rank 2 (the straggler) in every iteration: its time from
    # first post to last receive includes the 0.3 s; the straggler's does not.
    assert all(e > 0.3 for e in st[3]["elapsed_s"])
    assert all(e < 0.3 for e in st[2]["elapsed_s"])
    assert all(t >= 0.3 for t in st[2]["iter_s"])


def test_spec_rejects_bad_values_by_name():
    base = dict(job="j", rank=0, nranks=2, dtype="int32", count=8, send_qpn=1, recv_qpn=2)
    CollectiveSpec.from_args(base)
    for key, value, match in [
        ("rank", 2, "rank=2"),
        ("dtype", "float64", "dtype='float64'"),
        ("count", 0, "count=0"),
        ("algo", "tree", "algo='tree'"),
        ("iters", 0, "iters=0"),
        ("compute_s", -1, "compute_s=-1"),
        ("slice_bytes", 2, "slice_bytes=2"),
        ("bogus", 1, "bogus"),
    ]:
        with pytest.raises(ValueError, match=match):
            CollectiveSpec.from_args(dict(base, **{key: value}))
    with pytest.raises(ValueError, match=r"missing key\(s\) \['count'\]"):
        CollectiveSpec.from_args({k: v for k, v in base.items() if k != "count"})
    nic = Rnic(NicConfig(rate_bps=RATE, **A))
    with pytest.raises(ValueError, match="unknown QP send_qpn=1"):
        CollectiveRank(CollectiveSpec.from_args(base), nic)


def test_unexpected_message_after_done_is_an_error_not_a_crash():
    ring = RingOfNics(2, "int32", 16)
    ring.run(1.0)
    with pytest.raises(ValueError, match="is done: unexpected message"):
        ring.jobs[0].on_message(101, 99, b"", 1.0)


class SwapFrames:
    """A toy two-rank all-reduce in its own frames (as in-network aggregation
    will speak): each rank sends its array in one non-RoCE frame, paced by the
    NIC's wire clock, and adds the one it receives."""

    HEADER = bytes(12) + b"\x88\xb5"  # local experimental ethertype

    def __init__(self, spec, rnic, data):
        self.rnic, self.data, self.rank = rnic, data, spec.rank
        self.recv_qpns, self.tx_qpns = (), ()
        self.out, self.result, self.sent = None, None, False

    @property
    def done(self):  # received the peer's and sent its own
        return self.result is not None and self.sent

    def start(self, now):
        self.out = self.HEADER + bytes([self.rank]) + self.data.tobytes()
        self.sent = False

    def next_frame(self, now):
        if self.out is None or self.rnic.free_at > now:
            return None
        frame, self.out = self.out, None
        self.rnic.use_wire(len(frame), now)
        self.sent = True
        return frame

    def next_wakeup(self, now):
        return self.rnic.free_at if self.out is not None else None

    def on_frame(self, frame, now):
        if not frame.startswith(self.HEADER) or frame[14] == self.rank:
            return False
        self.result = self.data + np.frombuffer(frame[15:], dtype=self.data.dtype)
        return True


def test_collectives_with_their_own_frames_plug_into_the_hook(monkeypatch):
    monkeypatch.setitem(coll_host.ALGORITHMS, "swap", SwapFrames)
    nics = [Rnic(NicConfig(rate_bps=RATE, **A)), Rnic(NicConfig(rate_bps=RATE, **B))]
    jobs = [
        CollectiveRank(
            CollectiveSpec(job="s", rank=r, nranks=2, dtype="int32", count=1000, algo="swap"),
            nics[r],
        )
        for r in range(2)
    ]
    assert all(j.wants_frames and j.sends_frames and j.recv_qpns == () for j in jobs)
    assert jobs[0].next_frame(0.0) is None  # nothing before the job runs
    jobs[0].start(0.0)
    jobs[1].start(0.01)
    now, wire = 0.0, []
    while now < 0.1 and not all(j.state == "done" for j in jobs):
        for r, job in enumerate(jobs):
            job.tick(now)
            frame = job.next_frame(now)
            while frame is not None:
                wire.append(frame)
                assert not jobs[1 - r].on_frame(b"\xff" * 60, now)  # not ours: declined
                assert jobs[1 - r].on_frame(frame, now)
                frame = job.next_frame(now)
        now += 1e-3
    st = [j.status(now, check=True) for j in jobs]
    assert all(s["done"] and s["wrong"] == 0 for s in st) and len(wire) == 2
    assert st[0]["tx_frame_bytes"] == len(wire[0]) == 15 + 4000 and st[0]["tx_packets"] == 1
    assert st[0]["tx_payload_bytes"] == 0  # no QP traffic
    assert nics[0].free_at >= len(wire[0]) * 8 / RATE  # the frame took the NIC's wire time
    assert st[0]["digest"] == st[1]["digest"]
    ring = RingOfNics(2, "int32", 8)
    assert not ring.jobs[0].wants_frames and not ring.jobs[0].sends_frames


# ----------------------------------------------------------------- the driver's state


class FakeAgent:
    """A NIC agent's management socket that records the calls."""

    def __init__(self, host, calls):
        self.host, self.calls = host, calls

    def call(self, cmd, **args):
        self.calls.append((self.host, cmd, args))
        return {}


def rdma_hosts(hosts):
    """An RdmaHosts over agents that only record (none started: no processes)."""
    graph = nx.Graph()
    for i, h in enumerate(hosts):
        graph.add_node(h, mac=f"02:00:00:00:02:{i:02x}", ip=f"10.0.2.{i + 1}")
    nics = RdmaHosts(SimpleNamespace(graph=graph), [])
    calls = []
    nics.nics = {h: FakeAgent(h, calls) for h in hosts}
    nics.ports = {
        h: HostPort(h, "nic", 0, f"{h}-eth0", d["ip"], 8, d["mac"], "s1", 10**7)
        for h, d in graph.nodes(data=True)
    }
    return nics, calls


def test_ring_qps_are_the_rdma_hosts_connected_once_and_reused():
    nics, calls = rdma_hosts(["h1", "h2", "h3"])
    own = nics.connect("h1", "h2")  # a workload's QP is never the ring's
    qps = nics.ring_qps(["h1", "h2", "h3"])
    assert qps == [own + 1, own + 2, own + 3]
    connects = [(h, a["peer_qpn"]) for h, cmd, a in calls if cmd == "connect"]
    assert connects == [
        ("h1", own),
        ("h2", own),
        ("h1", own + 1),
        ("h2", own + 1),
        ("h2", own + 2),
        ("h3", own + 2),
        ("h3", own + 3),
        ("h1", own + 3),
    ]
    # RoCEv2 varies the UDP source port per QP (49152 + qpn mod 16384), as before.
    assert calls[2][2]["udp_sport"] == 49152 + own + 1
    calls.clear()
    assert nics.ring_qps(["h1", "h2", "h3"]) == qps and calls == []
    # A ring over some of the same links reuses those and connects only the others.
    assert nics.ring_qps(["h1", "h2"]) == [own + 1, own + 4]
    assert [(h, a["peer_qpn"]) for h, cmd, a in calls] == [("h2", own + 4), ("h1", own + 4)]
    other, _ = rdma_hosts(["h1", "h2", "h3"])  # another set of agents: its own QPs
    assert other.ring_qps(["h1", "h2", "h3"]) == [101, 102, 103]


def test_job_names_are_unique_on_the_agents():
    nics, _ = rdma_hosts(["h1"])
    names = [nics.new_job("allreduce") for _ in range(3)]
    assert len(set(names)) == 3
    assert [n.split("-")[:2] for n in names] == [
        ["allreduce", "1"],
        ["allreduce", "2"],
        ["allreduce", "3"],
    ]


def test_the_first_set_on_the_nic_ports_becomes_the_fabrics_own():
    fab = SimpleNamespace(graph=nx.Graph(), nics=None)
    first = RdmaHosts(fab, [])
    assert fab.nics is first  # its NIC faults and collectives use these agents
    assert RdmaHosts(fab, []) is not fab.nics and fab.nics is first  # a second set is the caller's
    other = SimpleNamespace(graph=nx.Graph(), nics=None)
    RdmaHosts(other, [], port="nvlink")  # NVLink ports are not the hosts' NICs
    assert other.nics is None


def test_a_fabrics_agents_are_kept_by_the_fabric_and_started_once(monkeypatch):
    started = []

    def start(fab, hosts):
        started.append(list(hosts))
        nics, _ = rdma_hosts(hosts)
        return nics

    monkeypatch.setattr(rdma, "RdmaHosts", start)
    fab = SimpleNamespace(nics=None)
    nics = coll.host_nics(fab, ["h1", "h2"])
    assert fab.nics is nics and started == [["h1", "h2"]]
    added = []

    def add(hosts):
        # RdmaHosts.add starts the agents of hosts it does not have yet, as it started its own.
        added.append(list(hosts))
        nics.nics.update({h: FakeAgent(h, []) for h in hosts if h not in nics.nics})

    nics.add = add
    assert coll.host_nics(fab, ["h2", "h1"]) is nics and len(started) == 1
    # A host without an agent yet gets one in the same set, not a second set.
    assert coll.host_nics(fab, ["h1", "h3"]) is nics and len(started) == 1
    assert added[-1] == ["h1", "h3"] and "h3" in nics.nics
    own, _ = rdma_hosts(["h1", "h3"])
    assert coll.host_nics(own, ["h1", "h3"]) is own  # an RdmaHosts is used as it is
    with pytest.raises(ValueError, match=r"hosts \['h4'\] have no NIC agent here"):
        coll.host_nics(own, ["h1", "h4"])  # ...and is not extended behind its owner's back


# ----------------------------------------------------------------- nccl-tests format


def result(size, t, n=8, wrong=0, dtype="float32"):
    algbw = size / t
    return AllReduceResult(
        size,
        size // 4,
        dtype,
        n,
        "ring",
        1,
        t,
        algbw,
        algbw * 2 * (n - 1) / n,
        wrong,
        {},
        {},
        {},
        {},
        True,
    )


def test_nccl_rows_have_nccl_tests_columns():
    rows = [
        nccl_row(result(8, 20.76e-6)),
        nccl_row(result(1 << 20, 0.00123)),
        nccl_row(result(1 << 26, 12.5, wrong=3, dtype="int32"), bw_unit="GB/s"),
    ]
    # nccl-tests: "%12li  %12li  %8s  %6s  %6s" + "  %7s  %6.2f  %6.2f  %5g"
    assert rows[0] == (
        "           8             2     float     sum      -1    20.76    0.39    0.67      0"
    )
    assert rows[1] == (
        "     1048576        262144     float     sum      -1   1230.0  852.50  1491.88      0"
    )
    assert rows[2] == (
        "    67108864      16777216     int32     sum      -1  12500000    0.01    0.01      3"
    )
    header = nccl_header("GB/s").splitlines()
    assert header[1].split() == [
        "#",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    assert "(GB/s)" in header[2] and "out-of-place" in header[0]
    # Columns line up with the header's: "#wrong" ends where the row's last field ends.
    assert len(header[1]) == len(rows[0])
    table = nccl_table([result(8, 1.0), result(16, 1.0, wrong=2)])
    assert table.splitlines()[-2] == "# Out of bounds values : 2 FAILED"
    assert table.splitlines()[-1].startswith("# Avg bus bandwidth    : ")
    with pytest.raises(ValueError, match="bw_unit='Gb/s'"):
        nccl_row(result(8, 1.0), bw_unit="Gb/s")


def test_report_doctests_pass():
    result = doctest.testmod(coll, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


def test_busbw_is_algbw_times_2_n_minus_1_over_n():
    r = result(1 << 20, 0.5, n=4)
    assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * 1.5)
    assert coll.NCCL_TYPE_NAMES == {"int32": "int32", "float32": "float"}


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_busbw_factor_and_bytes_per_host_of_each_collective(n):
    # nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n, ReduceScatter and AllGather (n-1)/n.
    assert coll.busbw_factor("ring", n) == coll.busbw_factor("sharp", n) == 2 * (n - 1) / n
    for algo in ("reduce_scatter", "all_gather"):
        assert coll.busbw_factor(algo, n) == (n - 1) / n
        # A ring phase sends n-1 of its n chunks: (n-1)/n x S, half the all-reduce's.
        size = 3 << 20
        assert coll.model_bytes_per_host(algo, size, n) == (n - 1) / n * size
        assert 2 * coll.model_bytes_per_host(algo, size, n) == coll.model_bytes_per_host(
            "ring", size, n
        )
    with pytest.raises(ValueError, match="algo='tree'"):
        coll.busbw_factor("tree", n)
    with pytest.raises(ValueError, match="algo='tree'"):
        coll.model_bytes_per_host("tree", 1024, n)
    with pytest.raises(ValueError, match="nranks=0"):
        coll.busbw_factor("ring", 0)


def test_an_all_gather_row_has_no_reduction():
    r = dataclasses.replace(result(1 << 20, 0.5, n=4), algo="all_gather")
    assert nccl_row(r).split()[3] == "none"
    assert nccl_row(dataclasses.replace(r, algo="reduce_scatter")).split()[3] == "sum"


def test_the_phases_parse_as_algorithms_but_not_where_all_reduces_are_compared():
    assert coll.parse_algos("ring,reduce_scatter,all_gather") == [
        "ring",
        "reduce_scatter",
        "all_gather",
    ]
    assert coll.parse_algos("ring,sharp", coll.ALLREDUCE_NAMES) == ["ring", "sharp"]
    with pytest.raises(ValueError, match="a comma list of ring, sharp$"):
        coll.parse_algos("ring,all_gather", coll.ALLREDUCE_NAMES)
    for name in ("sharp-allreduce", "straggler"):
        with pytest.raises(ScenarioError, match="parameter algos=.*: a comma list of ring, sharp"):
            scenario.resolve_params(scenario.load(name), ["algos=ring,reduce_scatter"])


def test_the_orchestrator_knows_every_algorithm_the_agents_run():
    # run_allreduce checks names without importing the agent's registry of algorithms.
    assert tuple(coll_host.ALGORITHMS) == coll.ALGORITHM_NAMES


def test_nvlink_agents_need_nvlink_ports_and_say_so_before_starting_anything():
    from emu import fabric

    fab = SimpleNamespace(graph=fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1))
    with pytest.raises(ValueError, match=r"host h1: no 'nvlink' port .*rail_optimized"):
        RdmaHosts(fab, ["h1"], port="nvlink")


def test_ranks_of_one_process_share_one_regeneration_of_the_exact_sum(monkeypatch):
    """Ranks whose NICs share a process regenerate every input once between them, not
    once each; the shared sum is read only, and freed when no rank holds it."""
    import gc

    from emu.host import data

    calls = []
    real = data.rank_input
    monkeypatch.setattr(data, "rank_input", lambda *a: calls.append(a) or real(*a))

    def spec(rank, seed=11, algo="ring"):
        return CollectiveSpec(
            job="j", rank=rank, nranks=4, dtype="float32", count=1000, seed=seed, algo=algo
        )

    ranks = [RankData.build(spec(r)) for r in range(4)]
    assert sorted(c[1] for c in calls if c[2] == 1000) == [0, 1, 2, 3]  # every input once
    # A reduce-scatter's rank checks a chunk of the same sum: still regenerated once.
    calls.clear()
    scattered = [RankData.build(spec(r, seed=13, algo="reduce_scatter")) for r in range(4)]
    assert sorted(c[1] for c in calls if c[2] == 1000) == [0, 1, 2, 3]
    assert all(s.expected.whole is scattered[0].expected.whole for s in scattered)
    del scattered
    assert all(r.expected is ranks[0].expected for r in ranks)
    with pytest.raises(ValueError):
        ranks[0].expected.exact[0] = 0.0
    other = RankData.build(spec(0, seed=12))
    assert other.expected is not ranks[0].expected
    assert other.expected.wrong(ranks[0].expected.exact) > 0
    del ranks, other
    gc.collect()
    assert not [k for k in data._HELD_SUMS.keys() if k[1] == 1000]
