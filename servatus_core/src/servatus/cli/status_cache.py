"""When the status cache (ADR 0010) answers ``status`` and ``plan``, and writing it after one.

The cache holds the finished rows of settled Tasks beside the journal, so that ``servatus
status`` of a large campaign decodes, projects and renders only its live work; its file is
:mod:`servatus.cli.status_cache_file`, which Tasks it may hold :mod:`servatus.engine.cacheable`.

A cache is derived data, trusted only as far as it is checked. It names a prefix of the journal
(its length and SHA-256) and the rules it was made by (a digest of the code that projects and
renders), and holds what that prefix says less its settled Tasks (:func:`store.remainder`). A
status whose journal still starts with that prefix folds only the records after it onto that
remainder, projects it, and joins its rows with the cached ones; anything else (a compaction, a
record about a cached allocation, an append, other rules, a damaged or torn file) reads the whole
journal, as a status without a cache does, and writes the cache anew.

A Task is cached once every allocation it shares a component with (through its slots, a chain's
``after`` and a step's ``within``) is settled: nothing later changes its row, whatever Slurm or
its markers say (ADR 0004). Rows are kept per mode (online, offline) and per form (table, JSON),
as finished text, so joining them costs a copy, not a projection. The Python API's
:meth:`~servatus.Campaign.status` never uses it: it returns the values this leaves out.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from servatus.cli.render import (
    STATUS_HEADER,
    held_lease_lines,
    json_dumps,
    row_format,
    status_lines,
    status_rows,
    summary_lines,
    terminal_text,
)
from servatus.cli.status_cache_file import (
    Cached,
    Contents,
    Planning,
    file_name,
    read_cache,
    read_planning,
    write_cache,
)
from servatus.engine.cacheable import partition
from servatus.engine.status_document import status_document
from servatus.engine.status_values import Execution, Report, TaskStatus
from servatus.engine.work import TaskWork, Work, selectable_unasked
from servatus.journal import codec, records, store
from servatus.tasks import bulk

if TYPE_CHECKING:
    from servatus.config import Profile
    from servatus.continuation import Continuation
    from servatus.engine.plan import Plan, Request
    from servatus.evidence import Evidence
    from servatus.operations.held import HeldState
    from servatus.tasks import Roster
    from servatus.transport import Connect

MIN_CACHED = 1000
"""Fewer settled Tasks than this (or than half the campaign) are projected faster than a cache
is written and read."""

MIN_SHARE = 0.5
"""Nor is a cache worth it while fewer than this share of the Tasks are settled."""


@attrs.frozen
class View:
    """What ``servatus status`` prints: the table's text, or the JSON document's fields as
    texts (``warnings`` apart, for the CLI to add its own); and why a settlement was not
    recorded, or None."""

    text: str
    fields: dict[str, str]
    warnings: tuple[str, ...]
    record_warning: str | None


# -- pure parts ---------------------------------------------------------------------------------


def runs(cached: Iterable[bool]) -> tuple[int, ...]:
    """Alternating counts of cached and live items, a cached run first (maybe 0)."""
    counts: list[int] = []
    expect = True
    for is_cached, group in itertools.groupby(cached):
        if is_cached is not expect:
            counts.append(0)
        counts.append(sum(1 for _ in group))
        expect = not is_cached
    return tuple(counts)


def join(counts: Sequence[int], cached: Sequence[str], live: Sequence[str]) -> list[str] | None:
    """The items in their order again; live items past the runs were added since (they come
    last); None when the counts do not fit the items (a cache that does not hold)."""
    out: list[str] = []
    at = [0, 0]
    for turn, count in enumerate(counts):
        source, side = (cached, 0) if turn % 2 == 0 else (live, 1)
        out += source[at[side] : at[side] + count]
        at[side] += count
    if at[0] != len(cached) or at[1] > len(live):
        return None
    out += live[at[1] :]
    return out


def widen(lines: list[str], old: Sequence[int], new: Sequence[int]) -> list[str]:
    """Table lines padded to ``old`` widths, padded to ``new`` (each at least as wide)."""
    cuts = []
    end = -2
    for was, now in zip(old, new, strict=True):
        end += was + 2
        if now > was:
            cuts.append((end, " " * (now - was)))
    if not cuts:
        return lines

    def wider(line: str) -> str:
        pieces: list[str] = []
        start = 0
        for cut, pad in cuts:
            pieces += (line[start:cut], pad)
            start = cut
        pieces.append(line[start:])
        return "".join(pieces)

    return list(map(wider, lines))


def merged_counts(*parts: Mapping[str, int]) -> dict[str, int]:
    """Counts per execution, in :class:`Execution` order, executions with none left out."""
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return {state.value: total[state.value] for state in Execution if total[state.value]}


def run_texts(counts: Sequence[int], items: Sequence[Any]) -> list[str]:
    """Each run's items (``counts`` of them, in turn) as the inside of a JSON array, ``""`` for
    none: one encoder call per run, where one per item would cost four times as much."""
    texts, at = [], 0
    for count in counts:
        texts.append(json_dumps(items[at : at + count])[1:-1] if count else "")
        at += count
    return texts


def join_texts(
    counts: Sequence[int], cached: Sequence[str], live: Sequence[Any]
) -> list[str] | None:
    """The insides of the runs again, cached runs' from the cache and live runs' from ``live``
    (what was added since, last); None when the counts do not fit."""
    live_counts = [*counts[1::2], max(0, len(live) - sum(counts[1::2]))]
    if len(cached) != len(counts[0::2]) or sum(counts[1::2]) > len(live):
        return None
    mine = iter(run_texts(live_counts, live))
    out: list[str] = []
    for text in cached:
        out += (text, next(mine, ""))
    out += mine
    return out


def _array(texts: Iterable[str]) -> str:
    return "[" + ", ".join(text for text in texts if text) + "]"


# -- the command -------------------------------------------------------------------------------


def view(path: str | Path, *, offline: bool, as_json: bool, connect: Connect | None = None) -> View:
    """``servatus status``: from the cache when it holds for the journal, joined with the
    projection of what it leaves live; else from the whole journal, writing the cache. The same
    listings are read, and what settled is recorded, either way."""
    data, version, journal = store.read_journal(path)
    directory = Path(path)
    name = file_name(offline=offline, as_json=as_json)
    evidence = None
    with bulk():
        cached = _answering(directory, name, data, journal)
    if cached is not None:
        campaign = _campaign(directory, cached.state, version, connect)
        targets = cached.header.targets
        report, change, evidence = campaign.observe(cached.state, offline=offline, targets=targets)
        shown = _joined(cached, report, as_json) if offline or _all_read(evidence) else None
        if shown is not None:
            campaign.record(change, partial=True)
            return attrs.evolve(shown, record_warning=campaign.record_warning)
        # A listing was not read: the cached rows are those of a status that read them all.
    with bulk():
        into, found = codec.fold_journal(data, journal)
        state = into.freeze()
    campaign = _campaign(directory, state, version, connect)
    report, change, _ = campaign.observe(state, offline=offline, evidence=evidence)
    campaign.record(change)
    with bulk():
        shown, write = _whole(state, report, offline=offline, as_json=as_json)
        if write is not None:
            write(directory, name, memoryview(data)[: found.end])
    return attrs.evolve(shown, record_warning=campaign.record_warning)


def plan(
    path: str | Path,
    profile: Profile,
    request: Request,
    continuation: Continuation | None,
    *,
    connect: Connect | None = None,
) -> Plan:
    """``servatus plan`` of Tasks (no lease, no scripts shown): from a status cache that holds
    for the journal when one does, else from the whole journal, read once either way. The same
    listings are read, what settled is recorded, and the same plan is made (``submit`` rebuilds
    it from the whole journal, and refuses it as stale if it differs)."""
    data, version, journal = store.read_journal(path)
    directory = Path(path)
    made = _cached_plan(directory, data, version, journal, profile, request, continuation, connect)
    if made is not None:
        return made
    with bulk():
        into, _ = codec.fold_journal(data, journal)
        state = into.freeze()
    campaign = _campaign(directory, state, version, connect)
    made, change = campaign.make_plan(state, profile, request, continuation)
    campaign.record(change)
    return made


def _cached_plan(
    directory: Path,
    data: bytes,
    version: tuple[int, ...],
    journal: str,
    profile: Profile,
    request: Request,
    continuation: Continuation | None,
    connect: Connect | None,
) -> Plan | None:
    """The plan from a cache: the live Tasks projected as a plan projects them, the cached ones'
    earlier work read from the cache. None when no cache holds, a listing was not read, or the
    plan would select a cached Task whose content the cache does not keep (``--retry`` of a
    ``SUCCEEDED`` one)."""
    from servatus.engine.plan import consults, work_from_report  # noqa: PLC0415 - plan only

    asked = consults(request, continuation, resolved=False)
    with bulk():
        cached = _either_form(directory, data, journal, offline=not asked)
        if cached is not None and not asked and _resolved(cached):
            cached = _either_form(directory, data, journal, offline=False)
        found = None if cached is None else read_planning(cached)
    if cached is None or found is None:
        return None
    works, content = found
    live = cached.state.tasks
    keys = join(cached.header.tasks, list(works), live.keys)
    kept = frozenset(content.keys)
    if keys is None or any(key not in kept for key in request.retry if key in works):
        return None
    campaign = _campaign(directory, cached.state, version, connect)
    launcher = campaign.launcher(profile)
    consult = consults(request, continuation, resolved=_resolved(cached))
    targets = cached.header.targets
    report, change, evidence = campaign.observe(cached.state, offline=not consult, targets=targets)
    if consult and not _all_read(evidence):
        return None  # the cached work is what a status that read every listing saw
    work: dict[str, Work] = dict(works)
    work.update(work_from_report(report))
    made = campaign.decide(
        cached.state, profile, request, continuation, work, report.warnings, keys=keys
    )
    if not all(key in kept or live.get(key) is not None for key in made.decision.selected):
        return None
    both = records.stored_roster((*live.keys, *content.keys), [*live.stored(), *content.stored()])
    campaign.check(attrs.evolve(cached.state, tasks=both), profile, made, launcher)
    campaign.record(change, partial=True)
    return made


def _answering(directory: Path, name: str, data: bytes, journal: str) -> Cached | None:
    """The cache ``name`` if it holds for the journal and still saves work: not once more Tasks
    settled since than it is worth projecting on every status (time to cache them too)."""
    cached = read_cache(directory, name, data, journal)
    if cached is None:
        return None
    header = cached.header
    if len(cached.state.settlements) - header.settled_live > max(
        MIN_CACHED, header.cached_tasks // 4
    ):
        return None
    return cached


def _either_form(directory: Path, data: bytes, journal: str, *, offline: bool) -> Cached | None:
    """A cache of the mode that holds, of either form: each keeps the same planning part."""
    for as_json in (False, True):
        cached = _answering(directory, file_name(offline=offline, as_json=as_json), data, journal)
        if cached is not None:
            return cached
    return None


def _resolved(cached: Cached) -> bool:
    """Whether the whole state has a resolution: a cached allocation's, or a live one's."""
    return cached.header.resolved or bool(cached.state.resolutions)


def _campaign(
    directory: Path, state: records.CampaignState, version: tuple[int, ...], connect: Connect | None
) -> HeldState:
    """The campaign at ``directory`` holding ``state``, read from its journal at ``version``
    (the whole state, or a cache's remainder)."""
    from servatus.operations.held import HeldState  # noqa: PLC0415 - it imports the engine

    return HeldState(directory, state, version, connect)


def _all_read(evidence: Mapping[str, Evidence]) -> bool:
    """Whether every Target's queue and marker listing was read: cached rows and work are
    those of a command that read them all."""
    return all(item.queue is not None and item.markers is not None for item in evidence.values())


Write = Callable[[Path, str, memoryview], None]
"""Writes a cache: into the campaign at a path, under a name, for the journal prefix given."""


def _whole(
    state: records.CampaignState, report: Report, *, offline: bool, as_json: bool
) -> tuple[View, Write | None]:
    """What ``status`` prints from the whole journal's ``state`` and its ``report``, and how to
    write the cache they make, if one is worth it."""
    split = _split(state, report, offline=offline)
    if as_json:
        document = status_document(report)
        if split is not None and len(document["attempts"]) != len(split[1]):
            split = None  # not one entry per allocation: runs over intents would not fit
        flags, held = split if split is not None else ([], [])
        tasks = run_texts(runs(flags) if flags else [len(report.tasks)], document["tasks"])
        every = len(document["attempts"])
        attempts = run_texts(runs(held) if held else [every], document["attempts"])
        shown = View("", _fields(document, tasks, attempts), tuple(document["warnings"]), None)
        if split is None:
            return shown, None
        texts = [*tasks[0::2], *attempts[0::2]]
        return shown, _writer(state, report, split, texts, ())
    rows, widths = status_rows(report)
    shown = View(terminal_text(status_lines(report, (rows, widths))), {}, report.warnings, None)
    if split is None:
        return shown, None
    flags, _ = split
    cached_rows = [row for row, cached in zip(rows, flags, strict=True) if cached]
    columns = zip(*cached_rows, strict=False)
    cached_widths = [
        max(len(title), max(map(len, column), default=0))
        for title, column in zip(STATUS_HEADER[:-1], columns, strict=False)
    ]
    line = row_format(cached_widths)
    texts = [line % row for row in cached_rows]
    if not all(map(str.isprintable, texts)):
        return shown, None  # an escaped line is no longer aligned by its offsets
    return shown, _writer(state, report, split, texts, cached_widths)


def _split(
    state: records.CampaignState, report: Report, *, offline: bool
) -> tuple[list[bool], list[bool]] | None:
    """Which Tasks (in roster order) and allocations (in intent order) a cache would hold;
    None when too few are settled for one to be worth it, or a listing was not read."""
    if len(state.settlements) < MIN_CACHED or report.online is offline:
        return None  # as few Tasks as settlements are settled, at most: no component to cache
    tasks, allocations = partition(state)
    if len(tasks) < MIN_CACHED or len(tasks) < MIN_SHARE * len(state.tasks):
        return None
    flags = [key in tasks for key in state.tasks.keys]
    return flags, [intent.allocation_id in allocations for intent in state.intents]


def _fields(document: Mapping[str, Any], tasks: list[str], attempts: list[str]) -> dict[str, str]:
    """The ``servatus.status/4`` document's fields as texts (``warnings`` left to the CLI), its
    ``tasks`` and ``attempts`` from the insides of their runs' arrays."""
    fields = {
        name: json_dumps(value)
        for name, value in document.items()
        if name not in ("tasks", "attempts", "warnings")
    }
    fields["tasks"] = _array(tasks)
    fields["attempts"] = _array(attempts)
    return fields


def _joined(cached: Cached, report: Report, as_json: bool) -> View | None:
    """The cached texts joined with ``report``, the projection of what the cache left live;
    None if they do not fit together."""
    header = cached.header
    counts = merged_counts(header.counts, report.counts)
    if as_json:
        document = status_document(report)
        split = len(header.tasks[0::2])
        tasks = join_texts(header.tasks, cached.texts[:split], document["tasks"])
        attempts = join_texts(header.attempts, cached.texts[split:], document["attempts"])
        if tasks is None or attempts is None:
            return None
        document["counts"] = counts
        document["results_ready"] = document["results_ready"] and header.succeeded
        fields = _fields(document, tasks, attempts)
        return View("", fields, tuple(document["warnings"]), None)
    rows, live_widths = status_rows(report)
    widths = [max(one, other) for one, other in zip(header.widths, live_widths, strict=True)]
    line = row_format(widths)
    lines = join(
        header.tasks, widen(cached.texts, header.widths, widths), [line % row for row in rows]
    )
    if lines is None:
        return None
    total = header.cached_tasks + len(report.tasks)
    text = terminal_text(
        [
            line % STATUS_HEADER,
            *lines,
            *held_lease_lines(report),
            *summary_lines(total, counts, report.warnings),
        ]
    )
    return View(text, {}, report.warnings, None)


# -- writing ------------------------------------------------------------------------------------


def _writer(
    state: records.CampaignState,
    report: Report,
    split: tuple[list[bool], list[bool]],
    texts: list[str],
    widths: Sequence[int],
) -> Write:
    """How to write the cache of ``state`` and its ``report``: Tasks and allocations ``split``
    into cached and live, the cached ones' ``texts`` (table lines padded to ``widths``, or the
    insides of the JSON arrays of each cached run)."""

    def write(path: Path, name: str, prefix: memoryview) -> None:
        """Write the cache ``name`` for ``state``, as the journal's ``prefix`` says it."""
        flags, held = split
        executions = [
            task.execution for task, cached in zip(report.tasks, flags, strict=True) if cached
        ]
        tasks = frozenset(
            key for key, cached in zip(state.tasks.keys, flags, strict=True) if cached
        )
        allocations = frozenset(
            intent.allocation_id
            for intent, cached in zip(state.intents, held, strict=True)
            if cached
        )
        planning, selectable = _for_planning(state, report, flags)
        contents = Contents(
            state=state,
            cached=tasks,
            held=allocations,
            task_runs=runs(flags),
            attempt_runs=runs(held),
            counts=dict(Counter(execution.value for execution in executions)),
            selectable=selectable,
            planning=planning,
            texts=texts,
            widths=tuple(widths),
        )
        write_cache(path, name, prefix, contents)

    return write


def _for_planning(
    state: records.CampaignState, report: Report, flags: Sequence[bool]
) -> tuple[Planning, Roster]:
    """The :class:`Planning` document of the cached Tasks, and the stored content of those
    ``plan`` may select unasked (:func:`selectable_unasked`)."""
    keys: list[str] = []
    index: dict[tuple[Any, ...], int] = {}  # a Task's work fields: hashing a tuple is cheap
    works: list[TaskWork] = []
    selectable: list[bool] = []
    of: list[int] = []
    content: list[tuple[str, Any]] = []
    for task, item, cached in zip(report.tasks, state.tasks.stored(), flags, strict=True):
        if not cached:
            continue
        fields = _WORK_FIELDS(task)
        at = index.get(fields)
        if at is None:
            at = index[fields] = len(works)
            works.append(TaskWork(*fields))
            selectable.append(selectable_unasked(works[at]))
        keys.append(task.key)
        of.append(at)
        if selectable[at]:
            content.append((task.key, item))
    roster = records.stored_roster(tuple(key for key, _ in content), [item for _, item in content])
    return Planning(tuple(keys), tuple(works), tuple(of)), roster


_WORK_FIELDS = operator.itemgetter(
    *(TaskStatus._fields.index(field.name) for field in attrs.fields(TaskWork))
)
"""A TaskStatus's fields that make its :class:`TaskWork`, in that class's order."""
