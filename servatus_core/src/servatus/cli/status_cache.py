"""The status cache (ADR 0010): the finished rows of settled Tasks, kept beside the journal, so
that ``servatus status`` of a large campaign decodes, projects and renders only its live work.

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

import functools
import hashlib
import itertools
import json
import operator
import os
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.preconf.json import make_converter

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
from servatus.engine.cacheable import partition
from servatus.engine.plan import (
    Plan,
    Request,
    TaskWork,
    Work,
    consults,
    selectable_unasked,
    work_from_report,
)
from servatus.engine.status import (
    Execution,
    Report,
    RunTime,
    TaskLink,
    TaskStatus,
)
from servatus.engine.status_document import status_document
from servatus.files import read_all, write_all
from servatus.ids import ALLOCATION_ID_HEX
from servatus.journal import codec, folding, records, store
from servatus.tasks import bulk

if TYPE_CHECKING:
    from servatus.config import Profile
    from servatus.continuation import Continuation
    from servatus.evidence import Evidence
    from servatus.operations.held import HeldState
    from servatus.tasks import Roster
    from servatus.transport import Connect

FORMAT = b"servatus.status-cache/2 "
"""How a cache file starts; the CRC-32 of the rest (its header line and body) follows in hex."""
MIN_CACHED = 1000
"""Fewer settled Tasks than this (or than half the campaign) are projected faster than a cache
is written and read."""

MIN_SHARE = 0.5
"""Nor is a cache worth it while fewer than this share of the Tasks are settled."""

_TAIL_BYTES = 8 << 20
"""Records past the cached prefix are folded on every status; beyond this share of the prefix
(and this many bytes), the whole journal is read once and the cache written again."""

_STALE_TEMPORARY = 600.0
"""Seconds after which a cache's temporary file is a killed writer's, and removed."""


@attrs.frozen
class Header:
    """What a cache file says of itself, before its body: the checks, then how to join. The
    body is the remainder's snapshot (``remainder`` bytes), the cached allocations' ids run
    together (``held`` bytes), for ``plan`` the cached Tasks it may select as one Appended
    record (``contents`` bytes) and the :class:`Planning` document (``planning`` bytes), then
    the cached texts, a line each. ``resolved``: a cached allocation was resolved by
    ``reconcile`` (a plan then reads Slurm)."""

    name: str
    rules: str
    length: int
    digest: str
    remainder: int
    held: int
    targets: tuple[str, ...]
    tasks: tuple[int, ...]
    attempts: tuple[int, ...]
    cached_tasks: int
    cached_attempts: int
    counts: dict[str, int]
    succeeded: bool
    widths: tuple[int, ...]
    settled_live: int
    contents: int
    planning: int
    resolved: bool


@attrs.frozen
class Planning:
    """What ``plan`` reads of the cached Tasks: their keys in roster order, and each one's
    earlier work, an index into the distinct ``works``."""

    keys: tuple[str, ...]
    works: tuple[TaskWork, ...]
    of: tuple[int, ...]


_HEADERS = make_converter(forbid_extra_keys=True)


def _all_of(kind: type[Any]) -> Callable[[Any, Any], tuple[Any, ...]]:
    """A strict structure hook for a JSON array of one scalar type, one C loop for a planning
    part's 100,000 keys where cattrs' own calls a hook per item."""

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if type(value) is not list or not all(type(item) is kind for item in value):
            raise TypeError(f"not an array of {kind.__name__}")
        return tuple(value)

    return structure


for _scalar in (str, int):
    _HEADERS.register_structure_hook_func(
        functools.partial(operator.eq, tuple[_scalar, ...]),  # type: ignore[valid-type]
        _all_of(_scalar),
    )
_HEADERS.register_structure_hook(
    RunTime, lambda value, _: RunTime(*_HEADERS.structure(value, tuple[int, bool]))
)
_HEADERS.register_structure_hook(
    TaskLink, lambda value, _: TaskLink(*_HEADERS.structure(value, tuple[int, int, int]))
)


@attrs.frozen
class Cached:
    """A cache that holds for the journal read: its header, the state it leaves live (the
    journal's later records folded on), its finished texts (rows, or JSON of Tasks then of
    allocations), and for ``plan`` the content of the cached Tasks it may select and the
    :class:`Planning` document, both still encoded."""

    header: Header
    state: records.CampaignState
    texts: list[str]
    contents: bytes
    planning: bytes


@attrs.frozen
class View:
    """What ``servatus status`` prints: the table's text, or the JSON document's fields as
    texts (``warnings`` apart, for the CLI to add its own); and why a settlement was not
    recorded, or None."""

    text: str
    fields: dict[str, str]
    warnings: tuple[str, ...]
    record_warning: str | None


def file_name(*, offline: bool, as_json: bool) -> str:
    return (
        f"{store.STATUS_CACHE}{'offline' if offline else 'online'}.{'json' if as_json else 'table'}"
    )


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


# -- the rules it was made by -------------------------------------------------------------------


@functools.cache
def _rules() -> str:
    """A digest of the code a cached row comes from: another version of it projects or
    renders differently, and its cache is not trusted."""
    import servatus  # noqa: PLC0415
    from servatus import evidence  # noqa: PLC0415
    from servatus.cli import render  # noqa: PLC0415
    from servatus.engine import cacheable, settlement, status  # noqa: PLC0415

    digest = hashlib.sha256(servatus.__version__.encode())
    modules = (evidence, render, cacheable, settlement, status)
    sources = [
        getattr(module, "__file__", None) for module in (*modules, records, folding, codec, store)
    ]
    for source in (*sources, __file__):
        if source is None:
            return ""
        digest.update(Path(source).read_bytes())
    return digest.hexdigest()


# -- reading ------------------------------------------------------------------------------------


def read_cache(path: Path, name: str, data: bytes, journal: str) -> Cached | None:
    """The cache ``name`` of the campaign at ``path``, if it holds for the journal ``data``;
    None otherwise (no cache, a damaged one, another prefix or rules, a record it cannot take)."""
    try:
        fd = os.open(path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        content = read_all(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return _holds(content, data, journal, name)
    except Exception:  # whatever is wrong with a cache, the whole journal answers
        return None


def _holds(content: bytes, data: bytes, journal: str, name: str) -> Cached | None:
    if not content.startswith(FORMAT):
        return None
    start = len(FORMAT) + 9
    if content[start - 1 : start] != b"\n" or zlib.crc32(memoryview(content)[start:]) != int(
        content[len(FORMAT) : start - 1], 16
    ):
        return None
    newline = content.index(b"\n", start)
    header = _HEADERS.structure(json.loads(content[start:newline]), Header)
    body = memoryview(content)[newline + 1 :]
    if header.name != name or not _consistent(header) or header.rules != _rules():
        return None
    length = header.length
    if length > len(data) or hashlib.sha256(memoryview(data)[:length]).hexdigest() != header.digest:
        return None
    if len(data) - length > max(_TAIL_BYTES, length // 4):
        return None
    snapshot = codec.decode(bytes(body[: header.remainder]))
    if not isinstance(snapshot, records.Snapshot):
        return None
    into = folding.Fold()
    into.apply(snapshot)
    held = str(body[header.remainder : header.remainder + header.held], "ascii")
    for payload in codec.scan(data, journal, start=length).payloads:
        change = codec.decode(payload)
        if isinstance(change, records.Appended):
            return None  # its keys might be cached ones: a journal the whole fold refuses
        if isinstance(change, records.Intent) and change.allocation_id in held:
            return None  # a cached allocation's id again (or a match across two): the same
        after = change.chain.after if isinstance(change, records.Intent) and change.chain else ""
        if after and after not in into.intents:
            return None  # the link after a cached allocation
        into.apply(change)  # Rejected for a record about a cached Task or allocation
    if len(into.settlements) - header.settled_live > max(MIN_CACHED, header.cached_tasks // 4):
        return None  # settled since, projected on every status: time to cache them too
    at = header.remainder + header.held
    contents = bytes(body[at : at + header.contents])
    planning = bytes(body[at + header.contents : at + header.contents + header.planning])
    texts = str(body[at + header.contents + header.planning :], "utf-8").split("\n")
    runs_held = len(header.tasks[0::2]) + len(header.attempts[0::2])
    if len(texts) != (header.cached_tasks if header.widths else runs_held):
        return None
    return Cached(header, into.freeze(), texts, contents, planning)


def _consistent(header: Header) -> bool:
    """Whether a header's numbers fit together (a checksum proves only that they were written)."""
    numbers = [*header.tasks, *header.attempts, *header.widths, *header.counts.values()]
    numbers += (header.remainder, header.contents, header.planning)
    return (
        min(numbers, default=0) >= 0
        and sum(header.tasks[0::2]) == header.cached_tasks == sum(header.counts.values())
        and sum(header.attempts[0::2]) == header.cached_attempts
        and header.held == ALLOCATION_ID_HEX * header.cached_attempts
        and header.counts.keys() <= {state.value for state in Execution}
        and header.succeeded == (header.counts.keys() <= {Execution.SUCCEEDED.value})
        and len(header.widths) == (0 if header.name.endswith(".json") else len(STATUS_HEADER) - 1)
    )


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
        cached = read_cache(directory, name, data, journal)
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
    asked = consults(request, continuation, resolved=False)
    with bulk():
        cached = _either_form(directory, data, journal, offline=not asked)
        if cached is not None and not asked and _resolved(cached):
            cached = _either_form(directory, data, journal, offline=False)
        found = None if cached is None else _planning(cached)
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


