"""The pytest plugin's marker: every builder, topology files, and one clear line for bad input.

`fabric_spec` is pure (it builds the graph and constructs, without opening,
the Fabric), so these run without root. The last tests run pytest on a test
file with a bad marker, in a subprocess, and read what a user would see.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emu import fabric
from emu.pytest_plugin import DEFAULT_FABRIC, MarkerError, fabric_spec

REPO = Path(__file__).parents[2]
TOPOLOGIES = REPO / "topologies"


def test_no_marker_is_the_small_leaf_spine():
    graph, options = fabric_spec({})
    assert graph.graph["kind"] == "leaf_spine"
    assert graph.graph["params"]["leaves"] == DEFAULT_FABRIC["leaves"] == 2
    assert len(fabric.switches(graph)) == 4 and len(fabric.hosts(graph)) == 4
    assert options == {}


@pytest.mark.parametrize(
    "marker, kind, hosts",
    [
        ({"leaves": 3, "spines": 1, "hosts_per_leaf": 1}, "leaf_spine", 3),
        ({"topology": "fat_tree", "k": 4}, "fat_tree", 16),
        ({"topology": "dragonfly", "groups": 3, "routers_per_group": 2}, "dragonfly", 6),
        ({"topology": "torus", "dims": (2, 3)}, "torus", 6),
        ({"topology": "rail_optimized", "nodes": 2, "gpus_per_node": 2}, "rail_optimized", 4),
        ({"topology": "single_switch", "hosts": 3}, "single_switch", 3),
    ],
)
def test_every_builder_is_a_topology(marker, kind, hosts):
    graph, _ = fabric_spec(marker)
    assert graph.graph["kind"] == kind
    assert len(fabric.hosts(graph)) == hosts


def test_the_leaf_spine_defaults_fill_in_only_what_the_marker_leaves_out():
    graph, _ = fabric_spec({"spines": 1})
    assert graph.graph["params"]["spines"] == 1
    assert graph.graph["params"]["leaves"] == 2 and graph.graph["params"]["hosts_per_leaf"] == 2


def test_fabric_options_pass_through_to_the_fabric():
    _, options = fabric_spec(
        {
            "switch_processes": 0,
            "apps": ["controllers.adaptive"],
            "host_nic_pacing": False,
            "host_tcp_congestion": "reno",
        }
    )
    assert options == {
        "switch_processes": 0,
        "apps": ("controllers.adaptive",),
        "host_nic_pacing": False,
        "host_tcp_congestion": "reno",
    }


def test_a_topology_file_is_found_beside_the_test_then_in_the_rootdir(tmp_path):
    beside = tmp_path / "tests"
    beside.mkdir()
    graph, _ = fabric_spec({"topo": "topologies/fat-tree-k4.yaml"}, [beside, REPO])
    assert graph.graph["kind"] == "fat_tree"
    (beside / "mine.yaml").write_text((TOPOLOGIES / "leaf-spine-2x2.yaml").read_text())
    graph, _ = fabric_spec({"topo": "mine.yaml"}, [beside, REPO])
    assert len(fabric.switches(graph)) == 4
    graph, _ = fabric_spec({"topo": TOPOLOGIES / "ring4.yaml"})  # a Path, absolute
    assert graph.graph["kind"] == "custom"


@pytest.mark.parametrize(
    "marker, named",
    [
        ({"topology": "fat-tree"}, "'fat-tree'"),  # the typo that used to build leaf_spine
        ({"topology": "dragonfy"}, "'dragonfy'"),
        ({"topology": "torus", "leaves": 2}, "'leaves'"),  # used to be a TypeError
        ({"topology": "dragonfly", "k": 4}, "'k'"),
        ({"leaves": 2, "k": 4}, "'k'"),
        ({"topology": "fat_tree", "k": 3}, "k=3"),
        ({"leaves": 0}, "leaves"),
        ({"leaves": float("nan")}, "leaves"),
        ({"topology": "torus", "dims": "3x3"}, "dims"),
        ({"qos": {"nope": {}}}, "nope"),
        ({"switch_processes": -1}, "switch_processes=-1"),
        ({"apps": "controllers.adaptive"}, "apps="),
        ({"flow_control": "xon"}, "xon"),
        ({"host_tcp_congestion": "vegas2"}, "host_tcp_congestion: this kernel has no"),
        ({"topo": "no-such-file.yaml"}, "no-such-file.yaml"),
        ({"topo": 42}, "topo=42"),
        ({"topo": str(TOPOLOGIES / "ring4.yaml"), "leaves": 2}, "leaves"),
        ({"topo": str(TOPOLOGIES / "ring4.yaml"), "topology": "torus"}, "give one of them"),
    ],
)
def test_a_bad_marker_is_one_line_naming_what_is_wrong(marker, named):
    with pytest.raises(MarkerError) as caught:
        fabric_spec(marker, [REPO])
    message = str(caught.value)
    assert message.startswith("emu_fabric: ")
    assert named in message
    assert "\n" not in message


def run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_user_sees_the_bad_marker_in_one_line_before_anything_is_built(tmp_path):
    res = run_pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.emu_fabric(topology="fat-tree", k=4)
        def test_typo(fabric):
            raise AssertionError("never reached: the fixture fails first")
        """,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "emu_fabric: topology='fat-tree'" in res.stdout
    assert "never reached" not in res.stdout
    assert "Traceback" not in res.stdout and "fabric_spec" not in res.stdout
    assert "1 error" in res.stdout


