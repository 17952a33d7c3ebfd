"""The ``servatus.plan/5`` document: a plan written out with its digest and seal, and read back
with every field required, unknown keys and loose scalars refused (ADR 0011).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn_from_attrs, make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter
from cattrs.v import format_exception

from servatus.config import (
    Profile,
    profile_from_document,
    profile_to_document,
)
from servatus.continuation import (
    Continuation,
    Extension,
    Link,
)
from servatus.engine.plan import Allocation, Decision, Hold, LeaseHold, Plan, Request
from servatus.engine.plan_checks import chain_problem, lease_problem
from servatus.errors import ConfigurationError, StalePlan
from servatus.ids import ALLOCATION_ID
from servatus.strict import strict_scalars

PLAN_SCHEMA: Literal["servatus.plan/5"] = "servatus.plan/5"
"""Version 5 adds the ``seal`` (ADR 0011); its body is version 4's."""

UNSEALED_SCHEMAS = frozenset({"servatus.plan/4"})
"""Saved plans of earlier releases: sealed by nothing but a digest anyone can compute, so they
are refused with a word to save the plan again."""


class _Unusable(ValueError):
    """A problem a hook words itself; ``located`` ones get the plan's name in front."""

    def __init__(self, message: str, *, located: bool = False) -> None:
        super().__init__(message)
        self.located = located


_HOLDS = tuple[tuple[str, Hold], ...]
_AS_LISTS: dict[Any, Any] = {
    tuple[str, ...]: list[str],
    tuple[str, ...] | None: list[str] | None,
    tuple[int, ...]: list[int],
    tuple[Allocation, ...]: list[Allocation],
    tuple[Extension, ...]: list[Extension],
}
"""The value types' tuples, read as the lists a document holds."""

_SHOWN: dict[Any, Any] = {
    tuple[str, ...]: list,
    tuple[str, ...] | None: list[str] | None,
    tuple[int, ...]: list,
    tuple[Allocation, ...]: list,
    tuple[Extension, ...]: list,
    _HOLDS: list,
}
"""How messages name those tuples: as the document's lists (``expected list``)."""


class _NotMapping(TypeError):
    """An object's place in the document holds something else (said "expected a mapping")."""


