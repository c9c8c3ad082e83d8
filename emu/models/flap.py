"""The flow-level model of a flapping link: the goodput floor while routing damps it.

Owns the floor that scenarios/link_flap.py holds measured goodput to: max-min
fair TCP (emu/models/flow.py; Bertsekas & Gallager, Data Networks, 6.5.2) over
every ECMP hash outcome with the damped link out of rotation (damping as RFC
2439 damps routes), less the seconds a flow may still sit in TCP's
retransmission backoff (RFC 6298, 5.5: the RTO doubles on every timeout in a
row; Linux's TCP_RTO_MIN, include/net/tcp.h). Pure: a graph, flows and
numbers in, ratios out (tests/unit/test_link_flap_model.py).
"""

from __future__ import annotations

import itertools
import random

import networkx as nx

from emu import fabric as fabric_mod
from emu.models.flow import max_min_rates

# Linux's minimum retransmission timeout (TCP_RTO_MIN, include/net/tcp.h). Linux sets
# RTO = srtt + max(4 rttvar, TCP_RTO_MIN) and doubles it on every timeout in a row.
TCP_RTO_MIN_S = 0.2
# `goodput_floor` enumerates up to MAX_ENUMERATED ECMP hash outcomes; above, it samples
# SAMPLED_OUTCOMES of them (then its worst is the worst seen, not a bound).
MAX_ENUMERATED = 20_000
SAMPLED_OUTCOMES = 2_000


def goodput_floor(
    graph, flows: list[tuple[str, str]], link: tuple[str, str], seed: int = 0
) -> dict:
    """Flow-level model of the flapping: goodput with `link` damped over goodput before.

    Every flow takes one of its shortest paths (an ECMP hash outcome) and TCP
    shares the links max-min fairly (all links run at one rate; Bertsekas &
    Gallager, Data Networks, 6.5.2). While `link` is damped, a flow whose path
    crossed it takes one of the shortest paths without it; every other flow
    keeps its path: static ECMP hashes the same 5-tuple over the same buckets,
    and the adaptive controller keeps its placements. The ratio is taken for
    every hash outcome (enumerated, or SAMPLED_OUTCOMES drawn with `seed`
    above MAX_ENUMERATED).

    Args:
        graph: the fabric's graph (emu/fabric), every link at one rate.
        flows: (source host, destination host) of every long-lived TCP flow.
        link: the damped link, (switch, switch).
        seed: the seed of the sampled outcomes.

    Returns:
        {"worst_ratio", "mean_ratio", "outcomes", "sampled"}. At link-flap's
        defaults (4 leaves, 2 spines, 2 hosts each, every host to the host two
        leaves on) the worst outcome is leaf1's and leaf3's flows on separate
        spines before and the other leaves' flows sharing: (10 + 10 + 10 + 10)
        over (20 + 20 + 10 + 10) link rates = 2/3; the mean over outcomes is 0.84.

    Examples:
        >>> g = fabric_mod.leaf_spine(leaves=4, spines=2, hosts_per_leaf=2)
        >>> flows = [(f"h{i}", f"h{(i + 3) % 8 + 1}") for i in range(1, 9)]
        >>> round(goodput_floor(g, flows, ("leaf1", "spine1"))["worst_ratio"], 3)
        0.667
    """
    full = nx.Graph(fabric_mod.network(graph))
    cut = nx.Graph(full)
    cut.remove_edge(*link)

    def hops(nodes) -> list[tuple]:
        return list(zip(nodes, nodes[1:]))

    before_choices = [[hops(n) for n in nx.all_shortest_paths(full, s, d)] for s, d in flows]
    during_choices = [[hops(n) for n in nx.all_shortest_paths(cut, s, d)] for s, d in flows]
    size = 1
    for b, d in zip(before_choices, during_choices):
        size *= len(b) * len(d)  # at least as many as the outcomes below
    sampled = size > MAX_ENUMERATED
    outcomes = _outcomes(before_choices, during_choices, {link, link[::-1]}, sampled, seed)
    ratios = [
        sum(max_min_rates(during)) / sum(max_min_rates(before)) for before, during in outcomes
    ]
    return {
        "worst_ratio": min(ratios),
        "mean_ratio": sum(ratios) / len(ratios),
        "outcomes": len(ratios),
        "sampled": sampled,
    }


def _outcomes(before_choices: list, during_choices: list, out: set, sampled: bool, seed: int):
    """(paths before, paths while damped) per hash outcome: every one, or SAMPLED_OUTCOMES."""
    if sampled:
        rng = random.Random(seed)
        for _ in range(SAMPLED_OUTCOMES):
            before = [rng.choice(c) for c in before_choices]
            yield (
                before,
                [
                    rng.choice(during_choices[i]) if out & set(path) else path
                    for i, path in enumerate(before)
                ],
            )
        return
    for before in itertools.product(*before_choices):
        crossed = [i for i, path in enumerate(before) if out & set(path)]
        for moved in itertools.product(*(during_choices[i] for i in crossed)):
            during = list(before)
            for i, path in zip(crossed, moved):
                during[i] = path
            yield before, during


def during_floor(
    worst_ratio: float,
    flap_s: float,
    period_s: float,
    damped_after_s: float | None,
    lossy_queue_bytes: float,
    rate_bps: float,
) -> dict:
    """The floor on goodput during the flapping, as a share of goodput before it.

    The measured window starts 1 s after the first down. A flow that lost a
    segment at each down before damping may still be backing off then: its
    RTO (at most TCP_RTO_MIN plus the longest lossy queue's delay, since
    Linux's RTO is srtt + TCP_RTO_MIN at least) doubled once per down (RFC
    6298, 5.5). Those seconds count as lost for every flow (a bound, not an
    estimate).

    Args:
        worst_ratio: `goodput_floor`'s worst ratio.
        flap_s: how long the link flaps; the window is its last flap_s - 1 seconds.
        period_s: the flap period (a down every period_s from 0).
        damped_after_s: when routing damped the link, from the first down; None if never.
        lossy_queue_bytes: the longest lossy egress queue a segment may wait behind.
        rate_bps: the links' rate.

    Returns:
        {"ratio", "window_s", "downs_before_damping", "rto_s", "backoff_in_window_s"};
        ratio 0 when the link was never damped.
    """
    window_s = flap_s - 1.0
    damped = damped_after_s if damped_after_s is not None else flap_s
    downs = int(damped / period_s + 1e-9) + 1  # downs at 0, period, 2 period, ...
    queue_s = lossy_queue_bytes * 8 / rate_bps
    rto_s = TCP_RTO_MIN_S + queue_s
    backoff_s = max(0.0, min(window_s, damped + rto_s * 2 ** (downs - 1) - 1.0))
    return {
        "ratio": worst_ratio * (1 - backoff_s / window_s),
        "window_s": window_s,
        "downs_before_damping": downs,
        "rto_s": round(rto_s, 3),
        "backoff_in_window_s": round(backoff_s, 3),
    }
