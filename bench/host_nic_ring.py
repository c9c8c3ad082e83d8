"""The host NIC's queue: what its size does to one TCP flow (issue 11, host NIC pacing).

Owns one measurement. `Fabric(host_nic_pacing=True)`, the default, puts a tc
token bucket at link rate on every host's interface (emu/net.py,
`set_host_tx_rate`) whose queue holds 16 full frames. For each queue size in
`--limits` (frames), it boots a 4-leaf, 2-spine leaf/spine with one host per
leaf, replaces h1's token bucket by one of that size (same rate, same
2-frame burst), runs one TCP flow h1 -> h4 for `--seconds`, samples the
bucket's backlog every 50 ms while it runs, and reports iperf3's goodput
and retransmits, the frames the bucket dropped (`tc -s`), and the backlog's
median and maximum. A real host queues what TCP Small Queues let through in
its qdisc (1000 frames by default, `txqueuelen`) and drops none of it; a
bucket that drops them costs the flow retransmits a real NIC would not.

Run as root from the repository root:

    .venv/bin/python bench/host_nic_ring.py [--limits 16,1000] [--seconds 8] [--markdown]

Results: docs/performance.md ("The host NIC's queue").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rate_sweep import render_rows  # noqa: E402
from emu import fabric  # noqa: E402
from emu.net import HOST_NIC_FRAME_BYTES, Fabric  # noqa: E402
from emu.traffic import iperf  # noqa: E402

BACKLOG = re.compile(r"backlog \d+b (\d+)p")
DROPPED = re.compile(r"dropped (\d+),")


def qdisc_stats(fab: Fabric) -> str:
    return fab.host_run("h1", ["tc", "-s", "qdisc", "show", "dev", "h1-eth0"]).stdout


def one_run(limit_frames: int, seconds: float, out_dir: str) -> dict:
    g = fabric.leaf_spine(leaves=4, spines=2, hosts_per_leaf=1)
    rate = g.edges["h1", "leaf1"]["rate_bps"]
    with Fabric(g, out_dir=out_dir) as fab:
        fab.host_run(
            "h1",
            ["tc", "qdisc", "replace", "dev", "h1-eth0", "root", "tbf", "rate", f"{rate}bit"]
            + ["burst", str(2 * HOST_NIC_FRAME_BYTES)]
            + ["limit", str(limit_frames * HOST_NIC_FRAME_BYTES)],
            check=True,
        )
        [client] = iperf.start_many(fab, [("h1", "h4")], seconds, first_port=5900)
        backlog: list[int] = []
        while client.poll() is None:  # sample the queue every 50 ms while the flow runs
            m = BACKLOG.search(qdisc_stats(fab))
            if m:
                backlog.append(int(m.group(1)))
            time.sleep(0.05)
        doc = iperf.finish(fab, client, timeout_s=seconds + 30)
        dropped = DROPPED.search(qdisc_stats(fab))
    if "error" in doc:
        return {"limit": limit_frames, "error": doc["error"]}
    return {
        "limit": limit_frames,
        "rate_bps": rate,
        "goodput_bps": doc["end"]["sum_received"]["bits_per_second"],
        "retransmits": doc["end"]["sum_sent"].get("retransmits", 0),
        "dropped": int(dropped.group(1)) if dropped else None,
        "backlog_median": statistics.median(backlog) if backlog else None,
        "backlog_max": max(backlog) if backlog else None,
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", default="16,1000", help="queue sizes in frames, comma-separated")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--out", default="/tmp/emu-host-nic-ring")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    try:
        limits = [int(x) for x in args.limits.split(",") if x]
    except ValueError:
        ap.error(f"--limits {args.limits!r}: expected frame counts separated by commas")
    if not limits or any(n < 1 for n in limits):
        ap.error(f"--limits {args.limits!r}: every size must be >= 1 frame")
    if os.geteuid() != 0:
        print("host_nic_ring: needs root (it builds a fabric)", file=sys.stderr)
        return 2
    rows = []
    for n in limits:
        r = one_run(n, args.seconds, os.path.join(args.out, str(n)))
        if "error" in r:
            rows.append([str(n), r["error"], "-", "-", "-", "-"])
            continue
        rows.append(
            [
                str(n),
                f"{r['goodput_bps'] / 1e6:.2f} of {r['rate_bps'] / 1e6:g}",
                str(r["retransmits"]),
                str(r["dropped"]),
                f"{r['backlog_median']:g}",
                str(r["backlog_max"]),
            ]
        )
    head = [
        "queue (frames)",
        "goodput Mbit/s",
        "TCP retransmits",
        "dropped by the queue",
        "backlog median (frames)",
        "backlog max (frames)",
    ]
    print(render_rows(head, rows, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
