"""Tasks, the units of a campaign, and the JSONL files that describe them.

A Task is its whole value: key, args, stdin bytes and environment. Two Tasks under one key are
the same Task only if every field is equal, which is what ``ensure`` checks on a rerun.

Keys match :data:`KEY_PATTERN`: they start with a letter or digit and continue with letters,
digits, ``.``, ``_`` and ``-``, at most 128 characters. Such a key is safe as a file name (no
``/``, never ``.`` or ``..``, no leading ``-`` that a command would read as an option), inside a
Slurm job name, and on a terminal, and it still admits keys built from numbers such as
``f"lr-{1e-3}-seed-{0}"``.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from servatus.errors import ConfigurationError, input_problem
from servatus.files import read_regular
from servatus.strict import line_strings

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""Every valid Task key matches this in full."""

ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A POSIX environment variable name."""

RESERVED_ENV_PREFIX = "SERVATUS_"
"""Names Servatus sets for every step; a Task may not set them itself."""


class Env(Mapping[str, str]):
    """An immutable, hashable mapping of environment variables, so a Task can be a frozen value."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._items: dict[str, str] = items.copy() if isinstance(items, dict) else dict(items)
        self._hash: int | None = None

    def __getitem__(self, name: str) -> str:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Env):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"Env({self._items!r})"

    def to_dict(self) -> dict[str, str]:
        """A plain, mutable copy."""
        return dict(self._items)


def _to_args(value: Any) -> tuple[str, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, str | bytes):
        raise ConfigurationError("Task args must be a sequence of strings, not one string")
    try:
        return tuple(value)
    except TypeError:
        raise ConfigurationError("Task args must be a sequence of strings") from None


