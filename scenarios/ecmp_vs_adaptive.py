"""ecmp-vs-adaptive: Hedera's traffic patterns on a k=4 fat-tree, static ECMP vs adaptive routing.

Every host sends one long TCP flow (iperf3) at the same time; the pattern says
to whom (Al-Fares et al., "Hedera", NSDI 2010, section 6.1):

- stride(i): host x sends to host (x + i) mod 16. On a k=4 fat-tree stride 1
  stays mostly on an edge switch, stride 2 inside a pod, strides 4 and 8
  cross the core, where hash collisions cost the most.
- random: a random permutation (every host sends to one and receives from one).
- staggered(P_edge, P_pod): to a host on the same edge switch with P_edge,
  in the same pod with P_pod, elsewhere otherwise.

Each pattern runs over `seeds` ECMP hash seeds (random and staggered also draw
a new matrix per seed) under each routing mode, on one fabric per mode:

- ecmp: controllers.routing, SELECT groups hashing the 5-tuple.
- adaptive: controllers.adaptive, Hedera's elephant detection, demand
  estimation and global first fit, polling every `poll_interval_s`.
- flowlet: controllers.routing with switch-local flowlet groups (emu's
  OpenFlow extension): a new flowlet goes to the shortest egress queue.
- the non-blocking ideal: the same hosts on one switch (normalisation).

Throughput is iperf3's received rate over the window after `omit_s`,
summed over the flows and divided by the non-blocking run of the same
receiver fan-in. The report also prints the flow-level expectation for ECMP
(random paths, max-min fair rates), which the measured ECMP should match.

Run:  emu run ecmp-vs-adaptive [--set patterns=stride4,stride8 --set seeds=5]
      emu run ecmp-vs-adaptive --topo topologies/fat-tree-k4.yaml
                    (a topology file only if it is a k-ary fat tree at one
                    link rate, as `emu topo export fat_tree k=K` writes one;
                    any other file is refused, naming what it lacks)
"""

from __future__ import annotations

import random
import statistics

from emu import fabric as fabric_mod
from emu.figures import Entry, Figure
from emu.models import ecmp, stats
from emu.proto import ofext
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    choices,
    fabric_options,
    fabric_params,
)
from emu.traffic import hedera
from emu.traffic.hedera import PATTERNS

DESCRIPTION = "Hedera's stride/random/staggered patterns on a k=4 fat-tree: ECMP vs adaptive"
MODES = ("ecmp", "adaptive", "flowlet")
ACCEPT_STRIDES = ("stride4", "stride8")

