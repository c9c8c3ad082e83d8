"""How far measured ECMP sits from ecmp-vs-adaptive's flow-level model, over many stored runs.

Reads the metrics.json of ecmp-vs-adaptive runs (`emu run ecmp-vs-adaptive`,
`emu reproduce`, the scenario test's tmp dirs) and prints, over every ECMP run
in them, the mean of measured minus model (and its standard error) for
max-min, proportional fairness without ACKs, proportional fairness with
each flow's ACKs at the ACK load k, and (runs that stored each flow's RTT,
"ecmp_flow_rtt_s") the same weighted by TCP's RTT bias (`rtt_weights`, the
check's upper bound). For those runs it also prints how far each flow's share
of the run's throughput sits from its share under each allocation (the sum
over the flows of |model share - measured share|, averaged over the runs):
the bias shows flow by flow, not only in the sum.

k is the run's own (metrics "ack_load") when it has one, else --ack-load.
ACK paths are the run's own traces ("ecmp_ack_paths") when stored, else the
data path reversed (runs from before the ACKs entered the model stored no
ACK traces; the reverse hash may take other links in the fabric, though the
host links, where the ACK load matters most, are the same).

    .venv/bin/python bench/ecmp_model_fit.py RUN/metrics.json ... [--ack-load 0.059]

No root needed. Results: docs/scenarios.md ("ACKs in the model", "TCP's RTT bias
in the model").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from emu.models.flow import (
    links_of,
    max_min_rates,
    normalised_throughput,
    proportional_fair_rates,
    rtt_weights,
)


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
    diffs: dict[str, list[float]] = {
        "max-min": [],
        "proportional": [],
        "proportional+ACKs": [],
        "proportional+ACKs, 1/RTT^2 (runs with RTTs)": [],
    }
    share_errors: dict[str, list[float]] = {"max-min": [], "proportional": [], "1/RTT^2": []}
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
                rtts = m.get("ecmp_flow_rtt_s", {}).get(pat)
                weights = rtt_weights(rtts[i]) if rtts else None
                if weights is None:
                    continue
                diffs["proportional+ACKs, 1/RTT^2 (runs with RTTs)"].append(
                    got
                    - normalised_throughput(
                        flows, nodes, ack_paths=acks, ack_load=k, weights=weights
                    )
                )
                flow_bps = m.get("flow_bps", {}).get("ecmp", {}).get(pat)
                if flow_bps:
                    measured = np.array(flow_bps[i]) / sum(flow_bps[i])
                    links = [links_of(n) for n in nodes]
                    for name, rates in (
                        ("max-min", max_min_rates(links)),
                        ("proportional", proportional_fair_rates(links)),
                        ("1/RTT^2", proportional_fair_rates(links, weights=weights)),
                    ):
                        shares = np.array(rates) / sum(rates)
                        share_errors[name].append(float(np.abs(shares - measured).sum()))
    n = len(diffs["max-min"])
    if n < 2:
        sys.exit("fewer than 2 ECMP runs found")
    print(f"{n} ECMP runs from {used} files")
    print("| model | measured - model, mean | standard error | sd |")
    print("| --- | ---: | ---: | ---: |")
    for name, vals in diffs.items():
        if len(vals) < 2:
            continue
        sd = statistics.stdev(vals)
        print(f"| {name} | {statistics.mean(vals):+.4f} | {sd / len(vals) ** 0.5:.4f} | {sd:.4f} |")
    if share_errors["max-min"]:
        print(f"\nper-flow share error over {len(share_errors['max-min'])} runs with RTTs")
        print("| allocation | sum of abs(model share - measured share), mean | sd |")
        print("| --- | ---: | ---: |")
        for name, vals in share_errors.items():
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            print(f"| {name} | {statistics.mean(vals):.3f} | {sd:.3f} |")


if __name__ == "__main__":
    main()
