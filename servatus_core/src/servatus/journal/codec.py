"""The journal's bytes: the columnar JSON codec of its records and the checksummed frames that
hold them (:func:`encode`, :func:`decode`, :func:`frame`, :func:`scan`); no file access."""

from __future__ import annotations

import binascii
import itertools
import json
import json.scanner
import operator
import re
import zlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from servatus.errors import (
    CorruptState,
    ServatusError,
    input_problem,
)
from servatus.evidence import MAX_JOB, SlotEnd
from servatus.ids import ALLOCATION_ID
from servatus.journal.folding import Fold, Rejected
from servatus.journal.records import (
    COLUMN_ARGS,
    COLUMN_ENV,
    COLUMN_KEY,
    COLUMN_STDIN,
    RECORD_TAGS,
    RECORD_TYPES,
    TASK_COLUMNS,
    ChainLink,
    Horizon,
    Intent,
    LeaseTerms,
    Listed,
    Receipt,
    Resolved,
    Settlement,
    TaskResources,
    build_task,
    stored_roster,
    stored_row,
    task_fields,
)
from servatus.strict import RECORDED_BELOW, finite, strict_scalars
from servatus.tasks import Roster, Task, as_roster, bulk, every_match, fields_valid

SCHEMA = "servatus.campaign/4"
"""The journal's version tag, its first line. A future version upgrades older records as dicts.

Versions 1 to 3 existed only before 0.14.1 was released and are refused as unknown versions:
version 1 repeated the Target's canonical JSON in every intent, version 2 stored a snapshot's
intents, receipts and resolutions as one object each instead of as columns, version 3 its
Tasks."""

MAGIC = SCHEMA.encode("ascii") + b"\n"
_HEADER = re.compile(rb"R([0-9a-f]{8}) ([0-9a-f]{8}) ([0-9a-f]{8})\n")
_HEADER_PREFIX = re.compile(
    rb"R[0-9a-f]{0,8}|R[0-9a-f]{8} [0-9a-f]{0,8}|R[0-9a-f]{8} [0-9a-f]{8} [0-9a-f]{0,8}"
)
HEADER_SIZE = 28
R = TypeVar("R")


# -- encoding -----------------------------------------------------------------------------------


def _unstructure_roster(roster: Roster) -> dict[str, list[Any]]:
    rows = [stored_row(item) if type(item) is Task else item for item in roster.stored()]
    columns = list(zip(*rows, strict=True)) or [()] * len(TASK_COLUMNS)
    return dict(zip(TASK_COLUMNS, map(list, columns), strict=True))


def _structure_roster(value: Any, _: Any) -> Roster:
    """Tasks built now with every check, for a record whose text :func:`decode` could not prove
    free of NUL and lone surrogates."""
    rows = zip(*_columns(value, TASK_COLUMNS, "Task columns"), strict=True)
    fields = map(task_fields, rows)
    return as_roster([Task(**{**field, "env": field["env"] or None}) for field in fields])


def _structure_stored_roster(value: Any, _: Any) -> Roster:
    """Tasks left as rows: every field of every Task checked now, column by column (the text was
    checked for the whole record by :func:`decode`); each Task is built when used."""
    columns = _columns(value, TASK_COLUMNS, "Task columns")
    keys, args, stdins, envs = (
        columns[COLUMN_KEY],
        columns[COLUMN_ARGS],
        columns[COLUMN_STDIN],
        columns[COLUMN_ENV],
    )
    rows = list(zip(*columns, strict=True))
    if not (fields_valid(keys, args, envs) and all(map(_is_base64, stdins))):
        for row in rows:  # the exact error: build each Task until one fails
            build_task(row)
    return stored_roster(tuple(keys), rows)


def _columns(value: Any, names: Iterable[str], what: str) -> list[list[Any]]:
    """The arrays of a columns object with exactly the fields ``names``, all of one length."""
    names = tuple(names)
    if type(value) is not dict or value.keys() != set(names):
        raise TypeError(f"not {what}: {value!r:.80}")
    columns = [value[name] for name in names]
    lengths = {len(column) if type(column) is list else -1 for column in columns}
    if len(lengths) != 1 or -1 in lengths:
        raise TypeError(f"not {what}: arrays of one length expected")
    return columns


