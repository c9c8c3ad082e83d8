"""adaptive-collectives: routing under RDMA collectives, on a k=4 fat-tree and a dragonfly.

On a k=4 fat-tree (16 hosts, each an RDMA NIC agent in the lossless class,
DCQCN on) two collectives whose bytes cross the core:

- a ring all-reduce whose every hop goes to another pod
  (emu/traffic/cross_pod.py `cross_pod_ring`): each step waits for its
  slowest hop, so one link that the hash gave m hops runs the whole ring at
  1/m (emu/models/ecmp.py `collision_share`);
- an all-to-all, one SEND between every ordered pair of hosts, all at once:
  done when its busiest link is.

each under every routing `modes` names, on a fabric of its own:

- ecmp: OpenFlow SELECT groups hashing the 5-tuple (RoCEv2 varies the UDP
  source port per QP);
- hedera: controllers.adaptive polls flow statistics and re-places elephants;
- flowlet: switch-local flowlet groups, a new flowlet on the shortest queue;
- ar-strict, ar-selective: per-packet adaptive routing in every switch
  (`adaptive_routing=3`, emu/switch/adaptive.py), with the strict in-order
  NIC (go-back-N) or the reordering one (`selective`, emu/host/reorder.py).

Each figure is over the same collective on one switch (the non-blocking
reference). The models: 1.0 for per-packet AR (it should reach the
non-blocking figure), the collision share of the paths the hash chose for
ECMP, between 1/m x what DCQCN keeps of a link m flows share (measured on
the reference switch as an m-to-1 incast) and 1/m; over all hash draws its
mean is ECMP's expectation. The report shows what the NICs counted
(retransmissions, NAKs, the deepest reordering) and priority 3's queues per
tier of links from the switches' telemetry.

On a dragonfly (5 groups of 2 routers, 2 global links each) the adversarial
pattern (group i to group i+1) and uniform random traffic, minimal routing
against UGAL (emu/traffic/dragonfly.py), each against emu/models/dragonfly.py.

Run:  emu run adaptive-collectives [--set modes=ecmp,ar-selective --set seeds=5]
"""

from __future__ import annotations

import random
import statistics

from emu import fabric as fabric_mod
from emu.figures import Entry, Figure
from emu.models import ecmp, stats
from emu.proto import ofext
from emu.scenario import Context, Param, ScenarioError, build_fabric_graph, choices, fabric_params
from emu.scenario import fabric_options as base_options
from emu.traffic import ar_report as report
from emu.traffic import cross_pod, dragonfly
from emu.traffic.collectives import run_allreduce
from emu.traffic.rdma import GO_BACK_N, RdmaHosts

DESCRIPTION = "ring all-reduce and all-to-all across pods: ECMP, Hedera, flowlets, per-packet AR"
MODES = ("ecmp", "hedera", "flowlet", "ar-strict", "ar-selective")
ROUTINGS = ("minimal", "ugal", "valiant")
DRAGONFLY_SIZE = 1400  # UDP payload bytes a datagram (the lossy class)
WARM_UP_BYTES = 64 << 10

PARAMS = {
    # 10 Mbit/s: 16 NIC agents and 20 switches in C keep up (faithful); the ring
    # tests run 16 ranks at this rate too (tests/integration/test_ring_allreduce.py).
    **fabric_params(topology="fat_tree", rate_mbps=10.0),
    "modes": Param(
        ",".join(MODES), f"fat-tree part: comma list of {', '.join(MODES)}; none skips it"
    ),
    # 5: the ECMP band's t-test has 4 degrees of freedom (t = 3.75 at 99% one-sided).
    "seeds": Param(5, "ECMP hash seeds per mode: one ring and one all-to-all each", min=1, max=20),
    "ring_kib": Param(1024, "ring all-reduce: KiB per rank", min=64, max=16384),
    "alltoall_kib": Param(64, "all-to-all: KiB per pair of hosts", min=4, max=4096),
    "poll_interval_s": Param(0.5, "hedera: the controller's statistics period", min=0.1, max=10.0),
    "incast_kib": Param(256, "reference: KiB each sender of an m-to-1 incast sends", min=16),
    "model_samples": Param(2000, "hash draws for ECMP's expectation", min=100, max=100000),
    "dragonfly_routings": Param(
        "minimal,ugal", f"dragonfly part: comma list of {', '.join(ROUTINGS)}; none skips it"
    ),
    "dragonfly_s": Param(7.0, "dragonfly part: seconds of each pattern", min=3.0, max=60.0),
    # The acceptance (31): per-packet AR with reordering NICs within 15% of a
    # non-blocking switch; UGAL 1.5x minimal on the adversarial pattern (Kim et al.,
    # ISCA 2008: UGAL-L approaches Valiant's half of the global bandwidth where
    # minimal gets one link per group), uniform traffic losing at most 10%.
    "min_ar_share": Param(0.85, "ar-selective: least share of non-blocking", min=0.0, max=1.0),
    "min_ugal_gain": Param(1.5, "UGAL over minimal, adversarial", min=1.0, max=10.0),
}


