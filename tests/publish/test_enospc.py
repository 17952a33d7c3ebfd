"""Running out of space and inodes on a real 4 MiB tmpfs with 64 inodes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from publish_helpers import leftovers

from servatus import Workspace, publish, publish_file
from servatus.errors import Unavailable
from testkit import fill_inodes


def test_the_writers_own_enospc_propagates_and_nothing_is_left(small_tmpfs: Path) -> None:
    out = small_tmpfs / "outputs"
    out.mkdir()

    def write(path: Path) -> None:
        path.write_bytes(b"x" * (8 * 1024 * 1024))

    with pytest.raises(OSError) as caught:
        publish_file(out / "big", write)
    assert caught.value.errno == errno.ENOSPC
    assert not isinstance(caught.value, Unavailable)
    assert list(out.iterdir()) == []
    publish_file(out / "small", lambda p: p.write_bytes(b"x" * (2 * 1024 * 1024)))
    assert (out / "small").stat().st_size == 2 * 1024 * 1024


def test_no_inode_for_the_stage_is_unavailable(small_tmpfs: Path) -> None:
    out = small_tmpfs / "outputs"
    out.mkdir()
    fillers = fill_inodes(small_tmpfs)
    with pytest.raises(Unavailable, match="No space"):
        publish(out / "run", lambda d: None)
    with pytest.raises(Unavailable), Workspace(out / "ws", identity=b"v1"):
        pass
    assert list(out.iterdir()) == []
    for path in fillers:
        path.unlink()
    publish(out / "run", lambda d: None)
    assert sorted(p.name for p in out.iterdir()) == ["run"]


def test_running_out_inside_link_tree_is_unavailable_and_cleaned(small_tmpfs: Path) -> None:
    src = small_tmpfs / "src"
    src.mkdir()
    for index in range(24):
        (src / f"d{index}").mkdir()
        (src / f"d{index}/f").write_text(str(index))
    out = small_tmpfs / "outputs"
    out.mkdir()
    free = os.statvfs(small_tmpfs).f_ffree
    assert 3 < free < 24  # room for the stage, not for the copied directories
    with pytest.raises(Unavailable, match="No space"):
        publish(out / "run", lambda d: d.link_tree(src, "data"))
    assert list(out.iterdir()) == []
    assert leftovers(out) == []
    assert os.statvfs(small_tmpfs).f_ffree == free
