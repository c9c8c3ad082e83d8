"""Unit tests of the switch's reduction engine (emu/switch/aggregation.py) and its hooks.

A two-level tree is wired by hand: two leaf engines with two hosts each and a
root engine whose children are the leaves. Frames travel between them through
a pool that can reorder and lose them; hosts follow SwitchML's rule (chunk
seq + nslots only after the result of seq). Sums are checked against numpy.
The pipeline, the datapath's hand-off and the OpenFlow agent are exercised
with os-ken-encoded messages. No root, no sockets.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as p
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from emu.proto import agg, layers, ofext
from emu.switch.aggregation import AggEngine, AggNoSlots
from emu.switch.match import OFError
from emu.switch.openflow import OpenFlowSession, SwitchModel, reply_bytes
from emu.switch.pipeline import Pipeline
from emu.switch.ports import OFPPC_PORT_DOWN

from .fakes import (
    HELLO,
    HOSTS,
    JOB,
    JOB_IP,
    JOB_MAC,
    LEAF_AT,
    UP,
    Tree,
    decode,
    encode,
    errors,
    lite_datapath,
    switch_ports,
)

OTHER = 4  # a port of every switch that is in no tree


def host_frame(
    host: str, seq: int, data: np.ndarray, nslots: int, job: int = JOB, kind: int = agg.KIND_CONTRIB
) -> bytes:
    _leaf, _port, mac, ip, rank = HOSTS[host]
    dtype = agg.DTYPE_CODES[data.dtype.name]
    payload = data.astype(agg.WIRE_DTYPES[dtype]).tobytes()
    return agg.AggTemplate(mac, JOB_MAC, ip, JOB_IP).frame(
        kind, dtype, job, seq, seq % nslots, payload, rank=rank
    )


def chunks(rng: np.random.Generator, nseq: int, dtype: str) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(nseq):
        n = int(rng.integers(1, agg.MAX_ELEMENTS + 1))
        if dtype == "int32":
            out.append(
                {
                    h: rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
                    for h in HOSTS
                }
            )
        else:
            out.append({h: (rng.standard_normal(n) * 1e3).astype(np.float32) for h in HOSTS})
    return out


def expected_sum(chunk: dict[str, np.ndarray]) -> np.ndarray:
    stack = np.stack(list(chunk.values()))
    return np.sum(stack, axis=0, dtype=stack.dtype)  # int32 wraps, as the engine's sum


def check_result(host: str, pkt: agg.AggPacket, chunk: dict[str, np.ndarray]) -> None:
    _leaf, _port, _mac, ip, _rank = HOSTS[host]
    assert (pkt.kind, pkt.job_id, pkt.rank, pkt.dst_ip) == (
        agg.KIND_RESULT,
        JOB,
        agg.RANK_SWITCH,
        ip,
    )
    got, want = pkt.array(), expected_sum(chunk)
    if want.dtype == np.int32:
        assert got.astype(np.int32).tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-2)


def all_reduce(
    tree: Tree,
    data: list[dict[str, np.ndarray]],
    order: random.Random | None = None,
    start: int = 0,
) -> dict[str, dict[int, agg.AggPacket]]:
    """Every host sends its window, then seq + nslots on each result (SwitchML)."""
    got: dict[str, dict[int, agg.AggPacket]] = {h: {} for h in HOSTS}
    n = tree.nslots

    def on_result(h: str, pkt: agg.AggPacket) -> None:
        assert pkt.seq not in got[h], f"{h} got seq {pkt.seq} twice"
        got[h][pkt.seq] = pkt
        nxt = pkt.seq + n
        if nxt < start + len(data):
            tree.send(h, host_frame(h, nxt, data[nxt - start][h], n))

    first = [(h, s) for s in range(start, start + min(n, len(data))) for h in HOSTS]
    if order is not None:
        order.shuffle(first)
    for h, s in first:
        tree.send(h, host_frame(h, s, data[s - start][h], n))
    tree.run(on_result)
    return got


# ----- sums on a two-level tree ------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_tree_sums_equal_numpy_over_many_seqs(dtype: str) -> None:
    tree = Tree(nslots=4)
    data = chunks(np.random.default_rng(1), 60, dtype)
    got = all_reduce(tree, data)
    for h in HOSTS:
        assert sorted(got[h]) == list(range(60))
        for s, pkt in got[h].items():
            check_result(h, pkt, data[s])
    for leaf in ("leaf1", "leaf2"):
        c = tree.counters(leaf)
        assert (c["contributions"], c["up_sent"], c["results_in"], c["results_sent"]) == (
            120,
            60,
            60,
            120,
        )
        assert c["duplicates"] == c["stale"] == c["abandoned"] == c["slots_in_use"] == 0
    c = tree.counters("root")
    assert (c["contributions"], c["up_sent"], c["results_sent"], c["completed"]) == (
        120,
        0,
        120,
        60,
    )
    for eng in tree.engines.values():
        r = eng.report()
        assert r["malformed"] == r["unknown_job"] == r["bad_port"] == 0
        assert (r["slots_used"], r["slots_total"]) == (4, 1024)


def test_frames_the_engine_sends() -> None:
    tree = Tree(nslots=2)
    data = chunks(np.random.default_rng(2), 1, "int32")
    all_reduce(tree, data)
    for sw, port, frame in tree.sent:
        pkt = Ether(frame)
        hdr = pkt[layers.AggHeader]
        assert pkt[IP].tos >> 2 == 26 and pkt[IP].src == JOB_IP and pkt[UDP].dport == 4792
        ip = pkt[IP]
        chk, ip.chksum = ip.chksum, None
        assert chk == IP(bytes(ip)).chksum
        assert hdr.rank == agg.RANK_SWITCH and hdr.job_id == JOB
        assert pkt.src == bytes([2, 0, 0, 0, {"leaf1": 1, "leaf2": 2, "root": 3}[sw], port]).hex(
            ":"
        )
        if sw != "root" and port == UP:
            assert (hdr.kind, pkt.dst, ip.dst) == (agg.KIND_CONTRIB, JOB_MAC, JOB_IP)
        elif sw == "root":
            assert (hdr.kind, pkt.dst, ip.dst) == (agg.KIND_RESULT, JOB_MAC, JOB_IP)
        else:
            host = next(h for h, v in HOSTS.items() if v[:2] == (sw, port))
            assert (hdr.kind, pkt.dst, ip.dst) == (agg.KIND_RESULT, HOSTS[host][2], HOSTS[host][3])


@pytest.mark.parametrize("seed", range(5))
def test_reordering_within_the_window(seed: int) -> None:
    rng = random.Random(seed)
    tree = Tree(nslots=8, rng=rng)
    dtype = "int32" if seed % 2 else "float32"
    data = chunks(np.random.default_rng(seed), 50, dtype)
    got = all_reduce(tree, data, order=rng)
    for h in HOSTS:
        assert sorted(got[h]) == list(range(50))
        for s, pkt in got[h].items():
            check_result(h, pkt, data[s])
    for sw in tree.engines:
        c = tree.counters(sw)
        assert c["duplicates"] == c["stale"] == c["abandoned"] == 0


# ----- losses and retransmissions -------------------------------------------------------


def one_round(tree: Tree, data: dict[str, np.ndarray], seq: int = 0, hosts=tuple(HOSTS)) -> None:
    for h in hosts:
        tree.send(h, host_frame(h, seq, data[h], tree.nslots))
    tree.run()


def results(tree: Tree, host: str, seq: int) -> list[agg.AggPacket]:
    return [pkt for pkt in tree.inbox[host] if pkt.seq == seq]


def test_duplicate_counted_once_result_resent_to_that_child_only() -> None:
    tree = Tree(nslots=2)
    [data] = chunks(np.random.default_rng(3), 1, "int32")
    tree.send("h1", host_frame("h1", 0, data["h1"], 2))
    tree.send("h1", host_frame("h1", 0, data["h1"], 2))
    one_round(tree, data, hosts=("h2", "h3", "h4"))
    assert tree.counters("leaf1")["duplicates"] == 1
    for h in HOSTS:
        [pkt] = results(tree, h, 0)
        check_result(h, pkt, data)  # h1 counted once
    tree.sent.clear()
    one_round(tree, data, hosts=("h1",))
    assert [(sw, port) for sw, port, _f in tree.sent] == [("leaf1", 1)]
    assert len(results(tree, "h1", 0)) == 2 and len(results(tree, "h2", 0)) == 1
    check_result("h1", results(tree, "h1", 0)[1], data)
    assert tree.counters("leaf1")["duplicates"] == 2
    assert tree.counters("leaf1")["contributions"] == 2


def test_lost_partial_sum_is_sent_again_on_a_child_retransmission() -> None:
    tree = Tree(nslots=2)
    [data] = chunks(np.random.default_rng(4), 1, "float32")
    tree.lose = lambda src, port, pkt: (src, port) == ("leaf1", UP)
    one_round(tree, data)
    assert all(not box for box in tree.inbox.values())
    tree.lose = lambda src, port, pkt: False
    one_round(tree, data, hosts=("h2",))  # h2 timed out and retransmits
    for h in HOSTS:
        [pkt] = results(tree, h, 0)
        check_result(h, pkt, data)
    c = tree.counters("leaf1")
    assert (c["up_sent"], c["duplicates"], c["contributions"]) == (2, 1, 2)


def test_lost_result_recovered_at_the_root() -> None:
    tree = Tree(nslots=2)
    [data] = chunks(np.random.default_rng(5), 1, "int32")
    tree.lose = lambda src, port, pkt: (src, port) == ("root", LEAF_AT["leaf2"])
    one_round(tree, data)
    assert results(tree, "h1", 0) and not results(tree, "h3", 0)
    tree.lose = lambda src, port, pkt: False
    tree.sent.clear()
    one_round(tree, data, hosts=("h3",))  # h3 retransmits
    # leaf2 sends its partial sum again; the root answers leaf2 only.
    assert [(sw, port) for sw, port, _f in tree.sent][:2] == [
        ("leaf2", UP),
        ("root", LEAF_AT["leaf2"]),
    ]
    for h in ("h3", "h4"):
        [pkt] = results(tree, h, 0)
        check_result(h, pkt, data)
    assert len(results(tree, "h1", 0)) == 1
    assert tree.counters("root")["duplicates"] == 1


def test_lost_result_recovered_after_other_children_moved_on() -> None:
    """SwitchML's shadow copy: leaf1's hosts already sent seq + nslots when h3 retransmits."""
    tree = Tree(nslots=2)
    a, b = chunks(np.random.default_rng(6), 2, "int32")
    tree.lose = lambda src, port, pkt: (src, port) == ("root", LEAF_AT["leaf2"])
    one_round(tree, a, seq=0)
    tree.lose = lambda src, port, pkt: False
    one_round(tree, b, seq=2, hosts=("h1", "h2"))  # slot 0 moves on to seq 2 at the root
    one_round(tree, a, seq=0, hosts=("h3",))  # the retransmission is not stale
    for h in ("h3", "h4"):
        [pkt] = results(tree, h, 0)
        check_result(h, pkt, a)
    assert tree.counters("root")["shadow_replies"] == 1
    one_round(tree, b, seq=2, hosts=("h3", "h4"))
    for h in HOSTS:
        [pkt] = results(tree, h, 2)
        check_result(h, pkt, b)


def test_lost_result_to_one_host_recovered_at_its_leaf() -> None:
    tree = Tree(nslots=2)
    a, b = chunks(np.random.default_rng(7), 2, "float32")
    tree.lose = lambda src, port, pkt: (src, port) == ("leaf1", 1) and pkt.seq == 0
    one_round(tree, a, seq=0)
    tree.lose = lambda src, port, pkt: False
    one_round(tree, b, seq=2, hosts=("h2",))  # h2 got seq 0 and moves on
    tree.sent.clear()
    one_round(tree, a, seq=0, hosts=("h1",))
    assert [(sw, port) for sw, port, _f in tree.sent] == [("leaf1", 1)]
    [pkt] = results(tree, "h1", 0)
    check_result("h1", pkt, a)
    assert tree.counters("leaf1")["shadow_replies"] == 1


def test_stale_seq_dropped() -> None:
    tree = Tree(nslots=2)
    data = chunks(np.random.default_rng(8), 3, "int32")
    for s in range(3):  # slot 0 holds seq 0, then seq 2; seq 0's result is the shadow
        one_round(tree, data[s], seq=s)
    one_round(tree, data[1], seq=3, hosts=("h1",))
    one_round(tree, data[0], seq=4, hosts=("h1",))  # slot 0 moves on to seq 4
    tree.sent.clear()
    one_round(tree, data[0], seq=0, hosts=("h1",))  # two rounds old: stale
    one_round(tree, data[0], seq=1, hosts=("h2",))  # slot 1 holds seq 3 and shadow 1
    # Only h2's seq 1 was answered (from slot 1's previous round); h1's seq 0 was dropped.
    assert [(sw, port) for sw, port, _f in tree.sent] == [("leaf1", 2)]
    assert tree.counters("leaf1")["stale"] == 1
    # A RESULT from the parent for a seq the slot does not hold is stale too.
    leaf = tree.engines["leaf1"]
    res = agg.AggTemplate(JOB_MAC, JOB_MAC, JOB_IP, JOB_IP).frame(
        agg.KIND_RESULT, agg.DTYPE_INT32, JOB, 6, 0, data[0]["h1"].astype(">i4").tobytes()
    )
    assert leaf.receive(UP, res, 0.0) == []
    assert tree.counters("leaf1")["stale"] == 2


# ----- malformed input -----------------------------------------------------------------


def root_with_hosts(nslots: int = 4) -> AggEngine:
    """A one-switch tree: the root's children are h1 (port 1) and h2 (port 2)."""
    eng = AggEngine(switch_ports(1))
    kids = tuple(
        ofext.AggChild(port, mac, ip) for lf, port, mac, ip, _r in HOSTS.values() if lf == "leaf1"
    )
    eng.job_set(ofext.AggJobSet(JOB, nslots, True, 0, JOB_IP, JOB_MAC, kids))
    return eng


