"""A lossy port's deterministic mode: every n-th RoCEv2 frame it sends is lost, nothing else.

The drop of Guo et al. (SIGCOMM 2016, section 4), on a socketless datapath
(tests/unit/fakes.py `lite_datapath`) whose port sends into a list.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from emu import fabric
from emu.cli import ctl_request
from emu.faults import FaultError, Faults
from emu.proto import roce
from emu.scenario import ScenarioError
from emu.switch.aggregation import AggEngine
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState

from .fakes import lite_datapath


class ListSock:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.sent.append(frame)
        return len(frame)


def datapath():
    ports = {
        n: PortState(n, f"s1-eth{n}", bytes([2, 0, 0, 0, 1, n]), 1_000_000_000) for n in (1, 2)
    }
    dp = lite_datapath(ports, Pipeline(n_tables=1, ports=ports), AggEngine(ports))
    dp.port_loss, dp.port_loss_every, dp.lost_frames = {}, {}, {}
    dp.loss_rng = random.Random(1)
    dp.port_socks = {n: ListSock() for n in ports}
    return dp


TMPL = roce.DataTemplate(
    "02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 49152, dest_qp=7
)
ARP = bytes.fromhex("ffffffffffff020000000001" + "0806") + bytes(28)


def send(dp, frames):
    now = 0.0
    for f in frames:
        dp._enqueue([(2, f, None)], 1, now)
        dp._send_due(2, dp.schedulers[2], now, float("inf"))
        now += 1e-3
    return dp.port_socks[2].sent


def test_every_nth_rocev2_frame_is_lost_and_other_frames_do_not_count():
    dp = datapath()
    dp._set_port_loss(2, every=4)
    frames = []
    for psn in range(20):
        frames.append(TMPL.frame(roce.SEND_MIDDLE, psn, 1024))
        if psn % 3 == 0:
            frames.append(ARP)  # kernel traffic on the same port: never lost, not counted
    out = send(dp, frames)
    psns = [roce.parse(f).psn for f in out if roce.is_rocev2(f)]
    assert psns == [p for p in range(20) if (p + 1) % 4 != 0]
    assert out.count(ARP) == 7 and dp.lost_frames == {2: 5}
    # Transmitted as far as the port's counters know: the link lost them.
    assert dp.ports[2].counters.tx_packets == len(frames)


def test_turning_it_off_and_bad_values():
    dp = datapath()
    assert dp._set_port_loss(2, every=256)["port_loss_every"] == {2: 256}
    assert dp._set_port_loss(2, every=0)["port_loss_every"] == {}
    assert send(dp, [TMPL.frame(roce.SEND_ONLY, p, 64) for p in range(300)])[299]
    for bad in (-1, 2.5, "x", True):
        with pytest.raises(ValueError, match="every="):
            dp._set_port_loss(2, every=bad)
    with pytest.raises(ValueError, match="unknown port 9"):
        dp._set_port_loss(9, every=4)


def test_emu_ctl_and_the_fault_api_say_every():
    assert ctl_request("switch", "loss", ["3", "every", "256"]) == (
        "set_port_loss",
        {"port_no": 3, "every": 256},
    )
    with pytest.raises(ScenarioError, match="PROBABILITY\\|every N"):
        ctl_request("switch", "loss", ["3"])
    calls = []
    fab = SimpleNamespace(
        graph=fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1),
        switch_call=lambda sw, cmd, **kw: calls.append((sw, cmd, kw)),
    )
    faults = Faults(fab)
    faults.lossy_link("leaf2", "h2", every=256, only_from="leaf2")
    port = fab.graph.edges["leaf2", "h2"]["ports"]["leaf2"]
    assert calls == [
        ("leaf2", "set_port_loss", {"port_no": port, "probability": 0.0, "every": 256})
    ]
    assert faults.events[-1]["every"] == 256
    with pytest.raises(FaultError, match="give one of them"):
        faults.lossy_link("leaf2", "h2", probability=0.1, every=256)
    with pytest.raises(FaultError, match="every=-2"):
        faults.lossy_link("leaf2", "h2", every=-2)
