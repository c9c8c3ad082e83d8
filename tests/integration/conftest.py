"""Fixtures of the integration tests that hold one switch to account.

Owns `testbed`: one live emu switch (emu.testbed.SwitchTestbed) per test, its
ports ending in sockets of the test, torn down after the test whatever happens.
Root gating and the leak check are tests/conftest.py's.
"""

from __future__ import annotations

import pytest

from emu.testbed import SwitchTestbed


@pytest.fixture
def testbed(request, tmp_path):
    """A 4-port switch with 8 tables at 100 Mbit/s; the switch log is in tmp_path/testbed.

    Other arguments: parametrize indirectly with a dict of SwitchTestbed's,
    `@pytest.mark.parametrize("testbed", [{"n_ports": 2}], indirect=True)`.
    """
    kwargs = dict(getattr(request, "param", None) or {})
    kwargs.setdefault("out_dir", tmp_path / "testbed")
    with SwitchTestbed(**kwargs) as tb:
        yield tb
