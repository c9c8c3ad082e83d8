"""The flow-level model: how long-lived flows share links (max-min and proportional fairness).

Owns the rate allocations that scenarios, benches and labs compare measured
throughput with: max-min fairness by progressive filling (TCP's
idealisation; Bertsekas & Gallager, Data Networks, 6.5.2), proportional
fairness solved in the dual (Kelly 1998), weighted by each flow's RTT bias
(Lakshman & Madhow, IEEE/ACM ToN 1997) and with the ACKs' share of the links,
and throughput normalised by a non-blocking switch's, as Hedera (NSDI 2010)
reports it. Pure: paths in, rates out (tests/unit/test_models_flow.py).
"""

from __future__ import annotations

import numpy as np


def max_min_rates(paths: list[list[tuple]], capacity: float = 1.0) -> list[float]:
    """Max-min fair rates of flows over links (progressive filling); all links `capacity`."""
    rates = [0.0] * len(paths)
    active = set(range(len(paths)))
    left: dict[tuple, float] = {}
    users: dict[tuple, set] = {}
    for i, path in enumerate(paths):
        for link in path:
            left.setdefault(link, capacity)
            users.setdefault(link, set()).add(i)
    while active:
        share = min(
            left[link] / len(users[link] & active) for link in users if users[link] & active
        )
        for i in active:
            rates[i] += share
        for link in users:
            left[link] -= share * len(users[link] & active)
        full = {link for link in users if users[link] & active and left[link] <= 1e-9}
        frozen = {i for link in full for i in users[link] & active}
        active -= frozen
    return rates


def proportional_fair_rates(
    paths: list[list[tuple]],
    gap: float = 1e-7,
    max_iter: int = 20000,
    acks: list[list[tuple]] | None = None,
    ack_load: float = 0.0,
    weights: list[float] | None = None,
) -> list[float]:
    """Proportionally fair rates (Kelly 1998: the largest sum of log rates) over unit links.

    A flow at rate x also puts `ack_load` x on each link of its `acks` path
    (its ACKs, which share those links with the data going that way). With
    `weights`, the largest sum of weight x log rate (Kelly's weighted
    proportional fairness; `rtt_weights`).
    Solved in the dual: every link has a price, a flow's rate is its weight /
    (the sum of its links' prices, weighted by what it puts on each), and a
    price grows with its link's load (p <- p x load) until the duality gap,
    which bounds how far the weighted sum of log rates is from the optimum,
    is below `gap`. The rates returned are scaled to fit.
    """
    acks = acks if acks is not None and ack_load else [[] for _ in paths]
    weight = np.ones(len(paths)) if weights is None else np.asarray(weights, dtype=float)
    links = sorted({link for path in paths + acks for link in path})
    index = {link: i for i, link in enumerate(links)}
    routing = np.zeros((len(links), len(paths)))
    for j, (path, back) in enumerate(zip(paths, acks)):
        for link in path:
            routing[index[link], j] += 1.0
        for link in back:
            routing[index[link], j] += ack_load
    price = np.ones(len(links))
    rates = np.zeros(len(paths))
    for _ in range(max_iter):
        path_price = routing.T @ price
        load = routing @ (weight / path_price)
        rates = weight / path_price / max(1.0, float(load.max()))
        dual = float(price.sum() + (weight * (np.log(weight / path_price) - 1.0)).sum())
        if dual - float((weight * np.log(rates)).sum()) < gap:
            break
        price = price * load
    return rates.tolist()


def links_of(nodes: list[str]) -> list[tuple]:
    """The directed links (a, b) of a path given as its nodes."""
    return list(zip(nodes, nodes[1:]))


def normalised_throughput(
    flows: list[tuple[str, str]],
    paths: list[list[str]],
    allocate=max_min_rates,
    ack_paths: list[list[str]] | None = None,
    ack_load: float = 0.0,
    weights: list[float] | None = None,
) -> float:
    """Throughput of `flows` on the node `paths` they took under the rate `allocate`-ion,
    over the same allocation on a non-blocking switch.

    With `ack_paths` (the nodes each flow's ACKs crossed), the allocation is
    proportional fairness with every flow's ACKs on their links at `ack_load`
    (`proportional_fair_rates`), in the fabric and on the switch alike; an
    `ack_load` of 0 leaves the ACKs out but is proportional fairness still.
    `weights` weigh the flows in the fabric (`rtt_weights`); on the switch,
    where every flow crosses the same two links, they are equal.
    """
    ends = [[(s, "sw"), ("sw", d)] for s, d in flows]
    if ack_paths is None:
        return sum(allocate([links_of(n) for n in paths])) / sum(allocate(ends))
    fabric = proportional_fair_rates(
        [links_of(n) for n in paths],
        acks=[links_of(n) for n in ack_paths],
        ack_load=ack_load,
        weights=weights,
    )
    backs = [[(d, "sw"), ("sw", s)] for s, d in flows]
    return sum(fabric) / sum(proportional_fair_rates(ends, acks=backs, ack_load=ack_load))


def ack_load_from(flows: list[tuple[str, str]], alone_bps: float, together_bps: float) -> float:
    """The ACK load that makes the model reproduce the non-blocking switch's own figures.

    `alone_bps` is one flow's goodput with its two hosts otherwise idle;
    `together_bps` is the sum of `flows` measured at once on the same switch,
    where a host that sends and receives carries on its link its data and the
    ACKs of the flow it receives. The load k (ACK cost per unit of data) is
    where the proportionally fair total of `flows` times `alone_bps` meets
    `together_bps` (for a permutation, k = n x alone / together - 1), found by
    bisection: the total falls as k grows. 0 when the flows lost nothing.
    """
    ends = [[(s, "sw"), ("sw", d)] for s, d in flows]
    backs = [[(d, "sw"), ("sw", s)] for s, d in flows]

    def total(k: float) -> float:
        return sum(proportional_fair_rates(ends, acks=backs, ack_load=k)) * alone_bps

    if total(0.0) <= together_bps:
        return 0.0
    low, high = 0.0, 1.0
    while total(high) > together_bps and high < 64:
        low, high = high, high * 2
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if total(mid) > together_bps else (low, mid)
    return (low + high) / 2


# How TCP shares links: max-min fairness is TCP's idealisation; proportional fairness
# (Kelly 1998) is what window-based congestion control converges to with equal RTTs
# (Mo & Walrand 2000: TCP Vegas; Reno sits between, at alpha = 2). RTTs are not
# equal here: at 1 Mbit/s a 1500-byte frame takes 12 ms a hop, so a 2-hop flow's
# round trip is a third of a 6-hop flow's before any queue, and a flow through a
# collision queues longer. TCP's rate falls with its RTT as 1/RTT^a, a between 1
# and 2 (Lakshman & Madhow, IEEE/ACM ToN 1997), which favours the flows on short,
# uncongested paths: the flows that cost the fabric least. The ECMP check holds the
# measurements between max-min and proportional fairness weighted by that bias at
# its strongest, 1/RTT^2 with each flow's own measured RTT (`rtt_weights`).
RTT_BIAS_EXPONENT = 2.0


def rtt_weights(rtts_s: list[float]) -> list[float] | None:
    """Each flow's weight in proportional fairness: 1/RTT^`RTT_BIAS_EXPONENT`, mean 1.

    None when any RTT is unknown (0: iperf3 reports no TCP_INFO), which leaves
    the flows equal.
    """
    if not rtts_s or min(rtts_s) <= 0:
        return None
    raw = [rtt**-RTT_BIAS_EXPONENT for rtt in rtts_s]
    mean = sum(raw) / len(raw)
    return [w / mean for w in raw]