def _is_base64(text: Any) -> bool:
    try:
        binascii.a2b_base64(text, strict_mode=True)
    except (ValueError, TypeError):  # binascii.Error, or not ASCII, or not a string
        return False
    return True


def _is_tuple_of(kind: type[Any]) -> Callable[[Any], bool]:
    many = tuple[kind, ...]  # type: ignore[valid-type]
    return lambda other: bool(other == many)


# A snapshot holds one intent and one receipt per allocation: it stores each of these tuples as
# columns (one JSON array per field), which decode to a few long arrays instead of 100,000 small
# objects, and checks each column with one C-level pass instead of one call per record. A single
# record is checked as a one-row table by the same schema, as strictly as generated hooks would
# (exact keys, exact scalar types).

_NONE = type(None)
_COLUMN_TYPES: dict[str, frozenset[type[Any]]] = {
    "text": frozenset({str}),
    "allocation": frozenset({str}),
    "time": frozenset({int, float}),
    "seconds": frozenset({int}),
    "seconds or none": frozenset({int, _NONE}),
    "job": frozenset({int}),
    "job or none": frozenset({int, _NONE}),
    "keys": frozenset({list}),
    "time or none": frozenset({int, float, _NONE}),
    "ends": frozenset({list}),
    "chain or none": frozenset({list, _NONE}),
    "lease or none": frozenset({list, _NONE}),
    "resources or none": frozenset({list, _NONE}),
    "allocation or none": frozenset({str, _NONE}),
    "slots": frozenset({list}),
    "flag or none": frozenset({bool, _NONE}),
}
_COLUMNS: dict[type[Any], dict[str, str]] = {
    Intent: {
        "allocation_id": "allocation",
        "task_keys": "keys",
        "plan_digest": "text",
        "created_at": "time",
        "target": "text",
        "time_limit": "seconds",
        "chain": "chain or none",
        "lease": "lease or none",
        "within": "allocation or none",
        "resources": "resources or none",
        "budget": "seconds or none",
    },
    Receipt: {"allocation_id": "allocation", "job": "job"},
    Resolved: {"allocation_id": "allocation", "job": "job or none"},
    Settlement: {
        "allocation_id": "allocation",
        "job": "job",
        "start": "time or none",
        "stop": "time or none",
        "limit": "time or none",
        "ends": "ends",
        "handed": "slots",
        "claim": "flag or none",
    },
    Listed: {"target": "text", "at": "time"},
    Horizon: {"target": "text", "intents": "seconds", "at": "time"},
}


def _in_range(column: str, values: list[Any]) -> bool:
    """The checks beyond type, one C-level pass each: allocation ids are 24 lowercase hex digits,
    times are finite wall times, limits are not negative, job numbers are Slurm's."""
    if not values:
        return True
    if column == "allocation":
        return every_match(ALLOCATION_ID, values)
    if column == "allocation or none":
        return every_match(ALLOCATION_ID, [value for value in values if value is not None])
    if column == "time":
        return all(map(finite, values)) and min(values) >= 0 and max(values) < RECORDED_BELOW
    if column == "time or none":
        return _in_range("time", [value for value in values if value is not None])
    if column == "seconds":
        return bool(min(values) >= 0 and max(values) < RECORDED_BELOW)
    if column == "seconds or none":
        return _in_range("seconds", [value for value in values if value is not None])
    if column in {"job", "job or none"}:
        jobs = values if column == "job" else [value for value in values if value is not None]
        return not jobs or (min(jobs) >= 1 and max(jobs) <= MAX_JOB)
    return True


