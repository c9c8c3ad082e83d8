"""The Clos builders: `leaf_spine`, `fat_tree` and `single_switch`."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import networkx as nx

from emu.fabric._build import (
    _add_host,
    _add_switch,
    _check_int,
    _check_intf_names,
    _check_name,
    _check_nonneg,
    _check_positive,
    _check_rate,
    _new_graph,
    _number_ports,
    _resolve_time_scale,
)
from emu.fabric.contract import DEFAULT_RATE_BPS, FabricSpecError, validate

# ---------------------------------------------------------------- builders


def _tier_rates(
    rate_bps: Any, rates: Optional[Mapping[str, int]], tiers: Tuple[str, ...]
) -> Tuple[int, Dict[str, int]]:
    """Check `rate_bps` and the per-tier overrides in `rates`; return it and every tier's rate.

    Shared with emu/fabric/gpu.py's builders, which take the same `rates`.
    """
    rate_bps = _check_rate("rate_bps", rate_bps)
    out = {tier: rate_bps for tier in tiers}
    for key, value in dict(rates or {}).items():
        if key not in out:
            raise FabricSpecError(
                f"rates[{key!r}]: unknown tier; allowed: {', '.join(map(repr, out))}"
            )
        out[key] = _check_rate(f"rates[{key!r}]", value)
    return rate_bps, out


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
        >>> from emu.fabric import hosts, port_map, switch_links, switches
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
    params, time_scale = _leaf_spine_params(
        leaves,
        spines,
        hosts_per_leaf,
        host_rate_bps,
        fabric_rate_bps,
        oversubscription,
        uplinks_per_spine,
        delay_s,
        time_scale,
        modelled_rate_bps,
    )
    default_name = f"leaf_spine_{params['leaves']}l_{params['spines']}s_{params['hosts_per_leaf']}h"
    G = _new_graph("leaf_spine", _check_name(name, default_name), params, time_scale)
    _number_ports(G, params["delay_s"], _add_leaf_spine(G, params))
    validate(G)
    return G


def _leaf_spine_params(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    host_rate_bps: int,
    fabric_rate_bps: Optional[int],
    oversubscription: Optional[float],
    uplinks_per_spine: int,
    delay_s: float,
    time_scale: Optional[float],
    modelled_rate_bps: Optional[float],
) -> Tuple[Dict[str, Any], float]:
    """Check `leaf_spine`'s arguments in its order; return its ``params`` and time scale."""
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
    fabric_rate_bps = _uplink_rate(
        fabric_rate_bps, oversubscription, down_bps, up_links, host_rate_bps
    )
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
        oversubscription=down_bps / (up_links * fabric_rate_bps),
        uplinks_per_spine=uplinks_per_spine,
        delay_s=delay_s,
    )
    return params, time_scale


def _uplink_rate(
    fabric_rate_bps: Optional[int],
    oversubscription: Optional[float],
    down_bps: int,
    up_links: int,
    host_rate_bps: int,
) -> int:
    """The leaf-spine link rate: given, derived from `oversubscription`, or the host rate.

    Both given must agree (to the bit/s); neither given runs the fabric at
    `host_rate_bps`.
    """
    if fabric_rate_bps is not None:
        fabric_rate_bps = _check_rate("fabric_rate_bps", fabric_rate_bps)
    if oversubscription is None:
        return host_rate_bps if fabric_rate_bps is None else fabric_rate_bps
    oversubscription = _check_positive("oversubscription", oversubscription)
    derived = max(1, round(down_bps / (up_links * oversubscription)))
    if fabric_rate_bps is None:
        return derived
    if abs(fabric_rate_bps - derived) > max(1, 1e-9 * derived):
        actual = down_bps / (up_links * fabric_rate_bps)
        raise FabricSpecError(
            f"oversubscription={oversubscription!r} conflicts with "
            f"fabric_rate_bps={fabric_rate_bps!r}: those rates give {actual:g}; "
            "give one of them, or both agreeing"
        )
    return fabric_rate_bps


