"""Topology builders: the fabric as a networkx graph, and its Mininet Topo.

Owns the topology: which nodes exist, how they are wired, on which port and
interface, at which rate, with which dpid, IP and MAC. The graph returned by a
builder is the single source of truth; `emu.net` (Mininet), the switch
processes, the scenarios and the controller's convergence check all read it.
Does not own anything that runs: no processes, no sockets, no Mininet objects
except the `Topo` that `to_mininet` hands back (Mininet is imported there only,
so the rest of this module imports without it).

Builders are plain functions in the style of `networkx.generators.classic`:
`leaf_spine`, `fat_tree`, `single_switch`. Each validates its arguments,
raising `FabricSpecError` naming the parameter, its value and what is allowed.

The attribute contract (checked by `validate`):

- ``G.graph``: ``name`` (str), ``kind`` ("leaf_spine" | "fat_tree" |
  "single_switch" | "custom", the last for a hand-made topology file),
  ``params`` (the resolved builder arguments),
  ``subnet`` ("10.0.0.0/8"), ``time_scale`` (float).
- switch nodes: ``kind="switch"``, ``role`` ("leaf", "spine", "edge", "agg",
  "core", "switch"), ``dpid`` (unique nonzero int), ``tier`` (0 leaf/edge/switch,
  1 spine/agg, 2 core); fat-tree edge and agg switches also carry ``pod``.
- host nodes: ``kind="host"``, ``role="host"``, ``ip`` (dotted str),
  ``prefixlen`` (8), ``mac`` ("02:00:00:xx:xx:xx"), ``leaf`` (the switch it
  attaches to); fat-tree hosts also carry ``pod``.
- edges: ``rate_bps`` (int), ``delay_s`` (float), ``tier`` ("host" |
  "leaf-spine" | "edge-agg" | "agg-core" | "fabric", the last between switch
  roles no builder joins), ``ports`` ({node: port_no}),
  ``intfs`` ({node: interface name}).

The time scale: a fabric's links run at emulated rates (tens of Mbit/s) and
stand for hardware that is ``time_scale`` times faster, e.g. 20 Mbit/s for
25 Gbit/s at 1250. Every builder takes ``time_scale`` or, the usual way,
``modelled_rate_bps`` (the host NIC speed the host links stand for; the
scale is derived from it). It is the fabric's one clock ratio: `emu.net`
hands it to the switches' PFC watchdog, the NIC models' DCQCN timers, RTO
and RNR timer (emu/traffic/rdma.py); ecmp-vs-adaptive derives its flowlet
gap from the same modelled rate. PFC quanta need no scaling: a quantum is
512 bit times of the link it is sent on, which the emulated link stretches
by exactly the time scale.
Default 1.0: emulated time is modelled time.

Port numbering: a host has one interface, ``<host>-eth0``, port 0. A switch
numbers its ports from 1, downward-facing ports first, then upward-facing
ones, each group in the order of the peers' numbers: a leaf (or fat-tree edge)
has its hosts on 1..h and its spines (aggs) on h+1..; a spine has leaf n on
port n; an agg has its pod's edges on 1..k/2 and its cores on k/2+1..k; a core
has pod p's agg on port p+1. Interface names are ``<switch>-eth<port>``.

dpids are ``(tier + 1) << 16 | n`` for the n-th switch of its role (leaf3 is
0x10003, spine2 is 0x20002, core1 is 0x30001): unique, nonzero and readable
in ``ovs-ofctl`` output, and never derived from the name (Mininet would give
leaf1 and spine1 the same dpid).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

import networkx as nx

if TYPE_CHECKING:  # pragma: no cover
    from mininet.topo import Topo

__all__ = [
    "DEFAULT_RATE_BPS",
    "FabricSpecError",
    "expected_counts",
    "fat_tree",
    "hosts",
    "leaf_spine",
    "port_map",
    "single_switch",
    "switch_links",
    "switches",
    "to_mininet",
    "validate",
]

# Placeholder link rate: slow enough for a Python switch on a laptop to pace
# exactly. The benchmark (bench/) measures what the switch sustains and fixes
# this value; scenarios that care pass their own rate.
DEFAULT_RATE_BPS = 20_000_000

SUBNET = "10.0.0.0/8"
PREFIXLEN = 8
# Linux IFNAMSIZ is 16 including the terminating NUL.
MAX_INTF_NAME = 15

# "custom": a fabric read from a topology file that no builder made (emu/topofile.py).
KINDS = ("leaf_spine", "fat_tree", "single_switch", "custom")
SWITCH_ROLES = {"leaf": 0, "spine": 1, "edge": 0, "agg": 1, "core": 2, "switch": 0}
# "fabric": a link between switch roles that no builder joins (a hand-made file's).
LINK_TIERS = ("host", "leaf-spine", "edge-agg", "agg-core", "fabric")
_MAC_RE = re.compile(r"^02:00:00(:[0-9a-f]{2}){3}$")


class FabricSpecError(ValueError):
    """A builder argument or a graph that breaks the fabric contract.

    A fabric that cannot be brought up or driven is another error,
    `emu.net.FabricError` (a RuntimeError).
    """


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


# ---------------------------------------------------------------- builders


def leaf_spine(
    leaves: int = 4,
    spines: int = 2,
    hosts_per_leaf: int = 2,
    host_rate_bps: int = DEFAULT_RATE_BPS,
    fabric_rate_bps: Optional[int] = None,
    oversubscription: Optional[float] = None,
    uplinks_per_spine: int = 1,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
) -> nx.Graph:
    """Return a two-tier leaf/spine (folded Clos) fabric.

    Every leaf connects to every spine; hosts hang off leaves. Host n (0-based)
    of leaf l is ``h<(l-1)*hosts_per_leaf+n+1>`` with IP ``10.0.<l>.<n+1>``.

    The oversubscription ratio of a leaf is downlink over uplink capacity:
    ``hosts_per_leaf * host_rate_bps / (spines * uplinks_per_spine *
    fabric_rate_bps)``. Give `fabric_rate_bps` or `oversubscription` (the other
    is derived, rounding the rate to whole bit/s) or both if they agree; with
    neither, the fabric runs at `host_rate_bps`.

    Args:
        leaves: number of leaf switches, 1..255 (the third octet of host IPs).
        spines: number of spine switches, >= 1.
        hosts_per_leaf: hosts per leaf, 1..254.
        host_rate_bps: rate of host-leaf links in bit/s.
        fabric_rate_bps: rate of each leaf-spine link in bit/s.
        oversubscription: leaf downlink/uplink capacity ratio, > 0.
        uplinks_per_spine: parallel links between a leaf and a spine; only 1
            is supported (parallel links would need an nx.MultiGraph, and the
            single-link graph is the contract everything else reads).
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the host NIC speed the host links stand for;
            sets ``time_scale`` to it over the host link rate.
        name: the graph's name; defaults to ``leaf_spine_<L>l_<S>s_<H>h``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract;
        ``G.graph["params"]`` holds the resolved arguments, including both
        ``fabric_rate_bps`` and the resulting ``oversubscription``.

    Raises:
        FabricSpecError: a parameter is out of range, the two rates conflict, or
            an interface name would exceed 15 characters.

    Examples:
        >>> G = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_rate_bps=10_000_000,
        ...                oversubscription=2.0)
        >>> len(switches(G)), len(hosts(G)), len(switch_links(G))
        (4, 4, 4)
        >>> G.graph["params"]["fabric_rate_bps"]
        5000000
        >>> G.nodes["h3"]["ip"], G.nodes["h3"]["leaf"], hex(G.nodes["spine2"]["dpid"])
        ('10.0.2.1', 'leaf2', '0x20002')
        >>> port_map(G, "leaf1")
        ... # doctest: +NORMALIZE_WHITESPACE
        {1: ('leaf1-eth1', 'h1', 0, 10000000), 2: ('leaf1-eth2', 'h2', 0, 10000000),
         3: ('leaf1-eth3', 'spine1', 1, 5000000), 4: ('leaf1-eth4', 'spine2', 1, 5000000)}
    """
    leaves = _check_int("leaves", leaves, 1, 255)
    spines = _check_int("spines", spines, 1)
    hosts_per_leaf = _check_int("hosts_per_leaf", hosts_per_leaf, 1, 254)
    host_rate_bps = _check_rate("host_rate_bps", host_rate_bps)
    uplinks_per_spine = _check_int("uplinks_per_spine", uplinks_per_spine, 1)
    if uplinks_per_spine != 1:
        raise FabricSpecError(
            f"uplinks_per_spine={uplinks_per_spine!r}: only 1 is supported "
            "(parallel leaf-spine links would need a MultiGraph)"
        )
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, host_rate_bps)
    down_bps = hosts_per_leaf * host_rate_bps
    up_links = spines * uplinks_per_spine
    if fabric_rate_bps is not None:
        fabric_rate_bps = _check_rate("fabric_rate_bps", fabric_rate_bps)
    if oversubscription is not None:
        oversubscription = _check_positive("oversubscription", oversubscription)
        derived = max(1, round(down_bps / (up_links * oversubscription)))
        if fabric_rate_bps is None:
            fabric_rate_bps = derived
        elif abs(fabric_rate_bps - derived) > max(1, 1e-9 * derived):
            actual = down_bps / (up_links * fabric_rate_bps)
            raise FabricSpecError(
                f"oversubscription={oversubscription!r} conflicts with "
                f"fabric_rate_bps={fabric_rate_bps!r}: those rates give {actual:g}; "
                "give one of them, or both agreeing"
            )
    if fabric_rate_bps is None:
        fabric_rate_bps = host_rate_bps
    ratio = down_bps / (up_links * fabric_rate_bps)
    _check_intf_names(
        [
            f"h{leaves * hosts_per_leaf}-eth0",
            f"leaf{leaves}-eth{hosts_per_leaf + up_links}",
            f"spine{spines}-eth{leaves}",
        ],
        f"spines={spines!r}",
    )
    params = dict(
        leaves=leaves,
        spines=spines,
        hosts_per_leaf=hosts_per_leaf,
        host_rate_bps=host_rate_bps,
        fabric_rate_bps=fabric_rate_bps,
        oversubscription=ratio,
        uplinks_per_spine=uplinks_per_spine,
        delay_s=delay_s,
    )
    name = _check_name(name, f"leaf_spine_{leaves}l_{spines}s_{hosts_per_leaf}h")
    G = _new_graph("leaf_spine", name, params, time_scale)
    links: List[Tuple[str, str, int, str]] = []
    for s in range(1, spines + 1):
        _add_switch(G, f"spine{s}", "spine", s)
    for leaf_no in range(1, leaves + 1):
        leaf = f"leaf{leaf_no}"
        _add_switch(G, leaf, "leaf", leaf_no)
        for n in range(hosts_per_leaf):
            index = (leaf_no - 1) * hosts_per_leaf + n + 1
            host = f"h{index}"
            _add_host(G, host, index, f"10.0.{leaf_no}.{n + 1}", leaf)
            links.append((host, leaf, host_rate_bps, "host"))
    for leaf_no in range(1, leaves + 1):
        for s in range(1, spines + 1):
            links.append((f"leaf{leaf_no}", f"spine{s}", fabric_rate_bps, "leaf-spine"))
    _number_ports(G, delay_s, links)
    validate(G)
    return G


def fat_tree(
    k: int = 4,
    rate_bps: int = DEFAULT_RATE_BPS,
    rates: Optional[Mapping[str, int]] = None,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
) -> nx.Graph:
    """Return a k-ary fat tree (Al-Fares, Loukissas, Vahdat, SIGCOMM 2008).

    k pods, each with k/2 edge and k/2 aggregation switches wired as a full
    bipartite graph; (k/2)^2 core switches, core ``(j, i)`` (j, i in
    0..k/2-1) connected to aggregation switch j of every pod; k/2 hosts per
    edge switch: 5k^2/4 switches, k^3/4 hosts, every switch of degree k.

    Names are global and 1-based: edge ``e<p*k/2+s+1>``, agg ``a<p*k/2+j+1>``,
    core ``c<j*k/2+i+1>``, host ``h<n>`` numbered by pod, edge, then host.
    Addresses follow the paper: host i (0-based) of edge switch s in pod p is
    ``10.p.s.(i+2)``; all hosts share one /8.

    Args:
        k: switch radix, even, 2..254 (the pod is the second octet of host IPs).
        rate_bps: rate of every link in bit/s, unless overridden by `rates`.
        rates: per-tier overrides, keys among "host", "edge-agg", "agg-core".
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the host NIC speed the host links stand for;
            sets ``time_scale`` to it over the host link rate.
        name: the graph's name; defaults to ``fat_tree_k<k>``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract;
        ``G.graph["params"]["rates"]`` holds the resolved rate of each tier.

    Raises:
        FabricSpecError: k odd or out of range, a rate not positive, or an
            unknown key in `rates`.

    Examples:
        >>> G = fat_tree(k=4)
        >>> len(switches(G)), len(hosts(G)), len(switch_links(G))
        (20, 16, 32)
        >>> sorted({d for _, d in G.degree(switches(G))})
        [4]
        >>> G.nodes["h6"]["ip"], G.nodes["h6"]["leaf"], G.nodes["h6"]["pod"]
        ('10.1.0.3', 'e3', 1)
        >>> port_map(G, "a1")[3]
        ('a1-eth3', 'c1', 1, 20000000)
        >>> fat_tree(k=3)
        Traceback (most recent call last):
        ...
        emu.fabric.FabricSpecError: k=3: must be even (k pods of k/2 edge and k/2 agg switches)
    """
    k = _check_int("k", k, 2, 254)
    if k % 2:
        raise FabricSpecError(f"k={k!r}: must be even (k pods of k/2 edge and k/2 agg switches)")
    rate_bps = _check_rate("rate_bps", rate_bps)
    tier_rates = {"host": rate_bps, "edge-agg": rate_bps, "agg-core": rate_bps}
    for key, value in dict(rates or {}).items():
        if key not in tier_rates:
            raise FabricSpecError(
                f"rates[{key!r}]: unknown tier; allowed: {', '.join(map(repr, tier_rates))}"
            )
        tier_rates[key] = _check_rate(f"rates[{key!r}]", value)
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, tier_rates["host"])
    half = k // 2
    _check_intf_names(
        [f"h{k**3 // 4}-eth0", f"e{k * half}-eth{k}", f"a{k * half}-eth{k}", f"c{half**2}-eth{k}"],
        f"k={k!r}",
    )
    params = dict(k=k, rate_bps=rate_bps, rates=tier_rates, delay_s=delay_s)
    G = _new_graph("fat_tree", _check_name(name, f"fat_tree_k{k}"), params, time_scale)
    links: List[Tuple[str, str, int, str]] = []
    for j in range(half):
        for i in range(half):
            _add_switch(G, f"c{j * half + i + 1}", "core", j * half + i + 1)
    for p in range(k):
        for s in range(half):
            n = p * half + s + 1
            _add_switch(G, f"e{n}", "edge", n, pod=p)
            _add_switch(G, f"a{n}", "agg", n, pod=p)
    index = 0
    for p in range(k):
        for s in range(half):
            edge = f"e{p * half + s + 1}"
            for i in range(half):
                index += 1
                host = f"h{index}"
                _add_host(G, host, index, f"10.{p}.{s}.{i + 2}", edge, pod=p)
                links.append((host, edge, tier_rates["host"], "host"))
    for p in range(k):
        for s in range(half):
            edge = f"e{p * half + s + 1}"
            for j in range(half):
                links.append((edge, f"a{p * half + j + 1}", tier_rates["edge-agg"], "edge-agg"))
    for p in range(k):
        for j in range(half):
            agg = f"a{p * half + j + 1}"
            for i in range(half):
                links.append((agg, f"c{j * half + i + 1}", tier_rates["agg-core"], "agg-core"))
    _number_ports(G, delay_s, links)
    validate(G)
    return G


def single_switch(
    hosts: int = 4,
    rate_bps: int = DEFAULT_RATE_BPS,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
) -> nx.Graph:
    """Return one switch ``s1`` with every host on it: the non-blocking ideal.

    Used to normalise throughput: a fabric can at best match this. Host n
    (1-based) is ``h<n>`` on port n with IP ``10.0.0.<n>``.

    Args:
        hosts: number of hosts, 1..254.
        rate_bps: rate of every host link in bit/s.
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the host NIC speed the host links stand for;
            sets ``time_scale`` to it over the host link rate.
        name: the graph's name; defaults to ``single_switch_<n>h``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract.

    Raises:
        FabricSpecError: a parameter is out of range.

    Examples:
        >>> G = single_switch(hosts=3)
        >>> expected_counts(G)
        {'switches': 1, 'hosts': 3, 'switch_links': 0}
        >>> G.edges["h2", "s1"]["intfs"] == {"h2": "h2-eth0", "s1": "s1-eth2"}
        True
        >>> single_switch(hosts=0)
        Traceback (most recent call last):
        ...
        emu.fabric.FabricSpecError: hosts=0: must be in 1..254
    """
    n_hosts = _check_int("hosts", hosts, 1, 254)
    rate_bps = _check_rate("rate_bps", rate_bps)
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, rate_bps)
    params = dict(hosts=n_hosts, rate_bps=rate_bps, delay_s=delay_s)
    G = _new_graph(
        "single_switch", _check_name(name, f"single_switch_{n_hosts}h"), params, time_scale
    )
    _add_switch(G, "s1", "switch", 1)
    links: List[Tuple[str, str, int, str]] = []
    for n in range(1, n_hosts + 1):
        _add_host(G, f"h{n}", n, f"10.0.0.{n}", "s1")
        links.append((f"h{n}", "s1", rate_bps, "host"))
    _number_ports(G, delay_s, links)
    validate(G)
    return G


# ---------------------------------------------------------------- queries


def hosts(G: nx.Graph) -> List[str]:
    """Return the host names of `G`, in insertion order (h1, h2, ...)."""
    return [n for n, kind in G.nodes(data="kind") if kind == "host"]


def switches(G: nx.Graph) -> List[str]:
    """Return the switch names of `G`, in insertion order."""
    return [n for n, kind in G.nodes(data="kind") if kind == "switch"]


def switch_links(G: nx.Graph) -> List[Tuple[str, str]]:
    """Return the inter-switch edges of `G` as (u, v) pairs."""
    return [
        (u, v)
        for u, v in G.edges
        if G.nodes[u]["kind"] == "switch" and G.nodes[v]["kind"] == "switch"
    ]


def expected_counts(G: nx.Graph) -> Dict[str, int]:
    """Return what a converged controller must see: switches, hosts, switch links.

    ``switch_links`` counts undirected links (an LLDP discovery that reports
    each direction separately sees twice as many).
    """
    return {
        "switches": len(switches(G)),
        "hosts": len(hosts(G)),
        "switch_links": len(switch_links(G)),
    }


# LLDP frames per second the routing controller is asked to send, and take back
# as packet-ins, in all; the period grows with the switch ports beyond it.
# Measured on the 2-core VM (docs/performance.md, "Routing convergence at
# scale"): a k=8 fat-tree (640 switch ports) at 1 s, 640 frames/s each way,
# never converged (LLDP round trips beyond the 5-interval expiry, links
# expiring and found again, 7,426 times in 342 s); at 3 s, 213 frames/s, it
# converged in 35 s. Fabrics up to 200 switch ports (every scenario's) keep
# Ryu's 1 s.
LLDP_FRAMES_PER_S = 200.0
LLDP_MIN_INTERVAL_S = 1.0


def lldp_interval_s(G: nx.Graph) -> float:
    """The LLDP period for `G`'s routing controller: 1 s, or longer for big fabrics.

    LLDP here discovers the fabric; a cut cable shows at once as carrier down
    (PORT_STATUS), so a longer period slows only the expiry of a link that
    fails silently.

    Examples:
        >>> lldp_interval_s(fat_tree(k=4))
        1.0
        >>> round(lldp_interval_s(fat_tree(k=8)), 2)
        3.2
    """
    ports = sum(G.degree(n) for n in switches(G))
    return max(LLDP_MIN_INTERVAL_S, ports / LLDP_FRAMES_PER_S)


def port_map(G: nx.Graph, node: str) -> Dict[int, Tuple[str, str, int, int]]:
    """Return ``{port_no: (intf, peer, peer_port, rate_bps)}`` for `node`, by port.

    Raises:
        FabricSpecError: `node` is not in `G`.
    """
    if node not in G:
        raise FabricSpecError(f"node={node!r}: not in fabric {G.graph.get('name')!r}")
    ports = {}
    for peer in G[node]:
        e = G.edges[node, peer]
        ports[e["ports"][node]] = (e["intfs"][node], peer, e["ports"][peer], e["rate_bps"])
    return dict(sorted(ports.items()))


# ---------------------------------------------------------------- contract


def validate(G: nx.Graph) -> None:
    """Check that `G` follows this module's attribute contract.

    Builders call it on what they return; call it on a graph you built or
    edited by hand before handing it to `to_mininet` or `emu.net`.

    Raises:
        FabricSpecError: naming the first graph, node or edge attribute that breaks
            the contract.
    """
    if isinstance(G, nx.MultiGraph) or G.is_directed():
        raise FabricSpecError(f"graph type {type(G).__name__}: must be an undirected nx.Graph")
    for key in ("name", "kind", "params", "subnet", "time_scale"):
        if key not in G.graph:
            raise FabricSpecError(f"G.graph[{key!r}] missing")
    if G.graph["kind"] not in KINDS:
        raise FabricSpecError(f"G.graph['kind']={G.graph['kind']!r}: allowed {KINDS}")
    if G.graph["subnet"] != SUBNET:
        raise FabricSpecError(f"G.graph['subnet']={G.graph['subnet']!r}: must be {SUBNET!r}")
    subnet = ipaddress.ip_network(SUBNET)
    seen: Dict[str, Dict[Any, str]] = {"dpid": {}, "ip": {}, "mac": {}, "intf": {}}

    def unique(what: str, value: Any, owner: str) -> None:
        if value in seen[what]:
            raise FabricSpecError(f"{owner}: {what} {value!r} already used by {seen[what][value]}")
        seen[what][value] = owner

    for node, d in G.nodes(data=True):
        kind = d.get("kind")
        if kind == "switch":
            role = d.get("role")
            if role not in SWITCH_ROLES:
                raise FabricSpecError(
                    f"switch {node}: role={role!r}, allowed {sorted(SWITCH_ROLES)}"
                )
            dpid = d.get("dpid")
            if isinstance(dpid, bool) or not isinstance(dpid, int) or not 0 < dpid < 1 << 64:
                raise FabricSpecError(f"switch {node}: dpid={dpid!r}, must be an int in 1..2^64-1")
            unique("dpid", dpid, f"switch {node}")
            if d.get("tier") != SWITCH_ROLES[role]:
                raise FabricSpecError(
                    f"switch {node}: tier={d.get('tier')!r}, role {role} has tier {SWITCH_ROLES[role]}"
                )
        elif kind == "host":
            if d.get("role") != "host":
                raise FabricSpecError(f"host {node}: role={d.get('role')!r}, must be 'host'")
            try:
                ip = ipaddress.ip_address(d.get("ip"))
            except ValueError as exc:
                raise FabricSpecError(
                    f"host {node}: ip={d.get('ip')!r} is not an IPv4 address"
                ) from exc
            if ip not in subnet or d.get("prefixlen") != PREFIXLEN:
                raise FabricSpecError(
                    f"host {node}: {d.get('ip')}/{d.get('prefixlen')} must be in {SUBNET}"
                )
            unique("ip", str(ip), f"host {node}")
            mac = d.get("mac")
            if not isinstance(mac, str) or not _MAC_RE.match(mac):
                raise FabricSpecError(f"host {node}: mac={mac!r}, must be 02:00:00:xx:xx:xx")
            unique("mac", mac, f"host {node}")
            leaf = d.get("leaf")
            if G.degree(node) != 1 or leaf not in G[node]:
                raise FabricSpecError(f"host {node}: must have exactly one link, to leaf={leaf!r}")
            if G.nodes[leaf].get("kind") != "switch":
                raise FabricSpecError(f"host {node}: leaf={leaf!r} is not a switch")
        else:
            raise FabricSpecError(f"node {node}: kind={kind!r}, allowed 'host' or 'switch'")

    for u, v, e in G.edges(data=True):
        where = f"link {u}-{v}"
        rate = e.get("rate_bps")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
            raise FabricSpecError(f"{where}: rate_bps={rate!r}, must be a positive int")
        delay = e.get("delay_s")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise FabricSpecError(f"{where}: delay_s={delay!r}, must be >= 0")
        if e.get("tier") not in LINK_TIERS:
            raise FabricSpecError(f"{where}: tier={e.get('tier')!r}, allowed {LINK_TIERS}")
        ports, intfs = e.get("ports"), e.get("intfs")
        if not isinstance(ports, dict) or set(ports) != {u, v}:
            raise FabricSpecError(f"{where}: ports={ports!r}, must map both ends to a port")
        if not isinstance(intfs, dict) or set(intfs) != {u, v}:
            raise FabricSpecError(f"{where}: intfs={intfs!r}, must map both ends to an interface")
        for node in (u, v):
            intf = intfs[node]
            if intf != f"{node}-eth{ports[node]}":
                raise FabricSpecError(
                    f"{where}: interface {intf!r} must be {node}-eth{ports[node]}"
                )
            if len(intf) > MAX_INTF_NAME:
                raise FabricSpecError(
                    f"{where}: interface name {intf!r} has {len(intf)} characters, "
                    f"Linux allows at most {MAX_INTF_NAME}"
                )
            unique("intf", intf, where)

    for node, kind in G.nodes(data="kind"):
        numbers = sorted(G.edges[node, peer]["ports"][node] for peer in G[node])
        first = 0 if kind == "host" else 1
        if numbers != list(range(first, first + len(numbers))):
            raise FabricSpecError(
                f"{kind} {node}: ports {numbers} must be {first}..{first + len(numbers) - 1}"
            )


# ---------------------------------------------------------------- Mininet


def to_mininet(G: nx.Graph) -> "Topo":
    """Return a Mininet ``Topo`` with exactly the nodes, ports and names of `G`.

    Switches get their explicit dpid (16 hex digits), hosts their ``ip/prefixlen``
    and MAC, links their port numbers and interface names. No TCLink shaping:
    emu's switch paces at ``rate_bps`` itself, so `emu.net` reads rates from
    `G`, not from the Topo.

    Raises:
        FabricSpecError: `G` breaks the contract (see `validate`).
    """
    from mininet.topo import Topo  # only here: the rest imports without Mininet

    validate(G)
    topo = Topo()
    for node, d in G.nodes(data=True):
        if d["kind"] == "switch":
            topo.addSwitch(node, dpid=f"{d['dpid']:016x}")
        else:
            topo.addHost(node, ip=f"{d['ip']}/{d['prefixlen']}", mac=d["mac"])
    for u, v, e in G.edges(data=True):
        topo.addLink(
            u,
            v,
            port1=e["ports"][u],
            port2=e["ports"][v],
            intfName1=e["intfs"][u],
            intfName2=e["intfs"][v],
        )
    return topo
