"""The lane's commands that read what a campaign did: ``status``, ``report`` and ``logs``."""

from __future__ import annotations

import sys

import click

from servatus.cli.app import _campaign, cli
from servatus.cli.options import _not_empty, complete_file, example, state_argument
from servatus.cli.output import (
    _context,
    check_output,
    emit_json,
    emit_json_text,
    json_option,
    paused_gc,
    with_warnings,
    write_output,
)
from servatus.cli.render import json_dumps, json_fields
from servatus.errors import ConfigurationError


@cli.command("status", epilog=example("servatus status state"))
@state_argument
@click.option("--offline", is_flag=True, help="Skip Slurm: show only what is recorded.")
@json_option
@paused_gc
def status_command(state: str, offline: bool, as_json: bool) -> None:
    """Task and allocation status.

    STATE is the campaign directory. Unless --offline, it reads squeue and the run markers in one
    remote command for each Target the campaign has submitted to.
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
