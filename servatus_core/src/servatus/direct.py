"""The built-in ``direct`` launcher, a plugin like any other (entry point ``servatus-direct``).

It runs the Task's absolute ``args[0]`` under ``env -i`` with the Task's variables as arguments;
``docs/development/launchers.md`` gives the exact step command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from servatus.hookspecs import hookimpl
from servatus.launcher import ENV_COMMAND, SHELL, Launcher, StepCommand, check_program

if TYPE_CHECKING:
    from servatus.config import Target


@attrs.frozen
class DirectLauncher:
    """Runs the Task's absolute ``args[0]`` under ``env -i`` with its variables as arguments."""

    name: str = "direct"

    def check(self, target: Target, args: Sequence[str]) -> None:
        check_program(args, self.name)

    def command(
        self,
        target: Target,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        inherit: Sequence[str],
        gpus: int,
    ) -> StepCommand:
        self.check(target, args)
        carried = [*inherit, *(["CUDA_VISIBLE_DEVICES"] if gpus else [])]
        assignments = tuple(f"{name}={value}" for name, value in sorted(env.items()))
        if not carried:
            return StepCommand(argv=(ENV_COMMAND, "-i", *assignments, *args))
        # Run-time values are read by a fixed shell snippet; the Task's own words stay "$@".
        # An unset CUDA_VISIBLE_DEVICES stays unset rather than becoming empty.
        pieces = [
            f'${{{name}+{name}="${name}"}}'
            if name == "CUDA_VISIBLE_DEVICES"
            else f'{name}="${name}"'
            for name in carried
        ]
        script = f'exec {ENV_COMMAND} -i {" ".join(pieces)} "$@"'
        return StepCommand(argv=(SHELL, "-c", script, "servatus-step", *assignments, *args))


@hookimpl
def servatus_launchers() -> list[Launcher]:
    return [DirectLauncher()]