def clean_round_ok(eng: AggEngine, seq: int, nslots: int = 4) -> None:
    rng = np.random.default_rng(seq)
    a, b = (rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32) for _ in "ab")
    assert eng.receive(1, host_frame("h1", seq, a, nslots), 0.0) == []
    outs = eng.receive(2, host_frame("h2", seq, b, nslots), 0.0)
    assert sorted(port for port, _f, _q in outs) == [1, 2]
    for _port, frame, _q in outs:
        assert agg.parse(frame).array().astype(np.int32).tobytes() == (a + b).tobytes()


def patched(frame: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(frame)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


VALID = host_frame("h1", 5, np.arange(8, dtype=np.int32), 4)
H = 42  # header offset


@pytest.mark.parametrize(
    "frame, port, counter",
    [
        (patched(VALID, H, "!B", 9), 1, "malformed"),  # version
        (patched(VALID, H + 1, "!B", 2), 1, "malformed"),  # kind
        (patched(VALID, H + 2, "!B", 2), 1, "malformed"),  # dtype
        (patched(VALID, H + 12, "!H", 7), 1, "malformed"),  # count vs payload
        (patched(VALID, H + 12, "!H", 300), 1, "malformed"),  # count > 256
        (VALID[:-4], 1, "malformed"),  # payload cut
        (patched(VALID, H + 6, "!H", 2), 1, "malformed"),  # slot != seq % nslots
        (patched(VALID, H + 4, "!H", 99), 1, "unknown_job"),
        (VALID, OTHER, "bad_port"),  # not in the tree
        (patched(VALID, H + 1, "!B", agg.KIND_RESULT), 1, "bad_port"),  # a RESULT at the root
        (bytes(Ether() / IP(dst=JOB_IP) / TCP(dport=4792)), 1, "malformed"),  # not an agg frame
    ],
    ids=[
        "version",
        "kind",
        "dtype",
        "count",
        "count-max",
        "cut",
        "slot",
        "job",
        "port",
        "result-at-root",
        "tcp",
    ],
)
def test_malformed_counted_and_dropped(frame: bytes, port: int, counter: str) -> None:
    eng = root_with_hosts()
    assert eng.receive(port, frame, 0.0) == []
    r = eng.report()
    assert {k: r[k] for k in ("malformed", "unknown_job", "bad_port")} == {
        k: int(k == counter) for k in ("malformed", "unknown_job", "bad_port")
    }
    assert r["jobs"][str(JOB)]["contributions"] == 0
    clean_round_ok(eng, 5)


def test_truncated_frames() -> None:
    eng = root_with_hosts()
    for n in range(len(VALID)):
        assert eng.receive(1, VALID[:n], 0.0) == []
    assert eng.report()["malformed"] == len(VALID)
    clean_round_ok(eng, 5)


@pytest.mark.parametrize(
    "other",
    [
        lambda: np.arange(8, dtype=np.float32),  # dtype differs within the slot
        lambda: np.arange(9, dtype=np.int32),  # count differs within the slot
    ],
)
def test_mismatch_within_a_slot(other) -> None:
    eng = root_with_hosts()
    a = np.arange(8, dtype=np.int32)
    assert eng.receive(1, host_frame("h1", 5, a, 4), 0.0) == []
    assert eng.receive(2, host_frame("h2", 5, other(), 4), 0.0) == []
    assert eng.report()["malformed"] == 1
    outs = eng.receive(2, host_frame("h2", 5, a, 4), 0.0)
    assert len(outs) == 2 and agg.parse(outs[0][1]).array().tolist() == (2 * a).tolist()


def test_wrong_direction_at_a_leaf() -> None:
    tree = Tree(nslots=4)
    leaf = tree.engines["leaf1"]
    assert leaf.receive(UP, VALID, 0.0) == []  # CONTRIB from the parent
    res = patched(VALID, H + 1, "!B", agg.KIND_RESULT)
    assert leaf.receive(1, res, 0.0) == []  # RESULT from a child
    assert leaf.receive(OTHER, res, 0.0) == []
    assert leaf.report()["bad_port"] == 3


def test_fuzz_never_raises_and_leaves_results_alone() -> None:
    tree = Tree(nslots=4)
    data = chunks(np.random.default_rng(9), 8, "int32")
    rng = random.Random(9)
    prefix = VALID[:H]
    frames = []
    for i in range(6000):
        if i % 3 == 0:
            frames.append(rng.randbytes(rng.randrange(0, 1600)))
        else:
            tail = rng.randbytes(rng.randrange(0, 1100))
            frame = bytearray(prefix + tail)
            if i % 3 == 1:  # consistent lengths: the header checks are reached
                struct.pack_into("!H", frame, 16, len(frame) - 14)
                struct.pack_into("!H", frame, 38, len(frame) - 34)
            frames.append(bytes(frame))
    for frame in frames:
        for eng in tree.engines.values():
            eng.receive(rng.randrange(0, 6), frame, 0.0)
    for sw, eng in tree.engines.items():
        r = eng.report()
        assert r["malformed"] + r["unknown_job"] + r["bad_port"] == len(frames), sw
        assert tree.counters(sw)["contributions"] == 0
    got = all_reduce(tree, data)
    for h in HOSTS:
        for s, pkt in got[h].items():
            check_result(h, pkt, data[s])


# ----- the slot pool and job configuration ----------------------------------------------


def small_job(job_id: int, nslots: int) -> ofext.AggJobSet:
    return ofext.AggJobSet(
        job_id,
        nslots,
        True,
        0,
        JOB_IP,
        JOB_MAC,
        (ofext.AggChild(1, HOSTS["h1"][2], HOSTS["h1"][3]),),
    )


def test_slot_pool_exhaustion_replace_and_delete() -> None:
    eng = AggEngine(switch_ports(1), total_slots=16)
    eng.job_set(small_job(1, 10))
    with pytest.raises(AggNoSlots) as exc:
        eng.job_set(small_job(2, 8))
    assert (exc.value.type, exc.value.code) == (ofext.OFPET_EXPERIMENTER, ofext.AGG_ERR_NO_SLOTS)
    assert set(eng.jobs) == {1} and eng.slots_used == 10
    eng.job_set(small_job(1, 4))  # replacing returns the old job's slots first
    eng.job_set(small_job(2, 8))
    assert eng.slots_used == 12
    with pytest.raises(AggNoSlots):
        eng.job_set(small_job(3, 5))
    with pytest.raises(AggNoSlots):  # a refused replacement keeps the old job
        eng.job_set(small_job(1, 9))
    assert eng.jobs[1].nslots == 4
    eng.job_del(1)
    eng.job_set(small_job(3, 5))
    assert eng.report()["slots_used"] == 13
    eng.job_del(77)  # unknown: nothing happens
    eng.job_del(ofext.AGG_JOB_ALL)
    assert (eng.report()["slots_used"], eng.report()["jobs"]) == (0, {})


def test_replacing_a_job_resets_its_state() -> None:
    eng = root_with_hosts()
    a = np.arange(8, dtype=np.int32)
    eng.receive(1, host_frame("h1", 5, a, 4), 0.0)
    eng.job_set(eng.jobs[JOB].spec)
    assert eng.report()["jobs"][str(JOB)]["contributions"] == 0
    assert eng.receive(2, host_frame("h2", 5, a, 4), 0.0) == []  # h1's part is gone
    assert len(eng.receive(1, host_frame("h1", 5, a, 4), 0.0)) == 2


@pytest.mark.parametrize(
    "spec",
    [
        ofext.AggJobSet(1, 2, True, 3, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),)),
        ofext.AggJobSet(1, 2, False, 0, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),)),
        ofext.AggJobSet(1, 2, False, 9, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),)),
        ofext.AggJobSet(1, 2, True, 0, JOB_IP, JOB_MAC, (ofext.AggChild(9, JOB_MAC, JOB_IP),)),
        ofext.AggJobSet(1, 2, False, 1, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),)),
        ofext.AggJobSet(1, 2, True, 0, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),) * 2),
    ],
    ids=[
        "root-with-parent",
        "no-parent",
        "unknown-parent",
        "unknown-child",
        "parent-is-child",
        "child-twice",
    ],
)
def test_bad_ports_refused(spec: ofext.AggJobSet) -> None:
    eng = AggEngine(switch_ports(1))
    with pytest.raises(OFError) as exc:
        eng.job_set(spec)
    assert (exc.value.type, exc.value.code) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT)
    assert not eng.jobs


