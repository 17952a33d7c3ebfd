"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output; human output escapes every non-printable character (:func:`human`).
"""

from __future__ import annotations

import functools
import json
import operator
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from servatus import __version__
from servatus.errors import (
    EXIT_CTRL_C,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    ServatusError,
    StateWarning,
    from_os_error,
)
from servatus.transport import Connect

F = TypeVar("F", bound=Callable[..., Any])


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A path argument or option must not be empty: it would silently mean the current
    directory (or, for ``--output``, save nothing)."""
    if value == "":
        raise click.BadParameter("must not be empty", ctx, param)
    return value


class Context:
    """What every command receives: the ``connect=`` override, if any."""

    def __init__(self, connect: Connect | None) -> None:
        self.connect = connect


def human(text: str) -> str:
    """Escape every non-printable character (keeping newlines between lines) for a terminal."""
    if text.replace("\n", "").isprintable():  # the usual case: one pass over a large table
        return text
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


def json_text(document: Any) -> str:
    """A JSON document with each top-level field on its own line and every value on one line.

    Python's indenting encoder is pure Python (0.4 s for a plan of 100,000 allocations); this
    layout uses the C encoder throughout and still reads well in a pager or a diff. It is ASCII:
    a path with bytes that are not UTF-8 (kept as lone surrogates) is escaped, not written raw,
    so the output is always valid UTF-8.
    """
    dumps = json.JSONEncoder(sort_keys=True, ensure_ascii=True).encode
    if not isinstance(document, dict) or not document:
        return dumps(document)
    fields = ",\n".join(
        f"  {dumps(name)}: {dumps(value)}" for name, value in sorted(document.items())
    )
    return "{\n" + fields + "\n}"


def emit_json(document: Any) -> None:
    """Print one exact JSON document."""
    click.echo(json_text(document))


def paused_gc(func: F) -> F:
    """Run a short read-only command (``status``, ``plan``) with the cyclic GC paused.

    At 100,000 Tasks they build over a million acyclic values (Tasks, records, the projection,
    the table); every GC pass would scan them all. They are freed by reference counting when
    the command returns, before the GC runs again.
    """

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        from servatus.tasks import bulk  # noqa: PLC0415 - loaded per command

        with bulk():
            return func(*args, **kwargs)

    return cast(F, run)


def json_option(func: F) -> F:
    """The ``--json`` flag every command except ``logs`` takes."""
    return click.option("--json", "as_json", is_flag=True, help="Print exact machine output.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", prog_name="servatus", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Durable Slurm sweeps with atomic publication of their results."""


@cli.command()
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
    width = max((len(p.name) for p in loaded), default=0)
    for p in loaded:
        echo(f"{p.name.ljust(width)}  {p.distribution} {p.version}")
    echo(f"launchers: {', '.join(launchers) or '-'}")
    echo(f"transports: {', '.join(transports) or '-'}")


def main(args: Sequence[str] | None = None, *, connect: Connect | None = None) -> int:
    """Run the CLI and return its exit code; ``connect`` replaces how Slurm is reached."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", StateWarning)
        warnings.showwarning = _warn
        code = _run(args, connect)
    try:
        if sys.stdout is not None:  # None when the program started with stdout closed
            sys.stdout.flush()  # what is still buffered fails here, not as Python exits
    except OSError as exc:  # reported once: a failure the command already reported stands
        if code == EXIT_OK and not isinstance(exc, BrokenPipeError):
            error = from_os_error(exc, "cannot write the output")
            _fail(f"{type(error).__name__}: {error}")
            code = error.exit_code
        code = code or EXIT_ERROR
    return code


