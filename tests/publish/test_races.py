"""Separate processes racing for one destination or one Workspace, on a real filesystem."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from publish_helpers import PROCESSES, leftovers, make_tree, race, tree_listing, worker_argv

from servatus import publish_file
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


def test_a_reclaimer_never_removes_a_stage_its_creator_has_just_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh stage is lockable between its ``mkdir`` and its creator's lock, so it looks dead.

    The interleaving of the race under load, made in one process: another publisher's reclaim
    runs in that gap and is held just before its final ``rmdir``; the creator then locks the
    stage, proves it linked and starts writing, and only then does that ``rmdir`` run.
    """
    real_hooks = publication._hooks()
    real_remove_released = _fs.remove_released
    held_back: list[Callable[[], bool]] = []
    state = {"interleaved": False}

    def defer(dir_fd: int, name: str) -> bool:
        held_back.append(lambda: real_remove_released(dir_fd, name))
        return True

    class Hooks:
        def __getattr__(self, name: str) -> object:
            return getattr(real_hooks, name)

        def lock_directory(
            self, fd: int, path: str, *, wait: float
        ) -> AbstractContextManager[None]:
            if not state["interleaved"]:
                state["interleaved"] = True
                container = Path(path).parent
                container_fd = os.open(container, _fs.O_DIR)
                with monkeypatch.context() as patch:
                    patch.setattr(_fs, "remove_released", defer)
                    publication.reclaim(container_fd, container)
                held_back.append(lambda: _fs.close(container_fd) or True)
            return real_hooks.lock_directory(fd, path, wait=wait)

    monkeypatch.setattr(publication, "_hooks", Hooks)

    def write(path: Path) -> None:
        for finish_reclaim in held_back:
            finish_reclaim()
        path.write_bytes(b"complete")

    out = tmp_path / "outputs"
    out.mkdir()
    result = publish_file(out / "result", write)
    assert state["interleaved"] and held_back
    assert not result.cleanup_pending
    assert (out / "result").read_bytes() == b"complete"
    assert leftovers(out) == []
