"""In-network (SHARP-like) all-reduce on real fabrics: hosts, switch engines, aggregation manager.

    spine1   spine2        controllers.aggregation builds each job's tree on the
    leaf1 .. leafN         topology routing discovered and configures the switch
    hosts                  engines; ranks send their data up once and get the sum

Checked on real packets: results equal numpy's sum (int32 bit exact, float32
within the summation bound) for 4, 8 and 16 ranks; each host sends about S
bytes (its leaf switch's port counter); two concurrent jobs on shared switches;
a refused job falls back to the ring; duplicated and malformed aggregation
frames injected during a job neither corrupt it nor crash a switch; a tree that
loses a link is rebuilt and the job keeps working, and an all-reduce in flight
across the rebuild starts over and is correct.
"""

from __future__ import annotations

import threading

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emu.host.data import rank_input
from emu.net import wait_for
from emu.proto import agg, layers
from emu.traffic import collectives
from emu.traffic.collectives import nccl_table, run_allreduce

from . import hosts_of, rdma_fabric

APPS = ("controllers.routing", "controllers.aggregation")


def check(results, n, algo="sharp"):
    for r in results:
        assert r.algo == algo, f"ran {r.algo}, expected {algo}"
        assert r.wrong == 0, f"{r.size_bytes} B {r.dtype}: {r.wrong} wrong elements"
        assert r.digests_agree
        if r.port_tx_bytes:
            model = collectives.model_bytes_per_host(algo, r.size_bytes, n)
            # Frames carry 1024 payload bytes in 1082 (headers); ACKs add a little for the ring.
            for h, sent in r.port_tx_bytes.items():
                assert model <= sent <= 1.12 * model + 2 * 1082, (h, sent, model)


def leaf_agg(fabric, leaf):
    return fabric.switch_call(leaf, "agg")


def register(fabric, hosts, nslots):
    """A job the test keeps: the manager's answer, and run_allreduce's options for it."""
    job = fabric.agg_call(
        "register", hosts=[fabric.graph.nodes[h]["ip"] for h in hosts], nslots=nslots
    )
    return job, {k: job[k] for k in ("job_id", "job_ip", "job_mac", "nslots")}


def spines_by_dpid(fabric):
    return {f"{fabric.graph.nodes[s]['dpid']:016x}": s for s in ("spine1", "spine2")}


@rdma_fabric(leaves=4, hosts_per_leaf=2, apps=APPS)
def test_sharp_8_ranks_correct_with_S_bytes_per_host(fabric):
    hosts = hosts_of(8)
    res = run_allreduce(
        fabric, hosts, [4, 4 * 1001, 256 << 10], "int32", algo="sharp", seed=1, count_ports=True
    )
    res += run_allreduce(
        fabric, hosts, [4 * 3, 512 << 10], "float32", algo="sharp", seed=2, count_ports=True
    )
    print("\n" + nccl_table(res))
    check(res, 8)
    # The tree: a spine root, the four leaves below it.
    job = res[0].agg_job
    assert job["root"] in {f"{fabric.graph.nodes[s]['dpid']:016x}" for s in ("spine1", "spine2")}
    assert len(job["tree"]) == 5
    # The job was unregistered after the call: its slots are back on every switch.
    for leaf in ("leaf1", "leaf2", "leaf3", "leaf4"):
        st = leaf_agg(fabric, leaf)
        assert st["slots_used"] == 0 and st["malformed"] == 0, st


@rdma_fabric(leaves=2, hosts_per_leaf=2, apps=APPS)
def test_sharp_4_ranks_and_a_refused_job_falls_back_to_the_ring(fabric):
    hosts = hosts_of(4)
    res = run_allreduce(fabric, hosts, [4 * 7, 64 << 10], "float32", algo="sharp", seed=3)
    check(res, 4)
    # 2000 slots is more than any switch's pool: the manager refuses, the ring runs.
    res = run_allreduce(fabric, hosts, [64 << 10], "int32", algo="sharp", nslots=2000, seed=4)
    check(res, 4, algo="ring")