def validate(params: dict) -> None:
    if params.get("topo") or params["topology"] != "fat_tree":
        raise ScenarioError("adaptive-collectives needs topology=fat_tree (its pods and core)")
    if params["modes"] == params["dragonfly_routings"] == "none":
        raise ScenarioError(
            "adaptive-collectives: modes=none and dragonfly_routings=none run nothing"
        )
    if params["modes"] != "none":
        choices(params, "modes", MODES)
    if params["dragonfly_routings"] != "none":
        choices(params, "dragonfly_routings", ROUTINGS)


def run(ctx: Context) -> None:
    p = ctx.params
    if p["modes"] != "none":
        measure_fat_tree(ctx, choices(p, "modes", MODES))
    if p["dragonfly_routings"] != "none":
        measure_dragonfly(ctx, choices(p, "dragonfly_routings", ROUTINGS))


def measure_fat_tree(ctx: Context, modes: list[str]) -> None:
    """The collectives under each routing of `modes`, the reference, the models, the checks."""
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = cross_pod.cross_pod_ring(graph)
    ref = measure_reference(ctx, graph, hosts)
    runs = {mode: measure_mode(ctx, graph, hosts, mode) for mode in modes}
    ring = {m: [r.share / ref["ring"] for r, _a in runs[m]] for m in modes}
    a2a = {m: [a.share / ref["alltoall"] for _r, a in runs[m]] for m in modes}
    expect = statistics.mean(
        ecmp.collision_draws(
            graph, list(zip(hosts, hosts[1:] + hosts[:1])), p["model_samples"], random.Random(1)
        )
    )
    ctx.metrics.update(
        {
            "reference": ref,
            "ring": ring,
            "alltoall": a2a,
            "ring_mean": {m: statistics.mean(v) for m, v in ring.items()},
            "alltoall_mean": {m: statistics.mean(v) for m, v in a2a.items()},
            "ecmp_expected_ring": expect,
            "nics": {m: report.counts_doc(runs[m]) for m in modes},
            "queues": {m: report.queues_doc(runs[m]) for m in modes},
        }
    )
    ctx.table(*report.fat_tree_table(runs, ring, a2a, expect))
    ctx.table(*report.queue_table(runs))
    judge_fat_tree(ctx, runs, ring, a2a, ref, expect)
    ctx.plots.append(report.plot(ctx.out_dir / "adaptive-collectives.png", ring, a2a, expect).name)


def nic_mode(mode: str) -> str:
    return "selective" if mode == "ar-selective" else GO_BACK_N


def mode_options(mode: str, p: dict) -> dict:
    """The fabric's options under `mode`: the run's, and the routing's."""
    options = base_options(p)
    if mode == "hedera":
        options["apps"] = ("controllers.adaptive",)
        options["controller_args"] = ("--poll-interval", str(p["poll_interval_s"]))
    elif mode == "flowlet":
        rate_bps = p["rate_mbps"] * 1e6
        modelled_gbps = p["modelled_gbps"] or rate_bps / 1e9
        options["controller_args"] = (
            "--flowlet-gap-us",
            str(ofext.gap_us_for(rate_bps, modelled_gbps)),
        )
    elif mode.startswith("ar-"):
        options["adaptive_routing"] = str(cross_pod.ROCE_PRIORITY)
    return options


