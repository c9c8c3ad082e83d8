"""The incast-plus-victim workload (emu/traffic/incast_victim.py) without a fabric: a fake
fabric and fake NICs for `run`, answers built by hand for `measure`, pcaps written with
emu's own frame builders for the wire counts and the credit audits."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from emu import fabric as fabric_mod
from emu.answers import NicSample, QueueSnapshot
from emu.proto import credit, pfc, roce
from emu.traffic import incast_victim
from emu.traffic.incast_victim import Collected, Tap, Workload

RATE_BPS = 10_000_000
GRAPH = fabric_mod.leaf_spine(
    leaves=2, spines=1, hosts_per_leaf=4, host_rate_bps=RATE_BPS, fabric_rate_bps=2 * RATE_BPS
)
W = Workload(("h1", "h2", "h5", "h6"), "h8", ("h3", "h7"))
TAPS = {
    "bottleneck": Tap("leaf2", "h8", sender="leaf2"),
    "spine-leaf2": Tap("leaf2", "spine1", sender="spine1"),
    "victim-sender": Tap("leaf1", "h3", sender="h3", victim_only=True),
}
BOTTLENECK_PORT = 4  # leaf2's port to h8


def mac(node: str) -> str:
    return GRAPH.nodes[node]["mac"]


def port_mac(switch: str, peer: str) -> str:
    """A made-up MAC for `switch`'s port towards `peer` (what `port_stats` would say)."""
    return "02:aa:00:00:%02x:%02x" % (int(switch[-1]), GRAPH.edges[switch, peer]["ports"][switch])


MACS = {
    GRAPH.edges[sw, peer]["intfs"][sw]: port_mac(sw, peer)
    for sw in fabric_mod.switches(GRAPH)
    for peer in GRAPH[sw]
}


def data(src: str, dst: str, dscp: int = roce.DSCP_DATA, psn: int = 0) -> bytes:
    s, d = GRAPH.nodes[src], GRAPH.nodes[dst]
    t = roce.DataTemplate(s["mac"], d["mac"], s["ip"], d["ip"], 49152, 5, dscp=dscp)
    return t.frame(roce.SEND_MIDDLE, psn, 1024)  # 1082 bytes: 17 blocks of 64


def fc(src_mac: str, vl: int, fctbs: int, fccl: int) -> bytes:
    return credit.build(credit.template(src_mac), credit.FcPacket(vl=vl, fctbs=fctbs, fccl=fccl))


def pcap(path: Path, frames: list[bytes]) -> Path:
    wrpcap(str(path), [Ether(f) for f in frames])
    return path


# ----- who sends, and where ---------------------------------------------------------


def test_workload_hosts_and_the_victims_lane():
    assert W.hosts == ["h1", "h2", "h3", "h5", "h6", "h7", "h8"]
    assert W.victim_vl == incast_victim.INCAST_PRIO == 3
    own = Workload(W.senders, W.receiver, W.victim, victim_dscp=34)
    assert own.victim_vl == 4  # DSCP 34 -> priority 4, the second lossless class


def test_a_taps_receiver_is_the_end_that_does_not_send():
    assert TAPS["bottleneck"].receiver == "h8"
    assert TAPS["spine-leaf2"].receiver == "leaf2"
    assert TAPS["victim-sender"].receiver == "leaf1"


def test_the_bottleneck_is_the_receivers_port_on_its_switch():
    assert incast_victim.bottleneck(GRAPH, "h8") == ("leaf2", BOTTLENECK_PORT)


# ----- what the pcaps and the answers say -------------------------------------------


def test_wire_counts_tell_pause_from_credit_frames(tmp_path):
    frames = [
        pfc.build(pfc.template(port_mac("leaf2", "h8")), {3: 100}),
        fc(mac("h8"), 3, 0, 100),
        fc(mac("h8"), 3, 0, 120),
        data("h1", "h8"),
    ]
    got = incast_victim.wire_counts(pcap(tmp_path / "l.pcap", frames))
    assert got == {"pause": 1, "flow_control": 2, "frames": 4}


