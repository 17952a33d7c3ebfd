"""Separate processes racing for one destination or one Workspace, on a real filesystem."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from publish_helpers import PROCESSES, leftovers, make_tree, race, tree_listing, worker_argv


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
