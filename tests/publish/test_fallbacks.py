"""The fallbacks, on filesystems that really need them.

The rename fallback runs on a bindfs (FUSE) mount, where ``renameat2(RENAME_NOREPLACE)`` really
fails with EINVAL as on the Linux NFS and Lustre clients. No mount here makes ``flock`` fail:
it works on directories of bindfs (FUSE does directory ``flock`` in the kernel), tmpfs, ext4 and
overlayfs, and this kernel has no NFS client (``/proc/filesystems``). So the lock-file fallback
is shown two ways: through a lock plugin (``publish_worker.NfsLikeLock``) that fails ``flock`` on
a directory with EBADF, as NFS's byte-range emulation does, and calls the real ``flock`` on the
real ``.servatus.lock``; and with strace making the kernel's first ``flock`` fail with ENOLCK.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from publish_helpers import (
    PROCESSES,
    leftovers,
    make_tree,
    race,
    renameat2_noreplace_errno,
    tree_listing,
    worker,
    worker_argv,
)
from publish_worker import nfs_flock

from servatus import Workspace, publish, publish_file
from servatus.errors import Busy, ConfigurationError, DestinationExists, UnsafeFilesystem
from servatus_publish import locking
from servatus_publish.publication import Draft


def test_bindfs_refuses_noreplace(bindfs: Path) -> None:
    assert renameat2_noreplace_errno(bindfs) == errno.EINVAL


def test_rename_fallback_publishes_and_never_replaces(bindfs: Path) -> None:
    src = make_tree(bindfs / "src", 20, per_dir=5)
    out = bindfs / "outputs"
    out.mkdir()
    publish(out / "run", lambda d: d.link_tree(src, "data"), mode=0o755)
    assert tree_listing(out / "run/data") == tree_listing(src)
    publish_file(out / "f", lambda p: p.write_text("file"))
    assert (out / "f").read_text() == "file"
    assert (out / "f").stat().st_nlink == 1

    def build(draft: Draft) -> None:
        (out / "late").mkdir()  # an empty directory appears before the commit
        (draft.path / "x").write_text("x")

    with pytest.raises(DestinationExists):
        publish(out / "late", build)
    assert list((out / "late").iterdir()) == []

    def write(path: Path) -> None:
        (out / "g").write_text("theirs")
        path.write_text("mine")

    with pytest.raises(DestinationExists):
        publish_file(out / "g", write)
    assert (out / "g").read_text() == "theirs"
    assert leftovers(out) == []


@pytest.mark.parametrize("kind", ["tree", "file"])
def test_racing_publishers_on_bindfs(bindfs: Path, tmp_path: Path, kind: str) -> None:
    src = make_tree(bindfs / "src", 50)
    out = bindfs / "outputs"
    out.mkdir()
    what = [str(src)] if kind == "tree" else ["50000"]
    outcomes = race(
        [worker_argv(kind, str(out / "result"), *what, "--go", str(tmp_path / "go"))] * PROCESSES,
        tmp_path / "go",
    )
    assert Counter(outcomes) == {"ok": 1, "DestinationExists": PROCESSES - 1}
    if kind == "tree":
        assert tree_listing(out / "result/data") == tree_listing(src)
    else:
        assert (out / "result").read_bytes() == b"x" * 50000
    assert leftovers(out) == []


def test_nfs_like_lock_plugin_really_fails_on_directories(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            nfs_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert caught.value.errno == errno.EBADF
    finally:
        os.close(fd)


def test_lock_file_fallback_excludes_other_processes(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    outcomes = race(
        [
            worker_argv(
                "workspace",
                str(out / "run"),
                "v1",
                "--hold",
                "2",
                "--nfs-lock",
                "--go",
                str(tmp_path / "go"),
            )
        ]
        * PROCESSES,
        tmp_path / "go",
    )
    assert Counter(outcomes) == {"ok": 1, "Busy": PROCESSES - 1}
    lock = out / ".servatus-workspace.run/.servatus.lock"
    assert lock.is_file()
    assert lock.stat().st_mode & 0o777 == 0o600


def test_lock_file_fallback_on_bindfs_commits_and_leaves_the_lock(bindfs: Path) -> None:
    """NFS-like locking plus a filesystem without RENAME_NOREPLACE: the directory commit takes
    the destination directory's lock file, which stays in place."""
    src = make_tree(bindfs / "src", 10)
    out = bindfs / "outputs"
    out.mkdir()
    result = worker("tree", str(out / "run"), str(src), "--nfs-lock")
    assert result.stdout.split()[-1] == "ok", result.stderr
    assert tree_listing(out / "run/data") == tree_listing(src)
    assert sorted(p.name for p in out.iterdir()) == [".servatus.lock", "run"]
    again = worker("tree", str(out / "run"), str(src), "--nfs-lock")
    assert again.stdout.split()[-1] == "DestinationExists"


