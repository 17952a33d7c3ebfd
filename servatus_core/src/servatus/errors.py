"""Every error Servatus raises on purpose, each with the CLI exit code it maps to.

The CLI prints ``servatus: <ClassName>: <message>`` and exits with ``exit_code``; anything not
derived from :class:`ServatusError` is a bug and still gets one line and exit 1.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED_SUBMISSION = 3
EXIT_TEMPFAIL = 75
EXIT_CTRL_C = 130


class ServatusError(Exception):
    """Base of every deliberate Servatus error."""

    exit_code: int = EXIT_ERROR


class ConfigurationError(ServatusError, ValueError):
    """Bad input or an unusable location: a config, a Task, a path, a mode."""


class PluginError(ServatusError):
    """A plugin failed to load, registered a duplicate name, or was selected but not installed."""


class CorruptState(ServatusError):
    """A campaign file failed validation on read: truncated, edited, or of an unknown version."""


class TaskConflict(ServatusError):
    """A Task under an existing key differs, or authoring a sealed campaign was attempted."""


class PlanRefused(ServatusError):
    """The requested plan cannot be made as asked (for example bad ``--retry`` keys)."""


class StalePlan(ServatusError):
    """The campaign changed since the plan was made, or the plan file was altered."""


class ShapeRejected(ServatusError):
    """``sbatch --test-only`` rejected an allocation shape."""


class DestinationExists(ServatusError, FileExistsError):
    """A publication destination (or a finished child) already exists."""


class UnsafeFilesystem(ServatusError):
    """An entry was substituted, or has the wrong type or owner."""


class WorkspaceConflict(ServatusError):
    """A workspace is bound to another identity, or holds files but no identity."""


class Unavailable(ServatusError):
    """A transient failure: cluster unreachable, no space, quota, I/O error, too many files."""

    exit_code = EXIT_TEMPFAIL


class Busy(Unavailable):
    """Another process holds the campaign or workspace lock."""


class StillWaiting(Unavailable):
    """``reconcile`` has intents too young to decide; run it again later."""


class SubmissionInterrupted(ServatusError):
    """A submission stopped part-way; some allocations may be unresolved."""

    exit_code = EXIT_INTERRUPTED_SUBMISSION


__all__ = [
    "EXIT_CTRL_C",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED_SUBMISSION",
    "EXIT_OK",
    "EXIT_TEMPFAIL",
    "EXIT_USAGE",
    "Busy",
    "ConfigurationError",
    "CorruptState",
    "DestinationExists",
    "PlanRefused",
    "PluginError",
    "ServatusError",
    "ShapeRejected",
    "StalePlan",
    "StillWaiting",
    "SubmissionInterrupted",
    "TaskConflict",
    "Unavailable",
    "UnsafeFilesystem",
    "WorkspaceConflict",
]
