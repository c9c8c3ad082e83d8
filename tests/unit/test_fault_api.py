"""The fault API's contract, on a fabric that only records: `at=` on every fault, NIC
faults that start the agents they need, and events stamped when the fault happened.

The faults' effect on real packets is tested in tests/integration/
(test_failures_with_plugin.py, test_straggler_fault.py, test_time_scale.py).
"""

from __future__ import annotations

import inspect
import re
import threading
import time
from types import SimpleNamespace

import pytest

from emu import fabric
from emu.faults import FaultError, Faults, parse_link_fault, scripted_link_fault
from emu.traffic import rdma

FAULTS = [
    name
    for name, fn in inspect.getmembers(Faults, inspect.isfunction)
    if not name.startswith("_") and name != "cancel"
]


def recording_fabric(calls: list, slow_s: float = 0.0):
    """A fabric whose every action records (name, args) and takes `slow_s`."""

    def act(name):
        def do(*args, **kwargs):
            time.sleep(slow_s)  # an action that takes time, as `ip link` or a restart does
            calls.append((name, args, kwargs))

        return do

    return SimpleNamespace(
        graph=fabric.leaf_spine(leaves=2, spines=1, hosts_per_leaf=1),
        **{
            n: act(n)
            for n in (
                "set_link",
                "switch_call",
                "kill_switch",
                "restart_switch",
                "kill_controller",
                "restart_controller",
                "set_host_tx_rate",
            )
        },
    )


class FakeAgents:
    """RdmaHosts whose agents record their calls (none started)."""

    started: list[list[str]] = []

    def __init__(self, fab, hosts):
        self.fab, self.nics, self.calls = fab, {}, []
        self.add(hosts)

    def add(self, hosts):
        new = [h for h in hosts if h not in self.nics]
        FakeAgents.started.append(new)
        for h in new:
            self.nics[h] = SimpleNamespace(
                call=lambda cmd, h=h, **kw: self.calls.append((h, cmd, kw)) or {}
            )
        return new


@pytest.fixture
def agents(monkeypatch):
    FakeAgents.started = []
    monkeypatch.setattr(rdma, "RdmaHosts", FakeAgents)
    return FakeAgents


def test_every_fault_takes_at():
    for name in FAULTS:
        assert "at" in inspect.signature(getattr(Faults, name)).parameters, name


@pytest.mark.parametrize("at", [-1, float("nan"), float("inf"), True, "1"])
def test_a_bad_at_is_refused_naming_it_before_anything_happens(at, agents):
    calls = []
    faults = Faults(recording_fabric(calls))
    tries = {
        "link_down": lambda: faults.link_down("spine1", "leaf1", at=at),
        "flap": lambda: faults.flap("spine1", "leaf1", period_s=1, count=1, at=at),
        "kill_switch": lambda: faults.kill_switch("spine1", at=at),
        "stuck_nic": lambda: faults.stuck_nic("h1", at=at),
        "slow_receiver": lambda: faults.slow_receiver("h1", 1e6, at=at),
        "watchdog": lambda: faults.watchdog(False, at=at),
        "ecn_thresholds": lambda: faults.ecn_thresholds(1000, 2000, at=at),
    }
    for name, attempt in tries.items():
        try:
            attempt()
        except FaultError as exc:
            assert str(exc).startswith(f"at={at!r}: "), (name, str(exc))
        else:
            pytest.fail(f"{name} took at={at!r}")
    assert calls == [] and faults.events == []


def test_a_nic_fault_starts_the_agent_it_needs_and_later_ones_reuse_it(agents):
    calls = []
    fab = recording_fabric(calls)
    faults = Faults(fab)
    faults.stuck_nic("h1")
    assert agents.started == [["h1"]]
    nics = faults.nics
    faults.slow_receiver("h2", 5e6)  # another host: added to the same set
    faults.stuck_nic("h1", stuck=False)
    assert faults.nics is nics and agents.started == [["h1"], ["h2"]]
    assert nics.calls == [
        ("h1", "set", {"stuck": True}),
        ("h2", "set", {"drain_rate_bps": 5e6}),
        ("h1", "set", {"stuck": False}),
    ]
    assert [e["kind"] for e in faults.events] == ["stuck_nic", "slow_receiver", "nic_recovered"]
    # A name that is no host starts nothing.
    with pytest.raises(FaultError, match="unknown host 'leaf1'"):
        faults.stuck_nic("leaf1")
    assert agents.started == [["h1"], ["h2"]]


def test_a_fault_at_a_time_fires_then_and_is_stamped_when_it_happened(agents):
    calls = []
    faults = Faults(recording_fabric(calls, slow_s=0.3))
    called = time.time()
    faults.link_down("spine1", "leaf1", at=0.2)
    faults.stuck_nic("h2", at=0.2)
    assert calls == [] and faults.events == []  # nothing yet: both are scheduled
    done = threading.Event()
    faults._later(0.9, done.set)  # after both (each action takes 0.3 s)
    assert done.wait(5)
    faults.cancel()
    assert [c[0] for c in calls] == ["set_link"]
    down, stuck = faults.events
    assert (down["kind"], stuck["kind"]) == ("link_down", "stuck_nic")
    # Stamped when each began, on time, not when its slow action returned.
    assert 0.2 <= down["wall"] - called < 0.2 + 0.25
    assert down["t"] == pytest.approx(down["wall"] - faults.t0, abs=1e-3)
    assert stuck["wall"] >= down["wall"] + 0.3  # the one worker runs them in turn


def test_a_fault_that_fails_later_is_kept_as_an_error_not_lost():
    def refuse(*args, **kwargs):
        raise RuntimeError("switch gone")

    fab = recording_fabric([])
    fab.kill_switch = refuse
    faults = Faults(fab)
    faults.kill_switch("spine1", at=0.05)
    done = threading.Event()
    faults._later(0.2, done.set)
    assert done.wait(5)
    faults.cancel()
    assert faults.errors == ["RuntimeError: switch gone"] and faults.events == []


def test_a_link_fault_in_words_is_read_against_the_graph():
    graph = fabric.leaf_spine(leaves=2, spines=2)
    assert parse_link_fault("link spine1-leaf1 flap at 2s", graph) == (
        "spine1",
        "leaf1",
        "flap",
        2.0,
        0.6,
        3,
    )
    assert parse_link_fault("link leaf1-spine2 down at 0.5", graph)[2:4] == ("down", 0.5)
    for text, words in [
        ("link spine9-leaf1 down at 1s", "unknown node 'spine9'"),
        ("link leaf1-leaf2 down at 1s", "no link leaf1-leaf2"),
        ("link spine1-leaf1 wobble at 1s", "expected link A-B down|flap"),
        ("link spine1-leaf1 flap at 1s every 0s", "a period > 0"),
    ]:
        with pytest.raises(FaultError, match=re.escape(words)):
            parse_link_fault(text, graph)


@pytest.mark.parametrize(
    "text", ["link spine1-leaf1 down at 0.2s", "link spine1-leaf1 flap at 0.1s every 0.1s count 2"]
)
def test_a_scripted_link_fault_ends_only_once_it_has_played_out(text):
    """Ended early (a short run), a down fault still goes down first, then comes back up:
    the heal waits for the fault's own events, not for a clock that the worker may lag."""
    calls = []
    faults = Faults(recording_fabric(calls, slow_s=0.01))
    end = scripted_link_fault(faults, text)
    end()  # at once: before the fault's moment
    links = [c[2]["up"] for c in calls if c[0] == "set_link"]
    assert links == ([False, True] if "down" in text else [False, True, False, True])
    faults.cancel()
