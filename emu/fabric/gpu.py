"""The GPU-cluster builders: `rail_optimized` (with its NVLink domains), `dragonfly`, `torus`."""

from __future__ import annotations

import itertools
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

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
from emu.fabric.clos import _tier_rates
from emu.fabric.contract import DEFAULT_RATE_BPS, FabricSpecError, hosts, validate

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
        >>> from emu.fabric import switch_links, switches
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
    params, time_scale = _dragonfly_params(
        groups,
        routers_per_group,
        hosts_per_router,
        global_links_per_router,
        rate_bps,
        rates,
        delay_s,
        time_scale,
        modelled_rate_bps,
    )
    default_name = (
        "dragonfly_{groups}g_{routers_per_group}a_{hosts_per_router}p_{global_links_per_router}h"
    ).format(**params)
    G = _new_graph("dragonfly", _check_name(name, default_name), params, time_scale)
    links = _add_dragonfly_routers(G, params)
    links += _dragonfly_local_links(params) + _dragonfly_global_links(params)
    _wire(G, params["delay_s"], links)
    validate(G)
    return G


def _dragonfly_params(
    groups: int,
    routers_per_group: int,
    hosts_per_router: int,
    global_links_per_router: int,
    rate_bps: int,
    rates: Optional[Mapping[str, int]],
    delay_s: float,
    time_scale: Optional[float],
    modelled_rate_bps: Optional[float],
) -> Tuple[Dict[str, Any], float]:
    """Check `dragonfly`'s arguments in its order; return its ``params`` and time scale."""
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
    return params, time_scale


def _router(group: int, r: int) -> str:
    """A dragonfly router's name: 0-based group and router in, 1-based name out."""
    return f"g{group + 1}r{r + 1}"


def _add_dragonfly_routers(
    G: nx.Graph, params: Mapping[str, Any]
) -> List[Tuple[str, int, str, int, int, str]]:
    """Add every group's routers, each with its hosts; return the host links."""
    g, a, p = params["groups"], params["routers_per_group"], params["hosts_per_router"]
    links: List[Tuple[str, int, str, int, int, str]] = []
    index = 0
    for i in range(g):
        for r in range(a):
            _add_switch(G, _router(i, r), "router", (i + 1) << 8 | (r + 1), group=i + 1)
            for n in range(p):
                index += 1
                host = f"h{index}"
                _add_host(G, host, index, f"10.{i + 1}.{r + 1}.{n + 1}", _router(i, r), group=i + 1)
                links.append((host, 0, _router(i, r), n + 1, params["rates"]["host"], "host"))
    return links


def _dragonfly_local_links(params: Mapping[str, Any]) -> List[Tuple[str, int, str, int, int, str]]:
    """Each group's routers, fully connected."""
    g, a, p = params["groups"], params["routers_per_group"], params["hosts_per_router"]
    rate_bps = params["rates"]["local"]
    links: List[Tuple[str, int, str, int, int, str]] = []
    for i in range(g):
        for r in range(a):
            for s in range(r + 1, a):
                # Router r's port to s: p + (s's rank among r's peers), and back.
                links.append((_router(i, r), p + s, _router(i, s), p + r + 1, rate_bps, "local"))
    return links


