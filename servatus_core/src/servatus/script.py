"""What a batch script must do, as a value; a plugin (``servatus_batch_script``) renders it.

The core decides every byte that matters (resources, steps, stdin, environment); the renderer
only chooses shell syntax and run-marker names, which its evidence reader parses back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.continuation import Link
    from servatus.launcher import StepCommand


CHAIN_VARIABLES = ("SERVATUS_LINK", "SERVATUS_LINKS", "SERVATUS_RUN_TIME")
"""Per-slot variables a chain link's script gives every step it runs (ADR 0005)."""
BUDGET_VARIABLE = "SERVATUS_BUDGET"
"""Also given to a chain's steps, only when the chain was planned with a budget."""


@attrs.frozen
class ScriptStep:
    """One Task's ``srun`` step: its slot, key, launcher command and stdin bytes.

    In a chain link, ``links`` is the Task's own number of links (``SERVATUS_LINKS``) and
    ``run_time`` the seconds it ran before this chain, as the plan measured them; the script
    adds the earlier links of this chain itself.
    """

    slot: int
    task_key: str
    command: StepCommand
    stdin: bytes
    links: int = 0
    run_time: int = 0


@attrs.frozen
class ScriptSpec:
    """One allocation's batch script.

    Per-step resources are ``cpus``, ``memory_mib`` and ``gpus``; the allocation requests
    ``len(steps)`` times them. ``inherit`` names the run-time variables the script exports to each
    step (``SERVATUS_JOB_ID``, ``SERVATUS_JOB_END_TIME``, ...).

    A chain link has its ``link``; ``earlier`` holds the allocation ids of every earlier link of
    its chain in order (the last is ``depends_on``, the one it hands on from), ``later`` those of
    every later link in order (the ones it removes when it hands nothing on), and ``budget`` the
    lifetime budget in seconds (None for ``--max-links`` alone).
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
    link: Link | None = None
    earlier: tuple[str, ...] = ()
    budget: int | None = None
    later: tuple[str, ...] = ()

    @property
    def depends_on(self) -> str | None:
        """The allocation id of the previous link of the chain, if any."""
        return self.earlier[-1] if self.earlier else None


@attrs.frozen
class LeaseSpec:
    """One lease allocation's batch script (ADR 0009): ``slots`` copies of one slot's resources,
    held for ``time_limit``, running whatever orders appear in its orders directory.

    ``signal_before_end`` is required: it is both the lease's warning to its steps and the grace a
    stopped step gets between ``SIGUSR1`` and ``SIGTERM``. ``poll_seconds`` is how often the lease
    looks for orders and stop requests (the spec's 5 s).
    """

    allocation_id: str
    target: Target
    slots: int
    cpus: int
    memory_mib: int
    gpus: int
    time_limit: int
    signal_before_end: int
    inherit: tuple[str, ...] = ()
    poll_seconds: int = 5


@attrs.frozen
class LeaseOrder:
    """One step offered to a lease: the step's own allocation id, its Task, and the slot
    (``cpus``/``memory_mib``/``gpus``) the plan assumed, which the lease checks against its own.

    ``inherit`` names the run-time variables the lease's batch shell gives the step, as for a
    plain step; ``run_time`` and ``budget`` become ``SERVATUS_RUN_TIME`` and ``SERVATUS_BUDGET``,
    which the order sets with ``SERVATUS_LINK=1`` and ``SERVATUS_LINKS=1``. ``command`` must be
    shaped as a chain link's step is (the launcher told to carry those variables too), or a
    launcher that rebuilds the environment drops them.
    """

    step_id: str
    lease_id: str
    task_key: str
    command: StepCommand
    stdin: bytes
    cpus: int
    memory_mib: int
    gpus: int
    inherit: tuple[str, ...] = ()
    run_time: int = 0
    budget: int | None = None
