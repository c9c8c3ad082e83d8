"""UGAL on a real dragonfly (issue 31): the adversarial pattern and uniform traffic.

::

    5 groups of 2 routers (g1r1 g1r2 ... g5r2), 1 host each (h1 .. h10),
    2 global links per router: one link between each pair of groups,
    every link 10 Mbit/s.

    g1r1 -- g2r2, g3r2      g1r2 -- g4r1, g5r1      (the builder's consecutive
    g2r1 -- g3r2, g4r2      g2r2 -- g5r1, g1r1       arrangement, emu/fabric/gpu.py)
    ...

Every host sends UDP (the lossy class) at nearly its link's rate: in the
adversarial pattern host j of group i to host j of group i+1, so under
minimal routing (one global hop, `Fabric(dragonfly_routing="minimal")`)
both hosts of a group share the one global link to the next group and get
half of it; under UGAL (`dragonfly_routing="ugal"`) the host whose router
owns that link sees its queue and sends the Valiant way, through its other
global link, and the group gets about twice as much (emu/models/dragonfly.py:
2x for UGAL-L even without backpressure on this shape). In uniform random
traffic (each datagram to a random other host, 95% of the link) no global
link is a bottleneck and UGAL must not lose what minimal delivers, though
its source routers send a few thousand packets the long way whenever a
minimal queue holds more than a Valiant one weighs.

What is measured: each flow's payload delivered inside a common window
(emu/traffic/spray.py on every host), the global links' port counters,
and UGAL's counters (packets the source routers sent off the minimal path).
A run whose emulator fell behind (emu/fidelity.py) is not judged: xfail
with the verdict.
"""

from __future__ import annotations

import pytest

from emu import fabric, telemetry
from emu.models import dragonfly as model
from emu.net import Fabric
from emu.pytest_plugin import TIMING_MEASURES
from emu.traffic import dragonfly as workload

RATE_BPS = 10_000_000
SIZE = 1400
PAYLOAD_BPS = RATE_BPS * workload.wire_share(SIZE)
ADVERSARIAL = workload.Load(rate_bps=0.95 * PAYLOAD_BPS, size_bytes=SIZE, duration_s=7.0)
UNIFORM = workload.Load(rate_bps=0.95 * PAYLOAD_BPS, size_bytes=SIZE, duration_s=7.0)


def graph():
    return fabric.dragonfly(
        groups=5, routers_per_group=2, global_links_per_router=2, rate_bps=RATE_BPS
    )


def measure(out_dir, routing: str) -> dict:
    with Fabric(graph(), out_dir=str(out_dir), dragonfly_routing=routing) as fab:
        status = fab.controller_status()
        telemetry.reset_fidelity(fab)
        runs = {
            "adversarial": workload.run(fab, "adversarial", ADVERSARIAL),
            "uniform": workload.run(fab, "uniform", UNIFORM),
        }
        judged = telemetry.judge_fidelity(fab, out_dir)
    return {"runs": runs, "judged": judged, "status": status}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    out = {}
    for routing in ("minimal", "ugal"):
        out[routing] = measure(tmp_path_factory.mktemp(routing), routing)
        for pattern, r in out[routing]["runs"].items():
            print(
                f"{routing:8s} {pattern:12s} delivered {r.delivered_bps / 1e6:6.2f} Mbit/s "
                f"of {r.offered_total_bps / 1e6:6.2f} offered; off the minimal path "
                f"{r.nonminimal} packets; send errors {r.send_errors}, skipped {r.skipped}"
            )
    return out


def judged(measured: dict, what: str) -> None:
    """xfail, naming why, when either run's emulator was not faithful."""
    for routing, m in measured.items():
        if any(f.measure in TIMING_MEASURES for f in m["judged"].verdict.failures()):
            reasons = m["judged"].reasons(TIMING_MEASURES)
            pytest.xfail(f"{what}: the {routing} run was unfaithful: {reasons}")


def valiant_link_bytes(run: workload.DragonflyRun) -> int:
    """Bytes on global links that the adversarial pattern's minimal paths do not cross."""
    g = graph()
    paths = model.Paths(g)
    minimal = {link for pair in workload.adversarial_pairs(g) for link in paths.minimal_split(pair)}
    return sum(n for link, n in run.global_bytes.items() if link not in minimal)


def modelled(pattern: str, routing: str) -> float:
    load = ADVERSARIAL if pattern == "adversarial" else UNIFORM
    return workload.model_rates(graph(), pattern, load.rate_bps, routing, SIZE)


def test_minimal_routing_shares_one_global_link_per_group(measured) -> None:
    run = measured["minimal"]["runs"]["adversarial"]
    assert measured["minimal"]["status"].get("ugal") is None  # no extension: routing's own
    judged(measured, "minimal's adversarial throughput")
    # The one global link from each group to the next is full for the whole run...
    g = graph()
    paths = model.Paths(g)
    direct = {
        link
        for pair in workload.adversarial_pairs(g)
        for link in paths.minimal_split(pair)
        if g.edges[link]["tier"] == "global"
    }
    assert len(direct) == 5
    full_bytes = RATE_BPS / 8 * ADVERSARIAL.duration_s
    assert all(run.global_bytes[link] > 0.85 * full_bytes for link in direct), run.global_bytes
    # ... so 5 global links carry 10 hosts: at most half of what they offer (max-min);
    # open-loop UDP gets less, the first links' losses wasting later ones (the lossy
    # model, 37.8 Mbit/s here), and drop-tail shares follow the arrivals' bursts too:
    # runs measured 27.0 to 36.2 Mbit/s (0.71 to 0.96 of the lossy model).
    assert run.delivered_bps < 1.05 * modelled("adversarial", "minimal")
    assert run.delivered_bps > 0.6 * modelled("adversarial", "minimal-lossy")
    assert run.nonminimal == 0 and valiant_link_bytes(run) < 0.02 * sum(run.global_bytes.values())


def test_ugal_sends_the_adversarial_pattern_through_third_groups(measured) -> None:
    minimal = measured["minimal"]["runs"]["adversarial"]
    ugal = measured["ugal"]["runs"]["adversarial"]
    status = measured["ugal"]["status"]["ugal"]
    assert status["mode"] == "ugal" and status["destinations"] > 0
    # The switches say it: packets placed off the minimal path, bytes on global links
    # minimal routing leaves idle under this pattern.
    assert ugal.nonminimal > 1000
    assert valiant_link_bytes(ugal) > 0.2 * sum(ugal.global_bytes.values())
    judged(measured, "UGAL against minimal on the adversarial pattern")
    # The acceptance: at least 1.5 x minimal's throughput; the model of UGAL-L
    # without backpressure (a lossy class) says about 2 x minimal's max-min figure.
    assert ugal.delivered_bps >= 1.5 * minimal.delivered_bps
    assert ugal.delivered_bps > 0.85 * modelled("adversarial", "ugal-local")
    assert ugal.delivered_bps <= 1.01 * ugal.offered_total_bps


def test_uniform_traffic_loses_little_under_ugal(measured) -> None:
    minimal = measured["minimal"]["runs"]["uniform"]
    ugal = measured["ugal"]["runs"]["uniform"]
    judged(measured, "UGAL against minimal on uniform traffic")
    assert minimal.delivered_bps > 0.9 * modelled("uniform", "minimal")
    # The acceptance: uniform traffic loses at most 10% against minimal.
    assert ugal.delivered_bps >= 0.9 * minimal.delivered_bps
