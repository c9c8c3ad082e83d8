"""sharp-allreduce: ring all-reduce on the NICs vs in-network aggregation in the switches.

            spine1 (root)       spine2      controllers.aggregation builds the job's
            /   |   |   \\                   tree (leaves -> a spine) and configures
       leaf1  leaf2  leaf3  leaf4            the switches' reduction engines
       h1 h2  h3 h4  h5 h6  h7 h8            8 ranks, real numpy data

Every size from `sizes` is all-reduced (sum) by the 8 ranks twice: with the
ring (reduce-scatter then all-gather over RoCEv2 queue pairs, pipelined in
slices, as NCCL) and with SHARP-like aggregation (each rank sends its data up
once in 256-element packets, the switches add them up the tree and the root
sends the sum down). Every rank checks its own result against numpy.

The report prints both nccl-tests tables (size, count, type, redop, root,
time, algbw, busbw, #wrong) and the bytes each host sent per all-reduce as the
leaf switches counted them on the host ports. Checks: no wrong element; the
ring sends about 2(n-1)/n x S per host and SHARP about S; the ring's bus
bandwidth on the largest size is at least 0.9 of the link's RoCE goodput; and
SHARP's algorithm bandwidth over the ring's is within 10 % of 2(n-1)/n, the
most a switch reduction can gain. Plot: algbw against size for both.

Run:  emu run sharp-allreduce [--set sizes=1K:16M --set factor=4]
      emu run sharp-allreduce --topo FILE
                    (any topology file whose switch links are no slower than
                    its hosts' and whose ring neighbours cannot share a link;
                    every host is a rank)
"""

from __future__ import annotations

from emu import fabric as fabric_mod
from emu import topopick
from emu.figures import WILDCARD, Entry, Figure, per_key
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_options,
    fabric_params,
    parse_param,
)
from emu.telemetry import Panel, save_panels
from emu.traffic import collectives

DESCRIPTION = "ring vs in-network (SHARP-like) all-reduce, nccl-tests tables, 1 KB to 16 MB"
APPS = ("controllers.routing", "controllers.aggregation")
# Ranks, rates and the byte model come from the graph, so a topology file may
# replace the shape parameters (emu/scenario.py) if the checks' bounds hold on
# it (emu/topopick.py, collective_misfit).
TOPOLOGY_FILE = True

# 10 Mbit/s since the per-frame paths run in C (issues 27, 29; docs/results.md).
# With Python's it was 5: at 10 the switches waited for a CPU 45-48% of the run
# and ECN marks on their late queues cut DCQCN (docs/performance.md, "Wake-ups").
PARAMS = {
    # 25 Gbit/s NICs (HPCC/DCQCN ns-3 configurations) at 1:2500.
    **fabric_params(rate_mbps=10.0, modelled_gbps=25.0),
    "sizes": Param("1K:16M", "message sizes, MIN:MAX (nccl-tests -b/-e), bytes per rank"),
    "factor": Param(4, "size step factor (nccl-tests -f)", min=2, max=16),
    "dtype": Param("float32", "float32 or int32", choices=("float32", "int32")),
    "iters": Param(1, "timed iterations per size", min=1, max=20),
    "algos": Param("ring,sharp", "comma list of ring, sharp"),
    "nslots": Param(64, "aggregation slots the job asks each switch for", min=1, max=1024),
    "bytes_tolerance": Param(
        0.12,
        "allowed excess of port-counted bytes over the payload model (headers, ACKs)",
        min=0.0,
        max=1.0,
    ),
}


def validate(params: dict) -> None:
    parse_param(params, "algos", collectives.parse_algos, collectives.ALLREDUCE_NAMES)
    parse_param(params, "sizes", collectives.parse_sizes, params["factor"], params["dtype"])
    graph = build_fabric_graph(params)
    ring = "ring" in collectives.parse_algos(params["algos"], collectives.ALLREDUCE_NAMES)
    misfit = topopick.collective_misfit(graph, ring=ring)
    if misfit:
        raise ScenarioError(f"sharp-allreduce: {params.get('topo') or 'the fabric'}: {misfit}")


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    n = len(hosts)
    sizes = collectives.parse_sizes(p["sizes"], p["factor"], p["dtype"])
    algos = collectives.parse_algos(p["algos"], collectives.ALLREDUCE_NAMES)
    results: dict[str, list[collectives.AllReduceResult]] = {}
    with ctx.fabric(graph, "fabric", **fabric_options(p), apps=APPS) as fab:
        for algo in algos:
            ctx.log(f"sharp-allreduce: {algo} on {n} ranks, {len(sizes)} sizes")
            results[algo] = collectives.run_allreduce(
                fab,
                hosts,
                sizes,
                dtype=p["dtype"],
                algo=algo,
                iters=p["iters"],
                nslots=p["nslots"],
                count_ports=True,
            )
        agg_jobs = fab.agg_call("jobs")
    goodput = collectives.roce_goodput_bps(
        min(graph.edges[h, graph.nodes[h]["leaf"]]["rate_bps"] for h in hosts)
    )
    ctx.metrics.update(
        {
            "ranks": n,
            "goodput_bps": goodput,
            "results": {a: [collectives.as_dict(r) for r in rs] for a, rs in results.items()},
            "aggregation_events": agg_jobs.get("events", []),
        }
    )
    for algo, rs in results.items():
        used = {r.algo for r in rs}
        ctx.text(
            f"{algo} ({', '.join(sorted(used))}), {n} ranks, "
            f"{p['rate_mbps']:g} Mbit/s links\n" + collectives.nccl_table(rs)
        )
    _bytes_table(ctx, results, n)
    _checks(ctx, results, n, goodput)
    lines = {
        a: ([r.size_bytes for r in rs], [r.algbw_bytes_per_s / 1e6 for r in rs])
        for a, rs in results.items()
    }
    panels = [
        Panel(
            "algorithm bandwidth",
            "size per rank (bytes)",
            "algbw (MB/s)",
            lines=lines,
            hline=goodput / 8 / 1e6,
            hline_label="link goodput",
            logx=True,
        )
    ]
    path = save_panels(
        ctx.out_dir / "sharp-allreduce.png", panels, title=f"all-reduce on {n} ranks"
    )
    ctx.plots.append(path.name)