def _unstructure_columns(kind: type[Any]) -> Callable[[tuple[Any, ...]], dict[str, list[Any]]]:
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)

    def unstructure(items: tuple[Any, ...]) -> dict[str, list[Any]]:
        document = {name: list(map(operator.attrgetter(name), items)) for name in columns}
        for name, default in defaults.items():  # a column of defaults reads back from nothing
            empty = default is None or default == ()
            if name in document and empty and document[name].count(default) == len(items):
                del document[name]
        for name, column in columns.items():
            if column == "keys" or (column == "slots" and name in document):
                document[name] = list(map(list, document[name]))
            elif column == "chain or none" and name in document:
                document[name] = [
                    None if link is None else _chain_row(link) for link in document[name]
                ]
            elif column in {"lease or none", "resources or none"} and name in document:
                document[name] = [
                    None if terms is None else list(terms) for terms in document[name]
                ]
            elif column == "ends":
                document[name] = [
                    [None if end is None else [end.exit_code, end.at] for end in ends]
                    for ends in document[name]
                ]
        return document

    return unstructure


class _ColumnProblem(TypeError):
    """What is wrong with one column (``a wrong type in job``), for its caller to put in its own
    words: a snapshot's columns and a single record report it differently."""


def _column(column: str, name: str, values: list[Any]) -> list[Any]:
    """One column of kind ``column`` checked and converted (times to floats, keys to tuples)."""
    if not set(map(type, values)) <= _COLUMN_TYPES[column]:
        raise _ColumnProblem(f"a wrong type in {name}")
    if not _in_range(column, values):
        raise _ColumnProblem(f"a value out of range in {name}")
    if column == "time":
        return list(map(float, values))
    if column == "time or none":
        return [None if value is None else float(value) for value in values]
    if column == "ends":
        return _slot_ends(name, values)
    if column == "chain or none":
        return [None if value is None else _chain_link(name, value) for value in values]
    if column == "lease or none":
        return [None if value is None else _lease_terms(name, value) for value in values]
    if column == "resources or none":
        return [None if value is None else _task_resources(name, value) for value in values]
    if column == "slots":
        return [_slots(name, value) for value in values]
    if column == "keys":
        try:
            "".join(itertools.chain.from_iterable(values))  # every key a string
        except TypeError:
            raise _ColumnProblem(f"a wrong type in {name}") from None
        return list(map(tuple, values))
    return values


_MAX_EXIT = 255
_MAX_LINKS = 32


def _chain_row(link: ChainLink) -> list[Any]:
    row = [link.position, link.of, link.after, list(link.task_links), link.budget]
    return [*row, list(link.short)] if link.short else row


def _chain_link(name: str, value: list[Any]) -> ChainLink:
    """``[position, of, after, [links per slot], budget]``, then ``[short slots]`` when any
    stops short, checked as strictly as a column."""
    if len(value) not in (5, 6) or not all(type(part) is list for part in value[3::2]):
        raise _ColumnProblem(f"a wrong type in {name}")
    position, of, after, task_links, budget, *rest = value
    short = rest[0] if rest else []
    numbers = {type(position), type(of), type(budget), *map(type, task_links), *map(type, short)}
    if not numbers <= {int} or type(after) is not str:
        raise _ColumnProblem(f"a wrong type in {name}")
    shaped = 1 <= position <= of <= _MAX_LINKS and (after == "") == (position == 1)
    if (
        not shaped
        or (after and not ALLOCATION_ID.fullmatch(after))
        or not all(1 <= links <= of for links in task_links)
        or not 0 <= budget < RECORDED_BELOW
        or (rest and not short)
        or short != sorted(set(short))
        or not all(0 <= slot < len(task_links) for slot in short)
    ):
        raise _ColumnProblem(f"a value out of range in {name}")
    return ChainLink(position, of, after, tuple(task_links), budget, tuple(short))


def _lease_terms(name: str, value: list[Any]) -> LeaseTerms:
    """``[profile, slots, cpus, memory MiB, gpus, signal_before_end]``, checked as a column."""
    if len(value) != 6 or type(value[0]) is not str:
        raise _ColumnProblem(f"a wrong type in {name}")
    if not set(map(type, value[1:])) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    profile, slots, cpus, memory_mib, gpus, signal = value
    if not profile or min(slots, cpus, memory_mib, signal) < 1 or gpus < 0:
        raise _ColumnProblem(f"a value out of range in {name}")
    return LeaseTerms(profile, slots, cpus, memory_mib, gpus, signal)


