"""The lane's commands that act on allocations already sent: ``reconcile`` resolves them from
Slurm's evidence, ``cancel`` stops them."""

from __future__ import annotations

import click

from servatus.cli.app import _campaign, cli
from servatus.cli.options import example, state_argument
from servatus.cli.output import describe, echo, emit_json, json_option, with_warnings
from servatus.cli.render import cancelled_lines, local_time, reconcile_lines
from servatus.errors import StillWaiting
from servatus.files import path_word
from servatus.words import plural


@cli.command("reconcile", epilog=example("servatus reconcile state"))
@state_argument
@json_option
def reconcile_command(state: str, as_json: bool) -> None:
    """Resolve every unresolved allocation from Slurm evidence; exit 75 while some still wait.

    STATE is the campaign directory. Running it again is always safe.
    """
    from servatus.campaign import to_document  # noqa: PLC0415
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
