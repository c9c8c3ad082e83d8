"""The adaptive-collectives scenario via `emu run`, and its checks on set figures (no root).

The collision model is tested in tests/unit/test_models_collision.py, the
workload's parts and the report in tests/unit/test_traffic_cross_pod.py, the
switch's adaptive routing in tests/unit/test_adaptive_routing.py, the
reordering NIC in tests/unit/test_nic_reorder.py, UGAL in
tests/integration/test_dragonfly_ugal.py.
"""

from __future__ import annotations

import pytest

from emu.scenario import ScenarioError
from emu.traffic.cross_pod import TIERS, CollectiveRun, Occupancy, QpCounts
from scenarios import adaptive_collectives as ac

from . import assert_checks, emu_run

QUICK = (
    "modes=ecmp,ar-strict,ar-selective",
    "seeds=2",
    "ring_kib=512",
    "alltoall_kib=32",
    "dragonfly_s=5",
)
CHECKS = [
    "ar-selective: cross-pod ring all-reduce near non-blocking",
    "ar-selective: cross-pod all-to-all near non-blocking",
    "ar-selective: the NICs placed every reordered packet",
    "ar-strict: the reordering collapse (go-back-N resends what was only overtaken)",
    "ECMP: the ring within its collision model's band",
    "dragonfly: UGAL over minimal routing, adversarial pattern",
    "dragonfly: UGAL keeps uniform traffic's throughput",
]


def test_collectives_across_pods_and_groups_under_each_routing(tmp_path, no_leaks):
    res, doc = emu_run(tmp_path / "r", "adaptive-collectives", *QUICK, timeout_s=900)
    m = doc["metrics"]
    # What the packets and counters show whatever the fidelity: the strict NIC resent
    # packets on a lossless fabric where the reordering NIC resent none and NAKed none,
    # and per-packet AR reordered (the deepest reordering a receiver saw).
    strict, selective = m["nics"]["ar-strict"]["ring"], m["nics"]["ar-selective"]["ring"]
    assert strict["retransmitted"] > 0 and strict["naks"] > 0, strict
    assert selective["retransmitted"] == selective["naks"] == 0, selective
    assert selective["out_of_order"] > 0 and selective["reorder_depth_max"] > 0, selective
    assert m["nics"]["ecmp"]["ring"]["out_of_order"] == 0  # a hash keeps each QP in order
    assert set(m["queues"]["ecmp"]["ring"]) == set(TIERS)
    assert 0.3 < m["ecmp_expected_ring"] < 0.5
    assert m["dragonfly"]["delivered_bps"]["ugal"]["adversarial"] > 0
    assert "adaptive-collectives.png" in doc["plots"]
    assert_checks(res, doc, names=CHECKS, count=len(CHECKS))


def test_bad_parameters_are_named():
    params = {name: p.default for name, p in ac.PARAMS.items()}
    for key, value, said in (
        ("modes", "ecmp,per-packet", "unknown per-packet"),
        ("dragonfly_routings", "ugal,shortest", "unknown shortest"),
        ("topology", "leaf_spine", "needs topology=fat_tree"),
    ):
        with pytest.raises(ScenarioError, match=said):
            ac.validate({**params, key: value})
    with pytest.raises(ScenarioError, match="run nothing"):
        ac.validate({**params, "modes": "none", "dragonfly_routings": "none"})
    ac.validate({**params, "modes": "none"})  # the dragonfly alone


class Recorder:
    """A scenario context that keeps each check's (passed, value, expected) by name."""

    def __init__(self, **params):
        self.params = {name: p.default for name, p in ac.PARAMS.items()} | params
        self.checks: dict[str, tuple] = {}
        self.logs: list[str] = []

    def check(self, name, passed, value, expected):
        self.checks[name] = (bool(passed), value, expected)

    def log(self, msg):
        self.logs.append(msg)


