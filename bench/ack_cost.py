"""What a TCP flow loses when its hosts also carry other traffic: ecmp-vs-adaptive's settings.

On one non-blocking switch (the normalisation of ecmp-vs-adaptive), with that
scenario's links (1 Mbit/s, host NIC pacing, a ten-frame lossy queue), each
case runs --repeats times for the scenario's 10 s with 4 s left out:

    alone        h1 -> h2, every other host idle
    into-one n   n senders into h1: the flows share one link and nothing else
    exchange     h1 -> h2 and h2 -> h1: each link carries one flow's data and
                 the other's ACKs
    permutation  16 flows, every host sends one and receives one (stride 8,
                 the scenario's reference for strides and random permutations)

and prints each case's goodput per flow (per receiver for into-one) and its
ratio to `alone`. The switch's port counters give the ACK frames and bytes
per data frame of the lone flow.

    sudo .venv/bin/python bench/ack_cost.py [--repeats 3]

Needs root (it builds a fabric). Results: README ("ecmp-vs-adaptive", the
ACKs in the model).
"""

from __future__ import annotations

import argparse
import statistics

from emu import fabric as fabric_mod
from emu.models.flow import ack_load_from
from emu.net import Fabric
from emu.traffic import hedera
from scenarios import ecmp_vs_adaptive as eva


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="/tmp/emu-bench-ack-cost")
    args = ap.parse_args()
    p = {k: v.default for k, v in eva.PARAMS.items()}
    congestion = None if p["tcp_congestion"] == "default" else p["tcp_congestion"]
    elephants = hedera.Elephants(p["duration_s"], p["omit_s"], congestion)
    graph = fabric_mod.single_switch(
        hosts=16,
        rate_bps=int(p["rate_mbps"] * 1e6),
        modelled_rate_bps=p["modelled_gbps"] * 1e9,
    )
    cases = {
        "alone": [("h1", "h2")],
        **{f"into-one {n}": [(f"h{i + 2}", "h1") for i in range(n)] for n in (2, 3, 4)},
        "exchange": [("h1", "h2"), ("h2", "h1")],
        "permutation": [(f"h{i}", f"h{(i + 7) % 16 + 1}") for i in range(1, 17)],
    }
    per_flow: dict[str, list[float]] = {}
    acks = []
    with Fabric(
        graph,
        out_dir=args.out,
        switch_processes=0,
        host_nic_pacing=p["host_nic_pacing"],
        **eva._fabric_options(p),
    ) as fab:
        for _ in range(args.repeats):
            for name, flows in cases.items():
                before = fab.port_stats("s1")
                bps = hedera.measure(fab, flows, elephants).total_bps
                after = fab.port_stats("s1")
                receivers = len({d for _s, d in flows})
                per_flow.setdefault(name, []).append(bps / receivers)
                if name == "alone":  # h1 on port 1 sends data, h2 on port 2 only ACKs
                    data = after[1].rx_packets - before[1].rx_packets
                    data_b = after[1].rx_bytes - before[1].rx_bytes
                    ack = after[2].rx_packets - before[2].rx_packets
                    ack_b = after[2].rx_bytes - before[2].rx_bytes
                    acks.append((ack / data, ack_b / data_b))
    alone = statistics.mean(per_flow["alone"])
    print("| case | goodput per receiver (Mbit/s) | sd | / alone |")
    print("| --- | ---: | ---: | ---: |")
    for name, vals in per_flow.items():
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        mean = statistics.mean(vals)
        print(f"| {name} | {mean / 1e6:.4f} | {sd / 1e6:.4f} | {mean / alone:.3f} |")
    frames = statistics.mean(a for a, _b in acks)
    share = statistics.mean(b for _a, b in acks)
    print(f"\nlone flow: {frames:.2f} ACK frames and {share:.4f} ACK bytes per data frame/byte")
    k = ack_load_from(cases["permutation"], alone, 16 * statistics.mean(per_flow["permutation"]))
    print(f"ACK load the scenario would derive from these (ack_load_from): {k:.4f}")


if __name__ == "__main__":
    main()