def _to_stdin(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise ConfigurationError("Task stdin must be bytes")


def _to_env(value: Any) -> Env:
    if isinstance(value, Env):
        return value
    if not isinstance(value, dict | Mapping):
        raise ConfigurationError("Task env must be a mapping of names to strings")
    return Env(value) if value else _NO_ENV


_NO_ENV = Env()


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(value: object) -> bool:
    """A string that can reach a batch script: UTF-8 encodable and without NUL."""
    if not isinstance(value, str) or "\0" in value:
        return False
    return value.isascii() or _utf8(value)


def _all_text(args: tuple[str, ...]) -> bool:
    """``_text`` for every arg at once: one join instead of a call per arg (reads are bulk)."""
    try:
        joined = "\0".join(args)
    except TypeError:
        return False
    return joined.count("\0") == len(args) - 1 and (joined.isascii() or _utf8(joined))


def _check(key: object, args: tuple[str, ...], env: Env, *, text: bool = True) -> None:
    """Refuse an invalid Task; ``text=False`` trusts that no string holds a NUL or a lone
    surrogate (the store proves that for a whole journal record at once)."""
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise ConfigurationError(
            f"bad Task key {key!r:.80}: use 1 to 128 of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    if not args:
        raise ConfigurationError(f"Task {key}: args must not be empty")
    if not text:
        try:
            "".join(args)  # refuses any non-string in one C loop
        except TypeError:
            raise ConfigurationError(f"Task {key}: every arg must be a string") from None
    elif not _all_text(args):
        bad = next(arg for arg in args if not _text(arg))
        raise ConfigurationError(
            f"Task {key}: every arg must be a UTF-8 string without NUL, got {bad!r}"
        )
    for name, value in env._items.items():
        if not isinstance(name, str) or ENV_NAME_PATTERN.fullmatch(name) is None:
            raise ConfigurationError(f"Task {key}: bad environment variable name {name!r}")
        if name.startswith(RESERVED_ENV_PREFIX):
            raise ConfigurationError(
                f"Task {key}: {name} is reserved; Servatus sets {RESERVED_ENV_PREFIX}* itself"
            )
        if not (type(value) is str if not text else _text(value)):
            raise ConfigurationError(
                f"Task {key}: env {name} must be a UTF-8 string without NUL, got {value!r}"
            )


@attrs.frozen(init=False)
class Task:
    """One process to run: ``args`` (``args[0]`` the program), ``stdin`` bytes and extra ``env``.

    The initializer converts and validates in one pass (campaigns hold 100,000 Tasks, and
    ``submit`` builds every Task it sends) and raises :class:`~servatus.errors.ConfigurationError`.
    """

    key: str
    """Unique in its campaign: 1 to 128 of ``A-Z a-z 0-9 . _ -``, starting with a letter or
    digit."""
    args: tuple[str, ...]
    """The command line, ``args[0]`` the program (absolute for the direct launcher)."""
    stdin: bytes
    """What the step reads on standard input (empty by default)."""
    env: Env
    """Variables set for the step on top of the reserved ``SERVATUS_*`` ones."""

    def __init__(
        self,
        key: str,
        args: Iterable[str],
        *,
        stdin: bytes | bytearray | memoryview = b"",
        env: Mapping[str, str] | None = None,
    ) -> None:
        converted_args = args if type(args) is tuple else _to_args(args)
        converted_env = _NO_ENV if env is None or env == {} else _to_env(env)
        _check(key, converted_args, converted_env)
        stdin = stdin if type(stdin) is bytes else _to_stdin(stdin)
        _assign(self, key, converted_args, stdin, converted_env)

    @classmethod
    def stored(cls, key: str, args: tuple[str, ...], stdin: bytes, env: dict[str, str]) -> Task:
        """A Task read back from the campaign store, whose record was checked as a whole to hold
        no NUL and no lone surrogate: every other check still runs, at half the cost per Task."""
        converted_env = Env(env) if env else _NO_ENV
        _check(key, args, converted_env, text=False)
        task = object.__new__(cls)
        _assign(task, key, args, stdin, converted_env)
        return task


def _assign(task: Task, key: str, args: tuple[str, ...], stdin: bytes, env: Env) -> None:
    """Set a checked Task's fields (it is frozen: both ways of making one go through here)."""
    setter = object.__setattr__
    setter(task, "key", key)
    setter(task, "args", args)
    setter(task, "stdin", stdin)
    setter(task, "env", env)


def _is_env_name(name: object) -> bool:
    return (
        type(name) is str
        and ENV_NAME_PATTERN.fullmatch(name) is not None
        and not name.startswith(RESERVED_ENV_PREFIX)
    )


def every_match(pattern: re.Pattern[str], values: Sequence[Any]) -> bool:
    """Whether every value is a string ``pattern`` matches in full, decided in one regex pass
    over them all joined by newlines (``pattern`` must not match one): a value holding the
    separator would match as two, which the separator count catches."""
    if not values:
        return True
    try:
        joined = "\n".join(values)
    except TypeError:
        return False
    return joined.count("\n") == len(values) - 1 and _joined(pattern).fullmatch(joined) is not None


@functools.cache
def _joined(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(rf"(?:{pattern.pattern})(?:\n(?:{pattern.pattern}))*", pattern.flags)


def fields_valid(keys: Sequence[Any], args: Sequence[Any], envs: Sequence[Any]) -> bool:
    """Whether the Tasks with these keys, args and env mappings would all pass :class:`Task`'s
    checks but the text one (no NUL, no lone surrogate), decided in a few passes over whole
    columns instead of a call per Task: how a read of 100,000 stored Tasks validates them all
    without building them. False sends the caller to build each Task for the exact error."""
    if not every_match(KEY_PATTERN, keys):
        return False
    if not set(map(type, args)) <= {list} or not all(args):
        return False
    if not set(map(type, envs)) <= {dict}:
        return False
    names: set[Any] = set(itertools.chain.from_iterable(envs))
    if not all(map(_is_env_name, names)):
        return False
    try:  # every arg and every env value a string, each checked in one C loop
        "".join(itertools.chain.from_iterable(args))
        "".join(itertools.chain.from_iterable(map(dict.values, envs)))
    except TypeError:
        return False
    return True


def content_size(task: Task) -> int:
    """What a Task puts into its batch script before escaping: stdin bytes, and characters of
    its args and of its env's names and values."""
    env = sum(len(name) + len(value) for name, value in task.env.items())
    return len(task.stdin) + sum(map(len, task.args)) + env


class Roster(Sequence[Task]):
    """A campaign's Tasks in the order they were added, immutable: a sequence of :class:`Task`
    whose ``keys`` attribute is the tuple of their keys, in the same order.

    Tasks read back from the store (where every field was checked when read) stay stored
    documents until one is used: ``status`` of 100,000 Tasks needs their keys, not 100,000 Task
    values. The ``build`` argument turns a document into its Task the first time it is asked
    for; ``args`` reads a document's args without building it.
    """

    __slots__ = ("_args", "_build", "_index", "_items", "_size", "keys")

    def __init__(
        self,
        keys: tuple[str, ...],
        items: list[Any],
        build: Callable[[Any], Task] | None = None,
        args: Callable[[Any], tuple[str, ...]] | None = None,
        size: Callable[[Any], int] | None = None,
    ) -> None:
        self.keys = keys
        self._items = items
        self._build = build
        self._args = args
        self._size = size
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> Task: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Task, ...]: ...

    def __getitem__(self, index: int | slice) -> Task | tuple[Task, ...]:
        if isinstance(index, slice):
            return tuple(self._task(i) for i in range(*index.indices(len(self.keys))))
        return self._task(range(len(self.keys))[index])

    def _task(self, position: int) -> Task:
        item = self._items[position]
        if type(item) is not Task:
            assert self._build is not None
            item = self._items[position] = self._build(item)
        return item

    def __iter__(self) -> Iterator[Task]:
        for position in range(len(self.keys)):
            yield self._task(position)

    def _position(self, key: str) -> int | None:
        if self._index is None:
            self._index = {name: position for position, name in enumerate(self.keys)}
        return self._index.get(key)

    def get(self, key: str) -> Task | None:
        """The Task under ``key``, or None."""
        position = self._position(key)
        return None if position is None else self._task(position)

    def args(self, key: str) -> tuple[str, ...]:
        """The args of the Task under ``key`` (KeyError if none), without building the whole
        Task when ``args`` can read them from its stored document: planning checks the args of
        every Task it selects, and only ``submit`` needs their stdin and env."""
        position = self._position(key)
        if position is None:
            raise KeyError(key)
        item = self._items[position]
        if type(item) is Task or self._args is None:
            return self._task(position).args
        return self._args(item)

    def size(self, key: str) -> int:
        """:func:`content_size` of the Task under ``key`` (KeyError if none), read off its stored
        document when it can be: planning bounds the script of every allocation it makes."""
        position = self._position(key)
        if position is None:
            raise KeyError(key)
        item = self._items[position]
        if type(item) is Task or self._size is None:
            return content_size(self._task(position))
        return self._size(item)

    def by_key(self) -> Mapping[str, Task]:
        """A read-only view by key that builds only the Tasks looked up."""
        return _ByKey(self)

    def stored(self) -> Iterator[Any]:
        """Each item as it is now: a Task, or the stored document not yet built (compaction
        writes documents back unchanged instead of building every Task)."""
        return iter(self._items)

    def __add__(self, other: Iterable[Task]) -> tuple[Task, ...]:
        """The Tasks followed by ``other``'s, as a tuple: what ``Campaign.tasks + ...`` gave
        when the roster was a tuple."""
        return (*self, *other)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Roster):
            return self.keys == other.keys and tuple(self) == tuple(other)
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.keys)

    def __repr__(self) -> str:
        return f"Roster({len(self.keys)} Tasks)"


