"""The NIC's retransmit timeout against what the fabric's buffers can hold (issue 29).

The lossless buffer bound (emu/host/rto.py) is checked against the switch's
own admission code (emu/switch/buffer.py): each switch on the path is filled
until it refuses frames for one egress queue, and the time those bytes take
to drain at the egress rate, summed over the data's path and the ACK's, is
the worst queueing a packet that is not lost can meet. The RTO both NIC
engines compute (rnic.Rnic and nicpath.CRnic) must not be shorter.
"""

from __future__ import annotations

import argparse

import networkx as nx
import pytest

from emu import fabric
from emu.config import MTU_FRAME_BYTES, BufferSpec, CreditSpec, EcnSpec, PfcSpec, parse_qos
from emu.host import nicpath, rto
from emu.host.agent import _seconds
from emu.host.rnic import DATA_PRIO, NicConfig, Rnic, retransmit_timeout_s
from emu.switch.buffer import SharedBuffer

IBA_RTO_S = 4.096e-6 * 2**14  # NicConfig.rto_modelled_s: IB local ACK timeout, 14
ENGINES = [pytest.param(Rnic, id="python")]
if nicpath._nicpath is not None:
    ENGINES.append(pytest.param(nicpath.CRnic, id="c"))


def switch_buffer(graph, switch, qos):
    """The switch's real shared buffer (emu/switch/buffer.py), ports as the graph numbers them."""
    rates = {
        graph.edges[switch, n]["ports"][switch]: graph.edges[switch, n]["rate_bps"]
        for n in graph[switch]
    }
    delays = {
        graph.edges[switch, n]["ports"][switch]: graph.edges[switch, n]["delay_s"]
        for n in graph[switch]
    }
    return SharedBuffer(qos["buffer"], qos["pfc"], EcnSpec(enabled=False), rates, delays)


def filled_egress_bytes(graph, switch, out_port, qos):
    """Lossless bytes the switch admits for `out_port` before every other port is refused.

    Frames come from the other ports in turn, as many flows converging on one
    port do; whatever order, a full lossless queue is what a packet can meet.
    """
    buf = switch_buffer(graph, switch, qos)
    open_ports = [p for p in buf.port_rates if p != out_port]
    while open_ports:
        for p in list(open_ports):
            if buf.admit(p, DATA_PRIO, out_port, MTU_FRAME_BYTES, False, 0.0) is None:
                open_ports.remove(p)
    return buf.egress[(out_port, DATA_PRIO)]


def worst_hop_s(graph, switch, qos):
    """The longest a frame waits at `switch`: its fullest egress queue drained at the port's rate."""
    worst = 0.0
    for n in graph[switch]:
        edge = graph.edges[switch, n]
        held = filled_egress_bytes(graph, switch, edge["ports"][switch], qos)
        worst = max(worst, held * 8 / edge["rate_bps"])
    return worst


def measured_rtt_s(graph, path, qos):
    """Data one way through `path`'s switches, the ACK back through the same ones."""
    return 2 * sum(worst_hop_s(graph, s, qos) for s in path)


FABRICS = [
    # The builder's defaults (issue 29): a cross-pod path, 5 switches.
    pytest.param(lambda: fabric.fat_tree(k=4), "h1", "h16", id="fat_tree_k4_defaults"),
    pytest.param(
        lambda: fabric.fat_tree(k=4, rate_bps=10_000_000), "h1", "h16", id="fat_tree_k4_10M"
    ),
    pytest.param(
        lambda: fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1, host_rate_bps=20_000_000),
        "h1",
        "h2",
        id="livelock_fabric",
    ),
    pytest.param(
        lambda: fabric.single_switch(hosts=4, rate_bps=10_000_000), "h1", "h4", id="one_switch"
    ),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("build", "src", "dst"), FABRICS)
def test_the_rto_outlasts_the_paths_full_buffers(build, src, dst, engine):
    graph = build()
    qos = parse_qos({})
    net = fabric.network(graph)
    path = [n for n in nx.shortest_path(net, src, dst) if net.nodes[n]["kind"] == "switch"]
    worst = measured_rtt_s(graph, path, qos)
    rate = fabric.host_port(graph, src).rate_bps
    cfg = NicConfig(
        mac="02:00:00:00:00:01",
        ip="10.0.0.1",
        rate_bps=rate,
        modelled_rate_bps=rate * graph.graph["time_scale"],
        path_rtt_bound_s=rto.path_rtt_bound_s(graph, src, qos),
    )
    nic = engine(cfg, now=0.0)
    assert nic.rto_s >= worst, (
        f"RTO {nic.rto_s:.3f} s is shorter than {worst:.3f} s, the time the {len(path)} "
        f"switches' full queues on {src} -> {dst} and back take to drain"
    )
    # Not vacuous: the IBA timeout alone is shorter than that queueing at time scale 1.
    assert graph.graph["time_scale"] == 1.0 and IBA_RTO_S < worst


