"""The leak check fails a fabric test that leaves something behind, and only then.

Each case runs an inner pytest session (pytester, in a subprocess) with this
suite's own tests/conftest.py and one test file under `integration/`, so the
inner tests get exactly the autouse check that the real ones get. The leaks
are veth pairs named like fabric ports (`h9N-eth0`, `h9N-eth1`; this kernel
has no dummy interfaces): no fabric needed.
The "fabric" of a module-scoped fixture is a registry run of the inner
session that records its interface, as `emu.net.Fabric` records its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emu import registry

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"


def inner_session(pytester, monkeypatch, tmp_path, test_source: str):
    """Run `test_source` as integration/test_inner.py under our conftest; its result."""
    # The inner session's registry is its own: it sees no run of this session.
    monkeypatch.setenv("EMU_REGISTRY_DIR", str(tmp_path / "registry"))
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    root: needs root and builds real namespaces\n")
    (pytester.path / "integration").mkdir()
    (pytester.path / "integration" / "test_inner.py").write_text(test_source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=120)


def delete(*names: str) -> None:
    for name in names:
        registry.delete_interface(name)


LEAKY_TEST = """
import subprocess


def test_builds_an_interface_and_leaves_it():
    subprocess.run(["ip", "link", "add", "h97-eth0", "type", "veth", "peer", "name", "h97-eth1"],
                   check=True)
"""


def test_a_test_that_leaves_an_interface_fails_naming_it(pytester, monkeypatch, tmp_path):
    try:
        result = inner_session(pytester, monkeypatch, tmp_path, LEAKY_TEST)
    finally:
        delete("h97-eth0")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_builds_an_interface_and_leaves_it*",
            "left behind: {'interfaces': ['h97-eth0', 'h97-eth1']*",
        ]
    )


HELD_FABRIC_TEST = '''
import subprocess

import pytest

from emu import registry


def build(tmp_path_factory, host):
    """A stand-in fabric: a run of this session that records its veth pair first."""
    run = registry.Run.create(log_dir=str(tmp_path_factory.mktemp("logs")), label="stand-in")
    run.add_interfaces([f"{host}-eth0", f"{host}-eth1"])
    subprocess.run(["ip", "link", "add", f"{host}-eth0", "type", "veth",
                    "peer", "name", f"{host}-eth1"], check=True)
    return run


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    run = build(tmp_path_factory, "h96")
    yield run
    if TEAR_DOWN_THE_MODULE_FABRIC:
        run.teardown()
    else:  # a teardown that forgets the interface it made
        run.manifest_path.unlink()


@pytest.fixture
def own(tmp_path_factory):
    run = build(tmp_path_factory, "h95")
    yield run
    run.teardown()


def test_first_user_of_the_shared_fabric(shared):
    assert registry.interface_exists("h96-eth0")


def test_second_user_with_a_fabric_of_its_own(shared, own):
    assert registry.interface_exists("h96-eth0") and registry.interface_exists("h95-eth0")
'''


@pytest.mark.parametrize("tear_down", [True, False], ids=["torn-down", "forgotten"])
def test_a_fabric_held_by_a_fixture_is_checked_when_it_is_torn_down(
    pytester, monkeypatch, tmp_path, tear_down
):
    source = f"TEAR_DOWN_THE_MODULE_FABRIC = {tear_down}\n" + HELD_FABRIC_TEST
    try:
        result = inner_session(pytester, monkeypatch, tmp_path, source)
    finally:
        delete("h96-eth0", "h95-eth0")
    # While the fixtures hold their fabrics, no test is blamed for them.
    if tear_down:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=2, errors=1)
        result.stdout.fnmatch_lines(
            [
                "*ERROR at teardown of test_second_user_with_a_fabric_of_its_own*",
                "left behind when the module's fixtures were torn down: "
                "{'interfaces': ['h96-eth0', 'h96-eth1']*",
            ]
        )


STOPPED_DURING_TEARDOWN_TEST = '''
import os
import pathlib
import signal
import subprocess

import pytest

from emu import registry

MARKS = pathlib.Path(os.environ["MARKS"])


@pytest.fixture
def fabric(tmp_path_factory):
    """A stand-in fabric: a run of this session that records its veth pair first."""
    run = registry.Run.create(log_dir=str(tmp_path_factory.mktemp("logs")), label="stand-in")
    run.add_interfaces(["h94-eth0", "h94-eth1"])
    subprocess.run(["ip", "link", "add", "h94-eth0", "type", "veth",
                    "peer", "name", "h94-eth1"], check=True)
    yield run
    run.teardown()
    (MARKS / "fabric torn down").touch()


@pytest.fixture
def traffic():
    yield
    os.kill(os.getpid(), signal.SIGTERM)  # CI's timeout, as the finalizers run
    (MARKS / "traffic stopped").touch()


def test_uses_the_fabric(fabric, traffic):  # traffic's finalizer runs first
    assert registry.interface_exists("h94-eth0")


def test_after_the_signal():
    (MARKS / "ran after the signal").touch()
'''


def test_sigterm_during_finalizers_lets_every_one_run_then_stops(pytester, monkeypatch, tmp_path):
    """Raised out of a finalizer, a KeyboardInterrupt cut it short and made pytest skip
    the test's finalizers after it: the fabric's here stayed up past its test (the
    module's leak check found it). The session stops once they are done instead."""
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("MARKS", str(marks))
    try:
        result = inner_session(pytester, monkeypatch, tmp_path, STOPPED_DURING_TEARDOWN_TEST)
    finally:
        delete("h94-eth0")
    assert sorted(p.name for p in marks.iterdir()) == ["fabric torn down", "traffic stopped"]
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.assert_outcomes(passed=1)  # and no leak check failed
    result.stdout.fnmatch_lines(["*Interrupted: signal 15*"])
    assert "left behind" not in result.stdout.str() + result.stderr.str()
