"""pytest plugin: a `fabric` fixture for failure-injection tests (entry point `pytest11`).

Owns the fixture that engineers use in their own test suites: a small running
fabric (2 spines, 2 leaves, 2 hosts per leaf, the routing controller, emu
switches), torn down after the test whatever happens, with the fault API at
`fabric.faults` and workloads from `fabric.start(...)`. Mark a test with
`@pytest.mark.emu_fabric(...)` to change the fabric (leaf_spine's arguments,
or topology="fat_tree", k=4), its switches' QoS (qos={...}), its hosts' NICs
(host_nic_pacing=False: kernel traffic leaves a host as fast as its CPU
allows; by default at its link rate, as from a real NIC), how
many processes run its switches (switch_processes=2; 0 is one per switch;
by default one per CPU) or its controller (apps=("controllers.adaptive",), controller_args=("--poll-interval", "0.5")).

    def test_my_job_survives_a_spine_failure(fabric):
        job = fabric.start("ping", src="h1", dst="h4", interval_s=0.02, duration_s=4)
        fabric.faults.link_down("spine1", "leaf2", at=1.0)
        result = job.wait()
        assert result.longest_outage_s < 1.0

The fixture needs root (it builds network namespaces) and skips, saying so,
without it.

Also `testbed`: one live switch and no controller, for testing an OpenFlow
app or the switch itself with real frames (emu/testbed.py).
"""

from __future__ import annotations

import os

import pytest

DEFAULT_FABRIC = {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "emu_fabric(**kw): the fabric the `fabric` fixture builds "
        "(leaf_spine arguments, or topology='fat_tree', k=...; qos={...}; "
        "host_nic_pacing=False; switch_processes=N; apps=(...); controller_args=(...); "
        "modelled_rate_bps=... or time_scale=...)",
    )


@pytest.fixture
def fabric(request, tmp_path):
    """A running emu fabric (emu.net.Fabric) with `.faults` and `.start(...)`."""
    if os.geteuid() != 0:
        pytest.skip("emu's fabric fixture needs root: it builds network namespaces")
    from emu import fabric as fabric_mod
    from emu.net import Fabric

    marker = request.node.get_closest_marker("emu_fabric")
    options = dict(DEFAULT_FABRIC)
    if marker is not None:
        options.update(marker.kwargs)
    topology = options.pop("topology", "leaf_spine")
    qos = options.pop("qos", None)
    pacing = bool(options.pop("host_nic_pacing", True))
    processes = options.pop("switch_processes", None)
    controller = {
        key: tuple(options.pop(key)) for key in ("apps", "controller_args") if key in options
    }
    if topology == "fat_tree":
        graph = fabric_mod.fat_tree(**{k: v for k, v in options.items() if k not in DEFAULT_FABRIC})
    else:
        graph = fabric_mod.leaf_spine(**options)
    with Fabric(
        graph,
        out_dir=str(tmp_path / "emu"),
        qos=qos,
        host_nic_pacing=pacing,
        switch_processes=processes,
        **controller,
    ) as fab:
        yield fab
        errors = list(fab.faults.errors)
    if errors:
        pytest.fail(f"scheduled faults failed: {'; '.join(errors)}")


@pytest.fixture
def testbed(request, tmp_path):
    """One live emu switch whose ports end in the test's sockets (emu.testbed.SwitchTestbed).

    A 4-port switch with 8 tables at 100 Mbit/s, no controller: the test
    programs it (`testbed.controller()`, `testbed.ofctl(...)`), sends frames
    (`testbed.send(port, frame)`) and reads what leaves each port
    (`testbed.receive()`). Other arguments: parametrize indirectly with a dict
    of SwitchTestbed's, `@pytest.mark.parametrize("testbed", [{"n_ports": 2}],
    indirect=True)`. Torn down after the test whatever happens; needs root.
    """
    if os.geteuid() != 0:
        pytest.skip("emu's testbed fixture needs root: it makes veth pairs")
    from emu.testbed import SwitchTestbed

    kwargs = dict(getattr(request, "param", None) or {})
    kwargs.setdefault("out_dir", tmp_path / "testbed")
    with SwitchTestbed(**kwargs) as tb:
        yield tb
