"""``servatus logs``' remote read (``TAIL_OWN``) through real ``sh`` on the real filesystem: only
a regular file of the user's is read, and a name swapped under it, even mid-read, is refused,
never followed (issue #30: another user who can rename entries in ``log_root``)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from servatus.operations.logs import NOT_OWN, TAIL_OWN
from servatus_slurm.transport import LocalTransport

SECRET = b"the private file behind her link\n"
LOG = b"step 1 of 3\nstep 2 of 3\nstep 3 of 3\n"


def tail(path: Path, size: int = 1024) -> tuple[int, bytes, bytes]:
    result = LocalTransport().run(
        ["/bin/sh", "-c", TAIL_OWN, "tail", "-c", str(size), "--", str(path)]
    )
    return result.returncode, result.stdout, result.stderr


def test_a_log_of_the_users_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "servatus-x-1.out"
    log.write_bytes(LOG)
    assert tail(log, 12) == (0, LOG[-12:], b"")


def test_a_missing_log_says_what_tail_says(tmp_path: Path) -> None:
    gone = tmp_path / "gone.out"
    code, out, err = tail(gone)
    assert (code, out) == (1, b"")
    assert err == f"tail: cannot open '{gone}' for reading: No such file or directory\n".encode()


@pytest.mark.parametrize("kind", ["link", "fifo", "directory"])
def test_anything_but_a_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    name = tmp_path / "servatus-x-1.out"
    if kind == "link":
        name.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(name)
    else:
        name.mkdir()
    assert tail(name) == (NOT_OWN, b"", b"")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs another uid to own the file")
def test_a_file_of_another_users_is_refused_unread(tmp_path: Path) -> None:
    name = tmp_path / "servatus-x-1.out"
    name.write_bytes(SECRET)
    os.chown(name, 65534, 65534)
    assert tail(name) == (NOT_OWN, b"", b"")


_LIBC = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two names in one step (``renameat2(RENAME_EXCHANGE)``), as fast as a renamer can."""
    done = _LIBC.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.mark.parametrize("how", ["exchange", "two renames"])
def test_a_name_swapped_to_a_link_while_it_is_read_never_shows_what_the_link_names(
    tmp_path: Path, how: str
) -> None:
    """A renamer swaps the log's name between the real log and a link to a private file as
    fast as it can while the read runs 600 times: each read shows the log or is refused, and
    never a byte of the private file. (Checking the name and then reading it by name let the
    swap in between; so did looking at the name twice, once for "a link?" and once for "the
    same file?", which a swap back and forth between the two looks passed: review of #33.)"""
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET * 100)
    original = tmp_path / "log-original"
    original.write_bytes(LOG)
    name = tmp_path / "servatus-x-1.out"
    original.rename(name)
    link = tmp_path / "link"
    link.symlink_to(secret)
    stop = threading.Event()

    def swap() -> None:
        aside = tmp_path / "aside"
        while not stop.is_set():
            if how == "exchange":
                exchange(name, link)
            else:
                os.replace(name, aside)
                os.replace(link, name)
                os.replace(name, link)
                os.replace(aside, name)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    outcomes: dict[int, int] = {}
    try:
        for _ in range(600):
            code, out, _ = tail(name)
            assert b"private" not in out
            assert code in (0, NOT_OWN, 1, 2), code  # 1, 2: the name was mid-rename
            if code == 0:
                assert out == LOG
            outcomes[code] = outcomes.get(code, 0) + 1
    finally:
        stop.set()
        swapper.join()
    assert outcomes.get(0) and outcomes.get(NOT_OWN), outcomes  # both sides of the swap were met


def test_a_log_with_another_name_is_refused(tmp_path: Path) -> None:
    """A file of the user's that someone linked over the log's name (and whose content she
    could write: a group-writable file of the user's elsewhere) has two names: refused."""
    elsewhere = tmp_path / "shared-notes"
    elsewhere.write_bytes(b"written by someone else\n")
    name = tmp_path / "servatus-x-1.out"
    os.link(elsewhere, name)
    assert tail(name) == (NOT_OWN, b"", b"")
