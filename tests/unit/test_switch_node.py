"""The switch's Mininet node: how it turns a port's offloads off (no root, no ethtool run)."""

from __future__ import annotations

from emu.switch.node import OFFLOADS_OFF, disable_offloads


def test_offloads_go_off_in_one_ethtool_call():
    calls = []
    disable_offloads("leaf1-eth1", run_in=lambda argv: calls.append(argv) or 0)
    assert calls == [
        ["ethtool", "-K", "leaf1-eth1", *[w for f in OFFLOADS_OFF for w in (f, "off")]]
    ]


def test_an_ethtool_that_refuses_the_whole_list_gets_one_call_per_feature():
    calls = []
    disable_offloads(
        "h1-eth0", run_in=lambda argv: calls.append(argv) or (1 if len(calls) == 1 else 0)
    )
    assert len(calls) == 1 + len(OFFLOADS_OFF)
    assert calls[1:] == [["ethtool", "-K", "h1-eth0", f, "off"] for f in OFFLOADS_OFF]
