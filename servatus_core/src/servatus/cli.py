"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output; human output escapes every non-printable character (:func:`human`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from servatus import __version__
from servatus.errors import EXIT_CTRL_C, EXIT_ERROR, EXIT_OK, EXIT_USAGE, ServatusError
from servatus.transport import Connect

F = TypeVar("F", bound=Callable[..., Any])


class Context:
    """What every command receives: the ``connect=`` override, if any."""

    def __init__(self, connect: Connect | None) -> None:
        self.connect = connect


pass_context = click.make_pass_decorator(Context)


def human(text: str) -> str:
    """Escape every non-printable character (keeping newlines between lines) for a terminal."""
    return "\n".join(_escape_line(line) for line in text.split("\n"))


def _escape_line(line: str) -> str:
    if line.isprintable():
        return line
    out = []
    for char in line:
        if char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def echo(text: str) -> None:
    """Print human output, escaped."""
    click.echo(human(text))


def emit_json(document: Any) -> None:
    """Print one exact JSON document."""
    click.echo(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False))


def json_option(func: F) -> F:
    """The ``--json`` flag every command except ``logs`` takes."""
    return click.option("--json", "as_json", is_flag=True, help="Print exact machine output.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", prog_name="servatus", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Durable Slurm sweeps with atomic publication of their results."""


@cli.command()
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
    width = max((len(p.name) for p in loaded), default=0)
    for p in loaded:
        echo(f"{p.name.ljust(width)}  {p.distribution} {p.version}")
    echo(f"launchers: {', '.join(launchers) or '-'}")
    echo(f"transports: {', '.join(transports) or '-'}")


def main(args: Sequence[str] | None = None, *, connect: Connect | None = None) -> int:
    """Run the CLI and return its exit code; ``connect`` replaces how Slurm is reached."""
    try:
        cli.main(
            args=list(args) if args is not None else None,
            prog_name="servatus",
            standalone_mode=False,
            obj=Context(connect),
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("servatus: interrupted", err=True)
        return EXIT_CTRL_C
    except click.ClickException as exc:
        _fail(f"{exc.format_message()}" if not isinstance(exc, click.UsageError) else _usage(exc))
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except ServatusError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("servatus: interrupted; recorded intent survives; run status", err=True)
        return EXIT_CTRL_C
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line, never a traceback
        _fail(f"unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    return EXIT_OK


def _usage(exc: click.UsageError) -> str:
    command = exc.ctx.command_path if exc.ctx else "servatus"
    return f"{exc.format_message()} (see '{command} --help')"


def _fail(message: str) -> None:
    click.echo(f"servatus: {human(message)}".replace("\n", " "), err=True)
    sys.stderr.flush()


# SERVATUS.toml ---------------------------------------------------------------------------------

if TYPE_CHECKING:
    from servatus.config import Profile

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
        help="Profile to use [default: default_profile, or the only one].",
    )(func)
    return click.option(
        "--config",
        "config",
        metavar="PATH",
        default=None,
        help=f"Configuration file [default: ./{DEFAULT_CONFIG}].",
    )(func)


def load_profile_option(config: str | None, profile_name: str | None) -> Profile:
    """The Profile the ``--config``/``--profile`` pair names; errors are ConfigurationError."""
    from servatus.config import Profile  # noqa: PLC0415 (keep CLI start-up light)

    return Profile.load(config if config is not None else DEFAULT_CONFIG, name=profile_name)


def profile_lines(profile: Profile, capacity: int) -> list[str]:
    """The resolved profile as ``profile``'s human output prints it, durations formatted."""
    from servatus.config import format_duration  # noqa: PLC0415

    target, resources = profile.target, profile.resources
    apptainer = target.apptainer

    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    rows: list[tuple[str, str]] = [
        ("host", target.host or "- (Slurm runs locally)"),
        ("slurm_bin", target.slurm_bin),
        ("work_root", target.work_root),
        ("log_root", target.log_root),
        ("partitions", ",".join(target.partitions)),
        ("account", shown(target.account)),
        ("qos", shown(target.qos)),
        ("constraint", shown(target.constraint)),
        ("gpu_gres", shown(target.gpu_gres)),
        ("max_tasks_per_allocation", str(target.max_tasks_per_allocation)),
        ("max_cpus_per_allocation", str(target.max_cpus_per_allocation)),
        ("max_memory_mib_per_allocation", str(target.max_memory_mib_per_allocation)),
        ("max_gpus_per_allocation", str(target.max_gpus_per_allocation)),
        ("max_time_limit", format_duration(target.max_time_limit)),
        ("max_allocations_per_submit", shown(target.max_allocations_per_submit or "- (no cap)")),
        ("max_script_bytes", str(target.max_script_bytes)),
        ("launcher", target.launcher),
        ("apptainer", apptainer.executable if apptainer else "-"),
        ("image", apptainer.image if apptainer else "-"),
        ("binds", ", ".join(apptainer.binds) if apptainer and apptainer.binds else "-"),
        *((f"launcher_options.{key}", value) for key, value in target.launcher_options),
    ]
    needs: list[tuple[str, str]] = [
        ("cpus", str(resources.cpus)),
        ("memory_mib", str(resources.memory_mib)),
        ("gpus", str(resources.gpus)),
        ("time_limit", format_duration(resources.time_limit)),
        (
            "signal_before_end",
            "-"
            if resources.signal_before_end is None
            else format_duration(resources.signal_before_end),
        ),
    ]
    width = max(len(key) for key, _ in (*rows, *needs))
    return [
        f"profile {profile.name}",
        "target",
        *(f"  {key.ljust(width)}  {value}" for key, value in rows),
        "resources",
        *(f"  {key.ljust(width)}  {value}" for key, value in needs),
        f"capacity: {capacity} Task{'s' if capacity != 1 else ''} per allocation",
    ]


@cli.command("profile")
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
    for line in profile_lines(profile, fits):
        echo(line)


# authoring: create, ensure, append, seal --------------------------------------------------------

if TYPE_CHECKING:
    from servatus.campaign import Authoring


def _report_authoring(command: str, state: str, done: Authoring, as_json: bool) -> None:
    """One short line, or the result document ``{"command", "state", "created", "added", ...}``."""
    if as_json:
        emit_json({"command": command, "state": state, **done.to_document()})
        return
    kind = "sealed" if done.sealed else "appendable"
    if done.created:
        echo(f"created {state}: {done.total} Task{'s' if done.total != 1 else ''} ({kind})")
    elif command == "seal":
        echo(f"sealed {state}: {done.total} Task{'s' if done.total != 1 else ''}")
    else:
        echo(f"{command} {state}: {done.added} new, {done.existing} existing")


@cli.command("create")
@click.argument("state")
@click.argument("tasks_file", metavar="TASKS.jsonl")
@click.option("--appendable", is_flag=True, help="Allow appending Tasks later (default: sealed).")
@json_option
def create_command(state: str, tasks_file: str, appendable: bool, as_json: bool) -> None:
    """Create a campaign; fails if it exists. Sealed unless --appendable."""
    from servatus.campaign import create_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = create_state(state, read_jsonl(tasks_file), appendable=appendable)
    _report_authoring("create", state, done, as_json)


@cli.command("ensure")
@click.argument("state")
@click.argument("tasks_file", metavar="TASKS.jsonl")
@click.option("--sealed", is_flag=True, help="Create the campaign sealed (default: appendable).")
@json_option
def ensure_command(state: str, tasks_file: str, sealed: bool, as_json: bool) -> None:
    """Create a campaign, or append unseen Tasks; existing keys must match."""
    from servatus.campaign import ensure_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = ensure_state(state, read_jsonl(tasks_file), sealed=sealed)
    _report_authoring("ensure", state, done, as_json)


@cli.command("append")
@click.argument("state")
@click.argument("tasks_file", metavar="TASKS.jsonl")
@json_option
def append_command(state: str, tasks_file: str, as_json: bool) -> None:
    """Append new Tasks to an appendable campaign; identical existing Tasks are skipped."""
    from servatus.campaign import append_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = append_state(state, read_jsonl(tasks_file))
    _report_authoring("append", state, done, as_json)


@cli.command("seal")
@click.argument("state")
@json_option
def seal_command(state: str, as_json: bool) -> None:
    """End authoring irreversibly."""
    from servatus.campaign import seal_state  # noqa: PLC0415

    _, done = seal_state(state)
    _report_authoring("seal", state, done, as_json)