def _warn(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    """A warning is one line, like an error: ``servatus: warning: ...``."""
    _fail(f"warning: {message}")


def console() -> int:
    """The ``servatus`` program (and ``python -m servatus``): :func:`main`, then, if the output
    could not be written, stdout pointed at /dev/null so the interpreter's own last flush does
    not fail again as the process exits (exit 120 and a traceback). Only the program does this:
    a caller of :func:`main` keeps its stdout."""
    import os  # noqa: PLC0415

    code = main()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return code


def _run(args: Sequence[str] | None, connect: Connect | None) -> int:
    try:
        # Without standalone mode, click returns the code of a raised Exit instead of raising.
        returned = cli.main(
            args=list(args) if args is not None else None,
            prog_name="servatus",
            standalone_mode=False,
            obj=Context(connect),
        )
        if isinstance(returned, int) and returned:
            return returned
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("servatus: interrupted; recorded intent survives; run status", err=True)
        return EXIT_CTRL_C
    except _NO_ARGUMENTS as exc:  # click 8.2+: the help, as help, but still a usage error
        click.echo(exc.format_message(), err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        _fail(f"{exc.format_message()}" if not isinstance(exc, click.UsageError) else _usage(exc))
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except ServatusError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        return EXIT_ERROR
    except OSError as exc:  # writing the output: a full disk, an I/O error
        error = from_os_error(exc, "cannot write the output")
        _fail(f"{type(error).__name__}: {error}")
        return error.exit_code
    except Exception as exc:  # a bug: still one line, never a traceback
        _fail(f"unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    return EXIT_OK


_NO_ARGUMENTS: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ["NoArgsIsHelpError"]
    if hasattr(click.exceptions, name)
)
"""``servatus`` alone: click 8.2+ raises this with the whole help as its message."""


def _usage(exc: click.UsageError) -> str:
    command = exc.ctx.command_path if exc.ctx else "servatus"
    return f"{exc.format_message()} (see '{command} --help')"


def _fail(message: str) -> None:
    click.echo(f"servatus: {human(message)}".replace("\n", " "), err=True)
    sys.stderr.flush()


# SERVATUS.toml ---------------------------------------------------------------------------------

if TYPE_CHECKING:
    from servatus.campaign import Campaign
    from servatus.config import Profile
    from servatus.plan import Plan
    from servatus.status import Report

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
        help="Profile to use [default: default_profile, or the only one].",
    )(func)
    return click.option(
        "--config",
        "config",
        callback=_not_empty,
        metavar="PATH",
        default=None,
        help=f"Configuration file [default: ./{DEFAULT_CONFIG}].",
    )(func)


def load_profile_option(config: str | None, profile_name: str | None) -> Profile:
    """The Profile the ``--config``/``--profile`` pair names; errors are ConfigurationError."""
    from servatus.config import Profile  # noqa: PLC0415 (keep CLI start-up light)

    return Profile.load(config if config is not None else DEFAULT_CONFIG, name=profile_name)


def profile_lines(profile: Profile, capacity: int) -> list[str]:
    """The resolved profile as ``profile``'s human output prints it, durations formatted."""
    from servatus.config import format_duration  # noqa: PLC0415

    target, resources = profile.target, profile.resources
    apptainer = target.apptainer

    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    rows: list[tuple[str, str]] = [
        ("host", target.host or "- (Slurm runs locally)"),
        ("slurm_bin", target.slurm_bin),
        ("work_root", target.work_root),
        ("log_root", target.log_root),
        ("partitions", ",".join(target.partitions)),
        ("account", shown(target.account)),
        ("qos", shown(target.qos)),
        ("constraint", shown(target.constraint)),
        ("gpu_gres", shown(target.gpu_gres)),
        ("max_tasks_per_allocation", str(target.max_tasks_per_allocation)),
        ("max_cpus_per_allocation", str(target.max_cpus_per_allocation)),
        ("max_memory_mib_per_allocation", str(target.max_memory_mib_per_allocation)),
        ("max_gpus_per_allocation", str(target.max_gpus_per_allocation)),
        ("max_time_limit", format_duration(target.max_time_limit)),
        ("max_allocations_per_submit", shown(target.max_allocations_per_submit or "- (no cap)")),
        ("max_script_bytes", str(target.max_script_bytes)),
        ("launcher", target.launcher),
        ("apptainer", apptainer.executable if apptainer else "-"),
        ("image", apptainer.image if apptainer else "-"),
        ("binds", ", ".join(apptainer.binds) if apptainer and apptainer.binds else "-"),
        *((f"launcher_options.{key}", value) for key, value in target.launcher_options),
    ]
    needs: list[tuple[str, str]] = [
        ("cpus", str(resources.cpus)),
        ("memory_mib", str(resources.memory_mib)),
        ("gpus", str(resources.gpus)),
        ("time_limit", format_duration(resources.time_limit)),
        (
            "signal_before_end",
            "-"
            if resources.signal_before_end is None
            else format_duration(resources.signal_before_end),
        ),
    ]
    width = max(len(key) for key, _ in (*rows, *needs))
    return [
        f"profile {profile.name}",
        "target",
        *(f"  {key.ljust(width)}  {value}" for key, value in rows),
        "resources",
        *(f"  {key.ljust(width)}  {value}" for key, value in needs),
        f"capacity: {capacity} Task{'s' if capacity != 1 else ''} per allocation",
    ]


@cli.command("profile")
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
    for line in profile_lines(profile, fits):
        echo(line)


# authoring: create, ensure, append, seal --------------------------------------------------------

if TYPE_CHECKING:
    from servatus.campaign import Authoring


def _report_authoring(command: str, state: str, done: Authoring, as_json: bool) -> None:
    """One short line, or the result document ``{"command", "state", "created", "added", ...}``."""
    if as_json:
        emit_json({"command": command, "state": state, **done.to_document()})
        return
    kind = "sealed" if done.sealed else "appendable"
    if done.created:
        echo(f"created {state}: {done.total} Task{'s' if done.total != 1 else ''} ({kind})")
    elif command == "seal":
        echo(f"sealed {state}: {done.total} Task{'s' if done.total != 1 else ''}")
    else:
        sealed = "; sealed" if done.sealed else ""
        echo(f"{command} {state}: {done.added} new, {done.existing} existing{sealed}")


@cli.command("create")
@click.argument("state", callback=_not_empty)
@click.argument("tasks_file", metavar="TASKS.jsonl")
@click.option("--appendable", is_flag=True, help="Allow appending Tasks later (default: sealed).")
@json_option
def create_command(state: str, tasks_file: str, appendable: bool, as_json: bool) -> None:
    """Create a campaign; fails if it exists. Sealed unless --appendable."""
    from servatus.campaign import create_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = create_state(state, read_jsonl(tasks_file), appendable=appendable)
    _report_authoring("create", state, done, as_json)


@cli.command("ensure")
@click.argument("state", callback=_not_empty)
@click.argument("tasks_file", metavar="TASKS.jsonl")
@click.option(
    "--sealed",
    is_flag=True,
    help="Create the campaign sealed, or seal it after appending (default: appendable).",
)
@json_option
def ensure_command(state: str, tasks_file: str, sealed: bool, as_json: bool) -> None:
    """Create a campaign, or append unseen Tasks; existing keys must match. --sealed seals it."""
    from servatus.campaign import ensure_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = ensure_state(state, read_jsonl(tasks_file), sealed=sealed)
    _report_authoring("ensure", state, done, as_json)


@cli.command("append")
@click.argument("state", callback=_not_empty)
@click.argument("tasks_file", metavar="TASKS.jsonl")
@json_option
def append_command(state: str, tasks_file: str, as_json: bool) -> None:
    """Append new Tasks to an appendable campaign; identical existing Tasks are skipped."""
    from servatus.campaign import append_state  # noqa: PLC0415
    from servatus.tasks import read_jsonl  # noqa: PLC0415

    _, done = append_state(state, read_jsonl(tasks_file))
    _report_authoring("append", state, done, as_json)


@cli.command("seal")
@click.argument("state", callback=_not_empty)
@json_option
def seal_command(state: str, as_json: bool) -> None:
    """End authoring irreversibly."""
    from servatus.campaign import seal_state  # noqa: PLC0415

    _, done = seal_state(state)
    _report_authoring("seal", state, done, as_json)


# -- the Slurm lane -----------------------------------------------------------------------------


def _campaign(state: str) -> Campaign:
    from servatus.campaign import Campaign  # noqa: PLC0415 - loaded per command

    context = click.get_current_context().find_object(Context)
    return Campaign.open(state, connect=context.connect if context else None)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _shape(plan: Plan, tasks: int) -> str:
    from servatus.config import format_duration  # noqa: PLC0415

    r = plan.profile.resources
    parts = [_plural(tasks, "Task"), f"{tasks * r.cpus} CPUs", f"{tasks * r.memory_mib} MiB"]
    if r.gpus:
        parts.append(f"{tasks * r.gpus} GPUs")
    parts.append(format_duration(r.time_limit))
    return ", ".join(parts)


def plan_lines(plan: Plan) -> list[str]:
    """The human plan: selected (with each allocation), held, deferred, and the totals line."""
    from servatus.plan import format_totals  # noqa: PLC0415

    decision = plan.decision
    lines = [f"profile {plan.profile.name} ({plan.profile.target.launcher} launcher)"]
    lines.append(
        f"selected: {_plural(len(decision.selected), 'Task')} in "
        f"{_plural(len(plan.allocations), 'allocation')}"
    )
    shapes: dict[int, str] = {}  # one text per allocation size, not per allocation
    for allocation in plan.allocations:
        size = len(allocation.task_keys)
        shape = shapes.get(size)
        if shape is None:
            shape = shapes[size] = _shape(plan, size)
        lines.append(f"  {allocation.allocation_id}  {shape}")
        lines.append(f"    {' '.join(allocation.task_keys)}")
    if decision.held:
        lines.append(f"held: {_plural(len(decision.held), 'Task')}")
        width = max(len(key) for key, _ in decision.held)
        lines += [f"  {key.ljust(width)}  {hold.value}" for key, hold in decision.held]
    if decision.deferred:
        lines.append(f"deferred to the next plan: {_plural(len(decision.deferred), 'Task')}")
        lines.append(f"  {' '.join(decision.deferred)}")
    lines += [f"warning: {warning}" for warning in plan.warnings]
    lines.append(format_totals(plan.totals))
    return lines


def _save_plan(path: str, document: dict[str, Any]) -> None:
    """Write the plan owner-only, never over an existing file."""
    from servatus.errors import ConfigurationError, from_os_error  # noqa: PLC0415
    from servatus.files import create_private  # noqa: PLC0415

    data = (json_text(document) + "\n").encode()
    try:
        create_private(path, data)
    except FileExistsError:
        raise ConfigurationError(f"{path} exists; a saved plan is never overwritten") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot write {path}") from None


@cli.command("plan")
@click.argument("state", callback=_not_empty)
@config_options
@click.option(
    "--output", callback=_not_empty, metavar="FILE", help="Save the plan (0600, never overwrites)."
)
@click.option("--retry", "retry", multiple=True, metavar="KEY", help="Retry this Task.")
@click.option("--retry-failed", is_flag=True, help="Retry every failed or stopped Task.")
@click.option("--only", "only", multiple=True, metavar="KEY", help="Plan only these Tasks.")
@click.option("--tasks-per-allocation", type=click.IntRange(min=1), metavar="N")
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
    show_scripts: bool,
    as_json: bool,
) -> None:
    """Show selected, held and deferred Tasks and what the plan requests at most."""
    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.plan import plan_to_document  # noqa: PLC0415

    profile = load_profile_option(config, profile_name)
    campaign = _campaign(state)
    plan = campaign.plan(
        profile,
        retry=retry,
        retry_failed=retry_failed,
        only=only or None,
        tasks_per_allocation=tasks_per_allocation,
    )
    document = plan_to_document(plan)
    if output:
        _save_plan(output, document)
    if as_json:
        totals = plan.totals
        emit_json(
            {
                **document,
                "retry": list(plan.request.retry),
                "extensions": list(plan.extensions),
                "allocations": [to_document(a) for a in plan.allocations],
                "warnings": list(plan.warnings),
                "saved": output,
                "totals": {
                    "cpu_hours": totals.cpu_hours,
                    "gpu_hours": totals.gpu_hours,
                    "memory_gib_hours": totals.memory_gib_hours,
                },
            }
        )
    else:
        echo("\n".join(plan_lines(plan)))  # one write: a line each costs a flush each
        if output:
            echo(f"saved {output}; submit it with: servatus submit {state} {output}")
    if show_scripts:
        for allocation, script in zip(plan.allocations, campaign.scripts(plan), strict=True):
            click.echo(
                f"# --- batch script of allocation {allocation.allocation_id} ---", err=as_json
            )
            click.echo(script, nl=False, err=as_json)


