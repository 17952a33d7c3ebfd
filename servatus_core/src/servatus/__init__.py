"""Durable Slurm sweeps from a laptop or a login node, with atomic publication of their results.

``Campaign``, ``Profile`` and ``Task`` come from the core; ``Workspace``, ``publish`` and
``publish_file`` from the ``servatus-publish`` distribution, imported on first use so that the
CLI never pays for them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.14.1"

from servatus.hookspecs import hookimpl

_EXPORTS = {
    "Campaign": "servatus.campaign",
    "Continuation": "servatus.continuation",
    "Extension": "servatus.continuation",
    "Link": "servatus.continuation",
    "MAX_LINKS": "servatus.continuation",
    "Profile": "servatus.config",
    "RunTime": "servatus.status",
    "StopReason": "servatus.status",
    "Task": "servatus.tasks",
    "YIELD_EXIT": "servatus.engine.status_values",
    "Workspace": "servatus_publish.workspace",
    "publish": "servatus_publish.publication",
    "publish_file": "servatus_publish.publication",
}

__all__ = [
    "MAX_LINKS",
    "YIELD_EXIT",
    "Campaign",
    "Continuation",
    "Extension",
    "Link",
    "Profile",
    "RunTime",
    "StopReason",
    "Task",
    "Workspace",
    "__version__",
    "hookimpl",
    "publish",
    "publish_file",
]

if TYPE_CHECKING:
    from servatus.campaign import Campaign
    from servatus.config import Profile
    from servatus.continuation import MAX_LINKS, Continuation, Extension, Link
    from servatus.engine.status_values import YIELD_EXIT, RunTime, StopReason
    from servatus.tasks import Task
    from servatus_publish.publication import publish, publish_file
    from servatus_publish.workspace import Workspace


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'servatus' has no attribute {name!r}")
    try:
        value = getattr(import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("servatus_publish"):
            raise ImportError(
                f"servatus.{name} needs the servatus-publish distribution, which is not installed"
            ) from exc
        raise
    globals()[name] = value
    return value
