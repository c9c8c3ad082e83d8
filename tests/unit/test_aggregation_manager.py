"""The aggregation manager (controllers/aggregation.py) on topologies routing discovered.

Routing's manager discovers a simulated leaf/spine or k=4 fat-tree (`SimFabric`);
its view (``RoutingManager.view``, what ``EventRoutingChanged`` carries and
``get_view`` returns) is the topology the aggregation manager builds trees on,
exactly as the app does beside routing in the controller.
"""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp

from controllers import layout
from controllers.aggregation import (
    AggregationManager,
    JobError,
    JobRefused,
    Topology,
    job_address,
)
from controllers.routing import RoutingConfig, RoutingManager
from emu.proto import ofext

from .fakes import SimFabric, fat_tree, leaf_spine, learn_all_hosts

NOW = 2000.0


def _discovered(graph) -> SimFabric:
    fab = SimFabric(graph, RoutingManager(RoutingConfig()))
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    return fab


@pytest.fixture(scope="module")
def leafspine() -> SimFabric:
    return _discovered(leaf_spine(spines=2, leaves=4))


@pytest.fixture(scope="module")
def fattree() -> SimFabric:
    return _discovered(fat_tree(4))


def _manager(fab: SimFabric, slots: int = 1024) -> AggregationManager:
    mgr = AggregationManager(slots_per_switch=slots)
    for dpid in fab.dpids:
        assert mgr.switch_enter(dpid, fab.now) == []
    return mgr


def _topo(fab: SimFabric) -> Topology:
    return Topology.from_view(fab.mgr.view(fab.now))


def _ips(fab: SimFabric, *hosts: str) -> list:
    return [fab.graph.nodes[h]["ip"] for h in hosts]


def _configs(msgs) -> dict:
    """dpid -> the AggJobSet each EXP_AGG_JOB_SET in `msgs` carries."""
    out = {}
    for dpid, msg in msgs:
        if getattr(msg, "exp_type", None) == ofext.EXP_AGG_JOB_SET:
            assert msg.experimenter == ofext.EMU_EXPERIMENTER_ID
            out[dpid] = ofext.unpack_agg_job_set(bytes(msg.data))
    return out


def _steering(msgs) -> dict:
    """dpid -> (match, output port) of every steering FlowMod in `msgs`."""
    out = {}
    for dpid, msg in msgs:
        if getattr(msg, "command", None) == ofp.OFPFC_ADD:
            assert msg.priority == layout.PRIO_AGGREGATION
            assert msg.cookie & layout.COOKIE_BAND_MASK == layout.AGGREGATION_COOKIE
            (action,) = msg.instructions[0].actions
            out[dpid] = (dict(msg.match.items()), action.port)
    return out


def _name(fab: SimFabric, dpid: int) -> str:
    return next(n for n, d in fab.dpid.items() if d == dpid)


