"""Separate processes racing for one destination or one Workspace, on a real filesystem."""

from __future__ import annotations

import os
from collections import Counter
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from publish_helpers import PROCESSES, leftovers, make_tree, race, tree_listing, worker_argv

from servatus import Workspace, publish_file
from servatus_publish import _fs, publication


@pytest.mark.parametrize("kind", ["tree", "file"])
def test_eight_publishers_one_winner(tmp_path: Path, kind: str) -> None:
    src = make_tree(tmp_path / "src", 200)
    out = tmp_path / "outputs"
    out.mkdir()
    dest = out / "result"
    what = [str(src)] if kind == "tree" else ["100000"]
    outcomes = race(
        [worker_argv(kind, str(dest), *what, "--go", str(tmp_path / "go"))] * PROCESSES,
        tmp_path / "go",
    )
    assert Counter(outcomes) == {"ok": 1, "DestinationExists": PROCESSES - 1}
    if kind == "tree":
        assert tree_listing(dest / "data") == tree_listing(src)
    else:
        assert dest.read_bytes() == b"x" * 100000
    assert leftovers(out) == []


def test_eight_workers_enter_one_workspace(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    outcomes = race(
        [
            worker_argv(
                "workspace", str(out / "run"), "v1", "--hold", "2", "--go", str(tmp_path / "go")
            )
        ]
        * PROCESSES,
        tmp_path / "go",
    )
    assert Counter(outcomes) == {"ok": 1, "Busy": PROCESSES - 1}
    assert leftovers(out) == [".servatus-workspace.run"]


class HeldRemovals:
    """Stands in for ``_fs.remove_released``: records each removal, run only by ``finish``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self._remove_released = _fs.remove_released

    def __call__(self, dir_fd: int, name: str) -> bool:
        self.calls.append((os.dup(dir_fd), name))
        return True

    def finish(self) -> None:
        for dir_fd, name in self.calls:
            try:
                self._remove_released(dir_fd, name)
            finally:
                os.close(dir_fd)


def test_a_reclaimer_never_removes_a_stage_its_creator_has_just_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh stage is lockable between its ``mkdir`` and its creator's lock, so it looks dead.

    The interleaving of the race under load, made in one process: another publisher's reclaim
    runs in that gap and is held just before its final ``rmdir``; the creator then locks the
    stage, proves it linked and starts writing, and only then does that ``rmdir`` run.
    """
    real_hooks = publication._hooks()
    held = HeldRemovals()
    gap: list[str] = []

    class Hooks:
        def __getattr__(self, name: str) -> object:
            return getattr(real_hooks, name)

        def lock_directory(
            self, fd: int, path: str, *, wait: float
        ) -> AbstractContextManager[None]:
            if not gap:
                gap.append(path)
                container = Path(path).parent
                container_fd = os.open(container, _fs.O_DIR)
                try:
                    with monkeypatch.context() as patch:
                        patch.setattr(_fs, "remove_released", held)
                        publication.reclaim(container_fd, container)
                finally:
                    os.close(container_fd)
            return real_hooks.lock_directory(fd, path, wait=wait)

    monkeypatch.setattr(publication, "_hooks", Hooks)

    def write(path: Path) -> None:
        held.finish()
        path.write_bytes(b"complete")

    out = tmp_path / "outputs"
    out.mkdir()
    result = publish_file(out / "result", write)
    assert held.calls and gap
    assert not result.cleanup_pending
    assert (out / "result").read_bytes() == b"complete"
    assert leftovers(out) == []


def test_a_workspace_removal_never_removes_it_under_the_next_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removal releases the private directory's lock before its ``rmdir`` (NFS needs that).

    Another process entering in that gap locks the directory and proves it linked; it must not
    lose the directory to that ``rmdir`` before it has written its identity record.
    """
    held = HeldRemovals()
    destination = tmp_path / "run"
    with Workspace(destination, identity=b"v1") as first, monkeypatch.context() as patch:
        patch.setattr(_fs, "remove_released", held)
        first.discard()
    second = Workspace(destination, identity=b"v1")
    check_identity = second._check_identity

    def removal_finishes_now() -> bool:
        held.finish()
        return check_identity()

    monkeypatch.setattr(second, "_check_identity", removal_finishes_now)
    with second:
        (second.path / "checkpoint").write_text("resumable")
    assert held.calls
    assert (second.path / "checkpoint").read_text() == "resumable"
    assert (second.private / "identity").is_file()
