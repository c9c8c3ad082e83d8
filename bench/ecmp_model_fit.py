"""How far measured ECMP sits from ecmp-vs-adaptive's flow-level model, over many stored runs.

Reads the metrics.json of ecmp-vs-adaptive runs (`emu run ecmp-vs-adaptive`,
`emu reproduce`, the scenario test's tmp dirs) and prints, over every ECMP run
in them, the mean of measured minus model (and its standard error) for
max-min, proportional fairness without ACKs, and proportional fairness with
each flow's ACKs at the ACK load k.

k is the run's own (metrics "ack_load") when it has one, else --ack-load.
ACK paths are the run's own traces ("ecmp_ack_paths") when stored, else the
data path reversed (runs from before the ACKs entered the model stored no
ACK traces; the reverse hash may take other links in the fabric, though the
host links, where the ACK load matters most, are the same).

    .venv/bin/python bench/ecmp_model_fit.py RUN/metrics.json ... [--ack-load 0.059]

No root needed. Results: README ("ACKs in the model").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from scenarios.ecmp_vs_adaptive import normalised_throughput, proportional_fair_rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", nargs="+", help="metrics.json files of ecmp-vs-adaptive runs")
    ap.add_argument(
        "--ack-load",
        type=float,
        default=None,
        help="k for runs that stored none (bench/ack_cost.py measures it)",
    )
    args = ap.parse_args()
    diffs: dict[str, list[float]] = {"max-min": [], "proportional": [], "proportional+ACKs": []}
    used = 0
    for path in args.metrics:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            sys.exit(f"{path}: {exc}")
        m = doc.get("metrics", {})
        if doc.get("scenario") != "ecmp-vs-adaptive" or "ecmp_paths" not in m:
            print(f"skipped {path}: no ECMP runs with traced paths", file=sys.stderr)
            continue
        k = m.get("ack_load", {}).get("k", args.ack_load)
        if k is None:
            sys.exit(f"{path}: stores no ACK load; give --ack-load")
        used += 1
        for pat, runs in m["ecmp_paths"].items():
            backs = m.get("ecmp_ack_paths", {}).get(pat)
            for i, (got, taken) in enumerate(zip(m["normalised"]["ecmp"][pat], runs)):
                nodes = [p.split() for p in taken]
                flows = [(n[0], n[-1]) for n in nodes]
                acks = [p.split() for p in backs[i]] if backs else [n[::-1] for n in nodes]
                diffs["max-min"].append(got - normalised_throughput(flows, nodes))
                diffs["proportional"].append(
                    got - normalised_throughput(flows, nodes, proportional_fair_rates)
                )
                diffs["proportional+ACKs"].append(
                    got - normalised_throughput(flows, nodes, ack_paths=acks, ack_load=k)
                )
    n = len(diffs["max-min"])
    if n < 2:
        sys.exit("fewer than 2 ECMP runs found")
    print(f"{n} ECMP runs from {used} files")
    print("| model | measured - model, mean | standard error | sd |")
    print("| --- | ---: | ---: | ---: |")
    for name, vals in diffs.items():
        sd = statistics.stdev(vals)
        print(f"| {name} | {statistics.mean(vals):+.4f} | {sd / n**0.5:.4f} | {sd:.4f} |")


if __name__ == "__main__":
    main()
