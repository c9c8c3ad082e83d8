"""The fabric graph's attribute contract: its constants, `validate`, and the queries on it.

Owns what every consumer of a fabric graph relies on (the contract itself is
written down in the package docstring, emu/fabric/__init__.py): the
subnets, roles, tiers and name limits, `FabricSpecError`, `validate`, and
the read-only queries (`hosts`, `switches`, `host_ports`, `network`,
`expected_counts`, `port_map`, ...). Builds nothing: the builders live in
emu/fabric/clos.py and emu/fabric/gpu.py.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Tuple

import networkx as nx

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

    __module__ = "emu.fabric"  # where users import it from, and what tracebacks name


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
        >>> from emu.fabric import rail_optimized
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


def natural_key(name: str) -> tuple:
    """'leaf10' after 'leaf9': node names compared by their text and numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


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
        >>> from emu.fabric import fat_tree
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
    _validate_graph_attrs(G)
    unique = _Uniques()
    for node, d in G.nodes(data=True):
        kind = d.get("kind")
        if kind == "switch":
            _validate_switch(node, d, unique)
        elif kind == "host":
            _validate_host(G, node, d, unique)
        else:
            raise FabricSpecError(f"node {node}: kind={kind!r}, allowed 'host' or 'switch'")
    for u, v, e in G.edges(data=True):
        _validate_link(u, v, e, unique)
    _validate_port_numbers(G)
    _validate_nvswitches(G)


class _Uniques:
    """The dpids, IPs, MACs and interface names seen so far, each with its owner."""

    def __init__(self) -> None:
        self.seen: Dict[str, Dict[Any, str]] = {"dpid": {}, "ip": {}, "mac": {}, "intf": {}}

    def __call__(self, what: str, value: Any, owner: str) -> None:
        seen = self.seen[what]
        if value in seen:
            raise FabricSpecError(f"{owner}: {what} {value!r} already used by {seen[value]}")
        seen[value] = owner


def _validate_graph_attrs(G: nx.Graph) -> None:
    """The graph's type and its `G.graph` keys."""
    if isinstance(G, nx.MultiGraph) or G.is_directed():
        raise FabricSpecError(f"graph type {type(G).__name__}: must be an undirected nx.Graph")
    for key in ("name", "kind", "params", "subnet", "time_scale"):
        if key not in G.graph:
            raise FabricSpecError(f"G.graph[{key!r}] missing")
    if G.graph["kind"] not in KINDS:
        raise FabricSpecError(f"G.graph['kind']={G.graph['kind']!r}: allowed {KINDS}")
    if G.graph["subnet"] != SUBNET:
        raise FabricSpecError(f"G.graph['subnet']={G.graph['subnet']!r}: must be {SUBNET!r}")


def _validate_switch(node: str, d: Mapping[str, Any], unique: _Uniques) -> None:
    """A switch's role, dpid (unique) and the tier its role gives."""
    role = d.get("role")
    if role not in SWITCH_ROLES:
        raise FabricSpecError(f"switch {node}: role={role!r}, allowed {sorted(SWITCH_ROLES)}")
    dpid = d.get("dpid")
    if isinstance(dpid, bool) or not isinstance(dpid, int) or not 0 < dpid < 1 << 64:
        raise FabricSpecError(f"switch {node}: dpid={dpid!r}, must be an int in 1..2^64-1")
    unique("dpid", dpid, f"switch {node}")
    if d.get("tier") != SWITCH_ROLES[role]:
        raise FabricSpecError(
            f"switch {node}: tier={d.get('tier')!r}, role {role} has tier {SWITCH_ROLES[role]}"
        )


def _validate_host(G: nx.Graph, node: str, d: Mapping[str, Any], unique: _Uniques) -> None:
    """A host's role and address, its one link to its leaf on port 0, and its NVLink port."""
    if d.get("role") != "host":
        raise FabricSpecError(f"host {node}: role={d.get('role')!r}, must be 'host'")
    if d.get("prefixlen") != PREFIXLEN:
        raise FabricSpecError(
            f"host {node}: {d.get('ip')}/{d.get('prefixlen')} must be in {SUBNET}"
        )
    _check_address(node, d, "", ipaddress.ip_network(SUBNET), _MAC_RE, "02:00:00", unique)
    leaf = d.get("leaf")
    nvlink = [p for p in G[node] if G.edges[node, p].get("tier") == "nvlink"]
    if G.degree(node) != 1 + len(nvlink) or len(nvlink) > 1 or leaf not in G[node]:
        raise FabricSpecError(
            f"host {node}: must have exactly one link to leaf={leaf!r}, "
            "and at most one NVLink link (tier 'nvlink') beside it"
        )
    if G.nodes[leaf].get("kind") != "switch" or leaf in nvlink:
        raise FabricSpecError(f"host {node}: leaf={leaf!r} is not a network switch")
    if G.edges[node, leaf]["ports"][node] != 0:
        # Mininet addresses a host's lowest port as the host itself.
        raise FabricSpecError(
            f"host {node}: its link to leaf={leaf} must be its port 0 (its NIC; "
            "an NVLink port is port 1)"
        )
    if nvlink:
        _validate_nvlink_port(G, node, d, nvlink[0], unique)


def _validate_link(u: str, v: str, e: Mapping[str, Any], unique: _Uniques) -> None:
    """A link's rate, delay, tier, and its two ends' ports and interface names."""
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
        _validate_intf(where, node, intfs[node], ports[node], unique)


def _validate_intf(where: str, node: str, intf: str, port: int, unique: _Uniques) -> None:
    """One link end's interface: named after its node and port, short enough for Linux, unique."""
    if intf != f"{node}-eth{port}":
        raise FabricSpecError(f"{where}: interface {intf!r} must be {node}-eth{port}")
    if len(intf) > MAX_INTF_NAME:
        raise FabricSpecError(
            f"{where}: interface name {intf!r} has {len(intf)} characters, "
            f"Linux allows at most {MAX_INTF_NAME}"
        )
    unique("intf", intf, where)


def _validate_port_numbers(G: nx.Graph) -> None:
    """Every node's ports are dense: a host's from 0, a switch's from 1."""
    for node, kind in G.nodes(data="kind"):
        numbers = sorted(G.edges[node, peer]["ports"][node] for peer in G[node])
        first = 0 if kind == "host" else 1
        if numbers != list(range(first, first + len(numbers))):
            raise FabricSpecError(
                f"{kind} {node}: ports {numbers} must be {first}..{first + len(numbers) - 1}"
            )


def _validate_nvlink_port(
    G: nx.Graph, host: str, d: Mapping[str, Any], nvswitch: str, unique: _Uniques
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
    unique: _Uniques,
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
