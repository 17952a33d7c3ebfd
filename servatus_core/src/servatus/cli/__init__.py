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

from servatus.cli import authoring  # noqa: F401 - each adds its commands to cli
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
    accepted_line,
    cancelled_lines,
    check_line,
    doctor_lines,
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
)
from servatus.files import path_word
from servatus.words import plural

if TYPE_CHECKING:
    from servatus.engine.plan import Plan

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
    from servatus.engine.plan import plan_to_document  # noqa: PLC0415

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