def _task_resources(name: str, value: list[Any]) -> TaskResources:
    """``[cpus, memory MiB, gpus]``, checked as a column."""
    if len(value) != 3 or not set(map(type, value)) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    cpus, memory_mib, gpus = value
    if min(cpus, memory_mib) < 1 or gpus < 0:
        raise _ColumnProblem(f"a value out of range in {name}")
    return TaskResources(cpus, memory_mib, gpus)


def _slots(name: str, value: list[Any]) -> tuple[int, ...]:
    """Slots ascending, each once: ``[0, 2]``."""
    if not set(map(type, value)) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    if value and (value[0] < 0 or any(a >= b for a, b in itertools.pairwise(value))):
        raise _ColumnProblem(f"a value out of range in {name}")
    return tuple(value)


def _slot_ends(name: str, values: list[Any]) -> list[tuple[SlotEnd | None, ...]]:
    """A column of settlements' ends: per slot null, or ``[exit code, mtime]``. Checked a column
    at a time (a settled campaign holds one per allocation), then built."""
    try:
        present = [end for end in itertools.chain.from_iterable(values) if end is not None]
    except TypeError:
        raise _ColumnProblem(f"a wrong type in {name}") from None
    if not set(map(type, present)) <= {list} or not set(map(len, present)) <= {2}:
        raise _ColumnProblem(f"a wrong type in {name}")
    codes, times = [end[0] for end in present], [end[1] for end in present]
    kinds = set(map(type, times))
    if not set(map(type, codes)) <= {int} or not kinds <= {int, float}:
        raise _ColumnProblem(f"a wrong type in {name}")
    if (codes and (min(codes) < 0 or max(codes) > _MAX_EXIT)) or not _in_range("time", times):
        raise _ColumnProblem(f"a value out of range in {name}")
    if kinds <= {float}:
        return [tuple([end and _new_end(end) for end in ends]) for ends in values]
    return [tuple([end and _new_end((end[0], float(end[1]))) for end in ends]) for ends in values]


def _new_end(end: Any) -> SlotEnd:
    return tuple.__new__(SlotEnd, end)


def _defaults(kind: type[Any]) -> dict[str, Any]:
    """The fields of ``kind`` that have a default, with it: a record or a snapshot written
    before such a field existed lacks it, and reads as if it held the default."""
    return {
        field.name: field.default
        for field in attrs.fields(kind)
        if field.default is not attrs.NOTHING
    }


def _structure_columns(kind: type[R]) -> Callable[[Any, Any], tuple[R, ...]]:
    """A snapshot's columns of ``kind``; the column of a field with a default may be absent."""
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)
    what = f"{RECORD_TAGS.get(kind, kind.__name__.lower())} columns"

    def structure(value: Any, _: Any) -> tuple[R, ...]:
        present = [name for name in columns if type(value) is not dict or name in value]
        if not columns.keys() - present <= defaults.keys():
            raise TypeError(f"not {what}: {value!r:.80}")
        arrays = dict(zip(present, _columns(value, present, what), strict=True))
        rows = len(arrays[present[0]]) if present else 0
        try:
            fields = [
                _column(column, name, arrays[name]) if name in arrays else [defaults[name]] * rows
                for name, column in columns.items()
            ]
        except _ColumnProblem as exc:
            raise TypeError(f"not {what}: {exc}") from None
        return tuple(map(kind, *fields))

    return structure


def _structure_record(kind: type[R]) -> Callable[[Any, Any], R]:
    """One intent, receipt or resolution, as the one row of its columns: a single record and a
    snapshot's columns are checked by one schema, :data:`_COLUMNS`. A field with a default (an
    intent's ``time_limit``) may be absent."""
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)
    required = columns.keys() - defaults.keys()
    what = f"a valid {RECORD_TAGS.get(kind, kind.__name__.lower())} record"

    def structure(value: Any, _: Any) -> R:
        if type(value) is not dict or not required <= value.keys() <= columns.keys():
            raise TypeError(f"not {what}: {value!r:.80}")
        try:
            row = [
                _column(column, name, [value[name] if name in value else defaults[name]])[0]
                for name, column in columns.items()
            ]
        except _ColumnProblem as exc:
            raise TypeError(f"not {what} ({exc}): {value!r:.80}") from None
        return kind(*row)

    return structure


