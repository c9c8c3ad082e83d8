"""A fabric from a topology file runs on real packets, as a builder's does.

`emu run smoke --topo topologies/leaf-spine-2x2.yaml` (as a user types it)
passes every check of smoke on the file's fabric; a scenario other than
smoke (mixed-traffic, about 30 s) runs on a hand-made file of another shape
than its default, with hosts of their own names, and picks its flows and
its bottleneck from the file's graph; and the hand-made asymmetric file, loaded by the library function labs call, converges and
reaches every host, including the one with a name and address of its own
behind a single long uplink. The leak check follows each test (conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

from emu import fabric, topofile
from emu.net import Fabric
from tests.scenarios import LEAF_SPINE_CHECKS, ROOT, assert_checks

SMOKE_CHECKS = LEAF_SPINE_CHECKS  # the same fabric shape, built from a file


def test_smoke_runs_on_a_topology_file(tmp_path):
    out = tmp_path / "out"
    # Unpaced hosts, as tests/scenarios/test_smoke.py: the pacing check then
    # measures the switches alone.
    argv = [sys.executable, "-m", "emu.cli", "run", "smoke", "--topo",
            "topologies/leaf-spine-2x2.yaml", "--set", "iperf_s=4",
            "--set", "host_nic_pacing=false", "--out", str(out)]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)
    doc = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    assert_checks(res, doc, SMOKE_CHECKS)
    assert doc["params"]["topo"] == "topologies/leaf-spine-2x2.yaml"
    assert "leaves" not in doc["params"] and doc["params"]["rate_mbps"] == 20.0
    assert doc["metrics"]["fabric"] == {
        "name": "leaf-spine-2x2",
        "switches": 4,
        "hosts": 4,
        "host_addresses": 4,
        "switch_links": 4,
        "rate_bps": 20_000_000,
    }


# Two racks of different sizes under one spine, hosts named by what they do: not
# mixed-traffic's default shape (2 leaves of 2 hosts), and no name it could assume.
ONE_SPINE = """\
name: one-spine
defaults: {rate: 10M}
nodes:
  spine1: {kind: switch, role: spine}
  tor1:   {kind: switch, role: leaf}
  tor2:   {kind: switch, role: leaf}
  gpu1:   {kind: host}
  gpu2:   {kind: host}
  gpu3:   {kind: host}
  store1: {kind: host}
  store2: {kind: host}
links:
  - {a: tor1, b: spine1}
  - {a: tor2, b: spine1}
  - {a: gpu1, b: tor1}
  - {a: gpu2, b: tor1}
  - {a: gpu3, b: tor1}
  - {a: store1, b: tor2}
  - {a: store2, b: tor2}
"""


def test_mixed_traffic_runs_on_a_hand_made_file(tmp_path):
    path, out = tmp_path / "one-spine.yaml", tmp_path / "out"
    path.write_text(ONE_SPINE)
    argv = [sys.executable, "-m", "emu.cli", "run", "mixed-traffic", "--topo", str(path),
            "--out", str(out)]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    doc = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    assert_checks(res, doc, count=4)
    assert "leaves" not in doc["params"] and doc["params"]["rate_mbps"] == 10.0
    m = doc["metrics"]
    # Both flows from tor1 to tor2: every path crosses tor1 -> spine1 -> tor2.
    assert (m["rdma_flow"], m["tcp_flow"]) == (["gpu1", "store1"], ["gpu2", "store2"])
    assert m["shared_rate_bps"] == 10_000_000
    # Only RDMA's packets are ECN-capable: only RDMA is told to slow down.
    v = m["variants"]
    assert v["misconfigured"]["rdma_cnps"] > 0 and v["correct"]["rdma_cnps"] == 0


def test_a_hand_made_file_converges_and_reaches_every_host(tmp_path):
    graph = topofile.load(f"{ROOT}/topologies/asymmetric.yaml")
    hosts = fabric.hosts(graph)
    with Fabric(graph, out_dir=str(tmp_path)) as fab:
        status = fab.controller_status()
        assert len(status["hosts"]) == len(hosts)
        assert len(status["links"]) == 2 * len(fabric.switch_links(graph))
        unreached = [
            (src, dst)
            for src in hosts
            for dst in hosts
            if src != dst and fab.ping(src, dst, count=2, timeout_s=1.0, interval_s=0.05)[1] != 2
        ]
        assert unreached == []
        # storage's only way in is leaf3 - spine2: the trace must take it.
        assert fab.trace_path("h1", "storage") == ["h1", "leaf1", "spine2", "leaf3", "storage"]
