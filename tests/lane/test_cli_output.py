"""The CLI's output contract: help for every option, escaped human output, JSON whatever the exit,
and the lines a user reads when something did not go as planned."""

from __future__ import annotations

import click

from servatus.cli import cli


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = [group]
    for command in group.commands.values():
        found += _commands(command) if isinstance(command, click.Group) else [command]
    return found


def test_every_command_and_option_has_help_text() -> None:
    missing = [
        f"{command.name} {'/'.join(param.opts)}"
        for command in _commands(cli)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    missing += [command.name or "" for command in _commands(cli) if not command.help]
    assert missing == []