def test_nothing_sent_out_of_a_dead_port() -> None:
    eng = root_with_hosts()
    eng.ports[2].config |= OFPPC_PORT_DOWN
    a = np.arange(4, dtype=np.int32)
    eng.receive(1, host_frame("h1", 0, a, 4), 0.0)
    outs = eng.receive(2, host_frame("h2", 0, a, 4), 0.0)
    assert [port for port, _f, _q in outs] == [1]
    assert eng.report()["dropped_port_down"] == 1


# ----- pipeline and datapath hooks --------------------------------------------------------


def steer(pl: Pipeline) -> None:
    """The aggregation manager's flow: the job's frames go to the engine."""
    pl.flow_mod(
        p.OFPFlowMod(
            None,
            table_id=0,
            priority=100,
            command=ofp.OFPFC_ADD,
            match=p.OFPMatch(
                eth_type=0x0800, ip_proto=17, ipv4_dst=JOB_IP, udp_dst=agg.AGG_UDP_PORT
            ),
            instructions=[
                p.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(ofext.AGG_PORT)]
                )
            ],
        )
    )
    pl.flow_mod(
        p.OFPFlowMod(
            None,
            table_id=0,
            priority=1,
            command=ofp.OFPFC_ADD,
            match=p.OFPMatch(),
            instructions=[
                p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(OTHER)])
            ],
        )
    )


