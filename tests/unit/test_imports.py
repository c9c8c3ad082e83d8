"""How emu's modules import each other: no circle, process hygiene has one home,
and no test module imports another (shared test helpers live in tests/unit/fakes.py).

Reads the source with `ast` (nothing is imported), so that a function-level
import counts as much as a module-level one: an import deferred into a
function may defer a heavy module (Mininet, matplotlib), never hide a circle.
Imports under `if TYPE_CHECKING:` are for annotations only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` (a package is its __init__)."""
    mods = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(dotted name, line, at module level) of every import that runs, at any depth.

    `from a.b import c` gives "a.b.c" (c may be a module or a name in a.b).
    """
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt, top)
                continue
            visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                package = (
                    module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                )
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            found.extend((f"{base}.{alias.name}", node.lineno, top) for alias in node.names)
        else:
            inside = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(node, top and not inside)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module of `mods` that importing `name` runs last (longest dotted prefix)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: str = "emu", module_level_only: bool = False) -> nx.DiGraph:
    """Module -> module it imports, within `package` (edges carry the line)."""
    mods = _modules(package)
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for module, path in mods.items():
        for name, line, top in _imported_names(module, path):
            target = _resolve(name, mods)
            if target is None or target == module or (module_level_only and not top):
                continue
            graph.add_edge(module, target, line=line)
    return graph


def _describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    steps = zip(cycle, cycle[1:] + cycle[:1])
    return " -> ".join(f"{u}:{graph.edges[u, v]['line']}" for u, v in steps)


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "all"])
def test_no_import_circle_in_emu(module_level_only):
    graph = import_graph("emu", module_level_only)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import circles in emu/:\n" + "\n".join(_describe(graph, c) for c in cycles)


def test_the_graph_sees_what_net_imports():
    """The checker itself: emu.net's edges, module-level and deferred, are in the graph."""
    graph = import_graph("emu")
    for target in (
        "emu.registry",
        "emu.telemetry",
        "emu.faults",
        "emu.traffic.iperf",
        "emu.traffic.ping",
        "emu.switch.node",
    ):
        assert graph.has_edge("emu.net", target), target
    # emu.net imports emu.switch.node only inside Fabric.open (Mininet), and
    # iperf imports emu.net only for annotations.
    assert not import_graph("emu", module_level_only=True).has_edge("emu.net", "emu.switch.node")
    assert not graph.has_edge("emu.traffic.iperf", "emu.net")


def test_controllers_never_import_the_switch_or_the_fabric_driver():
    """DESIGN.md: controllers drive any OpenFlow 1.3 switch."""
    for module, path in _modules("controllers").items():
        for name, line, _top in _imported_names(module, path):
            assert not name.startswith(("emu.switch", "emu.net")), f"{path}:{line} imports {name}"


HYGIENE = {"wait_for", "free_tcp_port", "die_with_parent"}


def test_process_hygiene_has_one_home():
    """wait_for, free ports and die-with-parent are defined in emu/registry.py only."""
    homes: dict[str, list[str]] = {}
    for package in ("emu", "controllers", "bench", "scenarios"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name.lstrip("_") in HYGIENE
                ):
                    homes.setdefault(node.name.lstrip("_"), []).append(
                        f"{path.relative_to(REPO)}:{node.lineno}"
                    )
                if isinstance(node, ast.Attribute) and node.attr == "prctl":
                    homes.setdefault("prctl", []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert {name: [h.split(":")[0] for h in where] for name, where in homes.items()} == {
        "wait_for": ["emu/registry.py"],
        "free_tcp_port": ["emu/registry.py"],
        "die_with_parent": ["emu/registry.py"],
        "prctl": ["emu/registry.py"],
    }, homes


def imports_of_test_modules(root: Path) -> list[str]:
    """`path:line imports name` for every import, in a test_*.py under `root`, of another one."""
    mods = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    found = []
    for module, path in mods.items():
        if not path.name.startswith("test_"):
            continue
        for name, line, _top in _imported_names(module, path):
            target = _resolve(name, mods)
            if target and target != module and mods[target].name.startswith("test_"):
                found.append(f"{path.relative_to(root.parent)}:{line} imports {target}")
    return list(dict.fromkeys(found))  # one line per imported module, not per name


def test_no_test_module_imports_another():
    """Shared helpers live in tests/unit/fakes.py, never in a test module others import."""
    assert imports_of_test_modules(REPO / "tests") == []


def test_the_checker_sees_a_test_importing_another(tmp_path):
    pkg = tmp_path / "tests"
    (pkg / "unit").mkdir(parents=True)
    for name in ("__init__.py", "unit/__init__.py", "unit/fakes.py", "unit/test_b.py"):
        (pkg / name).write_text("X = 1\n")
    (pkg / "unit" / "test_a.py").write_text(
        "from .fakes import X\nfrom .test_b import X\n\n\ndef f():\n    from . import test_b\n"
    )
    (pkg / "unit" / "test_c.py").write_text("import tests.unit.test_b\n")
    assert imports_of_test_modules(pkg) == [
        "tests/unit/test_a.py:2 imports tests.unit.test_b",
        "tests/unit/test_a.py:6 imports tests.unit.test_b",
        "tests/unit/test_c.py:1 imports tests.unit.test_b",
    ]