def test_the_fallback_waits_and_then_reports_busy(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    holder = subprocess.Popen(
        [
            "python3",
            "-c",
            "import fcntl, os, sys, time\n"
            f"f = os.open({str(tmp_path / '.servatus.lock')!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(Busy), locking.lock_directory(fd, str(tmp_path), 0.3, flock=nfs_flock):
            pass
        assert time.monotonic() - started >= 0.3
    finally:
        holder.kill()
        holder.wait()
        os.close(fd)
    with locking.lock_directory(os.open(tmp_path, os.O_RDONLY), str(tmp_path), 5, flock=nfs_flock):
        pass


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_another_users_lock_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    private = out / ".servatus-workspace.run"
    private.mkdir(mode=0o700)
    (private / ".servatus.lock").write_text("")
    os.chown(private / ".servatus.lock", 65534, 65534)
    result = worker("workspace", str(out / "run"), "v1", "--nfs-lock")
    assert result.stdout.split()[-1] == "UnsafeFilesystem", result.stderr
    assert "uid 65534" in result.stderr
    fd = os.open(private, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with (
            pytest.raises(UnsafeFilesystem),
            locking.lock_directory(fd, str(private), 0, flock=nfs_flock),
        ):
            pass
    finally:
        os.close(fd)
    os.unlink(private / ".servatus.lock")
    os.symlink("/etc/passwd", private / ".servatus.lock")
    fd = os.open(private, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with (
            pytest.raises(UnsafeFilesystem),
            locking.lock_directory(fd, str(private), 0, flock=nfs_flock),
        ):
            pass
    finally:
        os.close(fd)


def test_no_working_lock_is_a_configuration_error(tmp_path: Path) -> None:
    def no_flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "no locks available")

    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with (
            pytest.raises(ConfigurationError, match="no working lock"),
            locking.lock_directory(fd, str(tmp_path), 0, flock=no_flock),
        ):
            pass
    finally:
        os.close(fd)


def test_workspace_under_the_lock_file_fallback_resumes(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    out.mkdir()
    first = worker("workspace", str(out / "run"), "v1", "--nfs-lock")
    assert first.stdout.split()[-1] == "ok", first.stderr
    with Workspace(out / "run", identity=b"v1") as ws:
        assert (ws.path / "checkpoint").read_text().startswith("pid ")
        ws.discard()
    assert leftovers(out) == []


def test_lock_file_fallback_when_the_kernel_refuses_flock(tmp_path: Path) -> None:
    """strace makes the first real ``flock`` (on the workspace directory) fail with ENOLCK, as an
    NFS mount without lockd does; the second (on ``.servatus.lock``) reaches the kernel."""
    if not shutil.which("strace"):
        pytest.skip("strace is needed")
    out = tmp_path / "outputs"
    out.mkdir()
    result = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "inject=flock:error=ENOLCK:when=1",
            *worker_argv("workspace", str(out / "run"), "v1"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.split()[-1] == "ok", result.stderr
    lock = out / ".servatus-workspace.run/.servatus.lock"
    assert lock.is_file()
    assert lock.stat().st_mode & 0o777 == 0o600