def _either_form(directory: Path, data: bytes, journal: str, *, offline: bool) -> Cached | None:
    """A cache of the mode that holds, of either form: each keeps the same planning part."""
    for as_json in (False, True):
        cached = read_cache(directory, file_name(offline=offline, as_json=as_json), data, journal)
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


def _planning(cached: Cached) -> tuple[dict[str, TaskWork], Roster] | None:
    """The planning part of ``cached`` decoded and checked against its header, or None: each
    cached Task's earlier work by key (in roster order), and the content of those a plan may
    select unasked."""
    header = cached.header
    try:
        planning = _HEADERS.structure(json.loads(cached.planning), Planning)
        appended = codec.decode(cached.contents)
    except Exception:  # whatever is wrong with a cache, the whole journal answers
        return None
    if not isinstance(appended, records.Appended) or len(planning.keys) != header.cached_tasks:
        return None
    if len(planning.of) != len(planning.keys) or not all(
        0 <= index < len(planning.works) for index in planning.of
    ):
        return None
    works = dict(zip(planning.keys, map(planning.works.__getitem__, planning.of), strict=True))
    content = appended.tasks
    if len(works) != len(planning.keys) or not works.keys().isdisjoint(cached.state.tasks.keys):
        return None
    if not all(key in works for key in content.keys):
        return None
    return works, content


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
        """Write the cache ``name`` for ``state``, as the journal's ``prefix`` says it; nothing
        if the write fails (it is only a cache). Written aside and renamed in, unsynced: a torn
        cache fails its checksum."""
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
        rest = store.remainder(state, tasks, allocations)
        remainder = codec.encode(records.Snapshot(rest))
        ids = "".join(allocation_id for allocation_id in allocations).encode("ascii")
        contents, planning = _for_planning(state, report, flags)
        try:
            body = remainder + ids + contents + planning + "\n".join(texts).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in a key: not worth a cache of its own
            return
        identities = state.target_identities()
        header = Header(
            name=name,
            rules=_rules(),
            length=len(prefix),
            digest=hashlib.sha256(prefix).hexdigest(),
            remainder=len(remainder),
            held=len(ids),
            targets=tuple(dict.fromkeys(identities[intent.target] for intent in state.intents)),
            tasks=runs(flags),
            attempts=runs(held),
            cached_tasks=len(tasks),
            cached_attempts=len(allocations),
            counts=dict(Counter(execution.value for execution in executions)),
            succeeded=all(execution is Execution.SUCCEEDED for execution in executions),
            widths=tuple(widths),
            settled_live=len(rest.settlements),
            contents=len(contents),
            planning=len(planning),
            resolved=any(item.allocation_id in allocations for item in state.resolutions),
        )
        if not header.rules:
            return
        head = json.dumps(_HEADERS.unstructure(header), separators=(",", ":")).encode("ascii")
        content = head + b"\n" + body
        _replace(path, name, FORMAT + b"%08x\n" % zlib.crc32(content) + content)

    return write


