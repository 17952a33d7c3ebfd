"""SIGKILL during publication, at random moments and at every crash point.

After each kill: the destination is absent or complete; a rerun completes or raises
DestinationExists; and after the rerun nothing of Servatus's is left beside the destination
(leftover stages and private work are reclaimed), unless the rerun reported cleanup_pending.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from publish_helpers import leftovers, make_tree, tree_listing, worker_argv

from servatus import Workspace, publish, publish_file
from servatus.errors import DestinationExists
from servatus_publish.publication import Draft
from testkit import count_calls

TREE_FILES = 1000
TREE_TRIALS = 110
FILE_TRIALS = 100
FILE_SIZE = 4 * 1024 * 1024
CRASH_SYSCALLS = (
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "rmdir",
    "mkdir",
    "mkdirat",
    "fsync",
    "fdatasync",
    "syncfs",
    "flock",
)


def tree_builder(src: Path) -> object:
    def build(draft: Draft) -> None:
        (draft.path / "summary.json").write_text('{"ok": true}\n')
        draft.link_tree(src, "data")

    return build


def write_file(path: Path) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(b"x" * FILE_SIZE)
    os.replace(temporary, path)


def check_tree(dest: Path, src: Path) -> bool:
    """True when published; fails the test when the destination exists but is not complete."""
    if not dest.exists():
        return False
    assert (dest / "summary.json").read_text() == '{"ok": true}\n'
    assert tree_listing(dest / "data") == tree_listing(src)
    return True


def check_file(dest: Path, size: int = FILE_SIZE) -> bool:
    if not dest.exists():
        return False
    assert dest.stat().st_size == size
    assert dest.read_bytes() == b"x" * size
    return True


def rerun(publish_again: object, out: Path) -> str:
    """Publish again in this process: it completes or finds the result; nothing is left over."""
    try:
        result = publish_again()  # type: ignore[operator]
        outcome = "published"
    except DestinationExists:
        outcome = "existed"
        result = None
    if result is None or not getattr(result, "cleanup_pending", False):
        assert leftovers(out) == [], "leftovers were not reclaimed"
    return outcome


def start_ready(argv: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*argv, "--ready"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def timed_run(argv: list[str]) -> float:
    process = start_ready(argv)
    assert process.stdin is not None
    started = time.monotonic()
    process.stdin.write("go\n")
    process.stdin.flush()
    process.wait(timeout=120)
    return time.monotonic() - started


def kill_after(argv: list[str], delay: float) -> None:
    process = start_ready(argv)
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    time.sleep(delay)
    process.kill()
    process.wait(timeout=60)


@pytest.mark.slow
def test_random_sigkill_during_link_tree_publication(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", TREE_FILES)
    out = tmp_path / "outputs"
    out.mkdir()
    os.sync()  # the trials should race the publication, not the writeback of a fresh tree
    for _ in range(2):
        span = timed_run(worker_argv("tree", str(out / "calibration"), str(src)))
        shutil.rmtree(out / "calibration")
    rng = random.Random(20261129)
    seen: Counter[str] = Counter()
    for trial in range(TREE_TRIALS):
        dest = out / f"run-{trial}"
        kill_after(worker_argv("tree", str(dest), str(src)), rng.uniform(0, span * 1.1))
        seen["complete" if check_tree(dest, src) else "absent"] += 1
        seen["stage left"] += bool(leftovers(out))
        seen[rerun(lambda d=dest: publish(d, tree_builder(src), mode=0o755), out)] += 1
        assert check_tree(dest, src)
    print(f"link_tree trials: {dict(seen)}, span {span:.3f}s")
    assert seen["absent"] and seen["complete"] and seen["stage left"]


@pytest.mark.slow
def test_random_sigkill_during_publish_file(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    for _ in range(2):
        span = timed_run(worker_argv("file", str(out / "calibration"), str(FILE_SIZE)))
        (out / "calibration").unlink()
    rng = random.Random(1129)
    seen: Counter[str] = Counter()
    for trial in range(FILE_TRIALS):
        dest = out / f"weights-{trial}.bin"
        kill_after(worker_argv("file", str(dest), str(FILE_SIZE)), rng.uniform(0, span * 1.1))
        seen["complete" if check_file(dest) else "absent"] += 1
        seen["stage left"] += bool(leftovers(out))
        seen[rerun(lambda d=dest: publish_file(d, write_file), out)] += 1
        assert check_file(dest)
    print(f"publish_file trials: {dict(seen)}, span {span:.3f}s")
    assert seen["absent"] and seen["complete"] and seen["stage left"]


# -- every crash point ------------------------------------------------------------------------


def strace_argv(extra: list[str], argv: list[str]) -> list[str]:
    return ["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null", *extra, *argv]


SCENARIOS = ["tree", "tree-syncfs", "file", "workspace", "tree-bindfs", "file-bindfs"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sigkill_at_every_crash_point(
    tmp_path: Path, scenario: str, request: pytest.FixtureRequest
) -> None:
    """Kill the publishing process at the Nth call of each write-path syscall, for every N."""
    if not shutil.which("strace"):
        pytest.skip("strace is needed")
    if scenario.endswith("bindfs"):
        root = request.getfixturevalue("bindfs")
    else:
        root = tmp_path / "fs"
        root.mkdir()
    src = make_tree(root / "src", 4, per_dir=2)
    out = root / "outputs"
    out.mkdir()
    kind = scenario.split("-", maxsplit=1)[0]

    def argv_for(dest: Path) -> list[str]:
        if kind == "tree":
            syncfs = ["--syncfs-after", "2"] if scenario == "tree-syncfs" else []
            return worker_argv("tree", str(dest), str(src), *syncfs)
        if kind == "file":
            return worker_argv("file", str(dest), "70000")
        return worker_argv("workspace", str(dest), "v1", "--src", str(src))

    def again(dest: Path) -> object:
        if kind == "tree":
            return publish(dest, tree_builder(src), mode=0o755)
        if kind == "file":
            return publish_file(dest, lambda p: p.write_bytes(b"x" * 70000))
        with Workspace(dest, identity=b"v1") as ws:
            (ws.path / "checkpoint").write_text("rerun\n")
            return ws.publish(
                lambda d: (d.link(ws.path / "checkpoint", "checkpoint"), d.link_tree(src, "data"))
            )

    def complete(dest: Path) -> bool:
        if kind == "file":
            return check_file(dest, 70000)
        if not dest.exists():
            return False
        assert tree_listing(dest / "data") == tree_listing(src)
        if kind == "tree":
            assert (dest / "summary.json").read_text() == '{"ok": true}\n'
        else:
            assert (dest / "checkpoint").read_text().startswith(("pid ", "rerun"))
        return True

    counts = count_calls(argv_for(out / "count"), CRASH_SYSCALLS)
    complete(out / "count")
    if kind == "tree":
        shutil.rmtree(out / "count")
    else:
        (out / "count").unlink() if kind == "file" else shutil.rmtree(out / "count")
    assert counts.get("renameat2", 0) + counts.get("linkat", 0) >= 1
    assert ("syncfs" in counts) == (scenario == "tree-syncfs")
    visited: Counter[str] = Counter()
    for syscall, calls in sorted(counts.items()):
        for n in range(1, calls + 1):
            dest = out / f"{syscall}-{n}"
            injected = f"inject={syscall}:signal=SIGKILL:when={n}"
            subprocess.run(strace_argv(["-e", injected], argv_for(dest)), capture_output=True)
            visited["complete" if complete(dest) else "absent"] += 1
            rerun(lambda d=dest: again(d), out)
            assert complete(dest)
            if kind == "workspace":
                assert leftovers(out) == []
    print(f"{scenario}: crash points per syscall {counts}; outcomes {dict(visited)}")
    assert visited["absent"] and visited["complete"]
