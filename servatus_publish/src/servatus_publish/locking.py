"""The built-in directory lock: ``flock`` on the directory, else a ``.servatus.lock`` file in it.

NFS clients emulate ``flock`` with byte-range locks, which need a file open for writing, so
``flock`` on a directory there fails (``EBADF``, ``ENOLCK``, ``EOPNOTSUPP``, ``EINVAL``). The
fallback locks an owner-only regular file inside the directory instead and leaves it in place:
removing a lock file that others may have open would let two processes believe they hold it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from servatus.errors import Busy, ConfigurationError, UnsafeFilesystem
from servatus_publish._fs import LOCK_NAME, O_CLOEXEC, oserrors

UNSUPPORTED = frozenset(
    {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF, errno.EINVAL, errno.ENOSYS}
)
Flock = Callable[[int, int], None]


class _Unsupported(Exception):
    def __init__(self, exc: OSError) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _acquire(flock: Flock, fd: int, path: str, wait: float) -> None:
    deadline = time.monotonic() + max(wait, 0.0)
    pause = 0.001
    while True:
        try:
            flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno in UNSUPPORTED:
                raise _Unsupported(exc) from exc
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, errno.EINTR):
                raise
        if time.monotonic() >= deadline:
            raise Busy(f"{path} is locked by another process")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _open_lock_file(dir_fd: int, path: str) -> int:
    """Open our own ``.servatus.lock``; another user's file, or anything else there, is refused."""
    try:
        fd = os.open(
            LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise UnsafeFilesystem(f"{path}/{LOCK_NAME} is not a regular file") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFilesystem(f"{path}/{LOCK_NAME} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UnsafeFilesystem(
                f"{path}/{LOCK_NAME} belongs to uid {st.st_uid}; refusing another user's lock file"
            )
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def lock_directory(
    dir_fd: int, path: str, wait: float = 0.0, *, flock: Flock = fcntl.flock
) -> Iterator[None]:
    """Hold an exclusive lock on the directory at ``dir_fd``; ``flock`` is replaceable for tests.

    Raises :class:`Busy` after ``wait`` seconds, :class:`UnsafeFilesystem` for a foreign lock
    file, and :class:`ConfigurationError` where neither kind of lock works.
    """
    with oserrors(f"locking {path}"):
        fd = _lock(dir_fd, path, wait, flock)
    try:
        yield
    finally:
        with suppress(OSError):  # closing the descriptor releases it anyway
            flock(dir_fd if fd is None else fd, fcntl.LOCK_UN)
        if fd is not None:
            os.close(fd)


def _lock(dir_fd: int, path: str, wait: float, flock: Flock) -> int | None:
    """Lock the directory itself (None), or the lock file in it (its descriptor)."""
    try:
        _acquire(flock, dir_fd, path, wait)
    except _Unsupported:
        pass
    else:
        return None
    fd = _open_lock_file(dir_fd, path)
    try:
        _acquire(flock, fd, path, wait)
    except _Unsupported as unsupported:
        os.close(fd)
        raise ConfigurationError(
            f"{path}: no working lock: flock fails on the directory and on "
            f"{LOCK_NAME} ({unsupported.exc.strerror})"
        ) from unsupported.exc
    except BaseException:
        os.close(fd)
        raise
    return fd