PARAMS = {
    # 2 Mbit/s (twice the Python datapath's 1): 16 TCP flows over up to 5 switch
    # hops, faithful in 5 of 5 runs at 2 with the switches in C. At 4 Mbit/s, on the
    # Python datapath, the adaptive controller's statistics polls pushed the machine
    # over: LLDP was answered late, links expired and routes churned (CI, 230
    # expiries). 1 Gbit/s modelled: the time scale (x500) stretches the 100 us
    # flowlet gap. At 2 the ECMP model check once failed in 2 of 5 reproductions:
    # its upper bound was max-min whenever the ACK load came out 0, and TCP's RTT
    # bias was not in it (`rtt_weights`); both are mended (docs/scenarios.md,
    # "TCP's RTT bias in the model").
    **fabric_params(topology="fat_tree", rate_mbps=2.0, modelled_gbps=1.0),
    # A process per switch here, not the fabric default (shared processes): the
    # ECMP model check was validated that way (55 of 55 runs), and with shared
    # processes ECMP landed further above the flow-level model in 2 of 2 CI-size
    # runs (+0.023 against +0.006..+0.013), failing once. At 1 Mbit/s a process
    # per switch keeps up; at 10 Mbit/s only shared processes do (docs/performance.md).
    "switch_processes": Param(
        0, "processes that run the switches (0: a process per switch)", min=0, max=64
    ),
    # The senders' TCP congestion control. A host's default is the machine's (this
    # VM's is BBR, a fresh Debian's cubic). BBR drops to 4 packets for ProbeRTT
    # 10 s into a flow (Cardwell et al., ACM Queue 2016): every flow of the
    # non-blocking reference is alone on its bottleneck and lost about 2.4% of its
    # measured window (4-14 s) to it, ECMP's flows 0.7%, as a collided flow's
    # partner took the capacity back; it also spoils the lone flow that gives the
    # ACK load. Cubic has none of that; ECMP sat above unweighted proportional
    # fairness on cubic as on BBR (TCP's RTT bias, now in the model: `rtt_weights`),
    # and the default stays the machine's (docs/performance.md, "... at twice
    # their rate").
    "tcp_congestion": Param(
        "default",
        "the senders' TCP congestion control (iperf3 -C); default: the machine's",
        choices=("default", "cubic", "reno", "bbr"),
    ),
    "patterns": Param(",".join(PATTERNS), f"comma list of {', '.join(PATTERNS)}"),
    "modes": Param(",".join(MODES), f"comma list of {', '.join(MODES)}"),
    "seeds": Param(5, "hash seeds (and random draws) per pattern", min=1, max=20),
    "duration_s": Param(10.0, "length of each iperf3 run", min=3.0, max=120.0),
    "omit_s": Param(
        4.0, "first seconds left out of the throughput (routing reacts)", min=0.0, max=60.0
    ),
    "poll_interval_s": Param(0.5, "adaptive controller's statistics period", min=0.1, max=10.0),
    "p_edge": Param(0.2, "staggered: probability of a same-edge destination", min=0.0, max=1.0),
    "p_pod": Param(0.3, "staggered: probability of a same-pod destination", min=0.0, max=1.0),
    "alpha_lossy": Param(
        1 / 64,
        "lossy egress threshold factor of the shared buffer: a "
        "queue of ten frames, not a second's worth",
        min=0.001,
        max=64.0,
    ),
    # 1.5x ECMP's expected 0.62 on strides 4 and 8 is 0.93 of non-blocking: Hedera's
    # "96% of optimal bisection" (Al-Fares et al., NSDI 2010, abstract), less the ACKs
    # that still hash as mice here (README).
    "min_gain": Param(
        1.5,
        "how many times ECMP's expected throughput adaptive must reach on stride4 and stride8",
        min=1.0,
        max=3.0,
    ),
    # One measurement of the non-blocking switch divides every ECMP run of its fan-in:
    # its error moves all of them together (0.98 of the mean once, in 5 reproductions
    # of 5 runs, which put a whole reproduction 0.02 high). Several measurements shrink
    # that error, and their spread enters the ECMP model check's interval.
    "reference_runs": Param(
        5,
        "non-blocking measurements per receiver fan-in (the denominator of every figure)",
        min=2,
        max=20,
    ),
    "model_samples": Param(2000, "draws for the flow-level ECMP expectation", min=100, max=100000),
}

# A topology file is taken when it is a k-ary fat tree with one link rate
# (`hedera.fat_tree_misfit`), as `emu topo export fat_tree k=K` writes; every other
# file is refused in one line naming what it lacks.
TOPOLOGY_FILE = True


def validate(params: dict) -> None:
    if params.get("topo"):
        misfit = hedera.fat_tree_misfit(build_fabric_graph(params))
        if misfit:
            raise ScenarioError(f"ecmp-vs-adaptive: {params['topo']} {misfit}")
    elif params["topology"] != "fat_tree":
        raise ScenarioError(
            "ecmp-vs-adaptive needs topology=fat_tree (Hedera's patterns are defined on a fat-tree)"
        )
    choices(params, "patterns", PATTERNS)
    choices(params, "modes", MODES)
    graph = build_fabric_graph(params)
    hosts = len(fabric_mod.hosts(graph))
    for pat in params["patterns"].split(","):
        misfit = hedera.pattern_misfit(pat, hosts)
        if misfit:
            raise ScenarioError(f"parameter patterns: {misfit}")
    if params["omit_s"] + 1.0 > params["duration_s"]:
        raise ScenarioError(
            f"parameter duration_s={params['duration_s']}: must exceed omit_s + 1 s"
        )
    if params["p_edge"] + params["p_pod"] > 1.0:
        raise ScenarioError("parameters p_edge + p_pod must not exceed 1")