@rdma_fabric(leaves=4, hosts_per_leaf=4, apps=APPS)
def test_sharp_16_ranks(fabric):
    hosts = hosts_of(16)
    res = run_allreduce(
        fabric, hosts, [4 * 999, 128 << 10], "int32", algo="sharp", seed=5, timeout_s=120
    )
    res += run_allreduce(fabric, hosts, [128 << 10], "float32", algo="sharp", seed=6, timeout_s=120)
    print("\n" + nccl_table(res))
    check(res, 16)


@rdma_fabric(leaves=4, hosts_per_leaf=2, apps=APPS)
def test_two_concurrent_jobs_on_shared_switches(fabric):
    a, b = ["h1", "h3", "h5", "h7"], ["h2", "h4", "h6", "h8"]  # both jobs on every leaf
    collectives.host_nics(fabric, hosts_of(8))
    out, errors = {}, []

    def job(name, hosts, dtype, seed):
        try:
            out[name] = run_allreduce(
                fabric, hosts, [4 * 1003, 256 << 10], dtype, algo="sharp", seed=seed
            )
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(f"{name}: {exc!r}")

    threads = [
        threading.Thread(target=job, args=("a", a, "int32", 7)),
        threading.Thread(target=job, args=("b", b, "float32", 8)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and set(out) == {"a", "b"}, errors
    check(out["a"], 4)
    check(out["b"], 4)
    ja, jb = out["a"][0].agg_job, out["b"][0].agg_job
    assert ja["job_id"] != jb["job_id"]
    assert set(ja["tree"]) & set(jb["tree"]), "the jobs were meant to share switches"


def _inject(fabric, host, job, n_bad, tmp_path):
    """From `host`: aggregation frames that are malformed, foreign or duplicated."""
    node = fabric.graph.nodes[host]
    base = (
        Ether(src=node["mac"], dst=job["job_mac"])
        / IP(src=node["ip"], dst=job["job_ip"], tos=26 << 2)
        / UDP(sport=4792, dport=4792)
    )
    # h1's true chunk 0 of the coming all-reduce (seed 9, rank 0): sent early and
    # again, it is a duplicate of what h1 sends itself, not a different contribution.
    data = rank_input(9, 0, 5000, "int32")[: agg.MAX_ELEMENTS]
    chunk0 = agg.AggTemplate(node["mac"], job["job_mac"], node["ip"], job["job_ip"]).frame(
        agg.KIND_CONTRIB, agg.DTYPE_INT32, job["job_id"], 0, 0, data.astype(">i4").tobytes(), rank=0
    )
    frames = [
        base / Raw(b"\x01\x00"),  # truncated header
        base / layers.AggHeader(version=9, job_id=job["job_id"], count=1) / Raw(bytes(4)),
        base / layers.AggHeader(job_id=job["job_id"], count=300) / Raw(bytes(1200)),
        base / layers.AggHeader(job_id=job["job_id"], count=4) / Raw(bytes(3)),
        base / layers.AggHeader(job_id=job["job_id"], seq=5, slot=1, count=1) / Raw(bytes(4)),
        base / layers.AggHeader(job_id=0x7777, count=1) / Raw(bytes(4)),  # unknown job
        Ether(chunk0),
    ]
    listing = tmp_path / "frames.hex"
    listing.write_text("\n".join(bytes(f).hex() for f in frames * n_bad) + "\n")
    script = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n"
        f"s.bind(('{host}-eth0',0))\n"
        "for line in open(sys.argv[1]): s.send(bytes.fromhex(line.strip()))\n"
    )
    fabric.host_run(host, ["python3", "-c", script, str(listing)], check=True)


@rdma_fabric(leaves=2, hosts_per_leaf=2, apps=APPS)
def test_malformed_and_duplicate_frames_neither_corrupt_nor_crash(fabric, tmp_path):
    hosts = hosts_of(4)
    collectives.host_nics(fabric, hosts)
    job, opts = register(fabric, hosts, nslots=16)
    try:
        # Garbage first, while the job is registered and idle: chunk 0 of h1 arrives
        # early, then h1's own chunk 0 is a duplicate the leaf must count once.
        _inject(fabric, "h1", job, n_bad=5, tmp_path=tmp_path)
        res = run_allreduce(fabric, hosts, [4 * 5000], "int32", algo="sharp", seed=9, options=opts)
        st = leaf_agg(fabric, "leaf1")
    finally:
        fabric.agg_call("unregister", job_id=job["job_id"])
    check(res, 4)
    assert st["malformed"] >= 5 * 4 and st["unknown_job"] >= 5, st
    # Six copies of h1's chunk 0 reached leaf1: counted once, five duplicates.
    assert st["jobs"][str(job["job_id"])]["duplicates"] >= 5, st
    for sw in ("leaf1", "leaf2", "spine1", "spine2"):
        assert fabric.switch(sw).proc.poll() is None, f"{sw} died"


@rdma_fabric(leaves=2, hosts_per_leaf=2, apps=APPS)
def test_tree_rebuilt_when_its_link_fails(fabric):
    hosts = hosts_of(4)
    job, opts = register(fabric, hosts, nslots=16)
    try:
        first = run_allreduce(
            fabric, hosts, [64 << 10], "int32", algo="sharp", seed=10, options=opts
        )
        check(first, 4)
        dpid_of = spines_by_dpid(fabric)
        root = dpid_of[job["root"]]
        fabric.faults.link_down("leaf1", root)

        def rebuilt():
            (j,) = [j for j in fabric.agg_call("jobs")["jobs"] if j["job_id"] == job["job_id"]]
            return j if j["rebuilds"] >= 1 else None

        now = wait_for(rebuilt, 10, "the aggregation tree to be rebuilt")
        assert now["state"] == "active" and dpid_of[now["root"]] != root
        second = run_allreduce(
            fabric, hosts, [64 << 10], "float32", algo="sharp", seed=11, options=opts
        )
        check(second, 4)
    finally:
        fabric.agg_call("unregister", job_id=job["job_id"])


@rdma_fabric(leaves=2, hosts_per_leaf=2, apps=APPS)
def test_all_reduce_in_flight_starts_over_when_its_tree_is_rebuilt(fabric):
    # If the cut loses a result that other ranks already got, the new tree's
    # empty slots can never finish that chunk (shown in
    # tests/unit/test_sharp_host.py); whether it does depends on what is in
    # flight at the cut. So the job's epoch moves on every rebuild and
    # run_allreduce starts the all-reduce over, whatever was lost.
    hosts = hosts_of(4)
    job, opts = register(fabric, hosts, nslots=16)
    try:
        dpid_of = spines_by_dpid(fabric)
        root = dpid_of[job["root"]]
        # 4 MiB per rank at 10 Mbit/s takes about 3.5 s; the cut comes 1.5 s in.
        fabric.faults.link_down("leaf1", root, at=1.5)
        [res] = run_allreduce(
            fabric, hosts, [4 << 20], "int32", algo="sharp", seed=12, options=opts
        )
        check([res], 4)
        assert res.restarts >= 1
        (now,) = [j for j in fabric.agg_call("jobs")["jobs"] if j["job_id"] == job["job_id"]]
        assert now["rebuilds"] == 1 and now["epoch"] >= 1 and dpid_of[now["root"]] != root
        # The job keeps working on its new tree.
        check(
            run_allreduce(
                fabric, hosts, [64 << 10], "float32", algo="sharp", seed=13, options=opts
            ),
            4,
        )
    finally:
        fabric.agg_call("unregister", job_id=job["job_id"])
