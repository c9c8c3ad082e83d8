"""Hedera's workload on a fat tree: its traffic patterns, one TCP elephant per host, what is read.

Owns the workload of Al-Fares et al., "Hedera" (NSDI 2010), section 6.1, as
scenarios/ecmp_vs_adaptive.py runs it, so that other scenarios, labs, benches
and tests can run it too:

- the patterns (`PATTERNS`, `traffic`): stride(i), a random permutation,
  staggered(P_edge, P_pod), over the hosts of a fat tree in its (pod, edge,
  host) order, the premises they need (`fat_tree_misfit`, `pattern_misfit`),
  and ECMP's expected throughput on each (`ecmp_expectations`);
- the elephants (`Elephants`, `measure`): one long iperf3 TCP flow per
  (source, destination), all started together, read back as each flow's
  received bit/s, its ports and its mean RTT (`Measurement`); the paths the
  switches say each flow's data and ACKs took (`traced`);
- a fabric's runs (`Workload`: matrices drawn from one seed, each run's ECMP
  hash seed; `run_patterns`: every matrix under its hash seed) and
  the non-blocking switch that normalises them (`measure_nonblocking`,
  `Reference`), the adaptive controller's release between runs (`wait_unplaced`);
- the report's pieces: the normalised-throughput table (`normalised_table`),
  its bar chart (`plot_normalised`), and matrices and paths as metrics.json
  keeps them (`matrices_text`, `paths_text` and their inverses).

It does not choose the fabric's settings or the routing (the scenario does),
and holds no model: ECMP's is emu/models/ecmp.py, the rate allocations
emu/models/flow.py. Tests: tests/unit/test_traffic_hedera.py.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

import networkx as nx

from emu import fabric as fabric_mod
from emu import topopick
from emu.models.ecmp import ecmp_expectation, fan_in
from emu.registry import wait_for
from emu.telemetry import pyplot
from emu.traffic import iperf

if TYPE_CHECKING:
    from emu.net import Fabric
    from emu.scenario import Context

PATTERNS = ("stride1", "stride2", "stride4", "stride8", "random", "staggered")
FIRST_PORT = 5600  # flow i's iperf3 server listens on FIRST_PORT + i

Flows = list[tuple[str, str]]


# ----- the patterns -----------------------------------------------------------------------


def traffic(
    graph: nx.Graph, pattern: str, rng: random.Random, p_edge: float = 0.2, p_pod: float = 0.3
) -> Flows:
    """One (src, dst) per host for `pattern`; hosts in fat-tree order (pod, edge, host).

    - strideN: host x sends to host (x + N) mod n. On a k=4 fat-tree stride 1
      stays mostly on an edge switch, stride 2 inside a pod, strides 4 and 8
      cross the core, where hash collisions cost the most.
    - random: a random derangement (every host sends to one, receives from one,
      and none to itself).
    - staggered: to a host on the same edge switch with `p_edge`, in the same
      pod with `p_pod`, elsewhere otherwise.

    `rng` draws random and staggered matrices; strides use none of it.
    """
    hosts = fabric_mod.hosts(graph)
    n = len(hosts)
    if pattern.startswith("stride"):
        step = int(pattern[len("stride") :])
        return [(h, hosts[(i + step) % n]) for i, h in enumerate(hosts)]
    if pattern == "random":
        while True:  # a random derangement: nobody sends to itself
            perm = hosts[:]
            rng.shuffle(perm)
            if all(a != b for a, b in zip(hosts, perm)):
                return list(zip(hosts, perm))
    flows = []
    for h in hosts:
        node = graph.nodes[h]
        same_edge = [x for x in hosts if x != h and graph.nodes[x]["leaf"] == node["leaf"]]
        same_pod = [
            x
            for x in hosts
            if graph.nodes[x]["pod"] == node["pod"] and graph.nodes[x]["leaf"] != node["leaf"]
        ]
        other = [x for x in hosts if graph.nodes[x]["pod"] != node["pod"]]
        r = rng.random()
        group = same_edge if r < p_edge else same_pod if r < p_edge + p_pod else other
        flows.append((h, rng.choice(group or other)))
    return flows


def ecmp_expectations(
    graph: nx.Graph,
    patterns: list[str],
    samples: int,
    rng: random.Random,
    p_edge: float = 0.2,
    p_pod: float = 0.3,
) -> dict[str, float]:
    """By pattern, ECMP's expected throughput over a non-blocking switch's
    (emu/models/ecmp.py `ecmp_expectation`), over `samples` hash draws and, for
    random and staggered, as many matrices drawn with `rng`."""
    return {
        pat: ecmp_expectation(
            graph,
            lambda pat=pat: traffic(graph, pat, rng, p_edge, p_pod),
            samples,
            rng,
        )
        for pat in patterns
    }


def pattern_misfit(pattern: str, hosts: int) -> str | None:
    """Why `pattern` makes no traffic on `hosts` hosts (a stride that is a multiple of it), or None."""
    if pattern.startswith("stride") and int(pattern[len("stride") :]) % hosts == 0:
        return f"{pattern} on {hosts} hosts sends every host to itself"
    return None


def fat_tree_misfit(graph: nx.Graph) -> str | None:
    """Why `graph` is not a fabric Hedera's patterns and the model are defined on, or None.

    It must be a k-ary fat tree (graph kind fat_tree with an even params.k, which an
    exported file keeps) with exactly the nodes, links, pods and edge switches of
    emu.fabric.fat_tree(k): the patterns number hosts in its (pod, edge, host) order.
    And every link must run at one rate: the flow-level model gives every link the
    same capacity.
    """
    export = "(write one with `emu topo export fat_tree k=4`)"
    kind = graph.graph.get("kind")
    if kind != "fat_tree":
        return f"is not a k-ary fat tree: its kind is {kind!r}, not fat_tree {export}"
    k = graph.graph.get("params", {}).get("k")
    if not isinstance(k, int) or k < 2 or k % 2:
        return f"says kind: fat_tree but has no even params.k (it has k={k!r}) {export}"
    built = fabric_mod.fat_tree(k=k)
    if set(graph.nodes) != set(built.nodes):
        odd = sorted(set(graph.nodes) ^ set(built.nodes))
        return f"is not the k={k} fat tree its kind says: node {odd[0]} {export}"
    theirs, ours = ({frozenset(e) for e in g.edges} for g in (graph, built))
    if theirs != ours:
        u, v = sorted(sorted(e) for e in theirs ^ ours)[0]
        return f"is not the k={k} fat tree its kind says: link {u}-{v} {export}"
    for h in fabric_mod.hosts(built):
        for key in ("pod", "leaf"):
            if graph.nodes[h].get(key) != built.nodes[h][key]:
                return (
                    f"is not the k={k} fat tree its kind says: {h} has {key} "
                    f"{graph.nodes[h].get(key)!r}, not {built.nodes[h][key]!r}"
                )
    odd = topopick.mixed_rates(graph)
    if odd:
        return f"has links at different rates ({odd}); the flow-level model needs one rate"
    return None


# ----- the elephants ----------------------------------------------------------------------


@dataclass(frozen=True)
class Elephants:
    """How the flows run: one iperf3 TCP test per flow, all started together.

    Attributes:
        duration_s: how long each flow runs.
        omit_s: the first seconds left out of its throughput (iperf3 -O: slow
            start, and routing reacting to the new flows).
        congestion: the senders' TCP congestion control (iperf3 -C); None: each
            host's default, which the machine decides.
        first_port: flow i's server listens on first_port + i.
    """

    duration_s: float
    omit_s: float = 0.0
    congestion: str | None = None
    first_port: int = FIRST_PORT


class Measurement(NamedTuple):
    """What one `measure` read, flow by flow in the order of its flows."""

    total_bps: float  # the flows' received bit/s after omit_s, summed
    ports: list[tuple[int, int]]  # each flow's (source port, destination port)
    flow_bps: list[float]  # each flow's received bit/s
    rtt_s: list[float]  # each flow's mean smoothed RTT (0: not reported)


def measure(fab: Fabric, flows: Flows, elephants: Elephants) -> Measurement:
    """Run `flows` at once as `elephants` and read each flow's throughput, ports and RTT.

    Raises:
        RuntimeError: an iperf3 test failed (naming each failed flow and iperf3's error).
    """
    clients = iperf.start_many(
        fab,
        flows,
        elephants.duration_s,
        first_port=elephants.first_port,
        omit_s=elephants.omit_s,
        congestion=elephants.congestion,
    )
    docs = [iperf.finish(fab, c, timeout_s=elephants.duration_s + 30) for c in clients]
    bad = [f"{s}->{d}: {doc.get('error')}" for (s, d), doc in zip(flows, docs) if "error" in doc]
    if bad:
        raise RuntimeError("iperf3 failed: " + "; ".join(bad))
    ports = [
        (c["local_port"], c["remote_port"]) for doc in docs for c in doc["start"]["connected"][:1]
    ]
    flow_bps = [doc["end"]["sum_received"]["bits_per_second"] for doc in docs]
    return Measurement(sum(flow_bps), ports, flow_bps, [mean_rtt_s(doc) for doc in docs])


def mean_rtt_s(doc: dict) -> float:
    """The sender's mean smoothed RTT over the run (iperf3 from TCP_INFO), 0 if not given."""
    streams = doc["end"].get("streams") or [{}]
    return float(streams[0].get("sender", {}).get("mean_rtt", 0)) / 1e6


def traced(fab: Fabric, flows: Flows, ports: list[tuple[int, int]]) -> tuple[list, list]:
    """The nodes each flow's data crossed, and its ACKs: the switches' own answer."""
    data = [fab.trace_path(s, d, "tcp", a, b) for (s, d), (a, b) in zip(flows, ports)]
    acks = [fab.trace_path(d, s, "tcp", b, a) for (s, d), (a, b) in zip(flows, ports)]
    return data, acks


def wait_unplaced(fab: Fabric) -> None:
    """Adaptive: the next run starts from ECMP, as the first did (placements age out)."""
    wait_for(
        lambda: not fab.controller_status().get("adaptive", {}).get("placements"),
        10.0,
        "the adaptive controller to release the last run's elephants",
        interval_s=0.1,
    )


# ----- a fabric's runs and the non-blocking reference -------------------------------------


@dataclass(frozen=True)
class Workload:
    """Hedera's workload on one fat tree: what every fabric it runs on is given.

    Attributes:
        graph: the fat tree (`fat_tree_misfit` finds nothing wrong with it).
        matrices: by pattern, one matrix per run (`traffic`).
        seeds: run i's ECMP hash seed (`Fabric.reseed`).
        elephants: how the flows run.
    """

    graph: nx.Graph
    matrices: dict[str, list[Flows]]
    seeds: list[int]
    elephants: Elephants

    @classmethod
    def draw(
        cls,
        graph: nx.Graph,
        patterns: list[str],
        runs: int,
        seed: int,
        elephants: Elephants,
        p_edge: float = 0.2,
        p_pod: float = 0.3,
    ) -> Workload:
        """`runs` matrices of each pattern in turn, drawn from random.Random(`seed`);
        run i under ECMP hash seed `seed` + i."""
        rng = random.Random(seed)
        matrices = {
            pat: [traffic(graph, pat, rng, p_edge, p_pod) for _ in range(runs)] for pat in patterns
        }
        return cls(graph, matrices, [seed + i for i in range(runs)], elephants)


@dataclass
class PatternRuns:
    """What `run_patterns` measured on one fabric: by pattern, run by run."""

    total_bps: dict[str, list[float]] = field(default_factory=dict)
    flow_bps: dict[str, list[list[float]]] = field(default_factory=dict)
    rtt_s: dict[str, list[list[float]]] = field(default_factory=dict)
    paths: dict[str, list[list[list[str]]]] = field(default_factory=dict)  # traced only
    ack_paths: dict[str, list[list[list[str]]]] = field(default_factory=dict)  # traced only


def run_patterns(
    fab: Fabric,
    work: Workload,
    *,
    trace: bool = False,
    between_runs: Callable[[Fabric], None] | None = None,
    log: Callable[[str], None] = print,
    label: str = "",
) -> PatternRuns:
    """Every pattern's matrices of `work` on `fab`, run i under ECMP hash seed work.seeds[i].

    Args:
        fab: the running fabric (of `work.graph`).
        work: the matrices, seeds and elephants.
        trace: also trace each flow's data and ACK paths (`traced`).
        between_runs: called after every run (e.g. `wait_unplaced`).
        log: where each run's line goes, as "  LABEL PATTERN seed S: X Mbit/s".
        label: the fabric's name in those lines.
    """
    out = PatternRuns()
    for pat, runs in work.matrices.items():
        for seed, flows in zip(work.seeds, runs):
            fab.reseed(seed)
            got = measure(fab, flows, work.elephants)
            out.total_bps.setdefault(pat, []).append(got.total_bps)
            out.flow_bps.setdefault(pat, []).append(got.flow_bps)
            out.rtt_s.setdefault(pat, []).append(got.rtt_s)
            log(f"  {label} {pat} seed {seed}: {got.total_bps / 1e6:.1f} Mbit/s")
            if trace:
                data, acks = traced(fab, flows, got.ports)
                out.paths.setdefault(pat, []).append(data)
                out.ack_paths.setdefault(pat, []).append(acks)
            if between_runs is not None:
                between_runs(fab)
    return out


@dataclass
class Reference:
    """The non-blocking switch's measurements (`measure_nonblocking`).

    Attributes:
        runs_bps: by receivers' fan-in (emu/models/ecmp.py `fan_in`), each run's bit/s.
        flow_bps: by str(fan-in), each run's flows' bit/s.
        alone_bps: one flow alone, each run's bit/s (empty unless asked for).
    """

    runs_bps: dict[tuple[int, ...], list[float]] = field(default_factory=dict)
    flow_bps: dict[str, list[list[float]]] = field(default_factory=dict)
    alone_bps: list[float] = field(default_factory=list)

    def mean_bps(self) -> dict[tuple[int, ...], float]:
        """By fan-in, the mean of its runs: the denominator of every normalised figure."""
        return {key: statistics.mean(runs) for key, runs in self.runs_bps.items()}

    def normalised(
        self, total_bps: dict[str, list[float]], matrices: dict[str, list[Flows]]
    ) -> dict[str, list[float]]:
        """By pattern, each run's bit/s over the mean of the non-blocking runs of its
        matrix's fan-in: the normalisation Hedera reports (throughput / non-blocking)."""
        mean = self.mean_bps()
        return {
            pat: [bps / mean[fan_in(f)] for bps, f in zip(runs, matrices[pat])]
            for pat, runs in total_bps.items()
        }


def measure_nonblocking(
    ctx: Context,
    work: Workload,
    runs: int,
    rate_bps: int,
    lone_flow: bool = False,
    **options,
) -> Reference:
    """Every matrix's fan-in of `work` on one non-blocking switch with its fabric's hosts.

    The switch's hosts are `work.graph`'s, renamed in order, with links at
    `rate_bps` on its time scale. Each fan-in (`fan_in`: all a non-blocking
    switch's throughput depends on) runs `runs` times, the first matrix with
    it standing for all; with `lone_flow`, the first flow of the first matrix
    also runs alone `runs` times: what the ACKs of a flow in the other
    direction cost a host's link (emu/models/flow.py `ack_load_from`).
    `options` go to `ctx.fabric` (the fabric's folder is OUT/nonblocking).
    """
    hosts = fabric_mod.hosts(work.graph)
    ideal_graph = fabric_mod.single_switch(
        hosts=len(hosts), rate_bps=rate_bps, time_scale=work.graph.graph["time_scale"]
    )
    rename = dict(zip(hosts, fabric_mod.hosts(ideal_graph)))
    ref = Reference()
    with ctx.fabric(ideal_graph, "nonblocking", **options) as fab:
        for flows_of_pattern in work.matrices.values():
            for flows in flows_of_pattern:
                key = fan_in(flows)
                while len(ref.runs_bps.setdefault(key, [])) < runs:
                    got = measure(fab, [(rename[s], rename[d]) for s, d in flows], work.elephants)
                    ref.runs_bps[key].append(got.total_bps)
                    ref.flow_bps.setdefault(str(key), []).append(got.flow_bps)
                    ctx.log(f"  non-blocking fan-in {key[-3:]}: {got.total_bps / 1e6:.1f} Mbit/s")
        if lone_flow:
            first = next(iter(work.matrices.values()))[0]
            lone = [(rename[s], rename[d]) for s, d in first[:1]]
            for _ in range(runs):
                ref.alone_bps.append(measure(fab, lone, work.elephants).total_bps)
            mean = statistics.mean(ref.alone_bps)
            ctx.log(f"  non-blocking, one flow alone: {mean / 1e6:.3f} Mbit/s")
    return ref


# ----- the report's pieces ----------------------------------------------------------------


def normalised_table(
    patterns: list[str], modes: list[str], norm: dict[str, dict[str, list[float]]]
) -> tuple[list[str], list[list[str]]]:
    """The columns and rows of the normalised-throughput table.

    A row per pattern: each mode's mean over its runs with (min-max), and
    adaptive / ecmp of the means where both modes ran.

    Args:
        norm: by mode and pattern, each run's throughput over the non-blocking switch's.
    """
    both = "ecmp" in modes and "adaptive" in modes
    means = {m: {pat: statistics.mean(norm[m][pat]) for pat in patterns} for m in modes}
    rows = []
    for pat in patterns:
        row = [pat]
        for m in modes:
            vals = norm[m][pat]
            row.append(f"{means[m][pat]:.2f} ({min(vals):.2f}-{max(vals):.2f})")
        if both:
            row.append(f"{means['adaptive'][pat] / means['ecmp'][pat]:.2f}x")
        rows.append(row)
    cols = ["pattern"] + [f"{m} (min-max)" for m in modes]
    if both:
        cols.append("adaptive / ecmp")
    return cols, rows


def plot_normalised(
    path: Path,
    patterns: list[str],
    modes: list[str],
    norm: dict[str, dict[str, list[float]]],
    expect: dict[str, float],
    title: str,
) -> Path:
    """Bars of each mode's normalised throughput by pattern (min-max whiskers), ECMP's
    expectation per pattern dashed and non-blocking at 1; saved as a PNG at `path`."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(patterns))]
        ys = [statistics.mean(norm[m][pat]) for pat in patterns]
        errs = [
            [y - min(norm[m][pat]) for y, pat in zip(ys, patterns)],
            [max(norm[m][pat]) - y for y, pat in zip(ys, patterns)],
        ]
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=m)
    for j, pat in enumerate(patterns):
        ax.hlines(
            expect[pat],
            j - 0.45,
            j + 0.45,
            colors="k",
            linestyles="dashed",
            label="ECMP flow-level model (all hash draws)" if j == 0 else None,
        )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(patterns)), patterns)
    ax.set_ylabel("throughput / non-blocking")
    ax.set_ylim(0, 1.15)
    ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def matrices_text(matrices: dict[str, list[Flows]]) -> dict[str, list[list[str]]]:
    """Matrices as metrics.json keeps them: each flow "src->dst"."""
    return {pat: [[f"{s}->{d}" for s, d in f] for f in fs] for pat, fs in matrices.items()}


def matrices_from_text(text: dict[str, list[list[str]]]) -> dict[str, list[Flows]]:
    """`matrices_text`'s inverse."""
    return {pat: [[tuple(f.split("->")) for f in fs] for fs in runs] for pat, runs in text.items()}


def paths_text(paths: dict[str, list[list[list[str]]]]) -> dict[str, list[list[str]]]:
    """Traced paths as metrics.json keeps them: each flow's nodes joined by spaces."""
    return {
        pat: [[" ".join(nodes) for nodes in run] for run in runs] for pat, runs in paths.items()
    }


def paths_from_text(text: dict[str, list[list[str]]]) -> dict[str, list[list[list[str]]]]:
    """`paths_text`'s inverse."""
    return {pat: [[p.split() for p in run] for run in runs] for pat, runs in text.items()}
