"""Descriptor-relative filesystem primitives shared by publication and workspaces.

Everything below a directory Servatus holds open is reached through ``dir_fd`` with
``O_NOFOLLOW``, so a component swapped for a symlink fails (``ELOOP``) instead of being followed.
:func:`translate` is the one place an :class:`OSError` becomes one of the spec's errors.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import attrs

from servatus.errors import (
    TRANSIENT_ERRNOS,
    ConfigurationError,
    ServatusError,
    Unavailable,
    UnsafeFilesystem,
)

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC
O_FILE = os.O_RDONLY | os.O_NOFOLLOW | O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
LOCK_NAME = ".servatus.lock"
RESERVED_PREFIX = ".servatus"

_UNAVAILABLE = TRANSIENT_ERRNOS | {
    errno.EAGAIN,
    errno.EINTR,
    errno.ETIMEDOUT,
    errno.ESTALE,
    errno.EBUSY,
    errno.ENOLCK,
}
_UNUSABLE = {
    errno.EACCES: "not writable or not accessible",
    errno.EPERM: "not permitted",
    errno.EROFS: "on a read-only filesystem",
    errno.ENOENT: "missing",
    errno.ENOTDIR: "not a directory",
    errno.ENAMETOOLONG: "too long",
    errno.EXDEV: "on a different filesystem",
}


class CleanupPendingWarning(UserWarning):
    """Private work or a stage could not be proven removed; the next run beside it reclaims it."""


def translate(exc: OSError, what: str) -> ServatusError:
    """Map an OSError raised while doing ``what`` onto the spec's error taxonomy."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.ELOOP:
        return UnsafeFilesystem(f"{what}: a symlink was found where a directory or file belongs")
    if exc.errno in _UNAVAILABLE:
        return Unavailable(f"{what}: {reason}")
    if exc.errno in _UNUSABLE:
        return ConfigurationError(f"{what}: {_UNUSABLE[exc.errno]} ({reason})")
    return Unavailable(f"{what}: {reason} (errno {exc.errno})")


@contextmanager
def oserrors(what: str) -> Iterator[None]:
    """Translate OSErrors of Servatus's own filesystem work; never wrap user callbacks in this."""
    try:
        yield
    except ServatusError:
        raise  # DestinationExists is a FileExistsError too
    except OSError as exc:
        raise translate(exc, what) from exc


def close(fd: int | None) -> None:
    if fd is not None:
        with suppress(OSError):
            os.close(fd)


def warn_pending(what: str, exc: BaseException) -> None:
    warnings.warn(
        f"servatus: cleanup pending: {what}: {exc}; the next run beside it reclaims it",
        CleanupPendingWarning,
        stacklevel=4,
    )


def check_name(name: str, what: str) -> str:
    """Refuse names that could leave the directory they are meant for, or collide with ours."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ConfigurationError(f"{what} {name!r} is not a single path component")
    if name.startswith(RESERVED_PREFIX):
        raise ConfigurationError(f"{what} {name!r}: names starting with .servatus are reserved")
    return name


def absolute(path: str | os.PathLike[str]) -> Path:
    """Anchor a relative path at the current directory without resolving symlinks or ``..``."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise ConfigurationError(f"{path!r} is not a path") from None
    if not isinstance(text, str) or not text or "\0" in text:
        raise ConfigurationError(f"{path!r} is not a usable path")
    p = Path(text)
    if p.is_absolute():
        return p
    try:
        return Path(os.getcwd()) / p
    except OSError as exc:
        raise ConfigurationError(f"{text}: the current directory is unusable ({exc})") from exc


