"""Launchers turn a Task's arguments and environment into the command of its ``srun`` step.

A launcher is a plugin (``servatus_launchers``) selected by name with ``[target] launcher``.
Setting ``apptainer`` and ``image`` selects ``apptainer``; otherwise ``direct`` runs the Task's
absolute ``args[0]`` under ``env -i`` (:mod:`servatus.direct`, the built-in plugin). This module
holds what every launcher shares; it imports no hook machinery, so hook specs and scripts can name
its types without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from servatus.errors import ConfigurationError

if TYPE_CHECKING:
    from servatus.config import Target

ENV_COMMAND = "/usr/bin/env"
SHELL = "/bin/sh"
"""The POSIX shell, for a launcher whose step runs a short script before the Task."""


@attrs.frozen
class StepCommand:
    """The step as a launcher shapes it.

    ``argv`` is what ``srun`` executes. ``exported`` are variables set on the ``srun`` line in the
    batch script and passed into the step by name (never on any command line); the direct launcher
    leaves it empty and puts everything into ``argv`` as ``env -i`` arguments.
    """

    argv: tuple[str, ...]
    """What ``srun`` executes; its program is an absolute path, since the step has no ``PATH``."""
    exported: tuple[tuple[str, str], ...] = ()
    """``(name, value)`` pairs passed into the step by name, never on a command line."""


class Launcher(Protocol):
    """A named step-command builder.

    ``check`` runs at planning and raises :class:`~servatus.errors.ConfigurationError` for Tasks
    this launcher cannot run (for example a relative ``args[0]`` for ``direct``). ``command``
    receives the Task's arguments and the static environment of the step: the Task's ``env`` plus
    the reserved ``SERVATUS_*`` variables known at planning. ``inherit`` names variables whose
    values exist only at run time (``SERVATUS_JOB_ID``, ``SERVATUS_JOB_END_TIME``, ...); the batch
    script passes them into the step by name and the launcher must carry them into the Task's
    environment. ``gpus`` is the number of GPU units the step requests; GPU steps must also keep
    Slurm's step-local ``CUDA_VISIBLE_DEVICES``.
    """

    @property
    def name(self) -> str:
        """What ``[target] launcher`` selects it by; unique among installed launchers."""
        ...

    def check(self, target: Target, args: Sequence[str]) -> None:
        """Refuse, with a ConfigurationError, a Task's ``args`` this launcher cannot run."""
        ...

    def command(
        self,
        target: Target,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        inherit: Sequence[str],
        gpus: int,
    ) -> StepCommand:
        """The step that runs ``args`` with ``env`` and the ``inherit`` variables."""
        ...


def check_program(args: Sequence[str], launcher: str) -> None:
    """Refuse what a launcher that runs ``args[0]`` through ``env`` cannot run: no program, a
    relative one (steps have no PATH), or one whose path ``env`` would read as NAME=VALUE."""
    if not args:
        raise ConfigurationError("a Task needs at least one argument")
    if not args[0].startswith("/"):
        raise ConfigurationError(
            f"the {launcher} launcher needs an absolute args[0], got {args[0]!r}; "
            "give the full path of the program (for example /usr/bin/python3)"
        )
    if "=" in args[0]:
        raise ConfigurationError(
            f"the {launcher} launcher cannot run a program whose path contains '=', "
            f"got {args[0]!r}; env would read it as a variable"
        )
