"""The authoring commands, which make a campaign and its Tasks: ``create``, ``ensure``,
``append`` and ``seal``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from servatus.cli.app import cli
from servatus.cli.options import (
    complete_file,
    config_options,
    example,
    load_profile_option,
    state_argument,
)
from servatus.cli.output import echo, emit_json, json_option
from servatus.cli.render import authoring_line

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
