"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output, one document whatever the exit (:func:`json_option`); human output escapes every
non-printable character, a newline inside a value too (:func:`echo`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from servatus.cli import authoring, planning  # noqa: F401 - each adds its commands to cli
from servatus.cli.app import COMPLETE_VAR, _campaign, cli, console, main
from servatus.cli.options import (
    DEFAULT_CONFIG,
    _not_empty,
    complete_file,
    config_options,
    example,
    load_profile_option,
    state_argument,
)
from servatus.cli.output import (
    Context,
    _context,
    _fail,
    check_output,
    describe,
    echo,
    emit_json,
    emit_json_text,
    json_option,
    json_text,
    paused_gc,
    with_warnings,
    write_output,
)
from servatus.cli.render import (
    cancelled_lines,
    doctor_lines,
    json_dumps,
    json_fields,
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
