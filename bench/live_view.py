"""What the live view costs a running fabric: CPU of its sampler, its server and the switches.

Builds the default leaf/spine (4 leaves, 2 spines, 8 hosts, --rate-mbps links,
switches sharing one process per CPU), loads it with RoCEv2 all-to-all at
--load of every host link, serves the live view (emu/live/) and measures two
windows of --seconds each:

    idle     the view is up, no page asks (the sampler sleeps)
    watched  a client asks /api/state four times a second, as the page does

For each: the CPU seconds of the sampler thread, of this whole process (the
sampler, the HTTP threads and the client), and of the switch processes, each
as a share of one core; the sampler's rounds and its CPU per round. The
switches' share moves with their traffic too, so compare the two windows of
one run.

    sudo .venv/bin/python bench/live_view.py [--seconds 10] [--rate-mbps 10] [--load 0.4]

Needs root (it builds a fabric). Results: docs/performance.md ("The live view").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import urllib.request

from emu import fabric as fabric_mod
from emu import live
from emu.net import Fabric
from emu.scenario import build_fabric_graph, fabric_params
from emu.traffic.rdma import RdmaHosts

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of `pid` (its threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def switch_pids(fab) -> list[int]:
    return [e["pid"] for e in fab.run.pids if e["role"].startswith(("switch ", "switches "))]


def window(fab, view, seconds: float, watched: bool) -> dict:
    """One measuring window; with `watched`, a client polls the state at 4 Hz."""
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            with urllib.request.urlopen(view.url + "api/state", timeout=5) as answer:
                answer.read()
            stop.wait(0.25)

    poller = threading.Thread(target=client, name="bench-client", daemon=True)
    pids = switch_pids(fab)
    before = {
        "sampler": view.sampler.cpu_s,
        "rounds": view.sampler.rounds,
        "process": time.process_time(),
        "switches": sum(process_cpu_s(p) for p in pids),
        "wall": time.monotonic(),
    }
    if watched:
        poller.start()
    stop.wait(seconds)
    stop.set()
    if watched:
        poller.join(5)
    wall = time.monotonic() - before["wall"]
    rounds = view.sampler.rounds - before["rounds"]
    sampler = view.sampler.cpu_s - before["sampler"]
    return {
        "rounds": rounds,
        "sampler_core": sampler / wall,
        "sampler_ms_per_round": sampler * 1e3 / rounds if rounds else 0.0,
        "process_core": (time.process_time() - before["process"]) / wall,
        "switches_core": (sum(process_cpu_s(p) for p in pids) - before["switches"]) / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate-mbps", type=float, default=10.0)
    ap.add_argument("--load", type=float, default=0.4)
    args = ap.parse_args()
    params = {k: v.default for k, v in fabric_params(rate_mbps=args.rate_mbps).items()}
    graph = build_fabric_graph(params)
    hosts = fabric_mod.hosts(graph)
    rate = int(args.rate_mbps * 1e6)
    with (
        Fabric(graph, out_dir=tempfile.mkdtemp(prefix="emu-bench-live-")) as fab,
        live.serve(fab, port=0) as view,
    ):
        nics = RdmaHosts(fab, hosts, dcqcn=False)
        per_flow = args.load * rate / (len(hosts) - 1)
        total_s = 2 * args.seconds + 10
        for s in hosts:
            for d in hosts:
                if s != d:
                    qp = nics.connect(s, d, max_rate_bps=per_flow)
                    nics.post(s, qp, 16384, int(per_flow * total_s / 8 / 16384) + 2)
        results = {
            "idle": window(fab, view, args.seconds, watched=False),
            "watched": window(fab, view, args.seconds, watched=True),
        }
    print(
        f"live view on {graph.graph['name']} ({len(fabric_mod.switches(graph))} switches), "
        f"RoCEv2 all-to-all at {args.load:.0%} of {args.rate_mbps:g} Mbit/s, "
        f"{args.seconds:g} s per window (CPU as a share of one core)"
    )
    print("window   rounds  sampler  ms/round  this process  switch processes")
    for name, r in results.items():
        print(
            f"{name:8} {r['rounds']:6d}  {r['sampler_core']:7.2%}  {r['sampler_ms_per_round']:8.2f}"
            f"  {r['process_core']:12.2%}  {r['switches_core']:16.2%}"
        )


if __name__ == "__main__":
    main()