def measure_mode(ctx: Context, graph, hosts: list[str], mode: str) -> list:
    """`seeds` rings and all-to-alls under `mode`: [(ring run, all-to-all run)] per seed."""
    p = ctx.params
    out = []
    with ctx.fabric(graph, mode, **mode_options(mode, p)) as fab:
        nics = RdmaHosts(fab, hosts, loss_recovery=nic_mode(mode))
        warm_up(nics, hosts)
        for i in range(p["seeds"]):
            fab.reseed(p["seed"] + i)
            ring = cross_pod.measure_ring(
                fab, nics, hosts, p["ring_kib"] << 10, seed=i, traced=mode == "ecmp"
            )
            a2a = cross_pod.measure_alltoall(
                fab, nics, hosts, p["alltoall_kib"] << 10, mode == "ecmp", _a2a_timeout(p, hosts)
            )
            ctx.log(
                f"  {mode} seed {p['seed'] + i}: ring {ring.share:.3f}, all-to-all "
                f"{a2a.share:.3f} of goodput; resent {ring.counts.retransmitted}"
                f"+{a2a.counts.retransmitted}, deepest reordering "
                f"{max(ring.counts.reorder_depth_max, a2a.counts.reorder_depth_max)} PSNs"
            )
            out.append((ring, a2a))
    return out


def warm_up(nics: RdmaHosts, hosts: list[str]) -> None:
    """One small ring, not measured: the first ring on fresh agents connects its queue
    pairs and ran at 0.78 of goodput on the reference switch where the next two ran
    at 0.90 and 0.99."""
    run_allreduce(nics, hosts, WARM_UP_BYTES, "float32", seed=99)


def _a2a_timeout(p: dict, hosts: list[str]) -> float:
    """Twenty times the host-link floor, and a minute: a collapse shows as slow, not lost."""
    floor_s = len(hosts) * (p["alltoall_kib"] << 10) * 8 / (p["rate_mbps"] * 1e6)
    return 20 * floor_s + 60.0


def measure_reference(ctx: Context, graph, hosts: list[str]) -> dict:
    """The same collectives on one switch, and DCQCN's share of a link m flows share."""
    p = ctx.params
    rate_bps = int(p["rate_mbps"] * 1e6)
    ideal = fabric_mod.single_switch(
        hosts=len(hosts), rate_bps=rate_bps, time_scale=graph.graph["time_scale"]
    )
    ones = fabric_mod.hosts(ideal)
    with ctx.fabric(ideal, "nonblocking", **base_options(p)) as fab:
        nics = RdmaHosts(fab, ones)
        warm_up(nics, ones)
        rings = [
            cross_pod.measure_ring(fab, nics, ones, p["ring_kib"] << 10, seed=i, traced=False)
            for i in range(3)  # the ECMP band's t-test carries their spread
        ]
        a2as = [
            cross_pod.measure_alltoall(
                fab, nics, ones, p["alltoall_kib"] << 10, False, _a2a_timeout(p, ones)
            )
            for _ in range(2)
        ]
        incast = {
            m: cross_pod.incast_share(nics, ones[1 : m + 1], ones[0], p["incast_kib"] << 10)
            for m in (1, 2, 3, 4)
        }
    ref = {
        "ring": statistics.mean(r.share for r in rings),
        "ring_runs": [r.share for r in rings],
        "alltoall": statistics.mean(a.share for a in a2as),
        "alltoall_runs": [a.share for a in a2as],
        "incast": incast,
    }
    ctx.log(f"  non-blocking: ring {ref['ring']:.3f}, all-to-all {ref['alltoall']:.3f}, {incast}")
    return ref