def run(ctx: Context) -> None:
    p = ctx.params
    patterns = [x for x in p["patterns"].split(",") if x]
    modes = [x for x in p["modes"].split(",") if x]
    rate_bps = int(p["rate_mbps"] * 1e6)
    graph = build_fabric_graph(p)  # a k-ary fat tree at one rate (validate)
    ctx.metrics["k"] = graph.graph["params"]["k"]
    # The senders run `tcp_congestion` (see PARAMS).
    congestion = None if p["tcp_congestion"] == "default" else p["tcp_congestion"]
    elephants = hedera.Elephants(p["duration_s"], p["omit_s"], congestion)
    work = hedera.Workload.draw(
        graph, patterns, p["seeds"], p["seed"], elephants, p["p_edge"], p["p_pod"]
    )

    runs: dict[str, hedera.PatternRuns] = {}
    for mode in modes:
        ctx.log(f"ecmp-vs-adaptive: {mode} on a k={ctx.metrics['k']} fat-tree")
        with ctx.fabric(graph, mode, **_mode_options(mode, p, rate_bps)) as fab:
            runs[mode] = hedera.run_patterns(
                fab,
                work,
                # ECMP: the nodes each flow's data and its ACKs crossed, for the model.
                trace=mode == "ecmp",
                between_runs=hedera.wait_unplaced if mode == "adaptive" else None,
                log=ctx.log,
                label=mode,
            )
            if mode == "adaptive":
                ctx.metrics["adaptive_status"] = fab.controller_status().get("adaptive", {})

    ctx.log("ecmp-vs-adaptive: the non-blocking switch")
    ref = hedera.measure_nonblocking(
        ctx,
        work,
        p["reference_runs"],
        rate_bps,
        lone_flow="ecmp" in runs,  # the model's ACK load needs one flow alone
        switch_processes=p["switch_processes"],
        host_nic_pacing=p["host_nic_pacing"],
        **_fabric_options(p),
    )
    compare(ctx, work, patterns, runs, ref)


def compare(ctx: Context, work: hedera.Workload, patterns, runs, ref: hedera.Reference) -> None:
    """Each mode's runs over the non-blocking switch's, and ECMP's against its models."""
    p = ctx.params
    graph, matrices = work.graph, work.matrices
    modes = list(runs)
    traced = runs.get("ecmp", hedera.PatternRuns())
    on_paths, ack_load = ecmp.ecmp_model_on_paths(
        patterns,
        matrices,
        traced.paths,
        traced.ack_paths,
        ref.runs_bps,
        ref.alone_bps,
        traced.rtt_s,
    )
    norm = {m: ref.normalised(runs[m].total_bps, matrices) for m in modes}
    model_rng = random.Random(p["seed"] + 1)
    # What ECMP gives on average over every hash draw (and, for random and staggered,
    # every matrix): the figure ECMP is compared with as a scheme, not one seed's luck.
    expect = hedera.ecmp_expectations(
        graph, patterns, p["model_samples"], model_rng, p["p_edge"], p["p_pod"]
    )
    spread = ecmp.hop_choices(graph, traced.paths)
    ctx.metrics.update(
        {
            "ack_load": {"k": ack_load, "alone_bps": ref.alone_bps},  # read by report()
            "flow_bps": {**{m: runs[m].flow_bps for m in modes}, "nonblocking": ref.flow_bps},
            "ecmp_flow_rtt_s": traced.rtt_s,
            "ecmp_ack_paths": hedera.paths_text(traced.ack_paths),
            "normalised": norm,
            "mean_normalised": {
                m: {pat: statistics.mean(norm[m][pat]) for pat in patterns} for m in modes
            },
            "aggregate_bps": {m: runs[m].total_bps for m in modes},
            "nonblocking_bps": {str(k): v for k, v in ref.mean_bps().items()},
            "nonblocking_runs_bps": {str(k): v for k, v in ref.runs_bps.items()},
            "ecmp_model": expect,
            "ecmp_model_on_paths": on_paths,
            "ecmp_next_hop_choices": {str(m): c for m, c in spread.items()},
            "ecmp_paths": hedera.paths_text(traced.paths),
            "matrices": hedera.matrices_text(matrices),
        }
    )
    report(ctx, patterns, modes, matrices, norm, expect, on_paths, ref, spread)


