"""Topology builders: the fabric as a networkx graph, and its Mininet Topo.

Owns the topology: which nodes exist, how they are wired, on which port and
interface, at which rate, with which dpid, IP and MAC. The graph returned by a
builder is the single source of truth; `emu.net` (Mininet), the switch
processes, the scenarios and the controller's convergence check all read it.
Does not own anything that runs: no processes, no sockets, no Mininet objects
except the `Topo` that `to_mininet` hands back (Mininet is imported there only,
so the rest of this module imports without it).

Builders are plain functions in the style of `networkx.generators.classic`:
`leaf_spine`, `fat_tree`, `single_switch`, and the GPU-cluster shapes
`rail_optimized`, `dragonfly`, `torus`. Each validates its arguments,
raising `FabricSpecError` naming the parameter, its value and what is allowed.

The attribute contract (checked by `validate`):

- ``G.graph``: ``name`` (str), ``kind`` ("leaf_spine" | "fat_tree" |
  "single_switch" | "dragonfly" | "torus" | "rail_optimized" | "custom", the
  last for a hand-made topology file),
  ``params`` (the resolved builder arguments),
  ``subnet`` ("10.0.0.0/8"), ``time_scale`` (float).
- switch nodes: ``kind="switch"``, ``role`` ("leaf", "spine", "edge", "agg",
  "core", "switch", "router" (dragonfly), "torus", "nvswitch" (a GPU
  server's NVLink domain)), ``dpid`` (unique nonzero int), ``tier`` (0
  leaf/edge/switch/router/torus, 1 spine/agg, 2 core, -1 nvswitch);
  fat-tree edge and agg switches also carry ``pod``, rail leaves ``rail``,
  dragonfly routers ``group``, torus switches ``coords`` (a list).
- host nodes: ``kind="host"``, ``role="host"``, ``ip`` (dotted str),
  ``prefixlen`` (8), ``mac`` ("02:00:00:xx:xx:xx"), ``leaf`` (the switch it
  attaches to, whatever its role); fat-tree hosts also carry ``pod``,
  rail-optimized hosts ``node`` and ``rail``, dragonfly hosts ``group``; a
  GPU with an NVLink port also ``nvlink_ip`` (in 10.255.0.0/16, /24 per
  node) and ``nvlink_mac`` ("02:00:01:xx:xx:xx"). `host_ports` lists a
  host's interfaces with their addresses.
- edges: ``rate_bps`` (int), ``delay_s`` (float), ``tier`` ("host" |
  "leaf-spine" | "edge-agg" | "agg-core" | "local" | "global" (dragonfly,
  within and between groups) | "torus" | "fabric", the last between switch
  roles no builder joins | "nvlink", a GPU to its node's NVSwitch), ``ports`` ({node: port_no}),
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

Port numbering: a host's NIC is ``<host>-eth0``, port 0; a GPU of a
rail-optimized fabric also has its NVLink port ``<host>-eth1``, port 1. A switch
numbers its ports from 1, downward-facing ports first, then upward-facing
ones, each group in the order of the peers' numbers: a leaf (or fat-tree edge)
has its hosts on 1..h and its spines (aggs) on h+1..; a spine has leaf n on
port n; an agg has its pod's edges on 1..k/2 and its cores on k/2+1..k; a core
has pod p's agg on port p+1. A rail leaf numbers like a leaf (node n's NIC
on port n), a spine of a rail fabric has rail r on port r. A dragonfly router
and a torus switch have no up or down: hosts first, then the order their
builder's docstring gives. Interface names are ``<switch>-eth<port>``.

dpids are ``(tier + 1) << 16 | n`` for the n-th switch of its role (leaf3 is
0x10003, spine2 is 0x20002, core1 is 0x30001; an NVSwitch's is its node number): unique, nonzero and readable
in ``ovs-ofctl`` output, and never derived from the name (Mininet would give
leaf1 and spine1 the same dpid). A dragonfly router's n is its group and router
(g3r2 is 0x10302), a torus switch's its row-major number.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import networkx as nx

if TYPE_CHECKING:  # pragma: no cover
    from mininet.topo import Topo

__all__ = [
    "DEFAULT_RATE_BPS",
    "FabricSpecError",
    "HostPort",
    "NVLINK_RATIO",
    "dragonfly",
    "expected_counts",
    "fat_tree",
    "host_port",
    "host_ports",
    "hosts",
    "leaf_spine",
    "network",
    "nvlink_domains",
    "port_map",
    "rail_optimized",
    "single_switch",
    "switch_links",
    "switches",
    "to_mininet",
    "torus",
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
KINDS = (
    "leaf_spine",
    "fat_tree",
    "single_switch",
    "dragonfly",
    "torus",
    "rail_optimized",
    "custom",
)
# Tier 0 holds the switches hosts hang off; a dragonfly's routers and a torus's
# switches are all tier 0 (those fabrics have no up and down).
SWITCH_ROLES = {
    "leaf": 0,
    "spine": 1,
    "edge": 0,
    "agg": 1,
    "core": 2,
    "switch": 0,
    "router": 0,
    "torus": 0,
    # Inside a GPU server, below the network: the NVLink domain's switch
    # (`rail_optimized`). Tier -1 makes its dpid its node number.
    "nvswitch": -1,
}
# "fabric": a link between switch roles that no builder joins (a hand-made file's).
LINK_TIERS = (
    "host",
    "leaf-spine",
    "edge-agg",
    "agg-core",
    "local",
    "global",
    "torus",
    "fabric",
    "nvlink",
)
_MAC_RE = re.compile(r"^02:00:00(:[0-9a-f]{2}){3}$")
# A GPU's NVLink port: its own MAC (02:00:01 + the host index) and an address
# in its node's /24 of 10.255.0.0/16, which the host's kernel routes out of
# that port (a longer prefix than the fabric's /8).
_NVLINK_MAC_RE = re.compile(r"^02:00:01(:[0-9a-f]{2}){3}$")
NVLINK_NET = "10.255.0.0/16"
NVLINK_PREFIXLEN = 24


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
        {'switches': 1, 'hosts': 3, 'host_addresses': 3, 'switch_links': 0}
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


# NVLink domain over NIC, per GPU and per direction, from NVIDIA's datasheets:
# H100 SXM5 has "NVLink: 900GB/s" (18 NVLink 4 links; the figure counts both
# directions, so 450 GB/s = 3.6 Tbit/s each way), its NIC a ConnectX-7 at
# 400 Gbit/s (NVIDIA DGX H100 user guide: eight 400 Gb/s ConnectX-7 for the
# compute fabric, one per GPU). 3.6e12 / 400e9 = 9.
NVLINK_RATIO = 9.0


def _wire(G: nx.Graph, delay_s: float, links: List[Tuple[str, int, str, int, int, str]]) -> None:
    """Add `links` (u, u's port, v, v's port, rate_bps, tier) with the ports given.

    For builders whose port order is not "down first, then up" (a torus or a
    dragonfly has no up); `validate` checks that every node's ports are dense.
    """
    for u, pu, v, pv, rate_bps, tier in links:
        if G.has_edge(u, v):  # a builder bug: the contract is one link per pair
            raise FabricSpecError(f"link {u}-{v}: would be added twice")
        G.add_edge(
            u,
            v,
            rate_bps=rate_bps,
            delay_s=delay_s,
            tier=tier,
            ports={u: pu, v: pv},
            intfs={u: f"{u}-eth{pu}", v: f"{v}-eth{pv}"},
        )


def _tier_rates(rate_bps: Any, rates: Optional[Mapping[str, int]], tiers: Tuple[str, ...]):
    rate_bps = _check_rate("rate_bps", rate_bps)
    out = {tier: rate_bps for tier in tiers}
    for key, value in dict(rates or {}).items():
        if key not in out:
            raise FabricSpecError(
                f"rates[{key!r}]: unknown tier; allowed: {', '.join(map(repr, out))}"
            )
        out[key] = _check_rate(f"rates[{key!r}]", value)
    return rate_bps, out


def dragonfly(
    groups: int = 3,
    routers_per_group: int = 2,
    hosts_per_router: int = 1,
    global_links_per_router: int = 1,
    rate_bps: int = DEFAULT_RATE_BPS,
    rates: Optional[Mapping[str, int]] = None,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
) -> nx.Graph:
    """Return a dragonfly (Kim, Dally, Scott, Abts, ISCA 2008).

    `groups` groups of `routers_per_group` routers (the paper's g and a); the
    routers of a group are fully connected by local links; every router has
    `hosts_per_router` hosts (p) and `global_links_per_router` global links
    (h). The a*h global links of each group are spread over the other g-1
    groups in the *consecutive* arrangement (so named in the dragonfly
    literature, e.g. Camarero, Vallejo, Beivide, ACM TACO 2014): numbering a
    group's global links k = 0..a*h-1, router by router (link k is on router
    k // h), link k of group i goes to group ``(i + k mod (g-1) + 1) mod g``
    and lands on the link of that group that points back, of the same round
    ``k // (g-1)``. So every pair of groups is joined by a*h/(g-1) global
    links (one in the canonical, largest dragonfly g = a*h + 1), each on a
    different router pair.

    Routing is minimal in hops, which is what emu's routing controller
    computes (shortest-path ECMP over the discovered graph): a route between
    groups takes local, global, local links, or a shorter path through a third
    group where one exists. Valiant or UGAL non-minimal routing is not modelled.

    Names: router ``g<G>r<R>`` (1-based), dpid ``0x1GGRR`` (group and router
    in hex: g3r2 is 0x10302); host n (0-based) of router R in group G is
    ``h<index>`` numbered by group, router, host, with IP ``10.G.R.<n+1>``.
    Ports of a router: hosts on 1..p, the group's other routers on p+1..p+a-1
    (in router order), global links on p+a..p+a+h-1 (in the order of k).
    Routers and hosts carry ``group``; links have tier "local" or "global".

    Args:
        groups: g, 2..255 (the second octet of host IPs).
        routers_per_group: a, 1..255.
        hosts_per_router: p, 1..254.
        global_links_per_router: h, 1..g-1, with a*h a multiple of g-1 (every
            pair of groups gets the same number of global links).
        rate_bps: rate of every link in bit/s, unless overridden by `rates`.
        rates: per-tier overrides, keys among "host", "local", "global".
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the host NIC speed the host links stand for.
        name: the graph's name; defaults to ``dragonfly_<g>g_<a>a_<p>p_<h>h``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract.

    Raises:
        FabricSpecError: a parameter out of range, or global links that cannot
            be spread evenly over the other groups.

    Examples:
        >>> G = dragonfly(groups=3, routers_per_group=2, hosts_per_router=1)
        >>> len(switches(G)), len(hosts(G)), len(switch_links(G))
        (6, 6, 6)
        >>> sorted(G.edges["g1r1", "g2r2"].items())[-2:]
        [('rate_bps', 20000000), ('tier', 'global')]
        >>> G.nodes["h4"]["ip"], hex(G.nodes["g2r2"]["dpid"])
        ('10.2.2.1', '0x10202')
        >>> dragonfly(groups=4, routers_per_group=2)
        Traceback (most recent call last):
        ...
        emu.fabric.FabricSpecError: global_links_per_router=1: routers_per_group * global_links_per_router = 2 global links per group must be a multiple of groups - 1 = 3 (each pair of groups gets the same number)
    """
    g = _check_int("groups", groups, 2, 255)
    a = _check_int("routers_per_group", routers_per_group, 1, 255)
    p = _check_int("hosts_per_router", hosts_per_router, 1, 254)
    h = _check_int("global_links_per_router", global_links_per_router, 1, g - 1)
    if (a * h) % (g - 1):
        raise FabricSpecError(
            f"global_links_per_router={h!r}: routers_per_group * global_links_per_router = "
            f"{a * h} global links per group must be a multiple of groups - 1 = {g - 1} "
            "(each pair of groups gets the same number)"
        )
    rate_bps, tier_rates = _tier_rates(rate_bps, rates, ("host", "local", "global"))
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, tier_rates["host"])
    _check_intf_names(
        [f"h{g * a * p}-eth0", f"g{g}r{a}-eth{p + a - 1 + h}"],
        f"groups={g!r}, routers_per_group={a!r}, hosts_per_router={p!r}",
    )
    params = dict(
        groups=g,
        routers_per_group=a,
        hosts_per_router=p,
        global_links_per_router=h,
        rate_bps=rate_bps,
        rates=tier_rates,
        delay_s=delay_s,
    )
    G = _new_graph(
        "dragonfly", _check_name(name, f"dragonfly_{g}g_{a}a_{p}p_{h}h"), params, time_scale
    )

    def router(group: int, r: int) -> str:  # 0-based in, 1-based name
        return f"g{group + 1}r{r + 1}"

    links: List[Tuple[str, int, str, int, int, str]] = []
    index = 0
    for i in range(g):
        for r in range(a):
            _add_switch(G, router(i, r), "router", (i + 1) << 8 | (r + 1), group=i + 1)
            for n in range(p):
                index += 1
                host = f"h{index}"
                _add_host(G, host, index, f"10.{i + 1}.{r + 1}.{n + 1}", router(i, r), group=i + 1)
                links.append((host, 0, router(i, r), n + 1, tier_rates["host"], "host"))
    for i in range(g):
        for r in range(a):
            for s in range(r + 1, a):
                # Router r's port to s: p + (s's rank among r's peers), and back.
                links.append(
                    (router(i, r), p + s, router(i, s), p + r + 1, tier_rates["local"], "local")
                )
    for i in range(g):
        for k in range(a * h):
            offset, rnd = k % (g - 1) + 1, k // (g - 1)
            j, back = (i + offset) % g, rnd * (g - 1) + (g - 1 - offset)
            if (j, back) < (i, k):
                continue  # added from the other end
            links.append(
                (
                    router(i, k // h),
                    p + a + k % h,
                    router(j, back // h),
                    p + a + back % h,
                    tier_rates["global"],
                    "global",
                )
            )
    _wire(G, delay_s, links)
    validate(G)
    return G


def torus(
    dims: Sequence[int] = (3, 3),
    hosts_per_switch: int = 1,
    rate_bps: int = DEFAULT_RATE_BPS,
    rates: Optional[Mapping[str, int]] = None,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
) -> nx.Graph:
    """Return a 2D or 3D torus: a grid of switches with wraparound links.

    The switch at coordinates c (0-based) is joined to c +- 1 in every
    dimension, modulo its size. A dimension of size 2 gives one link between
    the two switches, not two: c + 1 and c - 1 are the same neighbour, and the
    contract is one link per pair (a real 2-ary torus would double the cable;
    here the dimension is a plain pair). Every switch has `hosts_per_switch`
    hosts. Shortest-path routing on a torus has many equal paths (one per
    order of the dimensions to correct), which is what the routing controller's
    ECMP spreads over; the switch graph's diameter is sum(size // 2).

    Names: switch ``t<x>_<y>[_<z>]`` by its coordinates, with ``coords`` (a
    list) and ``role="torus"``; its number s (1-based, row-major order, the
    last coordinate fastest) gives its dpid ``0x10000 | s`` and its hosts' IPs
    ``10.<s // 256>.<s % 256>.<n+1>``. Ports: hosts on 1..hosts_per_switch,
    then per dimension in order its +1 neighbour and (when the size is above 2)
    its -1 neighbour. Links between switches have tier "torus".

    Args:
        dims: the size of each dimension, 2 or 3 of them, each >= 2.
        hosts_per_switch: hosts per switch, 1..254.
        rate_bps: rate of every link in bit/s, unless overridden by `rates`.
        rates: per-tier overrides, keys among "host", "torus".
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the host NIC speed the host links stand for.
        name: the graph's name; defaults to ``torus_<X>x<Y>[x<Z>]_<h>h``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract;
        ``G.graph["params"]["dims"]`` is a list.

    Raises:
        FabricSpecError: `dims` not 2 or 3 sizes >= 2, or another parameter
            out of range.

    Examples:
        >>> G = torus(dims=(3, 3))
        >>> len(switches(G)), len(hosts(G)), len(switch_links(G))
        (9, 9, 18)
        >>> sorted(G.neighbors("t0_0"))
        ['h1', 't0_1', 't0_2', 't1_0', 't2_0']
        >>> len(switch_links(torus(dims=(2, 2, 2))))
        12
        >>> torus(dims=(3,))
        Traceback (most recent call last):
        ...
        emu.fabric.FabricSpecError: dims=(3,): must be 2 or 3 sizes, each an integer >= 2
    """
    if (
        isinstance(dims, (str, bytes))
        or not isinstance(dims, Sequence)
        or len(dims) not in (2, 3)
        or any(isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in dims)
    ):
        raise FabricSpecError(f"dims={dims!r}: must be 2 or 3 sizes, each an integer >= 2")
    sizes = [int(d) for d in dims]
    count = 1
    for d in sizes:
        count *= d
    if count > 0xFFFF:
        raise FabricSpecError(
            f"dims={dims!r}: {count} switches, at most 65535 (the dpid's 16 bits)"
        )
    hps = _check_int("hosts_per_switch", hosts_per_switch, 1, 254)
    rate_bps, tier_rates = _tier_rates(rate_bps, rates, ("host", "torus"))
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, tier_rates["host"])
    width = [1 if d == 2 else 2 for d in sizes]  # ports a switch spends on each dimension
    longest = "_".join(str(d - 1) for d in sizes)
    _check_intf_names(
        [f"h{count * hps}-eth0", f"t{longest}-eth{hps + sum(width)}"], f"dims={dims!r}"
    )
    params = dict(
        dims=sizes, hosts_per_switch=hps, rate_bps=rate_bps, rates=tier_rates, delay_s=delay_s
    )
    shape = "x".join(map(str, sizes))
    G = _new_graph("torus", _check_name(name, f"torus_{shape}_{hps}h"), params, time_scale)
    cells = list(itertools.product(*(range(d) for d in sizes)))

    def sw(c: Sequence[int]) -> str:
        return "t" + "_".join(map(str, c))

    links: List[Tuple[str, int, str, int, int, str]] = []
    index = 0
    for s, c in enumerate(cells, start=1):
        _add_switch(G, sw(c), "torus", s, coords=list(c))
        for n in range(hps):
            index += 1
            _add_host(G, f"h{index}", index, f"10.{s >> 8}.{s & 0xFF}.{n + 1}", sw(c))
            links.append((f"h{index}", 0, sw(c), n + 1, tier_rates["host"], "host"))
    for c in cells:
        for d, size in enumerate(sizes):
            if size == 2 and c[d] == 1:
                continue  # the pair's one link was added from coordinate 0
            up = list(c)
            up[d] = (c[d] + 1) % size
            plus = hps + 1 + sum(width[:d])
            minus = plus + width[d] - 1  # the same port when the size is 2
            links.append((sw(c), plus, sw(up), minus, tier_rates["torus"], "torus"))
    _wire(G, delay_s, links)
    validate(G)
    return G


def rail_optimized(
    nodes: int = 2,
    gpus_per_node: int = 2,
    spines: int = 2,
    host_rate_bps: int = DEFAULT_RATE_BPS,
    fabric_rate_bps: Optional[int] = None,
    nvlink_ratio: float = NVLINK_RATIO,
    delay_s: float = 0.0,
    time_scale: Optional[float] = None,
    modelled_rate_bps: Optional[float] = None,
    name: Optional[str] = None,
    nvlink_domain: bool = True,
) -> nx.Graph:
    """Return a rail-optimized fabric: NIC r of every node on rail leaf r.

    A GPU server (a *node*) has `gpus_per_node` GPUs, each with its own NIC;
    NIC r of every node connects to leaf ``rail<r>`` (a "rail"), and the rail
    leaves are joined by `spines` spines as in a leaf/spine. Traffic between
    GPUs of the same rank on different nodes stays on its rail (one leaf);
    only traffic between rails crosses a spine. `spines=0` is the rail-only
    network (Wang et al., "Rail-only", 2023): the rails are disconnected
    islands and the fabric alone cannot carry traffic between rails.

    Each host here is one GPU's NIC: ``h<(node-1)*G + r>`` with ``node``
    (1-based) and ``rail`` (r, 1-based) attributes, on port ``node`` of
    ``rail<r>`` (the rail leaves carry ``rail`` too), IP ``10.0.<r>.<node>``.

    The NVLink domain inside each node is built (`nvlink_domain`, default on):
    a switch ``nvsw<node>`` (role "nvswitch", dpid the node number) joins the
    node's GPUs, each on its second interface ``<host>-eth1`` (port 1, the
    GPU's NVLink port; GPU r on port r of the NVSwitch), at ``nvlink_rate_bps``
    = the host link rate times `nvlink_ratio` (link tier "nvlink"). That port
    has its own address, ``nvlink_ip`` 10.255.<node>.<r>/24, and MAC
    ``nvlink_mac`` (02:00:01 + the host index), so the host's kernel routes
    only the node's NVLink addresses out of it, and the collectives choose the
    NVLink port by addressing a peer there (emu/traffic/rdma.py). The NVSwitch
    touches nothing but its node's GPUs: a host is never a transit node, so
    routing never carries other nodes' traffic leaf -> NVSwitch -> leaf (PXN,
    NVLink forwarding across rails, is the collective library's choice at the
    source, not a route). `nvlink_domains` gives each node's GPUs by rail.

    Args:
        nodes: GPU servers, 1..254.
        gpus_per_node: GPUs (and NICs and rails) per node, 1..255.
        spines: spine switches joining the rails, >= 0 (0: rail-only).
        host_rate_bps: rate of a NIC's link to its rail leaf, in bit/s.
        fabric_rate_bps: rate of each leaf-spine link; default `host_rate_bps`.
        nvlink_ratio: a GPU's NVLink bandwidth over its NIC's, > 0; default 9
            (H100: 3.6 Tbit/s NVLink each way vs a 400 Gbit/s ConnectX-7).
        nvlink_domain: build each node's NVSwitch and the GPUs' NVLink ports;
            False leaves the NVLink domain described only (the rate in
            ``params``), which a run that sends nothing over NVLink may prefer:
            it saves a switch per node.
        delay_s: one-way propagation delay of every link, in seconds.
        time_scale: how many times faster the modelled hardware is (module
            docstring, "The time scale"); 1.0 when neither it nor
            `modelled_rate_bps` is given.
        modelled_rate_bps: the NIC speed the host links stand for.
        name: the graph's name; defaults to ``rail_<N>n_<G>g_<S>s``.

    Returns:
        An ``nx.Graph`` following this module's attribute contract.

    Raises:
        FabricSpecError: a parameter out of range.

    Examples:
        >>> G = rail_optimized(nodes=2, gpus_per_node=4, spines=2)
        >>> len(switches(G)), len(hosts(G)), len(switch_links(G))
        (8, 8, 8)
        >>> G.edges["h6", "nvsw2"]["intfs"], G.nodes["h6"]["nvlink_ip"]
        ({'h6': 'h6-eth1', 'nvsw2': 'nvsw2-eth2'}, '10.255.2.2')
        >>> G.nodes["h6"]["node"], G.nodes["h6"]["rail"], G.nodes["h6"]["leaf"]
        (2, 2, 'rail2')
        >>> nvlink_domains(G)[2]
        ['h5', 'h6', 'h7', 'h8']
        >>> G.graph["params"]["nvlink_rate_bps"]
        180000000
    """
    n_nodes = _check_int("nodes", nodes, 1, 254)
    gpus = _check_int("gpus_per_node", gpus_per_node, 1, 255)
    spines = _check_int("spines", spines, 0)
    host_rate_bps = _check_rate("host_rate_bps", host_rate_bps)
    fabric_rate_bps = (
        host_rate_bps
        if fabric_rate_bps is None
        else _check_rate("fabric_rate_bps", fabric_rate_bps)
    )
    nvlink_ratio = _check_positive("nvlink_ratio", nvlink_ratio)
    if not isinstance(nvlink_domain, bool):
        raise FabricSpecError(f"nvlink_domain={nvlink_domain!r}: must be True or False")
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, host_rate_bps)
    longest = [f"h{n_nodes * gpus}-eth1", f"rail{gpus}-eth{n_nodes + spines}"]
    longest += [f"nvsw{n_nodes}-eth{gpus}"] if nvlink_domain else []
    _check_intf_names(
        longest + ([f"spine{spines}-eth{gpus}"] if spines else []),
        f"nodes={n_nodes!r}, gpus_per_node={gpus!r}, spines={spines!r}",
    )
    params = dict(
        nodes=n_nodes,
        gpus_per_node=gpus,
        spines=spines,
        host_rate_bps=host_rate_bps,
        fabric_rate_bps=fabric_rate_bps,
        oversubscription=(n_nodes * host_rate_bps / (spines * fabric_rate_bps)) if spines else None,
        nvlink_ratio=nvlink_ratio,
        nvlink_rate_bps=round(host_rate_bps * nvlink_ratio),
        nvlink_domain=nvlink_domain,
        delay_s=delay_s,
    )
    G = _new_graph(
        "rail_optimized",
        _check_name(name, f"rail_{n_nodes}n_{gpus}g_{spines}s"),
        params,
        time_scale,
    )
    for s in range(1, spines + 1):
        _add_switch(G, f"spine{s}", "spine", s)
    for r in range(1, gpus + 1):
        _add_switch(G, f"rail{r}", "leaf", r, rail=r)
    links: List[Tuple[str, str, int, str]] = []
    for node in range(1, n_nodes + 1):
        for r in range(1, gpus + 1):
            index = (node - 1) * gpus + r
            _add_host(G, f"h{index}", index, f"10.0.{r}.{node}", f"rail{r}", node=node, rail=r)
            links.append((f"h{index}", f"rail{r}", host_rate_bps, "host"))
    for r in range(1, gpus + 1):
        for s in range(1, spines + 1):
            links.append((f"rail{r}", f"spine{s}", fabric_rate_bps, "leaf-spine"))
    if nvlink_domain:
        # Listed after the NIC links: a GPU's NIC stays port 0, its NVLink port 1.
        for node in range(1, n_nodes + 1):
            _add_switch(G, f"nvsw{node}", "nvswitch", node, node=node)
            for r in range(1, gpus + 1):
                index = (node - 1) * gpus + r
                G.nodes[f"h{index}"].update(
                    nvlink_ip=f"10.255.{node}.{r}",
                    nvlink_mac="02:00:01:%02x:%02x:%02x"
                    % ((index >> 16) & 0xFF, (index >> 8) & 0xFF, index & 0xFF),
                )
                links.append((f"h{index}", f"nvsw{node}", params["nvlink_rate_bps"], "nvlink"))
    _number_ports(G, delay_s, links)
    validate(G)
    return G


def nvlink_domains(G: nx.Graph) -> Dict[int, List[str]]:
    """Return each node's GPUs (hosts) by rail: ``{node: [host of rail 1, ...]}``.

    The NVLink domain of a `rail_optimized` fabric: the GPUs that one node's
    NVSwitch joins at ``G.graph["params"]["nvlink_rate_bps"]``.

    Raises:
        FabricSpecError: `G` is not a rail_optimized fabric.
    """
    if G.graph.get("kind") != "rail_optimized":
        raise FabricSpecError(
            f"G.graph['kind']={G.graph.get('kind')!r}: only a rail_optimized fabric has NVLink domains"
        )
    out: Dict[int, List[str]] = {}
    for h in sorted(hosts(G), key=lambda h: (G.nodes[h]["node"], G.nodes[h]["rail"])):
        out.setdefault(G.nodes[h]["node"], []).append(h)
    return out


# ---------------------------------------------------------------- queries


def hosts(G: nx.Graph) -> List[str]:
    """Return the host names of `G`, in insertion order (h1, h2, ...)."""
    return [n for n, kind in G.nodes(data="kind") if kind == "host"]


@dataclass(frozen=True)
class HostPort:
    """One interface of a host: its NIC (port 0, "nic") or a GPU's NVLink port (1, "nvlink")."""

    host: str
    kind: str  # "nic" | "nvlink"
    port: int
    intf: str
    ip: str
    prefixlen: int
    mac: str
    switch: str  # the switch at the other end
    rate_bps: int


