"""Reading the files a user names (Tasks files, stdin files, configs, saved plans).

Each is read whole, so a FIFO would block forever and a device such as ``/dev/zero`` would never
end: only a regular file is read, and the check is made on the opened file, not on the name.
"""

from __future__ import annotations

import errno
import os
import stat

from servatus.errors import ConfigurationError


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``. A directory is ``IsADirectoryError`` like any
    read of one; any other kind of file is :class:`ConfigurationError`; other failures are the
    OSError the caller maps."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise ConfigurationError(f"{os.fspath(path)!r} is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