def _for_planning(
    state: records.CampaignState, report: Report, flags: Sequence[bool]
) -> tuple[bytes, bytes]:
    """The cached Tasks ``plan`` may select unasked (:func:`selectable_unasked`), as one
    Appended record of their stored content, and the :class:`Planning` document of them all."""
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
    document = _HEADERS.unstructure(Planning(tuple(keys), tuple(works), tuple(of)))
    planning = json.dumps(document, separators=(",", ":")).encode("ascii")
    return codec.encode(records.Appended(roster)), planning


_WORK_FIELDS = operator.itemgetter(
    *(TaskStatus._fields.index(field.name) for field in attrs.fields(TaskWork))
)
"""A TaskStatus's fields that make its :class:`TaskWork`, in that class's order."""


def _replace(path: Path, name: str, content: bytes) -> None:
    temporary = f"{name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path / temporary, flags, store.FILE_MODE)
        try:
            write_all(fd, content, 0)
        finally:
            os.close(fd)
        os.replace(path / temporary, path / name)
    except OSError:
        with suppress(OSError):
            os.unlink(path / temporary)
        return
    with suppress(OSError):
        now = time.time()
        for entry in os.scandir(path):
            left = entry.name.startswith(store.STATUS_CACHE) and entry.name.endswith(".tmp")
            if left and now - entry.stat(follow_symlinks=False).st_mtime > _STALE_TEMPORARY:
                os.unlink(entry.path)
