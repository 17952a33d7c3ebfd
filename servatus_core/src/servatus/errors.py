"""Every error Servatus raises on purpose, each with the CLI exit code it maps to.

The CLI prints ``servatus: <ClassName>: <message>`` and exits with ``exit_code``; anything not
derived from :class:`ServatusError` is a bug and still gets one line and exit 1.
"""

from __future__ import annotations

import errno

#: The command did what it was asked.
EXIT_OK = 0
#: Running the command again will not help: bad input, a stale or refused plan, a rejected
#: shape, conflicting or damaged state, or a bug.
EXIT_ERROR = 1
#: The command line itself is wrong (an unknown option, a missing argument); nothing was read.
EXIT_USAGE = 2
#: ``submit`` or ``start`` stopped after recording an intent whose outcome it does not know;
#: ``reconcile`` decides it.
EXIT_INTERRUPTED_SUBMISSION = 3
#: Something that may pass (no answer, a held lock, a full disk, evidence not yet conclusive):
#: run the same command again later. The value is ``EX_TEMPFAIL`` of ``sysexits.h``.
EXIT_TEMPFAIL = 75
#: Interrupted with Ctrl-C (128 + ``SIGINT``); what was recorded before stays recorded.
EXIT_CTRL_C = 130


class ServatusError(Exception):
    """Base of every deliberate Servatus error."""

    exit_code: int = EXIT_ERROR
    """The CLI's exit code for this error: :data:`EXIT_ERROR` unless a subclass says otherwise."""


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
    """:data:`EXIT_TEMPFAIL`, for this error and its subclasses: try again later."""


class Unreached(Unavailable):
    """No connection to the cluster was made, so the command certainly did not run there
    (``ssh`` could not connect, or could not resolve the host): unlike a lost answer, what it
    would have done is known not to have happened."""


class Busy(Unavailable):
    """Another process holds the campaign or workspace lock."""


class StillWaiting(Unavailable):
    """``reconcile`` has intents too young to decide; run it again later."""


class SubmissionInterrupted(ServatusError):
    """A submission stopped part-way; some allocations may be unresolved."""

    exit_code = EXIT_INTERRUPTED_SUBMISSION
    """:data:`EXIT_INTERRUPTED_SUBMISSION`: run ``status``, then ``reconcile``."""


class StateWarning(UserWarning):
    """What the campaign's state shows that is no error but needs saying: state other users can
    read (but not write), used since only its owner-only modes keep a Task's stdin and
    environment private; or, from ``reconcile``, a chain cut short, with the plan that continues
    it."""


TRANSIENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)
"""Operating-system failures that may pass: no space, quota, I/O, too many files, no memory."""


def from_os_error(exc: OSError, what: str) -> ServatusError:
    """The error an OSError of ``what`` is: :class:`Unavailable` (exit 75) when it may pass,
    :class:`UnsafeFilesystem` for a symbolic link refused, else :class:`ConfigurationError`."""
    reason = exc.strerror or str(exc)
    if exc.errno in TRANSIENT_ERRNOS:
        return Unavailable(f"{what}: {reason}")
    if exc.errno == errno.ELOOP:
        return UnsafeFilesystem(f"{what}: is a symbolic link")
    return ConfigurationError(f"{what}: {reason}")


def input_problem(exc: Exception) -> str:
    """What is wrong with a document a parser refused, said for its author: nesting beyond the
    parser's recursion limit and numbers beyond CPython's digit limit get plain words instead of
    Python's advice."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = str(exc)
    if isinstance(exc, ValueError) and "sys.set_int_max_str_digits" in text:
        return "a number has too many digits"
    return text


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
    "StateWarning",
    "StillWaiting",
    "SubmissionInterrupted",
    "TaskConflict",
    "Unavailable",
    "Unreached",
    "UnsafeFilesystem",
    "WorkspaceConflict",
]
