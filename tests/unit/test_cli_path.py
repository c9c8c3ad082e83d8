"""`emu path`'s walk (emu/trace.py) on a topology graph with scripted switches, and the
`path` command of `emu cli` (no root: the switches' answers are played back)."""

from __future__ import annotations

import pytest

from emu import fabric as fabric_mod
from emu import trace
from emu.cli import _make_emu_cli


def scripted(graph, choices: dict[str, int]):
    """Switches that send every frame out of the port `choices` names (default: port 1)."""
    asked = []

    def ask(switch, in_port, frame_hex):
        asked.append((switch, in_port))
        port = choices.get(switch, 1)
        return {
            "entries": [(0, 10, 0)],
            "outputs": [(port, None, frame_hex)] if port else [],
            "controller": 0,
            "flowlet": [],
            "dropped": None if port else "no match",
        }

    return ask, asked


def test_the_walk_follows_each_switchs_port_and_names_where_it_stops():
    g = fabric_mod.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1)
    ports = {sw: {peer: e["ports"][sw] for peer, e in g[sw].items()} for sw in ("leaf1", "spine2")}
    ask, asked = scripted(
        g,
        {
            "leaf1": ports["leaf1"]["spine2"],
            "spine2": ports["spine2"]["leaf2"],
            "leaf2": g.edges["leaf2", "h2"]["ports"]["leaf2"],
        },
    )
    assert trace.trace_path(g, ask, "h1", "h2", "udp", 1000, 4791) == [
        "h1",
        "leaf1",
        "spine2",
        "leaf2",
        "h2",
    ]
    # Each switch was asked about the port the frame arrived on.
    assert asked[0] == ("leaf1", g.edges["h1", "leaf1"]["ports"]["leaf1"])
    assert asked[1] == ("spine2", g.edges["leaf1", "spine2"]["ports"]["spine2"])
    ask, _ = scripted(g, {"leaf1": ports["leaf1"]["spine2"], "spine2": 0})
    with pytest.raises(
        trace.TraceError,
        match=r"spine2 \(in port \d+\) sends it to ports \[\] "
        r"no match",
    ):
        trace.trace_path(g, ask, "h1", "h2")
    ask, _ = scripted(g, {"leaf1": ports["leaf1"]["spine2"], "spine2": ports["spine2"]["leaf1"]})
    with pytest.raises(trace.TraceError, match="loops at leaf1"):
        trace.trace_path(g, ask, "h1", "h2")
    for bad, msg in (
        (("h1", "leaf2"), "'leaf2': not a host"),
        (("h1", "h2", "icmp"), "must be tcp or udp"),
        (("h1", "h2", "tcp", 0), "sport=0: must be a port number"),
    ):
        with pytest.raises(trace.TraceError, match=msg):
            trace.trace_path(g, ask, *bad)


class _Fab:
    def trace_path(self, src, dst, proto, sport, dport):
        if dst == "h9":
            raise RuntimeError("'h9': not a host of this fabric")
        return [src, "leaf1", "spine1", "leaf2", dst] + [proto, str(sport), str(dport)]


def test_emu_cli_path_command(capsys):
    cls = _make_emu_cli()
    cli = cls.__new__(cls)  # without Mininet's __init__, which starts reading stdin
    cli.fab = _Fab()
    cli.do_path("h1 h2")
    assert capsys.readouterr().out.strip() == "h1 leaf1 spine1 leaf2 h2 tcp 49152 5201"
    cli.do_path("h1 h2 udp 40000 4791")
    assert capsys.readouterr().out.strip() == "h1 leaf1 spine1 leaf2 h2 udp 40000 4791"
    cli.do_path("h1 h9")
    assert capsys.readouterr().out.strip() == "path: 'h9': not a host of this fabric"
    cli.do_path("h1 h2 udp x 4791")
    assert capsys.readouterr().out.startswith("usage: path SRC DST")


def test_a_gpu_is_walked_from_its_nic_not_its_nvlink_port():
    g = fabric_mod.rail_optimized(nodes=2, gpus_per_node=2, spines=2)  # h1 on rail1, h4 on rail2
    ask, asked = scripted(
        g,
        {
            "rail1": g.edges["rail1", "spine2"]["ports"]["rail1"],
            "spine2": g.edges["spine2", "rail2"]["ports"]["spine2"],
            "rail2": g.edges["rail2", "h4"]["ports"]["rail2"],
        },
    )
    assert trace.trace_path(g, ask, "h1", "h4") == ["h1", "rail1", "spine2", "rail2", "h4"]
    assert asked[0] == ("rail1", g.edges["h1", "rail1"]["ports"]["rail1"])


def test_a_switch_that_places_each_packet_itself_is_named_not_walked():
    """Adaptive routing (emu/switch/adaptive.py) has no one path per flow: the walk stops
    at the first switch that chooses per packet and says which ports it chooses among."""
    g = fabric_mod.leaf_spine(2, 2, 1)
    ask, _ = scripted(g, {})

    def adaptive(switch, in_port, frame_hex):
        answer = ask(switch, in_port, frame_hex)
        answer["outputs"] = []  # the group's buckets are chosen per packet, not traced
        answer["adaptive"] = [{"group": 1, "prio": 3, "ports": [3, 4], "paused": [], "takes": 4}]
        return answer

    with pytest.raises(
        trace.TraceError,
        match=r"leaf1 picks among ports \[3, 4\] per packet \(adaptive routing for priority 3; "
        r"now port 4\), not per flow",
    ):
        trace.trace_path(g, adaptive, "h1", "h2")
