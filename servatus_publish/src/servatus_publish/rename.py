"""The built-in no-replace commit: ``renameat2(RENAME_NOREPLACE)``, ``renameatx_np(RENAME_EXCL)``.

Where the filesystem refuses the flag (``EINVAL``, ``ENOSYS``, ``EOPNOTSUPP``: the Linux NFS and
Lustre clients always do), a fallback that still never overwrites takes over; see
``docs/development/publication.md`` and ``SECURITY.md`` for what it does and does not promise.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable
from contextlib import suppress

from servatus.errors import ConfigurationError, DestinationExists
from servatus_publish._fs import oserrors, stat_at

RENAME_NOREPLACE = 1
RENAME_EXCL = 0x4
LOCK_WAIT = 60.0
REFUSED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
_EXISTS = frozenset({errno.EEXIST, errno.ENOTEMPTY})
_SYSCALL_RENAMEAT2 = {
    "x86_64": 316,
    "amd64": 316,
    "aarch64": 276,
    "arm64": 276,
    "riscv64": 276,
    "ppc64le": 357,
    "ppc64": 357,
    "s390x": 347,
    "i686": 353,
    "i386": 353,
    "armv7l": 382,
}

Native = Callable[[int, bytes, int, bytes], int]


def _load_native() -> Native | None:
    """The platform's no-replace rename as ``f(src_fd, src, dst_fd, dst) -> errno or 0``."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux"):
        function = getattr(libc, "renameat2", None)
        if function is not None:
            function.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
            function.restype = ctypes.c_int

            def renameat2(src_fd: int, src: bytes, dst_fd: int, dst: bytes) -> int:
                if function(src_fd, src, dst_fd, dst, RENAME_NOREPLACE) == 0:
                    return 0
                return ctypes.get_errno()

            return renameat2
        number = _SYSCALL_RENAMEAT2.get(platform.machine())
        if number is None:
            return None
        syscall = libc.syscall
        syscall.restype = ctypes.c_long

        def raw_renameat2(src_fd: int, src: bytes, dst_fd: int, dst: bytes) -> int:
            result = syscall(
                ctypes.c_long(number),
                ctypes.c_int(src_fd),
                ctypes.c_char_p(src),
                ctypes.c_int(dst_fd),
                ctypes.c_char_p(dst),
                ctypes.c_uint(RENAME_NOREPLACE),
            )
            return 0 if result == 0 else ctypes.get_errno()

        return raw_renameat2
    if sys.platform == "darwin":
        function = getattr(libc, "renameatx_np", None)
        if function is None:
            return None
        function.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
        function.restype = ctypes.c_int

        def renameatx_np(src_fd: int, src: bytes, dst_fd: int, dst: bytes) -> int:
            if function(src_fd, src, dst_fd, dst, RENAME_EXCL) == 0:
                return 0
            return ctypes.get_errno()

        return renameatx_np
    return None


_native: Native | None = _load_native()


def rename_noreplace(
    src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, *, is_dir: bool, path: str
) -> bool:
    """Commit ``src_name`` as ``dst_name``; raise DestinationExists rather than overwrite."""
    if _native is None and not sys.platform.startswith("linux"):
        raise ConfigurationError(
            f"cannot publish {path}: {sys.platform} has no atomic no-replace rename"
        )
    with oserrors(f"publishing {path}"):
        code = errno.ENOSYS
        if _native is not None:
            code = _native(src_dir_fd, os.fsencode(src_name), dst_dir_fd, os.fsencode(dst_name))
            if code == 0:
                return True
            if code in _EXISTS:
                raise DestinationExists(f"{path} already exists")
            if code not in REFUSED:
                raise OSError(code, os.strerror(code), path)
        if is_dir:
            _rename_dir_locked(src_dir_fd, src_name, dst_dir_fd, dst_name, path)
        else:
            link_then_unlink(src_dir_fd, src_name, dst_dir_fd, dst_name, path)
        return True


def link_then_unlink(
    src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, path: str
) -> None:
    """Publish a file by ``link()``, which never replaces, then drop the stage's name for it.

    NFS may answer a retransmitted LINK with an error although the first one succeeded, so an
    error is success when the destination is our inode and the link count grew by exactly one.
    """
    before = stat_at(src_dir_fd, src_name)
    if before is None:
        raise ConfigurationError(f"the staged file for {path} vanished before commit")
    try:
        os.link(
            src_name, dst_name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False
        )
    except OSError as exc:
        after = stat_at(src_dir_fd, src_name)
        there = stat_at(dst_dir_fd, dst_name)
        linked = (
            after is not None
            and there is not None
            and (there.st_dev, there.st_ino) == (before.st_dev, before.st_ino)
            and after.st_nlink == before.st_nlink + 1
        )
        if not linked:
            if exc.errno == errno.EEXIST:
                raise DestinationExists(f"{path} already exists") from exc
            raise
    with suppress(OSError):  # committed; the stage around it is removed or reclaimed later
        os.unlink(src_name, dir_fd=src_dir_fd)


def _rename_dir_locked(
    src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, path: str
) -> None:
    """Rename a directory under the destination directory's lock, after re-checking absence.

    A plain ``rename`` would replace an empty directory, so absence is checked under the lock
    every Servatus publisher takes; only a process ignoring that lock can slip in between.
    """
    from servatus.plugins import hooks  # noqa: PLC0415  (the manager is built once, lazily)

    parent = os.path.dirname(path) or "."
    with hooks().lock_directory(dst_dir_fd, parent, wait=LOCK_WAIT):
        if stat_at(dst_dir_fd, dst_name) is not None:
            raise DestinationExists(f"{path} already exists")
        try:
            os.rename(src_name, dst_name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        except OSError as exc:
            if exc.errno in _EXISTS:
                raise DestinationExists(f"{path} already exists") from exc
            raise
