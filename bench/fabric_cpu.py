"""Where a fabric's CPU goes: one ring all-reduce, per process kind.

Builds the sharp-allreduce scenario's fabric (4 leaves, 2 spines, 8 hosts,
links at --rate-mbps), runs one ring all-reduce of --size bytes per rank on
the hosts' NIC agents, and sums the fabric's own fidelity records
(`fidelity.json`: CPU seconds, loop passes, frames sent per port, link time
lost) over the switches and over the NIC agents:

    CPU us per frame sent, loop passes per frame sent, CPU us per pass

and, for the NIC agents, the CPU us per frame sent without the ranks' own
data work: each rank makes its input, regenerates every rank's input to
know the exact sum, and checks its result against it, in the agent's process
(emu/host/collective.py `data_cpu_s`, the test's oracle; a NIC does none of
it). Plus the ring's bus bandwidth as a fraction of the link's RoCE goodput and
the link time the emulator lost. The records cover the whole fabric window
(boot and setup included), so compare runs of the same size.

    .venv/bin/python bench/fabric_cpu.py [--size 4M] [--rate-mbps 10] [--runs 1]

Needs root (it builds a fabric). Results: docs/performance.md ("Wake-ups").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from emu import fabric as fabric_mod
from emu.net import Fabric
from emu.scenario import build_fabric_graph, fabric_params
from emu.traffic import collectives


def summarize(fidelity_path: str) -> dict:
    """Per kind: cpu_s, frames, passes; and the lost share of busy link time."""
    with open(fidelity_path) as f:
        records = json.load(f)["processes"]
    kinds: dict[str, dict[str, float]] = {}
    lost = busy = 0.0
    counted: set[int] = set()  # switches that share a process share its CPU and passes
    for rec in records:
        k = kinds.setdefault(rec["kind"], {"cpu_s": 0.0, "frames": 0, "passes": 0})
        if rec["pid"] not in counted:
            counted.add(rec["pid"])
            k["cpu_s"] += rec["cpu"]["cpu_s"]
            k["passes"] += rec["loop"]["passes"]
        for port in rec["ports"].values():
            k["frames"] += port["frames"]
            lost += port["deficit_s"]
            busy += port["busy_s"]
    return {"kinds": kinds, "lost_share": lost / busy if busy else 0.0}


def one_run(size: int, rate_mbps: float, out_dir: str) -> tuple[float, dict]:
    defaults = {
        k: v.default for k, v in fabric_params(rate_mbps=rate_mbps, modelled_gbps=25.0).items()
    }
    graph = build_fabric_graph(defaults)
    hosts = fabric_mod.hosts(graph)
    with Fabric(graph, out_dir=out_dir, seed=0, apps=("controllers.routing",)) as fab:
        result = collectives.run_allreduce(fab, hosts, [size], algo="ring")[0]
    goodput = collectives.roce_goodput_bps(rate_mbps * 1e6)
    summary = summarize(os.path.join(out_dir, "fidelity.json"))
    summary["data_cpu_s"] = sum(result.data_cpu_s.values())
    return result.busbw_bytes_per_s * 8 / goodput, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="4M", help="bytes per rank (K/M suffixes)")
    p.add_argument("--rate-mbps", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args(argv)
    try:
        size = collectives.parse_size(args.size)
    except ValueError as exc:
        p.error(f"--size: {exc}")
    if args.runs < 1 or args.rate_mbps <= 0:
        p.error("--runs and --rate-mbps must be positive")
    print(
        f"{'run':>3} {'busbw/goodput':>13} {'kind':>6} {'CPU us/frame':>12} "
        f"{'passes/frame':>12} {'CPU us/pass':>11} {'link time lost':>14} "
        f"{'without data work':>17}"
    )
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="emu-bench-cpu-") as out:
            frac, summary = one_run(size, args.rate_mbps, out)
        for kind, k in sorted(summary["kinds"].items()):
            frames = max(k["frames"], 1)
            net = ""
            if kind == "nic":
                net = f"{(k['cpu_s'] - summary['data_cpu_s']) / frames * 1e6:>17.0f}"
            print(
                f"{run:>3} {frac:>13.2f} {kind:>6} {k['cpu_s'] / frames * 1e6:>12.0f} "
                f"{k['passes'] / frames:>12.2f} {k['cpu_s'] / max(k['passes'], 1) * 1e6:>11.0f} "
                f"{summary['lost_share'] * 100:>13.2f}% {net}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