def report(ctx: Context, patterns, modes, matrices, norm, expect, on_paths, ref, spread) -> None:
    p = ctx.params
    means = ctx.metrics["mean_normalised"]
    flows = len(matrices[patterns[0]][0])
    title = (
        f"throughput normalised to a non-blocking switch, mean of {p['seeds']} seeds "
        f"({flows} flows at {p['rate_mbps']:g} Mbit/s)"
    )
    ctx.table(title, *hedera.normalised_table(patterns, modes, norm))
    if "ecmp" in modes and "adaptive" in modes:
        for pat in ACCEPT_STRIDES:
            if pat not in patterns:
                continue
            # Against ECMP's expectation, not the few seeds measured: those move the
            # ratio by +-0.1 with the hash's luck (5 seeds of stride 4: 0.54 to 0.66),
            # while the two ECMP checks below hold the measurement to the same model.
            gain = means["adaptive"][pat] / expect[pat]
            ctx.check(
                f"{pat}: adaptive at least {p['min_gain']:g}x ECMP's expected throughput",
                gain >= p["min_gain"],
                f"{gain:.2f}x",
                f">= {p['min_gain']:.2f}x (ECMP over all hash draws: {expect[pat]:.3f} "
                f"of non-blocking, flow-level model)",
            )
            ctx.check(
                f"{pat}: adaptive at least 0.8 of non-blocking",
                means["adaptive"][pat] >= 0.8,
                f"{means['adaptive'][pat]:.2f}",
                ">= 0.80",
            )
    if on_paths:
        band = ecmp.model_band(patterns, norm["ecmp"], on_paths, matrices, ref.runs_bps)
        _check_ecmp_model(ctx, band, ctx.metrics["ack_load"]["k"])
    if spread:
        _check_ecmp_spread(ctx, spread)
    title = f"ecmp-vs-adaptive: k={ctx.metrics['k']} fat-tree, one TCP flow per host"
    path = hedera.plot_normalised(
        ctx.out_dir / "ecmp-vs-adaptive.png", patterns, modes, norm, expect, title
    )
    ctx.plots.append(path.name)


def _check_ecmp_model(ctx: Context, band: stats.Band | None, ack_load: float = 0.0) -> None:
    """Measured ECMP against the flow-level model of the very paths the hash chose.

    `band` (emu/models/ecmp.py `model_band`) holds the runs between max-min and
    proportional fairness weighted by TCP's RTT bias with the flows' ACKs at
    `ack_load`, two one-sided t-tests at 99% with the non-blocking reference's
    error in the interval. The lone flow that gives the ACK load measured
    1.86-1.94 Mbit/s at 2 Mbit/s in 10 runs with the senders on cubic,
    1.71-1.91 on BBR (ProbeRTT, see PARAMS); an error of 5% in it moves k by
    about 0.05 and the upper bound by 0.01 at most, less over five runs, so
    its error is left out.
    """
    name = "ECMP: throughput matches the flow-level model on the paths the hash chose"
    if band is None:
        ctx.log(f"{name}: not checked, it needs 2 or more ECMP runs (patterns x seeds)")
        return
    ctx.check(
        name,
        band.holds,
        f"{band.measured:.3f}",
        f"between max-min {band.low:.3f} - {band.slack_low:.3f} and proportional "
        f"{band.high:.3f} + {band.slack_high:.3f} (ACK load {ack_load:.3f}; 99% t-test over "
        f"{band.runs} runs and {band.references} non-blocking references, "
        f"{band.df:.0f} degrees of freedom)",
    )