def _read_plan(path: str) -> Plan:
    from servatus.errors import ConfigurationError, StalePlan  # noqa: PLC0415
    from servatus.files import read_regular  # noqa: PLC0415
    from servatus.plan import plan_from_document  # noqa: PLC0415

    try:
        text = read_regular(path)
    except FileNotFoundError:
        raise ConfigurationError(f"no plan file {path}") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {path}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise StalePlan(f"{path}: not a JSON plan document (altered?)") from None
    return plan_from_document(data, where=path)


@cli.command("validate")
@click.argument("state", callback=_not_empty)
@click.argument("plan_file", metavar="PLAN")
@json_option
def validate_command(state: str, plan_file: str, as_json: bool) -> None:
    """sbatch --test-only once per distinct allocation shape; exit 1 if any is rejected."""
    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.errors import ShapeRejected  # noqa: PLC0415

    checks = _campaign(state).validate(_read_plan(plan_file))
    if as_json:
        emit_json({"checks": [to_document(check) for check in checks]})
    else:
        for check in checks:
            verdict = "accepted" if check.accepted else "REJECTED"
            echo(f"{_plural(check.tasks, 'Task')} per allocation: {verdict}: {check.message}")
    rejected = [check for check in checks if not check.accepted]
    if rejected:
        raise ShapeRejected("; ".join(f"{_plural(c.tasks, 'Task')}: {c.message}" for c in rejected))


