"""Import direction between the NIC model and the fabric driver.

emu/host/ is the NIC model and the host agent, which run inside the hosts;
emu/traffic/ drives workloads from the test or scenario process and imports
the host side (the ring, the data), never the other way. A function-level
import would hide a circle: outside `if TYPE_CHECKING:` there is none in
emu/host/ or in the collectives driver.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST_MODULES = sorted((ROOT / "emu" / "host").glob("*.py"))
NO_LOCAL_IMPORTS = HOST_MODULES + [
    ROOT / "emu" / "traffic" / "collectives.py",
    ROOT / "emu" / "traffic" / "rdma.py",
]


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module an `import` or `from ... import` anywhere in `tree` names."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def local_imports(tree: ast.Module) -> list[int]:
    """Lines of imports that are not at module level nor under `if TYPE_CHECKING:`."""
    allowed = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            allowed.add(id(node))
        elif isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            allowed |= {id(n) for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in allowed
    ]


@pytest.mark.parametrize("path", HOST_MODULES, ids=lambda p: p.name)
def test_host_side_never_imports_the_traffic_side(path):
    names = imported_modules(ast.parse(path.read_text(), str(path)))
    assert [n for n in names if n == "emu.traffic" or n.startswith("emu.traffic.")] == []


@pytest.mark.parametrize("path", NO_LOCAL_IMPORTS, ids=lambda p: p.name)
def test_no_function_level_imports(path):
    assert local_imports(ast.parse(path.read_text(), str(path))) == []


def test_the_host_agent_loads_nothing_of_the_driver():
    # What the agent process really loads, indirect imports included.
    code = (
        "import sys, emu.host.agent; "
        "print(sorted(m for m in sys.modules if m.startswith(('emu.traffic', 'emu.net'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
