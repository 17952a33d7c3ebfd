"""Validate: ``sbatch --test-only`` once per distinct allocation shape of a plan, after a ping,
so that a silent Slurm is ``Unavailable`` and never read as a rejection."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from servatus.config import format_duration
from servatus.engine.plan import Plan, shape_indexes
from servatus.errors import Unavailable
from servatus.operations.submission import command, ping, unanswered
from servatus.transport import Connect


@attrs.frozen
class ShapeCheck:
    """``sbatch --test-only`` of one allocation shape: its number of Tasks and its time limit
    (a chain's shorter last link is a shape of its own)."""

    tasks: int
    """How many Tasks the shape holds (a lease: its slots)."""
    accepted: bool
    """Whether Slurm accepted the request; a rejection is not an error here, the CLI exits 1."""
    message: str
    """The last line Slurm printed about it, or ``exit N`` when it printed nothing."""
    time_limit: int
    """The shape's time limit in seconds, whole minutes."""


def validate(
    connect: Connect,
    plan: Plan,
    scripts: Sequence[str],
    progress: Callable[[ShapeCheck], None] | None = None,
) -> tuple[ShapeCheck, ...]:
    """Each distinct shape of ``plan`` judged by ``sbatch --test-only`` of its first script
    among ``scripts`` (the plan's, in its allocations' order); ``progress`` gets each check
    as it is made."""
    shapes: dict[tuple[int, int], str] = {}
    for (tasks, limit), index in shape_indexes(plan).items():
        shapes[tasks, limit] = scripts[index]
    transport = connect(plan.profile.target)
    checks = []
    try:
        if shapes:  # as submit does: Slurm that does not answer rejects no shape
            ping(transport, plan.profile.target)
        for (tasks, limit), script in sorted(shapes.items()):
            result = transport.run(
                [command(plan.profile.target, "sbatch"), "--test-only"],
                stdin=script.encode("utf-8", "surrogateescape"),
            )
            said = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
            if unanswered(result):
                raise Unavailable(
                    f"sbatch --test-only of the {tasks}-Task shape for "
                    f"{format_duration(limit)} got no answer from Slurm "
                    f"({said.splitlines()[-1]}); the shape was not judged"
                )
            check = ShapeCheck(
                tasks=tasks,
                accepted=result.returncode == 0,
                message=said.splitlines()[-1] if said else f"exit {result.returncode}",
                time_limit=limit,
            )
            checks.append(check)
            if progress is not None:
                progress(check)
    finally:
        transport.close()
    return tuple(checks)
