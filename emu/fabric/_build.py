"""What the builders share: argument checks, the time scale, and adding nodes and numbered links.

Private to emu/fabric (the builders in clos.py and gpu.py, and
emu/topofile.py's rules that mirror them); `time_scale_for` is public.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import networkx as nx

from emu.fabric.contract import (
    MAX_INTF_NAME,
    PREFIXLEN,
    SUBNET,
    SWITCH_ROLES,
    FabricSpecError,
)

# ---------------------------------------------------------------- checks


def _check_int(param: str, value: Any, minimum: int, maximum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FabricSpecError(f"{param}={value!r}: must be an integer")
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise FabricSpecError(f"{param}={value!r}: must be {allowed}")
    return value


def _check_rate(param: str, value: Any) -> int:
    """A link rate in bit/s: a positive integer (an integral float like 1e9 is accepted)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FabricSpecError(f"{param}={value!r}: must be a positive integer (bit/s)")
    if value <= 0:
        raise FabricSpecError(f"{param}={value!r}: must be > 0 (bit/s)")
    return value


def _check_nonneg(param: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise FabricSpecError(f"{param}={value!r}: must be a number >= 0")
    return float(value)


def _check_positive(param: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise FabricSpecError(f"{param}={value!r}: must be a number > 0")
    return float(value)


def time_scale_for(link_rate_bps: float, modelled_rate_bps: float) -> float:
    """The time scale at which a link of `link_rate_bps` stands for `modelled_rate_bps`.

    Examples:
        >>> time_scale_for(20e6, 25e9)
        1250.0
    """
    return _check_positive("modelled_rate_bps", modelled_rate_bps) / _check_positive(
        "link_rate_bps", link_rate_bps
    )


def _resolve_time_scale(
    time_scale: Optional[float], modelled_rate_bps: Optional[float], host_rate_bps: float
) -> float:
    if modelled_rate_bps is None:
        return 1.0 if time_scale is None else _check_positive("time_scale", time_scale)
    derived = time_scale_for(host_rate_bps, modelled_rate_bps)
    if time_scale is not None and abs(_check_positive("time_scale", time_scale) - derived) > (
        1e-9 * derived
    ):
        raise FabricSpecError(
            f"time_scale={time_scale!r} conflicts with modelled_rate_bps={modelled_rate_bps!r} "
            f"over host links of {host_rate_bps:g} bit/s (that is {derived:g}); give one of them"
        )
    return derived


def _check_name(value: Any, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or not value:
        raise FabricSpecError(f"name={value!r}: must be a non-empty string")
    return value


def _check_intf_names(longest: List[str], blame: str) -> None:
    """Reject a fabric whose longest interface names would not fit in IFNAMSIZ.

    `longest` holds the longest name of each kind of node, computed before any
    node is built; `blame` names the parameters (with values) that make it long.
    """
    for intf in longest:
        if len(intf) > MAX_INTF_NAME:
            raise FabricSpecError(
                f"{blame}: interface name {intf!r} has {len(intf)} characters, "
                f"Linux allows at most {MAX_INTF_NAME}"
            )


# ---------------------------------------------------------------- building


def _new_graph(kind: str, name: str, params: Dict[str, Any], time_scale: float) -> nx.Graph:
    return nx.Graph(
        name=name, kind=kind, params=params, subnet=SUBNET, time_scale=float(time_scale)
    )


def _add_switch(G: nx.Graph, name: str, role: str, n: int, **extra: Any) -> None:
    tier = SWITCH_ROLES[role]
    G.add_node(name, kind="switch", role=role, tier=tier, dpid=((tier + 1) << 16) | n, **extra)


def _add_host(G: nx.Graph, name: str, index: int, ip: str, leaf: str, **extra: Any) -> None:
    """Add host number `index` (1-based); its MAC is 02:00:00 + the 24-bit index."""
    mac = "02:00:00:%02x:%02x:%02x" % ((index >> 16) & 0xFF, (index >> 8) & 0xFF, index & 0xFF)
    G.add_node(
        name, kind="host", role="host", ip=ip, prefixlen=PREFIXLEN, mac=mac, leaf=leaf, **extra
    )


def _number_ports(G: nx.Graph, delay_s: float, links: List[Tuple[str, str, int, str]]) -> None:
    """Add `links` (lower, upper, rate_bps, tier), numbering every node's ports.

    Links are given lower tier first; each node's downward-facing ports come
    first, then its upward-facing ones, each in the order the links are listed
    (which the builders make the order of the peers' numbers).
    """
    down: Dict[str, List[str]] = {}
    up: Dict[str, List[str]] = {}
    for lower, upper, _rate, _tier in links:
        up.setdefault(lower, []).append(upper)
        down.setdefault(upper, []).append(lower)
    port: Dict[Tuple[str, str], int] = {}
    for node in G.nodes:
        base = 0 if G.nodes[node]["kind"] == "host" else 1
        for i, peer in enumerate(down.get(node, []) + up.get(node, [])):
            port[node, peer] = base + i
    for lower, upper, rate_bps, tier in links:
        pl, pu = port[lower, upper], port[upper, lower]
        G.add_edge(
            lower,
            upper,
            rate_bps=rate_bps,
            delay_s=delay_s,
            tier=tier,
            ports={lower: pl, upper: pu},
            intfs={lower: f"{lower}-eth{pl}", upper: f"{upper}-eth{pu}"},
        )
