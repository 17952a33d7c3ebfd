"""``publish`` and ``publish_file``: build privately, then commit with a no-replace rename.

A stage is a directory ``<parent>/.servatus-stage-<uid>/<token>/`` on the destination's own
filesystem: the owner-only container keeps every stage private until the commit, and each
``<token>`` directory is locked by the process building in it, so the next publication beside
it can tell a dead process's leftovers (lockable) from live work (busy) and remove them.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import attrs

from servatus.errors import (
    Busy,
    ConfigurationError,
    DestinationExists,
    ServatusError,
    UnsafeFilesystem,
)
from servatus_publish import _fs
from servatus_publish._fs import O_DIR, O_FILE, HeldDirectory, oserrors

if TYPE_CHECKING:
    from servatus.plugins import Hooks

STAGE_PREFIX = ".servatus-stage-"
RETIRED_PREFIX = "reclaimed-"
"""A directory is renamed into the container under this prefix, still locked, before it is
removed; stage tokens are bare hex, so no creator ever adopts one."""
_ATTEMPTS = 8


def _hooks() -> Hooks:
    from servatus.plugins import hooks  # noqa: PLC0415  (built once per process, on first use)

    return hooks()


@attrs.frozen
class Publication:
    """What a publication committed, and whether removing its stage or work is still pending."""

    path: Path
    """The published destination, absolute."""
    cleanup_pending: bool = False
    """True when the private stage (or a workspace's work) could not be proven removed; the
    publication stands, and a warning names what may be left."""


def check_mode(mode: object, *, directory: bool) -> int:
    """The mode to apply, or ConfigurationError: the owner must always be able to read it."""
    if mode is None:
        return (0o777 if directory else 0o666) & ~_fs.current_umask()
    if type(mode) is not int:
        raise ConfigurationError(f"mode must be an int such as 0o755, not {mode!r}")
    allowed = 0o3777 if directory else 0o777
    needed = 0o500 if directory else 0o400
    if mode & ~allowed or mode < 0:
        raise ConfigurationError(f"bad mode {mode:#o}: outside {allowed:#o}")
    if mode & needed != needed:
        what = "read and search its directories" if directory else "read the file"
        raise ConfigurationError(f"bad mode {mode:#o}: the owner could not {what}")
    return mode


def _draft_parts(name: object) -> tuple[str, ...]:
    if not isinstance(name, str | os.PathLike):
        raise ConfigurationError(f"unsafe draft path {name!r}: not a path")
    text = os.fspath(name)
    if not isinstance(text, str) or "\0" in text:
        raise ConfigurationError(f"unsafe draft path {name!r}")
    path = PurePosixPath(text)
    if path.is_absolute() or not path.parts or any(p in ("..", ".") for p in path.parts):
        raise ConfigurationError(f"unsafe draft path {text!r}: must be relative, without '..'")
    return path.parts


class Stage:
    """One private stage: a locked ``<token>`` directory in the owner-only stage container."""

    def __init__(self, parent: HeldDirectory, name: str) -> None:
        self.parent = parent
        self.name = name
        self.container_name = f"{STAGE_PREFIX}{os.geteuid()}"
        self.container_path = parent.path / self.container_name
        self.container_fd = -1
        self.token = ""
        self.fd = -1
        self.lock: AbstractContextManager[None] | None = None
        self.reclaim_pending = False

    @property
    def path(self) -> Path:
        return self.container_path / self.token

    def create(self) -> None:
        """Reclaim dead stages beside us, then make and lock our own."""
        with oserrors(f"creating a stage in {self.parent.path}"):
            for _ in range(_ATTEMPTS):
                if self.container_fd < 0:
                    try:
                        self.container_fd = _fs.open_private_dir(
                            self.parent.fd, self.container_name, self.container_path, create=True
                        )
                    except FileNotFoundError:  # removed, empty, by another run in between
                        continue
                    if os.fstat(self.container_fd).st_dev != os.fstat(self.parent.fd).st_dev:
                        raise UnsafeFilesystem(f"{self.container_path} is a mount point")
                    self.reclaim_pending = reclaim(self.container_fd, self.container_path)
                token = secrets.token_hex(8)
                try:
                    os.mkdir(token, 0o700, dir_fd=self.container_fd)
                except FileNotFoundError:  # another run removed the empty container
                    self._drop_container()
                    continue
                try:
                    fd = os.open(token, O_DIR, dir_fd=self.container_fd)
                except FileNotFoundError:  # reclaimed before we could lock it
                    continue
                lock = _hooks().lock_directory(fd, str(self.container_path / token), wait=0.0)
                try:
                    lock.__enter__()
                except ServatusError as exc:  # a reclaimer got it first, or removed it
                    vanished = not _fs.is_linked(self.container_fd, token, fd)
                    os.close(fd)
                    if isinstance(exc, Busy) or vanished:
                        continue
                    raise
                if _fs.is_linked(self.container_fd, token, fd):
                    self.token, self.fd, self.lock = token, fd, lock
                    return
                lock.__exit__(None, None, None)
                os.close(fd)
            raise Busy(f"could not create a stage in {self.container_path}")

    def _drop_container(self) -> None:
        _fs.close(self.container_fd)
        self.container_fd = -1

    def remove(self) -> bool:
        """Remove the stage and release it; True when something could not be proven removed."""
        pending = self.reclaim_pending
        try:
            try:
                if self.fd >= 0:
                    _fs.empty_dir(self.fd, keep=_fs.LOCK_NAME)
            finally:
                self._release()
            if self.token and not _fs.remove_released(self.container_fd, self.token):
                raise OSError(errno.ENOTEMPTY, "another process refilled it", str(self.path))
            if self.container_fd >= 0:
                remove_empty_container(self.parent)
        except (OSError, ServatusError) as exc:
            pending = True
            _fs.warn_pending(str(self.path), exc)
        finally:
            self._drop_container()
        return pending

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.__exit__(None, None, None)
            self.lock = None
        _fs.close(self.fd if self.fd >= 0 else None)
        self.fd = -1


def reclaim(container_fd: int, container_path: Path) -> bool:
    """Remove stages whose builder died (their lock is free); True if one could not be removed.

    A stage just made is lockable too until its creator locks it, so each one taken is first
    renamed, under its lock, to a name no creator uses: a creator that locks it after this
    reclaimer lets go finds its token gone and tries another, instead of adopting a directory
    this reclaimer is about to remove.
    """
    pending = False
    with os.scandir(container_fd) as entries:
        names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for name, is_dir in names:
        try:
            st = _fs.stat_at(container_fd, name)
            if st is not None and st.st_uid != os.geteuid():
                # Only a rename by name of ours brings another user's entry in (a Workspace
                # removal that caught a planted directory and could not put it back): not a
                # stage of ours, so it is left as it is.
                continue
            if not is_dir:
                os.unlink(name, dir_fd=container_fd)
                continue
            fd = os.open(name, O_DIR, dir_fd=container_fd)
            try:
                if os.fstat(fd).st_uid != os.geteuid():
                    continue  # swapped in since the check above: hers, left as it is
                try:
                    lock = _hooks().lock_directory(fd, str(container_path / name), wait=0.0)
                    lock.__enter__()
                except Busy:
                    continue  # a live publication
                retired = ""
                try:
                    if _fs.is_linked(container_fd, name, fd):
                        retired = _retire(container_fd, name)
                        _fs.empty_dir(fd, keep=_fs.LOCK_NAME)
                finally:
                    lock.__exit__(None, None, None)
            finally:
                os.close(fd)
            if retired:
                _fs.remove_released(container_fd, retired)
        except FileNotFoundError:
            continue  # another reclaimer was faster
        except (OSError, ServatusError) as exc:
            pending = True
            _fs.warn_pending(str(container_path / name), exc)
    return pending


def _retire(container_fd: int, name: str, *, src_dir_fd: int | None = None) -> str:
    """Rename a directory being removed into the container, out of every creator's reach."""
    retired = f"{RETIRED_PREFIX}{secrets.token_hex(8)}"
    source_fd = container_fd if src_dir_fd is None else src_dir_fd
    os.rename(name, retired, src_dir_fd=source_fd, dst_dir_fd=container_fd)
    return retired


def retire_beside(parent: HeldDirectory, name: str) -> tuple[int, str]:
    """Move ``name``, a locked directory of ours in the parent, into the stage container.

    Whoever locks it after its lock is released then finds ``name`` no longer linked, instead
    of adopting a directory about to be removed; left there by a crash, it is reclaimed like a
    dead stage. Returns the container's descriptor and the directory's name in it.
    """
    container = f"{STAGE_PREFIX}{os.geteuid()}"
    for _ in range(_ATTEMPTS):
        try:
            fd = _fs.open_private_dir(parent.fd, container, parent.path / container, create=True)
        except FileNotFoundError:  # removed, empty, by another run in between
            continue
        try:
            if os.fstat(fd).st_dev != os.fstat(parent.fd).st_dev:
                raise UnsafeFilesystem(f"{parent.path / container} is a mount point")
            return fd, _retire(fd, name, src_dir_fd=parent.fd)
        except FileNotFoundError:
            os.close(fd)
            if _fs.stat_at(parent.fd, name) is None:
                raise
        except BaseException:
            os.close(fd)
            raise
    raise Busy(f"could not move {parent.path / name} into {parent.path / container}")


def remove_empty_container(parent: HeldDirectory) -> None:
    """Remove the stage container unless another run still has something in it."""
    with suppress(OSError):  # busy with another live stage: leave it to that one
        os.rmdir(f"{STAGE_PREFIX}{os.geteuid()}", dir_fd=parent.fd)


class Draft:
    """The directory a builder fills; usable only while the builder runs (afterwards every use
    raises ``RuntimeError``). ``publish`` and ``Workspace.publish`` make it."""

    def __init__(self, stage: Stage, root_fd: int) -> None:
        self._stage = stage
        self._root_fd = root_fd
        self._open = True

    def _check(self) -> None:
        if not self._open:
            raise RuntimeError("this Draft was used after its builder returned")

    def close(self) -> None:
        self._open = False

    @property
    def path(self) -> Path:
        """The draft directory; write the result here."""
        self._check()
        return self._stage.path / self._stage.name

    def link(self, src: str | os.PathLike[str], name: str | os.PathLike[str]) -> None:
        """Hard-link the regular file ``src`` as ``name`` in the draft (the same inode).

        :param src: A regular file of yours, on the destination's filesystem; rewrite it later
            only by replacing it, never in place, since the result shares it.
        :param name: Its path in the draft, relative and without ``..``; missing directories
            are made, an occupied path is refused.
        """
        self._check()
        parts = _draft_parts(name)
        source = _fs.absolute(src)
        with oserrors(f"linking {source} into the draft as {'/'.join(parts)}"):
            st = _source_stat(source)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigurationError(f"link source {source} is not a regular file")
            _require_owned(st, source)
            _require_readable(st, source)
            dir_fd = self._open_dirs(parts[:-1])
            try:
                _link_checked(os.fspath(source), dir_fd, parts[-1], st, "/".join(parts))
            finally:
                os.close(dir_fd)

    def link_tree(self, src: str | os.PathLike[str], name: str | os.PathLike[str]) -> None:
        """Recreate the directories of ``src`` under ``name`` and hard-link every regular file.

        :param src: A directory on the destination's filesystem, not containing the draft.
        :param name: Where its copy goes in the draft, relative and without ``..``.
        """
        self._check()
        parts = _draft_parts(name)
        source = _fs.absolute(src)
        with oserrors(f"linking the tree {source} into the draft as {'/'.join(parts)}"):
            try:
                src_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | _fs.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    raise ConfigurationError(
                        f"link_tree source {source} is not a directory"
                    ) from exc
                raise
            try:
                guard = self._guard()
                if _key(os.fstat(src_fd)) in guard or _contains(source, self._stage.path):
                    raise ConfigurationError(f"link_tree source {source} contains the draft")
                dir_fd = self._open_dirs(parts[:-1])
                try:
                    _mkdir_new(dir_fd, parts[-1], "/".join(parts))
                    dst_fd = os.open(parts[-1], O_DIR, dir_fd=dir_fd)
                finally:
                    os.close(dir_fd)
                try:
                    _link_tree(src_fd, dst_fd, source, guard)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)

    def _guard(self) -> set[tuple[int, int]]:
        return {
            _key(os.fstat(self._root_fd)),
            _key(os.fstat(self._stage.fd)),
            _key(os.fstat(self._stage.container_fd)),
        }

    def _open_dirs(self, parts: tuple[str, ...]) -> int:
        """Walk (creating) directories below the draft root, never through a symlink."""
        fd = os.dup(self._root_fd)
        try:
            for index, part in enumerate(parts):
                with suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                try:
                    child = os.open(part, O_DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        where = "/".join(parts[: index + 1])
                        raise ConfigurationError(
                            f"unsafe draft path: {where} is not a directory"
                        ) from exc
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _contains(outer: Path, inner: Path) -> bool:
    try:
        real_outer, real_inner = os.path.realpath(outer), os.path.realpath(inner)
    except (OSError, ValueError):
        return False
    return os.path.commonpath([real_outer, real_inner]) == real_outer


def _source_stat(source: Path) -> os.stat_result:
    try:
        return os.lstat(source)
    except FileNotFoundError as exc:
        raise ConfigurationError(f"link source {source} is missing") from exc


def _require_owned(st: os.stat_result, path: Path | str) -> None:
    """Refuse to publish another user's file: through the shared inode it would stay theirs to
    change (a planted file, for instance, in a directory swapped for the user's own)."""
    if st.st_uid != os.geteuid():
        raise UnsafeFilesystem(f"{path} belongs to uid {st.st_uid}, not to this user; not linked")


def _require_readable(st: os.stat_result, path: Path | str) -> None:
    if not st.st_mode & stat.S_IRUSR:
        raise ConfigurationError(f"{path}: its owner cannot read it (mode {st.st_mode & 0o777:o})")


def _mkdir_new(dir_fd: int, name: str, shown: str) -> None:
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError as exc:
        raise ConfigurationError(f"draft path {shown} is already occupied") from exc


def _link_checked(src: str, dst_dir_fd: int, name: str, st: os.stat_result, shown: str) -> None:
    """``linkat`` without following, then prove the new entry is the inode that was checked."""
    try:
        os.link(src, name, dst_dir_fd=dst_dir_fd, follow_symlinks=False)
    except FileExistsError as exc:
        raise ConfigurationError(f"draft path {shown} is already occupied") from exc
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise ConfigurationError(
                f"{src} and the destination are on different filesystems; Servatus never copies"
            ) from exc
        raise
    made = os.stat(name, dir_fd=dst_dir_fd, follow_symlinks=False)
    if _key(made) != _key(st):
        os.unlink(name, dir_fd=dst_dir_fd)
        raise UnsafeFilesystem(f"{src} was substituted while being linked")


def _link_tree(src_fd: int, dst_fd: int, source: Path, guard: set[tuple[int, int]]) -> None:
    """Mirror one directory level; ``source`` is only for messages."""
    with os.scandir(src_fd) as scan:
        entries = [
            (e.name, e.inode(), e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
            for e in scan
        ]
    for name, inode, is_dir, is_file in entries:
        if is_dir:
            child_src = os.open(name, O_DIR, dir_fd=src_fd)
            try:
                if _key(os.fstat(child_src)) in guard:
                    raise ConfigurationError(f"link_tree source {source} contains the draft")
                os.mkdir(name, 0o700, dir_fd=dst_fd)
                child_dst = os.open(name, O_DIR, dir_fd=dst_fd)
                try:
                    _link_tree(child_src, child_dst, source / name, guard)
                finally:
                    os.close(child_dst)
            finally:
                os.close(child_src)
        elif is_file:
            os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
            made = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
            if made.st_ino != inode or not stat.S_ISREG(made.st_mode):
                raise UnsafeFilesystem(f"{source / name} was substituted while being linked")
            _require_owned(made, source / name)
            if not made.st_mode & stat.S_IRUSR:
                _require_readable(made, source / name)
        else:
            raise ConfigurationError(
                f"link_tree links regular files and directories; {source / name} is neither"
            )


FILES_BEFORE_SYNCFS = 64
"""Past this many files one ``syncfs`` costs less than a ``fdatasync`` each (Linux only)."""


class _Sealer:
    """Seal a draft: check entries, give directories ``mode``, and make the content durable.

    Small trees get one ``fdatasync`` per file and one ``fsync`` per directory. A large tree
    (typically a ``link_tree``) switches to a single ``syncfs`` of the destination's filesystem,
    which flushes the rest at once, as ``sync`` would, but only for that filesystem.
    """

    def __init__(self, mode: int) -> None:
        self.mode = mode
        self.files = 0
        self.whole_filesystem = False

    def seal(self, root_fd: int, shown: Path) -> None:
        self._walk(root_fd, shown)
        if self.whole_filesystem:
            _fs.syncfs(root_fd)

    def _sync_file(self, dir_fd: int, name: str) -> None:
        if not self.whole_filesystem and self.files >= FILES_BEFORE_SYNCFS and _fs.HAVE_SYNCFS:
            self.whole_filesystem = True
        if self.whole_filesystem:
            return
        self.files += 1
        child = os.open(name, O_FILE, dir_fd=dir_fd)
        try:
            _fs.datasync_fd(child)
        finally:
            os.close(child)

    def _walk(self, fd: int, shown: Path) -> None:
        with os.scandir(fd) as scan:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in scan]
        for name, is_dir in entries:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if is_dir and stat.S_ISDIR(st.st_mode):
                child = os.open(name, O_DIR, dir_fd=fd)
                try:
                    self._walk(child, shown / name)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode):
                if not st.st_mode & stat.S_IRUSR:
                    _require_readable(st, shown / name)
                self._sync_file(fd, name)
            elif not stat.S_ISLNK(st.st_mode):
                raise ConfigurationError(f"{shown / name} is not a file, directory or symlink")
        os.fchmod(fd, self.mode)
        if not self.whole_filesystem:
            _fs.fsync_fd(fd)


