"""ECMP's collision model: what static hashing over equal-cost paths gives long-lived flows.

Owns the flow-level figures that scenarios/ecmp_vs_adaptive.py holds measured
ECMP to, and the counts its hash test reads:

- `ecmp_expectation`: throughput with every flow on a uniformly random
  shortest path (what a hash does to flows it cannot tell apart), shared
  max-min fairly (TCP's idealisation; Bertsekas & Gallager, Data Networks,
  6.5.2) and normalised by a non-blocking switch's, averaged over draws:
  static ECMP as Al-Fares et al., "Hedera" (NSDI 2010) compare against it,
  about 0.6 of non-blocking on a k=4 fat tree's random and cross-pod stride
  patterns.
- `ecmp_model_on_paths`: the same model on the very paths traced in each run,
  as a band from max-min to proportional fairness (Kelly 1998) weighted by
  TCP's RTT bias (Lakshman & Madhow 1997) with the flows' ACKs on their links
  at the load the non-blocking switch's own runs give.
- `fan_in`: what a non-blocking switch's throughput depends on (the key of
  the normalising measurement).
- `model_band`: measured runs against that band, with 99% intervals
  (emu/models/stats.py `between`).
- `next_hop_choices`, `hop_choices`: how often each equal-cost next hop was
  taken on traced paths (a fair hash takes each equally often; the chi-square
  test is emu/models/stats.py `chi_square_uniform`).

The rate allocations themselves are emu/models/flow.py's. Pure: graphs, flows
and paths in, numbers out; no fabric, no clock (tests/unit/test_models_ecmp.py,
test_ecmp_model_recorded.py, test_ecmp_model_rtt.py).
"""

from __future__ import annotations

import random
import statistics
from typing import Callable

import networkx as nx

from emu import fabric as fabric_mod
from emu.models.flow import ack_load_from, normalised_throughput, rtt_weights
from emu.models.stats import Band, between

Flows = list[tuple[str, str]]


def fan_in(flows: Flows) -> tuple[int, ...]:
    """Receivers' in-degrees, sorted: all a non-blocking switch's throughput depends on.

    Examples:
        >>> fan_in([("h1", "h3"), ("h2", "h3"), ("h3", "h1")])
        (1, 2)
    """
    counts: dict[str, int] = {}
    for _s, d in flows:
        counts[d] = counts.get(d, 0) + 1
    return tuple(sorted(counts.values()))


def ecmp_expectation(
    graph: nx.Graph, draw: Callable[[], Flows], samples: int, rng: random.Random
) -> float:
    """Mean over `samples` of max-min throughput with uniformly random shortest paths,
    normalised to the non-blocking throughput of the same matrix.

    Args:
        graph: the fabric (emu/fabric), every link at one rate.
        draw: gives a traffic matrix, (source, destination) per flow; called once
            per sample, so a random pattern is averaged over its matrices too.
        samples: how many matrices and path draws to average.
        rng: draws the paths.
    """
    g = nx.Graph(fabric_mod.network(graph))
    cache: dict[tuple, list] = {}
    total = 0.0
    for _ in range(samples):
        flows = draw()
        paths = []
        for s, d in flows:
            if (s, d) not in cache:
                cache[(s, d)] = list(nx.all_shortest_paths(g, s, d))
            paths.append(rng.choice(cache[(s, d)]))
        total += normalised_throughput(flows, paths)
    return total / samples


def ecmp_model_on_paths(
    patterns: list[str],
    matrices: dict[str, list[Flows]],
    paths: dict[str, list[list[list[str]]]],
    ack_paths: dict[str, list[list[list[str]]]],
    ideal: dict[tuple, list[float]],
    alone: list[float],
    rtts: dict[str, list[list[float]]] | None = None,
) -> tuple[dict[str, dict[str, list[float]]], float]:
    """The flow-level model of every ECMP run's traced paths, by allocation, and the ACK load.

    max-min is TCP's idealisation among the data flows alone. Proportional
    fairness carries the flows' ACKs on the links they crossed, at the load
    that the non-blocking switch's own measurements give (`ack_load_from`,
    averaged over the receiver fan-ins measured): on the non-blocking switch
    every host receives while it sends, so each flow there lost what its
    host's link gave to ACKs, while in the fabric a host whose incoming flow
    collided sends fewer ACKs and its own flow gains. Without the ACKs the
    model left that out, and 165 stored ECMP runs sat +0.009 (standard error
    0.002) above it (README). With `rtts` (each run's flows' measured RTTs),
    the flows are weighted by TCP's RTT bias (`rtt_weights`).

    Args:
        patterns: the patterns run, in order.
        matrices: by pattern, each run's flows.
        paths, ack_paths: by pattern, each run's nodes each flow's data (ACKs) crossed.
        ideal: by `fan_in`, the non-blocking switch's measured bit/s.
        alone: one flow's bit/s alone on that switch (the ACK load's other figure).
        rtts: by pattern, each run's flows' mean RTT in seconds (None: unweighted).

    Returns:
        ({"max-min": {pattern: [per run]}, "proportional": {...}}, the ACK load k);
        ({}, 0.0) when no run was traced.
    """
    if not paths:
        return {}, 0.0
    firsts = {}
    for pat in patterns:
        for flows in matrices[pat]:
            firsts.setdefault(fan_in(flows), flows)
    loads = [
        ack_load_from(flows, statistics.mean(alone), statistics.mean(ideal[key]))
        for key, flows in firsts.items()
    ]
    k = statistics.mean(loads)
    on_paths: dict[str, dict[str, list[float]]] = {"max-min": {}, "proportional": {}}
    for pat in paths:
        seen = (rtts or {}).get(pat) or [[] for _ in paths[pat]]
        for flows, taken, back, rtt in zip(matrices[pat], paths[pat], ack_paths[pat], seen):
            on_paths["max-min"].setdefault(pat, []).append(normalised_throughput(flows, taken))
            on_paths["proportional"].setdefault(pat, []).append(
                normalised_throughput(
                    flows, taken, ack_paths=back, ack_load=k, weights=rtt_weights(rtt)
                )
            )
    return on_paths, k