def _bytes_table(ctx: Context, results: dict, n: int) -> None:
    rows = []
    for algo, rs in results.items():
        for r in rs:
            model = collectives.model_bytes_per_host(r.algo, r.size_bytes, n)
            rows.append(
                [
                    algo,
                    r.size_bytes,
                    f"{model:.0f}",
                    f"{r.mean_port_bytes:.0f}",
                    f"{r.mean_port_bytes / model:.3f}",
                ]
            )
    ctx.table(
        "bytes each host sent per all-reduce (leaf switch port counters, mean over hosts)",
        ["algo", "size (B)", "payload model (B)", "port-counted (B)", "ratio"],
        rows,
    )


def _checks(ctx: Context, results: dict, n: int, goodput: float) -> None:
    p = ctx.params
    tol = p["bytes_tolerance"]
    for algo, rs in results.items():
        wrong = sum(r.wrong for r in rs)
        ctx.check(
            f"{algo}: every rank's result equals numpy's sum", wrong == 0, wrong, "0 wrong elements"
        )
        ctx.check(
            f"{algo}: every rank ended with the same bytes",
            all(r.digests_agree for r in rs),
            all(r.digests_agree for r in rs),
            "True",
        )
        big = rs[-1]
        model = collectives.model_bytes_per_host(big.algo, big.size_bytes, n)
        ratio = big.mean_port_bytes / model
        ctx.check(
            f"{algo}: bytes per host on the largest size match "
            f"{'2(n-1)/n x S' if big.algo == 'ring' else 'S'}",
            1.0 - tol / 4 <= ratio <= 1.0 + tol,
            f"{ratio:.3f} x model",
            f"1.00 .. {1 + tol:.2f}",
        )
    if "ring" in results:
        big = results["ring"][-1]
        frac = big.busbw_bytes_per_s * 8 / goodput
        ctx.check(
            "ring: bus bandwidth on the largest size >= 0.9 of link goodput",
            frac >= 0.9,
            f"{frac:.2f}",
            ">= 0.90",
        )
    if "ring" in results and "sharp" in results:
        ring, sharp = results["ring"][-1], results["sharp"][-1]
        if sharp.algo != "sharp":
            ctx.check(
                "sharp: the job was admitted (no fallback to the ring)", False, sharp.algo, "sharp"
            )
            return
        gain = sharp.algbw_bytes_per_s / ring.algbw_bytes_per_s
        bound = 2 * (n - 1) / n
        ctx.check(
            f"sharp/ring algbw on the largest size within 10% of 2(n-1)/n = {bound:.2f}",
            abs(gain - bound) <= 0.1 * bound,
            f"{gain:.2f}",
            f"{0.9 * bound:.2f} .. {1.1 * bound:.2f}",
        )


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_ALGORITHM = (
    ("wrong elements (all sizes)", (WILDCARD, "wrong"), {"op": "sum"}),
    ("time at the largest size (us)", (-1, "time_s"), {"scale": 1e6}),
    ("algbw at the largest size (MB/s)", (-1, "algbw_bytes_per_s"), {"scale": 1e-6}),
    ("busbw at the largest size (MB/s)", (-1, "busbw_bytes_per_s"), {"scale": 1e-6}),
    (
        "average busbw over the sizes (MB/s)",
        (WILDCARD, "busbw_bytes_per_s"),
        {"op": "mean", "scale": 1e-6},
    ),
    ("restarts (all sizes)", (WILDCARD, "restarts"), {"op": "sum"}),
)

REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "sharp-allreduce",
        "sharp-allreduce",
        "sharp-allreduce: ring vs in-network aggregation",
        quick=("sizes=1K:4M", "factor=4"),
        figures=(
            Figure("ranks", ("ranks",)),
            Figure("largest size (B)", ("results", "ring", -1, "size_bytes")),
        )
        + per_key(("ring", "sharp"), ("results",), _FIGURES_PER_ALGORITHM)
        + (
            Figure(
                "ring: busbw / link RoCE goodput at the largest size",
                ("results", "ring", -1, "busbw_bytes_per_s"),
                "ratio",
                ("goodput_bps",),
                scale=8,
            ),
            Figure(
                "sharp / ring algbw at the largest size",
                ("results", "sharp", -1, "algbw_bytes_per_s"),
                "ratio",
                ("results", "ring", -1, "algbw_bytes_per_s"),
            ),
        ),
        timeout_s=1200,
    ),
)
