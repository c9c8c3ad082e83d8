"""pytest plugin: fabric fixtures for failure-injection tests (entry point `pytest11`).

Owns the fixtures that engineers use in their own test suites and the
`emu_fabric` marker that shapes them:

- `fabric`: a running fabric (emu.net.Fabric) for one test, torn down after
  it whatever happens;
- `module_fabric`: one running fabric shared by every test of a module that
  asks for it (built once: a fabric takes seconds to boot), shaped by the
  module's `pytestmark`; a test that breaks it heals it;
- `testbed`: one live switch and no controller (emu/testbed.py).

Each fabric has the fault API at `fab.faults` (emu/faults.py: every fault
takes `at=`, NIC faults start the NIC agents they need) and workloads from
`fab.start("ping" | "iperf", src=..., dst=..., duration_s=...)`, whose
`wait()` gives a result object (emu/traffic/ping.py `PingResult`,
emu/traffic/iperf.py `IperfResult`).

    def test_my_job_survives_a_spine_failure(fabric):
        job = fabric.start("ping", src="h1", dst="h4", interval_s=0.02, duration_s=4)
        fabric.faults.link_down("spine1", "leaf2", at=1.0)
        result = job.wait()
        assert result.longest_outage_s < 1.0

`@pytest.mark.emu_fabric(...)` shapes the fabric: `topology=` names any
builder of emu/fabric/ (leaf_spine, the default: 2 leaves, 2 spines, 2 hosts
per leaf; fat_tree, dragonfly, torus, rail_optimized, single_switch) with
that builder's own keyword arguments, or `topo="file.yaml"` loads a topology
file (emu/topofile.py; a relative path is looked up beside the test file,
then in pytest's rootdir). The rest are the fabric's options (`FABRIC_OPTIONS`:
qos, host_nic_pacing, host_tcp_congestion, switch_processes, apps, controller_args, flow_control,
adaptive_routing, dragonfly_routing, seed, converge_timeout_s, log_level). The shape goes through emu's one
validator (emu/scenario.py `fabric_graph`): an unknown topology, keyword or
value fails the test in one line naming it, before anything is built, with
or without root. docs/pytest-plugin.md has the examples, run as tests.

The fabric fixtures need root (they build network namespaces) and skip,
saying so, without it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

MARKER = "emu_fabric"
# The fixture's leaf_spine when the marker does not say otherwise: the smallest
# fabric with two paths between every pair of leaves.
DEFAULT_FABRIC = {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}
# Marker keywords that are emu.net.Fabric's, not the builder's.
FABRIC_OPTIONS = (
    "qos",
    "host_nic_pacing",
    "host_tcp_congestion",
    "switch_processes",
    "apps",
    "controller_args",
    "flow_control",
    "adaptive_routing",
    "dragonfly_routing",
    "seed",
    "converge_timeout_s",
    "log_level",
    "servers",
)


class MarkerError(ValueError):
    """An `emu_fabric` marker that emu cannot build; the message names what is wrong."""


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(topology='leaf_spine', **builder_args, topo=FILE, qos=..., "
        "host_nic_pacing=..., switch_processes=..., apps=(...), controller_args=(...), "
        "flow_control=..., seed=...): the fabric that the `fabric` fixture (and, "
        "as a module's pytestmark, `module_fabric`) builds; topology is any builder "
        "of emu.fabric, topo a topology file (docs/pytest-plugin.md)",
    )


def fabric_spec(marker_kwargs: dict[str, Any], base_dirs=()) -> tuple[Any, dict[str, Any]]:
    """The graph and the Fabric options that an `emu_fabric` marker's keywords ask for.

    Pure: builds the networkx graph (no root, no processes) and checks the
    Fabric options by constructing, not opening, an emu.net.Fabric.

    Args:
        marker_kwargs: the marker's keywords (none: the default leaf_spine).
        base_dirs: where a relative `topo=` path is looked up, in order.

    Returns:
        (graph, options for emu.net.Fabric besides the graph and out_dir).

    Raises:
        MarkerError: an unknown topology, keyword or value; one line naming it.
    """
    from emu.net import Fabric
    from emu.registry import FabricError
    from emu.scenario import fabric_graph

    kwargs = dict(marker_kwargs)
    options: dict[str, Any] = {k: kwargs.pop(k) for k in FABRIC_OPTIONS if k in kwargs}
    for key in ("apps", "controller_args"):
        if key in options:
            value = options[key]
            if isinstance(value, str) or not all(isinstance(v, str) for v in value or ()):
                raise MarkerError(f"{MARKER}: {key}={value!r}: expected a tuple of strings")
            options[key] = tuple(value)
    topology = kwargs.pop("topology", "leaf_spine")
    topo = kwargs.pop("topo", None)
    if topo is not None:
        topo = _find_topo(topo, base_dirs)
    elif topology == "leaf_spine":
        kwargs = {**DEFAULT_FABRIC, **kwargs}
    try:
        if topo is not None and "topology" in marker_kwargs:
            raise MarkerError(f"topo={topo} and topology={topology!r}: give one of them")
        graph = fabric_graph(topology, topo=topo, **kwargs)
        # Constructing a Fabric validates its options (qos keys, switch_processes,
        # flow_control) and starts nothing.
        Fabric(graph, **options)
    except MarkerError as exc:
        raise MarkerError(f"{MARKER}: {exc}") from None
    except (ValueError, TypeError, FabricError) as exc:
        # ValueError: emu's one validation error (emu.config.ConfigError) and the
        # builders' (FabricSpecError); TypeError: a Fabric option of the wrong kind.
        raise MarkerError(f"{MARKER}: {exc}") from None
    return graph, options


def _find_topo(topo: Any, base_dirs) -> str:
    if not isinstance(topo, (str, os.PathLike)):
        raise MarkerError(f"{MARKER}: topo={topo!r}: expected a file name")
    path = Path(topo)
    if path.is_absolute():
        return str(path)
    tried = [Path(d) / path for d in base_dirs] or [path]
    for candidate in tried:
        if candidate.is_file():
            return str(candidate)
    raise MarkerError(
        f"{MARKER}: topo={str(topo)!r}: no such file in {' or '.join(str(t.parent) for t in tried)}"
    )


def _spec_for(node, request) -> tuple[Any, dict[str, Any]]:
    marker = node.get_closest_marker(MARKER)
    kwargs = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        pytest.fail(
            f"{MARKER}: takes keywords only, got {marker.args!r} (e.g. topology='fat_tree', k=4)",
            pytrace=False,
        )
    base_dirs = [Path(str(node.path)).parent, Path(str(request.config.rootpath))]
    try:
        return fabric_spec(kwargs, base_dirs)
    except MarkerError as exc:
        pytest.fail(str(exc), pytrace=False)


def _running(graph, options: dict[str, Any], out_dir: Path) -> Iterator[Any]:
    from emu.net import Fabric

    with Fabric(graph, out_dir=str(out_dir), **options) as fab:
        yield fab
        errors = list(fab.faults.errors)
    if errors:
        pytest.fail(f"scheduled faults failed: {'; '.join(errors)}", pytrace=False)


# What can excuse a failed check: the emulator's timing. A process that gave no
# record ("missing": hung, or dead with its socket left) is a defect, never an excuse.
TIMING_MEASURES = ("on_time", "stall", "deficit", "kernel_drops")
# What can excuse loss in a lossless class: a stall past PFC headroom, or frames the
# kernel dropped on the emulator's sockets (what a NIC then resends).
LOSSLESS_MEASURES = ("stall", "kernel_drops")


@contextmanager
def xfail_if_unfaithful(
    fab,
    *,
    hosts_tolerance: float | None = None,
    measures: tuple[str, ...] = TIMING_MEASURES,
    out_dir: Path | str | None = None,
):
    """Hold the checks in the block to the network only if the emulator kept up with it.

    A figure measured while the emulator fell behind its links (a switch or
    NIC agent sent frames late, stalled, lost link time or had frames dropped
    by the kernel: emu/fidelity.py) is the emulator's, not the emulated
    network's, so it is no evidence either way (DESIGN.md). When a check in
    the block fails, the fabric's fidelity window is judged: the window that
    began when the fabric converged, or at the last `fab.reset_fidelity()`
    (call it before the traffic a check measures, on a fabric that earlier
    tests used). If a measure of `measures` failed, the test is marked xfail
    with the verdict's reasons; if not, the failure stands. A check that
    passes is never judged. Put only the checks on rates and times in the
    block: a failed workload or a wrong count fails whatever the machine did.
    The fidelity records go to `out_dir` (default: `judged/` in the fabric's
    log folder).

    `hosts_tolerance`, for a check whose figure also rests on the hosts' own
    kernels (a TCP flow's rate: its ends' TCP, iperf3, the host NIC's token
    bucket), is the share of the figure the check lets go (0.1 for "at least
    0.9 of the link"). The hosts are not judged (emu/fidelity.py,
    `MachineSample`); when the VM's hypervisor took at least that share of the
    machine's CPU time over the window, the hosts' lost time alone could
    explain the miss, and a failure is xfail too, saying so. So is one
    while a host's NIC token bucket dropped frames of its host's own traffic
    in the window (`fab.host_nic_drops()`): a real NIC holds them, emu's
    16-frame bucket does not (docs/performance.md). Only a lower bound
    belongs there: a slow machine never makes a figure larger.

        fabric.reset_fidelity()
        result = fabric.start("iperf", src="h1", dst="h4", duration_s=3).wait()
        assert result.ok, result.error
        with xfail_if_unfaithful(fabric, hosts_tolerance=0.2):
            assert result.received_bps > 0.8 * link_bps
    """
    from emu import telemetry

    try:
        yield
    except AssertionError as failure:
        out = Path(out_dir or Path(fab.log_dir()) / "judged")
        try:
            judged = telemetry.judge_fidelity(fab, out)
            host_drops = {}
            if hosts_tolerance is not None:
                base = fab.host_nic_drops_at_reset
                host_drops = {
                    h: n - base.get(h, 0)
                    for h, n in fab.host_nic_drops().items()
                    if n > base.get(h, 0)
                }
        except Exception as exc:  # the check's own failure is what the test reports
            raise failure from exc
        _xfail_when_unfaithful(judged, failure, hosts_tolerance, measures, host_drops)
        raise


@contextmanager
def xfail_if_judged_unfaithful(
    judged,
    *,
    hosts_tolerance: float | None = None,
    measures: tuple[str, ...] = TIMING_MEASURES,
):
    """`xfail_if_unfaithful` for a fabric that is gone: `judged` is what
    emu.telemetry.judge_fidelity said while it ran (a module fixture's fabric)."""
    try:
        yield
    except AssertionError as failure:
        _xfail_when_unfaithful(judged, failure, hosts_tolerance, measures)
        raise


def _xfail_when_unfaithful(
    judged,
    failure: AssertionError,
    hosts_tolerance: float | None,
    measures: tuple[str, ...],
    host_drops: dict[str, int] | None = None,
) -> None:
    what = " ".join(str(failure).split()) or "a check failed"
    if any(f.measure in measures for f in judged.verdict.failures()):
        pytest.xfail(f"{what}: in an unfaithful run: {judged.reasons(measures)}")
    if hosts_tolerance is not None and host_drops:
        listed = ", ".join(f"{h} {n}" for h, n in sorted(host_drops.items()))
        pytest.xfail(
            f"{what}: in an unfaithful run: the switches kept up, but the hosts' NIC token "
            f"buckets dropped {sum(host_drops.values())} frames of their own traffic "
            f"({listed}), which a real NIC holds (Fabric.host_nic_drops)"
        )
    if hosts_tolerance is not None and judged.steal_share >= hosts_tolerance:
        pytest.xfail(
            f"{what}: in an unfaithful run: the switches kept up, but the hypervisor "
            f"took {judged.steal_share:.0%} of the machine's CPU time, at least the "
            f"check's {hosts_tolerance:.0%} tolerance, from the hosts whose traffic it measured"
        )


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"emu's {what} fixture needs root: it builds network namespaces")


