"""The status cache's file, ``servatus.status-cache/2`` (ADR 0010): its header and body, their
checks against the journal and the rules, reading and writing it."""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import time
import zlib
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.preconf.json import make_converter

from servatus.cli.render import STATUS_HEADER
from servatus.engine.status_values import Execution, RunTime, TaskLink
from servatus.engine.work import TaskWork
from servatus.files import read_all, write_all
from servatus.ids import ALLOCATION_ID_HEX
from servatus.journal import codec, folding, records, store

if TYPE_CHECKING:
    from servatus.tasks import Roster

FORMAT = b"servatus.status-cache/2 "
"""How a cache file starts; the CRC-32 of the rest (its header line and body) follows in hex."""
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


def file_name(*, offline: bool, as_json: bool) -> str:
    return (
        f"{store.STATUS_CACHE}{'offline' if offline else 'online'}.{'json' if as_json else 'table'}"
    )


# -- the rules it was made by -------------------------------------------------------------------


@functools.cache
def _rules() -> str:
    """A digest of the code a cached row comes from: another version of it projects or
    renders differently, and its cache is not trusted. The cache's use, ``status_cache.py``
    beside this file, is read, not imported: it imports this module."""
    import servatus  # noqa: PLC0415
    from servatus import evidence  # noqa: PLC0415
    from servatus.cli import render  # noqa: PLC0415
    from servatus.engine import (  # noqa: PLC0415
        cacheable,
        chain_cuts,
        settlement,
        slots,
        status,
        status_values,
        work,
    )

    digest = hashlib.sha256(servatus.__version__.encode())
    modules = (
        evidence,
        render,
        cacheable,
        settlement,
        status,
        status_values,
        slots,
        chain_cuts,
        work,
    )
    sources = [
        getattr(module, "__file__", None) for module in (*modules, records, folding, codec, store)
    ]
    for source in (*sources, Path(__file__).with_name("status_cache.py"), __file__):
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


def read_planning(cached: Cached) -> tuple[dict[str, TaskWork], Roster] | None:
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


# -- writing ------------------------------------------------------------------------------------


@attrs.frozen
class Contents:
    """What a cache is written of: the whole ``state``, the keys of its ``cached`` Tasks and ids
    of its ``held`` allocations, the runs of each (cached first), the cached Tasks' ``counts``
    per execution, the ``selectable`` content and :class:`Planning` document ``plan`` reads, and
    the cached ``texts`` (table lines padded to ``widths``, or the insides of the JSON arrays of
    each cached run)."""

    state: records.CampaignState
    cached: frozenset[str]
    held: frozenset[str]
    task_runs: tuple[int, ...]
    attempt_runs: tuple[int, ...]
    counts: dict[str, int]
    selectable: Roster
    planning: Planning
    texts: Sequence[str]
    widths: tuple[int, ...]


def write_cache(path: Path, name: str, prefix: memoryview, contents: Contents) -> None:
    """Write the cache ``name`` of ``contents``, as the journal's ``prefix`` says it; nothing
    if the write fails (it is only a cache). Written aside and renamed in, unsynced: a torn
    cache fails its checksum."""
    state, allocations = contents.state, contents.held
    rest = store.remainder(state, contents.cached, allocations)
    remainder = codec.encode(records.Snapshot(rest))
    ids = "".join(allocation_id for allocation_id in allocations).encode("ascii")
    appended = codec.encode(records.Appended(contents.selectable))
    document = _HEADERS.unstructure(contents.planning)
    planning = json.dumps(document, separators=(",", ":")).encode("ascii")
    try:
        body = remainder + ids + appended + planning + "\n".join(contents.texts).encode("utf-8")
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
        tasks=contents.task_runs,
        attempts=contents.attempt_runs,
        cached_tasks=len(contents.cached),
        cached_attempts=len(allocations),
        counts=contents.counts,
        succeeded=contents.counts.keys() <= {Execution.SUCCEEDED.value},
        widths=contents.widths,
        settled_live=len(rest.settlements),
        contents=len(appended),
        planning=len(planning),
        resolved=any(item.allocation_id in allocations for item in state.resolutions),
    )
    if not header.rules:
        return
    head = json.dumps(_HEADERS.unstructure(header), separators=(",", ":")).encode("ascii")
    content = head + b"\n" + body
    _replace(path, name, FORMAT + b"%08x\n" % zlib.crc32(content) + content)


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