@cli.command("submit")
@click.argument("state", callback=_not_empty)
@click.argument("plan_file", metavar="PLAN")
@json_option
def submit_command(state: str, plan_file: str, as_json: bool) -> None:
    """Submit the reviewed plan. Exit 3 if interrupted."""
    from servatus.campaign import to_document  # noqa: PLC0415

    plan = _read_plan(plan_file)
    interactive = not as_json and sys.stdout.isatty()

    def progress(index: int, count: int, allocation_id: str, job: int) -> None:
        click.echo(f"allocation {index} of {count}: {allocation_id} accepted as job {job}")

    result = _campaign(state).submit(plan, progress=progress if interactive else None)
    if as_json:
        emit_json({"receipts": [to_document(receipt) for receipt in result.receipts]})
        return
    if not result.receipts:
        echo("nothing to submit: the plan selects no Task")
    for receipt in result.receipts:
        echo(
            f"submitted allocation {receipt.allocation_id}: job {receipt.job} "
            f"({', '.join(receipt.task_keys)})"
        )


def status_lines(report: Report) -> list[str]:
    """The aligned human status table, then counts and warnings."""
    from servatus.status import execution_text, format_run_time, result_of  # noqa: PLC0415

    header = ("KEY", "RESULT", "EXECUTION", "EXIT", "RUN TIME", "LINK", "ALLOCATION")
    # 100,000 rows: each distinct cell text is computed once, so the widths come from those
    # texts (and the keys) without a pass over the rows, and each line is one % format.
    executions: dict[tuple[object, object], str] = {}
    run_times: dict[object, str] = {}
    exits: dict[int | None, str] = {None: "-"}
    result = result_of("", None)  # the CLI has no probe: every result is unobserved
    rows: list[tuple[str, ...]] = []
    append = rows.append
    for task in report.tasks:
        key, execution, exit_code, detail, run_time, allocation_id, _, _, _, _ = task
        shown = executions.get((execution, detail))
        if shown is None:
            shown = executions[execution, detail] = execution_text(task)
        time_text = run_times.get(run_time)
        if time_text is None:
            time_text = run_times[run_time] = format_run_time(run_time)
        code = exits.get(exit_code)
        if code is None:
            code = exits[exit_code] = str(exit_code)
        append((key, result, shown, code, time_text, "-", allocation_id or "-"))
    texts = [executions.values(), exits.values(), run_times.values(), ["-"]]
    cells = [map(operator.itemgetter(0), rows), [result] if rows else [], *texts]
    widths = [
        max(len(name), max(map(len, column), default=0))
        for name, column in zip(header, cells, strict=False)  # the last column is not padded
    ]
    line = "  ".join([*(f"%-{width}s" for width in widths), "%s"])  # %-Ns pads as ljust(N)
    lines = [line % header, *[line % row for row in rows]]
    counts = ", ".join(f"{count} {state}" for state, count in report.counts.items())
    lines.append(f"{_plural(len(report.tasks), 'Task')}: {counts or 'none'}")
    lines += [f"warning: {warning}" for warning in report.warnings]
    return lines


