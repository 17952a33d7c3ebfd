"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output, one document whatever the exit (:func:`json_option`); human output escapes every
non-printable character, a newline inside a value too (:func:`echo`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import click

from servatus import __version__
from servatus.cli.render import (
    accepted_line,
    authoring_line,
    cancelled_lines,
    check_line,
    doctor_lines,
    escape_line,
    json_dumps,
    json_fields,
    local_time,
    nothing_started_line,
    plan_lines,
    plugins_lines,
    profile_lines,
    reconcile_lines,
    saved_line,
    script_banner,
    shape_words,
    submitted_lease_lines,
    submitted_lines,
    terminal_text,
)
from servatus.errors import (
    EXIT_CTRL_C,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    ServatusError,
    StateWarning,
    Unavailable,
    from_os_error,
)
from servatus.files import path_word
from servatus.transport import Connect
from servatus.words import plural

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A path argument or option must not be empty: it would silently mean the current
    directory (or, for ``--output``, save nothing)."""
    if value == "":
        raise click.BadParameter("must not be empty", ctx, param)
    return value


def example(command: str) -> str:
    """A command's one ``--help`` example, as an epilog: ``\\b`` keeps click from rewrapping
    the command, so it prints as written and can be pasted (tests/core/test_cli_help.py runs
    every one)."""
    return f"Example:\n\n\b\n  {command}"


# Shell completion (docs/completion.md): what a parameter's value completes to. For a path only
# its kind is answered (file or directory); the shell lists the names itself.


def complete_file(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A file: the shell completes its name."""
    from click.shell_completion import CompletionItem  # noqa: PLC0415 - only when completing

    return [CompletionItem(incomplete, type="file")]


def complete_directory(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A campaign directory: the shell completes directory names only."""
    from click.shell_completion import CompletionItem  # noqa: PLC0415 - only when completing

    return [CompletionItem(incomplete, type="dir")]


def state_argument(func: F) -> F:
    """``STATE``, the campaign directory every campaign command takes first."""
    return click.argument("state", callback=_not_empty, shell_complete=complete_directory)(func)


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
            _emit_failure(type(exc).__name__, str(exc))
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


def _emit_failure(kind: str, message: str) -> None:
    context = _context()
    if context is None or context.emitted:
        return
    document = context.described() if context.described is not None else {}
    with contextlib.suppress(OSError):  # the failure the command met is the one to report
        emit_json({**document, "error": {"type": kind, "message": message}})


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


@cli.command(epilog=example("servatus plugins --json"))
@json_option
def plugins(as_json: bool) -> None:
    """List the loaded plugins and the distributions that brought them."""
    from servatus.plugins import hooks  # noqa: PLC0415 - plugins load only when asked for

    loaded = hooks().plugins()
    launchers = sorted(hooks().launchers)
    transports = sorted(hooks().transports)
    if as_json:
        emit_json(
            {
                "plugins": [
                    {"name": p.name, "distribution": p.distribution, "version": p.version}
                    for p in loaded
                ],
                "launchers": launchers,
                "transports": transports,
            }
        )
        return
    echo(*plugins_lines(loaded, launchers, transports))


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
        _fail(f"{type(exc).__name__}: {exc}")
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


def _fail(message: str) -> None:
    """One line on stderr: an error, or a warning, escaped as :func:`echo` escapes a line; none
    when the program started with stderr closed (cron, a daemon), where the exit code is all
    that can be told."""
    if sys.stderr is None:
        return
    click.echo(f"servatus: {escape_line(message)}", err=True)
    sys.stderr.flush()


# SERVATUS.toml ---------------------------------------------------------------------------------

if TYPE_CHECKING:
    from servatus.campaign import Campaign
    from servatus.config import Profile
    from servatus.engine.plan import Plan

DEFAULT_CONFIG = "SERVATUS.toml"


def config_options(func: F) -> F:
    """``--config PATH`` and ``--profile NAME``, as ``plan``, ``doctor`` and ``profile`` take them.

    ``--config`` stays ``None`` when not given, so a command can refuse it where it does not
    apply (``plan --lease``); :func:`load_profile_option` reads ``./SERVATUS.toml`` then.
    """
    func = click.option(
        "--profile",
        "profile_name",
        metavar="NAME",
        default=None,
        shell_complete=_complete_profile,
        help="Profile to use [default: default_profile, or the only one].",
    )(func)
    return click.option(
        "--config",
        "config",
        callback=_not_empty,
        metavar="PATH",
        default=None,
        shell_complete=complete_file,
        help=f"Configuration file [default: ./{DEFAULT_CONFIG}].",
    )(func)


def _complete_profile(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The profile names of the ``--config`` file given before it (or ./SERVATUS.toml), read
    as plain TOML, not validated: a file with a mistake still completes, and one that cannot be
    read completes to nothing (a completion never prints an error into the command line)."""
    import tomllib  # noqa: PLC0415 - only when completing

    from click.shell_completion import CompletionItem  # noqa: PLC0415

    from servatus.config import DEFAULT_PROFILE  # noqa: PLC0415
    from servatus.files import read_regular  # noqa: PLC0415

    try:
        document = tomllib.loads(read_regular(ctx.params.get("config") or DEFAULT_CONFIG).decode())
    except (OSError, ValueError, ServatusError):
        return []
    profiles = document.get("profiles")
    names = sorted(profiles) if isinstance(profiles, dict) and profiles else [DEFAULT_PROFILE]
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def load_profile_option(config: str | None, profile_name: str | None) -> Profile:
    """The Profile the ``--config``/``--profile`` pair names; errors are ConfigurationError."""
    from servatus.config import Profile  # noqa: PLC0415 (keep CLI start-up light)

    return Profile.load(config if config is not None else DEFAULT_CONFIG, name=profile_name)


@cli.command("profile", epilog=example("servatus profile --profile cpu"))
@config_options
@json_option
def profile_command(config: str | None, profile_name: str | None, as_json: bool) -> None:
    """Show the profile SERVATUS.toml resolves to, with how many Tasks fit one allocation."""
    from servatus.config import capacity, profile_to_document  # noqa: PLC0415

    profile = load_profile_option(config, profile_name)
    fits = capacity(profile.target, profile.resources)
    if as_json:
        emit_json(
            {
                "config": config if config is not None else DEFAULT_CONFIG,
                "profile": profile_to_document(profile),
                "capacity": fits,
            }
        )
        return
    echo(*profile_lines(profile, fits))


# authoring: create, ensure, append, seal --------------------------------------------------------

if TYPE_CHECKING:
    from servatus.campaign import Authoring


def _report_authoring(command: str, state: str, done: Authoring, as_json: bool) -> None:
    """One short line, or the result document ``{"command", "state", "created", "added", ...}``."""
    if as_json:
        emit_json({"command": command, "state": state, **done.to_document()})
        return
    echo(authoring_line(command, state, done))


@cli.command("create", epilog=example("servatus create state tasks.jsonl --appendable"))
@state_argument
@click.argument("tasks_file", metavar="TASKS.jsonl", shell_complete=complete_file)
@click.option("--appendable", is_flag=True, help="Allow appending Tasks later (default: sealed).")
@json_option
def create_command(state: str, tasks_file: str, appendable: bool, as_json: bool) -> None:
    """Create a campaign; fails if it exists. Sealed unless --appendable.

    STATE is the campaign directory, made (owner-only) if it is missing. TASKS.jsonl holds one
    Task per line: a JSON object with "key" and "args", and optionally "env" and "stdin_file" (a
    path relative to the file's directory).
    """
    from servatus.campaign import create_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = create_state(state, read_jsonl(tasks_file), appendable=appendable)
    _report_authoring("create", state, done, as_json)


@cli.command("ensure", epilog=example("servatus ensure state tasks.jsonl --sealed"))
@state_argument
@click.argument("tasks_file", metavar="TASKS.jsonl", shell_complete=complete_file)
@click.option(
    "--sealed",
    is_flag=True,
    help="Create the campaign sealed, or seal it after appending (default: appendable).",
)
@config_options
@json_option
def ensure_command(
    state: str,
    tasks_file: str,
    sealed: bool,
    config: str | None,
    profile_name: str | None,
    as_json: bool,
) -> None:
    """Create a campaign, or append unseen Tasks; existing keys must match. --sealed seals it.

    STATE is the campaign directory; TASKS.jsonl is a Tasks file, as for create. Run again with
    the same file, it adds nothing. With --config or --profile, a Task whose batch script could
    never fit that profile's max_script_bytes is refused first.
    """
    from servatus.campaign import ensure_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    bound = None
    if config is not None or profile_name is not None:
        bound = load_profile_option(config, profile_name).target.max_script_bytes
    tasks = read_jsonl(tasks_file)
    _, done = ensure_state(state, tasks, sealed=sealed, max_script_bytes=bound)
    _report_authoring("ensure", state, done, as_json)


@cli.command("append", epilog=example("servatus append state more-tasks.jsonl"))
@state_argument
@click.argument("tasks_file", metavar="TASKS.jsonl", shell_complete=complete_file)
@json_option
def append_command(state: str, tasks_file: str, as_json: bool) -> None:
    """Append new Tasks to an appendable campaign; identical existing Tasks are skipped.

    STATE is the campaign directory; TASKS.jsonl is a Tasks file, as for create.
    """
    from servatus.campaign import append_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = append_state(state, read_jsonl(tasks_file))
    _report_authoring("append", state, done, as_json)


@cli.command("seal", epilog=example("servatus seal state"))
@state_argument
@json_option
def seal_command(state: str, as_json: bool) -> None:
    """End authoring irreversibly.

    STATE is the campaign directory. A sealed campaign takes no new Task: append, and ensure with
    a key it lacks, are refused.
    """
    from servatus.campaign import seal_state  # noqa: PLC0415

    _, done = seal_state(state)
    _report_authoring("seal", state, done, as_json)


# -- the Slurm lane -----------------------------------------------------------------------------


def _campaign(state: str) -> Campaign:
    from servatus.campaign import Campaign  # noqa: PLC0415 - loaded per command

    context = click.get_current_context().find_object(Context)
    return Campaign.open(state, connect=context.connect if context else None)


def check_output(path: str, *, replace: bool, what: str = "a saved plan") -> None:
    """Refuse an ``--output FILE`` that :func:`write_output` would refuse, before a command reads
    Slurm or records anything for it: inside a campaign's directory, or there already when
    nothing is replaced. ``write_output`` checks again, as the kernel sees it when it writes."""
    from servatus.errors import ConfigurationError  # noqa: PLC0415
    from servatus.files import checked_path  # noqa: PLC0415
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
    from servatus.errors import ConfigurationError  # noqa: PLC0415
    from servatus.files import create_private, replace_private  # noqa: PLC0415

    check_output(path, replace=True, what=what)  # the name is O_EXCL's to refuse, race-free
    try:
        (replace_private if replace else create_private)(path, data)
    except OSError as exc:
        if isinstance(exc, FileExistsError) and not replace:
            raise ConfigurationError(f"{path} exists; {what} is never overwritten") from None
        raise from_os_error(exc, f"cannot write {path}") from None


def _budget(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--budget``'s ``[D-]HH:MM:SS``, in seconds rounded up to whole minutes; a value that is
    no duration is a usage error, as any other option's bad value."""
    if value is None:
        return None
    from servatus.continuation import Continuation  # noqa: PLC0415 (keep CLI start-up light)
    from servatus.errors import ConfigurationError  # noqa: PLC0415

    try:
        return Continuation(budget=value).budget
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@cli.command("plan", epilog=example("servatus plan state --output plan.json"))
@state_argument
@config_options
@click.option(
    "--output",
    callback=_not_empty,
    metavar="FILE",
    shell_complete=complete_file,
    help="Save the plan (0600, never overwrites).",
)
@click.option("--retry", "retry", multiple=True, metavar="KEY", help="Retry this Task.")
@click.option("--retry-failed", is_flag=True, help="Retry every failed or stopped Task.")
@click.option("--only", "only", multiple=True, metavar="KEY", help="Plan only these Tasks.")
@click.option(
    "--tasks-per-allocation",
    type=click.IntRange(min=1),
    metavar="N",
    help="Pack at most N Tasks into one allocation (never more than the profile fits).",
)
@click.option(
    "--budget",
    callback=_budget,
    metavar="DURATION",
    help="Lifetime run time per selected Task, [D-]HH:MM:SS: plan chains of links that spend it.",
)
@click.option(
    "--max-links",
    type=click.IntRange(min=1, max=32),  # servatus.continuation.MAX_LINKS, not imported here
    metavar="K",
    help="At most K links per chain; without --budget, K full links.",
)
@click.option(
    "--hold",
    type=click.IntRange(min=1),
    metavar="N",
    help="Plan a lease of N slots of the profile's per-Task resources (K leases with "
    "--max-links K).",
)
@click.option(
    "--lease",
    metavar="ID",
    help="Plan the selected Tasks as one-slot steps in this lease's current link (any of its "
    "links' ids); no --profile or --config.",
)
@click.option("--show-scripts", is_flag=True, help="Print the batch scripts (sensitive).")
@json_option
@paused_gc
def plan_command(
    state: str,
    config: str | None,
    profile_name: str | None,
    output: str | None,
    retry: tuple[str, ...],
    retry_failed: bool,
    only: tuple[str, ...],
    tasks_per_allocation: int | None,
    budget: int | None,
    max_links: int | None,
    hold: int | None,
    lease: str | None,
    show_scripts: bool,
    as_json: bool,
) -> None:
    """Show selected, held and deferred Tasks and what the plan requests at most.

    STATE is the campaign directory. The profile comes from SERVATUS.toml (--config, --profile),
    or with --lease from the lease. --retry and --only may be given more than once. Nothing is
    submitted: save the plan with --output, then validate or submit that file.
    """
    from servatus.continuation import Continuation  # noqa: PLC0415

    if hold is not None:
        _refuse_with_hold(
            retry=bool(retry),
            retry_failed=retry_failed,
            only=bool(only),
            tasks_per_allocation=tasks_per_allocation is not None,
            budget=budget is not None,
            show_scripts=show_scripts,
        )
    if lease is not None:
        _refuse_with_lease(
            profile=profile_name is not None,
            config=config is not None,
            hold=hold is not None,
            tasks_per_allocation=tasks_per_allocation is not None,
            max_links=max_links is not None,
            show_scripts=show_scripts,
        )
    if output:
        check_output(output, replace=False)
    if lease is not None:
        campaign = _campaign(state)
        plan = campaign.plan(
            lease=lease,
            retry=retry,
            retry_failed=retry_failed,
            only=only or None,
            continuation=None if budget is None else Continuation(budget=budget),
        )
        _show_plan(state, plan, output, as_json)
        return
    profile = load_profile_option(config, profile_name)
    chained = budget is not None or max_links is not None
    continuation = Continuation(budget=budget, max_links=max_links) if chained else None
    if hold is None and not show_scripts:
        from servatus.cli import status_cache  # noqa: PLC0415
        from servatus.engine.plan import make_request  # noqa: PLC0415

        request = make_request(
            retry,
            retry_failed=retry_failed,
            only=only or None,
            tasks_per_allocation=tasks_per_allocation,
        )
        context = _context()
        connect = context.connect if context else None
        made = status_cache.plan(state, profile, request, continuation, connect=connect)
        _show_plan(state, made, output, as_json)
        return
    campaign = _campaign(state)
    if hold is not None:
        plan = campaign.hold(profile, slots=hold, max_links=max_links)
    else:
        plan = campaign.plan(
            profile,
            retry=retry,
            retry_failed=retry_failed,
            only=only or None,
            tasks_per_allocation=tasks_per_allocation,
            continuation=continuation,
        )
    _show_plan(state, plan, output, as_json)
    if show_scripts:
        for allocation, script in zip(plan.allocations, campaign.scripts(plan), strict=True):
            click.echo(script_banner(allocation.allocation_id), err=as_json)
            click.echo(script, nl=False, err=as_json)


def _show_plan(state: str, plan: Plan, output: str | None, as_json: bool) -> None:
    """What ``plan`` prints and saves, whatever it planned."""
    from servatus.campaign import saved_plan_document, to_document  # noqa: PLC0415
    from servatus.engine.plan_document import plan_to_document  # noqa: PLC0415

    warned = with_warnings(plan.warnings)
    for warning in plan.warnings:  # read by whoever runs it, also when --json goes to a program
        _fail(f"warning: {warning}")
    # Built only to be saved or printed: of 100,000 Tasks held, it costs more than the table.
    # Only a saved plan is sealed (ADR 0011): the first one creates the campaign's plan key.
    document = (
        saved_plan_document(state, plan) if output else plan_to_document(plan) if as_json else {}
    )
    if output:
        write_output(output, (json_text(document) + "\n").encode(), replace=False)
    if as_json:
        totals = plan.totals
        emit_json(
            {
                **document,
                "retry": list(plan.request.retry),
                "extensions": [to_document(extension) for extension in plan.extensions],
                "allocations": [to_document(a) for a in plan.allocations],
                "warnings": warned,
                "saved": output,
                "totals": {
                    "cpu_hours": totals.cpu_hours,
                    "gpu_hours": totals.gpu_hours,
                    "memory_gib_hours": totals.memory_gib_hours,
                },
            }
        )
    else:
        echo(*plan_lines(plan))
        if output:
            echo(saved_line(state, output))


def _refuse_with_lease(**given: bool) -> None:
    """Steps in a lease take the lease's slot: an option that names a profile, packs Tasks,
    chains links or renders batch scripts is a usage error beside ``--lease``."""
    wrong = [f"--{name.replace('_', '-')}" for name, value in given.items() if value]
    if wrong:
        raise click.UsageError(f"--lease plans steps in a lease, which takes no {', '.join(wrong)}")


def _refuse_with_hold(**given: bool) -> None:
    """A lease plans no Tasks: every option that selects, packs or budgets them is a usage
    error beside ``--hold`` (and its scripts are not rendered yet)."""
    wrong = [f"--{name.replace('_', '-')}" for name, value in given.items() if value]
    if wrong:
        raise click.UsageError(f"--hold plans a lease, which takes no {', '.join(wrong)}")


def _read_plan(state: str, path: str) -> Plan:
    from servatus.campaign import read_saved_plan  # noqa: PLC0415

    return read_saved_plan(state, path)


@cli.command("validate", epilog=example("servatus validate state plan.json"))
@state_argument
@click.argument("plan_file", metavar="PLAN", shell_complete=complete_file)
@json_option
def validate_command(state: str, plan_file: str, as_json: bool) -> None:
    """sbatch --test-only once per distinct allocation shape; exit 1 if any is rejected.

    STATE is the campaign directory; PLAN is a plan file saved by plan --output. Nothing is
    submitted.
    """
    from servatus.campaign import ShapeCheck, to_document  # noqa: PLC0415
    from servatus.errors import ShapeRejected  # noqa: PLC0415

    made: list[ShapeCheck] = []  # the checks made, also if Slurm stops answering
    if as_json:
        describe(lambda: {"checks": [to_document(check) for check in made]})
    checks = _campaign(state).validate(_read_plan(state, plan_file), progress=made.append)
    if not as_json:
        for check in checks:
            echo(check_line(check))
    rejected = [check for check in checks if not check.accepted]
    if rejected:
        raise ShapeRejected("; ".join(f"{shape_words(c)}: {c.message}" for c in rejected))


@cli.command("submit", epilog=example("servatus submit state plan.json"))
@state_argument
@click.argument("plan_file", metavar="PLAN", shell_complete=complete_file)
@json_option
def submit_command(state: str, plan_file: str, as_json: bool) -> None:
    """Submit the reviewed plan. Exit 3 if interrupted.

    STATE is the campaign directory; PLAN is the plan file saved by plan --output. A plan the
    campaign or Slurm has moved on from is refused as stale: plan again.
    """
    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.operations.submission import SubmittedAllocation  # noqa: PLC0415

    plan = _read_plan(state, plan_file)
    interactive = not as_json and sys.stdout.isatty()
    keys = {allocation.allocation_id: allocation.task_keys for allocation in plan.allocations}
    accepted: list[SubmittedAllocation] = []  # what Slurm accepted, also if submit stops

    def progress(index: int, count: int, allocation_id: str, job: int) -> None:
        accepted.append(SubmittedAllocation(allocation_id, job, keys[allocation_id]))
        if interactive:
            echo(accepted_line(index, count, allocation_id, job))

    if as_json:
        describe(lambda: {"receipts": [to_document(receipt) for receipt in accepted]})
    result = _campaign(state).submit(plan, progress=progress)
    if as_json:
        emit_json({"receipts": [to_document(receipt) for receipt in result.receipts]})
        return
    lines = submitted_lease_lines if plan.hold is not None else submitted_lines
    echo(*lines(result.receipts))


@cli.command(
    "start", epilog=example("servatus start state eval.jsonl --lease 14b85a88054a6bb97dee6940")
)
@state_argument
@click.argument("tasks_file", metavar="TASKS.jsonl", shell_complete=complete_file)
@click.option("--lease", required=True, metavar="ID", help="The lease to start the Tasks in.")
@click.option("--retry", "retry", multiple=True, metavar="KEY", help="Start this Task again.")
@click.option("--retry-failed", is_flag=True, help="Start every failed or stopped Task again.")
@click.option(
    "--budget",
    callback=_budget,
    metavar="DURATION",
    help="Lifetime run time per Task, [D-]HH:MM:SS (SERVATUS_BUDGET; a spent Task is held).",
)
@json_option
def start_command(
    state: str,
    tasks_file: str,
    lease: str,
    retry: tuple[str, ...],
    retry_failed: bool,
    budget: int | None,
    as_json: bool,
) -> None:
    """Register the file's new Tasks and start its keys as steps in the lease. Exit 3 if
    interrupted.

    STATE is the campaign directory; TASKS.jsonl is a Tasks file, as for create. --lease names
    the lease by any of its links' ids. --retry may be given more than once.
    """
    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.operations.submission import SubmittedAllocation  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    tasks = read_jsonl(tasks_file)
    keys = {task.key for task in tasks}
    accepted: list[SubmittedAllocation] = []  # what was offered, also if start stops

    def progress(index: int, count: int, step: str, job: int) -> None:
        del index, count
        accepted.append(SubmittedAllocation(step, job, ()))

    if as_json:
        describe(lambda: {"receipts": [to_document(receipt) for receipt in accepted]})
    result = _campaign(state).start(
        tasks, lease=lease, retry=retry, retry_failed=retry_failed, budget=budget,
        progress=progress,
    )  # fmt: skip
    held = [[key, hold.value] for key, hold in result.held if key in keys]
    if as_json:
        emit_json({"receipts": [to_document(receipt) for receipt in result.receipts], "held": held})
        return
    if not result.receipts:
        echo(nothing_started_line(keys, result.held))
        return
    echo(*submitted_lines(result.receipts))


@cli.command("status", epilog=example("servatus status state"))
@state_argument
@click.option("--offline", is_flag=True, help="Skip Slurm: show only what is recorded.")
@json_option
@paused_gc
def status_command(state: str, offline: bool, as_json: bool) -> None:
    """Task and allocation status.

    STATE is the campaign directory. Unless --offline, it reads one squeue and one run-marker
    listing for each Target the campaign has submitted to.
    """
    from servatus.cli.status_cache import view  # noqa: PLC0415

    context = _context()
    shown = view(
        state, offline=offline, as_json=as_json, connect=context.connect if context else None
    )
    if shown.record_warning is not None:
        click.echo(f"servatus: warning: {shown.record_warning}", err=True)
    if as_json:
        warnings = json_dumps(with_warnings(shown.warnings))
        emit_json_text(json_fields({**shown.fields, "warnings": warnings}))
        return
    click.echo(shown.text)


@cli.command("report", epilog=example("servatus report state --output report.html"))
@state_argument
@click.option(
    "--output",
    callback=_not_empty,
    metavar="FILE",
    shell_complete=complete_file,
    help="Write the page here (0600, never overwrites) [default: stdout, never a terminal].",
)
@click.option("--offline", is_flag=True, help="Skip Slurm: draw only what is recorded.")
@json_option
@paused_gc
def report_command(state: str, output: str | None, offline: bool, as_json: bool) -> None:
    """A timeline of every Task and what the campaign cost, in one HTML file that needs no
    network; --json prints the data behind it.

    STATE is the campaign directory.
    """
    from servatus.cli.report_html import render  # noqa: PLC0415
    from servatus.engine.report import report_document  # noqa: PLC0415
    from servatus.errors import ConfigurationError  # noqa: PLC0415

    if output is None and not as_json and sys.stdout.isatty():
        raise ConfigurationError(
            "a report is an HTML page and never goes to a terminal; use --output FILE or a pipe"
        )
    if output is not None:
        check_output(output, replace=False, what="a report")
    campaign = _campaign(state)
    document = report_document(campaign.report(offline=offline))
    if campaign.record_warning is not None:
        click.echo(f"servatus: warning: {campaign.record_warning}", err=True)
    if output is not None:
        write_output(output, render(document).encode(), replace=False, what="a report")
    if as_json:
        emit_json({**document, "warnings": with_warnings(document["warnings"])})
    elif output is None:
        sys.stdout.write(render(document))
        sys.stdout.flush()


@cli.command("reconcile", epilog=example("servatus reconcile state"))
@state_argument
@json_option
def reconcile_command(state: str, as_json: bool) -> None:
    """Resolve every unresolved allocation from Slurm evidence; exit 75 while some still wait.

    STATE is the campaign directory. Running it again is always safe.
    """
    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.errors import StillWaiting  # noqa: PLC0415
    from servatus.operations.reconcile import Resolution  # noqa: PLC0415

    recorded: list[Resolution] = []  # what was decided, also if recording the rest fails
    if as_json:
        describe(
            lambda: {
                "resolutions": [to_document(decision) for decision in recorded],
                "warnings": with_warnings(()),
            }
        )

    def progress(decision: Resolution) -> None:
        recorded.append(decision)
        if not as_json:  # each as it is decided, so a warning reconcile ends with comes after
            echo(*reconcile_lines([decision]))

    decisions = _campaign(state).reconcile(progress=progress)
    if not as_json and not decisions:
        echo(*reconcile_lines(decisions))
    waiting = [d for d in decisions if d.outcome == "waiting"]
    if waiting:
        when = local_time(max(d.retry_at or 0 for d in waiting))
        raise StillWaiting(
            f"{plural(len(waiting), 'allocation')} still "
            f"{'waits' if len(waiting) == 1 else 'wait'} for evidence; "
            f"run servatus reconcile {path_word(state)} again after {when}"
        )


@cli.command("cancel", epilog=example("servatus cancel state --task seed-2"))
@state_argument
@click.option(
    "--task", "tasks", multiple=True, metavar="KEY", help="Cancel this Task's allocations."
)
@click.option(
    "--allocation", "allocations", multiple=True, metavar="ID", help="Cancel this allocation."
)
@json_option
def cancel_command(
    state: str, tasks: tuple[str, ...], allocations: tuple[str, ...], as_json: bool
) -> None:
    """scancel matching allocations that Slurm lists as queued or running, newest first; a step
    stops inside its lease, and a lease ends with every step in it.

    STATE is the campaign directory. Name at least one --task or --allocation; each may be given
    more than once.
    """
    if not tasks and not allocations:
        raise click.UsageError("name at least one --task or --allocation to cancel")
    cancelled: list[str] = []  # what Slurm cancelled, also if another scancel failed
    stepped: dict[str, list[str]] = {"withdrawn": [], "stopping": []}
    if as_json:
        describe(lambda: {"cancelled": list(cancelled), **stepped})
    result = _campaign(state).cancel(
        tasks=tasks,
        allocations=allocations,
        progress=cancelled.append,
        steps=lambda word, step_id: stepped[word].append(step_id),
    )
    if as_json:
        emit_json(
            {
                "cancelled": list(result.allocations),
                "withdrawn": list(result.withdrawn),
                "stopping": list(result.stopping),
            }
        )
    else:
        echo(*cancelled_lines(result.allocations, result.withdrawn, result.stopping))


@cli.command("logs", epilog=example("servatus logs state --task seed-1 --output seed-1.log"))
@state_argument
@click.option(
    "--task",
    "tasks",
    multiple=True,
    metavar="KEY",
    help="This Task's step log (in its current allocation, or in each --allocation).",
)
@click.option(
    "--allocation",
    "allocations",
    multiple=True,
    metavar="ID",
    help="This allocation's log (with --task: that Task's step log in it).",
)
@click.option(
    "--bytes",
    "size",
    type=click.IntRange(1, 1048576),
    default=65536,
    show_default=True,
    help="Print at most the last N bytes of each log.",
    metavar="N",
)
@click.option(
    "--output",
    callback=_not_empty,
    metavar="FILE",
    shell_complete=complete_file,
    help="Write the log here (0600).",
)
def logs_command(
    state: str,
    tasks: tuple[str, ...],
    allocations: tuple[str, ...],
    size: int,
    output: str | None,
) -> None:
    """Bounded log tail; writes 0600; refuses a terminal.

    STATE is the campaign directory. Name at least one --task or --allocation; each may be given
    more than once. When there are several logs, each follows a line that names its path.
    """
    from servatus.errors import ConfigurationError  # noqa: PLC0415

    if not tasks and not allocations:
        raise click.UsageError("name at least one --task or --allocation whose log to read")
    if output is None and sys.stdout.isatty():
        raise ConfigurationError(
            "logs write raw bytes and never to a terminal; use --output FILE or a pipe"
        )
    data = _campaign(state).logs(tasks=tasks, allocations=allocations, size=size)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        write_output(output, data, replace=True)


@cli.command("doctor", epilog=example("servatus doctor --profile cpu"))
@config_options
@json_option
def doctor_command(config: str | None, profile_name: str | None, as_json: bool) -> None:
    """Check, read-only, what the profile needs from its cluster. Exit 1 if a check fails,
    75 if one went unanswered."""
    from servatus.operations.doctor import diagnose  # noqa: PLC0415

    profile = load_profile_option(config, profile_name)
    context = click.get_current_context().find_object(Context)
    diagnosis = diagnose(profile, connect=context.connect if context else None)
    if as_json:
        emit_json(
            {
                "profile": diagnosis.profile,
                "checks": [
                    {"name": c.name, "status": c.status, "detail": c.detail}
                    for c in diagnosis.checks
                ],
                "warnings": with_warnings(diagnosis.warnings),
            }
        )
    else:
        echo(*doctor_lines(diagnosis))
    for warning in diagnosis.warnings:  # read by whoever runs it, also when --json goes elsewhere
        _fail(f"warning: {warning}")
    if diagnosis.exit_code:
        raise click.exceptions.Exit(diagnosis.exit_code)