def _open_destination(destination: str | os.PathLike[str]) -> tuple[HeldDirectory, str]:
    path = _fs.absolute(destination)
    name = _fs.check_name(path.name, "destination")
    parent = HeldDirectory.open(path.parent, "destination directory")
    return parent, name


def _exists(parent: HeldDirectory, name: str) -> None:
    """Refuse an existing destination, first reclaiming dead stages beside it.

    A run killed after its commit leaves its stage; the rerun that finds the result is the
    "next run" that removes it.
    """
    if parent.entry(name) is not None:
        reclaim_beside(parent)
        raise DestinationExists(f"{parent.path / name} already exists")


def reclaim_beside(parent: HeldDirectory) -> None:
    """Reclaim dead stages in the parent's container, if there is one; failures only warn."""
    container = f"{STAGE_PREFIX}{os.geteuid()}"
    try:
        if _fs.stat_at(parent.fd, container) is None:
            return
        fd = _fs.open_private_dir(parent.fd, container, parent.path / container, create=False)
        try:
            reclaim(fd, parent.path / container)
        finally:
            os.close(fd)
        remove_empty_container(parent)
    except (OSError, ServatusError) as exc:
        _fs.warn_pending(str(parent.path / container), exc)


def _finish(parent: HeldDirectory, name: str, stage: Stage, *, is_dir: bool) -> None:
    """The commit: re-check the parent, rename without replacing, flush the parent."""
    parent.recheck()
    _hooks().rename_noreplace(
        stage.fd, name, parent.fd, name, is_dir=is_dir, path=str(parent.path / name)
    )
    with oserrors(f"flushing {parent.path}"):
        _fs.fsync_fd(parent.fd)
    parent.recheck()


