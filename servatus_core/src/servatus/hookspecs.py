"""Every hook Servatus calls, one documented stub each.

Plugins implement these with ``@servatus.hookimpl`` in a module named by an entry point in the
group ``servatus`` (name it ``servatus-<name>``). Hooks are called with keyword arguments only, so
an implementation may accept fewer arguments than the spec. The built-ins register the same way a
site's plugin does. See ``docs/development/plugins.md`` for a worked example.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.evidence import EvidenceReader
    from servatus.launcher import Launcher
    from servatus.script import LeaseOrder, LeaseSpec, ScriptSpec
    from servatus.transport import TransportFactory

PROJECT = "servatus"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- reaching Slurm -----------------------------------------------------------------------------


@hookspec
def servatus_transports() -> list[TransportFactory]:  # type: ignore[empty-body]
    """Return the transport factories this plugin provides.

    Each factory has a unique ``name``; the core uses ``ssh`` for a Target with a ``host`` and
    ``local`` otherwise. ``servatus_slurm`` provides both. Duplicate names across plugins are
    refused at startup.
    """


# -- shaping steps ------------------------------------------------------------------------------


@hookspec
def servatus_launchers() -> list[Launcher]:  # type: ignore[empty-body]
    """Return the launchers this plugin provides.

    ``[target] launcher = "NAME"`` selects one by ``name``; ``direct`` is built in and
    ``servatus_apptainer`` adds ``apptainer``. Duplicate names across plugins are refused.
    ``docs/development/site-plugin.md`` walks through a site's own launcher.
    """


@hookspec(firstresult=True)
def servatus_batch_script(spec: ScriptSpec) -> str | None:
    """Render one allocation's POSIX ``sh`` batch script, ``#SBATCH`` options included.

    Stops at the first non-None result. The script must write the run markers that the
    evidence reader parses.
    """


@hookspec(firstresult=True)
def servatus_lease_script(spec: LeaseSpec) -> str | None:
    """Render one lease allocation's POSIX ``sh`` batch script (ADR 0009), ``#SBATCH`` options
    included: it takes the orders that appear in its orders directory and runs each as a step.

    Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def servatus_lease_order(order: LeaseOrder, target: Target) -> str | None:
    """Render one step's order for a lease (ADR 0009): the text the lease's batch script
    reads, in the format that script expects.

    Stops at the first non-None result.
    """


# -- reading evidence ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def servatus_evidence_reader() -> EvidenceReader | None:
    """Return the reader for ``squeue`` listings and run-marker listings.

    Stops at the first non-None result.
    """


# -- publication --------------------------------------------------------------------------------


@hookspec(firstresult=True)
def servatus_lock_directory(
    dir_fd: int, path: str, wait: float
) -> AbstractContextManager[None] | None:
    """Return a context manager that holds an exclusive lock on the directory open at ``dir_fd``.

    Entering it waits up to ``wait`` seconds (0: one try) and then raises
    :class:`~servatus.errors.Busy` while another process holds the lock. ``path`` is for messages
    only; never reopen it. Stops at the first non-None result; the built-in tries ``flock`` and
    falls back to an owner-only ``.servatus.lock`` file (NFS), which it leaves in place.
    """


@hookspec(firstresult=True)
def servatus_rename_noreplace(
    src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, is_dir: bool, path: str
) -> bool | None:
    """Move ``src_name`` to ``dst_name`` only if nothing exists there; never overwrite.

    Return True once committed; raise :class:`~servatus.errors.DestinationExists` when the
    destination exists. ``path`` names the destination for messages only. Stops at the first
    non-None result; the built-in uses ``renameat2`` (Linux) or ``renamex_np`` (macOS), with a
    documented fallback where the filesystem refuses (``docs/development/publication.md``).
    """