@cli.command("status")
@click.argument("state", callback=_not_empty)
@click.option("--offline", is_flag=True, help="Skip Slurm: show only what is recorded.")
@json_option
@paused_gc
def status_command(state: str, offline: bool, as_json: bool) -> None:
    """Task and allocation status."""
    from servatus.status import report_to_document  # noqa: PLC0415

    campaign = _campaign(state)
    report = campaign.status(offline=offline)
    if campaign.record_warning is not None:
        click.echo(f"servatus: warning: {campaign.record_warning}", err=True)
    if as_json:
        emit_json(report_to_document(report))
        return
    echo("\n".join(status_lines(report)))  # one write: a line each costs a flush each


@cli.command("reconcile")
@click.argument("state", callback=_not_empty)
@json_option
def reconcile_command(state: str, as_json: bool) -> None:
    """Resolve every unresolved allocation from Slurm evidence; exit 75 while some still wait."""
    import time  # noqa: PLC0415

    from servatus.campaign import to_document  # noqa: PLC0415
    from servatus.errors import StillWaiting  # noqa: PLC0415

    decisions = _campaign(state).reconcile()
    if as_json:
        emit_json({"resolutions": [to_document(decision) for decision in decisions]})
    elif not decisions:
        echo("nothing to reconcile")
    for decision in decisions if not as_json else ():
        if decision.outcome == "accepted":
            echo(f"allocation {decision.allocation_id}: accepted as job {decision.job}")
        elif decision.outcome == "not_submitted":
            echo(f"allocation {decision.allocation_id}: recorded as not submitted")
        else:
            when = time.strftime("%H:%M:%S", time.localtime(decision.retry_at or 0))
            echo(f"allocation {decision.allocation_id}: no evidence yet; decidable after {when}")
    waiting = [d for d in decisions if d.outcome == "waiting"]
    if waiting:
        when = time.strftime("%H:%M:%S", time.localtime(max(d.retry_at or 0 for d in waiting)))
        raise StillWaiting(
            f"{_plural(len(waiting), 'allocation')} still "
            f"{'waits' if len(waiting) == 1 else 'wait'} for evidence; "
            f"run servatus reconcile {state} again after {when}"
        )