def publish_at(
    parent: HeldDirectory, name: str, build: Callable[[Draft], object], mode: int
) -> Publication:
    """``publish`` into an already held parent directory (shared with Workspace)."""
    _exists(parent, name)
    stage = Stage(parent, name)
    try:
        stage.create()
        with oserrors(f"creating the draft for {parent.path / name}"):
            os.mkdir(name, 0o700, dir_fd=stage.fd)
            root_fd = os.open(name, O_DIR, dir_fd=stage.fd)
        try:
            draft = Draft(stage, root_fd)
            try:
                build(draft)
            finally:
                draft.close()
            with oserrors(f"sealing the draft for {parent.path / name}"):
                _Sealer(mode).seal(root_fd, parent.path / name)
        finally:
            os.close(root_fd)
        _finish(parent, name, stage, is_dir=True)
    finally:
        pending = stage.remove()
    return Publication(parent.path / name, pending)


def publish(
    destination: str | os.PathLike[str],
    build: Callable[[Draft], object],
    *,
    mode: int | None = None,
) -> Publication:
    """Build a directory in a private stage and commit it at ``destination``, never replacing.

    Raises DestinationExists when it exists (before building, or when another process won the
    commit). Exceptions from ``build`` propagate unchanged, and the stage is removed.

    :param destination: The directory to publish; its parent must exist, and stage and result
        share its filesystem.
    :param build: Called once with a :class:`~servatus_publish.publication.Draft` to fill; it
        validates before it returns, since what it leaves is committed as it is.
    :param mode: The mode every directory of the result gets just before the commit (files keep
        theirs); None: ``0o777`` less the umask. The owner must keep read and search.
    """
    if not callable(build):
        raise ConfigurationError(f"build must be callable, not {build!r}")
    checked = check_mode(mode, directory=True)
    parent, name = _open_destination(destination)
    try:
        return publish_at(parent, name, build, checked)
    finally:
        parent.close()