def test_flow_steers_aggregation_frames_to_agg_port() -> None:
    pl = Pipeline(ports=switch_ports(1))
    steer(pl)
    frame = host_frame("h1", 0, np.arange(4, dtype=np.int32), 4)
    for _ in range(2):  # the slow path, then the microflow cache
        assert pl.process(1, frame, 0.0) == ([(ofext.AGG_PORT, frame, None)], [])
    other = bytes(Ether() / IP(dst=JOB_IP) / UDP(dport=4791) / (b"x" * 8))
    assert pl.process(1, other, 0.0)[0] == [(OTHER, other, None)]
    assert len(pl.flow_stats(out_port=ofext.AGG_PORT)) == 1
    assert pl.dropped_port_down == 0


def test_datapath_hands_agg_port_outputs_to_the_engine_and_queues_on_priority_3() -> None:
    ports = switch_ports(1)
    pl = Pipeline(ports=ports)
    steer(pl)
    eng = AggEngine(ports)
    kids = tuple(
        ofext.AggChild(port, mac, ip) for lf, port, mac, ip, _r in HOSTS.values() if lf == "leaf1"
    )
    eng.job_set(ofext.AggJobSet(JOB, 4, True, 0, JOB_IP, JOB_MAC, kids))
    dp = lite_datapath(ports, pl, eng)
    a, b = np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32) * 10
    for host, port, data in (("h1", 1, a), ("h2", 2, b)):
        outs, _pins = pl.process(port, host_frame(host, 0, data, 4), 0.0)
        dp._enqueue(outs, port, 0.0)
    assert dp.busy == {1, 2}
    for port in (1, 2):
        sched = dp.schedulers[port]
        assert sched.depth_bytes[3] > 0 and sum(sched.depth_bytes) == sched.depth_bytes[3]
        frame, prio, (in_port, _charge) = sched.dequeue(1.0)
        assert (prio, in_port) == (3, 2)  # lossless class, charged to the ingress port
        pkt = agg.parse(frame)
        assert pkt.dst_ip == HOSTS["h%d" % port][3] and pkt.array().tolist() == (a + b).tolist()
    assert dp.buffer.ingress[(2, 3)] > 0
    # A frame the engine refuses is dropped without a trace in the queues.
    dp._enqueue([(ofext.AGG_PORT, b"\x00" * 60, None)], 1, 0.0)
    assert eng.report()["malformed"] == 1 and dp.agg_errors == 0


