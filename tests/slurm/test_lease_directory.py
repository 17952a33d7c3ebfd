"""Making a lease's orders directory (``servatus.lease.make_directory``) through the local
transport on the real filesystem: owner-only, accepted when it already is, refused otherwise."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from servatus.lease import Directory, make_directory, read_mkdir
from servatus_slurm.transport import LocalTransport


def test_the_directory_is_made_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    directory = tmp_path / "servatus-feedfacefeedfacefeedface.orders"
    old = os.umask(0)
    try:
        assert make_directory(LocalTransport(), str(directory)) is Directory.READY
    finally:
        os.umask(old)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert make_directory(LocalTransport(), str(directory)) is Directory.READY  # already one


def test_anything_else_under_the_name_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    plain = tmp_path / "file"
    plain.write_text("")
    for path in (loose, link, plain, tmp_path / "no-such-root" / "orders"):
        assert make_directory(LocalTransport(), str(path)) is Directory.REFUSED, path
    assert stat.S_IMODE(loose.stat().st_mode) == 0o755


def test_an_answer_that_is_not_one_line_of_ours_is_undecided() -> None:
    assert read_mkdir(b"made\n") is read_mkdir(b"exists\n") is Directory.READY
    assert read_mkdir(b"refused\n") is Directory.REFUSED
    for odd in (b"", b"made\nmade\n", b"mad", b"refused directory\n"):
        assert read_mkdir(odd) is Directory.UNDECIDED
