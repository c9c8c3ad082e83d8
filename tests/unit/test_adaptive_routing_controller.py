"""The controller's side of per-packet adaptive routing (issue 31): the message builder,
the routing manager's messages per switch and class, and the launcher's option.

The manager's messages are applied to emu's own pipelines (`fakes.PipelineFabric`,
serialized by os-ken as on the wire), so a test sees the modes the switches
end up in and a packet's choice on a leaf. No root.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from os_ken.ofproto import ofproto_v1_3_parser as ofparser
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controllers import launch, ofmsg
from controllers.routing import RoutingConfig, RoutingManager
from emu.proto import ofext

from .fakes import PipelineFabric, leaf_spine, learn_all_hosts

REPO = Path(__file__).resolve().parents[2]


def wire(msg) -> bytes:
    msg.datapath = type("DP", (), {"ofproto": ofmsg.OFP, "ofproto_parser": ofmsg.PARSER})()
    msg.serialize()
    return bytes(msg.buf)


# ----- the message builder ---------------------------------------------------------------


def test_the_builder_says_what_ofext_says() -> None:
    msg = ofmsg.set_select_mode(group_id=None, adaptive_classes=0b1000)
    assert isinstance(msg, ofparser.OFPExperimenter)
    assert (
        wire(msg)[8:]
        == ofext.set_select_mode_message(ofext.OFPG_ALL, ofext.SELECT_MODE_ADAPTIVE, classes=8)[8:]
    )
    one = wire(ofmsg.set_select_mode(group_id=7, adaptive_classes=ofext.CLASSES_ALL))
    assert ofext.unpack_set_select_mode(one[16:]) == ofext.SetSelectMode(7, 2, 0, 0xFF)
    flowlet = wire(ofmsg.set_select_mode(group_id=None, flowlet_gap_us=250))
    assert ofext.unpack_set_select_mode(flowlet[16:]) == ofext.SetSelectMode(
        ofext.OFPG_ALL, 1, 250, 0
    )
    hashed = wire(ofmsg.set_select_mode(group_id=3))
    assert ofext.unpack_set_select_mode(hashed[16:]) == ofext.SetSelectMode(3, 0, 0, 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"adaptive_classes": 0},
        {"adaptive_classes": 0x100},
        {"adaptive_classes": 8, "flowlet_gap_us": 100},
        {"flowlet_gap_us": 0},
    ],
)
def test_the_builder_refuses_what_the_switch_would(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ofmsg.set_select_mode(group_id=None, **kwargs)


# ----- the routing manager ---------------------------------------------------------------


def test_the_config_names_a_bad_spec() -> None:
    with pytest.raises(ValueError, match="adaptive_routing='9'"):
        RoutingConfig(adaptive_routing="9")
    config = RoutingConfig(adaptive_routing="0,3;5=none;6=all", flowlet_gap_us=100)
    assert [config.adaptive_classes(d) for d in (1, 5, 6)] == [9, 0, 255]
    assert RoutingConfig().adaptive_classes(1) == 0


def build(**config) -> PipelineFabric:
    mgr = RoutingManager(RoutingConfig(expect_switches=6, expect_links=8, expect_hosts=4, **config))
    fab = PipelineFabric(leaf_spine(), mgr)
    fab.start()
    fab.settle()
    learn_all_hosts(fab)
    assert mgr.converged()
    return fab


def modes_sent(fab: PipelineFabric) -> dict[int, list]:
    """Per switch, the SET_SELECT_MODE bodies the manager sent it, in order."""
    out: dict[int, list] = {}
    for dpid, msg in fab.sent:
        if isinstance(msg, ofparser.OFPExperimenter) and msg.exp_type == ofext.EXP_SET_SELECT_MODE:
            out.setdefault(dpid, []).append(ofext.unpack_set_select_mode(bytes(msg.data)))
    return out


def test_every_switch_gets_its_classes_and_the_others_keep_flowlets() -> None:
    probe = PipelineFabric(leaf_spine(), RoutingManager(RoutingConfig()))
    l3 = probe.dpid["l3"]
    fab = build(adaptive_routing=f"3;{l3}=none", flowlet_gap_us=500)
    sent = modes_sent(fab)
    assert set(sent) == set(fab.dpids)
    for name, dpid in fab.dpid.items():
        if name == "l3":
            assert sent[dpid] == [ofext.SetSelectMode(ofext.OFPG_ALL, 1, 500, 0)]
            want = {"mode": "flowlet", "gap_s": 0.0005}
        else:
            assert sent[dpid] == [ofext.SetSelectMode(ofext.OFPG_ALL, 2, 0, 8)]
            want = {"mode": "adaptive", "classes": [3]}
        pipeline = fab.pipelines[dpid]
        assert pipeline.modes.default.describe() == want
        assert all(pipeline.modes.of(g).describe() == want for g in pipeline.groups)
    # A switch that reconnects gets its mode again, before its flows.
    l1 = fab.dpid["l1"]
    again = fab.mgr.switch_enter(l1, fab.ports_of(l1), fab.now + 1)
    modes = [m for d, m in again if isinstance(m, ofparser.OFPExperimenter)]
    assert len(modes) == 1 and ofext.unpack_set_select_mode(bytes(modes[0].data)).mode == 2


def test_without_the_option_routing_sends_no_mode() -> None:
    assert modes_sent(build()) == {}


def _roce(src_ip: str, dst_ip: str, sport: int, tos: int) -> bytes:
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:ff")
        / IP(src=src_ip, dst=dst_ip, tos=tos)
        / UDP(sport=sport, dport=4791)
        / (b"x" * 32)
    )


def test_a_leaf_places_each_packet_of_the_class_on_the_emptier_spine() -> None:
    fab = build(adaptive_routing="3")
    l1 = fab.dpid["l1"]
    pipeline = fab.pipelines[l1]
    uplinks = {fab.port[("l1", s)]: s for s in ("s1", "s2")}
    depth = {port: 0 for port in uplinks}
    pipeline.adaptive.egress = lambda port, prio, now: (depth.get(port, 0), False)
    src, dst = fab.graph.nodes["h1"], fab.graph.nodes["h3"]
    in_port = fab.host_loc["h1"][1]

    def spine(tos: int) -> str:
        frame = _roce(src["ip"], dst["ip"], 50000, tos)
        [(port, _frame, _q)] = pipeline.process(in_port, frame, fab.now)[0]
        return uplinks[port]

    one, other = sorted(uplinks)
    depth[one] = 10_000
    assert spine(26 << 2) == uplinks[other]
    depth[one], depth[other] = 0, 10_000
    assert spine(26 << 2) == uplinks[one]  # the same flow, the next packet: the other spine
    # Priority 0 is not enabled: one spine for the flow whatever the queues say.
    hashed = spine(0)
    depth[one], depth[other] = depth[other], depth[one]
    assert spine(0) == hashed
    assert pipeline.adaptive.counts()["decisions"] == 2


# ----- the launcher ----------------------------------------------------------------------


def test_the_launcher_passes_the_spec_to_the_apps(tmp_path: Path) -> None:
    parser = launch.build_parser()
    args = parser.parse_args(
        [
            "--ofp-tcp-listen-port",
            "6653",
            "--status-file",
            str(tmp_path / "s.json"),
            "--adaptive-routing",
            "3;0x10001=none",
            "controllers.routing",
        ]
    )
    argv = launch._os_ken_args(args)
    assert argv[argv.index("--adaptive-routing") + 1] == "3;0x10001=none"
    assert "--adaptive-routing" not in launch._os_ken_args(
        parser.parse_args(["--ofp-tcp-listen-port", "6653", "--status-file", "x", "a"])
    )


def test_the_launcher_refuses_a_bad_spec_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controllers.launch", "--ofp-tcp-listen-port", "6653"]
        + ["--status-file", "/tmp/x.json", "--adaptive-routing", "3;leaf1=4"]
        + ["controllers.routing"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == launch.EXIT_BAD_ARGS
    assert "leaf1" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout


# ----- the fabric API --------------------------------------------------------------------


def test_the_fabric_hands_the_controller_its_spec_with_dpids() -> None:
    from emu import fabric
    from emu.net import Fabric

    graph = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1)
    every = Fabric(graph, adaptive_routing="0,3")
    assert every.controller_args[-2:] == ("--adaptive-routing", "0,3")
    named = Fabric(graph, adaptive_routing={"*": "3", "spine2": "none", "leaf1": "all"})
    spine2, leaf1 = graph.nodes["spine2"]["dpid"], graph.nodes["leaf1"]["dpid"]
    spec = named.controller_args[-1]
    assert ofext.parse_adaptive_spec(spec) == {None: 8, spine2: 0, leaf1: 255}
    assert "--adaptive-routing" not in Fabric(graph).controller_args


@pytest.mark.parametrize(
    "value, needle",
    [("8", "8"), ({"leaf9": "3"}, "leaf9"), ({"h1": "3"}, "h1"), ({"leaf1": "x"}, "x")],
)
def test_the_fabric_names_a_bad_adaptive_routing(value, needle: str) -> None:
    from emu import fabric
    from emu.net import Fabric
    from emu.registry import FabricError

    graph = fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=1)
    with pytest.raises(FabricError, match=needle):
        Fabric(graph, adaptive_routing=value)
