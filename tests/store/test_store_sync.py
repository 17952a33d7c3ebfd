"""The sync calls of the store's commit path, in the order ADR 0001 states, seen by ``strace`` on a
real ``servatus`` process.

No crash test can show a missing ``fsync``: a SIGKILL loses nothing the page cache holds, only a
power loss does. So the calls themselves are the evidence: each write is synced before the
change counts as made, a new journal is synced before it is renamed in, and the directory after.
Outside CI a machine without a usable ``strace`` skips these; in CI (``CI=true``) they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSCALLS = "fsync,fdatasync,rename,renameat,renameat2,openat,pwrite64,ftruncate,mkdir,mkdirat"

_CALL = re.compile(r"^\d+ +(?P<name>\w+)\((?P<args>.*)\) += (?P<result>.*)$")
_FD = re.compile(r"^-?\d+<(?P<path>[^>]*)>$|^AT_FDCWD<(?P<cwd>[^>]*)>$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def require_strace() -> None:
    """Skip without a working ``strace``, except in CI, where the proof must run."""
    problem = None
    if shutil.which("strace") is None:
        problem = "strace is not installed"
    else:
        probe = subprocess.run(["strace", "-qq", "-o", "/dev/null", "true"], capture_output=True)
        if probe.returncode != 0:
            problem = f"strace cannot trace here: {probe.stderr.decode(errors='replace')[:200]}"
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem}; CI must prove the store's syncs")
    pytest.skip(problem)


def split_args(text: str) -> list[str]:
    """strace's argument list split at top-level commas (quoted strings and braces kept)."""
    parts, depth, quoted, start, index = [], 0, False, 0, 0
    while index < len(text):
        char = text[index]
        if quoted:
            if char == "\\":
                index += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
        index += 1
    parts.append(text[start:].strip())
    return parts


def fd_path(arg: str) -> str | None:
    match = _FD.match(arg)
    return None if match is None else (match["path"] or match["cwd"])


def named(directory: str | None, arg: str) -> str | None:
    match = _QUOTED.fullmatch(arg.split("...", maxsplit=1)[0])
    if match is None or directory is None:
        return None
    return os.path.join(directory, match[1])


def events(trace: str, root: Path) -> list[tuple[str, ...]]:
    """The commit-path calls under ``root`` (the traced process's working directory), as
    (what, path relative to root[, path]).

    ``sync`` is fsync or fdatasync; ``create`` an exclusive create; ``write``, ``rename``,
    ``truncate`` and ``mkdir`` the calls of those names. Reads, read-only opens and every path
    outside ``root`` are left out.
    """

    def inside(path: str | None) -> str | None:
        if path is None:
            return None
        if path == str(root):
            return "."
        prefix = f"{root}/"
        return path.removeprefix(prefix) if path.startswith(prefix) else None

    found: list[tuple[str, ...]] = []
    for line in trace.splitlines():
        call = _CALL.match(line)
        if call is None or call["result"].startswith("-1"):
            continue
        name, args = call["name"], split_args(call["args"])
        if name in ("fsync", "fdatasync"):
            path = inside(fd_path(args[0]))
            if path is not None:
                found.append(("sync", path))
        elif name == "pwrite64":
            path = inside(fd_path(args[0]))
            if path is not None:
                found.append(("write", path))
        elif name == "ftruncate":
            path = inside(fd_path(args[0]))
            if path is not None:
                found.append(("truncate", path))
        elif name in ("mkdir", "mkdirat"):
            path = inside(
                named(str(root), args[0]) if name == "mkdir" else named(fd_path(args[0]), args[1])
            )
            if path is not None:
                found.append(("mkdir", path))
        elif name == "openat":
            if "O_CREAT" in args[2] and "O_EXCL" in args[2]:
                path = inside(fd_path(call["result"].split()[0]))
                if path is not None:
                    found.append(("create", path))
        elif name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                old, new = named(str(root), args[0]), named(str(root), args[1])
            else:
                old = named(fd_path(args[0]), args[1])
                new = named(fd_path(args[2]), args[3])
            pair = inside(old), inside(new)
            if pair[0] is not None and pair[1] is not None:
                found.append(("rename", pair[0], pair[1]))
    return found


def traced(root: Path, *argv: str) -> list[tuple[str, ...]]:
    """Run ``argv`` (a Python program's arguments) under strace in ``root``; its commit path."""
    log = root / "strace.log"
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-e",
            f"trace={SYSCALLS}",
            "-o",
            str(log),
            sys.executable,
            *argv,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = events(log.read_text(), root)
    log.unlink()
    return found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    require_strace()
    for key in "ab":
        (tmp_path / f"{key}.jsonl").write_text(f'{{"key": "{key}", "args": ["/bin/true"]}}\n')
    return tmp_path


CREATED = [
    ("mkdir", "state"),
    ("sync", "."),  # the parent, for STATE's name
    ("create", "state/journal.tmp"),
    ("write", "state/journal.tmp"),
    ("sync", "state/journal.tmp"),  # the new journal's bytes, before its name
    ("rename", "state/journal.tmp", "state/journal"),
    ("sync", "state"),  # the rename
]


def test_creating_a_campaign_syncs_the_journal_then_renames_then_syncs_the_directories(
    root: Path,
) -> None:
    assert traced(root, "-m", "servatus", "ensure", "state", "a.jsonl") == CREATED


def test_an_append_is_one_write_and_one_sync_of_the_journal(root: Path) -> None:
    traced(root, "-m", "servatus", "ensure", "state", "a.jsonl")
    appended = traced(root, "-m", "servatus", "ensure", "state", "b.jsonl")
    assert appended == [("write", "state/journal"), ("sync", "state/journal")]


def test_a_torn_tail_is_cut_and_synced_before_the_next_record(root: Path) -> None:
    traced(root, "-m", "servatus", "ensure", "state", "a.jsonl")
    with open(root / "state" / "journal", "ab") as journal:
        journal.write(b"R000")  # a crash inside the next header
    appended = traced(root, "-m", "servatus", "ensure", "state", "b.jsonl")
    assert appended == [
        ("truncate", "state/journal"),
        ("sync", "state/journal"),
        ("write", "state/journal"),
        ("sync", "state/journal"),
    ]


COMPACT = """
import sys
from servatus.journal import store

with store.writing(sys.argv[1]) as writer:
    writer.compact()
"""


def test_a_compaction_syncs_the_new_journal_then_renames_then_syncs_the_directory(
    root: Path,
) -> None:
    traced(root, "-m", "servatus", "ensure", "state", "a.jsonl")
    traced(root, "-m", "servatus", "ensure", "state", "b.jsonl")
    assert traced(root, "-c", COMPACT, "state") == CREATED[2:]