def judge_fat_tree(
    ctx: Context, runs: dict, ring: dict, a2a: dict, ref: dict, expect: float
) -> None:
    """Each routing against its model; `expect` is ECMP's ring over every hash draw."""
    p = ctx.params
    if "ar-selective" in runs:
        for name, got in (("ring all-reduce", ring), ("all-to-all", a2a)):
            low = min(got["ar-selective"])
            ctx.check(
                f"ar-selective: cross-pod {name} near non-blocking",
                low >= p["min_ar_share"],
                f"{low:.3f} (lowest of {len(got['ar-selective'])})",
                f">= {p['min_ar_share']:.2f} of the non-blocking switch (issue 31)",
            )
        sel = [c for r, a in runs["ar-selective"] for c in (r.counts, a.counts)]
        ctx.check(
            "ar-selective: the NICs placed every reordered packet",
            sum(c.out_of_order for c in sel) > 0
            and sum(c.naks + c.retransmitted + c.beyond_window for c in sel) == 0,
            f"{sum(c.out_of_order for c in sel)} out of order, "
            f"{sum(c.naks for c in sel)} NAKs, {sum(c.retransmitted for c in sel)} resent",
            "packets out of order, none NAKed, resent or dropped past the window",
        )
    if "ar-strict" in runs and "ar-selective" in runs:
        strict = [c for r, a in runs["ar-strict"] for c in (r.counts, a.counts)]
        resent = sum(c.retransmitted for c in strict)
        slower = statistics.mean(ring["ar-strict"]) < statistics.mean(ring["ar-selective"])
        ctx.check(
            "ar-strict: the reordering collapse (go-back-N resends what was only overtaken)",
            resent > 0 and slower,
            f"{resent} packets resent, ring {statistics.mean(ring['ar-strict']):.3f} of "
            f"non-blocking against ar-selective's {statistics.mean(ring['ar-selective']):.3f}",
            "resends on a lossless fabric and a slower ring than with the reordering NIC",
        )
    if "ecmp" in runs:
        _check_ecmp_band(ctx, runs["ecmp"], ring["ecmp"], ref)
    if "hedera" in runs:
        got = statistics.mean(ring["hedera"])
        ctx.check(
            "hedera: the cross-pod ring above ECMP's expectation",
            got > expect,
            f"{got:.3f} of non-blocking",
            f"> {expect:.3f} (the collision model over every hash draw: static hashing; "
            "Hedera moves the elephants that collide)",
        )
    if "flowlet" in runs:
        counts = [c for r, a in runs["flowlet"] for c in (r.counts, a.counts)]
        moved, resent = sum(c.out_of_order for c in counts), sum(c.retransmitted for c in counts)
        ctx.check(
            "flowlet: a moved flowlet overtakes its flow (the strict NIC resends)",
            moved > 0 and resent > 0,
            f"{moved} packets out of order, {resent} resent",
            "reordering and resends on a lossless fabric: a long RDMA flow's gaps are PFC "
            "and DCQCN pauses, and its next flowlet takes a shorter queue past its packets",
        )


def _check_ecmp_band(ctx: Context, runs: list, measured: list[float], ref: dict) -> None:
    """ECMP's ring against the collision share of the paths its hash chose: at most 1/m of
    non-blocking, at least what DCQCN keeps of a link m flows share (the incast), two
    one-sided 99% t-tests with the reference's error (emu/models/stats.py `between`)."""
    incast = ref["incast"]
    high = [ecmp.collision_share(r.paths) for r, _a in runs]
    low = [h * incast[min(round(1 / h), 4)] / incast[1] for h in high]
    band = stats.between(measured, low, high, ["ring"] * len(measured), {"ring": ref["ring_runs"]})
    name = "ECMP: the ring within its collision model's band"
    if band is None:
        ctx.log(f"{name}: not checked, it needs 2 or more seeds")
        return
    ctx.check(
        name,
        band.holds,
        f"{band.measured:.3f}",
        f"between {band.low:.3f} - {band.slack_low:.3f} (DCQCN's share of a link m flows share) "
        f"and {band.high:.3f} + {band.slack_high:.3f} (1/m) over {band.runs} hash seeds",
    )


def measure_dragonfly(ctx: Context, routings: list[str]) -> None:
    """The adversarial and uniform patterns under each routing, and the models' figures."""
    p = ctx.params
    rate_bps = p["rate_mbps"] * 1e6
    graph = fabric_mod.dragonfly(
        groups=5, routers_per_group=2, global_links_per_router=2, rate_bps=int(rate_bps)
    )
    load = dragonfly.Load(
        rate_bps=0.95 * rate_bps * dragonfly.wire_share(DRAGONFLY_SIZE),
        size_bytes=DRAGONFLY_SIZE,
        duration_s=p["dragonfly_s"],
    )
    got: dict[str, dict] = {}
    for routing in routings:
        with ctx.fabric(graph, f"dragonfly-{routing}", dragonfly_routing=routing) as fab:
            got[routing] = {pat: dragonfly.run(fab, pat, load) for pat in dragonfly.PATTERNS}
    models = {
        pat: {
            r: dragonfly.model_rates(graph, pat, load.rate_bps, r, DRAGONFLY_SIZE)
            for r in ("minimal", "minimal-lossy", "valiant", "ugal-local")
        }
        for pat in dragonfly.PATTERNS
    }
    delivered = {r: {pat: run.delivered_bps for pat, run in g.items()} for r, g in got.items()}
    ctx.metrics["dragonfly"] = {"delivered_bps": delivered, "model_bps": models}
    ctx.table(*report.dragonfly_table(got, models))
    if "minimal" in got and "ugal" in got:
        gain = delivered["ugal"]["adversarial"] / delivered["minimal"]["adversarial"]
        ctx.metrics["dragonfly"]["ugal_gain"] = gain
        ctx.check(
            "dragonfly: UGAL over minimal routing, adversarial pattern",
            gain >= p["min_ugal_gain"],
            f"{gain:.2f}x",
            f">= {p['min_ugal_gain']:.2f}x (issue 31; the UGAL-L model: "
            f"{models['adversarial']['ugal-local'] / models['adversarial']['minimal']:.2f}x)",
        )
        kept = delivered["ugal"]["uniform"] / delivered["minimal"]["uniform"]
        ctx.check(
            "dragonfly: UGAL keeps uniform traffic's throughput",
            kept >= 0.9,
            f"{kept:.3f} of minimal's",
            ">= 0.90 (issue 31: at most 10% lost)",
        )


