"""``Workspace``: private, resumable work bound to identity bytes, published once.

The private work of ``<parent>/<name>`` lives beside it, on the same filesystem, in the
owner-only directory ``<parent>/.servatus-workspace.<name>/``::

    identity    "servatus.workspace/1 sha256:<hex>" of the identity bytes
    work/       Workspace.path, the caller's resumable files
    .servatus.lock   only where the directory cannot be flocked (NFS)

That directory is the lock: the process that holds it works, every other one gets ``Busy``.

The directory sits in the destination's parent, which other users may be able to write to, so its
name is only a hint: another user can rename it away and plant her own. The workspace therefore
binds to the directory it opened and checked (device, inode, owner, owner-only mode) and re-checks
that the name still links to it whenever it hands out :attr:`Workspace.path`, before and after
building a publication, and before removing anything. While entered on Linux, ``path`` goes
through the held descriptor (``/proc/<pid>/fd/<n>/work``), so a swap after the check does not
redirect the caller's files either; ``work`` itself sits inside the owner-only directory, where no
other user can rename anything.
Removal renames ``work`` to ``work.removing``, deletes it, and only then the identity record, so
an interrupted removal never leaves half-deleted work that looks resumable, and the next entry
with the same identity finishes it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from types import TracebackType

from servatus.errors import (
    Busy,
    ConfigurationError,
    DestinationExists,
    ServatusError,
    UnsafeFilesystem,
    WorkspaceConflict,
)
from servatus_publish import _fs
from servatus_publish._fs import LOCK_NAME, O_CLOEXEC, HeldDirectory, oserrors
from servatus_publish.publication import (
    Draft,
    Publication,
    _hooks,
    check_mode,
    publish_at,
    reclaim_beside,
    remove_empty_container,
    retire_beside,
)

PREFIX = ".servatus-workspace."
IDENTITY = "identity"
IDENTITY_TMP = "identity.tmp"
WORK = "work"
REMOVING = "work.removing"
RECORD_MAX = 4096
CHILD_WAIT = 30.0
_ATTEMPTS = 8


def _record(identity: bytes) -> bytes:
    return b"servatus.workspace/1 sha256:" + hashlib.sha256(identity).hexdigest().encode() + b"\n"


class Workspace:
    """Private work for ``destination`` bound to ``identity``; enter it with ``with``.

    Entering raises Busy while another process holds it, WorkspaceConflict for work bound to
    another identity (or files without one), and DestinationExists, after removing this
    identity's leftovers, once the destination exists.

    :param destination: Where the result will be published; the private work lives beside it,
        in an owner-only directory of its parent.
    :param identity: Opaque bytes naming the work (a Task's stdin, say): the same bytes reopen
        the same work on a later attempt, other bytes are refused.
    """

    def __init__(
        self,
        destination: str | os.PathLike[str],
        *,
        identity: bytes,
        _parent: Workspace | None = None,
    ) -> None:
        if not isinstance(identity, bytes | bytearray | memoryview):
            raise ConfigurationError(f"identity must be bytes, not {type(identity).__name__}")
        self.destination = _fs.absolute(destination)
        """Where the result is published, absolute."""
        self.name = _fs.check_name(self.destination.name, "workspace destination")
        self._record = _record(bytes(identity))
        self._parent = _parent
        self._dir_name = PREFIX + self.name
        self._held: HeldDirectory | None = None
        self._fd = -1
        self._checked: tuple[int, int, int] | None = None
        self._lock: AbstractContextManager[None] | None = None
        self._finished = False
        self.cleanup_pending = False
        """True after :meth:`publish` or :meth:`discard` when the private work could not be
        proven removed (a warning names it)."""

    @property
    def private(self) -> Path:
        """The owner-only directory holding this workspace's identity record and work."""
        return self.destination.parent / self._dir_name

    @property
    def path(self) -> Path:
        """The resumable work directory; it exists while the workspace is entered.

        While entered, each access first proves the private directory is still the one entered
        (UnsafeFilesystem otherwise) and, on Linux, returns a path through the held descriptor,
        ``/proc/<pid>/fd/<n>/work``, which keeps naming that directory even if its name is
        renamed away; it is valid in this process and its children until the workspace is left.
        """
        if self._held is None or self._fd < 0:
            return self.private / WORK
        self._verify("use")
        return _through_descriptor(self._fd, self.private) / WORK

    def child(self, name: str, *, identity: bytes) -> Workspace:
        """A workspace for one concurrent worker's result, published into this one's work.

        :param name: The child's result's name in this workspace's work directory.
        :param identity: The child's own identity bytes, as for a workspace.
        """
        _fs.check_name(name, "child name")
        return Workspace(self.private / WORK / name, identity=identity, _parent=self)

    def __repr__(self) -> str:
        return f"Workspace({str(self.destination)!r})"

    # -- entering and leaving ----------------------------------------------------------------

    def __enter__(self) -> Workspace:
        if self._lock is not None:
            raise RuntimeError(f"{self!r} is already entered")
        expected = self._parent._prepare_for_child() if self._parent is not None else None
        held = HeldDirectory.open(self.destination.parent, "workspace directory")
        try:
            if expected is not None and held.target != expected:
                raise UnsafeFilesystem(
                    f"{held.path} is not the parent workspace's work directory (substituted?)"
                )
            self._acquire(held, wait=0.0, create_if=lambda: _absent(held, self.name))
            try:
                self._enter_locked(held)
            except BaseException:
                self._release()
                raise
        except BaseException:
            held.close()
            raise
        self._held = held
        self._finished = False
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()
        if self._held is not None:
            self._held.close()
            self._held = None

    def _acquire(self, held: HeldDirectory, *, wait: float, create_if: Callable[[], bool]) -> None:
        """Open (or create) the private directory and lock it, proving it is still linked."""
        shown = held.path / self._dir_name
        for _ in range(_ATTEMPTS):
            with oserrors(f"opening {shown}"):
                if _fs.stat_at(held.fd, self._dir_name) is None:
                    if not create_if():
                        reclaim_beside(held)
                        raise DestinationExists(f"{held.path / self.name} already exists")
                    with suppress(FileExistsError):
                        os.mkdir(self._dir_name, 0o700, dir_fd=held.fd)
                try:
                    fd = _fs.open_private_dir(held.fd, self._dir_name, shown, create=False)
                except FileNotFoundError:
                    continue
            lock = _hooks().lock_directory(fd, str(shown), wait=wait)
            try:
                lock.__enter__()
            except ServatusError as exc:
                vanished = not _fs.is_linked(held.fd, self._dir_name, fd)
                os.close(fd)
                if vanished and not isinstance(exc, Busy):
                    continue
                if isinstance(exc, Busy):
                    raise Busy(f"workspace {shown} is held by another process") from exc
                raise
            if _fs.is_linked(held.fd, self._dir_name, fd):
                st = os.fstat(fd)
                self._fd, self._lock = fd, lock
                self._checked = (st.st_dev, st.st_ino, st.st_uid)
                return
            lock.__exit__(None, None, None)
            os.close(fd)
        raise Busy(f"workspace {shown} kept changing while being opened")

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None
        _fs.close(self._fd if self._fd >= 0 else None)
        self._fd = -1
        self._checked = None

    def _verify(self, what: str, held: HeldDirectory | None = None) -> None:
        """Prove the private directory's name still links to the directory entered, and that
        it is still this user's owner-only directory; UnsafeFilesystem (naming it) if not."""
        held = held or self._held
        shown = self.private
        if held is None or self._fd < 0 or self._checked is None:
            raise RuntimeError(f"{self!r} is not entered")
        with oserrors(f"checking {shown}"):
            st = os.fstat(self._fd)
            now = _fs.stat_at(held.fd, self._dir_name)
        if (st.st_dev, st.st_ino, st.st_uid) != self._checked or st.st_uid != os.geteuid():
            raise UnsafeFilesystem(
                f"{shown} is no longer this user's directory; refusing to {what} it"
            )
        if st.st_mode & 0o077:
            raise UnsafeFilesystem(
                f"{shown} has mode {stat.S_IMODE(st.st_mode):o}, not owner-only; "
                f"refusing to {what} it"
            )
        if now is None or not _fs.same_file(now, st):
            raise UnsafeFilesystem(
                f"{shown} was renamed away or replaced by another directory; refusing to {what} it"
            )

    def _enter_locked(self, held: HeldDirectory) -> None:
        bound = self._check_identity()
        shown = held.path / self._dir_name
        with oserrors(f"finishing an interrupted removal in {shown}"):
            _fs.remove_tree(self._fd, REMOVING)
        if held.entry(self.name) is not None:
            self.cleanup_pending = self._remove_private(held)
            reclaim_beside(held)
            raise DestinationExists(
                f"{held.path / self.name} already exists; this identity's private work was removed"
            )
        with oserrors(f"preparing {shown}"):
            if not bound:
                self._write_identity()
            self._make_work(shown)
            _fs.fsync_fd(self._fd)
            _fs.fsync_fd(held.fd)

    def _check_identity(self) -> bool:
        """True when the record is ours; WorkspaceConflict when it is not, or when it is missing
        but the directory holds anything else."""
        shown = self.private
        with oserrors(f"reading {shown / IDENTITY}"):
            try:
                fd = os.open(IDENTITY, os.O_RDONLY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=self._fd)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                        raise UnsafeFilesystem(f"{shown / IDENTITY} is not this user's file")
                    content = os.read(fd, RECORD_MAX)
                finally:
                    os.close(fd)
                if content != self._record:
                    raise WorkspaceConflict(f"{shown} is bound to another identity")
                return True
            with os.scandir(self._fd) as entries:
                others = sorted(e.name for e in entries if e.name not in (LOCK_NAME, IDENTITY_TMP))
        if others:
            raise WorkspaceConflict(
                f"{shown} holds files ({', '.join(others[:5])}) but no identity record"
            )
        return False

    def _write_identity(self) -> None:
        fd = os.open(
            IDENTITY_TMP,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | O_CLOEXEC,
            0o600,
            dir_fd=self._fd,
        )
        try:
            os.write(fd, self._record)
            _fs.fsync_fd(fd)
        finally:
            os.close(fd)
        os.rename(IDENTITY_TMP, IDENTITY, src_dir_fd=self._fd, dst_dir_fd=self._fd)

    def _make_work(self, shown: Path) -> None:
        try:
            os.mkdir(WORK, 0o700, dir_fd=self._fd)
        except FileExistsError:
            st = os.stat(WORK, dir_fd=self._fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise UnsafeFilesystem(f"{shown / WORK} is not this user's directory") from None

    def _remove_private(self, held: HeldDirectory) -> bool:
        """Delete work, then the identity record, then the directory; True if unproven.

        Nothing is removed unless the private directory's name still links to the directory
        entered; the rename of that name into the stage container is checked afterwards, and
        anything else it caught is put back and refused.
        """
        try:
            self._verify("remove", held)
            if _fs.stat_at(self._fd, WORK) is not None:
                os.rename(WORK, REMOVING, src_dir_fd=self._fd, dst_dir_fd=self._fd)
                _fs.fsync_fd(self._fd)
            _fs.remove_tree(self._fd, REMOVING)
            for name in (IDENTITY, IDENTITY_TMP):
                with suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=self._fd)
            _fs.fsync_fd(self._fd)
            container_fd, retired = retire_beside(held, self._dir_name)
            try:
                if not _fs.is_linked(container_fd, retired, self._fd):
                    _put_back(container_fd, retired, held, self._dir_name)
                    raise UnsafeFilesystem(
                        f"{self.private} was replaced by another directory while being removed"
                    )
                self._release()
                if _fs.remove_released(container_fd, retired):
                    _fs.fsync_fd(held.fd)
            finally:
                _fs.close(container_fd)
                remove_empty_container(held)
        except (OSError, ServatusError) as exc:
            _fs.warn_pending(str(self.private), exc)
            return True
        return False

    # -- children ----------------------------------------------------------------------------

    def _prepare_for_child(self) -> tuple[int, int]:
        """Create this (parent) workspace's record and work for a child, holding it briefly;
        return the work directory's (device, inode), which the child must find at its path."""
        if self._lock is not None:
            self._verify("use")  # entered here: the record and the work exist, the lock is ours
            return self._work_key(self.private)
        held = HeldDirectory.open(self.destination.parent, "workspace directory")
        try:
            if held.entry(self.name) is not None:
                raise DestinationExists(f"{self.destination} (the parent) already exists")
            self._acquire(held, wait=CHILD_WAIT, create_if=lambda: True)
            try:
                bound = self._check_identity()
                with oserrors(f"preparing {self.private}"):
                    _fs.remove_tree(self._fd, REMOVING)
                    if not bound:
                        self._write_identity()
                    self._make_work(self.private)
                    _fs.fsync_fd(self._fd)
                    _fs.fsync_fd(held.fd)
                return self._work_key(self.private)
            finally:
                self._release()
        finally:
            held.close()

    def _work_key(self, shown: Path) -> tuple[int, int]:
        with oserrors(f"opening {shown / WORK}"):
            fd = _fs.open_private_dir(self._fd, WORK, shown / WORK, create=False)
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        return (st.st_dev, st.st_ino)

    # -- finishing ---------------------------------------------------------------------------

    def _require_entered(self, what: str) -> HeldDirectory:
        if self._held is None or self._lock is None:
            raise RuntimeError(f"{what} needs the workspace entered (use `with`)")
        if self._finished:
            raise RuntimeError(f"{self!r} was already published or discarded")
        return self._held

    def publish(self, build: Callable[[Draft], object], *, mode: int | None = None) -> Publication:
        """Publish the destination atomically, then remove the private work.

        :param build: Called once with a :class:`~servatus_publish.publication.Draft` to fill,
            usually by linking files of :attr:`path` into it.
        :param mode: The mode of every directory of the result, as for
            :func:`~servatus.publish`.
        """
        held = self._require_entered("publish")
        if not callable(build):
            raise ConfigurationError(f"build must be callable, not {build!r}")
        checked = check_mode(mode, directory=True)
        self._verify("publish")

        def build_then_verify(draft: Draft) -> None:
            build(draft)
            self._verify("publish")  # the draft is built; commit only from the directory entered

        published = publish_at(held, self.name, build_then_verify, checked)
        self._finished = True
        removal_pending = self._remove_private(held)
        self.cleanup_pending = published.cleanup_pending or removal_pending
        return Publication(published.path, self.cleanup_pending)

    def discard(self) -> None:
        """Remove the private work without publishing."""
        held = self._require_entered("discard")
        self._verify("remove")
        self._finished = True
        self.cleanup_pending = self._remove_private(held)


def _absent(held: HeldDirectory, name: str) -> bool:
    return held.entry(name) is None


_PROC_FD = Path("/proc/self/fd")


def _through_descriptor(fd: int, named: Path) -> Path:
    """A path naming the directory open at ``fd`` itself, not whatever its name links to now.

    ``/proc/<pid>/fd/<n>`` (Linux) resolves to the open directory even after a rename; the pid
    rather than ``self`` keeps it valid in child processes, which do not inherit the descriptor.
    Elsewhere the name is all there is, re-checked at each access.
    """
    if _PROC_FD.is_dir():
        return Path(f"/proc/{os.getpid()}/fd/{fd}")
    return named


def _put_back(container_fd: int, retired: str, held: HeldDirectory, name: str) -> None:
    """Return a directory that is not ours, caught by a rename by name, to where it was."""
    with suppress(OSError, ServatusError):
        _hooks().rename_noreplace(
            container_fd, retired, held.fd, name, is_dir=True, path=str(held.path / name)
        )


__all__ = ["Workspace"]
