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

Where things are: the contract's constants, `validate` and the queries in
emu/fabric/contract.py; the Clos builders in clos.py; the GPU-cluster
builders (rail-optimized with its NVLink domains, dragonfly, torus) in
gpu.py; `to_mininet` in mininet.py; what the builders share in _build.py.
"""

from __future__ import annotations

from emu.fabric._build import time_scale_for
from emu.fabric.clos import fat_tree, leaf_spine, single_switch
from emu.fabric.contract import (
    DEFAULT_RATE_BPS,
    KINDS,
    LINK_TIERS,
    LLDP_FRAMES_PER_S,
    LLDP_MIN_INTERVAL_S,
    MAX_INTF_NAME,
    NVLINK_NET,
    NVLINK_PREFIXLEN,
    PREFIXLEN,
    SUBNET,
    SWITCH_ROLES,
    FabricSpecError,
    HostPort,
    expected_counts,
    host_port,
    host_ports,
    hosts,
    lldp_interval_s,
    natural_key,
    network,
    port_map,
    switch_links,
    switches,
    validate,
)
from emu.fabric.gpu import NVLINK_RATIO, dragonfly, nvlink_domains, rail_optimized, torus
from emu.fabric.mininet import to_mininet

__all__ = [
    "DEFAULT_RATE_BPS",
    "KINDS",
    "LINK_TIERS",
    "LLDP_FRAMES_PER_S",
    "LLDP_MIN_INTERVAL_S",
    "MAX_INTF_NAME",
    "NVLINK_NET",
    "NVLINK_PREFIXLEN",
    "NVLINK_RATIO",
    "PREFIXLEN",
    "SUBNET",
    "SWITCH_ROLES",
    "FabricSpecError",
    "HostPort",
    "dragonfly",
    "expected_counts",
    "fat_tree",
    "host_port",
    "host_ports",
    "hosts",
    "leaf_spine",
    "lldp_interval_s",
    "natural_key",
    "network",
    "nvlink_domains",
    "port_map",
    "rail_optimized",
    "single_switch",
    "switch_links",
    "switches",
    "time_scale_for",
    "to_mininet",
    "torus",
    "validate",
]