def stat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` an entry of a held directory; None when it is absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_private_dir(dir_fd: int, name: str, path: Path, *, create: bool) -> int:
    """Open (or make) an owner-only directory of ours, refusing anything substituted for it."""
    if create:
        with suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        fd = os.open(name, O_DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFilesystem(f"{path} is not a directory (substituted?)") from exc
        raise
    try:
        check_private(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_private(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise UnsafeFilesystem(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise UnsafeFilesystem(f"{path} has mode {stat.S_IMODE(st.st_mode):o}, not owner-only")
    return st


def is_linked(dir_fd: int, name: str, fd: int) -> bool:
    """Whether ``name`` in the held directory still is the object open at ``fd``."""
    try:
        current = stat_at(dir_fd, name)
    except OSError:
        return False
    return current is not None and same_file(current, os.fstat(fd))


def remove_tree(dir_fd: int, name: str) -> None:
    """Remove ``name`` and everything below it, never following a symlink."""
    st = stat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, O_DIR, dir_fd=dir_fd)
    try:
        if not same_file(os.fstat(fd), st):
            raise UnsafeFilesystem(f"{name} changed while being removed")
        empty_dir(fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def empty_dir(fd: int, keep: str | None = None) -> None:
    """Remove every entry (but ``keep``) of the directory at ``fd``, which may lack owner write."""
    if os.fstat(fd).st_mode & 0o700 != 0o700:
        os.fchmod(fd, 0o700)
    with os.scandir(fd) as entries:
        names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for entry_name, is_dir in names:
        if entry_name == keep:
            continue
        if is_dir:
            remove_tree(fd, entry_name)
        else:
            try:
                os.unlink(entry_name, dir_fd=fd)
            except IsADirectoryError:
                remove_tree(fd, entry_name)


def remove_released(dir_fd: int, name: str) -> bool:
    """Remove a directory emptied but for its lock file, after its lock was released.

    An open file unlinked on NFS or FUSE becomes a hidden ``.nfs*``/``.fuse_hidden*`` file until
    closed, so the lock file goes only once it is closed. True when the directory is gone;
    False when another process took it over meanwhile (it is then that process's to remove).
    """
    for _ in range(5):
        try:
            fd = os.open(name, O_DIR, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        try:
            with suppress(FileNotFoundError):
                os.unlink(LOCK_NAME, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        time.sleep(0.01)
    return False


def fsync_fd(fd: int) -> None:
    """Flush a file or directory; ``F_FULLFSYNC`` would be needed for more on macOS."""
    os.fsync(fd)


def datasync_fd(fd: int) -> None:
    """Flush a file's data and size, not timestamps or link counts (a directory fsync does)."""
    if sys.platform == "darwin":
        os.fsync(fd)
    else:
        os.fdatasync(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_syncfs = _load_syncfs()
HAVE_SYNCFS = _syncfs is not None


def syncfs(fd: int) -> None:
    """Flush the whole filesystem holding ``fd`` (Linux ``syncfs``, which reports errors)."""
    if _syncfs is None:
        raise OSError(errno.ENOSYS, "syncfs is not available")
    if _syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def current_umask() -> int:
    """The process umask, read without changing it where Linux tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


@attrs.define
class HeldDirectory:
    """A directory named by a user's path, held open and re-checkable against that path.

    The path is resolved once, as a shell would (a symlinked scratch is fine). Afterwards every
    operation goes through :attr:`fd`, and :meth:`recheck` proves the path still names this
    directory through the same final component, so a swap is refused, never followed.
    """

    path: Path
    fd: int
    link: tuple[int, int, int]
    target: tuple[int, int]

    @classmethod
    def open(cls, path: Path, what: str) -> HeldDirectory:
        with oserrors(f"{what} {path}"):
            before = os.lstat(path)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
        try:
            st = os.fstat(fd)
            held = cls(path, fd, _link_key(before), (st.st_dev, st.st_ino))
            held.recheck()
        except BaseException:
            os.close(fd)
            raise
        return held

    def recheck(self) -> None:
        try:
            now_link = os.lstat(self.path)
            now = os.stat(self.path)
        except OSError as exc:
            raise UnsafeFilesystem(f"{self.path} no longer names the directory in use") from exc
        if _link_key(now_link) != self.link or (now.st_dev, now.st_ino) != self.target:
            raise UnsafeFilesystem(
                f"{self.path} was replaced (a substituted directory or symlink) during the "
                "operation; nothing was followed"
            )

    def entry(self, name: str) -> os.stat_result | None:
        with oserrors(f"checking {self.path / name}"):
            return stat_at(self.fd, name)

    def close(self) -> None:
        close(self.fd)
        self.fd = -1


def _link_key(st: os.stat_result) -> tuple[int, int, int]:
    return (stat.S_IFMT(st.st_mode), st.st_dev, st.st_ino)
