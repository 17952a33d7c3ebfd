"""The files a user names: read (Tasks files, stdin files, configs, saved plans) and written
(a saved plan, a log tail).

Each is read whole, so a FIFO would block forever and a device such as ``/dev/zero`` would never
end: only a regular file is read, and the check is made on the opened file, not on the name.
What is written is owner-only from its first byte, synced, and never left half-written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shlex
import stat

from servatus.errors import ConfigurationError, UnsafeFilesystem


def checked_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as text, or :class:`ConfigurationError` when no file can have that name (a NUL
    byte, which the operating system's calls refuse with a bare ``ValueError``)."""
    text = os.fspath(path)
    if "\0" in text:
        raise ConfigurationError(f"{what} {text!r} contains a NUL byte; no file can have that name")
    return text


def path_word(path: str | os.PathLike[str]) -> str:
    """``path`` as one word of a command to copy and paste: shell-quoted, and with ``./`` before
    a relative path that starts with ``-``, which any program would take for an option
    (``servatus submit -st``, ``chmod 700 -st``); the same file, whatever the command."""
    text = os.fspath(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``. A directory is ``IsADirectoryError`` like any
    read of one; any other kind of file is :class:`ConfigurationError`; other failures are the
    OSError the caller maps."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO opens at once
    fd = os.open(checked_path(path, "path"), flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise ConfigurationError(f"{os.fspath(path)!r} is not a regular file")
        return read_all(fd)
    finally:
        os.close(fd)


def read_own(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path`` as :func:`read_regular` reads them, but only from a file of the
    user's that no one else can write (a saved plan, ADR 0011): it is opened without following
    a symbolic link at its name (``UnsafeFilesystem`` through the caller's mapping of ``ELOOP``)
    and judged on that descriptor, the one then read, so no name swapped in between is read.
    Another user's file, or one others can write, is :class:`UnsafeFilesystem`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW
    text = checked_path(path, "path")
    fd = os.open(text, flags)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), text)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigurationError(f"{text!r} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UnsafeFilesystem(
                f"{text}: is owned by uid {st.st_uid}, not by you, so {what} is not used from "
                "it; save your own with plan --output"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise UnsafeFilesystem(
                f"{text}: other users can write it (mode {mode:04o}), so {what} is not used "
                f"from it; make it writable only by you: chmod go-w {path_word(text)}"
            )
        return read_all(fd)
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """Everything left to read from ``fd``."""
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 22):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``, however many writes the kernel takes for it."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def create_private(path: str, data: bytes) -> None:
    """Create ``path`` (never over an existing name, never through a link) owner-only holding
    ``data``, synced; on any failure nothing is left. Failures are the OSError the caller maps
    (``FileExistsError`` when the name is taken)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(checked_path(path, "path"), flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        write_all(fd, data, 0)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def replace_private(path: str, data: bytes) -> None:
    """Replace the regular file ``path`` (or create it) with ``data`` by a rename, so a reader
    sees the old bytes or the new; a link, FIFO, device or directory under that name is
    :class:`ConfigurationError`, never replaced or written through."""
    try:
        existing = os.lstat(checked_path(path, "path"))
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(existing.st_mode):
            raise ConfigurationError(f"{path} is not a regular file; only one is replaced")
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".servatus-{secrets.token_hex(8)}")
    create_private(temporary, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