def _add_leaf_spine(G: nx.Graph, params: Mapping[str, Any]) -> List[Tuple[str, str, int, str]]:
    """Add the spines, leaves and hosts to `G`; return the links, host links first."""
    leaves, spines, per_leaf = params["leaves"], params["spines"], params["hosts_per_leaf"]
    links: List[Tuple[str, str, int, str]] = []
    for s in range(1, spines + 1):
        _add_switch(G, f"spine{s}", "spine", s)
    for leaf_no in range(1, leaves + 1):
        leaf = f"leaf{leaf_no}"
        _add_switch(G, leaf, "leaf", leaf_no)
        for n in range(per_leaf):
            index = (leaf_no - 1) * per_leaf + n + 1
            host = f"h{index}"
            _add_host(G, host, index, f"10.0.{leaf_no}.{n + 1}", leaf)
            links.append((host, leaf, params["host_rate_bps"], "host"))
    for leaf_no in range(1, leaves + 1):
        for s in range(1, spines + 1):
            links.append((f"leaf{leaf_no}", f"spine{s}", params["fabric_rate_bps"], "leaf-spine"))
    return links


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
        >>> from emu.fabric import hosts, port_map, switch_links, switches
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
    params, time_scale = _fat_tree_params(
        k, rate_bps, rates, delay_s, time_scale, modelled_rate_bps
    )
    k, tier_rates = params["k"], params["rates"]
    G = _new_graph("fat_tree", _check_name(name, f"fat_tree_k{k}"), params, time_scale)
    _add_fat_tree_switches(G, k)
    links = _add_fat_tree_hosts(G, k, tier_rates["host"]) + _fat_tree_switch_links(k, tier_rates)
    _number_ports(G, params["delay_s"], links)
    validate(G)
    return G


def _fat_tree_params(
    k: int,
    rate_bps: int,
    rates: Optional[Mapping[str, int]],
    delay_s: float,
    time_scale: Optional[float],
    modelled_rate_bps: Optional[float],
) -> Tuple[Dict[str, Any], float]:
    """Check `fat_tree`'s arguments in its order; return its ``params`` and time scale."""
    k = _check_int("k", k, 2, 254)
    if k % 2:
        raise FabricSpecError(f"k={k!r}: must be even (k pods of k/2 edge and k/2 agg switches)")
    rate_bps, tier_rates = _tier_rates(rate_bps, rates, ("host", "edge-agg", "agg-core"))
    delay_s = _check_nonneg("delay_s", delay_s)
    time_scale = _resolve_time_scale(time_scale, modelled_rate_bps, tier_rates["host"])
    half = k // 2
    _check_intf_names(
        [f"h{k**3 // 4}-eth0", f"e{k * half}-eth{k}", f"a{k * half}-eth{k}", f"c{half**2}-eth{k}"],
        f"k={k!r}",
    )
    return dict(k=k, rate_bps=rate_bps, rates=tier_rates, delay_s=delay_s), time_scale


def _add_fat_tree_switches(G: nx.Graph, k: int) -> None:
    """Add the cores, then each pod's edge and agg switches, pairwise."""
    half = k // 2
    for j in range(half):
        for i in range(half):
            _add_switch(G, f"c{j * half + i + 1}", "core", j * half + i + 1)
    for p in range(k):
        for s in range(half):
            n = p * half + s + 1
            _add_switch(G, f"e{n}", "edge", n, pod=p)
            _add_switch(G, f"a{n}", "agg", n, pod=p)


def _add_fat_tree_hosts(G: nx.Graph, k: int, rate_bps: int) -> List[Tuple[str, str, int, str]]:
    """Add k/2 hosts under every edge switch, addressed as in the paper; return their links."""
    half = k // 2
    links: List[Tuple[str, str, int, str]] = []
    index = 0
    for p in range(k):
        for s in range(half):
            edge = f"e{p * half + s + 1}"
            for i in range(half):
                index += 1
                host = f"h{index}"
                _add_host(G, host, index, f"10.{p}.{s}.{i + 2}", edge, pod=p)
                links.append((host, edge, rate_bps, "host"))
    return links


def _fat_tree_switch_links(
    k: int, tier_rates: Mapping[str, int]
) -> List[Tuple[str, str, int, str]]:
    """Every pod's edge-agg bipartite graph, then agg j of every pod to cores j*k/2+1.."""
    half = k // 2
    links: List[Tuple[str, str, int, str]] = []
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
    return links


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
        >>> from emu.fabric import expected_counts
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