def as_roster(tasks: Iterable[Task]) -> Roster:
    """A roster of Task values (already checked), or ``tasks`` itself if it is one."""
    if isinstance(tasks, Roster):
        return tasks
    items = list(tasks)
    return Roster(tuple(task.key for task in items), items)


class _ByKey(Mapping[str, Task]):
    __slots__ = ("_roster",)

    def __init__(self, roster: Roster) -> None:
        self._roster = roster

    def __getitem__(self, key: str) -> Task:
        task = self._roster.get(key)
        if task is None:
            raise KeyError(key)
        return task

    def __contains__(self, key: object) -> bool:
        """Without building the Task (Mapping's own ``in`` would look it up)."""
        return isinstance(key, str) and self._roster._position(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._roster.keys)

    def __len__(self) -> int:
        return len(self._roster)


SLURM_ENV_PREFIX = "SLURM_"
"""No ``SLURM_*`` variable reaches a step: a Task authored with one is refused."""


def check_unique(tasks: Iterable[Task]) -> tuple[Task, ...]:
    """Return a batch being authored as a tuple, refusing two Tasks under one key and a Task
    that would set a ``SLURM_*`` variable. (Campaigns recorded before that rule still read.)"""
    batch = tuple(tasks)
    seen: set[str] = set()
    for task in batch:
        if not isinstance(task, Task):
            raise ConfigurationError(f"expected a Task, got {type(task).__name__}")
        if task.key in seen:
            raise ConfigurationError(f"Task key {task.key} appears more than once")
        seen.add(task.key)
        problem = slurm_problem(task)
        if problem is not None:
            raise ConfigurationError(problem)
    return batch


def slurm_problem(task: Task) -> str | None:
    """Why a Task being authored cannot set the environment it asks for, or None."""
    slurm = [name for name in task.env if name.startswith(SLURM_ENV_PREFIX)]
    if not slurm:
        return None
    return f"Task {task.key}: {slurm[0]} is Slurm's; no {SLURM_ENV_PREFIX}* variable reaches a step"


@contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many acyclic objects.

    Decoding 100,000 Tasks allocates enough containers to trigger full collections that scan
    every object built so far; none of these objects form cycles, so pausing it is safe and
    makes opening a large campaign about a third faster.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- JSONL --------------------------------------------------------------------------------------


@attrs.frozen
class _Line:
    """One JSONL line as written; ``stdin_file`` is still a path."""

    key: str
    args: list[str]
    stdin_file: str | None = None
    env: dict[str, str] | None = None


_LINES = line_strings(make_converter(forbid_extra_keys=True))


