"""The durable campaign store: an append-only journal of checksummed records in STATE.

Layout (``docs/development/adr/0001-campaign-store.md`` gives the reasons)::

    STATE/              0700, owned by the user
    STATE/journal       0600: the line "servatus.campaign/4", then one frame per record
    STATE/lock          0600: writers hold a non-blocking flock on it
    STATE/journal.tmp   a compaction or creation in progress; removed by the next writer

A frame is ``R<length> <crc32(payload)> <crc32(the 18 bytes before)>\\n<payload>\\n`` with
8-digit hexadecimal fields; the payload is one JSON record tagged by ``type``. One record is one
atomic change, however many Tasks it carries. A frame cut short at the end of the file (a writer
died mid-append) is a torn tail: readers ignore it and the next writer truncates it. Any other
damage, a failed checksum anywhere included, is :class:`~servatus.errors.CorruptState`.

The campaign's state is a fold over its records (:func:`fold`). Adding a record type means:
define a frozen attrs class, register it with :func:`record`, and register how it changes the
state with :func:`folds`. Compaction rewrites the journal as one :class:`Snapshot` record and
atomically replaces it, so the record count a reader must fold stays bounded.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager, suppress
from pathlib import Path

import attrs

from servatus.errors import (
    Busy,
    ConfigurationError,
    CorruptState,
    ServatusError,
    StateWarning,
    TaskConflict,
    Unavailable,
    UnsafeFilesystem,
    from_os_error,
)
from servatus.files import checked_path, path_word, read_all, write_all
from servatus.ids import target_key
from servatus.journal import codec
from servatus.journal.codec import MAGIC, SCHEMA, encode, frame, scan
from servatus.journal.folding import Fold, Rejected
from servatus.journal.records import (
    CampaignState,
    Created,
    Horizon,
    Settled,
    Snapshot,
    TargetSeen,
    stored_roster,
)
from servatus.tasks import Task

JOURNAL = "journal"
LOCK = "lock"
TEMPORARY = "journal.tmp"
PLAN_KEY = "plan-key"
"""The campaign's secret that seals its saved plans (ADR 0011): 32 random bytes, owner-only."""
PLAN_KEY_BYTES = 32
_PLAN_KEY_DRAFT = "plan-key."
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600

COMPACT_RECORDS = 1024
"""Compact once this many records follow the first one and they are 1/16 of its size or more."""

COMPACT_RECORDS_CAP = 65536
"""Compact at this many records following the first one, whatever their size."""


# -- files --------------------------------------------------------------------------------------


def sync(fd: int) -> None:
    """Make a file's or directory's contents durable; on macOS only F_FULLFSYNC reaches the disk."""
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
        except OSError:
            os.fsync(fd)
        else:
            return
    os.fsync(fd)


def _check_owned(
    st: os.stat_result, name: str, kind: Callable[[int], bool], *, tightened: bool = False
) -> None:
    """Refuse what is not ours or what other users can write (they could change the record);
    warn of what they can only read. ``tightened``: the caller makes it owner-only now."""
    if not kind(st.st_mode):
        raise UnsafeFilesystem(f"{name}: has the wrong type")
    if st.st_uid != os.geteuid():
        raise UnsafeFilesystem(f"{name}: is owned by uid {st.st_uid}, not by you")
    mode = stat.S_IMODE(st.st_mode)
    wanted = DIRECTORY_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE
    if mode & 0o022:
        raise UnsafeFilesystem(
            f"{name}: other users can write it (mode {mode:04o}), so it is not used; if the "
            f"record is as you left it, make it owner-only: chmod {wanted:o} {path_word(name)}"
        )
    if mode & 0o077:
        done = (
            f"made it owner-only ({wanted:04o})"
            if tightened
            else f"make it owner-only: chmod {wanted:o} {path_word(name)}"
        )
        warnings.warn(
            StateWarning(f"{name}: other users can read it (mode {mode:04o}); {done}"),
            stacklevel=3,
        )


