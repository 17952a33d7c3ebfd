"""The arguments and options several commands share: ``STATE``, ``--config`` and ``--profile``,
what their values complete to in a shell, and each command's ``--help`` example."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from servatus.errors import ServatusError
from servatus.files import read_regular

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from servatus.config import Profile

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
