"""What a campaign's commands reach beyond its journal: Slurm, the plugins and the result probe,
held once per command so that the operations' functions take one argument for them."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import attrs

from servatus.config import Target
from servatus.plugins import Hooks
from servatus.tasks import Task
from servatus.transport import Connect, Transport

Probe = Callable[[tuple[Task, ...]], Collection[str]]
"""The result probe: given Tasks, the keys whose result is valid."""


@attrs.frozen
class Context:
    """A campaign directory, how Slurm is reached from it, the plugins' hooks, and the result
    probe (None: no Task is ever ``VALID``)."""

    path: Path
    connect: Connect
    hooks: Hooks
    probe: Probe | None = None


def connector(registry: Hooks, connect: Connect | None) -> Connect:
    """``connect``, or without one the ``ssh`` transport for a Target with a ``host`` and the
    ``local`` one for a Target without."""
    if connect is not None:
        return connect

    def default(target: Target) -> Transport:
        return registry.transport("ssh" if target.host else "local").connect(target)

    return default
