"""The ``servatus`` click group and the program around it: :func:`main` runs a command line and
turns every error into its one line and exit code, :func:`console` is the installed program, and
shell completion is answered here."""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO, cast

import click

from servatus import __version__
from servatus.cli.options import example
from servatus.cli.output import INTERRUPTED, Context, _context, _fail, _output_error, error_kind
from servatus.errors import (
    EXIT_CTRL_C,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    ServatusError,
    StateWarning,
)
from servatus.transport import Connect

if TYPE_CHECKING:
    from servatus.campaign import Campaign


class _Interrupted(Exception):
    """Ctrl-C inside a command, carried past click's own handler, which would write a blank
    line before :func:`_run` reports it."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=example("servatus ensure state tasks.jsonl"),
)
@click.version_option(
    __version__, "--version", prog_name="servatus", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Durable Slurm sweeps with atomic publication of their results."""


class _ClosedOutput:
    """What stands for stdout while a program started with it closed runs a command: writing
    fails as writing to a bad descriptor does, so it is reported as any output that cannot be
    written is, never dropped in silence (click writes nothing at all to a missing stdout)."""

    def write(self, data: object) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        """Nothing is ever buffered."""

    def isatty(self) -> bool:
        return False

    @property
    def buffer(self) -> _ClosedOutput:
        return self


def main(args: Sequence[str] | None = None, *, connect: Connect | None = None) -> int:
    """Run the CLI and return its exit code; ``connect`` replaces how Slurm is reached.

    :param args: The command line after ``servatus`` (``["status", "state"]``); None reads
        ``sys.argv``.
    :param connect: How Slurm is reached, as on :class:`~servatus.Campaign`: a
        :class:`~servatus.testing.FakeScheduler` in tests.
    """
    closed = sys.stdout is None  # the program started with stdout closed
    if closed:
        sys.stdout = cast(TextIO, _ClosedOutput())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", StateWarning)
            warnings.showwarning = _warn
            code = _run(args, connect)
        try:
            sys.stdout.flush()  # what is still buffered fails here, not as Python exits
        except OSError as exc:  # reported once: a failure the command already reported stands
            if code == EXIT_OK and not isinstance(exc, BrokenPipeError):
                error = _output_error(exc)
                _fail(f"{type(error).__name__}: {error}")
                code = error.exit_code
            code = code or EXIT_ERROR
    finally:
        if closed:
            sys.stdout = cast(TextIO, None)
    return code


def _warn(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A warning is one line, like an error: ``servatus: warning: ...``; kept for a ``--json``
    document's ``warnings`` (:func:`with_warnings`)."""
    context = _context()
    if context is not None:
        context.warned.append(str(message))
    _fail(f"warning: {message}")


def console() -> int:
    """The ``servatus`` program (and ``python -m servatus``): :func:`main`, then, if the output
    could not be written, stdout pointed at /dev/null so the interpreter's own last flush does
    not fail again as the process exits (exit 120 and a traceback). Only the program does this:
    a caller of :func:`main` keeps its stdout."""
    code = main()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return code


COMPLETE_VAR = "_SERVATUS_COMPLETE"
"""What a shell's completion script sets to ask for completions (docs/completion.md)."""


def _run(args: Sequence[str] | None, connect: Connect | None) -> int:
    try:
        instruction = os.environ.get(COMPLETE_VAR)
        if instruction:
            return _complete(instruction)
        # Without standalone mode, click returns the code of a raised Exit instead of raising.
        returned = cli.main(
            args=list(args) if args is not None else None,
            prog_name="servatus",
            standalone_mode=False,
            obj=Context(connect),
        )
        if isinstance(returned, int) and returned:
            return returned
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except (_Interrupted, click.exceptions.Abort, KeyboardInterrupt):
        click.echo(f"servatus: {INTERRUPTED}", err=True)
        return EXIT_CTRL_C
    except _NO_ARGUMENTS as exc:  # click 8.2+: the help, as help, but still a usage error
        click.echo(exc.format_message(), err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        _fail(f"{exc.format_message()}" if not isinstance(exc, click.UsageError) else _usage(exc))
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except ServatusError as exc:
        _fail(f"{error_kind(exc)}: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        return EXIT_ERROR
    except OSError as exc:  # writing the output: a full disk, an I/O error, a closed stdout
        error = _output_error(exc)
        _fail(f"{type(error).__name__}: {error}")
        return error.exit_code
    except Exception as exc:  # a bug: still one line, never a traceback
        _fail(f"unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    return EXIT_OK


def _complete(instruction: str) -> int:
    """Answer the shell (``bash_source``, ``zsh_complete``, ...) as click does, but return the
    exit code instead of click's ``sys.exit``, so :func:`main` returns, as it promises."""
    from click.shell_completion import shell_complete  # noqa: PLC0415 - only when completing

    return shell_complete(cli, {}, "servatus", COMPLETE_VAR, instruction)


_NO_ARGUMENTS: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ["NoArgsIsHelpError"]
    if hasattr(click.exceptions, name)
)
"""``servatus`` alone: click 8.2+ raises this with the whole help as its message."""


def _usage(exc: click.UsageError) -> str:
    command = exc.ctx.command_path if exc.ctx else "servatus"
    return f"{exc.format_message()} (see '{command} --help')"


def _campaign(state: str) -> Campaign:
    from servatus.campaign import Campaign  # noqa: PLC0415 - loaded per command

    context = click.get_current_context().find_object(Context)
    return Campaign.open(state, connect=context.connect if context else None)
