"""Budgeted continuation: a Task's lifetime run-time budget and the chain of links that spends it.

Pure arithmetic over values, for planning to call; nothing here reads the campaign or Slurm.
A budget is a lifetime total per Task, never an increment: what a Task may still run is its
budget minus its measured run time, and that rest is cut into full ``time_limit`` links and one
shorter last link of whole minutes. Durations are whole seconds, as in :mod:`servatus.config`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from servatus.config import (
    MAX_DURATION,
    Profile,
    format_duration,
    parse_duration,
    round_up_to_minute,
)
from servatus.engine.status_values import YIELD_EXIT, Execution
from servatus.errors import ConfigurationError
from servatus.words import plural

MAX_LINKS = 32
"""The most links one chain has: ``--max-links`` takes 1 to 32, and a budget that needs more
plans 32 (with a warning) rather than hundreds of queued jobs."""

_SLACK = 60
"""Seconds Slurm may send the pre-limit signal early (``--signal``'s documented lead), so a link
whose limit is at most this much more than ``signal_before_end`` may be warned as it starts: a
link that short is dropped rather than queued."""


def _budget(value: str | int | None) -> int | None:
    """A budget in whole minutes (seconds), from ``[D-]HH:MM:SS`` text or seconds, rounded up."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ConfigurationError:
            raise ConfigurationError(
                f"invalid budget {value!r}: expected [D-]HH:MM:SS, such as 3-00:00:00"
            ) from None
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise ConfigurationError(f"invalid budget {value!r}: expected [D-]HH:MM:SS or seconds")
    if seconds <= 0:
        raise ConfigurationError(f"invalid budget {value!r}: must be longer than zero")
    rounded = round_up_to_minute(seconds)
    if rounded > MAX_DURATION:
        raise ConfigurationError(
            f"invalid budget {value!r}: longer than a campaign records "
            f"(at most {format_duration(MAX_DURATION)})"
        )
    return rounded


def _max_links(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LINKS:
        raise ConfigurationError(f"invalid --max-links {value!r}: expected 1 to {MAX_LINKS}")
    return value


@attrs.frozen
class Continuation:
    """What ``plan --budget D --max-links K`` asks for; at least one of the two.

    ``budget`` is each selected Task's lifetime run time in seconds (text is parsed as
    ``[D-]HH:MM:SS``; either is rounded up to whole minutes). ``max_links`` caps every chain;
    without a budget it plans that many full links.
    """

    budget: int | None = attrs.field(default=None, converter=_budget)
    """Each selected Task's lifetime run time in seconds, or None for ``max_links`` alone."""
    max_links: int | None = attrs.field(default=None, converter=_max_links)
    """The most links one chain has, 1 to :data:`MAX_LINKS`; None: as many as the budget needs
    (up to :data:`MAX_LINKS`)."""

    def __attrs_post_init__(self) -> None:
        if self.budget is None and self.max_links is None:
            raise ConfigurationError("a continuation needs a budget, --max-links, or both")


@attrs.frozen
class Link:
    """One allocation of a chain: its 1-based ``position`` of ``of`` links, and its time limit."""

    position: int
    """Which link, from 1."""
    of: int
    """How many links the chain has."""
    time_limit: int
    """This link's time limit in seconds, whole minutes."""

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.position <= self.of <= MAX_LINKS:
            raise ValueError(f"link {self.position}/{self.of} is not a position in a chain")
        if self.time_limit <= 0 or self.time_limit % 60:
            raise ValueError(f"a link's time limit is whole minutes, got {self.time_limit} s")

    @property
    def last(self) -> bool:
        """The chain's last link: it hands nothing on."""
        return self.position == self.of

    @property
    def label(self) -> str:
        """How the plan names it beside its allocation: ``link 1/5``."""
        return f"link {self.position}/{self.of}"


class Extends(enum.Enum):
    """What an extension continues past: a success, or a result the probe reports valid."""

    SUCCEEDED = "SUCCEEDED"
    """The Task's latest work succeeded."""
    VALID = "VALID"
    """The result probe reports its result valid."""


@attrs.frozen
class Extension:
    """A Task that ``--retry KEY --budget D`` runs again past a finished result."""

    key: str
    """The Task's key."""
    extends: Extends
    """What it continues past."""


@attrs.frozen
class Limits:
    """What of a Profile the link arithmetic reads; every link is at most ``time_limit``, which
    is at most ``max_time_limit`` (as :func:`servatus.config.profile_problems` already holds)."""

    time_limit: int
    max_time_limit: int
    signal_before_end: int | None = None

    def __attrs_post_init__(self) -> None:
        full, lead = self.time_limit, self.signal_before_end
        if full <= 0 or full % 60:
            raise ValueError(f"time_limit is whole minutes, got {full} s")
        if full > self.max_time_limit:
            raise ValueError(f"time_limit {full} s exceeds max_time_limit {self.max_time_limit} s")
        if lead is not None and not 0 < lead < full:
            raise ValueError(f"signal_before_end {lead} s is not within time_limit {full} s")

    @classmethod
    def of(cls, profile: Profile) -> Limits:
        return cls(
            time_limit=profile.resources.time_limit,
            max_time_limit=profile.target.max_time_limit,
            signal_before_end=profile.resources.signal_before_end,
        )


_NEEDS_SIGNAL = (
    "--budget needs resources.signal_before_end: a link's steps must be told before its limit "
    "so that they can save their work and hand on"
)


def limits_for(continuation: Continuation, profile: Profile) -> Limits:
    """The profile's limits for ``continuation``; a budget without ``signal_before_end`` is a
    :class:`ConfigurationError` naming the profile and the key to set."""
    if continuation.budget is not None and profile.resources.signal_before_end is None:
        raise ConfigurationError(f"profile {profile.name!r}: {_NEEDS_SIGNAL}")
    return Limits.of(profile)


@attrs.frozen
class _Lengths:
    lengths: tuple[int, ...]
    dropped: int = 0
    capped: bool = False
    """The budget needs more than MAX_LINKS links (what the plan warns of)."""
    short: bool = False
    """The links end before the budget does: capped at MAX_LINKS, or at an explicit K."""


def _lengths(run_time: int, continuation: Continuation, limits: Limits) -> _Lengths:
    """The time limits of one Task's links: full links, then the rest rounded down to whole
    minutes unless it is at most a minute longer than ``signal_before_end``; at most K (or
    MAX_LINKS)."""
    full = limits.time_limit
    most = continuation.max_links or MAX_LINKS
    if continuation.budget is None:
        return _Lengths((full,) * most)
    if limits.signal_before_end is None:
        raise ConfigurationError(_NEEDS_SIGNAL)
    left = continuation.budget - run_time
    if left <= 0:
        return _Lengths(())
    count, rest = divmod(left, full)
    rest -= rest % 60
    keep = rest > 0 and rest - limits.signal_before_end > _SLACK
    if count + keep > most:  # capped before the rest: the rest is neither kept nor dropped
        return _Lengths((full,) * most, capped=continuation.max_links is None, short=True)
    if rest and not keep:
        return _Lengths((full,) * count, dropped=rest)
    return _Lengths((full,) * count + ((rest,) if keep else ()))


def _chained(lengths: Sequence[int]) -> tuple[Link, ...]:
    return tuple(Link(i, len(lengths), length) for i, length in enumerate(lengths, 1))


def links(run_time: int, continuation: Continuation, limits: Limits) -> tuple[Link, ...]:
    """One Task's links for ``run_time`` seconds already run; empty when it has no room left.

    Their time limits never add up to more than the budget left, none exceeds ``time_limit``
    (so none exceeds ``max_time_limit``), and there are never more than K of them.
    """
    return _chained(_lengths(run_time, continuation, limits).lengths)


def has_room(run_time: int, continuation: Continuation, limits: Limits) -> bool:
    """Whether one more link fits the Task's budget; without room it is held ``SPENT``."""
    return bool(_lengths(run_time, continuation, limits).lengths)


def stops_short(run_time: int, continuation: Continuation, limits: Limits) -> bool:
    """Whether the links planned for ``run_time`` end before the Task's budget does (capped at
    K or :data:`MAX_LINKS`), so that the budget left after all of them still has room.

    Such a Task's last link is not the last of its budget: a 75 there yields rather than says
    the budget is spent, and planning the same budget again continues it.
    """
    return _lengths(run_time, continuation, limits).short


@attrs.frozen
class Planned:
    """One Task of a chain as the plan shows it: its measured run time, its budget left
    (``None`` without a budget) and its own number of links (``SERVATUS_LINKS``).

    ``dropped`` is a rest of its budget too short for a link; ``capped`` says its budget needs
    more than :data:`MAX_LINKS` links.
    """

    key: str
    run_time: int
    budget_left: int | None
    links: int
    dropped: int = 0
    capped: bool = False


@attrs.frozen
class Chain:
    """The links of one packed allocation and the Tasks that run in it.

    The chain is sized for its neediest Task; every Task runs in the chain's first
    ``Planned.links`` links and learns its own budget, so Tasks with less left stop earlier.
    """

    links: tuple[Link, ...]
    tasks: tuple[Planned, ...]

    @property
    def uneven(self) -> bool:
        """Tasks with different run times share this chain under a budget."""
        return len({task.budget_left for task in self.tasks}) > 1


def chain(
    run_times: Sequence[tuple[str, int]], continuation: Continuation, limits: Limits
) -> Chain:
    """The chain of one allocation whose slots hold ``run_times`` (key, seconds run), in slot
    order. Every Task must have room (hold the others ``SPENT`` before packing)."""
    if not run_times:
        raise ValueError("a chain needs at least one Task")
    tasks = []
    for key, run_time in run_times:
        own = _lengths(run_time, continuation, limits)
        if not own.lengths:
            raise ValueError(f"{key}: no room for one more link; hold it SPENT")
        budget = continuation.budget
        left = None if budget is None else budget - run_time
        tasks.append(Planned(key, run_time, left, len(own.lengths), own.dropped, own.capped))
    # A Task with more budget left never has fewer or shorter links: the least run is neediest.
    neediest = min(run_time for _, run_time in run_times)
    return Chain(_chained(_lengths(neediest, continuation, limits).lengths), tuple(tasks))


def link_slots(chains: Iterable[Chain]) -> dict[int, int]:
    """How many slots the chains hold at each time limit: every link of a chain holds all of
    its slots, run or not, so every link counts in the plan's totals at its own limit."""
    slots: Counter[int] = Counter()
    for each in chains:
        for link in each.links:
            slots[link.time_limit] += len(each.tasks)
    return dict(slots)


def _some(keys: Sequence[str], shown: int = 5) -> str:
    named = ", ".join(keys[:shown])
    more = len(keys) - shown
    return f"{named} and {more} more" if more > 0 else named


def _tasks(keys: Sequence[str]) -> str:
    return f"{keys[0]}" if len(keys) == 1 else f"{len(keys)} Tasks ({_some(keys)})"


def dropped_rest(run_time: int, continuation: Continuation, limits: Limits) -> int:
    """The budget left that is too short for a link (0 if none): for a Task held ``SPENT``
    with budget left, its whole rest, which the plan warns of as it does a chain's."""
    return _lengths(run_time, continuation, limits).dropped


def chain_warnings(
    chains: Iterable[Chain], limits: Limits, spent: Iterable[tuple[str, int]] = ()
) -> tuple[str, ...]:
    """What the chains plan short of what was asked, one line per kind, naming the Tasks:
    rests too short for a link (a chain's, and ``spent``'s: the keys and dropped rests of
    Tasks held ``SPENT`` with budget left), budgets beyond :data:`MAX_LINKS` links, packed
    Tasks whose run times differ."""
    dropped: dict[int, list[str]] = {}
    for key, rest in spent:
        dropped.setdefault(rest, []).append(key)
    capped: list[str] = []
    uneven: list[str] = []
    for each in chains:
        for task in each.tasks:
            if task.dropped:
                dropped.setdefault(task.dropped, []).append(task.key)
            if task.capped:
                capped.append(task.key)
        if each.uneven:
            uneven.append("+".join(task.key for task in each.tasks))
    lines = []
    lead = format_duration(limits.signal_before_end or 0)
    for rest, keys in sorted(dropped.items()):
        lines.append(
            f"{_tasks(keys)}: the last {format_duration(rest)} of the budget is too short "
            "for a link, which must be more than a minute longer than signal_before_end "
            f"({lead}); it is not planned"
        )
    if capped:
        lines.append(
            f"{_tasks(capped)}: the budget left needs more than {MAX_LINKS} links; each chain "
            f"stops after {MAX_LINKS}, and planning the same budget again (--retry-failed, or "
            "--retry KEY) continues it"
        )
    if uneven:
        chains_hold = "packed chains hold" if len(uneven) > 1 else "packed chain holds"
        lines.append(
            f"{len(uneven)} {chains_hold} ({_some(uneven)}) Tasks with different run times: "
            "each chain is sized for its Task with the most budget left, and every Task stops "
            "at its own budget"
        )
    return tuple(lines)


class Eligibility(enum.Enum):
    """What a budget makes of one Task in planning, after planning's own refusals and its
    ``UNRESOLVED`` and ``ACTIVE`` holds."""

    USUAL = "usual"
    """The budget leaves room (or does not apply): planning's usual rules select or hold it."""
    SPENT = "SPENT"
    """No room for one more link: held ``SPENT``."""
    EXTENDS_SUCCEEDED = "extends SUCCEEDED"
    """Named with ``--retry``, succeeded, with room: selected as an extension."""
    EXTENDS_VALID = "extends VALID"
    """Named with ``--retry``, its probe reports valid, with room: selected as an extension."""

    @property
    def extends(self) -> Extends | None:
        return _EXTENDS.get(self)


_EXTENDS = {
    Eligibility.EXTENDS_SUCCEEDED: Extends.SUCCEEDED,
    Eligibility.EXTENDS_VALID: Extends.VALID,
}

_OVER = frozenset({Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED, Execution.LOST})
"""Work that has ended and that Slurm no longer lists: its run time is what the budget counts."""


def eligibility(
    execution: Execution,
    *,
    valid: bool,
    run_time: int,
    continuation: Continuation,
    limits: Limits,
    retried: bool,
    spent_under: int = 0,
) -> Eligibility:
    """Whether a budget selects, extends or holds ``SPENT`` a Task whose current work is
    ``execution``, whose probe says ``valid``, that ran ``run_time`` seconds, and that is named
    with ``--retry`` when ``retried``. ``spent_under`` is the budget of the chain whose work
    ended with the application saying its budget was spent (exit 0, or 75 on its last link).

    A Task whose chain spent a budget at least D is ``SPENT`` under D whatever its measured run
    time: each link gives up what is left of it after the pre-limit signal, so measured run
    time falls short of a spent budget, and the same budget again must select nothing.

    ``--retry KEY --budget D`` is the only way to extend: it takes a ``SUCCEEDED`` or ``VALID``
    Task with room under D (a ``VALID`` one even if Servatus never ran it). Any Task whose
    work is over (or never began) and that has no room is ``SPENT``, so planning the same
    budget again selects nothing and ``--retry-failed`` selects only ``FAILED`` and ``STOPPED``
    Tasks with room. A ``VALID`` Task not named stays held ``VALID``; work still running or
    listed is planning's to hold or refuse.
    """
    if continuation.budget is None:
        return Eligibility.USUAL  # --max-links alone: no budget to spend or extend
    over = execution in _OVER
    never = execution is Execution.NOT_SUBMITTED  # named, it extends only a valid result
    if not (over or (never and (valid or not retried))):
        return Eligibility.USUAL
    if valid and not retried:
        return Eligibility.USUAL
    if spent_under >= continuation.budget or not has_room(run_time, continuation, limits):
        return Eligibility.SPENT
    if retried and valid:
        return Eligibility.EXTENDS_VALID
    if retried and execution is Execution.SUCCEEDED:
        return Eligibility.EXTENDS_SUCCEEDED
    return Eligibility.USUAL


def format_continuation(continuation: Continuation) -> str:
    """The plan's ``continuation`` line."""
    if continuation.budget is None:
        return f"continuation: {plural(continuation.max_links or 0, 'link')} per Task"
    line = f"continuation: lifetime budget {format_duration(continuation.budget)} per Task"
    if continuation.max_links is not None:
        line += f", at most {plural(continuation.max_links, 'link')}"
    return line


def format_planned(task: Planned, extends: Extends | None = None) -> str:
    """One Task's line under the ``continuation`` line, without its key: ``run time 00:00:00,
    budget left 3-00:00:00, 5 links`` and ``, extends SUCCEEDED`` for an extension."""
    parts = [f"run time {format_duration(task.run_time)}"]
    if task.budget_left is not None:
        parts.append(f"budget left {format_duration(task.budget_left)}")
    parts.append(plural(task.links, "link"))
    if extends is not None:
        parts.append(f"extends {extends.value}")
    return ", ".join(parts)


__all__ = [
    "MAX_LINKS",
    "YIELD_EXIT",
    "Chain",
    "Continuation",
    "Eligibility",
    "Extends",
    "Extension",
    "Limits",
    "Link",
    "Planned",
    "chain",
    "chain_warnings",
    "dropped_rest",
    "eligibility",
    "format_continuation",
    "format_planned",
    "has_room",
    "limits_for",
    "link_slots",
    "links",
    "stops_short",
]