def next_hop_choices(graph: nx.Graph, paths: list[list[str]]) -> dict[int, list[int]]:
    """How often each equal-cost next hop was taken: {number of choices: counts by rank}.

    At every hop where a switch had m > 1 neighbours one hop closer to the
    destination, the rank (by name) of the one the path took is counted.
    """
    dist: dict[str, dict] = {}
    counts: dict[int, list[int]] = {}
    for nodes in paths:
        dst = nodes[-1]
        if dst not in dist:
            dist[dst] = nx.single_source_shortest_path_length(fabric_mod.network(graph), dst)
        for u, v in zip(nodes[1:-1], nodes[2:]):
            closer = sorted(n for n in graph[u] if dist[dst].get(n) == dist[dst][u] - 1)
            if len(closer) > 1 and v in closer:
                counts.setdefault(len(closer), [0] * len(closer))[closer.index(v)] += 1
    return counts


def hop_choices(graph: nx.Graph, paths: dict[str, list[list[list[str]]]]) -> dict[int, list[int]]:
    """How often ECMP took each next hop, over every traced run (`next_hop_choices`).

    Args:
        graph: the fabric the paths were traced on.
        paths: by pattern, each run's paths (nodes per flow).
    """
    choices: dict[int, list[int]] = {}
    for runs in paths.values():
        for taken in runs:
            for m, counts in next_hop_choices(graph, taken).items():
                choices[m] = [a + b for a, b in zip(choices.get(m, [0] * m), counts)]
    return choices


def model_band(
    patterns: list[str],
    measured: dict[str, list[float]],
    on_paths: dict[str, dict[str, list[float]]],
    matrices: dict[str, list[Flows]],
    reference: dict[tuple, list[float]],
) -> Band | None:
    """Measured ECMP runs against the band `ecmp_model_on_paths` gives their paths.

    TCP's allocation lies between max-min (its idealisation) and proportional
    fairness weighted by TCP's RTT bias with the flows' ACKs; two one-sided
    t-tests at 99% over every run (emu/models/stats.py `between`) ask whether
    the measurements sit below the first or above the second, with the error
    of the non-blocking reference that divided each run in the interval.

    Args:
        patterns: the patterns, in the order their runs are taken.
        measured: by pattern, each run's throughput over the non-blocking switch's.
        on_paths: `ecmp_model_on_paths`'s figures of the same runs.
        matrices: by pattern, each run's flows (their `fan_in` names its reference).
        reference: by `fan_in`, the non-blocking switch's measured bit/s.

    Returns:
        The `Band`, or None with fewer than 2 runs.
    """

    def flat(by_pattern: dict[str, list[float]]) -> list[float]:
        return [x for pat in patterns for x in by_pattern[pat]]

    keys = [fan_in(f) for pat in patterns for f in matrices[pat]]
    return between(
        flat(measured), flat(on_paths["max-min"]), flat(on_paths["proportional"]), keys, reference
    )


# ----- collectives: every flow paced by the slowest ---------------------------------


def collision_share(paths: list[list[str]], weights: list[float] | None = None) -> float:
    """A collective's throughput over a non-blocking switch's when its flows take `paths`.

    A collective finishes when its most loaded link has carried its bytes: a
    ring all-reduce moves the same bytes on every hop and each step waits for
    the slowest (Patarasuk & Yuan, JPDC 2009), and an all-to-all is done
    when its busiest link is. On a non-blocking switch the busiest links are
    the hosts' own; in a fabric a link that m flows hash onto carries m
    flows' bytes. So the share is the busiest host link's load over the
    busiest link's, each direction a link of its own: 1/m for a ring whose
    worst link carries m of its hops.

    Args:
        paths: the nodes each flow crosses, host to host.
        weights: each flow's bytes (None: all equal).

    Examples:
        >>> collision_share([["h1", "e1", "a1", "e2", "h3"], ["h2", "e1", "a1", "e2", "h4"]])
        0.5
        >>> collision_share([["h1", "e1", "a1", "e2", "h3"], ["h2", "e1", "a2", "e2", "h4"]])
        1.0
    """
    if not paths:
        raise ValueError("collision_share: no flows")
    weights = weights or [1.0] * len(paths)
    load: dict[tuple[str, str], float] = {}
    for nodes, w in zip(paths, weights):
        for link in zip(nodes, nodes[1:]):
            load[link] = load.get(link, 0.0) + w
    ends = {link for nodes in paths for link in (tuple(nodes[:2]), tuple(nodes[-2:]))}
    return max(load[link] for link in ends) / max(load.values())


def collision_draws(
    graph: nx.Graph,
    flows: Flows,
    samples: int,
    rng: random.Random,
    weights: list[float] | None = None,
) -> list[float]:
    """`collision_share` of `flows` over `samples` draws of uniformly random shortest paths:
    what a hash that cannot tell the flows apart gives, draw by draw (its distribution,
    not only its mean, is the model's band)."""
    g = nx.Graph(fabric_mod.network(graph))
    choices = {pair: list(nx.all_shortest_paths(g, *pair)) for pair in dict.fromkeys(flows)}
    return [
        collision_share([rng.choice(choices[pair]) for pair in flows], weights)
        for _ in range(samples)
    ]
