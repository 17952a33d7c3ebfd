"""SERVATUS.toml: Targets, Resources and Profiles.

Durations are held as whole seconds (``int``); :func:`parse_duration` and :func:`format_duration`
convert the ``[D-]H:MM:SS`` text form. Time limits are rounded up to whole minutes when loaded,
because Slurm counts ``--time`` in minutes and a plan must request exactly what it shows.

Loading happens in three steps, so every error names the key the user wrote:

1. the whole document is structured into partial tables (every key optional), which rejects
   unknown keys and bad values anywhere in the file with their dotted path;
2. the chosen profile's tables are laid over the document-level ones key by key;
3. the merged keys become a :class:`Profile`, which :func:`profile_problems` then checks as a
   whole (pairs of keys, ceilings, the launcher).
"""

from __future__ import annotations

import errno
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NewType, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from servatus.errors import ConfigurationError, Unavailable, input_problem
from servatus.files import read_regular
from servatus.strict import RECORDED_BELOW, config_integer, config_string, kind_of

DEFAULT_PROFILE = "default"
"""The name of the one profile a file without ``[profiles]`` tables defines."""

DIRECT = "direct"
APPTAINER = "apptainer"


@attrs.frozen
class Apptainer:
    """The Apptainer launcher's settings: ``executable`` (``[target] apptainer``), ``image``, and
    the extra ``binds``.

    :param executable: The ``apptainer`` executable on the compute nodes, absolute.
    :param image: The image each step runs in (``apptainer exec``), absolute, without ``:``.
    :param binds: Extra mounts, each ``SRC``, ``SRC:DST`` or ``SRC:DST:ro`` (or ``:rw``);
        ``work_root`` is always bound.
    """

    executable: str
    image: str
    binds: tuple[str, ...] = ()


@attrs.frozen
class Target:
    """Where and how to run, with ceilings that guard against mistakes.

    One attribute per ``[target]`` key of SERVATUS.toml, with these differences: durations are
    whole seconds, arrays are tuples, and a key left out takes its default (None where the
    configuration reference gives none). The Apptainer keys
    (``apptainer``, ``image``, ``binds``) are gathered in ``apptainer`` (None without them);
    ``launcher`` is the launcher's name, ``apptainer`` when those keys are set and ``direct``
    otherwise unless the file names one; ``launcher_options`` are that table's
    ``(key, value)`` pairs, sorted by key.

    :param slurm_bin: The directory holding ``sbatch``, ``squeue``, ``scancel``, ``scontrol``
        and ``srun`` on the machine that runs them, absolute.
    :param work_root: The working directory of every Task's step, absolute.
    :param log_root: Where Slurm writes the logs and the batch script its run markers; it must
        exist and be visible where Servatus reads it.
    :param partitions: The partitions a job may run in, at least one.
    :param max_tasks_per_allocation: Ceiling: Tasks (steps) in one allocation.
    :param max_cpus_per_allocation: Ceiling: CPUs one allocation may request.
    :param max_memory_mib_per_allocation: Ceiling: MiB of memory one allocation may request.
    :param max_time_limit: Ceiling: the longest time limit, in seconds.
    :param host: The SSH destination (``user@host`` or an ``ssh_config`` alias) that runs the
        Slurm commands; None runs them on this machine.
    :param account: Passed to ``sbatch --account``; None passes none.
    :param qos: Passed to ``sbatch --qos``; None passes none.
    :param constraint: A Slurm feature expression passed to ``sbatch --constraint``; None passes
        none.
    :param gpu_gres: The GRES that ``gpus`` counts, without a count (``gpu``, ``gpu:a100``,
        ``shard``); None: no GPUs.
    :param max_gpus_per_allocation: Ceiling: units of ``gpu_gres`` one allocation may request.
    :param max_allocations_per_submit: How many allocations one plan may hold, the rest deferred
        to the next plan; None: no cap.
    :param max_script_bytes: The largest batch script Servatus will send, which bounds the
        Tasks' stdin and environment written into it.
    :param apptainer: The Apptainer launcher's settings; None without them.
    :param launcher: The name of the launcher plugin that turns a Task into its step's command.
    :param launcher_options: Settings passed unchanged to that launcher.
    """

    slurm_bin: str
    work_root: str
    log_root: str
    partitions: tuple[str, ...]
    max_tasks_per_allocation: int
    max_cpus_per_allocation: int
    max_memory_mib_per_allocation: int
    max_time_limit: int
    host: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpu_gres: str | None = None
    max_gpus_per_allocation: int = 0
    max_allocations_per_submit: int | None = None
    max_script_bytes: int = 1048576
    apptainer: Apptainer | None = None
    launcher: str = DIRECT
    launcher_options: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Resources:
    """What each Task needs; an allocation of n Tasks requests n times cpus, memory and gpus.

    The ``[resources]`` keys of SERVATUS.toml, durations in seconds: ``time_limit`` is whole
    minutes, and ``signal_before_end`` is None when no pre-limit signal is asked for.

    :param cpus: CPUs per Task (``--cpus-per-task``).
    :param memory_mib: Memory per Task, in MiB.
    :param time_limit: The allocation's wall time, in seconds (whole minutes), at most the
        target's ``max_time_limit``.
    :param gpus: Units of the target's ``gpu_gres`` per Task.
    :param signal_before_end: Send ``SIGUSR1`` this many seconds before the time limit; None
        sends none. Budgeted chains and leases need it.
    """

    cpus: int
    memory_mib: int
    time_limit: int
    gpus: int = 0
    signal_before_end: int | None = None


