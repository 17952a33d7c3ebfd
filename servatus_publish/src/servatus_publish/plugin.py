"""The built-in publication hooks, registered through the ``servatus`` entry-point group.

A site plugin implementing the same hooks is called first (pluggy runs the last-registered
implementation first) and wins, since both hooks stop at the first non-None result.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from servatus.hookspecs import hookimpl
from servatus_publish import locking, rename


@hookimpl
def servatus_lock_directory(
    dir_fd: int, path: str, wait: float
) -> AbstractContextManager[None] | None:
    return locking.lock_directory(dir_fd, path, wait)


@hookimpl
def servatus_rename_noreplace(
    src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, is_dir: bool, path: str
) -> bool | None:
    return rename.rename_noreplace(
        src_dir_fd, src_name, dst_dir_fd, dst_name, is_dir=is_dir, path=path
    )