def _ar_figures() -> tuple[Figure, ...]:
    return tuple(
        Figure(f"{kind}: ar-selective, {label}", (kind, "ar-selective"), op)
        for kind in ("ring", "alltoall")
        for label, op in (("mean over seeds", "mean"), ("lowest seed", "min"))
    )


def _mean_figures(modes: tuple[str, ...]) -> tuple[Figure, ...]:
    return tuple(
        Figure(f"{kind}: {mode}, mean over seeds", (f"{kind}_mean", mode))
        for kind in ("ring", "alltoall")
        for mode in modes
    )


_EXPECTED = Figure("ring: ECMP's expectation over hash draws", ("ecmp_expected_ring",))


def _one_mode(suffix: str, mode: str, title: str, figures: tuple[Figure, ...]) -> Entry:
    """A reproduction of routings `mode` beside the non-blocking reference, no dragonfly."""
    only = (f"modes={mode}", "dragonfly_routings=none")
    return Entry(
        f"adaptive-collectives-{suffix}",
        "adaptive-collectives",
        f"adaptive-collectives: {title}",
        full=only,
        quick=(*only, "seeds=2"),
        figures=figures,
        timeout_s=1800,
    )


# Each routing is reproduced beside the non-blocking reference alone, and the dragonfly
# apart: a run is faithful only if every fabric it opened kept up, and at 10 Mbit/s
# the all-in-one run (seven fabrics, 111 processes, 6-7 minutes) met a stop of the
# VM's host in 3 of 3 runs at d9d6c17 and 1 of 1 at cb3a036, which left every
# routing's figures unquoted; flowlets also run every frame through the switches'
# Python path (emu/switch/fastpath.py, "slow-path classes"): their fabric fell
# behind in 3 of 3 of those runs, its switch process at 42-48% of a CPU.
REPRODUCE: tuple[Entry, ...] = (
    _one_mode("ecmp", "ecmp", "static ECMP", _mean_figures(("ecmp",)) + (_EXPECTED,)),
    _one_mode("hedera", "hedera", "Hedera's elephants", _mean_figures(("hedera",))),
    _one_mode(
        "flowlet",
        "flowlet",
        "switch-local flowlets with the strict NIC",
        _mean_figures(("flowlet",)),
    ),
    # The acceptance of per-packet AR with reordering NICs, alone beside its
    # reference (the strict NIC's go-back-N storms, 3 to 5 million frames a fabric,
    # are reproduced apart, with the reordering NIC they are judged against).
    _one_mode(
        "ar",
        "ar-selective",
        "per-packet AR with reordering NICs against non-blocking",
        _ar_figures(),
    ),
    _one_mode(
        "ar-strict",
        "ar-strict,ar-selective",
        "per-packet AR with the strict NIC: the reordering collapse",
        _mean_figures(("ar-strict", "ar-selective")),
    ),
    Entry(
        "adaptive-collectives-dragonfly",
        "adaptive-collectives",
        "adaptive-collectives: minimal routing and UGAL on a dragonfly",
        full=("modes=none",),
        quick=("modes=none", "dragonfly_s=5"),
        figures=(
            Figure(
                "adversarial: minimal, Mbit/s",
                ("dragonfly", "delivered_bps", "minimal", "adversarial"),
                scale=1e-6,
            ),
            Figure(
                "adversarial: UGAL, Mbit/s",
                ("dragonfly", "delivered_bps", "ugal", "adversarial"),
                scale=1e-6,
            ),
            Figure("adversarial: UGAL / minimal", ("dragonfly", "ugal_gain")),
            Figure(
                "uniform: UGAL / minimal",
                ("dragonfly", "delivered_bps", "ugal", "uniform"),
                "ratio",
                ("dragonfly", "delivered_bps", "minimal", "uniform"),
            ),
        ),
        timeout_s=900,
    ),
)
