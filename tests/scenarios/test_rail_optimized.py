"""The rail-optimized scenario via `emu run`: spine bytes from the switches' counters match the model."""

from __future__ import annotations

import json

import pytest
from scapy.layers.inet import IP, UDP
from scapy.utils import rdpcap

from emu.models.collective import message_frame_bytes, ring_hop_frame_bytes
from emu.scenario import ScenarioError
from scenarios import rail_optimized

from . import assert_checks, emu_run

SMALL = ("size=128K", "a2a_size=16K")
ZERO = ("rail-aligned ring", "hierarchical", "all-to-all with PXN")
CROSSING = ("crossing ring", "flat ring", "all-to-all without PXN")
PXN_TIME = "all-to-all with PXN: wire time = its busiest NIC link's time"
NVLINK = ("hierarchical", "all-to-all with PXN")  # the parts with NVLink phases
NVLINK_CHECKS = [f"{c}: NVSwitch bytes = model" for c in NVLINK] + [
    f"{c}: NVLink time = its NVLink links' time" for c in NVLINK
]


def test_placement_hierarchy_and_pxn_put_the_modelled_bytes_on_the_spines(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "r", "rail-optimized", *SMALL, timeout_s=300)
    rings = ("rail-aligned ring", "crossing ring", "flat ring", "hierarchical")
    names = (
        [f"{c}: no bytes on the spines" for c in ZERO]
        + [f"{c}: spine bytes = model" for c in CROSSING]
        + [f"{c}: every rank's sum is correct" for c in rings]
        + [PXN_TIME]
        + NVLINK_CHECKS
        + [f"{c}: nothing through the NVSwitches" for c in ("rail-aligned ring",) + CROSSING]
    )
    assert_checks(res, doc, names=names, count=len(names))
    m = doc["metrics"]
    spine, want = m["spine_bytes"], m["model_spine_bytes"]
    # The spines carried every crossing byte the model puts there, within 10% ...
    for case in CROSSING:
        assert want[case] > 0
        assert spine[case] == pytest.approx(want[case], rel=0.10), (case, spine, want)
    # ... and, where the model says none, no more than LLDP (10% of the crossing twin's).
    for case, twin in zip(ZERO, ("crossing ring", "flat ring", "all-to-all without PXN")):
        assert want[case] == 0
        assert spine[case] <= 0.10 * want[twin], (case, spine)
    # The model itself, from the graph: 4 x 2 GPUs, node k on rail ((k-1) mod 2) + 1
    # changes rail on all 4 hops; the node-major flat ring on all 8; without PXN,
    # (G-1)/G = 1/2 of the 4 x 3 x 2 x 2 inter-node pairs cross.
    parts = m["parts"]
    assert parts["crossing ring"]["hops"] == 4 and parts["flat ring"]["hops"] == 8
    assert parts["all-to-all without PXN"]["hops"] == 24
    assert parts["crossing ring"]["model_payload_bytes"] == 4 * 2 * 3 / 4 * (128 << 10)
    # Hierarchical beats the flat ring without NVLink; its NVLink phases ran through the
    # NVSwitches: every frame of the reduce-scatter and all-gather (and their ACKs), and
    # nothing of the parts that stay on the network.
    assert m["time_s"]["hierarchical"] < m["time_s"]["flat ring"]
    nv, nv_want = m["nvswitch_bytes"], m["model_nvswitch_bytes"]
    assert nv_want["hierarchical"] == 4 * sum(ring_hop_frame_bytes(128 << 10, 2))
    for case in NVLINK:
        assert nv[case] == pytest.approx(nv_want[case], rel=0.10), (case, nv, nv_want)
    for case in ("rail-aligned ring",) + CROSSING:
        assert nv_want[case] == 0 and nv[case] <= 0.10 * nv_want["hierarchical"], (case, nv)
    assert parts["hierarchical"]["nvlink_s"] > 0 and parts["all-to-all with PXN"]["nvlink_s"] > 0
    # The phases are chained: all 8 GPUs end with one result, the all-reduce of every
    # GPU's input (each rank checked it against that sum: 0 wrong).
    hier = m["allreduce"]["hierarchical"]
    assert len(hier["digests"]) == 8 and len(set(hier["digests"].values())) == 1
    assert hier["wrong"] == 0
    # Each GPU's NIC and NVLink port are one process (`gpu_ports`): 8 group specs of
    # two agents, the NIC and the NVLink port of one host, and the phases handed over
    # in that process's memory.
    specs = [json.loads(p.read_text()) for p in (tmp_path / "r").rglob("*.nics.json")]
    assert len(specs) == 8 and all(len(spec) == 2 for spec in specs)
    for nic, nvlink in specs:
        assert nic["netns"] == nvlink["netns"]
        assert nvlink["argv"][nvlink["argv"].index("--name") + 1] == (
            nic["argv"][nic["argv"].index("--name") + 1] + "-nvlink"
        )
    assert m["hierarchical_handover"] == "gpu memory"
    assert (
        "flat ring without NVLink" in res.stdout and "# Out of bounds values : 0 OK" in res.stdout
    )
    assert (tmp_path / "r" / "rail_optimized.png").stat().st_size > 10_000
    assert list((tmp_path / "r").glob("crossing ring-*.pcap"))
    # The NVLink phases are on the wire: node 1's NVSwitch port to h1 saw RoCEv2
    # between the node's NVLink addresses, and nothing from the network's.
    frames = rdpcap(str(tmp_path / "r" / "hierarchical-nvsw1-eth1.pcap"))
    roce = [f for f in frames if UDP in f and f[UDP].dport == 4791]
    assert len(roce) > 100
    assert {(f[IP].src, f[IP].dst) for f in roce} <= {
        ("10.255.1.1", "10.255.1.2"),
        ("10.255.1.2", "10.255.1.1"),
    }