@attrs.frozen
class Profile:
    """A named Target and Resources pair from SERVATUS.toml."""

    name: str
    """The profile's name: its ``[profiles.NAME]`` table, or ``default`` in a file without any."""
    target: Target
    """Where its Tasks run, and the ceilings they must fit."""
    resources: Resources
    """What each of its Tasks needs."""

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, name: str | None = None) -> Profile:
        """Read one profile from a SERVATUS.toml file.

        ``name`` beats the document's ``default_profile``; without either, a sole profile
        selects itself, and a file without ``[profiles]`` tables is the one profile
        ``"default"``. Raises :class:`~servatus.errors.ConfigurationError` naming the file and
        key.

        :param path: The SERVATUS.toml file to read.
        :param name: The profile to read (``--profile``); None: the file's ``default_profile``,
            or its sole profile.
        """
        where = os.fspath(path)
        document = _read_document(path, where)
        chosen = _choose(document, name, where)
        table = document.profiles.get(_Text(chosen), _ProfileTable())
        profile = _resolve(chosen, document, table, where)
        problems = profile_problems(profile)
        if problems:
            raise ConfigurationError(f"{where}: profile {chosen!r}: {'; '.join(problems)}")
        return profile


# Durations ------------------------------------------------------------------------------------

_DURATION = re.compile(
    r"(?:(?P<days>[0-9]+)-)?(?P<hours>[0-9]+):(?P<minutes>[0-5][0-9]):(?P<seconds>[0-5][0-9])"
)