@pytest.fixture
def fabric(request, tmp_path):
    """A running emu fabric (emu.net.Fabric) for this test, shaped by its `emu_fabric` marker."""
    graph, options = _spec_for(request.node, request)  # a bad marker fails here, root or not
    _need_root("fabric")
    yield from _running(graph, options, tmp_path / "emu")


@pytest.fixture(scope="module")
def module_fabric(request, tmp_path_factory):
    """One running emu fabric for every test of this module that asks for it.

    Shaped by the module's `pytestmark = pytest.mark.emu_fabric(...)`; a test's
    own marker cannot reshape a fabric already built, so a test that has one
    fails, saying so. Tests share its state: one that injects a fault heals it
    (or waits for its `at=` faults) before it ends. The leak check of
    tests/conftest.py leaves it out of each test's check and checks its
    teardown when the module ends.
    """
    graph, options = _spec_for(request.node, request)
    _need_root("module_fabric")
    out_dir = tmp_path_factory.mktemp(f"emu-{request.module.__name__.rsplit('.', 1)[-1]}")
    yield from _running(graph, options, out_dir)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """A test's own `emu_fabric` marker does not shape `module_fabric`: say so, not ignore it.

    Checked before any fixture is set up, so that nothing is built for a test
    that cannot run.
    """
    names = getattr(item, "fixturenames", ())
    if "module_fabric" not in names:
        return
    if "fabric" in names:
        pytest.fail(
            f"{item.name}: a test takes `fabric` or `module_fabric`, not both: two fabrics "
            "would share interface names",
            pytrace=False,
        )
    for node in item.listchain():
        if isinstance(node, (pytest.Session, pytest.Package, pytest.Module)):
            continue
        if any(m.name == MARKER for m in node.own_markers):
            pytest.fail(
                f"{item.name}: module_fabric is built once per module from the module's "
                f"pytestmark; this test's own {MARKER} marker would be ignored (use the "
                "`fabric` fixture, or move the marker to pytestmark)",
                pytrace=False,
            )


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