def test_rail_only_runs_the_aligned_parts_and_refuses_crossing_ones(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "r0", "rail-optimized", *SMALL, "spines=0", timeout_s=300)
    names = [
        "rail-aligned ring: every rank's sum is correct",
        "hierarchical: every rank's sum is correct",
        PXN_TIME,
        "rail-aligned ring: nothing through the NVSwitches",
        *NVLINK_CHECKS,
    ]
    assert_checks(res, doc, names=names, count=len(names))
    m = doc["metrics"]
    assert sorted(m["parts"]) == sorted(ZERO)
    assert len(m["refused"]) == 3
    for what in ("crossing placement", "flat ring", "all-to-all without PXN"):
        line = next(ln for ln in m["refused"] if ln.startswith(what))
        assert "islands" in line and "\n" not in line


def test_the_byte_model_counts_frames_and_acks():
    # One SEND of 4 KiB: 4 packets of 1024 + 58 bytes and one ACK of 62 bytes.
    assert message_frame_bytes(4096) == 4 * 1082 + 62
    hops = ring_hop_frame_bytes(256 << 10, 4)
    # Each hop carries 2(n-1)/n x S of data and more in frames.
    assert all(h > 1.5 * (256 << 10) for h in hops)
    assert all(h < 1.5 * (256 << 10) * 1.1 for h in hops)


def test_parts_runs_only_the_named_parts_with_their_checks(tmp_path, no_leaks):
    # The hierarchical all-reduce alone (how a 64-GPU pod is run): its checks and no
    # other part's, its metrics, and the NVLink checks judged against its own model.
    res, doc = emu_run(tmp_path / "h", "rail-optimized", *SMALL, "parts=hierarchical")
    names = [
        "hierarchical: no bytes on the spines",
        "hierarchical: every rank's sum is correct",
        *[
            f"hierarchical: {c}"
            for c in ("NVSwitch bytes = model", "NVLink time = its NVLink links' time")
        ],
    ]
    assert_checks(res, doc, names=names, count=len(names))
    assert list(doc["metrics"]["parts"]) == ["hierarchical"]
    assert doc["metrics"]["allreduce"]["hierarchical"]["wrong"] == 0


def test_parts_names_an_unknown_part():
    with pytest.raises(ScenarioError, match=r"parts='hierarchical,pnx': unknown pnx; a comma"):
        rail_optimized.selected_parts({"parts": "hierarchical,pnx"})
    with pytest.raises(ScenarioError, match=r"parts=' ,': empty"):
        rail_optimized.selected_parts({"parts": " ,"})
    assert rail_optimized.selected_parts({"parts": "pxn,aligned"}) == [
        "rail-aligned ring",
        "all-to-all with PXN",
    ]
