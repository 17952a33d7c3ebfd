"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output, one document whatever the exit (:func:`json_option`); human output escapes every
non-printable character, a newline inside a value too (:func:`echo`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from servatus.cli import authoring, observing, planning  # noqa: F401 - each adds its commands to cli
from servatus.cli.app import COMPLETE_VAR, _campaign, cli, console, main
from servatus.cli.options import (
    DEFAULT_CONFIG,
    config_options,
    example,
    load_profile_option,
    state_argument,
)
from servatus.cli.output import (
    Context,
    _fail,
    describe,
    echo,
    emit_json,
    json_option,
    json_text,
    with_warnings,
)
from servatus.cli.render import (
    cancelled_lines,
    doctor_lines,
    local_time,
    plugins_lines,
    profile_lines,
    reconcile_lines,
)
from servatus.files import path_word
from servatus.words import plural

if TYPE_CHECKING:
    pass

__all__ = ["COMPLETE_VAR", "cli", "console", "echo", "json_text", "main"]


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
