"""A publishing process for the tests: ``publish_worker.py COMMAND ARGS... [options]``.

It prints one line, ``ok`` or the name of the Servatus error it got, so races and crashes are
judged from real separate processes. Options: ``--go FILE`` waits until FILE exists (a barrier
for racing processes), ``--ready`` prints ``ready`` and waits for a line on stdin (so a killer
can aim at the publication itself), ``--nfs-lock`` registers a lock plugin that fails ``flock``
on directories the way the Linux NFS client does, ``--syncfs-after N`` lowers the number of
files synced one by one before a draft is flushed with one ``syncfs``.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import stat
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

from servatus.errors import ServatusError
from servatus.hookspecs import hookimpl
from servatus.plugins import hooks
from servatus_publish import locking


def nfs_flock(fd: int, operation: int) -> None:
    """``flock`` as over NFS: byte-range emulation refuses a directory (opened read-only)."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        raise OSError(errno.EBADF, "flock on a directory over NFS")
    fcntl.flock(fd, operation)


class NfsLikeLock:
    @hookimpl
    def servatus_lock_directory(
        self, dir_fd: int, path: str, wait: float
    ) -> AbstractContextManager[None]:
        return locking.lock_directory(dir_fd, path, wait, flock=nfs_flock)


def tree(args: argparse.Namespace) -> None:
    from servatus import publish

    def build(draft: object) -> None:
        (draft.path / "summary.json").write_text('{"ok": true}\n')  # type: ignore[attr-defined]
        draft.link_tree(args.src, "data")  # type: ignore[attr-defined]

    result = publish(args.dest, build, mode=0o755)
    if result.cleanup_pending:
        print("cleanup_pending")


def file(args: argparse.Namespace) -> None:
    from servatus import publish_file

    def write(path: Path) -> None:
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "wb") as handle:
            block = b"x" * 65536
            for _ in range(args.size // len(block)):
                handle.write(block)
            handle.write(b"x" * (args.size % len(block)))
        os.replace(temporary, path)

    result = publish_file(args.dest, write, mode=0o644)
    if result.cleanup_pending:
        print("cleanup_pending")


def workspace(args: argparse.Namespace) -> None:
    from servatus import Workspace

    with Workspace(args.dest, identity=args.identity.encode()) as ws:
        (ws.path / "checkpoint").write_text(f"pid {os.getpid()}\n")
        print("entered", flush=True)
        time.sleep(args.hold)
        if args.src:
            src = Path(args.src)

            def build(draft: object) -> None:
                draft.link(ws.path / "checkpoint", "checkpoint")  # type: ignore[attr-defined]
                draft.link_tree(src, "data")  # type: ignore[attr-defined]

            ws.publish(build)


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("tree")
    p.add_argument("dest")
    p.add_argument("src")
    p = sub.add_parser("file")
    p.add_argument("dest")
    p.add_argument("size", type=int)
    p = sub.add_parser("workspace")
    p.add_argument("dest")
    p.add_argument("identity")
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--src")
    for p in sub.choices.values():
        p.add_argument("--go")
        p.add_argument("--ready", action="store_true")
        p.add_argument("--nfs-lock", action="store_true")
        p.add_argument("--syncfs-after", type=int)
    args = parser.parse_args()
    if args.syncfs_after is not None:
        from servatus_publish import publication

        publication.FILES_BEFORE_SYNCFS = args.syncfs_after
    if args.nfs_lock:
        hooks().pm.register(NfsLikeLock(), name="nfs-like-lock")
    hooks()  # build the plugin manager before the barrier, as a long-lived worker would
    if args.ready:
        print("ready", flush=True)
        sys.stdin.readline()
    if args.go:
        while not os.path.exists(args.go):
            time.sleep(0.001)
    try:
        {"tree": tree, "file": file, "workspace": workspace}[args.command](args)
    except ServatusError as exc:
        print(type(exc).__name__, flush=True)
        print(exc, file=sys.stderr)
        return 0
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
