"""straggler: one slow rank stretches every iteration; ring vs in-network aggregation.

       spine1   spine2
      leaf1 .. leaf4          8 ranks run `iters` training-like iterations:
      h1 .. h8                compute for C seconds, then all-reduce S bytes

h1 is made a straggler with the fault API (`faults.straggler(h1,
compute_factor=s)`): its compute step takes s x C. An all-reduce cannot end
before its slowest rank has contributed, so every iteration takes

    T(s) = s x C + T_comm

where T_comm is the all-reduce itself (measured at s = 1 as T(1) - C). The
scenario sweeps s, measures the iteration time (from the start of the compute
step to the last rank's result, the slowest rank's view) for the ring and for
SHARP-like aggregation, and checks each against the model within 10 %.

Run:  emu run straggler [--set factors=1,2,4 --set compute_s=0.5]
"""

from __future__ import annotations

from emu import fabric as fabric_mod
from emu.net import Fabric
from emu.scenario import (
    Context,
    Param,
    ScenarioError,
    build_fabric_graph,
    fabric_params,
    parse_param,
)
from emu.telemetry import Panel, save_panels
from emu.traffic import collectives

DESCRIPTION = "one slow rank: iteration time against its slowdown, ring vs SHARP, vs the model"
APPS = ("controllers.routing", "controllers.aggregation")
STRAGGLER = "h1"

PARAMS = {
    **fabric_params(rate_mbps=10.0),
    "factors": Param("1,1.5,2,3,4", "the straggler's compute slowdowns s (1 = none)"),
    "compute_s": Param(0.5, "compute step C of every rank, seconds", min=0.01, max=60.0),
    "size": Param("256K", "all-reduce size per rank (bytes; K/M suffixes)"),
    "dtype": Param("float32", "float32 or int32", choices=("float32", "int32")),
    "iters": Param(3, "iterations per factor", min=1, max=50),
    "algos": Param("ring,sharp", "comma list of ring, sharp"),
    "tolerance": Param(0.10, "allowed relative error against T = s x C + T_comm", min=0.0,
                       max=1.0),
}


def _factors(text: str) -> list[float]:
    try:
        out = [float(f) for f in text.split(",") if f]
    except ValueError:
        raise ScenarioError(f"parameter factors={text!r}: a comma list of numbers >= 1") from None
    if not out or any(f < 1 for f in out) or 1.0 not in out:
        raise ScenarioError(f"parameter factors={text!r}: numbers >= 1, including 1 "
                            "(the baseline that gives T_comm)")
    return sorted(out)


def validate(params: dict) -> None:
    _factors(params["factors"])
    parse_param(params, "algos", collectives.parse_algos)
    parse_param(params, "size", collectives.parse_size, params["dtype"])


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_fabric_graph(p)
    hosts = fabric_mod.hosts(graph)
    if STRAGGLER not in hosts:
        raise ScenarioError(f"the fabric has no host {STRAGGLER}")
    factors = _factors(p["factors"])
    size = collectives.parse_size(p["size"], p["dtype"])
    c = p["compute_s"]
    measured: dict[str, dict[float, float]] = {}
    with Fabric(graph, out_dir=str(ctx.out_dir / "fabric"), seed=p["seed"], apps=APPS) as fab:
        collectives.host_nics(fab, hosts)  # the agents the straggler fault talks to
        for algo in collectives.parse_algos(p["algos"]):
            measured[algo] = {}
            for s in factors:
                fab.faults.straggler(STRAGGLER, compute_factor=s)
                (r,) = collectives.run_allreduce(fab, hosts, [size], dtype=p["dtype"],
                                                 algo=algo, iters=p["iters"], compute_s=c)
                if r.wrong:
                    raise RuntimeError(f"{algo} at s={s}: {r.wrong} wrong elements")
                measured[algo][s] = r.iteration_s
                ctx.log(f"  {algo} s={s:g}: iteration {r.iteration_s * 1000:.0f} ms "
                        f"(all-reduce {r.time_s * 1000:.0f} ms)")
            fab.faults.straggler(STRAGGLER, compute_factor=1.0)
        ctx.events.extend(fab.faults.events)
    rows, lines = [], {}
    for algo, by_s in measured.items():
        t_comm = by_s[1.0] - c
        model = {s: s * c + t_comm for s in factors}
        for s in factors:
            err = (by_s[s] - model[s]) / model[s]
            rows.append([algo, s, f"{by_s[s] * 1000:.0f}", f"{model[s] * 1000:.0f}",
                         f"{err * 100:+.1f}%", f"{t_comm * 1000:.0f}"])
            if s == 1.0:
                continue  # the baseline defines T_comm: it cannot disagree with the model
            ctx.check(f"{algo} s={s:g}: iteration time matches s x C + T_comm",
                      abs(err) <= p["tolerance"], f"{by_s[s] * 1000:.0f} ms",
                      f"{model[s] * 1000:.0f} ms +- {p['tolerance'] * 100:.0f}%")
        lines[f"{algo} measured"] = (factors, [by_s[s] for s in factors])
        lines[f"{algo} model"] = (factors, [model[s] for s in factors])
        ctx.metrics.setdefault("t_comm_s", {})[algo] = t_comm
    ctx.metrics.update({"compute_s": c, "size_bytes": size, "measured_s": {
        a: {str(s): t for s, t in by_s.items()} for a, by_s in measured.items()}})
    ctx.table(f"iteration time with {STRAGGLER} computing s x {c:g} s, {len(hosts)} ranks, "
              f"{size} B all-reduce", ["algo", "s", "measured ms", "model ms", "error", "T_comm ms"], rows)
    panels = [Panel("iteration time against the straggler's slowdown", "slowdown s",
                    "iteration time (s)", lines=lines)]
    path = save_panels(ctx.out_dir / "straggler.png", panels, title="straggler")
    ctx.plots.append(path.name)
