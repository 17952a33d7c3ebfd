"""How Servatus reaches Slurm: a Transport runs one command for a Target and reports what came back.

Transports are plugins (``servatus_transports``). The core picks ``ssh`` when the Target names a
``host`` and ``local`` otherwise; ``connect=`` on :class:`~servatus.Campaign` or the CLI replaces
that choice (``servatus.testing.FakeScheduler`` is such a replacement).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from servatus.config import Target

COMMAND_TIMEOUT = 30.0
"""Seconds one remote command may take, connecting included; commands are never retried."""

OUTPUT_LIMIT = 64 * 1024 * 1024
"""Bytes read at most from one command's stdout (and separately its stderr): room for the run
markers of several hundred thousand allocations (about 75 bytes each listed), still bounded."""


@attrs.frozen
class CommandResult:
    """What one command returned. ``truncated`` is set when output exceeded the read bound."""

    argv: tuple[str, ...]
    """The command that ran."""
    returncode: int
    """Its exit status."""
    stdout: bytes
    """What it printed, at most :data:`OUTPUT_LIMIT` bytes."""
    stderr: bytes
    """What it printed on standard error, bounded the same way."""
    truncated: bool = False
    """Whether either output was cut at the bound."""


class Transport(Protocol):
    """Runs commands where the Slurm client tools are.

    ``run`` raises :class:`~servatus.errors.Unavailable` when no answer came back (the connection
    failed or the deadline passed); a command that ran and failed returns its nonzero code.
    """

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        """Run ``argv`` with ``stdin``, waiting at most ``timeout`` seconds for all of it."""
        ...

    def close(self) -> None:
        """Release the connection; the Transport is not used again."""
        ...


class TransportFactory(Protocol):
    """A named way to build a Transport for a Target (``local``, ``ssh``, or a plugin's)."""

    @property
    def name(self) -> str:
        """Unique among installed transports; read-only, so frozen factories satisfy it."""
        ...

    def connect(self, target: Target) -> Transport:
        """A Transport to ``target``'s Slurm client commands."""
        ...


Connect = Callable[["Target"], Transport]
"""What ``connect=`` takes: a Target in, a ready Transport out."""