def test_a_tests_own_marker_does_not_silently_miss_the_module_fabric(tmp_path):
    res = run_pytest(
        tmp_path,
        """
        import pytest

        @pytest.mark.emu_fabric(topology="fat_tree", k=4)
        def test_wants_its_own(module_fabric):
            raise AssertionError("never reached")

        def test_both(fabric, module_fabric):
            raise AssertionError("never reached")
        """,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "this test's own emu_fabric marker would be ignored" in res.stdout
    assert "takes `fabric` or `module_fabric`, not both" in res.stdout
    assert "never reached" not in res.stdout
    assert "2 error" in res.stdout


# ----- xfail_if_unfaithful: a rate check counts only when the emulator kept up -----


def _judged(faithful: bool, steal_s: float = 0.0):
    from emu import fidelity, telemetry

    finding = fidelity.Finding(
        "deficit", "leaf1 port 2", 0.031, 0.01, faithful, "leaf1 port 2 lost 91 ms of link time"
    )
    machine = {"window_s": 4.0, "steal_s": steal_s, "steal_share": steal_s / 8.0}
    return telemetry.Judged(fidelity.Verdict(worst={"deficit": finding}), machine)


class _Fab:
    """What xfail_if_unfaithful asks of a fabric, with its host NICs' drop counters."""

    def __init__(self, drops_at_reset=None, drops=None):
        self.host_nic_drops_at_reset = drops_at_reset or {}
        self.drops = drops or {}

    def log_dir(self) -> str:
        return "/nonexistent"

    def host_nic_drops(self) -> dict:
        return dict(self.drops)


@pytest.fixture
def judging(monkeypatch):
    """Record what xfail_if_unfaithful asks of emu.telemetry; answer with `judging.answer`."""
    from emu import telemetry

    class Calls:
        resets = 0
        judged = 0
        answer = None

    def reset(fab):
        Calls.resets += 1

    def judge(fab, out_dir):
        Calls.judged += 1
        return Calls.answer

    monkeypatch.setattr(telemetry, "reset_fidelity", reset)
    monkeypatch.setattr(telemetry, "judge_fidelity", judge)
    return Calls


def test_a_passing_rate_check_is_never_judged(judging):
    from emu.pytest_plugin import xfail_if_unfaithful

    with xfail_if_unfaithful(_Fab()):
        assert 19e6 > 0.8 * 20e6
    assert (judging.resets, judging.judged) == (0, 0)


def test_a_failed_check_in_an_unfaithful_run_is_xfail_naming_why(judging):
    from emu.pytest_plugin import xfail_if_unfaithful

    judging.answer = _judged(faithful=False, steal_s=2.86)
    with pytest.raises(pytest.xfail.Exception) as info:
        with xfail_if_unfaithful(_Fab()):
            assert 10e6 > 0.8 * 20e6, "TCP below the link"
    assert (judging.resets, judging.judged) == (0, 1)
    reason = str(info.value)
    assert "TCP below the link" in reason and "in an unfaithful run: " in reason
    assert "leaf1 port 2 lost 91 ms of link time" in reason
    assert "the hypervisor took 2.86 s of CPU" in reason


def test_a_failed_check_in_a_faithful_run_fails(judging):
    from emu.pytest_plugin import xfail_if_judged_unfaithful, xfail_if_unfaithful

    judging.answer = _judged(faithful=True)
    with pytest.raises(AssertionError, match="TCP below the link"):
        with xfail_if_unfaithful(_Fab()):
            assert 10e6 > 0.8 * 20e6, "TCP below the link"
    with pytest.raises(AssertionError, match="TCP below the link"):
        with xfail_if_judged_unfaithful(_judged(faithful=True)):
            assert 10e6 > 0.8 * 20e6, "TCP below the link"
    with pytest.raises(pytest.xfail.Exception):
        with xfail_if_judged_unfaithful(_judged(faithful=False)):
            assert 10e6 > 0.8 * 20e6, "TCP below the link"


def test_an_error_that_is_not_a_failed_check_is_never_excused(judging):
    from emu.pytest_plugin import xfail_if_unfaithful

    judging.answer = _judged(faithful=False)
    with pytest.raises(KeyError):
        with xfail_if_unfaithful(_Fab()):
            {}["sum_received"]
    assert judging.judged == 0


def test_a_process_that_gave_no_record_makes_the_window_unfaithful(monkeypatch, tmp_path):
    """As the scenarios' check: a run is not faithful on processes nobody could ask."""
    from emu import telemetry

    document = {"processes": [], "missing": ["leaf1"], "machine": {"steal_s": 0.0}}
    monkeypatch.setattr(telemetry, "collect_fidelity", lambda fab, out_dir: document)
    judged = telemetry.judge_fidelity(_Fab(), tmp_path)
    assert not judged.faithful
    assert judged.reasons() == "no fidelity record from leaf1"


def test_hosts_tolerance_excuses_a_miss_only_when_the_hypervisor_took_that_much(judging):
    """The hosts' kernels are not judged: a TCP check that lets 10% go is excused in a
    run whose switches kept up only when steal took at least 10% of the CPU time."""
    from emu import fidelity, telemetry
    from emu.pytest_plugin import xfail_if_unfaithful

    cpus = os.cpu_count() or 1

    def faithful_with_steal(share: float):
        machine = {"window_s": 4.0, "steal_s": share * 4.0 * cpus, "steal_share": share}
        return telemetry.Judged(fidelity.Verdict(), machine)

    judging.answer = faithful_with_steal(0.37)
    with pytest.raises(pytest.xfail.Exception, match="took 37% of the machine's CPU time"):
        with xfail_if_unfaithful(_Fab(), hosts_tolerance=0.1):
            assert 14.7e6 >= 0.9 * 20e6
    judging.answer = faithful_with_steal(0.02)  # a quiet VM: the miss stands
    with pytest.raises(AssertionError):
        with xfail_if_unfaithful(_Fab(), hosts_tolerance=0.1):
            assert 14.7e6 >= 0.9 * 20e6
    judging.answer = faithful_with_steal(0.37)  # without a tolerance the hosts excuse nothing
    with pytest.raises(AssertionError):
        with xfail_if_unfaithful(_Fab()):
            assert 14.7e6 >= 0.9 * 20e6


def test_only_the_named_measures_excuse_and_a_silent_process_never_does(judging):
    """Loss in a lossless class is excused by a stall or kernel drops, not by a late
    port elsewhere; a switch that gave no record is a defect, not an excuse."""
    from emu import fidelity, telemetry
    from emu.pytest_plugin import LOSSLESS_MEASURES, xfail_if_unfaithful

    def failing(measure: str):
        finding = fidelity.Finding(measure, "leaf1", 1, 0, False, f"{measure} failed at leaf1")
        return telemetry.Judged(fidelity.Verdict(worst={measure: finding}), {})

    judging.answer = failing("deficit")
    with pytest.raises(AssertionError, match="dropped"):
        with xfail_if_unfaithful(_Fab(), measures=LOSSLESS_MEASURES):
            raise AssertionError("spine1 dropped frames")
    judging.answer = failing("stall")
    with pytest.raises(pytest.xfail.Exception, match="stall failed at leaf1"):
        with xfail_if_unfaithful(_Fab(), measures=LOSSLESS_MEASURES):
            raise AssertionError("spine1 dropped frames")
    judging.answer = failing("missing")
    with pytest.raises(AssertionError, match="TCP below the link"):
        with xfail_if_unfaithful(_Fab(), hosts_tolerance=0.2):
            raise AssertionError("TCP below the link")


def test_a_failure_to_judge_leaves_the_checks_own_failure(monkeypatch):
    from emu import telemetry
    from emu.pytest_plugin import xfail_if_unfaithful

    def broken(fab, out_dir):
        raise OSError("disk full")

    monkeypatch.setattr(telemetry, "judge_fidelity", broken)
    with pytest.raises(AssertionError, match="TCP below the link") as info:
        with xfail_if_unfaithful(_Fab()):
            raise AssertionError("TCP below the link")
    assert isinstance(info.value.__cause__, OSError)


def test_frames_a_host_nic_dropped_in_the_window_excuse_a_tcp_miss(judging):
    """A real NIC holds what its host sends; emu's 16-frame token bucket drops the
    rest, and TCP then resends thousands (CI: 6046 resent, 0.73 of the link, every
    switch faithful). Drops before the window, or no tolerance given, excuse nothing."""
    from emu import fidelity, telemetry
    from emu.pytest_plugin import xfail_if_unfaithful

    judging.answer = telemetry.Judged(fidelity.Verdict(), {"steal_share": 0.02})
    fab = _Fab(drops_at_reset={"h1": 100, "h2": 0}, drops={"h1": 9210, "h2": 0})
    with pytest.raises(pytest.xfail.Exception, match=r"dropped 9110 frames .*\(h1 9110\)"):
        with xfail_if_unfaithful(fab, hosts_tolerance=0.2):
            raise AssertionError("TCP below the link")
    before = _Fab(drops_at_reset={"h1": 9210}, drops={"h1": 9210})
    with pytest.raises(AssertionError):
        with xfail_if_unfaithful(before, hosts_tolerance=0.2):
            raise AssertionError("TCP below the link")
    with pytest.raises(AssertionError):
        with xfail_if_unfaithful(fab):
            raise AssertionError("TCP below the link")