def _check_ecmp_spread(ctx: Context, spread: dict[int, list[int]]) -> None:
    """The SELECT hash picks every equal-cost next hop equally often (chi-square, p = 0.001)."""
    stat, df, n = stats.chi_square_uniform(spread)
    crit = stats.chi2_999(df)
    shown = "; ".join(f"{m}-way {counts}" for m, counts in sorted(spread.items()))
    ctx.check(
        "ECMP: the hash spreads flows evenly over equal-cost next hops",
        stat <= crit,
        f"chi-square {stat:.1f} over {n} choices ({shown})",
        f"<= {crit:.1f} (p = 0.001, {df} degrees of freedom)",
    )


def _fabric_options(p: dict) -> dict:
    # Buffers are sized in time. At the default alpha (1/2) one congested 1 Mbit/s
    # port holds seconds of traffic, and even 1/16 (60 KB, half a second) let a
    # single elephant on a link keep a standing queue that the ACKs of other
    # flows wait behind: adaptive placements reached 0.88 of non-blocking.
    # 1/64 (about 15 KB, ten frames, 120 ms) costs a lone paced TCP flow nothing
    # and lets two flows share a link fairly. At 1/128 (five frames) colliding
    # flows starved in RTO backoff (single flows at 0.02 of a link), which
    # lifted ECMP's aggregate to 0.70, above the flow-level model's 0.62.
    return {"qos": {"buffer": {"alpha_lossy": p["alpha_lossy"]}}}


def _mode_options(mode: str, p: dict, rate_bps: int) -> dict:
    """The fabric's options in `mode`: the run's, the buffer's, and the controller's."""
    options = {**fabric_options(p), **_fabric_options(p)}
    if mode == "adaptive":
        options["apps"] = ("controllers.adaptive",)
        options["controller_args"] = ("--poll-interval", str(p["poll_interval_s"]))
    if mode == "flowlet":
        gap = ofext.gap_us_for(rate_bps, p["modelled_gbps"])
        options["controller_args"] = ("--flowlet-gap-us", str(gap))
    return options


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_QUOTED_PATTERNS = ("stride4", "stride8", "random")


def _figures_of(pattern: str) -> tuple[Figure, ...]:
    """Each mode's normalised throughput over the seeds, and adaptive over ECMP, for one pattern."""
    out = []
    for mode in ("ecmp", "adaptive"):
        out += [
            Figure(f"{pattern}: {mode}, mean over seeds", ("mean_normalised", mode, pattern)),
            Figure(f"{pattern}: {mode}, lowest seed", ("normalised", mode, pattern), "min"),
            Figure(f"{pattern}: {mode}, highest seed", ("normalised", mode, pattern), "max"),
        ]
    out.append(
        Figure(
            f"{pattern}: adaptive / ecmp",
            ("mean_normalised", "adaptive", pattern),
            "ratio",
            ("mean_normalised", "ecmp", pattern),
        )
    )
    return tuple(out)


REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "ecmp-vs-adaptive",
        "ecmp-vs-adaptive",
        "ecmp-vs-adaptive: Hedera's patterns on a k=4 fat-tree",
        full=("patterns=stride4,stride8,random", "modes=ecmp,adaptive"),
        quick=(
            "patterns=stride4,stride8,random",
            "modes=ecmp,adaptive",
            "seeds=1",
            "min_gain=1.25",
        ),
        figures=sum((_figures_of(p) for p in _QUOTED_PATTERNS), ()),
        timeout_s=3600,
    ),
)