# ----- the OpenFlow agent ------------------------------------------------------------------


def session(total_slots: int = 16) -> OpenFlowSession:
    ports = switch_ports(1, 6)
    model = SwitchModel(
        0x1234, Pipeline(ports=ports), agg=AggEngine(ports, total_slots=total_slots)
    )
    s = OpenFlowSession(model, is_controller_channel=True)
    assert s.feed(HELLO, 0.0) == []
    return s


def job_set_msg(spec: ofext.AggJobSet) -> bytes:
    return encode(
        p.OFPExperimenter(
            None,
            experimenter=ofext.EMU_EXPERIMENTER_ID,
            exp_type=ofext.EXP_AGG_JOB_SET,
            data=ofext.pack_agg_job_set(spec),
        )
    )


def job_del_msg(job_id: int) -> bytes:
    return encode(
        p.OFPExperimenter(
            None,
            experimenter=ofext.EMU_EXPERIMENTER_ID,
            exp_type=ofext.EXP_AGG_JOB_DEL,
            data=ofext.pack_agg_job_del(job_id),
        )
    )


def test_flow_mod_to_agg_port_accepted() -> None:
    s = session()
    msg = encode(
        p.OFPFlowMod(
            None,
            table_id=0,
            priority=100,
            command=ofp.OFPFC_ADD,
            match=p.OFPMatch(
                eth_type=0x0800, ip_proto=17, ipv4_dst=JOB_IP, udp_dst=agg.AGG_UDP_PORT
            ),
            instructions=[
                p.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(ofext.AGG_PORT)]
                )
            ],
        )
    )
    assert s.feed(msg, 0.0) == []
    frame = host_frame("h1", 0, np.arange(4, dtype=np.int32), 4)
    assert s.model.pipeline.process(1, frame, 0.0)[0] == [(ofext.AGG_PORT, frame, None)]
    # Flow stats carry the logical port back to the controller.
    [reply] = reply_bytes(s.feed(encode(p.OFPFlowStatsRequest(None, out_port=ofext.AGG_PORT)), 0.0))
    [stat] = decode(reply).body
    assert stat.instructions[0].actions[0].port == ofext.AGG_PORT


