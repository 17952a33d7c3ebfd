"""The lane's commands that plan and send work to Slurm: ``plan``, ``validate``, ``submit`` and
``start``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from servatus.cli.app import _campaign, cli
from servatus.cli.options import (
    _not_empty,
    complete_file,
    config_options,
    example,
    load_profile_option,
    state_argument,
)
from servatus.cli.output import (
    _context,
    _fail,
    check_output,
    describe,
    echo,
    emit_json,
    json_option,
    json_text,
    paused_gc,
    with_warnings,
    write_output,
)
from servatus.cli.render import (
    accepted_line,
    batch_line,
    check_line,
    nothing_started_line,
    plan_lines,
    saved_line,
    script_banner,
    shape_words,
    submitted_lease_lines,
    submitted_lines,
)
from servatus.errors import ConfigurationError, ShapeRejected

if TYPE_CHECKING:
    from servatus.engine.plan import Plan


def _budget(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--budget``'s ``[D-]HH:MM:SS``, in seconds rounded up to whole minutes; a value that is
    no duration is a usage error, as any other option's bad value."""
    if value is None:
        return None
    from servatus.continuation import Continuation  # noqa: PLC0415 (keep CLI start-up light)

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
    from servatus.engine.plan_document import plan_to_document  # noqa: PLC0415
    from servatus.operations.saved_plan import saved_plan_document  # noqa: PLC0415

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
        from servatus.campaign import to_document  # noqa: PLC0415 - the whole API, for JSON only

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

    def batches(sent: int, size: int, count: int) -> None:
        if interactive and size < count:
            echo(batch_line(sent, size, count))

    if as_json:
        describe(lambda: {"receipts": [to_document(receipt) for receipt in accepted]})
    result = _campaign(state).submit(plan, progress=progress, batches=batches)
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
