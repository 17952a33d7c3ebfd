"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output; human output escapes every non-printable character (:func:`human`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

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
    return click.option("--json", "as_json", is_flag=True, help="Print exact machine output.")(
        func
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="servatus", message="%(prog)s %(version)s")
def cli() -> None:
    """Durable Slurm sweeps with atomic publication of their results."""


@cli.command()
@json_option
def plugins(as_json: bool) -> None:
    """List the loaded plugins and the distributions that brought them."""
    from servatus.plugins import hooks

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