def _every_field_required(kind: type[Any], converter: cattrs.Converter, *omit: str) -> Any:
    """A structure hook for ``kind`` that requires every field but ``omit``: a document stores
    them all, so one that lacks a field was not written by servatus, whatever defaults the value
    type has."""
    attrs.resolve_types(kind)
    fields = [field.evolve(default=attrs.NOTHING) for field in attrs.fields(kind)]
    overrides: dict[str, Any] = {name: override(omit=True) for name in omit}
    structure = make_dict_structure_fn_from_attrs(fields, kind, converter, **overrides)

    def mapping(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise _NotMapping(f"not an object: {value!r:.40}")
        return structure(value, kind)

    return mapping


_CHAIN_FIELDS = ("link", "after", "task_links")
"""What a chain link's allocation document holds beyond a plain allocation's."""


def _plan_converter() -> cattrs.Converter:
    """One converter for the saved plan: the value types themselves, every field required,
    unknown keys and loose scalars refused."""
    converter = strict_scalars(make_converter(forbid_extra_keys=True))
    for kind, stored in _AS_LISTS.items():
        converter.register_structure_hook_func(_exactly(kind), _read_as(converter, stored))
    converter.register_structure_hook_func(_exactly(_HOLDS), _structure_holds(converter))
    converter.register_unstructure_hook_func(
        _exactly(_HOLDS), lambda held: [[key, hold.value] for key, hold in held]
    )
    converter.register_unstructure_hook_func(  # 100,000 of them: built here, not one by one
        _exactly(tuple[Allocation, ...]),
        lambda allocations: [_allocation_document(a) for a in allocations],
    )
    converter.register_structure_hook(Profile, _structure_profile(converter))
    converter.register_unstructure_hook(Profile, profile_to_document)
    converter.register_structure_hook(Request, _every_field_required(Request, converter))
    converter.register_structure_hook(Allocation, _structure_allocation(converter))
    for kind in (Continuation, Link):
        converter.register_structure_hook(kind, _constructed(kind, converter))
    converter.register_structure_hook(Extension, _every_field_required(Extension, converter))
    converter.register_structure_hook(Decision, _every_field_required(Decision, converter))
    converter.register_structure_hook(LeaseHold, _every_field_required(LeaseHold, converter))
    converter.register_structure_hook(Plan, _structure_plan(converter))
    converter.register_unstructure_hook(
        Plan,
        make_dict_unstructure_fn(
            Plan,
            converter,
            warnings=override(omit=True),
            hold=override(omit_if_default=True),
            within=override(omit_if_default=True),
        ),
    )
    return converter


_LEASE_FIELDS = ("hold", "within")
"""What a lease's plan (``hold``) or a plan of steps in a lease (``within``) holds beyond a plan
of Tasks; a document holds at most one of them."""


def _structure_plan(converter: cattrs.Converter) -> Any:
    """A plan of Tasks without ``hold`` or ``within`` (so every plan saved before leases reads,
    and saves back, as it was), a lease's plan with ``hold``, a plan of steps with ``within``."""
    shapes = {
        name: _every_field_required(Plan, converter, "warnings", *set(_LEASE_FIELDS) - {name})
        for name in _LEASE_FIELDS
    }
    tasks = _every_field_required(Plan, converter, "warnings", *_LEASE_FIELDS)

    def structure(value: Any, _: Any) -> Plan:
        named = [name for name in _LEASE_FIELDS if type(value) is dict and name in value]
        if len(named) > 1:
            raise _Unusable("a plan holds a lease or steps in one, not both")
        plan: Plan = (shapes[named[0]] if named else tasks)(value, Plan)
        return plan

    return structure


def _allocation_document(allocation: Allocation) -> dict[str, Any]:
    """A plain allocation's document is what every ``servatus.plan`` document held since version
    4 (so a plan saved before chains reads back to the same body); a chain link's holds its
    place in its chain too."""
    document: dict[str, Any] = {
        "allocation_id": allocation.allocation_id,
        "task_keys": list(allocation.task_keys),
    }
    link = allocation.link
    if link is not None:
        document["link"] = {"position": link.position, "of": link.of, "time_limit": link.time_limit}
        document["after"] = allocation.after
        document["task_links"] = list(allocation.task_links)
    return document


def _structure_allocation(converter: cattrs.Converter) -> Any:
    """A plain allocation without the chain fields, a chain link with all of them (a document
    holding some of them lacks the others: required)."""
    plain = _every_field_required(Allocation, converter, *_CHAIN_FIELDS)
    linked = _every_field_required(Allocation, converter)

    def structure(value: Any, _: Any) -> Allocation:
        chained = type(value) is dict and any(name in value for name in _CHAIN_FIELDS)
        allocation: Allocation = (linked if chained else plain)(value, Allocation)
        if chained and allocation.link is None:
            raise _Unusable(f"allocation {allocation.allocation_id} has chain fields but no link")
        return allocation

    return structure


def _constructed(kind: type[Any], converter: cattrs.Converter) -> Any:
    """A value whose own checks (a budget longer than zero, a link's place in its chain) refuse
    it: their words, as the problem."""
    fields = _every_field_required(kind, converter)

    def structure(value: Any, _: Any) -> Any:
        try:
            return fields(value, kind)
        except cattrs.ClassValidationError as exc:
            # Its fields' problems are located (noted) by cattrs; the constructor's are not.
            own = [e for e in exc.exceptions if not getattr(e, "__notes__", None)]
            if len(own) == 1 and isinstance(own[0], ConfigurationError | ValueError):
                raise _Unusable(str(own[0])) from None
            raise

    return structure


def _exactly(kind: Any) -> Callable[[Any], bool]:
    return lambda other: bool(other == kind)


def _read_as(converter: cattrs.Converter, stored: Any) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        items = converter.structure(value, stored)
        return None if items is None else tuple(items)

    return structure


def _structure_holds(converter: cattrs.Converter) -> Any:
    def structure(value: Any, _: Any) -> tuple[tuple[str, Hold], ...]:
        pairs = converter.structure(value, list[tuple[str, str]])
        try:
            return tuple((key, Hold(hold)) for key, hold in pairs)
        except ValueError as exc:
            raise _Unusable(str(exc)) from None

    return structure


def _structure_profile(converter: cattrs.Converter) -> Any:
    def structure(value: Any, _: Any) -> Profile:
        try:
            return profile_from_document(converter.structure(value, dict[str, Any]))
        except ConfigurationError as exc:
            raise _Unusable(str(exc), located=True) from None

    return structure


_converter = _plan_converter()


def plan_to_document(plan: Plan) -> dict[str, Any]:
    """The ``servatus.plan/5`` document of a plan, with the ``digest`` of everything else in it
    (the plan's identity, recorded with each intent), unsealed: :func:`seal_document` seals it
    for saving."""
    return _documented(plan)[0]


def sealed_plan_document(plan: Plan, key: bytes) -> dict[str, Any]:
    """The plan's document with its digest and its ``seal`` (see :func:`seal_document`), each
    member serialised once for both."""
    document, canonical = _documented(plan)
    return {**document, "seal": canonical.seal(key)}


def _documented(plan: Plan) -> tuple[dict[str, Any], _Canonical]:
    document: dict[str, Any] = {"schema": PLAN_SCHEMA, **_converter.unstructure(plan)}
    canonical = _Canonical(document)
    document["digest"] = canonical.add("digest", canonical.digest())
    return document, canonical


def seal_document(document: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """``document`` with its ``seal``: an HMAC-SHA256, under the campaign's plan key
    (``servatus.journal.store.plan_key``), of everything else in it. Only who can read the key (the
    campaign's owner) can make a seal that :func:`plan_from_document` accepts.

    :param document: A plan document, without a seal.
    :param key: The campaign's plan key.
    """
    return {**document, "seal": _Canonical(document).seal(key)}


def plan_from_document(data: Any, *, where: str, key: bytes | None = None) -> Plan:
    """Read a plan document back; a document altered by even one byte is
    :class:`~servatus.errors.StalePlan`. With ``key``, its ``seal`` is checked as
    ``check_seal`` does; without, it is not: use that only for a document you made or
    trust (``Campaign.read_plan`` reads a saved plan to submit). ``where`` names the document in
    messages.

    :param data: The parsed JSON document.
    :param where: What to call the document in an error (its file name, say).
    :param key: The campaign's plan key, to check the seal with; None checks none.
    """
    _check_schema(data, where)
    canonical = _Canonical(data)
    _check_digest(data, canonical, where)
    if key is not None:
        _check_seal(data, canonical, where, key)
    body = {name: value for name, value in data.items() if name not in _ENVELOPE}
    try:
        plan: Plan = _converter.structure(body, Plan)
    except cattrs.BaseValidationError as exc:
        raise StalePlan(f"{where}: not a usable plan ({_problems(exc, where)})") from None
    malformed = [
        a.allocation_id for a in plan.allocations if not ALLOCATION_ID.fullmatch(a.allocation_id)
    ]
    if malformed:
        raise StalePlan(f"{where}: not a usable plan (allocation id {malformed[0]!r})")
    problem = lease_problem(plan) or chain_problem(plan)
    if problem is not None:
        raise StalePlan(f"{where}: not a usable plan ({problem})")
    # Every link of a chain holds the same Tasks: each counts once, in the chain's first link.
    packed = [key for a in plan.allocations if a.after is None for key in a.task_keys]
    selected = set(plan.decision.selected)
    if len(packed) != len(selected) or selected.symmetric_difference(packed):
        raise StalePlan(f"{where}: not a usable plan (its allocations differ from its selection)")
    decision = plan.decision
    measured = selected if decision.continuation is not None else set()
    if set(decision.spent) != measured:  # each selected Task's run time, under a continuation
        raise StalePlan(f"{where}: not a usable plan (its spent differs from its selection)")
    extended = {extension.key for extension in decision.extensions}
    if extended - measured or len(extended) != len(decision.extensions):
        raise StalePlan(f"{where}: not a usable plan (its extensions are not of its selection)")
    return plan


def check_seal(data: Any, *, where: str, key: bytes | None) -> None:
    """Refuse (:class:`~servatus.errors.StalePlan`) a document that is not a saved plan sealed
    with ``key``, the plan key of the campaign it is submitted to (None: that campaign has
    sealed no plan yet, so none is its)."""
    _check_schema(data, where)
    canonical = _Canonical(data)
    _check_digest(data, canonical, where)  # an edit by hand reads as one, before the seal is asked
    _check_seal(data, canonical, where, key)


def _check_seal(data: dict[str, Any], canonical: _Canonical, where: str, key: bytes | None) -> None:
    seal = data.get("seal")
    if (
        not isinstance(seal, str)
        or key is None
        or not hmac.compare_digest(seal, canonical.seal(key))
    ):
        raise StalePlan(
            f"{where}: its seal is not this campaign's (the plan was saved for another "
            "campaign, or altered); plan again"
        )


def _check_digest(data: dict[str, Any], canonical: _Canonical, where: str) -> None:
    if data.get("digest") != canonical.digest():
        raise StalePlan(f"{where}: the plan was altered after it was saved; plan again")


def _check_schema(data: Any, where: str) -> None:
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema in UNSEALED_SCHEMAS:
        raise StalePlan(
            f"{where}: a {schema} plan, saved by an earlier release without a seal, is not "
            "submitted; save it again with plan --output"
        )
    if schema != PLAN_SCHEMA:
        raise StalePlan(f"{where}: not a {PLAN_SCHEMA} document")


def _problems(exc: cattrs.BaseValidationError, where: str) -> str:
    """What is wrong, in cattrs' words (a tuple named as the list the document holds), or in a
    hook's own when that is the only problem."""
    leaves = list(_leaves(exc))
    if len(leaves) == 1 and isinstance(leaves[0], _Unusable):
        return f"{where}: {leaves[0]}" if leaves[0].located else str(leaves[0])

    def describe(problem: BaseException, kind: Any) -> str:
        if isinstance(problem, _NotMapping):
            return "expected a mapping"
        return format_exception(problem, _SHOWN.get(kind, kind))

    return "; ".join(cattrs.transform_error(exc, format_exception=describe))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


_ENVELOPE = ("schema", "digest", "seal")
"""The names of a plan document that are not the plan's (the rest must all be)."""


class _Canonical:
    """A document's canonical JSON (sorted keys, no spaces, ASCII), built from its members each
    serialised once: the digest and the seal cover different members of the same document, and
    a plan of many thousand Tasks is worth serialising only once."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._members = {name: _json(value) for name, value in document.items()}

    def add(self, name: str, value: str) -> str:
        """Take member ``name`` (a string) into the document, and return it."""
        self._members[name] = _json(value)
        return value

    def leaving(self, *names: str) -> bytes:
        """The canonical bytes of the document without the members ``names``; the same bytes
        ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` makes of it."""
        members = self._members
        kept = ",".join(
            f"{_json(name)}:{members[name]}" for name in sorted(members) if name not in names
        )
        return f"{{{kept}}}".encode("ascii")

    def digest(self) -> str:
        """The plan's identity: the SHA-256 of everything in its document but the digest and
        seal."""
        return hashlib.sha256(self.leaving("digest", "seal")).hexdigest()

    def seal(self, key: bytes) -> str:
        """The HMAC-SHA256 under ``key`` of everything in the document but the seal."""
        return hmac.new(key, self.leaving("seal"), hashlib.sha256).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