def publish_file(
    destination: str | os.PathLike[str],
    write: Callable[[Path], object],
    *,
    mode: int | None = None,
) -> Publication:
    """Publish the one regular file ``write`` creates at the path it is given.

    The writer may create it any way (a temporary file renamed into place included); anything
    else it leaves in the stage is discarded. The file gets ``mode`` just before the commit.

    :param destination: The file to publish; its parent must exist.
    :param write: Called once with the path to create, in a private stage beside the
        destination; the path does not exist yet.
    :param mode: The file's mode, set just before the commit whatever the writer chose; None:
        ``0o666`` less the umask. The owner must keep read.
    """
    if not callable(write):
        raise ConfigurationError(f"write must be callable, not {write!r}")
    checked = check_mode(mode, directory=False)
    parent, name = _open_destination(destination)
    try:
        _exists(parent, name)
        stage = Stage(parent, name)
        try:
            stage.create()
            write(stage.path / name)
            with oserrors(f"sealing the file for {parent.path / name}"):
                _seal_file(stage.fd, name, checked, parent.path / name)
            _finish(parent, name, stage, is_dir=False)
        finally:
            pending = stage.remove()
        return Publication(parent.path / name, pending)
    finally:
        parent.close()


def _seal_file(stage_fd: int, name: str, mode: int, shown: Path) -> None:
    st = _fs.stat_at(stage_fd, name)
    if st is None:
        raise ConfigurationError(f"the writer for {shown} created nothing at the path it was given")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigurationError(f"the writer for {shown} created something other than a file")
    fd = os.open(name, O_FILE, dir_fd=stage_fd)
    try:
        if _key(os.fstat(fd)) != _key(st):
            raise UnsafeFilesystem(f"the staged file for {shown} was substituted")
        os.fchmod(fd, mode)
        _fs.fsync_fd(fd)
    finally:
        os.close(fd)