def host_ports(G: nx.Graph, host: str) -> List[HostPort]:
    """Return `host`'s interfaces, its NIC first, then its NVLink port if it has one.

    Raises:
        FabricSpecError: `host` is not a host of `G`.

    Examples:
        >>> G = rail_optimized(nodes=2, gpus_per_node=2)
        >>> [(p.kind, p.intf, p.ip, p.switch) for p in host_ports(G, "h3")]
        [('nic', 'h3-eth0', '10.0.1.2', 'rail1'), ('nvlink', 'h3-eth1', '10.255.2.1', 'nvsw2')]
    """
    if host not in G or G.nodes[host].get("kind") != "host":
        raise FabricSpecError(f"host={host!r}: not a host of fabric {G.graph.get('name')!r}")
    d = G.nodes[host]
    out = []
    for peer in G[host]:
        e = G.edges[host, peer]
        nvlink = e["tier"] == "nvlink"
        out.append(
            HostPort(
                host=host,
                kind="nvlink" if nvlink else "nic",
                port=e["ports"][host],
                intf=e["intfs"][host],
                ip=d["nvlink_ip"] if nvlink else d["ip"],
                prefixlen=NVLINK_PREFIXLEN if nvlink else d["prefixlen"],
                mac=d["nvlink_mac"] if nvlink else d["mac"],
                switch=peer,
                rate_bps=e["rate_bps"],
            )
        )
    return sorted(out, key=lambda p: p.port)