def _converter(roster: Callable[[Any, Any], Roster]) -> cattrs.Converter:
    converter = make_converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(Roster, _unstructure_roster)
    converter.register_structure_hook(Roster, roster)
    converter.register_unstructure_hook(ChainLink, _chain_row)
    # An intent without a step's budget is written as before the budget was recorded, so a
    # campaign that never gave a step one stays readable by the versions before it.
    converter.register_unstructure_hook(
        Intent, make_dict_unstructure_fn(Intent, converter, budget=override(omit_if_default=True))
    )
    for kind in _COLUMNS:
        converter.register_structure_hook(kind, _structure_record(kind))
        converter.register_structure_hook_func(_is_tuple_of(kind), _structure_columns(kind))
        converter.register_unstructure_hook_func(_is_tuple_of(kind), _unstructure_columns(kind))
    return strict_scalars(converter)


_CONVERTER = _converter(_structure_roster)
_STORED = _converter(_structure_stored_roster)
"""For records without a ``\\u`` escape that could decode to a NUL or a lone surrogate."""

_UNSAFE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abAB])")


def encode(change: object) -> bytes:
    """One record as its JSON payload, ``type`` first."""
    tag = RECORD_TAGS.get(type(change))
    if tag is None:
        raise TypeError(f"{type(change).__name__} is not a registered record type")
    with bulk():
        document = {"type": tag, **_CONVERTER.unstructure(change)}
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def decode(payload: bytes) -> object:
    """One JSON payload as its record; raises ValueError or TypeError when it is not one.

    Strict UTF-8 refuses encoded surrogates (``json.loads`` of bytes would let them pass); a
    payload with no escape that could decode to a NUL or a lone surrogate then holds only valid
    Task text, so its Tasks skip that check, the costliest part of reading a large campaign.
    """
    document = json.loads(payload.decode("utf-8"))
    if not isinstance(document, dict):
        raise TypeError("a record is a JSON object")
    tag = document.pop("type", None)
    cls = RECORD_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise TypeError(f"unknown record type {tag!r}")
    try:
        converter = _CONVERTER if _UNSAFE_ESCAPE.search(payload) else _STORED
        return converter.structure(document, cls)
    except cattrs.BaseValidationError as exc:
        raise TypeError("; ".join(cattrs.transform_error(exc))) from None


def frame(payload: bytes) -> bytes:
    """Length-prefix and checksum one payload."""
    head = b"R%08x %08x" % (len(payload), zlib.crc32(payload))
    return head + b" %08x\n" % zlib.crc32(head) + payload + b"\n"


@attrs.frozen
class Scan:
    """What a journal holds: its record payloads, where the valid part ends, and its sizes."""

    payloads: tuple[bytes, ...]
    end: int
    first_size: int


def scan(data: bytes, name: str, start: int = 0) -> Scan:
    """Split a journal into payloads, verifying every frame; a cut-short last frame is torn.

    A valid journal never holds a raw NUL byte (JSON escapes it), so trailing NULs, which some
    filesystems leave after a crash, count as part of a torn tail. ``start``, a frame boundary
    found by an earlier scan, skips the frames before it (the status cache holds their fold).
    """
    if not data.startswith(MAGIC):
        version = data.split(b"\n", 1)[0][:40]
        if data.startswith(b"servatus.campaign/") and b"\n" in data:
            shown = version.decode("ascii", "replace")
            raise CorruptState(f"{name}: unknown campaign version {shown!r}")
        raise CorruptState(f"{name}: not a servatus campaign journal (or truncated)")
    limit = len(data.rstrip(b"\0")) if data.endswith(b"\0") else len(data)
    position = max(start, len(MAGIC))
    payloads: list[bytes] = []
    first_size = 0
    while position < limit:
        head = data[position : position + HEADER_SIZE]
        if len(head) < HEADER_SIZE or position + HEADER_SIZE > limit:
            if _HEADER_PREFIX.fullmatch(data[position:limit]):
                break
            raise CorruptState(f"{name}: damaged record header at byte {position}")
        match = _HEADER.fullmatch(head)
        if match is None or int(match[3], 16) != zlib.crc32(head[:18]):
            raise CorruptState(f"{name}: damaged record header at byte {position}")
        end = position + HEADER_SIZE + int(match[1], 16) + 1
        if end > limit:
            break
        payload = data[position + HEADER_SIZE : end - 1]
        if data[end - 1] != 0x0A or zlib.crc32(payload) != int(match[2], 16):
            raise CorruptState(f"{name}: the record at byte {position} fails its checksum")
        payloads.append(payload)
        if len(payloads) == 1:
            first_size = end - position
        position = end
    return Scan(tuple(payloads), position, first_size)