def test_goodput_series_in_mbit_per_s_after_t0():
    samples = [
        NicSample(9.0, {}, {7: 0}, {}),  # before t0: left out
        NicSample(10.0, {}, {7: 0}, {}),
        NicSample(10.5, {}, {7: 125_000}, {}),  # 1 Mbit in 0.5 s
        NicSample(10.5, {}, {7: 125_000}, {}),  # no time passed: no point
        NicSample(11.5, {}, {}, {}),  # the QP not in it: 0 bytes
    ]
    ts, rates = incast_victim.goodput_series(samples, 7, t0=10.0)
    assert ts == [0.5, 1.5]
    assert rates == pytest.approx([2.0, -1.0])


def _counters(paused: dict, blocked: dict, drops: int = 0, pfc_tx: int = 0, fc_tx: int = 0):
    """A switch's counters: seconds paused per port (priority 3 and 4), credit lanes."""
    lanes = {
        port: {3: NS(blocked_s=s, overruns=1), 4: NS(blocked_s=9.0, overruns=0)}
        for port, s in blocked.items()
    }
    return NS(
        buffer=NS(drops={"ingress": drops}),
        pfc=NS(
            pfc_tx_frames={1: pfc_tx},
            paused_s={p: [0.0, 0.0, 0.0, s, 9.0, 0, 0, 0] for p, s in paused.items()},
        ),
        credit=NS(links=lanes, fc_tx_frames={1: fc_tx}),
    )


def _nic(paused: float = 0.0, blocked: float = 0.0, **kw):
    fields = dict(rx_overflow=0, send={}, cnps_sent=0, pause_tx=0, credit_overruns=0, fc_tx=0)
    return NS(
        paused_s=[0.0, 0.0, 0.0, paused, 5.0, 0, 0, 0],
        credit={3: NS(blocked_s=blocked), 4: NS(blocked_s=5.0)},
        **(fields | kw),
    )


def test_stalled_seconds_on_the_incasts_class_only():
    counters = {"leaf2": _counters({1: 0.0, 2: 1.5}, {1: 0.25, 2: 0.0})}
    nics = {"h1": _nic(paused=0.5, blocked=0.0), "h2": _nic(paused=0.0, blocked=0.75)}
    # Priority 4's seconds (9 and 5 above) never count: the incast's class is 3.
    assert incast_victim.stalled_s(counters, nics, credit=False) == {"leaf2:2": 1.5, "h1": 0.5}
    assert incast_victim.stalled_s(counters, nics, credit=True) == {"leaf2:1": 0.25, "h2": 0.75}


def test_credit_counts_sum_switches_and_nics():
    counters = {"leaf1": _counters({}, {1: 0.0, 2: 0.0}, fc_tx=7), "leaf2": _counters({}, {})}
    nics = {"h1": _nic(credit_overruns=1, fc_tx=3)}
    # Two lanes of VL 3 with an overrun each on leaf1, one on the NIC; 7 + 0 + 3 frames.
    assert incast_victim.credit_counts(counters, nics) == {"overruns": 3, "fc_frames_sent": 10}