def test_job_set_and_del_over_openflow() -> None:
    s = session()
    eng = s.model.agg
    spec = ofext.AggJobSet(
        7,
        4,
        False,
        3,
        JOB_IP,
        JOB_MAC,
        (
            ofext.AggChild(1, HOSTS["h1"][2], HOSTS["h1"][3]),
            ofext.AggChild(2, HOSTS["h2"][2], HOSTS["h2"][3]),
        ),
    )
    assert s.feed(job_set_msg(spec), 0.0) == []
    assert eng.jobs[7].spec == spec and eng.slots_used == 4
    assert s.feed(job_set_msg(small_job(8, 2)), 0.0) == []
    assert eng.slots_used == 6
    assert s.feed(job_del_msg(7), 0.0) == []
    assert set(eng.jobs) == {8}
    assert s.feed(job_del_msg(ofext.AGG_JOB_ALL), 0.0) == []
    assert not eng.jobs
    [reply] = reply_bytes(s.feed(encode(p.OFPBarrierRequest(None)), 0.0))
    assert isinstance(decode(reply), p.OFPBarrierReply)


def test_no_slots_answered_with_the_experimenter_error() -> None:
    s = session(total_slots=16)
    assert s.feed(job_set_msg(small_job(1, 10)), 0.0) == []
    msg = job_set_msg(small_job(2, 7))
    msg = msg[:4] + struct.pack("!I", 4242) + msg[8:]
    [reply] = reply_bytes(s.feed(msg, 0.0))
    err = decode(reply)
    assert isinstance(err, p.OFPErrorMsg) and err.xid == 4242
    assert err.type == ofp.OFPET_EXPERIMENTER
    assert (err.exp_type, err.experimenter) == (ofext.AGG_ERR_NO_SLOTS, ofext.EMU_EXPERIMENTER_ID)
    assert bytes(err.data) == msg[:64]
    assert set(s.model.agg.jobs) == {1}
    assert s.feed(job_del_msg(1), 0.0) == []  # deleting frees the slots
    assert s.feed(msg, 0.0) == []
    assert set(s.model.agg.jobs) == {2}


