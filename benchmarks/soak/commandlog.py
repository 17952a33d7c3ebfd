"""The driver's command log: one JSON line per command it ran, appended and flushed as each
command ends, so a soak killed half-way still leaves every command before the kill.

A line (schema ``servatus.soak.command/1``) holds the command's argv, start and end (the client's
clock), exit code (None when the driver itself killed it: ``killed`` then says so; a command
killed at the driver's timeout keeps its -9 and says ``timed_out``), stdout and stderr, the saved
plan it wrote or submitted, and what the driver read around it: the campaign journal's revision
before and after (None when the journal did not open), and the published results it saw after
(:class:`ResultSeen`). Those snapshots are what the invariants need and
Servatus does not keep: the revision a submit began at, and how a destination looked over time.
``status --json`` runs as a command of its own after every other one, and its stdout is the
snapshot of outcomes over time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

SCHEMA = "servatus.soak.command/1"


@attrs.frozen
class ResultSeen:
    """One published destination as the driver saw it after a command: its Task's key, the
    destination directory's inode and ctime, and the writer its manifest names (None when the
    manifest did not read)."""

    key: str
    inode: int
    ctime_ns: int
    writer: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "inode": self.inode,
            "ctime_ns": self.ctime_ns,
            "writer": self.writer,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResultSeen:
        return cls(
            key=str(data["key"]),
            inode=int(data["inode"]),
            ctime_ns=int(data["ctime_ns"]),
            writer=data["writer"],
        )


@attrs.frozen
class CommandRecord:
    """One command the driver ran (see the module's docstring)."""

    index: int
    argv: tuple[str, ...]
    started: float
    ended: float
    exit_code: int | None
    killed: bool
    stdout: str
    stderr: str
    timed_out: bool = False
    """The driver killed it after its timeout: a hang, not a planned fault."""
    plan: str | None = None
    revision_before: int | None = None
    revision_after: int | None = None
    results: tuple[ResultSeen, ...] = ()

    @property
    def verb(self) -> str:
        """The servatus subcommand (``plan``, ``submit``, ...), or the first argument."""
        for word in self.argv:
            if word in VERBS:
                return word
        return self.argv[0] if self.argv else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "index": self.index,
            "argv": list(self.argv),
            "started": self.started,
            "ended": self.ended,
            "exit_code": self.exit_code,
            "killed": self.killed,
            "timed_out": self.timed_out,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "plan": self.plan,
            "revision_before": self.revision_before,
            "revision_after": self.revision_after,
            "results": [seen.to_json() for seen in self.results],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommandRecord:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} record")
        return cls(
            index=int(data["index"]),
            argv=tuple(str(word) for word in data["argv"]),
            started=float(data["started"]),
            ended=float(data["ended"]),
            exit_code=None if data["exit_code"] is None else int(data["exit_code"]),
            killed=bool(data["killed"]),
            timed_out=bool(data["timed_out"]),
            stdout=str(data["stdout"]),
            stderr=str(data["stderr"]),
            plan=data["plan"],
            revision_before=data["revision_before"],
            revision_after=data["revision_after"],
            results=tuple(ResultSeen.from_json(seen) for seen in data["results"]),
        )


VERBS = frozenset(
    {"create", "ensure", "append", "seal", "plan", "start", "validate", "submit", "status",
     "logs", "reconcile", "cancel", "doctor", "report"}
)  # fmt: skip


def append(path: Path, record: CommandRecord) -> None:
    """Append one record as a line and flush it to the file."""
    with path.open("a", encoding="utf-8") as log:
        log.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        log.flush()


def write(path: Path, records: Iterable[CommandRecord]) -> None:
    """Replace the log with ``records`` (tests that tamper with a log)."""
    path.write_text(
        "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records), encoding="utf-8"
    )


def read(path: Path) -> tuple[CommandRecord, ...]:
    """Every complete line of the log; a last line cut short by a kill is dropped."""
    return tuple(_records(path.read_text(encoding="utf-8")))


def _records(text: str) -> Iterator[CommandRecord]:
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if not line:
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) - 1:  # unterminated: the driver was killed mid-write
                return
            raise
        yield CommandRecord.from_json(data)
