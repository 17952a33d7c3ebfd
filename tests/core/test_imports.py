"""The core's modules import one another without a cycle, type-checking imports included; every
name the API page documents imports from its documented path; every entry point loads."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import servatus

CORE = Path(servatus.__file__).parent
API_PAGE = Path(__file__).parents[2] / "docs" / "api.md"
DISTRIBUTIONS = ("servatus-core", "servatus-slurm", "servatus-apptainer", "servatus-publish")


def module_name(path: Path) -> str:
    parts = ("servatus", *path.relative_to(CORE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The core modules ``path`` imports anywhere: at the top, in a function, or for types
    (``from servatus.journal import codec`` imports ``servatus.journal.codec``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servatus"):
            module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def test_the_core_import_graph_has_no_cycle() -> None:
    modules = {module_name(path): path for path in CORE.rglob("*.py")}
    known = set(modules)
    graph = {name: imports(path, known) - {name} for name, path in modules.items()}
    # A package's own __init__ runs before its modules: that edge is no cycle.
    graph = {
        name: {other for other in found if not name.startswith(f"{other}.")}
        for name, found in graph.items()
    }
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


def documented() -> list[str]:
    """Every dotted name an autodoc directive of the API page names."""
    names = re.findall(r"^\.\. auto\w+:: ([\w.]+)", API_PAGE.read_text(), flags=re.MULTILINE)
    assert len(names) > 50, "the API page's directives were not found"
    return names


def resolve(dotted: str) -> object:
    """The object at ``dotted``: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted", documented())
def test_every_name_the_api_page_documents_imports_from_its_path(dotted: str) -> None:
    assert resolve(dotted) is not None


def entry_points() -> list[importlib.metadata.EntryPoint]:
    return [
        point
        for name in DISTRIBUTIONS
        for point in importlib.metadata.distribution(name).entry_points
    ]


@pytest.mark.parametrize("point", entry_points(), ids=lambda point: f"{point.group}:{point.name}")
def test_every_entry_point_loads(point: importlib.metadata.EntryPoint) -> None:
    assert point.load() is not None


def test_the_core_imports_with_no_plugin_installed() -> None:
    """What servatus-core alone can do: its public modules import with every plugin
    distribution hidden (the import-linter contract forbids the import; this runs it)."""
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'servatus_slurm', 'servatus_apptainer', "
        "'servatus_publish'}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import servatus, servatus.cli, servatus.testing, servatus.pytest_plugin\n"
        "from servatus import Campaign, Profile, Task\n"
        "servatus.testing.FakeScheduler()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_status_loads_no_planner(tmp_path: Path) -> None:
    """``status`` of a fresh process imports what it reads with, not the planner or the batch
    script renderers (issue #33: their imports were a tenth of a fresh ``status``'s CPU)."""
    from servatus.campaign import create_state
    from servatus.tasks import Task

    create_state(tmp_path / "state", [Task("a", ["/bin/true"])])
    program = (
        "import sys; from servatus.cli import main; "
        f"code = main(['status', {str(tmp_path / 'state')!r}, '--offline']); "
        "print(code, sorted(m for m in sys.modules if m.startswith('servatus')))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    code, _, loaded = done.stdout.splitlines()[-1].partition(" ")
    assert code == "0", done.stdout + done.stderr
    assert "servatus.operations.held" in loaded and "servatus_slurm.plugin" in loaded
    for module in ("servatus.engine.planning", "servatus.continuation", "servatus_slurm.script"):
        assert f"'{module}'" not in loaded
