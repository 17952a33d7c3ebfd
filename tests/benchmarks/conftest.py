"""The soak's packages, without putting ``benchmarks/`` (whose ``leasekit`` would shadow
``tests/lane``'s) on ``sys.path``: ``soak`` is registered from its folder, and the lane's fake
``slurm_bin`` is loaded by its file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path, package: bool = False) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[str(path.parent)] if package else None
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("soak", ROOT / "benchmarks" / "soak" / "__init__.py", package=True)
_load("soak_fake_bin", ROOT / "tests" / "lane" / "fake_bin.py")
