"""How Servatus reaches Slurm: a Transport runs one command for a Target and reports what came back.

Transports are plugins (``servatus_transports``). The core picks ``ssh`` when the Target names a
``host`` and ``local`` otherwise; ``connect=`` on :class:`~servatus.Campaign` or the CLI replaces
that choice (``servatus.testing.FakeScheduler`` is such a replacement).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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


OnOutput = Callable[[bytes], None]
"""Takes each piece of a command's stdout as it arrives (pieces, not lines)."""


@runtime_checkable
class Streaming(Protocol):
    """A Transport that can hand a command's stdout over while the command still runs.

    Batched submission (ADR 0014) records each receipt as its job number arrives, so an
    interrupted batch leaves unresolved only the allocations whose answer never came. A
    Transport without ``stream`` still works: its answers are recorded once the command ends.
    """

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        timeout: float = COMMAND_TIMEOUT,
        on_stdout: OnOutput,
    ) -> CommandResult:
        """As ``run``, and each piece of stdout also goes to ``on_stdout`` as it arrives,
        before the command ends or the call raises :class:`~servatus.errors.Unavailable`."""
        ...


def run_streaming(
    transport: Transport,
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    timeout: float = COMMAND_TIMEOUT,
    on_stdout: OnOutput,
) -> CommandResult:
    """``stream`` where ``transport`` can; else ``run``, handing the stdout over once it ended."""
    if isinstance(transport, Streaming):
        return transport.stream(argv, stdin=stdin, timeout=timeout, on_stdout=on_stdout)
    result = transport.run(argv, stdin=stdin, timeout=timeout)
    on_stdout(result.stdout)
    return result


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
