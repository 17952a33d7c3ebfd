"""The core's modules import one another without a cycle, type-checking imports included."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import servatus

CORE = Path(servatus.__file__).parent


def imports(path: Path) -> set[str]:
    """The core modules ``path`` imports anywhere: at the top, in a function, or for types."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "servatus":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servatus."):
            found.add(node.module.split(".")[1])  # type: ignore[union-attr]
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("servatus."))
    return found


def test_the_core_import_graph_has_no_cycle() -> None:
    modules = {path.stem: path for path in CORE.glob("*.py")}
    graph = {name: imports(path) & modules.keys() - {name} for name, path in modules.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize("module", ["hookspecs", "launcher", "script", "direct"])
def test_each_module_imports_alone(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import servatus.{module}"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