def test_leaf_spine_tree_is_rooted_at_a_spine(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    hosts = _ips(leafspine, "h1", "h2", "h3", "h4")
    job, msgs = mgr.register(_topo(leafspine), hosts, NOW, nslots=64)
    configs = _configs(msgs)
    assert set(configs) == set(job.tree)
    root = _name(leafspine, job.root)
    assert root.startswith("s")
    root_cfg = configs[job.root]
    assert root_cfg.root and root_cfg.parent_port == 0 and root_cfg.nslots == 64
    # The root's children are the four leaves' ports, addressed to the job.
    assert sorted(c.port for c in root_cfg.children) == sorted(
        leafspine.port[(root, f"l{i}")] for i in range(1, 5)
    )
    assert {(c.mac, c.ip) for c in root_cfg.children} == {(job.job_mac, job.job_ip)}
    for i in range(1, 5):
        cfg = configs[leafspine.dpid[f"l{i}"]]
        assert not cfg.root and cfg.parent_port == leafspine.port[(f"l{i}", root)]
        (child,) = cfg.children
        host = leafspine.graph.nodes[f"h{i}"]
        assert (child.port, child.mac, child.ip) == (
            leafspine.port[(f"l{i}", f"h{i}")],
            host["mac"],
            host["ip"],
        )
    # Every tree switch steers the job's UDP 4792 frames to the engine's logical port.
    steer = _steering(msgs)
    assert set(steer) == set(job.tree)
    for match, port in steer.values():
        assert port == ofext.AGG_PORT
        assert match == {
            "eth_type": 0x0800,
            "ip_proto": 17,
            "ipv4_dst": job.job_ip,
            "udp_dst": 4792,
        }
    assert (job.job_ip, job.job_mac) == job_address(job.job_id)


def test_concurrent_jobs_spread_over_spines(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    hosts = _ips(leafspine, "h1", "h2", "h3", "h4")
    first, _ = mgr.register(_topo(leafspine), hosts, NOW, nslots=64)
    second, _ = mgr.register(_topo(leafspine), hosts[:2], NOW, nslots=64)
    assert first.job_id != second.job_id and first.job_ip != second.job_ip
    assert first.root != second.root
    free = mgr.free_slots()
    assert free[first.root] == 1024 - 64 and free[second.root] == 1024 - 64
    assert free[leafspine.dpid["l1"]] == 1024 - 128


def test_fat_tree_roots_by_span(fattree: SimFabric) -> None:
    mgr = _manager(fattree)
    topo = _topo(fattree)
    # Same edge switch: the edge switch alone reduces.
    job, _ = mgr.register(topo, _ips(fattree, "h1", "h2"), NOW)
    assert list(job.tree) == [fattree.dpid["e0_0"]]
    assert {c.port for c in job.tree[job.root].children} == {
        fattree.port[("e0_0", "h1")],
        fattree.port[("e0_0", "h2")],
    }
    # Same pod: an aggregation switch of that pod.
    job, _ = mgr.register(topo, _ips(fattree, "h1", "h3"), NOW)
    assert _name(fattree, job.root).startswith("a0_") and len(job.tree) == 3
    # Across pods: a core switch, through one aggregation switch per pod.
    job, _ = mgr.register(topo, _ips(fattree, "h1", "h5", "h9", "h13"), NOW)
    names = sorted(_name(fattree, d) for d in job.tree)
    assert _name(fattree, job.root).startswith("c")
    assert sorted(n.split("_")[0] for n in names if n[0] in "ae") == [
        "a0",
        "a1",
        "a2",
        "a3",
        "e0",
        "e1",
        "e2",
        "e3",
    ]
    for dpid, node in job.tree.items():
        if node.parent is not None:
            # The port towards the parent is an end of one of the parent's tree links.
            assert (dpid, node.parent_port) in job.tree[node.parent].links


def test_refused_when_slots_run_out(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine, slots=100)
    hosts = _ips(leafspine, "h1", "h2", "h3", "h4")
    mgr.register(_topo(leafspine), hosts, NOW, nslots=64)
    with pytest.raises(JobRefused, match="refused: .*fewer than 64 free slots"):
        mgr.register(_topo(leafspine), hosts, NOW, nslots=64)
    # A smaller job still fits, on the spine the first one left free.
    job, _ = mgr.register(_topo(leafspine), hosts, NOW, nslots=36)
    assert mgr.free_slots()[leafspine.dpid["l1"]] == 0
    msgs = mgr.unregister(job.job_id, NOW)
    deletes = [m for _, m in msgs if getattr(m, "command", None) == ofp.OFPFC_DELETE]
    assert len(deletes) == len(job.tree)
    assert all(m.cookie == layout.AGGREGATION_COOKIE | job.job_id for m in deletes)
    dels = [m for _, m in msgs if getattr(m, "exp_type", None) == ofext.EXP_AGG_JOB_DEL]
    assert {ofext.unpack_agg_job_del(bytes(m.data)) for m in dels} == {job.job_id}
    assert mgr.free_slots()[leafspine.dpid["l1"]] == 36


def test_bad_registrations_name_the_problem(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    with pytest.raises(JobError, match=r"unknown host\(s\) \['10.9.9.9'\]"):
        mgr.register(_topo(leafspine), ["10.9.9.9", _ips(leafspine, "h1")[0]], NOW)
    with pytest.raises(JobError, match="at least 2 hosts"):
        mgr.register(_topo(leafspine), _ips(leafspine, "h1"), NOW)
    with pytest.raises(JobError, match="listed twice"):
        mgr.register(_topo(leafspine), _ips(leafspine, "h1", "h1"), NOW)
    with pytest.raises(JobError, match="nslots=0"):
        mgr.register(_topo(leafspine), _ips(leafspine, "h1", "h2"), NOW, nslots=0)
    with pytest.raises(JobError, match="unknown job 77"):
        mgr.unregister(77, NOW)
    assert mgr.jobs == {}


def _without_cable(topo: Topology, fab: SimFabric, a: str, b: str) -> Topology:
    pa, pb = fab.port[(a, b)], fab.port[(b, a)]
    da, db = fab.dpid[a], fab.dpid[b]
    cables = topo.cables - {(da, pa, db, pb), (db, pb, da, pa)}
    return Topology(topo.switches, cables, topo.hosts)


def test_tree_rebuilt_when_a_tree_link_fails(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    topo = _topo(leafspine)
    job, _ = mgr.register(topo, _ips(leafspine, "h1", "h2", "h3", "h4"), NOW)
    old_root = _name(leafspine, job.root)
    assert mgr.topology_changed(topo, NOW) == []  # nothing on the tree changed
    broken = _without_cable(topo, leafspine, "l3", old_root)
    assert job.epoch == 0
    msgs = mgr.topology_changed(broken, NOW)
    assert job.rebuilds == 1 and job.state == "active"
    # Fresh slots everywhere: an all-reduce in flight must start over.
    assert job.epoch == 1 and job.describe()["epoch"] == 1
    new_root = _name(leafspine, job.root)
    assert new_root != old_root
    configs = _configs(msgs)
    assert set(configs) == set(job.tree)
    assert configs[leafspine.dpid["l3"]].parent_port == leafspine.port[("l3", new_root)]
    # The old root is out of the tree: its flow and engine job are removed.
    old = leafspine.dpid[old_root]
    assert any(d == old and getattr(m, "exp_type", None) == ofext.EXP_AGG_JOB_DEL for d, m in msgs)
    assert mgr.free_slots()[old] == 1024


def test_job_fails_when_no_tree_is_left(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    topo = _topo(leafspine)
    job, _ = mgr.register(topo, _ips(leafspine, "h1", "h2"), NOW)
    cut = _without_cable(_without_cable(topo, leafspine, "l1", "s1"), leafspine, "l1", "s2")
    msgs = mgr.topology_changed(cut, NOW)
    assert job.state == "failed" and "tree lost" in job.reason
    assert {getattr(m, "exp_type", None) for _, m in msgs} >= {ofext.EXP_AGG_JOB_DEL}
    assert mgr.free_slots()[leafspine.dpid["l1"]] == 1024


def test_restarted_switch_gets_its_part_again(leafspine: SimFabric) -> None:
    mgr = _manager(leafspine)
    job, _ = mgr.register(_topo(leafspine), _ips(leafspine, "h1", "h2"), NOW)
    leaf = leafspine.dpid["l2"]
    mgr.switch_leave(leaf, NOW)
    msgs = mgr.switch_enter(leaf, NOW)
    assert set(_configs(msgs)) == {leaf} and set(_steering(msgs)) == {leaf}
    assert job.epoch == 1  # its engine lost the job's slots
    # A switch outside the tree gets nothing, and the job's epoch stays.
    other = leafspine.dpid["l4"]
    assert mgr.switch_enter(other, NOW) == []
    assert job.state == "active" and job.epoch == 1