def test_audits_check_each_taps_data_on_its_lane(tmp_path):
    h3, leaf1_h3 = mac("h3"), port_mac("leaf1", "h3")
    spine, leaf2 = port_mac("spine1", "leaf2"), port_mac("leaf2", "spine1")
    victim_w = Workload(W.senders, W.receiver, W.victim, victim_dscp=34)
    paths = {
        # h3 -> leaf1 on VL 4: a credit limit of 20 blocks; each frame takes 17 (1082
        # bytes), so the second (34 blocks sent) goes beyond it.
        "victim-sender": pcap(
            tmp_path / "v.pcap",
            [fc(h3, 4, 0, 0), fc(leaf1_h3, 4, 0, 20)]
            + [data("h3", "h7", dscp=34, psn=i) for i in range(2)],
        ),
        # spine1 -> leaf2 on VL 3: data to leaf2's hosts is audited, the frame to h1 (the
        # other way, and from leaf2's side) and the victim's VL 4 frame are not.
        "spine-leaf2": pcap(
            tmp_path / "s.pcap",
            [fc(spine, 3, 0, 0), fc(leaf2, 3, 0, 100), data("h1", "h8"), data("h2", "h7")]
            + [data("h8", "h1"), data("h3", "h7", dscp=34)],
        ),
        "bottleneck": pcap(tmp_path / "b.pcap", [data("h1", "h8")]),  # no credit seen yet
    }
    run = NS(pcaps=paths, macs=MACS)
    got = incast_victim.audits(GRAPH, victim_w, TAPS, run)
    assert list(got) == ["h3 -> leaf1", "leaf2 -> h8", "spine1 -> leaf2"]  # ordered by name
    assert got["h3 -> leaf1"] == {
        "data_frames": 2,
        "checked": 2,
        "violations": 1,
        "fc_from_sender": 1,
        "fc_from_receiver": 1,
    }
    assert got["spine1 -> leaf2"]["data_frames"] == 2
    assert (got["spine1 -> leaf2"]["checked"], got["spine1 -> leaf2"]["violations"]) == (2, 0)
    assert got["leaf2 -> h8"]["data_frames"] == 1 and got["leaf2 -> h8"]["checked"] == 0


def _collected(tmp_path, credit_frames: int = 0) -> Collected:
    """A run of 10 s from monotonic 100 (unix 5000): the receiver's NIC saw every
    sender's QP carry 1 Mbit/s and the victim's 0.5 Mbit/s; the bottleneck queue grew
    by 1000 B a second, one snapshot without the bottleneck's port."""
    qps = {s: 10 + i for i, s in enumerate(W.senders)}
    rx = [NicSample(100.0 + t, {}, {q: 125_000 * t for q in qps.values()}, {}) for t in range(11)]
    vrx = [NicSample(100.0 + t, {}, {20: 62_500 * t}, {}) for t in range(11)]
    samples = [
        QueueSnapshot(5000.0 + t, {BOTTLENECK_PORT: [0, 0, 0, 1000 * t, 7, 0, 0, 0]}, {}, {}, {})
        for t in range(11)
    ]
    samples.insert(3, QueueSnapshot(5002.5, {1: [0] * 8}, {}, {}, {}))
    pcaps = {
        name: pcap(tmp_path / f"{name}.pcap", [fc(mac("h8"), 3, 0, 9)] * credit_frames)
        for name in TAPS
    }
    nic_stats = {
        h: _nic(rx_overflow=1, send={1: NS(retransmitted=2)}, cnps_sent=3, pause_tx=4, fc_tx=1)
        for h in W.hosts
    }
    counters = {
        sw: _counters({1: 0.5}, {1: 0.0}, drops=1, pfc_tx=5) for sw in fabric_mod.switches(GRAPH)
    }
    return Collected(
        t0=100.0,
        wall0=5000.0,
        end=110.0,
        samples=samples,
        rx={"h8": rx, "h7": vrx},
        nic_stats=nic_stats,
        counters=counters,
        macs=MACS,
        qps=qps,
        victim_qp=20,
        pcaps=pcaps,
    )