def _run(share: float, resent: int = 0, naks: int = 0, ooo: int = 0, paths=()) -> CollectiveRun:
    queues = dict.fromkeys(TIERS, Occupancy(0.0, 0, 0.0, 0))
    counts = QpCounts(retransmitted=resent, naks=naks, out_of_order=ooo)
    return CollectiveRun("ring", 1.0, share, counts, queues, paths=list(paths))


SHARED = [["h1", "e1", "a1", "c1", "a3", "e3", "h5"], ["h2", "e1", "a1", "c2", "a3", "e3", "h6"]]
APART = [SHARED[0], ["h2", "e1", "a2", "c3", "a4", "e3", "h6"]]
REF = {"ring_runs": [0.97, 0.98, 0.975], "incast": {1: 1.0, 2: 0.96, 3: 0.95, 4: 0.94}}


PATHS = (SHARED, SHARED, APART, SHARED, APART)  # collision shares 1/2, 1/2, 1, 1/2, 1


@pytest.mark.parametrize(
    "measured, ok",
    [
        ([0.49, 0.48, 0.99, 0.50, 0.97], True),  # what DCQCN keeps of 1/m (REF's incast)
        ([0.62, 0.63, 1.1, 0.61, 1.1], False),  # above 1/m on every seed: no collision binds
        ([0.40, 0.41, 0.85, 0.39, 0.86], False),  # below m flows on one link: lost elsewhere
    ],
)
def test_the_ecmp_band_fails_above_the_collisions_and_below_dcqcn(measured, ok):
    c = Recorder()
    runs = [(_run(s, paths=p), _run(0.9)) for s, p in zip(measured, PATHS)]
    ac._check_ecmp_band(c, runs, measured, REF)
    [(passed, value, expected)] = c.checks.values()
    assert passed is ok, (measured, c.checks)
    assert "(1/m) over 5 hash seeds" in expected
    c = Recorder()
    ac._check_ecmp_band(c, runs[:1], measured[:1], REF)
    assert not c.checks and "needs 2 or more seeds" in c.logs[0]


def test_the_ar_checks_fail_on_a_slow_ring_a_nak_or_no_collapse():
    def judged(sel_share, sel_naks, strict_resent, strict_share):
        c = Recorder()
        runs = {
            "ar-strict": [(_run(strict_share, strict_resent, 9, 50), _run(0.9))],
            "ar-selective": [(_run(sel_share, naks=sel_naks, ooo=80), _run(0.9, ooo=10))],
        }
        ring = {m: [r.share for r, _a in p] for m, p in runs.items()}
        a2a = {m: [a.share for _r, a in p] for m, p in runs.items()}
        ac.judge_fat_tree(c, runs, ring, a2a, REF, 0.4)
        return {name: passed for name, (passed, _v, _e) in c.checks.items()}

    good = judged(0.9, 0, 500, 0.3)
    assert all(good.values()) and len(good) == 4, good
    assert not judged(0.8, 0, 500, 0.3)[CHECKS[0]]
    assert not judged(0.9, 2, 500, 0.3)[CHECKS[2]]
    assert not judged(0.9, 0, 0, 0.3)[CHECKS[3]]  # nothing resent: no collapse shown
    assert not judged(0.9, 0, 500, 0.95)[CHECKS[3]]  # resent, but not slower


def test_hedera_is_held_above_ecmp_s_expectation_and_flowlets_must_show_reordering():
    def judged(mode, run):
        c = Recorder()
        ac.judge_fat_tree(c, {mode: [(run, _run(0.9))]}, {mode: [run.share]}, {}, REF, 0.4)
        [(passed, _value, _expected)] = c.checks.values()
        return passed

    assert judged("hedera", _run(0.6)) and not judged("hedera", _run(0.39))
    assert judged("flowlet", _run(0.4, resent=30, ooo=12))
    assert not judged("flowlet", _run(0.4, resent=0, ooo=12))
    assert not judged("flowlet", _run(0.4, resent=30, ooo=0))
