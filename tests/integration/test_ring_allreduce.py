"""Ring all-reduce on real fabrics: real data in RoCEv2 SENDs, every rank checks its own sum.

    4 hosts                  8 hosts                       16 hosts
    spine1   spine2          spine1   spine2               spine1    spine2
     |  \\   /  |             |  \\   /  |                 (every leaf to both)
    leaf1   leaf2           leaf1    leaf2            leaf1  leaf2  leaf3  leaf4
    h1 h2   h3 h4          h1..h4   h5..h8           h1..h4 h5..h8 h9..h12 h13..h16

Ranks are the hosts in order, the ring h1 -> h2 -> ... -> h1 (one RC QP per
hop, DCQCN on, PFC on). Checked: #wrong == 0 for int32 (bit exact) and
float32 (within gamma_{n-1} sum|x|), every rank holds the same bytes, the
bytes each NIC sent are 2(n-1)/n of the message as the ring algorithm says,
what crosses the wire is the data (decoded independently with Scapy from a
tcpdump capture), and a large message's bus bandwidth is at least 0.9 of the
link's RoCE goodput (nccl-tests: busbw = algbw x 2(n-1)/n approaches it). At
16 ranks on 2 cores the emulator falls behind and DCQCN answers the queues
its stalls build; the 16-rank test says what is asserted then and why.

Link rate 10 Mbit/s: measured on the 2-core build machine, 16 agents and 6
switches at 10 Mbit/s keep the CPUs about 85% busy; at 20 Mbit/s, 8 hosts
already got ECN marks from scheduling jitter (see the busbw test's notes).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from scapy.contrib.roce import BTH
from scapy.packet import Raw
from scapy.utils import rdpcap

from emu import fabric as fabric_mod
from emu import fidelity
from emu.config import EcnSpec
from emu.host.data import rank_input
from emu.host.ring import RingAllReduce
from emu.mgmt import MgmtError
from emu.net import wait_for
from emu.proto import roce
from emu.telemetry import collect_fidelity, reset_fidelity
from emu.traffic.collectives import nccl_table, run_allreduce
from emu.traffic.rdma import RdmaHosts

from . import RDMA_RATE_BPS as RATE_BPS
from . import hosts_of, rdma_fabric

MTU_PAYLOAD = 1024
FRAME_BYTES = 14 + 20 + 8 + 12 + MTU_PAYLOAD + 4  # Ethernet/IPv4/UDP/BTH/payload/ICRC
GOODPUT_BYTES_PER_S = RATE_BPS / 8 * MTU_PAYLOAD / FRAME_BYTES
# The shallowest queue a switch marks, in the fidelity monitor's unit (full-frame times).
KMIN_FRAMES = EcnSpec().thresholds(RATE_BPS)[0] / fidelity.FRAME_BYTES
_SENDS = (roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_LAST, roce.SEND_ONLY)


def check(results, n):
    """Correct everywhere; payload bytes per host = 2(n-1)/n of the message, no loss."""
    for r in results:
        assert r.wrong == 0, f"{r.size_bytes} B {r.dtype}: {r.wrong} wrong elements"
        assert r.digests_agree, f"{r.size_bytes} B {r.dtype}: ranks ended with different bytes"
        want = 2 * (n - 1) / n * r.size_bytes
        itemsize = 4
        for h, sent in r.tx_payload_bytes.items():
            # Chunks are whole elements: a host's share may differ by an element per step.
            assert abs(sent - want) <= max(0.02 * want, 2 * (n - 1) * itemsize), (h, sent, want)
            assert r.retransmitted[h] == 0, (h, r.retransmitted[h])
            assert r.tx_frame_bytes[h] > sent


def assert_busbw(big, n, deficit=0.0):
    """nccl-tests: busbw = algbw x 2(n-1)/n approaches the link's goodput; 0.9 of it leaves
    the pipeline's fill and each step's latency. `deficit`: the share of link time the
    emulator lost on its worst port (emu/fidelity.py), which the ring, paced by its
    slowest link, loses too."""
    frames = sum(big.tx_frame_bytes.values()) / n
    payload = sum(big.tx_payload_bytes.values()) / n
    # Full-size frames: headers cost what the goodput formula says.
    assert (
        payload * FRAME_BYTES / MTU_PAYLOAD <= frames <= payload * FRAME_BYTES / MTU_PAYLOAD * 1.01
    )
    ratio = big.busbw_bytes_per_s / GOODPUT_BYTES_PER_S
    bar = 0.9 * (1 - deficit)
    assert ratio >= bar, (
        f"busbw {big.busbw_bytes_per_s / 1e6:.3f} MB/s is {ratio:.3f} of the "
        f"RoCE goodput {GOODPUT_BYTES_PER_S / 1e6:.3f} MB/s, below {bar:.3f} "
        f"(time {big.time_s:.2f} s)"
    )


def wire_messages(pcap, src_ip):
    """SEND messages from `src_ip` in a capture, reassembled by PSN with Scapy (duplicates dropped)."""
    packets = {}
    for pkt in rdpcap(str(pcap)):
        if BTH not in pkt or pkt["IP"].src != src_ip or pkt[BTH].opcode not in _SENDS:
            continue  # h1's ACKs to h4 share its address and number their own PSNs
        bth = pkt[BTH]
        load = bytes(pkt[Raw].load) if Raw in pkt else b""
        packets.setdefault(bth.psn, (bth.opcode, load[: len(load) - bth.padcount]))
    messages, parts = [], []
    for psn in sorted(packets):
        opcode, data = packets[psn]
        parts.append(data)
        if opcode in (roce.SEND_LAST, roce.SEND_ONLY):
            messages.append(b"".join(parts))
            parts = []
    return messages


@rdma_fabric(leaves=2, hosts_per_leaf=2)
def test_ring_allreduce_4_hosts(fabric, tmp_path):
    hosts = hosts_of(4)
    nics = RdmaHosts(fabric, hosts)
    # Tiny and uneven sizes: empty chunks and slices, counts not divisible by 4.
    small = run_allreduce(
        nics, hosts, [4, 12, 4 * 1001, 64 * 1024 + 4], "int32", seed=1, slice_bytes=4096
    )
    small += run_allreduce(nics, hosts, [8, 4 * 4099], "float32", seed=2, slice_bytes=4096)
    check(small, 4)
    # Large enough to take a few seconds: 1.5 x 2 MiB per host at 10 Mbit/s.
    window = FidelityWindow(fabric, nics, hosts)
    big = run_allreduce(nics, hosts, 2 << 20, "float32", seed=3)
    found = window.close(tmp_path / "big")
    check(big, 4)
    print("\n" + nccl_table(small + big))
    print(found["text"])
    # Measured here at 0.99 of goodput; CI once measured 0.847 in a run whose
    # fidelity was not judged. As at 8 ranks, a miss is a failure only when the
    # emulator kept up; otherwise it is xfail with the monitor's verdict.
    try:
        assert_busbw(big[0], 4, found["deficit"])
    except AssertionError:
        if found["verdict"].faithful:
            raise
        pytest.xfail(f"busbw below the model in an unfaithful run:\n{found['text']}")


@rdma_fabric(leaves=2, hosts_per_leaf=4)
def test_ring_allreduce_8_hosts(fabric, tmp_path):
    hosts = hosts_of(8)
    nics = RdmaHosts(fabric, hosts)
    res = run_allreduce(nics, hosts, [4 * 3, 4 * 10_007, 256 << 10], "int32", seed=4)
    window = FidelityWindow(fabric, nics, hosts)
    res += run_allreduce(nics, hosts, 2 << 20, "float32", seed=5)
    found = window.close(tmp_path / "big")
    check(res, 8)
    print("\n" + nccl_table(res))
    print(found["text"])
    # Held to the model when the emulator kept up (as at 16 ranks); CI on the 2-core
    # VM measured 0.883 of goodput in a run whose fidelity was not checked here.
    # An unfaithful run is never quoted: a miss there is xfail with the verdict, not
    # a silent pass.
    try:
        assert_busbw(res[-1], 8, found["deficit"])
    except AssertionError:
        if found["verdict"].faithful:
            raise
        pytest.xfail(f"busbw below the model in an unfaithful run:\n{found['text']}")


@rdma_fabric(leaves=4, hosts_per_leaf=4)
def test_ring_allreduce_16_hosts(fabric, tmp_path):
    """Correct and byte-exact at 16 ranks; busbw held to the nccl-tests model when the
    emulator kept up, and otherwise the emulator's own verdict must say it did not.

    Every link of the ring carries one flow at exactly its rate (data one way,
    the next hop's ACKs the other): the emulated network has no congestion, so
    the model says busbw -> link goodput, as at 4 and 8 ranks (assert_busbw).

    On the 2-core VM the emulator does not keep up. Judged over the large
    all-reduce alone (emu/fidelity.py), three runs failed: the leaf switches
    were runnable but waiting for a CPU 32-54% of the time, stalled with
    frames waiting for 0.6-2.4 s of a 5 s window (longest 52-74 frame times,
    limit 10) and sent 75-95% of their frames on time (limit 99%), while the
    machine was only 76-79% busy: 16 agents and 6 switches wake together on
    every frame, and 1 MiB over 16 ranks is 30 unpipelined 64 KiB steps that
    each wait for their slowest hop. With DCQCN on, busbw was 0.32 and 0.42
    of goodput: a switch stalled S frame times piles S frames up at its
    egress, on a link loaded at exactly its rate nothing drains them, the
    queue passes Kmin (4 frames) and DCQCN halves senders (467 CE marks, 34
    CNPs in one run). With DCQCN off it was 0.57: the stalls alone cost that.
    An unfaithful run's busbw is not held to the model (DESIGN.md: never
    quoted); what is asserted is that the monitor says so and, when CNPs were
    sent on this uncongested ring, that a stall long enough to build a
    Kmin-deep queue was seen.
    """
    hosts = hosts_of(16)
    nics = RdmaHosts(fabric, hosts)
    res = run_allreduce(nics, hosts, [4 * 7, 4 * 16 * 1001 + 4], "int32", seed=6)
    check(res, 16)
    window = FidelityWindow(fabric, nics, hosts)
    big = run_allreduce(nics, hosts, 1 << 20, "float32", seed=7)
    found = window.close(tmp_path / "big")
    check(big, 16)
    ratio = big[0].busbw_bytes_per_s / GOODPUT_BYTES_PER_S
    print("\n" + nccl_table(res + big))
    print(f"busbw / goodput at 16 ranks: {ratio:.3f}")
    print(found["text"])
    verdict = found["verdict"]
    if verdict.faithful:
        assert_busbw(big[0], 16, found["deficit"])
        return
    # Unfaithful (the verdict's failures are printed above): busbw is not held to the model.
    if found["cnps"]:
        stall = verdict.worst["stall"]
        assert stall.value >= KMIN_FRAMES, (
            f"{found['cnps']} CNPs on an uncongested ring, but no stall of Kmin = "
            f"{KMIN_FRAMES:g} frame times that could have built the queue: {stall.text}\n"
            f"{found['text']}"
        )


class FidelityWindow:
    """The emulator's fidelity, the machine's CPU and the fabric's congestion signals over one
    stretch of a test (emu/fidelity.py): reset at construction, read by `close`."""

    def __init__(self, fab, nics, hosts):
        self.fab, self.nics, self.hosts = fab, nics, hosts
        reset_fidelity(fab)  # every switch and NIC agent
        self.marks0 = self._marks()
        self.nic0 = {h: nics.stats(h) for h in hosts}
        self.cpu0 = _machine_cpu()

    def _marks(self):
        return sum(
            sum(c["buffer"]["ecn_marks"].values())
            for c in (
                self.fab.switch_call(sw, "counters") for sw in fabric_mod.switches(self.fab.graph)
            )
        )

    def close(self, out_dir):
        busy, total = (b - a for a, b in zip(self.cpu0, _machine_cpu()))
        records = fidelity.records_of([("", collect_fidelity(self.fab, out_dir))])
        verdict = fidelity.judge(records)
        nic1 = {h: self.nics.stats(h) for h in self.hosts}
        cnps = sum(nic1[h]["cnps_sent"] - self.nic0[h]["cnps_sent"] for h in self.hosts)
        pauses = sum(nic1[h]["pause_tx"] - self.nic0[h]["pause_tx"] for h in self.hosts)
        marks = self._marks() - self.marks0
        used = sum(r["cpu"]["cpu_s"] for _, r in records)
        window = max(r["window_s"] for _, r in records)
        lines = [
            f"machine busy {busy / total:.0%} of {os.cpu_count()} cores; emu processes used "
            f"{used / window:.2f} cores; CE marks {marks}, CNPs {cnps}, NIC PAUSE {pauses}"
        ]
        lines += [f.text for f in verdict.worst.values()]
        for _, r in sorted(records, key=lambda lr: -lr[1]["cpu"]["wait_share"])[:6]:
            lines.append(
                f"  {r['name']}: CPU {r['cpu']['cpu_share']:.0%}, waited "
                f"{r['cpu']['wait_share']:.0%}, longest stall "
                f"{r['loop']['longest_stall_s'] * 1e3:.1f} ms"
            )
        deficit = verdict.worst["deficit"].value if "deficit" in verdict.worst else 0.0
        return {
            "verdict": verdict,
            "deficit": deficit,
            "machine_busy": busy / total,
            "cores_used": used / window,
            "marks": marks,
            "cnps": cnps,
            "pauses": pauses,
            "text": "\n".join(lines),
        }


def _machine_cpu():
    """(busy, total) jiffies of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        fields = [int(x) for x in f.readline().split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@rdma_fabric(leaves=2, hosts_per_leaf=2)
def test_the_wire_carries_the_data_and_stragglers_hold_everyone(fabric, tmp_path):
    hosts = hosts_of(4)
    nics = RdmaHosts(fabric, hosts)
    count, slice_bytes, seed = 4 * 1500, 2048, 11
    pcap = tmp_path / "h1.pcap"
    cap = fabric.popen_root(
        [
            "tcpdump",
            "-i",
            "leaf1-eth1",
            "-w",
            str(pcap),
            "-U",
            "--immediate-mode",
            "-s",
            "0",
            "udp",
            "dst",
            "port",
            "4791",
            "and",
            "src",
            "host",
            fabric.graph.nodes["h1"]["ip"],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(
        lambda: pcap.exists() and pcap.stat().st_size >= 24, 10, "tcpdump to start", interval_s=0.02
    )
    res = run_allreduce(nics, hosts, 4 * count, "int32", seed=seed, slice_bytes=slice_bytes)
    fabric.stop_proc(cap)
    check(res, 4)
    # h1 is rank 0: step 0 sends its own chunk 0, steps 3..5 the finished chunks 1, 0, 3
    # (chunk (0-k) mod 4 at step k); Scapy reads them back from the capture.
    messages = wire_messages(pcap, fabric.graph.nodes["h1"]["ip"])
    inputs = [rank_input(seed, r, count, "int32") for r in range(4)]
    total = np.sum(np.stack(inputs), axis=0, dtype=np.int32)
    layout = RingAllReduce(0, 4, inputs[0], slice_bytes=slice_bytes)
    assert len(messages) == 6 * layout.nslices
    for step in range(6):
        lo, hi = layout.chunk_bounds((0 - step) % 4)
        got = b"".join(messages[step * layout.nslices : (step + 1) * layout.nslices])
        if step == 0:
            assert got == inputs[0][lo:hi].tobytes()
        elif step >= 3:
            assert got == total[lo:hi].tobytes()
    # A straggler (h3 computes 0.4 s before each iteration) holds every rank.
    slow = run_allreduce(nics, hosts, 64 << 10, "int32", iters=2, compute_s={"h3": 0.4})
    check(slow, 4)
    assert slow[0].time_s > 0.4
    assert all(t > 0.4 for h in ("h1", "h2", "h4") for t in slow[0].elapsed_s[h])
    assert all(t < 0.4 for t in slow[0].elapsed_s["h3"])
    # Bad requests are named and leave the agent running.
    with pytest.raises(MgmtError, match="unknown QP send_qpn=999"):
        nics.nics["h1"].call(
            "coll_setup",
            job="bad",
            rank=0,
            nranks=2,
            dtype="int32",
            count=8,
            send_qpn=999,
            recv_qpn=999,
        )
    with pytest.raises(MgmtError, match="dtype='float64'"):
        nics.nics["h1"].call("coll_setup", job="bad", rank=0, nranks=2, dtype="float64", count=8)
    with pytest.raises(MgmtError, match=r"unknown key\(s\) \['colour'\]"):
        nics.nics["h1"].call(
            "coll_setup", job="bad", rank=0, nranks=2, dtype="int32", count=8, colour="red"
        )
    with pytest.raises(MgmtError, match="unknown job 'nope'"):
        nics.nics["h1"].call("coll_status", job="nope")
    assert nics.nics["h1"].call("coll_list") == []
    # A message of the wrong length fails that job, not the agent.
    qp = nics.connect("h1", "h2")
    nics.nics["h2"].call(
        "coll_setup",
        job="victim",
        rank=1,
        nranks=2,
        dtype="int32",
        count=8,
        send_qpn=qp,
        recv_qpn=qp,
    )
    nics.nics["h2"].call("coll_start", job="victim")
    nics.post("h1", qp, 3)  # 3 pattern bytes where the ring expects a 16-byte slice
    wait_for(
        lambda: nics.nics["h2"].call("coll_status", job="victim")["state"] == "failed",
        10,
        "the job with a bad message to fail",
    )
    assert "has 3 bytes, expected 16" in nics.nics["h2"].call("coll_status", job="victim")["error"]
    nics.nics["h2"].call("coll_clear", job="victim")
    again = run_allreduce(nics, hosts, 4 * 64, "float32", seed=12)
    check(again, 4)
    assert nics.stats("h1")["tx_errors"] == 0