def test_the_worst_path_is_the_longest_and_the_bound_is_the_models():
    graph = fabric.fat_tree(k=4)  # 20 Mbit/s links, 4 ports per switch
    qos = parse_qos({})
    spec = BufferSpec()
    # Three other ports, each up to alpha x B plus its headroom (16 frames), one frame more.
    held = 3 * (spec.alpha_lossless * spec.size_bytes + 16 * MTU_FRAME_BYTES)
    per_switch = (held + MTU_FRAME_BYTES) * 8 / 20e6
    assert rto.switch_wait_bound_s(graph, "e1", qos) == pytest.approx(per_switch)
    # h1's farthest hosts are in other pods: edge, agg, core, agg, edge, both ways.
    assert rto.path_rtt_bound_s(graph, "h1", qos) == pytest.approx(2 * 5 * per_switch)
    # Within one edge switch the path would be one switch; the bound is the farthest one.
    one = fabric.single_switch(hosts=2, rate_bps=20_000_000)
    assert rto.path_rtt_bound_s(one, "h1", qos) < rto.path_rtt_bound_s(graph, "h1", qos)


def test_link_delay_and_nvlink_paths():
    qos = parse_qos({})
    g0 = fabric.fat_tree(k=4)
    g1 = fabric.fat_tree(k=4, delay_s=0.001)
    # Six links one way (host link included), both ways.
    extra = rto.path_rtt_bound_s(g1, "h1", qos) - rto.path_rtt_bound_s(g0, "h1", qos)
    assert extra >= 2 * 6 * 0.001
    rail = fabric.rail_optimized(nodes=2, gpus_per_node=2)
    nvsw = fabric.host_port(rail, "h1", "nvlink").switch
    # A GPU's NVLink port reaches its node's GPUs through one NVSwitch.
    assert rto.path_rtt_bound_s(rail, "h1", qos, port="nvlink") == pytest.approx(
        2 * rto.switch_wait_bound_s(rail, nvsw, qos, within=rail.subgraph([nvsw, *rail[nvsw]]))
    )


def test_egress_hold_in_each_flow_control_mode():
    spec = BufferSpec()
    ports = [(10_000_000, 0.0)] * 3
    pfc = PfcSpec()
    off = PfcSpec(enabled=False)
    no_credit = CreditSpec()
    assert rto.egress_hold_bytes(spec, pfc, no_credit, ports) == int(
        3 * (spec.alpha_lossless * spec.size_bytes + spec.headroom(10_000_000, 0.0))
    )
    # Never more than the switch's buffer.
    many = [(10_000_000, 0.0)] * 63
    assert rto.egress_hold_bytes(spec, pfc, no_credit, many) == spec.size_bytes
    # PFC off: the queue tail-drops above alpha_lossy x free.
    assert rto.egress_hold_bytes(spec, off, no_credit, ports) == int(
        spec.alpha_lossy * spec.size_bytes
    )
    credit = CreditSpec(enabled=True)
    assert rto.egress_hold_bytes(spec, off, credit, ports) == 3 * credit.vl_buffer_bytes * len(
        credit.priorities
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_the_modelled_iba_timeout_wins_when_it_is_longer(engine):
    # 10 Mbit/s standing for 25 Gbit/s: 67 ms x 2500 = 168 s, far above any queue.
    cfg = NicConfig(
        mac="02:00:00:00:00:01",
        ip="10.0.0.1",
        rate_bps=10_000_000,
        modelled_rate_bps=25e9,
        path_rtt_bound_s=3.7,
    )
    assert engine(cfg, now=0.0).rto_s == pytest.approx(IBA_RTO_S * 2500)
    assert retransmit_timeout_s(cfg) == pytest.approx(IBA_RTO_S * 2500)
    # No fabric known (a NIC built alone): the IBA timeout, as before.
    alone = NicConfig(
        mac="02:00:00:00:00:01", ip="10.0.0.1", rate_bps=10_000_000, modelled_rate_bps=10e6
    )
    assert engine(alone, now=0.0).rto_s == pytest.approx(IBA_RTO_S)


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "soon"])
def test_the_agent_refuses_a_bad_bound(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected seconds"):
        _seconds(text)
    assert _seconds("0.25") == 0.25