@cli.command("cancel")
@click.argument("state", callback=_not_empty)
@click.option("--task", "tasks", multiple=True, metavar="KEY")
@click.option("--allocation", "allocations", multiple=True, metavar="ID")
@json_option
def cancel_command(
    state: str, tasks: tuple[str, ...], allocations: tuple[str, ...], as_json: bool
) -> None:
    """scancel matching allocations that Slurm lists as queued or running, newest first."""
    if not tasks and not allocations:
        raise click.UsageError("name at least one --task or --allocation to cancel")
    result = _campaign(state).cancel(tasks=tasks, allocations=allocations)
    if as_json:
        emit_json({"cancelled": list(result.allocations)})
    elif not result.allocations:
        echo("nothing to cancel: no matching allocation is queued or running")
    else:
        for allocation_id in result.allocations:
            echo(f"cancelled allocation {allocation_id}")


@cli.command("logs")
@click.argument("state", callback=_not_empty)
@click.option("--task", "tasks", multiple=True, metavar="KEY")
@click.option("--allocation", "allocations", multiple=True, metavar="ID")
@click.option("--bytes", "size", type=click.IntRange(1, 1048576), default=65536, show_default=True)
@click.option("--output", callback=_not_empty, metavar="FILE", help="Write the log here (0600).")
def logs_command(
    state: str,
    tasks: tuple[str, ...],
    allocations: tuple[str, ...],
    size: int,
    output: str | None,
) -> None:
    """Bounded log tail; writes 0600; refuses a terminal."""
    from servatus.errors import ConfigurationError  # noqa: PLC0415

    if output is None and sys.stdout.isatty():
        raise ConfigurationError(
            "logs write raw bytes and never to a terminal; use --output FILE or a pipe"
        )
    data = _campaign(state).logs(tasks=tasks, allocations=allocations, size=size)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        from servatus.errors import from_os_error  # noqa: PLC0415
        from servatus.files import replace_private  # noqa: PLC0415

        try:
            replace_private(output, data)
        except OSError as exc:
            raise from_os_error(exc, f"cannot write {output}") from None


@cli.command("doctor")
@config_options
@json_option
def doctor_command(config: str | None, profile_name: str | None, as_json: bool) -> None:
    """Check, read-only, what the profile needs from its cluster. Exit 1 if a check fails,
    75 if one went unanswered."""
    from servatus.doctor import diagnose  # noqa: PLC0415

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
            }
        )
    else:
        echo(f"doctor: profile {diagnosis.profile}")
        width = max(len(check.name) for check in diagnosis.checks)
        for check in diagnosis.checks:
            echo(f"  {check.status:<11}  {check.name.ljust(width)}  {check.detail}")
    if diagnosis.exit_code:
        raise click.exceptions.Exit(diagnosis.exit_code)