def fold_journal(data: bytes, name: str) -> tuple[Fold, Scan]:
    """Verify and fold a whole journal; every failure is CorruptState naming ``name``."""
    with bulk():
        return _fold_journal(data, name)


def _fold_journal(data: bytes, name: str) -> tuple[Fold, Scan]:
    found = scan(data, name)
    into = Fold()
    payloads = found.payloads
    index = 0
    while index < len(payloads):
        end, run = _row_run(payloads, index)
        changes: Iterable[object]
        if run is not None:
            changes = run
        else:  # no run here, or one with a bad record: each decoded, then applied
            end = max(end, index + 1)
            changes = (_decoded(payloads[at], at, name) for at in range(index, end))
        for at, change in enumerate(changes, index):
            try:
                into.apply(change)
            except Rejected as exc:
                raise CorruptState(f"{name}: record {at + 1} does not apply: {exc}") from None
        index = end
    if not into.started:
        raise CorruptState(f"{name}: the journal holds no campaign")
    return into, found


def _decoded(payload: bytes, index: int, name: str) -> object:
    try:
        return decode(payload)
    except (ValueError, TypeError, RecursionError, ServatusError) as exc:
        problem = input_problem(exc)
        raise CorruptState(f"{name}: record {index + 1} is invalid: {problem}") from None


_ROW_PREFIXES = {
    b'{"type":"%s",' % tag.encode(): (kind, tag)
    for kind, tag in RECORD_TAGS.items()
    if kind in _COLUMNS and tag.isidentifier()
}
"""What :func:`encode` starts a single intent, receipt, ... record with: the kinds
:func:`_row_run` reads as one table."""


_SCAN_ONCE = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type] # its attributes
"""``json.loads`` without its wrappers: its decoder's scanner, which gives the value at the start
of a text and where it ends (a payload of a run is that value alone, or no row)."""


def _row_run(payloads: tuple[bytes, ...], start: int) -> tuple[int, list[Any] | None]:
    """The run of single records of one kind with a column schema (intents, receipts, ...) from
    ``start``, structured as the rows of one table: one check per column instead of one per
    field of each record, the same checks (``_column`` accepts a column exactly when it accepts
    each of its values alone). Where the run ends, and its records; None for them when the
    payload at ``start`` begins no run, or any record of the run is not valid: then each is
    decoded alone, so an error names its record exactly as before."""
    head = payloads[start][: payloads[start].find(b",") + 1]
    found = _ROW_PREFIXES.get(head)
    if found is None:
        return start, None
    kind, tag = found
    end = start
    while end < len(payloads) and payloads[end].startswith(head):
        end += 1
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)
    required = columns.keys() - defaults.keys()
    documents = []
    scan_once = _SCAN_ONCE
    try:
        for payload in payloads[start:end]:
            text = payload.decode("utf-8")
            document, stop = scan_once(text, 0)
            if stop != len(text) or type(document) is not dict or document.pop("type", None) != tag:
                return end, None
            if not required <= document.keys() <= columns.keys():
                return end, None
            documents.append(document)
        fields = [
            _column(
                column, name, [row[name] if name in row else defaults[name] for row in documents]
            )
            for name, column in columns.items()
        ]
        return end, list(map(kind, *fields))
    except (StopIteration, ValueError, TypeError, RecursionError, ServatusError):
        return end, None  # each record alone says which, and why