def _open_directory(path: Path) -> int:
    """STATE, opened, not yet judged: its mode is checked (and warned of, or tightened) only
    once it is known to hold a campaign, so a mistyped STATE (``.``, ``~``, a shared project
    directory) is left as it is and called no campaign."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigurationError(f"no campaign at {str(path)!r}") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot open campaign {str(path)!r}") from None


def _check_lock(directory: int, path: Path) -> None:
    """A lock others can write is refused on every read too: whoever can replace it can let a
    second writer in beside the one holding it. A campaign whose lock is missing is fine (the
    next writer makes it)."""
    try:
        st = os.stat(LOCK, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise from_os_error(exc, f"cannot open {str(path / LOCK)!r}") from None
    _check_owned(st, str(path / LOCK), stat.S_ISREG)


def read(path: str | Path) -> CampaignState:
    """Read a campaign without the lock, up to its last complete record."""
    data, _, name = read_journal(path)
    into, _ = codec.fold_journal(data, name)
    return into.freeze()


def read_journal(path: str | Path) -> tuple[bytes, tuple[int, ...], str]:
    """The journal's bytes, unverified, with the :func:`journal_version` they were read at (an
    older one if a writer appends meanwhile, which only costs that writer a fold) and the name
    errors give it; the campaign's ownership and lock are checked as :func:`read` does."""
    path = Path(checked_path(path, "campaign"))
    name = str(path / JOURNAL)
    directory = _open_directory(path)
    try:
        try:
            fd = os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            raise ConfigurationError(f"no campaign at {str(path)!r}") from None
        except OSError as exc:
            raise from_os_error(exc, f"cannot open {name!r}") from None
        try:
            _check_owned(os.fstat(directory), str(path), stat.S_ISDIR)
            st = os.fstat(fd)
            _check_owned(st, name, stat.S_ISREG)
            _check_lock(directory, path)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(directory)
    try:
        data = read_all(fd)
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name!r}") from None
    finally:
        os.close(fd)
    return data, _version(st), name


def remainder(
    state: CampaignState, tasks: AbstractSet[str], allocations: AbstractSet[str]
) -> CampaignState:
    """``state`` without the Tasks ``tasks`` and the records of ``allocations`` (the status
    cache's live part, ADR 0010). A horizon keeps counting the intents kept before it, so the
    markers a listing asks for are those the whole state asks for; of horizons that come to count
    the same intents, the latest bounds them."""
    kept = [intent for intent in state.intents if intent.allocation_id not in allocations]
    before = [0]  # before[k]: intents kept among the first k
    for intent in state.intents:
        before.append(before[-1] + (intent.allocation_id not in allocations))
    horizons: dict[tuple[str, int], Horizon] = {}
    for horizon in state.horizons:
        where = (horizon.target, before[horizon.intents])
        earlier = horizons.get(where)
        if earlier is None or earlier.at < horizon.at:
            horizons[where] = Horizon(*where, horizon.at)
    stored = [
        (key, item)
        for key, item in zip(state.tasks.keys, state.tasks.stored(), strict=True)
        if key not in tasks
    ]
    return attrs.evolve(
        state,
        tasks=stored_roster(tuple(key for key, _ in stored), [item for _, item in stored]),
        intents=tuple(kept),
        receipts=tuple(item for item in state.receipts if item.allocation_id not in allocations),
        resolutions=tuple(
            item for item in state.resolutions if item.allocation_id not in allocations
        ),
        settlements=tuple(
            item for item in state.settlements if item.allocation_id not in allocations
        ),
        horizons=tuple(horizons.values()),
    )


def journal_version(path: str | Path) -> tuple[int, ...] | None:
    """Changes whenever the journal does (a record appended, a torn tail cut, a compaction renamed
    in), so an unchanged journal need not be read and folded again; None when it cannot be seen."""
    try:
        st = os.stat(Path(path) / JOURNAL, follow_symlinks=False)
    except (OSError, ValueError):  # ValueError: a NUL in the name, which read refuses
        return None
    return _version(st)


