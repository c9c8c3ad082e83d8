"""One fabric on one machine against the same fabric split over two servers (issue 32).

Owns one measurement, in one go on one machine: each fabric in `--fabrics`
booted on this machine alone, then with `servers=local,second`, the second
server a loop server made here (emu/testserver.py: a network namespace with
its own sshd, reached only through ssh, as a real server). Per fabric and
layout:

- boot seconds, with emu's boot phases (the split one adds "servers checked"
  and "servers connected");
- ping between the first host on each server (the split one crosses a
  tunnel): 20 pings 50 ms apart, avg and max RTT;
- one TCP flow (iperf3, 5 s) between the same two hosts at each of the
  `--rates` (the fabric rebuilt per rate): its goodput against the link rate,
  and its retransmits;
- for the split layout: the frames that crossed the tunnels and the tunnels'
  losses (the device counters, as the report's check reads them), and the
  fidelity verdict of the run (did every switch keep its links' clocks).

The loop server shares this machine's CPUs, so the split layout here costs
more than on two machines (ssh, the agent and the tunnel's encapsulation
compete with the switches): it measures the cost of the code path, not what a
second machine adds.

Run as root from the repository root:

    .venv/bin/python bench/servers.py [--fabrics ls4,ft4] [--rates 40,200] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from emu import fabric as fabric_mod  # noqa: E402
from emu import fidelity, servers  # noqa: E402
from emu.net import Fabric  # noqa: E402
from emu.testserver import LoopServer  # noqa: E402
from emu.traffic import iperf  # noqa: E402

FABRICS = {
    "ls4": lambda rate: fabric_mod.leaf_spine(
        leaves=4, spines=2, hosts_per_leaf=2, host_rate_bps=rate
    ),
    "ft4": lambda rate: fabric_mod.fat_tree(k=4, rate_bps=rate),
}


def pair_across(fab: Fabric) -> tuple[str, str]:
    """The first host on each server (or two hosts on different leaves, on one machine)."""
    hosts = fabric_mod.hosts(fab.graph)
    if fab.placement is None:
        return hosts[0], hosts[-1]
    first = {}
    for h in hosts:
        first.setdefault(fab.server_of(h), h)
    return first["local"], first["second"]


def measure(name: str, rate_mbps: float, split: bool, with_ping: bool) -> dict:
    graph = FABRICS[name](int(rate_mbps * 1e6))
    row: dict = {
        "fabric": name,
        "layout": "local,second" if split else "local",
        "rate_mbps": rate_mbps,
    }
    out = tempfile.mkdtemp(prefix="emu-bench-servers-")
    t0 = time.monotonic()
    with Fabric(graph, out_dir=out, servers="local,second" if split else None) as fab:
        row["boot_s"] = round(time.monotonic() - t0, 2)
        row["phases"] = dict(fab.boot_phases)
        src, dst = pair_across(fab)
        row["pair"] = f"{src}->{dst}"
        if with_ping:
            res = fab.host_run(src, ["ping", "-q", "-n", "-c", "20", "-i", "0.05",
                                     fabric_mod.host_port(graph, dst, "nic").ip])  # fmt: skip
            found = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", res.stdout)
            row["rtt_avg_ms"] = float(found.group(2)) if found else None
            row["rtt_max_ms"] = float(found.group(3)) if found else None
        fab.reset_fidelity()
        tcp = iperf.measure(fab, src, dst, 5.0)
        row["tcp_mbps"] = round(tcp.received_mbps, 2)
        row["tcp_share"] = round(tcp.received_bps / (rate_mbps * 1e6), 3)
        row["retransmits"] = tcp.retransmits
    doc = fab.fidelity_document or {}
    verdict = fidelity.judge(fidelity.records_of([("", doc)]), fidelity.Limits()) if doc else None
    row["faithful"] = None if verdict is None else verdict.faithful
    if fab.servers_document:
        row["tunnel_frames"] = servers.tunnel_frames(fab.servers_document)
        count = servers.tunnels_lost(fab.servers_document)
        row["tunnel_lost"] = count["lost"] if count["judged"] else "not judged"
        row["tunnels"] = len(fab.servers_document["tunnels"])
        row["switches_per_server"] = {
            s: len(v) for s, v in fab.servers_document["switches"].items()
        }
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| fabric | layout | rate Mbit/s | boot s | ping avg/max ms | TCP Mbit/s (share) | retransmits | tunnels: frames, lost | faithful |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | --- | --- |",
    ]
    for r in rows:
        ping = f"{r['rtt_avg_ms']}/{r['rtt_max_ms']}" if r.get("rtt_avg_ms") is not None else "-"
        tunnels = (
            f"{r['tunnels']}: {r['tunnel_frames']}, {r['tunnel_lost']}" if "tunnels" in r else "-"
        )
        lines.append(
            f"| {r['fabric']} | {r['layout']} | {r['rate_mbps']:g} | {r['boot_s']} | {ping} | "
            f"{r['tcp_mbps']} ({r['tcp_share']}) | {r['retransmits']} | {tunnels} | {r['faithful']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default="ls4,ft4")
    parser.add_argument("--rates", default="40,200", help="link rates in Mbit/s")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/servers.py builds fabrics and a loop server: run as root", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",")]
    rows = []
    with LoopServer("second") as second:
        os.environ.update(second.env())
        for name in args.fabrics.split(","):
            for i, rate in enumerate(rates):
                for split in (False, True):
                    row = measure(name, rate, split, with_ping=i == 0)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        left = second.leftovers()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.markdown:
        print(markdown(rows))
    print(f"left on the second server: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