def _no_duplicate_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise ConfigurationError(f"field {json.dumps(name)} appears twice")
        document[name] = value
    return document


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_line(raw: bytes, *, base: Path) -> Task:
    """Parse one JSONL line (without its newline) into a Task; ``base`` resolves ``stdin_file``.

    Raises ConfigurationError with a message that the caller prefixes with the file and line.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
        raise ConfigurationError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column}; a Tasks file is UTF-8"
        ) from None
    if text.startswith("\ufeff"):
        raise ConfigurationError(
            "starts with a byte order mark (U+FEFF); save the Tasks file as UTF-8 without one"
        )
    try:
        document = json.loads(
            text, object_pairs_hook=_no_duplicate_names, parse_constant=_no_constants
        )
    except ConfigurationError:
        raise
    except json.JSONDecodeError as exc:
        raise ConfigurationError(_json_problem(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigurationError(f"not a JSON object: {input_problem(exc)}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"a Task line must be a JSON object with {_FIELDS}")
    try:
        line = _LINES.structure(document, _Line)
    except cattrs.ClassValidationError as exc:
        raise ConfigurationError(_line_problem(exc)) from None
    stdin = b""
    if line.stdin_file is not None:
        source = base / line.stdin_file
        if not line.stdin_file:  # base / "" is base: the Tasks file's own directory
            raise ConfigurationError('"stdin_file" must not be empty; leave it out for no stdin')
        if "\0" in line.stdin_file:
            raise ConfigurationError('"stdin_file" must be a path without NUL bytes')
        try:
            stdin = read_regular(source)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read stdin_file {str(source)!r}: {exc.strerror or exc}"
            ) from None
        except ConfigurationError:
            raise ConfigurationError(
                f"cannot read stdin_file {str(source)!r}: it is not a regular file"
            ) from None
    task = Task(line.key, line.args, stdin=stdin, env=line.env)
    problem = slurm_problem(task)
    if problem is not None:
        raise ConfigurationError(problem)
    return task


def _json_problem(exc: json.JSONDecodeError) -> str:
    """A JSON syntax error in the line author's words: a raw control character is named, with
    how to write it, instead of Python's "Invalid control character at" (followed by our own
    "at column")."""
    if exc.msg.startswith("Invalid control character"):
        code = ord(exc.doc[exc.pos])  # the decoder stops on the character itself
        return (
            f"not valid JSON: a raw control character (U+{code:04X}) at column {exc.colno}; "
            f"inside a string write it escaped (\\u{code:04x})"
        )
    return f"not valid JSON: {exc.msg} at column {exc.colno}"


_FIELDS = '"key", "args" and optionally "stdin_file" and "env"'
_KINDS = {
    "key": "a string",
    "args": "an array of strings",
    "stdin_file": "a string, a path relative to the Tasks file",
    "env": "an object of strings",
}
"""What each field of a Task line holds, in the words a line's author knows."""


def _line_problem(exc: cattrs.ClassValidationError) -> str:
    """A structuring failure of one line in its author's terms: unknown and missing fields by
    name, and what a field of the wrong type must be (no cattrs paths or Python types)."""
    problems = []
    with_notes, without = exc.group_exceptions()
    for sub in without:
        if isinstance(sub, cattrs.ForbiddenExtraKeysError):
            names = ", ".join(json.dumps(name) for name in sorted(sub.extra_fields))
            plural = "s" if len(sub.extra_fields) > 1 else ""
            problems.append(f"unknown field{plural} {names}; a Task line has {_FIELDS}")
        else:
            problems.append(str(sub))
    for sub, note in with_notes:
        if isinstance(sub, KeyError):
            problems.append(f'missing field "{note.name}"')
        else:
            problems.append(f'"{note.name}" must be {_KINDS.get(note.name, "something else")}')
    return "; ".join(problems)


def read_jsonl(path: str | Path) -> tuple[Task, ...]:
    """Read a Tasks file: one Task per ``\\n``-terminated line, keys unique within the file."""
    source = Path(path)
    try:
        data = read_regular(source)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {str(source)!r}: {exc.strerror or exc}") from None
    if data and not data.endswith(b"\n"):
        lineno = data.count(b"\n") + 1
        raise ConfigurationError(f"{source}:{lineno}: the last line does not end with a newline")
    with bulk():
        return _parse_lines(source, data)


def _parse_lines(source: Path, data: bytes) -> tuple[Task, ...]:
    base = source.parent
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            task = parse_line(raw, base=base)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}:{lineno}: {exc}") from None
        if task.key in seen:
            raise ConfigurationError(
                f"{source}:{lineno}: key {task.key} already appears on line {seen[task.key]}"
            )
        seen[task.key] = lineno
        tasks.append(task)
    return tuple(tasks)


__all__ = [
    "ENV_NAME_PATTERN",
    "KEY_PATTERN",
    "Env",
    "Roster",
    "Task",
    "as_roster",
    "check_unique",
    "content_size",
    "fields_valid",
    "read_jsonl",
    "slurm_problem",
]