def _version(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Writer:
    """The one writer of a campaign: holds its lock, knows its state, appends records durably.

    Use :func:`writing`; ``state`` is None while the campaign does not exist yet.
    """

    def __init__(self, path: Path, directory: int, lock: int) -> None:
        self.path = path
        self.name = str(path / JOURNAL)
        self._directory = directory
        self._lock = lock
        self._journal = -1
        self._fold: Fold | None = None
        self._end = 0
        self._first_size = 0
        self._records = 0
        self._broken = False
        self._compaction_failed = False

    # -- opening

    def _open_journal(self, known: tuple[tuple[int, ...], CampaignState] | None = None) -> None:
        try:
            fd = os.open(JOURNAL, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise from_os_error(exc, f"cannot open {self.name!r}") from None
        self._journal = fd
        try:
            st = os.fstat(fd)
            _check_owned(st, self.name, stat.S_ISREG, tightened=True)
            version = _version(st)
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
            data = read_all(fd)
        except OSError as exc:
            raise from_os_error(exc, f"cannot read {self.name!r}") from None
        if known is not None and known[0] == version:
            # Unchanged since the caller read it (journal_version): its frames are verified
            # again, but not decoded and folded a second time.
            found = scan(data, self.name)
            self._fold = Fold(known[1])
        else:
            self._fold, found = codec.fold_journal(data, self.name)
        self._end = found.end
        self._first_size = found.first_size
        self._records = len(found.payloads)
        if len(data) > found.end:
            try:
                os.ftruncate(fd, found.end)
                sync(fd)
            except OSError as exc:
                what = f"cannot truncate the torn tail of {self.name!r}"
                raise from_os_error(exc, what) from None

    @property
    def state(self) -> CampaignState | None:
        return None if self._fold is None else self._fold.freeze()

    # -- changing

    def _usable(self) -> None:
        if self._broken:
            raise Unavailable(f"{self.name}: an earlier write failed; reopen the campaign")

    def initialize(self, first: Created) -> CampaignState:
        """Create the journal holding ``first``: written aside, synced, renamed in, dir synced."""
        self._usable()
        if self._fold is not None:
            raise TaskConflict(f"a campaign already exists at {str(self.path)!r}")
        into = Fold()
        into.apply(first)
        self._replace(frame(encode(first)))
        self._fold = into
        return into.freeze()

    def commit(self, change: object) -> CampaignState:
        """Append one record with one write and one fsync; compact when the journal has grown."""
        self.add(change)
        assert self._fold is not None
        return self._fold.freeze()

    def add(self, change: object) -> None:
        """:meth:`commit` without building the new state, which costs O(state): a loop of many
        records (one intent and one receipt per allocation) stays linear."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        data = frame(encode(change))
        try:
            self._fold.apply(change)
        except Rejected as exc:
            raise TaskConflict(str(exc)) from None
        self._append(data, 1)
        self._compact_when_grown()

    def add_all(self, changes: Sequence[object]) -> None:
        """Append several records with one write and one fsync, so that all are durable before
        anything that depends on them is done (a crash in the write keeps a prefix of them,
        each whole), and compact as :meth:`add` does. A change the fold rejects refuses them
        all, and this writer then refuses further changes (its fold took the ones before it)."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        if not changes:
            return
        data = b"".join(frame(encode(change)) for change in changes)
        for change in changes:
            try:
                self._fold.apply(change)
            except Rejected as exc:
                self._broken = True
                raise TaskConflict(str(exc)) from None
        self._append(data, len(changes))
        self._compact_when_grown()

    def _compact_when_grown(self) -> None:
        """Compact once the journal has grown past its bounds, after records that are durable
        already: a compaction that fails (no room for the new journal, say) must not report
        them as failed. The next writer compacts."""
        tail = self._end - len(MAGIC) - self._first_size
        due = self._records > COMPACT_RECORDS_CAP or (
            self._records > COMPACT_RECORDS and tail * 16 >= self._first_size
        )
        if due and not self._compaction_failed:
            try:
                self.compact()
            except ServatusError:
                self._compaction_failed = True

    def _append(self, data: bytes, records: int) -> None:
        """Write and sync framed records at the journal's end; on failure cut the journal back
        to where it ended, and refuse further changes (the fold already took them)."""
        try:
            write_all(self._journal, data, self._end)
            sync(self._journal)
        except OSError as exc:
            self._broken = True
            with suppress(OSError):
                os.ftruncate(self._journal, self._end)
            raise from_os_error(exc, f"cannot write {self.name!r}") from None
        self._end += len(data)
        self._records += records

    def settle(self, change: Settled) -> int:
        """Record ``change`` less what is settled already (another command may have recorded it
        since ``change`` was judged); nothing when nothing is left. Returns what was recorded."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        done = self._fold.settlements
        fresh = tuple(item for item in change.allocations if item.allocation_id not in done)
        if fresh or (change.listed and not change.allocations):
            self.add(Settled(fresh, change.listed))
        return len(fresh)

    def target(self, identity: str) -> str:
        """The key an intent names the Target ``identity`` by; the first time, a
        :class:`TargetSeen` is recorded (appended and synced) first."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        key = target_key(identity)
        known = self._fold.targets.get(key)
        if known is None:
            self.add(TargetSeen(key, identity))
        elif known.identity != identity:
            raise TaskConflict(f"two Targets share the key {key}")
        return key

    def compact(self) -> None:
        """Replace the journal with one holding a single Snapshot of the current state."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        self._replace(frame(encode(Snapshot(self._fold.freeze()))))

    def _replace(self, first_frame: bytes) -> None:
        data = MAGIC + first_frame
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(TEMPORARY, flags, FILE_MODE, dir_fd=self._directory)
        except OSError as exc:
            raise from_os_error(exc, f"cannot create {str(self.path / TEMPORARY)!r}") from None
        renamed = False
        try:
            os.fchmod(fd, FILE_MODE)
            write_all(fd, data, 0)
            sync(fd)
            os.rename(TEMPORARY, JOURNAL, src_dir_fd=self._directory, dst_dir_fd=self._directory)
            renamed = True
            sync(self._directory)
        except OSError as exc:
            # Before the rename the old journal is untouched and still ours to append to; after
            # it, whether the rename is durable is unknown, so nothing more may be appended.
            self._broken = renamed
            os.close(fd)
            if not renamed:
                with suppress(OSError):
                    os.unlink(TEMPORARY, dir_fd=self._directory)
            raise from_os_error(exc, f"cannot write {self.name!r}") from None
        if self._journal >= 0:
            os.close(self._journal)
        self._journal = fd
        self._end = len(data)
        self._first_size = len(first_frame)
        self._records = 1

    def close(self) -> None:
        if self._journal >= 0:
            os.close(self._journal)
            self._journal = -1
        os.close(self._lock)
        os.close(self._directory)


STATUS_CACHE = "status-cache."
"""How the names of the status cache's files start (``servatus.cli.status_cache_file``): derived
data beside the journal, never read by anything that changes the campaign."""


def _ours(entries: set[str]) -> bool:
    return all(
        name in _OURS or name.startswith((STATUS_CACHE, _PLAN_KEY_DRAFT)) for name in entries
    )


_OURS = frozenset({JOURNAL, LOCK, TEMPORARY, PLAN_KEY})


def holds_campaign(directory: str) -> bool:
    """Whether ``directory`` is a campaign's STATE (its journal says so, or it holds only the
    store's own names, as while one is created): what else writes into it could replace the
    journal or the lock, so a user's output file never goes there."""
    try:
        entries = set(os.listdir(directory))
    except (OSError, ValueError):
        return False
    if entries and _ours(entries):
        return True
    if JOURNAL not in entries:
        return False
    try:
        fd = os.open(
            os.path.join(directory, JOURNAL),
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        )
    except OSError:
        return False
    try:
        return os.read(fd, len(_CAMPAIGN_PREFIX)) == _CAMPAIGN_PREFIX
    except OSError:
        return False
    finally:
        os.close(fd)


_CAMPAIGN_PREFIX = SCHEMA.rsplit("/", 1)[0].encode("ascii") + b"/"
"""How every version's journal starts: ``servatus.campaign/``."""


def _make_directory(path: Path) -> None:
    """Create STATE owner-only, or adopt an existing directory that holds nothing but ours."""
    try:
        os.mkdir(path, DIRECTORY_MODE)
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sync(parent)
        finally:
            os.close(parent)
    except FileExistsError:
        try:
            entries = set(os.listdir(path))
        except NotADirectoryError:
            raise ConfigurationError(f"{str(path)!r} exists and is not a directory") from None
        except OSError as exc:
            raise from_os_error(exc, f"cannot list {str(path)!r}") from None
        if not _ours(entries):
            raise ConfigurationError(
                f"{str(path)!r} exists and is not a campaign; choose a new or empty directory"
            ) from None
        if not entries:  # nothing recorded to protect yet: a user's empty directory (umask 002
            _make_private(path)  # makes it 0775) becomes owner-only instead of being refused
    except OSError as exc:
        raise from_os_error(exc, f"cannot create {str(path)!r}") from None


def _make_private(path: Path) -> None:
    """Make an empty directory of the user's owner-only (someone else's is refused later)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # as _open_directory does
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, DIRECTORY_MODE)
    finally:
        os.close(fd)


def _exists(name: str, directory: int) -> bool:
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@contextmanager
def writing(
    path: str | Path,
    *,
    create: bool = False,
    known: tuple[tuple[int, ...] | None, CampaignState] | None = None,
    partial: bool = False,
) -> Iterator[Writer]:
    """Hold the campaign's lock for one change; raise ``Busy`` at once if another process has it.

    With ``create``, STATE is made (owner-only) when missing and ``state`` may be None. The lock
    also removes a leftover ``journal.tmp`` and truncates a torn tail before anything is written.
    ``known`` is a state read before with the :func:`journal_version` it was read at: if the
    journal is still at that version, the writer starts from it instead of folding it again.
    ``partial`` says ``known`` is only part of the state (the status cache's remainder): the
    writer never compacts, which would write that part as the whole.
    """
    path = Path(checked_path(path, "campaign"))
    if create:
        _make_directory(path)
    directory = _open_directory(path)
    try:
        if not create and not _exists(JOURNAL, directory):
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        st = os.fstat(directory)
        _check_owned(st, str(path), stat.S_ISDIR, tightened=True)
        if stat.S_IMODE(st.st_mode) != DIRECTORY_MODE:
            os.fchmod(directory, DIRECTORY_MODE)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        lock = os.open(LOCK, flags, FILE_MODE, dir_fd=directory)
    except BaseException as exc:
        os.close(directory)
        if isinstance(exc, OSError):
            raise from_os_error(exc, f"cannot lock campaign {str(path)!r}") from None
        raise
    try:
        _check_owned(os.fstat(lock), str(path / LOCK), stat.S_ISREG, tightened=True)
        os.fchmod(lock, FILE_MODE)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        os.close(directory)
        raise Busy(
            f"campaign {str(path)!r} is busy: another servatus process is changing it"
        ) from None
    except BaseException as exc:
        os.close(lock)
        os.close(directory)
        if isinstance(exc, OSError):
            raise from_os_error(exc, f"cannot lock campaign {str(path)!r}") from None
        raise
    writer = Writer(path, directory, lock)
    writer._compaction_failed = partial
    try:
        with suppress(FileNotFoundError):
            os.unlink(TEMPORARY, dir_fd=directory)
        version, state = known if known is not None else (None, None)
        writer._open_journal(None if version is None or state is None else (version, state))
        if writer._fold is None and not create:
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        yield writer
    except OSError as exc:
        raise from_os_error(exc, f"campaign {str(path)!r}") from None
    finally:
        writer.close()


def plan_key(path: str | Path, *, create: bool) -> bytes | None:
    """The secret that seals the campaign's saved plans (ADR 0011), or None when it has none and
    ``create`` is false. With ``create``, the first caller makes it: 32 random bytes written
    owner-only under a draft name, synced, then linked to ``plan-key`` (``link`` never replaces,
    so two planners at once agree on the first one linked). It is read as the journal is: the
    campaign must be ours and not writable by others, and the key a regular file of ours that
    nobody else can read or write, else :class:`UnsafeFilesystem` (whoever could read it could
    seal a plan of their own)."""
    path = Path(checked_path(path, "campaign"))
    name = str(path / PLAN_KEY)
    directory = _open_directory(path)
    try:
        if not _exists(JOURNAL, directory):
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        _check_owned(os.fstat(directory), str(path), stat.S_ISDIR)
        try:
            fd = _open_key(directory)
        except FileNotFoundError:
            if not create:
                return None
            _make_key(directory)
            fd = _open_key(directory)
    except OSError as exc:
        raise from_os_error(exc, f"cannot open {name!r}") from None
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFilesystem(f"{name}: has the wrong type")
        if st.st_uid != os.geteuid():
            raise UnsafeFilesystem(f"{name}: is owned by uid {st.st_uid}, not by you")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise UnsafeFilesystem(
                f"{name}: other users can read it (mode {stat.S_IMODE(st.st_mode):04o}), so "
                f"they could seal plans as you; remove it (rm {path_word(name)}) and save your "
                "plans again"
            )
        key = read_all(fd)
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name!r}") from None
    finally:
        os.close(fd)
    if len(key) != PLAN_KEY_BYTES:
        raise CorruptState(
            f"{name}: not a plan key ({len(key)} bytes, not {PLAN_KEY_BYTES}); remove it "
            f"(rm {path_word(name)}) and save your plans again"
        )
    return key


def _open_key(directory: int) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return os.open(PLAN_KEY, flags, dir_fd=directory)


def _make_key(directory: int) -> None:
    """Link a fresh key to ``plan-key`` unless another process linked one first."""
    draft = f"{_PLAN_KEY_DRAFT}{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(draft, flags, FILE_MODE, dir_fd=directory)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            write_all(fd, secrets.token_bytes(PLAN_KEY_BYTES), 0)
            sync(fd)
        finally:
            os.close(fd)
        with suppress(FileExistsError):
            os.link(draft, PLAN_KEY, src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.unlink(draft, dir_fd=directory)
    sync(directory)


def new_campaign(tasks: tuple[Task, ...], *, sealed: bool) -> Created:
    """The first record of a new campaign, with a fresh identity and the current wall time."""
    return Created(uuid.uuid4().hex, time.time(), sealed, tasks)


def journal_size(path: str | Path) -> int:
    """Bytes in the journal now (for benchmarks and diagnostics)."""
    return (Path(path) / JOURNAL).stat().st_size