def test_measure_over_the_window_after_warmup(tmp_path):
    r = incast_victim.measure(_collected(tmp_path), GRAPH, W, TAPS, warmup_s=2.0, credit=False)
    assert r["goodput_bps"] == pytest.approx({s: 1e6 for s in W.senders})
    assert r["incast_bps"] == pytest.approx(4e6) and r["victim_bps"] == pytest.approx(0.5e6)
    # From 2 s on: 2000 .. 10000 B, nine samples; the median is the fifth, 6000.
    assert (r["queue_p50_bytes"], r["queue_max_bytes"]) == (6000, 10000)
    assert len(r["series"]["queue"]) == 11  # the snapshot without the port is left out
    assert r["series"]["queue"][2] == (2.0, 2000)
    hosts, switches = len(W.hosts), len(fabric_mod.switches(GRAPH))
    assert r["switch_drops"] == switches and r["nic_drops"] == hosts
    assert r["retransmitted"] == 2 * hosts and r["cnps"] == 3 * hosts
    assert r["pause_frames_sent"] == 5 * switches + 4 * hosts
    assert r["stalled_s"] == {f"{sw}:1": 0.5 for sw in fabric_mod.switches(GRAPH)}
    assert r["wire"]["bottleneck"] == {"pause": 0, "flow_control": 0, "frames": 0}
    assert "audit" not in r and "overruns" not in r
    ts, rates = r["series"]["victim"]
    assert ts[0] == 1.0 and rates[0] == pytest.approx(0.5)


def test_measure_on_a_credit_fabric_audits_and_counts_credit(tmp_path):
    r = incast_victim.measure(
        _collected(tmp_path, credit_frames=2), GRAPH, W, TAPS, warmup_s=2.0, credit=True
    )
    assert set(r["audit"]) == {"h3 -> leaf1", "leaf2 -> h8", "spine1 -> leaf2"}
    assert r["fc_frames_sent"] == len(W.hosts)  # the switches' fc_tx_frames are 0 here
    assert r["overruns"] == len(fabric_mod.switches(GRAPH))  # one VL-3 lane each
    assert all(w["flow_control"] == 2 for w in r["wire"].values())
    assert r["stalled_s"] == {}  # credit lanes blocked 0 s on VL 3; PFC seconds do not count


# ----- the run on a fabric, faked ---------------------------------------------------


class FakeFabric:
    def __init__(self) -> None:
        self.calls: list = []

    def queues(self, switch: str) -> QueueSnapshot:
        self.calls.append(("queues", switch))
        return QueueSnapshot(0.0, {}, {}, {}, {})

    def counters(self, switch: str):
        return f"counters of {switch}"

    def port_stats(self, switch: str) -> dict:
        return {1: NS(name=f"{switch}-eth1", hw_addr=f"mac of {switch}-eth1")}

    def stop_proc(self, proc) -> None:
        self.calls.append(("stop", proc))


class FakeNics:
    made: list = []

    def __init__(self, fab, hosts, dcqcn=True) -> None:
        self.calls = [("start", hosts, dcqcn)]
        FakeNics.made.append(self)

    def connect(self, src, dst, dscp=roce.DSCP_DATA) -> int:
        self.calls.append(("connect", src, dst, dscp))
        return len(self.calls)

    def post(self, src, qpn, size_bytes, count) -> None:
        self.calls.append(("post", src, qpn, size_bytes, count))

    def nic_samples(self, host):
        return f"samples of {host}"

    def nic_stats(self, host):
        return f"stats of {host}"