def host_port(G: nx.Graph, host: str, kind: str = "nic") -> HostPort:
    """Return `host`'s interface of `kind` ("nic" or "nvlink").

    Raises:
        FabricSpecError: `host` is not a host of `G`, or has no such port.
    """
    for p in host_ports(G, host):
        if p.kind == kind:
            return p
    raise FabricSpecError(
        f"host {host}: no {kind!r} port in fabric {G.graph.get('name')!r}"
        + (" (only a rail_optimized fabric's GPUs have NVLink ports)" if kind == "nvlink" else "")
    )


def switches(G: nx.Graph) -> List[str]:
    """Return the switch names of `G`, in insertion order."""
    return [n for n, kind in G.nodes(data="kind") if kind == "switch"]


def network(G: nx.Graph) -> nx.Graph:
    """Return the network of `G`: a view without the NVLink domains (NVSwitches and their links).

    What paths through the fabric are computed on: in `G` itself two GPUs of a
    node are two hops apart through their NVSwitch, which routing never uses
    for traffic between NICs (a host is no transit node). `G` itself when it
    has no NVSwitch.
    """
    nvswitches = {n for n, role in G.nodes(data="role") if role == "nvswitch"}
    if not nvswitches:
        return G
    return G.subgraph(n for n in G if n not in nvswitches)


