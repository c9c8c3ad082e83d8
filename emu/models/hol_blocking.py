"""Head-of-line blocking under link-level flow control: what an incast leaves a victim flow.

Owns the model that scenarios/credit_vs_pfc.py holds its victim flow to, and
that any scenario, lab or bench with an incast beside other traffic of its
class can use. Link-level flow control stops a whole class on a link, not a
flow: PFC PAUSEs a (port, priority) when its ingress counter passes XOFF
(IEEE 802.1Qbb), InfiniBand's credit loop stops a (port, VL) by not returning
credit for its buffer (InfiniBand Architecture Specification, vol. 1, 7.9).
So the congestion at an incast's receiver spreads up the links that feed it
(tree saturation: Pfister & Norton, "Hot Spot Contention and Combining in
Multistage Interconnection Networks", IEEE Trans. Computers C-34(10), 1985),
and a flow that shares one of those links and its class with the incast, but
no congested link, waits behind the incast's frames: the victim flow of Zhu
et al., "Congestion Control for Large-Scale RDMA Deployments" (DCQCN,
SIGCOMM 2015, section 2). Within one class PFC and credits block alike; a
class of its own (a second lossless priority, a second VL: its own buffer at
every ingress, strict priority at every egress) leaves the victim its max-min
share.

The model (`hol_shares`): the bottleneck's switch serves the ports that feed
its congested egress in turn, so each busy port gets 1/n of the line rate;
the frames on a held port's link arrive in the proportion the switches
before it sent them, one flow per upstream port served in turn, so every
flow through that port (the victim's included) moves at the rate of each of
the incast's flows there. Pure: a graph and host names in, shares out
(tests/unit/test_models_hol_blocking.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import networkx as nx

from emu import fabric as fabric_mod
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.models.dcqcn import DATA_FRAME_BYTES


class ModelMisfit(ValueError):
    """The fabric breaks one of the model's premises (the error says which)."""


def payload_share(mtu_payload_bytes: int = DEFAULT_MTU_PAYLOAD) -> float:
    """The share of a link full of RoCEv2 data frames that is payload (goodput).

    Examples:
        >>> round(payload_share(), 4)  # 1024 of 1082 bytes a frame
        0.9464
    """
    return mtu_payload_bytes / (DATA_FRAME_BYTES - DEFAULT_MTU_PAYLOAD + mtu_payload_bytes)


def line_goodput_bps(rate_bps: float, mtu_payload_bytes: int = DEFAULT_MTU_PAYLOAD) -> float:
    """A lone flow's goodput on a link of `rate_bps` full of data frames: its max-min share.

    Examples:
        >>> round(line_goodput_bps(10e6) / 1e6, 2)
        9.46
    """
    return rate_bps * payload_share(mtu_payload_bytes)


@dataclass(frozen=True)
class HolShares:
    """Each flow's share of the bottleneck's line rate under head-of-line blocking."""

    incast: dict[str, float]  # sender -> its share
    victim: float  # 1.0: nothing blocks it (its max-min share on an uncongested path)
    ports: tuple[str, ...]  # the nodes whose links feed the bottleneck, one port each


def _only_path(net: nx.Graph, src: str, dst: str) -> list[str]:
    """The one shortest path from `src` to `dst`, or ModelMisfit if ECMP could split it."""
    paths = list(nx.all_shortest_paths(net, src, dst))
    if len(paths) > 1:
        raise ModelMisfit(
            f"{src} -> {dst} has {len(paths)} shortest paths: the model needs one path a flow"
        )
    return paths[0]


def hol_shares(
    graph: nx.Graph,
    senders: Sequence[str],
    receiver: str,
    victim: tuple[str, str],
    same_class: bool = True,
) -> HolShares:
    """The incast's and the victim's shares of the receiver's line rate, no congestion control.

    Args:
        graph: the fabric (emu/fabric), each flow on one shortest path.
        senders: the incast's senders, each with one flow to `receiver`.
        receiver: the incast's receiver; its link is the bottleneck.
        victim: (source, destination) of the victim flow; its own path is uncongested.
        same_class: the victim shares the incast's class (priority, VL); on a class of
            its own nothing blocks it.

    Returns:
        HolShares: a sender through a port that k of the incast's flows share gets
        1/(n k) of the line rate, n the ports feeding the bottleneck; the victim, if its
        path enters the bottleneck's switch through one of those ports, what each of
        the incast's flows there gets; else 1.

    Raises:
        ModelMisfit: a flow has more than one shortest path.

    Examples:
        >>> g = fabric_mod.leaf_spine(leaves=2, spines=1, hosts_per_leaf=4)
        >>> m = hol_shares(g, ["h1", "h2", "h5", "h6"], "h8", ("h3", "h7"))
        >>> m.ports, round(m.victim, 4), round(m.incast["h1"], 4), round(m.incast["h5"], 4)
        (('h5', 'h6', 'spine1'), 0.1667, 0.1667, 0.3333)
    """
    net = fabric_mod.network(graph)
    bottleneck_switch = fabric_mod.host_port(graph, receiver).switch
    # The node before the bottleneck's switch on each sender's path: its port feeds the queue.
    feeder = {s: _only_path(net, s, receiver)[-3] for s in senders}
    flows_through = Counter(feeder.values())
    n = len(flows_through)
    incast = {s: 1 / (n * flows_through[feeder[s]]) for s in senders}
    victim_share = 1.0
    path = _only_path(net, *victim)
    for before, node in zip(path, path[1:]):
        if same_class and node == bottleneck_switch and before in flows_through:
            victim_share = 1 / (n * flows_through[before])
    return HolShares(incast, victim_share, tuple(sorted(flows_through)))
