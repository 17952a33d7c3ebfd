"""How a command prints and saves: its :class:`Context`, human lines (:func:`echo`), the
``--json`` document whatever the exit (:func:`json_option`), warnings and errors as one line on
stderr, and the ``--output FILE`` it writes."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import click

from servatus.cli.options import F
from servatus.cli.render import escape_line, json_dumps, json_fields, terminal_text
from servatus.errors import (
    ConfigurationError,
    ServatusError,
    Unavailable,
    Unreached,
    from_os_error,
)
from servatus.files import checked_path, create_private, replace_private
from servatus.transport import Connect


class Context:
    """What every command receives: the ``connect=`` override, if any; under ``--json``, what
    it did so far (:func:`describe`) and whether its document was printed; and the warnings
    (:class:`StateWarning`) issued so far, which a document with ``warnings`` carries too."""

    def __init__(self, connect: Connect | None) -> None:
        self.connect = connect
        self.described: Callable[[], dict[str, Any]] | None = None
        self.emitted = False
        self.warned: list[str] = []


def _context() -> Context | None:
    ctx = click.get_current_context(silent=True)
    return ctx.find_object(Context) if ctx is not None else None


def echo(*lines: str) -> None:
    """Print human output, each argument one line, in one write (a line each costs a flush each),
    each line escaped whole (:func:`servatus.cli.render.terminal_text`)."""
    click.echo(terminal_text(lines))


def json_text(document: Any) -> str:
    """A JSON document with each top-level field on its own line and every value on one line.

    Python's indenting encoder is pure Python (0.4 s for a plan of 100,000 allocations); this
    layout uses the C encoder throughout and still reads well in a pager or a diff. It is ASCII:
    a path with bytes that are not UTF-8 (kept as lone surrogates) is escaped, not written raw,
    so the output is always valid UTF-8.
    """
    if not isinstance(document, dict) or not document:
        return json_dumps(document)
    return json_fields({name: json_dumps(value) for name, value in document.items()})


def emit_json(document: Any) -> None:
    """Print one exact JSON document."""
    emit_json_text(json_text(document))


def emit_json_text(text: str) -> None:
    """Print one JSON document written already (:func:`servatus.cli.render.json_fields`)."""
    context = _context()
    if context is not None:
        context.emitted = True
    click.echo(text)


def describe(document: Callable[[], dict[str, Any]]) -> None:
    """Under ``--json``: what the command has done so far, built when it is printed. The command
    prints it when it returns, or with an ``error`` member when it fails (:func:`json_option`),
    so whatever the exit, the document says what happened."""
    context = _context()
    if context is not None:
        context.described = document


INTERRUPTED = "interrupted; recorded intent survives; run status"


def paused_gc(func: F) -> F:
    """Run a short read-only command (``status``, ``plan``) with the cyclic GC paused.

    At 100,000 Tasks they build over a million acyclic values (Tasks, records, the projection,
    the table); every GC pass would scan them all. They are freed by reference counting when
    the command returns, before the GC runs again.
    """

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        from servatus.tasks import bulk  # noqa: PLC0415 - loaded per command

        with bulk():
            return func(*args, **kwargs)

    return cast(F, run)


def json_option(func: F) -> F:
    """The ``--json`` flag every command except ``logs`` takes, and its promise: one document on
    stdout whatever the exit. A command that fails before printing its own prints the document
    of what it did (:func:`describe`; none: ``{}``) with ``"error": {"type", "message"}``, the
    class and message of its one line on stderr. A usage error (exit 2) prints no document."""

    @functools.wraps(func)
    def run(*args: Any, as_json: bool, **kwargs: Any) -> Any:
        if not as_json:
            return func(*args, as_json=as_json, **kwargs)
        try:
            returned = func(*args, as_json=as_json, **kwargs)
        except ServatusError as exc:
            _emit_failure(error_kind(exc), str(exc))
            raise
        except KeyboardInterrupt:
            _emit_failure("Interrupted", INTERRUPTED)
            raise
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # a usage error, or an exit code the command chose after its document
        except BrokenPipeError:
            raise
        except OSError as exc:  # the output could not be written: what _run reports it as
            error = _output_error(exc)
            _emit_failure(type(error).__name__, str(error))
            raise
        except Exception as exc:  # a bug: _run says "unexpected error", the document too
            _emit_failure(type(exc).__name__, str(exc))
            raise
        context = _context()
        if context is not None and context.described is not None and not context.emitted:
            emit_json(context.described())
        return returned

    option = click.option("--json", "as_json", is_flag=True, help="Print exact machine output.")
    return cast(F, option(run))


def error_kind(exc: ServatusError) -> str:
    """The class name a failure is shown under, on its one line and as the JSON ``type``: an
    ``Unreached`` is shown as the ``Unavailable`` it is, the name the spec's exit codes and users'
    scripts know for "cannot reach the cluster"."""
    return Unavailable.__name__ if isinstance(exc, Unreached) else type(exc).__name__


def _emit_failure(kind: str, message: str) -> None:
    context = _context()
    if context is None or context.emitted:
        return
    document = context.described() if context.described is not None else {}
    with contextlib.suppress(OSError):  # the failure the command met is the one to report
        emit_json({**document, "error": {"type": kind, "message": message}})


def with_warnings(warned: Sequence[str]) -> list[str]:
    """A document's ``warnings``: those the command warned of on the way (a campaign others
    can read, say), then its own ``warned``, so a program reading ``--json`` sees them all."""
    context = _context()
    return [*(context.warned if context is not None else ()), *warned]


def _output_error(exc: OSError) -> ServatusError:
    """What failing to write the output is: as for any file, except that a closed or unwritable
    stdout (EBADF) is :class:`Unavailable`, as a full device is: the output is lost either way."""
    if exc.errno == errno.EBADF:
        return Unavailable(f"cannot write the output: {exc.strerror or exc}")
    return from_os_error(exc, "cannot write the output")


def _fail(message: str) -> None:
    """One line on stderr: an error, or a warning, escaped as :func:`echo` escapes a line; none
    when the program started with stderr closed (cron, a daemon), where the exit code is all
    that can be told."""
    if sys.stderr is None:
        return
    click.echo(f"servatus: {escape_line(message)}", err=True)
    sys.stderr.flush()


def check_output(path: str, *, replace: bool, what: str = "a saved plan") -> None:
    """Refuse an ``--output FILE`` that :func:`write_output` would refuse, before a command reads
    Slurm or records anything for it: inside a campaign's directory, or there already when
    nothing is replaced. ``write_output`` checks again, as the kernel sees it when it writes."""
    from servatus.journal.store import holds_campaign  # noqa: PLC0415

    directory = os.path.realpath(os.path.dirname(checked_path(path, "path")) or ".")
    if holds_campaign(directory):
        raise ConfigurationError(
            f"{path} is inside the campaign {directory!r}, whose files only servatus writes; "
            "choose a file outside it"
        )
    if not replace and os.path.lexists(path):
        raise ConfigurationError(f"{path} exists; {what} is never overwritten")


def write_output(path: str, data: bytes, *, replace: bool, what: str = "a saved plan") -> None:
    """What every ``--output FILE`` writes goes through here: owner-only, created (or, with
    ``replace``, replaced by a rename), and never into a campaign's directory, whose journal,
    lock or journal.tmp it could replace (the record lost, or two writers let in at once). The
    directory is checked as the kernel resolves it, through symlinks and ``..``; a hard link
    elsewhere to a campaign's file is safe, as neither way of writing writes through a name."""
    check_output(path, replace=True, what=what)  # the name is O_EXCL's to refuse, race-free
    try:
        (replace_private if replace else create_private)(path, data)
    except OSError as exc:
        if isinstance(exc, FileExistsError) and not replace:
            raise ConfigurationError(f"{path} exists; {what} is never overwritten") from None
        raise from_os_error(exc, f"cannot write {path}") from None