def _dragonfly_global_links(params: Mapping[str, Any]) -> List[Tuple[str, int, str, int, int, str]]:
    """The groups' global links in the consecutive arrangement (`dragonfly`'s docstring)."""
    g, a, p = params["groups"], params["routers_per_group"], params["hosts_per_router"]
    h = params["global_links_per_router"]
    links: List[Tuple[str, int, str, int, int, str]] = []
    for i in range(g):
        for k in range(a * h):
            offset, rnd = k % (g - 1) + 1, k // (g - 1)
            j, back = (i + offset) % g, rnd * (g - 1) + (g - 1 - offset)
            if (j, back) < (i, k):
                continue  # added from the other end
            links.append(
                (
                    _router(i, k // h),
                    p + a + k % h,
                    _router(j, back // h),
                    p + a + back % h,
                    params["rates"]["global"],
                    "global",
                )
            )
    return links


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
        >>> from emu.fabric import switch_links, switches
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
    params, time_scale = _torus_params(
        dims, hosts_per_switch, rate_bps, rates, delay_s, time_scale, modelled_rate_bps
    )
    shape = "x".join(map(str, params["dims"]))
    default_name = f"torus_{shape}_{params['hosts_per_switch']}h"
    G = _new_graph("torus", _check_name(name, default_name), params, time_scale)
    cells = list(itertools.product(*(range(d) for d in params["dims"])))
    links = _add_torus_switches(G, cells, params) + _torus_links(cells, params)
    _wire(G, params["delay_s"], links)
    validate(G)
    return G


def _torus_params(
    dims: Sequence[int],
    hosts_per_switch: int,
    rate_bps: int,
    rates: Optional[Mapping[str, int]],
    delay_s: float,
    time_scale: Optional[float],
    modelled_rate_bps: Optional[float],
) -> Tuple[Dict[str, Any], float]:
    """Check `torus`'s arguments in its order; return its ``params`` and time scale."""
    sizes = _check_dims(dims)
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
    longest = "_".join(str(d - 1) for d in sizes)
    _check_intf_names(
        [f"h{count * hps}-eth0", f"t{longest}-eth{hps + sum(_torus_widths(sizes))}"],
        f"dims={dims!r}",
    )
    params = dict(
        dims=sizes, hosts_per_switch=hps, rate_bps=rate_bps, rates=tier_rates, delay_s=delay_s
    )
    return params, time_scale


def _check_dims(dims: Any) -> List[int]:
    """A torus's sizes: 2 or 3 integers, each >= 2."""
    if (
        isinstance(dims, (str, bytes))
        or not isinstance(dims, Sequence)
        or len(dims) not in (2, 3)
        or any(isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in dims)
    ):
        raise FabricSpecError(f"dims={dims!r}: must be 2 or 3 sizes, each an integer >= 2")
    return [int(d) for d in dims]


def _torus_widths(sizes: Sequence[int]) -> List[int]:
    """The ports a switch spends on each dimension: one on a pair, else +1 and -1."""
    return [1 if d == 2 else 2 for d in sizes]


def _torus_switch(c: Sequence[int]) -> str:
    return "t" + "_".join(map(str, c))


def _add_torus_switches(
    G: nx.Graph, cells: List[Tuple[int, ...]], params: Mapping[str, Any]
) -> List[Tuple[str, int, str, int, int, str]]:
    """Add a switch per cell (row-major), each with its hosts; return the host links."""
    hps = params["hosts_per_switch"]
    links: List[Tuple[str, int, str, int, int, str]] = []
    index = 0
    for s, c in enumerate(cells, start=1):
        _add_switch(G, _torus_switch(c), "torus", s, coords=list(c))
        for n in range(hps):
            index += 1
            _add_host(G, f"h{index}", index, f"10.{s >> 8}.{s & 0xFF}.{n + 1}", _torus_switch(c))
            links.append((f"h{index}", 0, _torus_switch(c), n + 1, params["rates"]["host"], "host"))
    return links


def _torus_links(
    cells: List[Tuple[int, ...]], params: Mapping[str, Any]
) -> List[Tuple[str, int, str, int, int, str]]:
    """Each switch to its +1 neighbour in every dimension (which makes the -1 links too)."""
    sizes, hps = params["dims"], params["hosts_per_switch"]
    width = _torus_widths(sizes)
    links: List[Tuple[str, int, str, int, int, str]] = []
    for c in cells:
        for d, size in enumerate(sizes):
            if size == 2 and c[d] == 1:
                continue  # the pair's one link was added from coordinate 0
            up = list(c)
            up[d] = (c[d] + 1) % size
            plus = hps + 1 + sum(width[:d])
            minus = plus + width[d] - 1  # the same port when the size is 2
            links.append(
                (
                    _torus_switch(c),
                    plus,
                    _torus_switch(up),
                    minus,
                    params["rates"]["torus"],
                    "torus",
                )
            )
    return links


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
        >>> from emu.fabric import nvlink_domains, switch_links, switches
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
    params, time_scale = _rail_params(
        nodes,
        gpus_per_node,
        spines,
        host_rate_bps,
        fabric_rate_bps,
        nvlink_ratio,
        nvlink_domain,
        delay_s,
        time_scale,
        modelled_rate_bps,
    )
    default_name = "rail_{nodes}n_{gpus_per_node}g_{spines}s".format(**params)
    G = _new_graph("rail_optimized", _check_name(name, default_name), params, time_scale)
    _number_ports(G, params["delay_s"], _add_rails(G, params))
    validate(G)
    return G


def _rail_params(
    nodes: int,
    gpus_per_node: int,
    spines: int,
    host_rate_bps: int,
    fabric_rate_bps: Optional[int],
    nvlink_ratio: float,
    nvlink_domain: bool,
    delay_s: float,
    time_scale: Optional[float],
    modelled_rate_bps: Optional[float],
) -> Tuple[Dict[str, Any], float]:
    """Check `rail_optimized`'s arguments in its order; return its ``params`` and time scale."""
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
    return params, time_scale


def _add_rails(G: nx.Graph, params: Mapping[str, Any]) -> List[Tuple[str, str, int, str]]:
    """Add the spines, the rail leaves, every node's GPUs and NVLink domain; return the links."""
    n_nodes, gpus, spines = params["nodes"], params["gpus_per_node"], params["spines"]
    for s in range(1, spines + 1):
        _add_switch(G, f"spine{s}", "spine", s)
    for r in range(1, gpus + 1):
        _add_switch(G, f"rail{r}", "leaf", r, rail=r)
    links: List[Tuple[str, str, int, str]] = []
    for node in range(1, n_nodes + 1):
        for r in range(1, gpus + 1):
            index = (node - 1) * gpus + r
            _add_host(G, f"h{index}", index, f"10.0.{r}.{node}", f"rail{r}", node=node, rail=r)
            links.append((f"h{index}", f"rail{r}", params["host_rate_bps"], "host"))
    for r in range(1, gpus + 1):
        for s in range(1, spines + 1):
            links.append((f"rail{r}", f"spine{s}", params["fabric_rate_bps"], "leaf-spine"))
    if params["nvlink_domain"]:
        # Listed after the NIC links: a GPU's NIC stays port 0, its NVLink port 1.
        links += _add_nvlink_domains(G, params)
    return links


def _add_nvlink_domains(G: nx.Graph, params: Mapping[str, Any]) -> List[Tuple[str, str, int, str]]:
    """Add each node's NVSwitch and its GPUs' NVLink addresses; return the NVLink links."""
    n_nodes, gpus = params["nodes"], params["gpus_per_node"]
    links: List[Tuple[str, str, int, str]] = []
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
    return links


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
