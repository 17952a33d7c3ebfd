"""Everything the invariants read, read once at the end of a soak into frozen values.

I/O lives here only. Sources: the campaign journal (opened the way Servatus opens it, so every
record's checksum is verified), the run markers under log_root (names and mtimes, as the file
server stamped them), the published results, the driver's command log with the snapshots in it
(:mod:`soak.commandlog`), and the plans the driver saved.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from servatus.errors import ServatusError
from servatus.evidence import Marker
from servatus.journal import store
from servatus.journal.records import CampaignState
from servatus_slurm.markers import parse_marker_name
from soak import commandlog, worker
from soak.commandlog import CommandRecord


@attrs.frozen
class JournalEvidence:
    """The campaign as the journal holds it: ``state`` when it opened, else ``error`` (the
    exception's type and message)."""

    state: CampaignState | None
    error: str | None


@attrs.frozen
class PublishedResult:
    """One Task's destination at the end: whether it exists, the writer its manifest names,
    its inode, and what makes it incomplete (empty when complete)."""

    key: str
    present: bool
    writer: str | None = None
    inode: int | None = None
    problems: tuple[str, ...] = ()


@attrs.frozen
class SavedPlan:
    """A plan the driver saved with ``plan --output``: its file, digest and the campaign
    revision it was made at (None for both when it did not read)."""

    path: str
    digest: str | None
    revision: int | None


@attrs.frozen
class StatusSnapshot:
    """One ``status --json`` document the driver kept: the command's index and end time, and
    per attempt ``(allocation_id, job)`` its per-slot executions and whether Slurm listed it."""

    index: int
    at: float
    attempts: tuple[tuple[str, int | None, tuple[str, ...], bool], ...]
    tasks: tuple[tuple[str, str, str | None], ...]
    """Per Task: key, execution, allocation."""


@attrs.frozen
class SoakEvidence:
    """The whole of one soak's evidence."""

    journal: JournalEvidence
    markers: tuple[Marker, ...]
    commands: tuple[CommandRecord, ...]
    statuses: tuple[StatusSnapshot, ...]
    plans: tuple[SavedPlan, ...]
    results: tuple[PublishedResult, ...]
    expect_results: bool
    collected_at: float


def read_journal(state: Path) -> JournalEvidence:
    try:
        return JournalEvidence(state=store.read(state), error=None)
    except ServatusError as exc:
        return JournalEvidence(state=None, error=f"{type(exc).__name__}: {exc}")


def read_markers(log_root: Path) -> tuple[Marker, ...]:
    """Every run marker under ``log_root`` (a lease's orders directory included), by name and
    mtime; files that are not markers (logs) are skipped."""
    found: list[Marker] = []
    for directory, _, names in os.walk(log_root):
        for name in names:
            path = Path(directory, name)
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            marker = parse_marker_name(name, st.st_mtime, st.st_size)
            if marker is not None:
                found.append(marker)
    found.sort(key=lambda m: (m.allocation_id, m.job, m.at, m.kind.value, m.slot or 0))
    return tuple(found)


def read_results(results: Path, keys: Sequence[str]) -> tuple[PublishedResult, ...]:
    """Each of ``keys``' destination under ``results``."""
    seen: list[PublishedResult] = []
    for key in keys:
        directory = results / key
        try:
            st = directory.lstat()
        except FileNotFoundError:
            seen.append(PublishedResult(key=key, present=False))
            continue
        writer, problems = worker.check_result(directory, key)
        seen.append(
            PublishedResult(
                key=key, present=True, writer=writer, inode=st.st_ino, problems=problems
            )
        )
    return tuple(seen)


def snapshot_results(results: Path) -> tuple[commandlog.ResultSeen, ...]:
    """What the driver records after each command: every destination under ``results``."""
    seen: list[commandlog.ResultSeen] = []
    try:
        names = sorted(os.listdir(results))
    except FileNotFoundError:
        return ()
    for name in names:
        if name.startswith("."):
            continue
        try:
            st = (results / name).lstat()
        except FileNotFoundError:
            continue
        writer, _ = worker.check_result(results / name, name)
        seen.append(
            commandlog.ResultSeen(key=name, inode=st.st_ino, ctime_ns=st.st_ctime_ns, writer=writer)
        )
    return tuple(seen)


def journal_revision(state: Path) -> int | None:
    """The campaign's revision now, or None when the journal does not open."""
    try:
        return store.read(state).revision
    except ServatusError:
        return None


def read_plan(path: Path) -> SavedPlan:
    try:
        data: Any = json.loads(path.read_text())
        return SavedPlan(path=str(path), digest=str(data["digest"]), revision=int(data["revision"]))
    except (OSError, ValueError, KeyError, TypeError):
        return SavedPlan(path=str(path), digest=None, revision=None)


def status_snapshots(commands: Sequence[CommandRecord]) -> tuple[StatusSnapshot, ...]:
    """The ``status --json`` documents among the commands that exited 0, in order."""
    snapshots: list[StatusSnapshot] = []
    for record in commands:
        if record.verb != "status" or "--json" not in record.argv or record.exit_code != 0:
            continue
        try:
            document = json.loads(record.stdout)
            attempts = tuple(
                (
                    str(a["allocation_id"]),
                    a.get("job"),
                    tuple(str(e) for e in a.get("executions") or ()),
                    bool(a.get("listed")),
                )
                for a in document["attempts"]
            )
            tasks = tuple(
                (str(t["key"]), str(t["execution"]), t.get("allocation")) for t in document["tasks"]
            )
        except (ValueError, KeyError, TypeError):
            continue  # an unreadable document is the command-table invariant's to name
        snapshots.append(
            StatusSnapshot(index=record.index, at=record.ended, attempts=attempts, tasks=tasks)
        )
    return tuple(snapshots)


def collect(
    *,
    state: Path,
    log_root: Path,
    command_log: Path,
    results: Path | None,
    plans: Sequence[Path] = (),
    now: float,
) -> SoakEvidence:
    """Read everything at the end of a soak. ``plans`` defaults to every plan file the command
    log names; ``results`` None: this soak's Tasks publish nothing."""
    commands = commandlog.read(command_log)
    journal = read_journal(state)
    named = [Path(r.plan) for r in commands if r.plan is not None]
    plan_paths = sorted({*map(str, plans), *map(str, named)})
    statuses = status_snapshots(commands)
    if journal.state is not None:
        keys = tuple(journal.state.tasks.keys)
    else:  # the journal invariant names that; the results are still read, by what else shows
        shown = {key for key, _, _ in statuses[-1].tasks} if statuses else set()
        if results is not None and results.is_dir():
            shown.update(p.name for p in results.iterdir() if not p.name.startswith("."))
        keys = tuple(sorted(shown))
    return SoakEvidence(
        journal=journal,
        markers=read_markers(log_root),
        commands=commands,
        statuses=statuses,
        plans=tuple(read_plan(Path(p)) for p in plan_paths),
        results=read_results(results, keys) if results is not None else (),
        expect_results=results is not None,
        collected_at=now,
    )