def parse_duration(text: str) -> int:
    """Seconds in ``[D-]H:MM:SS``; without days the hours may exceed 23 (``72:00:00``)."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None or (match["days"] is not None and int(match["hours"]) > 23):
        raise ConfigurationError(
            f"invalid duration {text!r}: expected [D-]H:MM:SS, such as 12:00:00 or 3-00:00:00"
        )
    days = int(match["days"] or 0)
    return ((days * 24 + int(match["hours"])) * 60 + int(match["minutes"])) * 60 + int(
        match["seconds"]
    )


MAX_DURATION = (RECORDED_BELOW - 1) // 60 * 60
"""The longest time limit or budget, in seconds (795364-07:32:00), in whole minutes below
``servatus.strict.RECORDED_BELOW``: an intent records it before its ``sbatch``, so a longer
one would be sent and then refused by every later read."""


def format_duration(seconds: int) -> str:
    """``[D-]HH:MM:SS``, as Servatus prints durations: ``3-00:00:00``, ``16:00:00``."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {seconds}")
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def round_up_to_minute(seconds: int) -> int:
    """The smallest whole number of minutes, in seconds, that is at least ``seconds``."""
    return -(-seconds // 60) * 60  # in integers: a float loses a huge budget's seconds


def parse_time_limit(text: str) -> int:
    """A positive time limit in seconds, rounded up to whole minutes."""
    seconds = round_up_to_minute(parse_duration(text))
    if seconds <= 0:
        raise ConfigurationError(f"invalid time limit {text!r}: must be longer than zero")
    return seconds


# Capacity -------------------------------------------------------------------------------------


def capacity(target: Target, resources: Resources) -> int:
    """How many Tasks of ``resources`` fit one allocation under ``target``'s ceilings.

    Counts only the ceilings a Task's size divides (tasks, CPUs, memory, and GPUs when it asks
    for any); 0 when one Task exceeds one of them. The time limit is
    :func:`profile_problems`'s to check. A loaded Profile always has at least 1.

    :param target: The target whose ceilings apply.
    :param resources: One Task's resources.
    """
    fits = [
        target.max_tasks_per_allocation,
        target.max_cpus_per_allocation // resources.cpus,
        target.max_memory_mib_per_allocation // resources.memory_mib,
    ]
    if resources.gpus > 0:
        fits.append(target.max_gpus_per_allocation // resources.gpus)
    return max(0, min(fits))


# Value rules ----------------------------------------------------------------------------------
# Each rule checks one value and returns it, or raises ConfigurationError saying what is wrong.
# The same rules back the TOML hooks and profile_problems, so a Profile built in Python or read
# from a saved plan is held to exactly what SERVATUS.toml is.

_T = TypeVar("_T")


def _text(value: object) -> str:
    """A non-empty string without control characters (it reaches command lines and scripts)."""
    text = config_string(value)
    if not text:
        raise ConfigurationError("must not be empty")
    if not text.isprintable():
        raise ConfigurationError(f"{text!r} contains a control character")
    return text


_SSH_DESTINATION = re.compile(r"[A-Za-z0-9_.@:\[\]%/-]+")
"""What the ssh transport accepts as one destination word: refused here already, so a file with
another (``$(...)``, ``;``, a quote) fails at load, not at the first command."""


def _host(value: object) -> str:
    host = _text(value)
    if host.startswith("-") or not _SSH_DESTINATION.fullmatch(host):
        raise ConfigurationError(f"{host!r} is not an SSH destination ([user@]host or an alias)")
    return host


_NOT_ON_A_DIRECTIVE = frozenset("\"'\\#")


def _directive_word(value: object) -> str:
    """A value that goes on an ``#SBATCH`` line: printable ASCII without spaces, quotes,
    backslashes or ``#``, which ``sbatch`` would misread (the renderer refuses them too)."""
    text = _text(value)
    found = sorted({c for c in text if not "!" <= c <= "~" or c in _NOT_ON_A_DIRECTIVE})
    if found:
        shown = " or ".join(repr(char) for char in found)
        raise ConfigurationError(
            f"{text!r} must not contain {shown}: it goes on an #SBATCH line, which takes "
            "printable ASCII without spaces, quotes, backslashes or '#'"
        )
    return text


def _ascii_path(value: object) -> str:
    """An absolute path of printable ASCII (``slurm_bin``: its programs are named in scripts)."""
    path = _absolute(value)
    if not all(" " <= char <= "~" for char in path):
        raise ConfigurationError(f"{path!r} must be printable ASCII")
    return path


def _absolute(value: object) -> str:
    path = _text(value)
    if not path.startswith("/"):
        raise ConfigurationError(f"{path!r} is not an absolute path")
    return path


def _without(characters: str, *, directive: bool = False) -> Callable[[object], str]:
    def rule(value: object) -> str:
        path = _absolute(value)
        if directive:
            _directive_word(path)
        found = sorted({char for char in path if char in characters})
        if found:
            shown = " or ".join(repr(char) for char in found)
            raise ConfigurationError(f"{path!r} must not contain {shown}")
        return path

    return rule


_work_root = _without(",:", directive=True)
_log_root = _without("%", directive=True)
_image = _without(":")


def _positive(value: object) -> int:
    number = config_integer(value)
    if number <= 0:
        raise ConfigurationError(f"must be positive, got {number}")
    return number


def _count(value: object) -> int:
    number = config_integer(value)
    if number < 0:
        raise ConfigurationError(f"must not be negative, got {number}")
    return number


def _partition(value: object) -> str:
    name = _text(value)
    if "," in name or any(char.isspace() for char in name):
        raise ConfigurationError(f"{name!r} is not one partition name")
    return _directive_word(name)


GRES = re.compile(r"[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?")
"""A count-free Slurm GRES: a name (``gpu``, ``shard``) and an optional ``:type`` (``a100_80GB``,
``nvidia_a100_3g.39gb``), each of letters, digits, ``_``, ``-`` and ``.``. It is pasted into
``--gres`` options of ``sbatch`` and of every ``srun`` line, so nothing else is allowed."""


def _gres(value: object) -> str:
    gres = _text(value)
    if "," in gres or any(char.isspace() for char in gres):
        raise ConfigurationError(f"{gres!r} is not one GRES name")
    if ":" in gres and gres.rsplit(":", 1)[1].isdigit():
        raise ConfigurationError(f"{gres!r} has a count; give the count-free GRES and set gpus")
    if not GRES.fullmatch(gres):
        raise ConfigurationError(
            f"{gres!r} is not a GRES name: use NAME or NAME:TYPE of letters, digits, "
            "'_', '-' and '.', such as gpu or gpu:a100_80GB"
        )
    return gres


def _bind(value: object) -> str:
    bind = _text(value)
    parts = bind.split(":")
    bad = (
        "," in bind
        or len(parts) > 3
        or not all(part.startswith("/") for part in parts[:2])
        or (len(parts) == 3 and parts[2] not in ("ro", "rw"))
    )
    if bad:
        raise ConfigurationError(
            f"{bind!r} is not SRC[:DST[:ro|rw]] with absolute SRC and DST and no ','"
        )
    return bind


MAX_SIGNAL_BEFORE_END = 65535
"""Seconds: Slurm keeps ``--signal`` times in 16 bits."""


def _lead(text: object) -> int:
    """A positive duration, such as ``signal_before_end``."""
    seconds = parse_duration(config_string(text))
    if seconds <= 0:
        raise ConfigurationError(f"invalid duration {text!r}: must be longer than zero")
    return seconds


def _limit(text: object) -> int:
    return parse_time_limit(config_string(text))


def _whole_minutes(value: object) -> int:
    seconds = _positive(value)
    if seconds % 60:
        raise ConfigurationError(f"{seconds} s is not a whole number of minutes")
    return seconds


# The TOML document, every key optional ---------------------------------------------------------

_Text = NewType("_Text", str)
_Host = NewType("_Host", str)
_Absolute = NewType("_Absolute", str)
_WorkRoot = NewType("_WorkRoot", str)
_LogRoot = NewType("_LogRoot", str)
_Image = NewType("_Image", str)
_Partition = NewType("_Partition", str)
_Gres = NewType("_Gres", str)
_Bind = NewType("_Bind", str)
_Directive = NewType("_Directive", str)
_AsciiPath = NewType("_AsciiPath", str)
_Positive = NewType("_Positive", int)
_Count = NewType("_Count", int)
_TimeLimit = NewType("_TimeLimit", int)
_Lead = NewType("_Lead", int)

_RULES: dict[Any, Callable[[object], Any]] = {
    str: config_string,
    int: config_integer,
    _Text: _text,
    _Host: _host,
    _Absolute: _absolute,
    _WorkRoot: _work_root,
    _LogRoot: _log_root,
    _Image: _image,
    _Partition: _partition,
    _Gres: _gres,
    _Bind: _bind,
    _Directive: _directive_word,
    _AsciiPath: _ascii_path,
    _Positive: _positive,
    _Count: _count,
    _TimeLimit: _limit,
    _Lead: _lead,
}


@attrs.frozen
class _TargetTable:
    """``[target]`` or ``[profiles.NAME.target]`` as written; ``None`` means absent."""

    host: _Host | None = None
    slurm_bin: _AsciiPath | None = None
    work_root: _WorkRoot | None = None
    log_root: _LogRoot | None = None
    partitions: tuple[_Partition, ...] | None = None
    max_tasks_per_allocation: _Positive | None = None
    max_cpus_per_allocation: _Positive | None = None
    max_memory_mib_per_allocation: _Positive | None = None
    max_time_limit: _TimeLimit | None = None
    account: _Directive | None = None
    qos: _Directive | None = None
    constraint: _Directive | None = None
    gpu_gres: _Gres | None = None
    max_gpus_per_allocation: _Count | None = None
    max_allocations_per_submit: _Positive | None = None
    max_script_bytes: _Positive | None = None
    apptainer: _Absolute | None = None
    image: _Image | None = None
    binds: tuple[_Bind, ...] | None = None
    launcher: _Text | None = None
    launcher_options: dict[_Text, str] | None = None


@attrs.frozen
class _ResourcesTable:
    """``[resources]`` or ``[profiles.NAME.resources]`` as written; ``None`` means absent."""

    cpus: _Positive | None = None
    memory_mib: _Positive | None = None
    time_limit: _TimeLimit | None = None
    gpus: _Count | None = None
    signal_before_end: _Lead | None = None


@attrs.frozen
class _ProfileTable:
    target: _TargetTable = _TargetTable()
    resources: _ResourcesTable = _ResourcesTable()


@attrs.frozen
class _Document:
    default_profile: _Text | None = None
    target: _TargetTable = _TargetTable()
    resources: _ResourcesTable = _ResourcesTable()
    profiles: dict[_Text, _ProfileTable] = attrs.Factory(dict)


# The converter ----------------------------------------------------------------------------------


def _make_converter() -> cattrs.Converter:
    converter = make_converter(forbid_extra_keys=True)
    for kind, rule in _RULES.items():
        converter.register_structure_hook(kind, _hook(rule))

    def is_tuple(kind: Any) -> bool:
        args = get_args(kind)
        return get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis

    def strict_tuple(kind: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
        inner = homogenous_tuple_structure_factory(kind, converter)

        def structure(value: Any, kind: Any) -> Any:
            if not isinstance(value, list | tuple):
                raise ConfigurationError(f"expected an array, got {kind_of(value)}")
            return inner(value, kind)

        return structure

    converter.register_structure_hook_factory(is_tuple, strict_tuple)

    def options_in(value: Any, _: Any) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(converter.structure(value, dict[_Text, str]).items()))

    def options_out(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return dict(pairs)

    converter.register_structure_hook(
        Target,
        make_dict_structure_fn(
            Target, converter, launcher_options=override(struct_hook=options_in)
        ),
    )
    converter.register_unstructure_hook(
        Target,
        make_dict_unstructure_fn(
            Target, converter, launcher_options=override(unstruct_hook=options_out)
        ),
    )
    return converter


def _hook(rule: Callable[[object], _T]) -> Callable[[Any, Any], _T]:
    def structure(value: Any, _: Any) -> _T:
        return rule(value)

    return structure


_converter = _make_converter()


def _problems(exc: BaseException, path: tuple[str, ...], kind: Any = None) -> Iterator[str]:
    """One ``dotted.path: what is wrong`` line per leaf of a cattrs error tree."""
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            yield from _problems(sub, (*path, note.name), note.type)
        for sub in without:
            yield from _problems(sub, path)
    elif isinstance(exc, IterableValidationError):
        with_index, without = exc.group_exceptions()
        for sub, index in with_index:
            step = (
                (*path[:-1], f"{path[-1]}[{index.index}]")
                if isinstance(index.index, int) and path
                else (*path, _key(str(index.index)))
            )
            yield from _problems(sub, step, index.type)
        for sub in without:
            yield from _problems(sub, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        for extra in sorted(exc.extra_fields):
            yield f"{_dotted((*path, _key(extra)))}: unknown key"
    else:
        yield f"{_dotted(path)}: {_describe(exc, kind)}"


def _describe(exc: BaseException, kind: Any) -> str:
    if isinstance(exc, ConfigurationError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required key missing"
    if attrs.has(kind) or (isinstance(exc, AttributeError) and "items" in str(exc)):
        return "expected a table"
    return f"invalid value ({type(exc).__name__}: {exc})"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(name: str) -> str:
    """A TOML key as the user would write it in a dotted path."""
    return name if _BARE_KEY.fullmatch(name) else '"' + name.replace('"', '\\"') + '"'


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "(document)"


def _structure(data: Any, kind: type[_T], where: str) -> _T:
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where}: expected a table, got {kind_of(data)}")
    try:
        return _converter.structure(data, kind)
    except (ClassValidationError, IterableValidationError, ConfigurationError) as exc:
        raise ConfigurationError(f"{where}: {'; '.join(_problems(exc, ()))}") from exc


# Loading ----------------------------------------------------------------------------------------


def _read_document(path: str | os.PathLike[str], where: str) -> _Document:
    try:
        data = read_regular(path)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno in (errno.ENOENT, errno.EACCES, errno.EISDIR, errno.ENOTDIR, errno.ELOOP):
            raise ConfigurationError(f"{where}: cannot read: {reason}") from exc
        raise Unavailable(f"{where}: cannot read: {reason}") from exc
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: cannot read: {exc}") from exc
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{where}: invalid TOML: not UTF-8 ({exc.reason})") from exc
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise ConfigurationError(f"{where}: invalid TOML: {input_problem(exc)}") from exc
    return _structure(raw, _Document, where)


def _choose(document: _Document, name: str | None, where: str) -> str:
    """The profile to load: explicit name, else ``default_profile``, else the only one."""
    names = sorted(document.profiles)
    known = ", ".join(names) if names else f"{DEFAULT_PROFILE} (no [profiles] tables)"
    wanted = document.default_profile
    if wanted is not None and wanted not in document.profiles:
        raise ConfigurationError(
            f"{where}: default_profile {wanted!r} names no profile; known: {known}"
        )
    if name is not None:
        if name in document.profiles or (not names and name == DEFAULT_PROFILE):
            return name
        raise ConfigurationError(f"{where}: unknown profile {name!r}; known: {known}")
    if wanted is not None:
        return wanted
    if len(names) == 1:
        return names[0]
    if not names:
        return DEFAULT_PROFILE
    raise ConfigurationError(
        f"{where}: several profiles ({known}) and no default_profile; "
        "choose one with --profile NAME (name= in Python) or set default_profile"
    )


def _overlay(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over``'s keys on ``base``'s, key by key; a table value is itself merged key by key."""
    merged = {key: value for key, value in base.items() if value is not None}
    for key, value in over.items():
        if value is None:
            continue
        below = merged.get(key)
        merged[key] = {**below, **value} if isinstance(below, dict) else value
    return merged


def _required(kind: type[Any], present: Mapping[str, Any], table: str) -> list[str]:
    return [
        f"{table}.{field.name}"
        for field in attrs.fields(kind)
        if field.default is attrs.NOTHING and field.name not in present
    ]


def _resolve(name: str, document: _Document, table: _ProfileTable, where: str) -> Profile:
    target = _overlay(
        attrs.asdict(document.target, recurse=False), attrs.asdict(table.target, recurse=False)
    )
    resources = _overlay(
        attrs.asdict(document.resources, recurse=False),
        attrs.asdict(table.resources, recurse=False),
    )
    executable = target.pop("apptainer", None)
    image = target.pop("image", None)
    binds = target.pop("binds", None)
    options = target.pop("launcher_options", {})
    launcher = target.pop("launcher", None)

    missing = _required(Target, target, "target") + _required(Resources, resources, "resources")
    if missing:
        places = (
            "[target] and [resources]"
            if name not in document.profiles
            else (f"the document-level tables or [profiles.{_key(name)}]")
        )
        raise ConfigurationError(
            f"{where}: profile {name!r}: missing {', '.join(missing)}; set them in {places}"
        )

    problems = []
    if (executable is None) != (image is None):
        problems.append("target.apptainer and target.image: set both or neither")
    if binds and executable is None:
        problems.append("target.binds needs target.apptainer and target.image")
    if problems:
        raise ConfigurationError(f"{where}: profile {name!r}: {'; '.join(problems)}")

    apptainer = (
        Apptainer(executable=executable, image=image, binds=tuple(binds or ()))
        if executable is not None and image is not None
        else None
    )
    if launcher is None:
        launcher = APPTAINER if apptainer is not None else DIRECT
    elif launcher == DIRECT:
        # The one way a profile can leave inherited Apptainer keys unused: TOML has no null.
        apptainer = None
    return Profile(
        name=name,
        target=Target(
            **target,
            apptainer=apptainer,
            launcher=launcher,
            launcher_options=tuple(sorted(options.items())),
        ),
        resources=Resources(**resources),
    )


# Checks over a whole Profile --------------------------------------------------------------------

_TARGET_RULES: dict[str, Callable[[object], object]] = {
    "slurm_bin": _ascii_path,
    "work_root": _work_root,
    "log_root": _log_root,
    "max_tasks_per_allocation": _positive,
    "max_cpus_per_allocation": _positive,
    "max_memory_mib_per_allocation": _positive,
    "max_time_limit": _whole_minutes,
    "max_gpus_per_allocation": _count,
    "max_script_bytes": _positive,
    "launcher": _text,
}
_TARGET_OPTIONAL_RULES: dict[str, Callable[[object], object]] = {
    "host": _host,
    "account": _directive_word,
    "qos": _directive_word,
    "constraint": _directive_word,
    "gpu_gres": _gres,
    "max_allocations_per_submit": _positive,
}
_RESOURCES_RULES: dict[str, Callable[[object], object]] = {
    "cpus": _positive,
    "memory_mib": _positive,
    "time_limit": _whole_minutes,
    "gpus": _count,
}


def _check(path: str, rule: Callable[[object], object], value: object) -> Iterator[str]:
    try:
        rule(value)
    except ConfigurationError as exc:
        yield f"{path}: {exc}"


def _value_problems(profile: Profile) -> Iterator[str]:
    target, resources = profile.target, profile.resources
    for field, rule in _TARGET_RULES.items():
        yield from _check(f"target.{field}", rule, getattr(target, field))
    for field, rule in _TARGET_OPTIONAL_RULES.items():
        if getattr(target, field) is not None:
            yield from _check(f"target.{field}", rule, getattr(target, field))
    if not target.partitions:
        yield "target.partitions: must name at least one partition"
    for index, partition in enumerate(target.partitions):
        yield from _check(f"target.partitions[{index}]", _partition, partition)
    if target.apptainer is not None:
        yield from _check("target.apptainer", _absolute, target.apptainer.executable)
        yield from _check("target.image", _image, target.apptainer.image)
        for index, bind in enumerate(target.apptainer.binds):
            yield from _check(f"target.binds[{index}]", _bind, bind)
    for key, value in target.launcher_options:
        yield from _check(f"target.launcher_options.{_key(key)}", _text, key)
        yield from _check(f"target.launcher_options.{_key(key)}", config_string, value)
    for field, rule in _RESOURCES_RULES.items():
        yield from _check(f"resources.{field}", rule, getattr(resources, field))
    if resources.signal_before_end is not None:
        yield from _check("resources.signal_before_end", _positive, resources.signal_before_end)


def _pair_problems(profile: Profile) -> Iterator[str]:
    target, resources = profile.target, profile.resources
    if (target.gpu_gres is None) != (target.max_gpus_per_allocation == 0):
        yield (
            "target.gpu_gres and target.max_gpus_per_allocation: set both or neither "
            f"(gpu_gres {'unset' if target.gpu_gres is None else repr(target.gpu_gres)}, "
            f"max_gpus_per_allocation {target.max_gpus_per_allocation})"
        )
    if resources.gpus > 0 and target.gpu_gres is None:
        yield f"resources.gpus = {resources.gpus} needs target.gpu_gres"
    if target.launcher == APPTAINER and target.apptainer is None:
        yield 'target.launcher = "apptainer" needs target.apptainer and target.image'
    if target.launcher == DIRECT and target.apptainer is not None:
        yield 'target.launcher = "direct" would ignore target.apptainer and target.image'
    lead = resources.signal_before_end
    if lead is not None and lead >= resources.time_limit:
        yield (
            f"resources.signal_before_end ({format_duration(lead)}) must be shorter than "
            f"resources.time_limit ({format_duration(resources.time_limit)})"
        )
    if lead is not None and lead > MAX_SIGNAL_BEFORE_END:
        yield (
            f"resources.signal_before_end ({format_duration(lead)}) must be at most "
            f"{format_duration(MAX_SIGNAL_BEFORE_END)}: Slurm keeps --signal times in 16 bits"
        )


def _ceiling_problems(profile: Profile) -> Iterator[str]:
    target, resources = profile.target, profile.resources
    ceilings = [
        ("cpus", resources.cpus, "max_cpus_per_allocation", target.max_cpus_per_allocation),
        (
            "memory_mib",
            resources.memory_mib,
            "max_memory_mib_per_allocation",
            target.max_memory_mib_per_allocation,
        ),
        ("gpus", resources.gpus, "max_gpus_per_allocation", target.max_gpus_per_allocation),
    ]
    for need, amount, ceiling, most in ceilings:
        if amount > most:
            yield f"resources.{need} = {amount} exceeds target.{ceiling} = {most}"
    if resources.time_limit > target.max_time_limit:
        yield (
            f"resources.time_limit = {format_duration(resources.time_limit)} exceeds "
            f"target.max_time_limit = {format_duration(target.max_time_limit)}"
        )
    if resources.time_limit > MAX_DURATION:
        yield (
            f"resources.time_limit = {format_duration(resources.time_limit)} is longer than a "
            f"campaign records (at most {format_duration(MAX_DURATION)})"
        )


def profile_problems(profile: Profile) -> tuple[str, ...]:
    """Everything wrong with a Profile, one ``key: reason`` each; empty when it is usable.

    Checks each value, the pairs of keys that go together, the launcher, and that one Task fits
    every ceiling. Whether the named launcher is installed is for planning to decide.

    :param profile: A profile, typically built or changed in Python (``attrs.evolve``): one
        :meth:`~servatus.Profile.load` returns has none.
    """
    values = tuple(_value_problems(profile))
    if values:
        return values
    return (*_pair_problems(profile), *_ceiling_problems(profile))


# Documents ----------------------------------------------------------------------------------------


def profile_to_document(profile: Profile) -> dict[str, Any]:
    """The Profile as JSON-able data (durations in seconds), as a saved plan embeds it."""
    document: dict[str, Any] = _converter.unstructure(profile)
    return document


def profile_from_document(data: Any, *, where: str = "profile") -> Profile:
    """The inverse of :func:`profile_to_document`, held to the same rules as SERVATUS.toml."""
    profile = _structure(data, Profile, where)
    problems = profile_problems(profile)
    if problems:
        raise ConfigurationError(f"{where}: profile {profile.name!r}: {'; '.join(problems)}")
    return profile


def target_identity(target: Target) -> str:
    """The Target as canonical JSON: how a submission remembers where it went, so evidence is
    always read from the Attempt's original target."""
    return json.dumps(_converter.unstructure(target), sort_keys=True, separators=(",", ":"))


def target_from_identity(text: str) -> Target:
    """The inverse of :func:`target_identity`."""
    return _structure(json.loads(text), Target, "recorded target")


__all__ = [
    "APPTAINER",
    "DEFAULT_PROFILE",
    "DIRECT",
    "MAX_DURATION",
    "Apptainer",
    "Profile",
    "Resources",
    "Target",
    "capacity",
    "format_duration",
    "parse_duration",
    "parse_time_limit",
    "profile_from_document",
    "profile_problems",
    "profile_to_document",
    "round_up_to_minute",
    "target_from_identity",
    "target_identity",
]