def test_run_captures_posts_samples_and_reads(monkeypatch, tmp_path):
    captured = []

    def capture(fab, intf, path):
        captured.append((intf, path))
        return f"tcpdump {intf}"

    monkeypatch.setattr(incast_victim, "start_capture", capture)
    monkeypatch.setattr(incast_victim, "RdmaHosts", FakeNics)
    fab = FakeFabric()
    w = Workload(W.senders, W.receiver, W.victim, victim_dscp=34)
    got = incast_victim.run(fab, GRAPH, w, TAPS, tmp_path, 0.12, 65536, dcqcn=True)
    assert captured == [
        ("leaf2-eth4", tmp_path / "bottleneck.pcap"),
        ("leaf2-eth5", tmp_path / "spine-leaf2.pcap"),
        ("leaf1-eth3", tmp_path / "victim-sender.pcap"),
    ]
    nics = FakeNics.made[-1]
    assert nics.calls[0] == ("start", w.hosts, True)
    assert nics.calls[1:6] == [("connect", s, "h8", roce.DSCP_DATA) for s in w.senders] + [
        ("connect", "h3", "h7", 34)
    ]
    # Twice the receiver's rate for the run, plus a message: 2 x 10 Mbit/s x 0.12 s / 8 =
    # 300000 B + 65536 = 365536 B, in 5 + 1 = 6 messages of 64 KiB.
    posts = [c for c in nics.calls if c[0] == "post"]
    assert posts == [("post", s, got.qps[s], 65536, 6) for s in w.senders] + [
        ("post", "h3", got.victim_qp, 65536, 6)
    ]
    queues = [c for c in fab.calls if c[0] == "queues"]
    assert queues and set(queues) == {("queues", "leaf2")} and len(got.samples) == len(queues)
    assert fab.calls[-3:] == [("stop", f"tcpdump {i}") for i, _ in captured]
    assert got.rx == {"h8": "samples of h8", "h7": "samples of h7"}
    assert set(got.nic_stats) == set(w.hosts)
    assert got.counters["spine1"] == "counters of spine1"
    assert got.macs["leaf1-eth1"] == "mac of leaf1-eth1"
    assert got.pcaps == {name: tmp_path / f"{name}.pcap" for name in TAPS}
    assert 0.1 <= got.end - got.t0 < 5.0


# ----- report pieces -----------------------------------------------------------------


def _result(victim_bps: float, stalled: dict) -> dict:
    return {
        "goodput_bps": {s: 1.5e6 for s in W.senders},
        "incast_bps": 6e6,
        "victim_bps": victim_bps,
        "queue_p50_bytes": 1000,
        "queue_max_bytes": 2000,
        "stalled_s": stalled,
        "switch_drops": 1,
        "nic_drops": 2,
        "wire": {"a": {"pause": 3, "flow_control": 0}, "b": {"pause": 4, "flow_control": 5}},
        "cnps": 6,
        "series": {
            "queue": [(0.0, 10), (1.0, 20)],
            "victim": ([1.0], [2.0]),
            "incast": {s: ([1.0], [1.5]) for s in W.senders},
        },
    }


def test_table_row_per_mode_with_the_victims_slowdown():
    title, columns, rows = incast_victim.table(
        {"pfc": _result(1.5e6, {"h1": 0.5, "leaf2:5": 1.25})}, W, 9e6, 10.0
    )
    assert title.startswith("incast h1,h2,h5,h6 -> h8 and victim h3 -> h7 (10 Mbit/s")
    assert len(columns) == len(rows[0]) == 15
    assert columns[1:5] == ["h1 Mb/s", "h2 Mb/s", "h5 Mb/s", "h6 Mb/s"]
    assert rows[0] == ["pfc", 1.5, 1.5, 1.5, 1.5, 6.0, 1.5, 6.0, 1000, 2000, 1.75, 3, 7, 5, 6]


def test_panels_show_the_chosen_senders_and_the_longest_stalls():
    results = {
        "pfc": _result(1e6, {f"p{i}": float(i) for i in range(6)}),
        "dcqcn": _result(9e6, {}),
    }
    queue, victim, incast, stalled = incast_victim.panels(results, GRAPH, W, ("h1", "h5"))
    assert queue.title == "bottleneck queue leaf2 -> h8 (priority 3)"
    assert queue.lines["pfc"] == ([0.0, 1.0], [10, 20])
    assert set(victim.lines) == {"pfc", "dcqcn"}
    assert set(incast.lines) == {"pfc h1", "pfc h5", "dcqcn h1", "dcqcn h5"}
    assert stalled.bars == {"pfc\np5": 5.0, "pfc\np4": 4.0, "pfc\np3": 3.0, "pfc\np2": 2.0}
    # Nothing stalled: no bar panel; every sender shown by default.
    panels = incast_victim.panels({"dcqcn": results["dcqcn"]}, GRAPH, W)
    assert len(panels) == 3 and len(panels[2].lines) == 4
