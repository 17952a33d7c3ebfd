"""Human output: values in, lines out, for every command of :mod:`servatus.cli`.

Nothing here writes or decides an exit; the CLI prints what these functions return through its
``echo``, which escapes each line with :func:`terminal_text`. The CLI imports this module at
start-up, so the engine modules a function formats are imported inside it, when it runs.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from servatus.files import path_word
from servatus.words import plural

if TYPE_CHECKING:
    from servatus.campaign import Authoring, ShapeCheck
    from servatus.config import Profile
    from servatus.continuation import Link
    from servatus.engine.plan import Hold, Plan
    from servatus.engine.status_values import Report
    from servatus.operations.doctor import Diagnosis
    from servatus.operations.reconcile import Resolution
    from servatus.operations.submission import SubmittedAllocation
    from servatus.plugins import PluginInfo


def escape_line(line: str) -> str:
    """One line for a terminal: every non-printable character escaped, a newline too."""
    if line.isprintable():
        return line
    out = []
    for char in line:
        if char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def terminal_text(lines: Sequence[str]) -> str:
    """The lines as one text, each escaped whole: a newline inside a value (a STATE, a key) is
    shown as ``\\n`` and can never start an output line of its own."""
    if all(map(str.isprintable, lines)):  # the usual case: no Python call per line of a table
        return "\n".join(lines)
    return "\n".join(map(escape_line, lines))


json_dumps = json.JSONEncoder(sort_keys=True, ensure_ascii=True).encode
"""One value as ``--json`` writes it (:func:`json_fields`): sorted keys, ASCII, on one line."""


def json_fields(fields: Mapping[str, str]) -> str:
    """A JSON object with each field on its own line, its values JSON texts already: Python's
    indenting encoder is pure Python, and this layout still reads well in a pager or a diff."""
    lines = ",\n".join(f"  {json_dumps(name)}: {text}" for name, text in sorted(fields.items()))
    return "{\n" + lines + "\n}"


def local_time(at: float) -> str:
    """A moment as the user's clock shows it, dated and with its UTC offset: who comes back the
    next day (or reads it from another time zone) can still tell when it is."""
    import time  # noqa: PLC0415

    return time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(at))


def plugins_lines(
    loaded: Sequence[PluginInfo], launchers: Sequence[str], transports: Sequence[str]
) -> list[str]:
    """Each loaded plugin with its distribution, then the launcher and transport names."""
    width = max((len(p.name) for p in loaded), default=0)
    return [
        *(f"{p.name.ljust(width)}  {p.distribution} {p.version}" for p in loaded),
        f"launchers: {', '.join(launchers) or '-'}",
        f"transports: {', '.join(transports) or '-'}",
    ]


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


def authoring_line(command: str, state: str, done: Authoring) -> str:
    """What ``create``, ``ensure``, ``append`` or ``seal`` did, in one short line."""
    kind = "sealed" if done.sealed else "appendable"
    if done.created:
        return f"created {state}: {done.total} Task{'s' if done.total != 1 else ''} ({kind})"
    if command == "seal":
        return f"sealed {state}: {done.total} Task{'s' if done.total != 1 else ''}"
    sealed = "; sealed" if done.sealed else ""
    return f"{command} {state}: {done.added} new, {done.existing} existing{sealed}"


def _shape(plan: Plan, tasks: int, link: Link | None = None) -> str:
    from servatus.config import format_duration  # noqa: PLC0415

    r = plan.profile.resources
    parts = [plural(tasks, "Task"), f"{tasks * r.cpus} CPUs", f"{tasks * r.memory_mib} MiB"]
    if r.gpus:
        parts.append(f"{tasks * r.gpus} GPUs")
    parts.append(format_duration(r.time_limit if link is None else link.time_limit))
    if link is not None:
        parts.append(link.label)
    return ", ".join(parts)


def plan_lines(plan: Plan) -> list[str]:
    """The human plan: the continuation (with each selected Task's run time, budget left and
    links), selected (with each allocation, a chain's Tasks once after its last link), held,
    deferred, and the totals line (its warnings go to stderr, as a line each)."""
    from servatus.engine.plan import format_totals  # noqa: PLC0415

    decision = plan.decision
    lines = [f"profile {plan.profile.name} ({plan.profile.target.launcher} launcher)"]
    if plan.hold is not None:
        return [*lines, *lease_lines(plan), format_totals(plan.totals)]
    if plan.within is not None:
        return [*lines, *step_lines(plan)]
    if decision.continuation is not None:
        lines += continuation_lines(plan)
    lines.append(
        f"selected: {plural(len(decision.selected), 'Task')} in "
        f"{plural(len(plan.allocations), 'allocation')}"
    )
    shapes: dict[tuple[int, Link | None], str] = {}  # one text per size and link, not per link
    for allocation in plan.allocations:
        size, link = len(allocation.task_keys), allocation.link
        shape = shapes.get((size, link))
        if shape is None:
            shape = shapes[size, link] = _shape(plan, size, link)
        lines.append(f"  {allocation.allocation_id}  {shape}")
        if link is None or link.last:
            lines.append(f"    {' '.join(allocation.task_keys)}")
    if decision.held:
        lines.append(f"held: {plural(len(decision.held), 'Task')}")
        width = max(len(key) for key, _ in decision.held)
        lines += [f"  {key.ljust(width)}  {hold.value}" for key, hold in decision.held]
    if decision.deferred:
        lines.append(f"deferred to the next plan: {plural(len(decision.deferred), 'Task')}")
        lines.append(f"  {' '.join(decision.deferred)}")
    lines.append(format_totals(plan.totals))
    return lines


def lease_lines(plan: Plan) -> list[str]:
    """A lease's plan: its slot, then each of its allocations with what it holds in all."""
    from servatus.config import format_duration  # noqa: PLC0415

    assert plan.hold is not None
    slots, r = plan.hold.slots, plan.profile.resources

    def size(count: int) -> str:
        parts = [f"{count * r.cpus} CPUs", f"{count * r.memory_mib} MiB"]
        if r.gpus:
            parts.append(f"{count * r.gpus} GPUs")
        return ", ".join([*parts, format_duration(r.time_limit)])

    lines = [f"lease: {plural(slots, 'slot')} of {size(1)}"]
    for allocation in plan.allocations:
        link = "" if allocation.link is None else f", {allocation.link.label}"
        lines.append(f"  {allocation.allocation_id}  {size(slots)}{link}")
    return lines


def step_lines(plan: Plan) -> list[str]:
    """A plan of steps in a lease: each step with its Task, then held Tasks. A step uses a slot
    the lease already holds, so the totals line says that instead of hours."""
    from servatus.continuation import format_continuation  # noqa: PLC0415

    decision = plan.decision
    lines = [] if decision.continuation is None else [format_continuation(decision.continuation)]
    lines.append(
        f"selected: {plural(len(decision.selected), 'Task')} as steps in lease {plan.within}"
    )
    lines += [f"  {a.allocation_id}  {' '.join(a.task_keys)}" for a in plan.allocations]
    if decision.held:
        lines.append(f"held: {plural(len(decision.held), 'Task')}")
        width = max(len(key) for key, _ in decision.held)
        lines += [f"  {key.ljust(width)}  {hold.value}" for key, hold in decision.held]
    lines.append("requests nothing beyond the lease: each step uses one of its slots")
    return lines


NAMED_PER_HOLD = 3
"""Keys named for each hold when ``start`` starts nothing; the rest are counted."""


def nothing_started_line(keys: Iterable[str], held: Iterable[tuple[str, Hold]]) -> str:
    """What ``start`` says when it started none of the file's ``keys``: how many each hold
    stopped, most first (ties in the order :class:`~servatus.plan.Hold` lists them), with a few
    keys of each; ``plan --lease`` shows every one."""
    from servatus.engine.plan import Hold  # noqa: PLC0415

    wanted = set(keys)
    by_hold: dict[Hold, list[str]] = {}
    for key, hold in held:
        if key in wanted:
            by_hold.setdefault(hold, []).append(key)
    line = f"nothing to start: none of the {plural(len(wanted), 'Task')} is selected"
    order = list(Hold)
    ranked = sorted(by_hold.items(), key=lambda item: (-len(item[1]), order.index(item[0])))
    parts = []
    for hold, named in ranked:
        shown = ", ".join(named[:NAMED_PER_HOLD]) + (", ..." if len(named) > NAMED_PER_HOLD else "")
        parts.append(f"{len(named)} {hold.value} ({shown})")
    if parts:
        line += f"; held {', '.join(parts)}"
    return f"{line}; see plan"


def continuation_lines(plan: Plan) -> list[str]:
    """The ``continuation`` line, then each selected Task's run time, budget left, its own
    number of links, and what it extends."""
    from servatus.continuation import Planned, format_continuation, format_planned  # noqa: PLC0415

    decision = plan.decision
    continuation = decision.continuation
    assert continuation is not None
    budget = continuation.budget
    links = {
        key: count
        for allocation in plan.allocations
        if allocation.after is None
        for key, count in zip(allocation.task_keys, allocation.task_links, strict=True)
    }
    extends = {extension.key: extension.extends for extension in decision.extensions}
    width = max(map(len, decision.selected), default=0)
    texts: dict[tuple[int, int, object], str] = {}  # a sweep repeats them: each made once
    lines = [format_continuation(continuation)]
    for key in decision.selected:
        run_time, count, extended = decision.spent[key], links[key], extends.get(key)
        text = texts.get((run_time, count, extended))
        if text is None:
            left = None if budget is None else budget - run_time
            planned = Planned(key, run_time, left, count)
            text = texts[run_time, count, extended] = format_planned(planned, extended)
        lines.append(f"  {key.ljust(width)}  {text}")
    return lines


def saved_line(state: str, path: str) -> str:
    """Where the plan was saved, and the command that submits it, quoted for a shell."""
    return f"saved {path}; submit it with: servatus submit {path_word(state)} {path_word(path)}"


def script_banner(allocation_id: str) -> str:
    """The line ``--show-scripts`` prints before each batch script."""
    return f"# --- batch script of allocation {allocation_id} ---"


def check_line(check: ShapeCheck) -> str:
    """One ``validate`` verdict: the shape, accepted or REJECTED, and what Slurm said."""
    verdict = "accepted" if check.accepted else "REJECTED"
    return f"{shape_words(check, 'per allocation ')}: {verdict}: {check.message}"


def shape_words(check: ShapeCheck, between: str = "") -> str:
    """A shape as ``validate`` names it: ``2 Tasks for 16:00:00``."""
    from servatus.config import format_duration  # noqa: PLC0415

    return f"{plural(check.tasks, 'Task')} {between}for {format_duration(check.time_limit)}"


def accepted_line(index: int, count: int, allocation_id: str, job: int) -> str:
    """``submit``'s progress on a terminal, after each allocation Slurm accepted."""
    return f"allocation {index} of {count}: {allocation_id} accepted as job {job}"


def batch_line(sent: int, size: int, count: int) -> str:
    """``submit``'s progress on a terminal, as each batch goes out in one remote command."""
    if size == 1:
        return f"sending allocation {sent + 1} of {count}"
    return f"sending allocations {sent + 1}-{sent + size} of {count} in one batch"


def submitted_lease_lines(receipts: Iterable[SubmittedAllocation]) -> list[str]:
    """Each lease link a ``submit`` sent, in the spec's words."""
    return [f"submitted lease {receipt.allocation_id}: job {receipt.job}" for receipt in receipts]


def submitted_lines(receipts: Iterable[SubmittedAllocation]) -> list[str]:
    """Each receipt of a ``submit``, or that the plan selected nothing."""
    lines = [
        f"submitted allocation {receipt.allocation_id}: job {receipt.job} "
        f"({', '.join(receipt.task_keys)})"
        for receipt in receipts
    ]
    return lines or ["nothing to submit: the plan selects no Task"]


def held_lease_lines(report: Report) -> list[str]:
    """One line per lease link that Slurm lists (its job, its state, and its slots), and one
    per lease link whose ``sbatch`` is undecided, which ``reconcile`` must decide: it may hold
    its slots already."""
    from servatus.engine.status_values import Execution  # noqa: PLC0415

    lines = []
    for attempt in report.attempts:
        if attempt.slots is None:
            continue
        slots = plural(attempt.slots, "slot")
        if attempt.listed:
            lines.append(
                f"lease {attempt.allocation_id}: job {attempt.job} {attempt.execution.value}, "
                f"{slots}"
            )
        elif attempt.execution is Execution.UNRESOLVED:
            lines.append(f"lease {attempt.allocation_id}: UNRESOLVED, {slots}; run reconcile")
    return lines


STATUS_HEADER = ("KEY", "RESULT", "EXECUTION", "EXIT", "RUN TIME", "LINK", "ALLOCATION")


def status_lines(
    report: Report, cells: tuple[list[tuple[str, ...]], list[int]] | None = None
) -> list[str]:
    """The aligned human status table, then counts and warnings; ``cells`` are
    :func:`status_rows` of ``report``, when the caller has them already."""
    rows, widths = status_rows(report) if cells is None else cells
    return [
        *table_lines(rows, widths),
        *held_lease_lines(report),
        *summary_lines(len(report.tasks), report.counts, report.warnings),
    ]


def status_rows(report: Report) -> tuple[list[tuple[str, ...]], list[int]]:
    """Each Task's cells for the status table, and the width of each column but the last."""
    from servatus.engine.status_values import RunTime, execution_text, format_run_time, result_of  # noqa: PLC0415

    # 100,000 rows: each distinct cell text is computed once, so the widths come from those
    # texts (and the keys) without a pass over the rows, and each line is one % format.
    executions: dict[tuple[object, object], str] = {}
    run_times: dict[object, str] = {}
    exits: dict[int | None, str] = {None: "-"}
    links: dict[object, str] = {None: "-"}
    result = result_of("", None)  # the CLI has no probe: every result is unobserved
    rows: list[tuple[str, ...]] = []
    append = rows.append
    for task in report.tasks:  # by field name: a Task's fields grow (a chain's link, a lease)
        execution, detail = task.execution, task.detail
        shown = executions.get((execution, detail))
        if shown is None:
            shown = executions[execution, detail] = execution_text(task)
        run_time, link = task.run_time, task.link
        # a budgeted chain shows RUN TIME / budget (a run time unknown offline shows alone)
        budgeted = link is not None and link.budget and run_time is not None
        shown_time: object = (run_time, link) if budgeted else run_time
        time_text = run_times.get(shown_time)
        if time_text is None:
            time_text = format_run_time(run_time)
            if shown_time is not run_time:
                assert link is not None
                time_text += f" / {format_run_time(RunTime(link.budget))}"
            run_times[shown_time] = time_text
        link_text = links.get(link)
        if link_text is None:
            assert link is not None
            link_text = links[link] = f"{link.position}/{link.of}"
        exit_code = task.exit_code
        code = exits.get(exit_code)
        if code is None:
            code = exits[exit_code] = str(exit_code)
        allocation = task.allocation_id or "-"
        if task.within is not None:
            allocation = f"{allocation} (lease {task.within})"
        append((task.key, result, shown, code, time_text, link_text, allocation))
    texts = [executions.values(), exits.values(), run_times.values(), links.values()]
    cells = [map(operator.itemgetter(0), rows), [result] if rows else [], *texts]
    widths = [
        max(len(name), max(map(len, column), default=0))
        for name, column in zip(STATUS_HEADER, cells, strict=False)  # the last is not padded
    ]
    return rows, widths


def row_format(widths: Sequence[int]) -> str:
    """The ``%`` format of one table line: each column but the last padded to its width."""
    return "  ".join([*(f"%-{width}s" for width in widths), "%s"])  # %-Ns pads as ljust(N)


def table_lines(rows: Sequence[tuple[str, ...]], widths: Sequence[int]) -> list[str]:
    """The header and the rows, aligned."""
    line = row_format(widths)
    return [line % STATUS_HEADER, *[line % row for row in rows]]


def summary_lines(tasks: int, counts: Mapping[str, int], warnings: Sequence[str]) -> list[str]:
    """The line of counts under the table, then one per warning."""
    counted = ", ".join(f"{count} {state}" for state, count in counts.items())
    return [
        f"{plural(tasks, 'Task')}: {counted or 'none'}",
        *(f"warning: {warning}" for warning in warnings),
    ]


def reconcile_lines(decisions: Sequence[Resolution]) -> list[str]:
    """What ``reconcile`` decided for each allocation, or that there was nothing to decide."""
    lines = []
    for decision in decisions:
        if decision.outcome == "accepted":
            lines.append(f"allocation {decision.allocation_id}: accepted as job {decision.job}")
        elif decision.outcome == "not_submitted":
            lines.append(f"allocation {decision.allocation_id}: recorded as not submitted")
        else:
            when = local_time(decision.retry_at or 0)
            lines.append(
                f"allocation {decision.allocation_id}: no evidence yet; decidable after {when}"
            )
    return lines or ["nothing to reconcile"]


def cancelled_lines(
    allocations: Sequence[str], withdrawn: Sequence[str] = (), stopping: Sequence[str] = ()
) -> list[str]:
    """Each lease step ``cancel`` withdrew or asked to stop, each allocation it cancelled, or
    that none matched."""
    lines = [f"withdrew step {step_id}: it never starts" for step_id in withdrawn]
    lines += [
        f"stopping step {step_id}: its lease stops it at its next poll; the lease stays"
        for step_id in stopping
    ]
    lines += [f"cancelled allocation {allocation_id}" for allocation_id in allocations]
    return lines or ["nothing to cancel: no matching allocation is queued or running"]


def doctor_lines(diagnosis: Diagnosis) -> list[str]:
    """The profile ``doctor`` checked, then each check's status, name and what it saw, then the
    round trip it measured (when a command answered)."""
    width = max(len(check.name) for check in diagnosis.checks)
    lines = [
        f"doctor: profile {diagnosis.profile}",
        *(
            f"  {check.status:<11}  {check.name.ljust(width)}  {check.detail}"
            for check in diagnosis.checks
        ),
    ]
    if diagnosis.round_trip is not None:
        lines.append(
            f"round trip: {round_trip_text(diagnosis.round_trip)} "
            f"(the fastest of {plural(diagnosis.commands, 'command')})"
        )
    return lines


def round_trip_text(seconds: float) -> str:
    """Milliseconds, with a decimal under 10 ms (a login node, a master connection)."""
    milliseconds = seconds * 1000
    return f"{milliseconds:.1f} ms" if milliseconds < 10 else f"{milliseconds:.0f} ms"
