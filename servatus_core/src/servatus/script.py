"""What a batch script must do, as a value; a plugin (``servatus_batch_script``) renders it.

The core decides every byte that matters (resources, steps, stdin, environment); the renderer
only chooses shell syntax and run-marker names, which its evidence reader parses back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.launcher import StepCommand


@attrs.frozen
class ScriptStep:
    """One Task's ``srun`` step: its slot, key, launcher command and stdin bytes."""

    slot: int
    task_key: str
    command: StepCommand
    stdin: bytes


@attrs.frozen
class ScriptSpec:
    """One allocation's batch script.

    Per-step resources are ``cpus``, ``memory_mib`` and ``gpus``; the allocation requests
    ``len(steps)`` times them. ``inherit`` names the run-time variables the script exports to each
    step (``SERVATUS_JOB_ID``, ``SERVATUS_JOB_END_TIME``, ...). ``depends_on`` is the allocation id
    of the previous chain link, if any.
    """

    allocation_id: str
    target: Target
    cpus: int
    memory_mib: int
    gpus: int
    time_limit: int
    signal_before_end: int | None
    steps: tuple[ScriptStep, ...]
    inherit: tuple[str, ...] = ()
    depends_on: str | None = None


JOB_NAME_PREFIX = "servatus-"


def job_name(allocation_id: str) -> str:
    """Slurm job name of an allocation: how ``cancel`` and ``reconcile`` find it by identity."""
    return JOB_NAME_PREFIX + allocation_id
