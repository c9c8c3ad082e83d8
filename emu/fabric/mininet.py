"""The fabric graph as a Mininet ``Topo`` (Mininet is imported only when called)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

import networkx as nx

from emu.fabric.contract import host_port, validate

if TYPE_CHECKING:  # pragma: no cover
    from mininet.topo import Topo

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