def switch_links(G: nx.Graph) -> List[Tuple[str, str]]:
    """Return the inter-switch edges of `G` as (u, v) pairs."""
    return [
        (u, v)
        for u, v in G.edges
        if G.nodes[u]["kind"] == "switch" and G.nodes[v]["kind"] == "switch"
    ]


def expected_counts(G: nx.Graph) -> Dict[str, int]:
    """Return what a converged controller must see: switches, hosts, switch links.

    ``host_addresses`` counts the addresses the controller learns: a GPU with
    an NVLink port is learned there too. ``switch_links`` counts undirected
    links (an LLDP discovery that reports each direction separately sees
    twice as many).
    """
    return {
        "switches": len(switches(G)),
        "hosts": len(hosts(G)),
        "host_addresses": sum(G.degree(h) for h in hosts(G)),
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
            if d.get("prefixlen") != PREFIXLEN:
                raise FabricSpecError(
                    f"host {node}: {d.get('ip')}/{d.get('prefixlen')} must be in {SUBNET}"
                )
            _check_address(node, d, "", subnet, _MAC_RE, "02:00:00", unique)
            leaf = d.get("leaf")
            nvlink = [p for p in G[node] if G.edges[node, p].get("tier") == "nvlink"]
            if G.degree(node) != 1 + len(nvlink) or len(nvlink) > 1 or leaf not in G[node]:
                raise FabricSpecError(
                    f"host {node}: must have exactly one link to leaf={leaf!r}, "
                    "and at most one NVLink link (tier 'nvlink') beside it"
                )
            if G.nodes[leaf].get("kind") != "switch" or leaf in nvlink:
                raise FabricSpecError(f"host {node}: leaf={leaf!r} is not a network switch")
            if nvlink:
                _validate_nvlink_port(G, node, d, nvlink[0], unique)
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
    _validate_nvswitches(G)


def _validate_nvlink_port(
    G: nx.Graph, host: str, d: Mapping[str, Any], nvswitch: str, unique: Any
) -> None:
    """A GPU's NVLink port: to an NVSwitch, with its own address and MAC."""
    if G.nodes[nvswitch].get("role") != "nvswitch":
        raise FabricSpecError(
            f"host {host}: its NVLink link goes to {nvswitch}, which is not an nvswitch"
        )
    _check_address(
        host, d, "nvlink_", ipaddress.ip_network(NVLINK_NET), _NVLINK_MAC_RE, "02:00:01", unique
    )


def _check_address(
    host: str,
    d: Mapping[str, Any],
    prefix: str,
    net: Any,
    mac_re: "re.Pattern[str]",
    oui: str,
    unique: Any,
) -> None:
    """A host port's ``<prefix>ip`` (IPv4, in `net`, unique) and ``<prefix>mac`` (`mac_re`, unique)."""
    owner = f"host {host}" + (" (NVLink port)" if prefix else "")
    try:
        ip = ipaddress.ip_address(d.get(prefix + "ip"))
    except ValueError as exc:
        raise FabricSpecError(
            f"host {host}: {prefix}ip={d.get(prefix + 'ip')!r} is not an IPv4 address"
        ) from exc
    if ip not in net:
        raise FabricSpecError(f"host {host}: {prefix}ip={ip} must be in {net}")
    unique("ip", str(ip), owner)
    mac = d.get(prefix + "mac")
    if not isinstance(mac, str) or not mac_re.match(mac):
        raise FabricSpecError(f"host {host}: {prefix}mac={mac!r}, must be {oui}:xx:xx:xx")
    unique("mac", mac, owner)


def _validate_nvswitches(G: nx.Graph) -> None:
    """An NVSwitch joins GPUs of one node and nothing else: never a transit switch."""
    for sw in switches(G):
        if G.nodes[sw]["role"] != "nvswitch":
            continue
        for peer in G[sw]:
            if G.edges[sw, peer].get("tier") != "nvlink" or G.nodes[peer]["kind"] != "host":
                raise FabricSpecError(
                    f"nvswitch {sw}: linked to {peer}; an NVSwitch links only GPUs' "
                    "NVLink ports (tier 'nvlink')"
                )
    for u, v, e in G.edges(data=True):
        if e.get("tier") == "nvlink" and "nvswitch" not in (
            G.nodes[u].get("role"),
            G.nodes[v].get("role"),
        ):
            raise FabricSpecError(f"link {u}-{v}: tier 'nvlink' must join a GPU and an nvswitch")


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
        opts: Dict[str, Any] = {}
        if e["tier"] == "nvlink":  # Mininet addresses only a host's first port itself
            for end, n in (("1", u), ("2", v)):
                if G.nodes[n]["kind"] == "host":
                    port = host_port(G, n, "nvlink")
                    opts["addr" + end] = port.mac
                    opts["params" + end] = {"ip": f"{port.ip}/{port.prefixlen}"}
        topo.addLink(
            u,
            v,
            port1=e["ports"][u],
            port2=e["ports"][v],
            intfName1=e["intfs"][u],
            intfName2=e["intfs"][v],
            **opts,
        )
    return topo