@pytest.mark.parametrize(
    "msg, expected",
    [
        (
            ofext.experimenter_message(
                ofext.EXP_AGG_JOB_SET, ofext.pack_agg_job_set(small_job(1, 2))[:-1]
            ),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN),
        ),
        (
            ofext.experimenter_message(
                ofext.EXP_AGG_JOB_SET, ofext.pack_agg_job_set(small_job(1, 2)) + b"\x00" * 4
            ),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN),
        ),
        (
            ofext.experimenter_message(ofext.EXP_AGG_JOB_DEL, b"\x00\x01"),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN),
        ),
        (
            job_set_msg(
                ofext.AggJobSet(
                    1, 2, True, 0, JOB_IP, JOB_MAC, (ofext.AggChild(9, JOB_MAC, JOB_IP),)
                )
            ),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT),
        ),
        (
            job_set_msg(
                ofext.AggJobSet(
                    1, 2, False, 0, JOB_IP, JOB_MAC, (ofext.AggChild(1, JOB_MAC, JOB_IP),)
                )
            ),
            (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_PORT),
        ),
        (ofext.experimenter_message(4, b""), (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_EXP_TYPE)),
    ],
    ids=["short", "long", "del-short", "bad-child", "no-parent", "exp-type"],
)
def test_bad_job_messages_get_the_documented_error(msg: bytes, expected: tuple) -> None:
    s = session()
    assert errors(s.feed(msg, 0.0)) == [expected]
    assert not s.model.agg.jobs
    [reply] = reply_bytes(s.feed(encode(p.OFPBarrierRequest(None)), 0.0))  # the session lives on
    assert isinstance(decode(reply), p.OFPBarrierReply)


def test_slave_may_not_set_jobs() -> None:
    s = session()
    assert s.feed(job_set_msg(small_job(1, 2)), 0.0) == []
    s.feed(encode(p.OFPRoleRequest(None, ofp.OFPCR_ROLE_SLAVE, 1)), 0.0)
    assert errors(s.feed(job_set_msg(small_job(2, 2)), 0.0)) == [
        (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)
    ]
    assert errors(s.feed(job_del_msg(1), 0.0)) == [(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE)]
    assert set(s.model.agg.jobs) == {1}
