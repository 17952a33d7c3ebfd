"""Authoring: create, ensure, append and seal, each one locked change of the store.

Each change goes through :mod:`servatus.journal.store`, so the roster on disk is the old one or
the new one, never a mix. Keys are immutable: a Task under an existing key must be identical, so
a launcher that builds its Tasks deterministically can rerun ``ensure`` at will.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from servatus.errors import ConfigurationError, TaskConflict
from servatus.journal import records, store
from servatus.tasks import Task, check_unique, content_size

_SHOWN_CONFLICTS = 5
"""How many changed keys a refusal names."""


@attrs.frozen
class Authoring:
    """What one authoring command did: Tasks added, Tasks already present, and the result."""

    created: bool
    """Whether this command created the campaign."""
    added: int
    """Tasks new to the campaign, appended in the order given."""
    existing: int
    """Tasks given that the campaign already held, identical (they are skipped)."""
    total: int
    """Tasks the campaign holds now."""
    sealed: bool
    """Whether the campaign is sealed now."""

    def to_document(self) -> dict[str, Any]:
        return attrs.asdict(self)


def split(state: records.CampaignState, batch: tuple[Task, ...]) -> tuple[tuple[Task, ...], int]:
    """New Tasks in order, and how many are already present identically; refuse changed ones."""
    present = state.tasks.by_key()
    new: list[Task] = []
    changed: list[str] = []
    for task in batch:
        old = present.get(task.key)
        if old is None:
            new.append(task)
        elif old != task:
            changed.append(task.key)
    if changed:
        shown = ", ".join(changed[:_SHOWN_CONFLICTS])
        more = (
            f" and {len(changed) - _SHOWN_CONFLICTS} more"
            if len(changed) > _SHOWN_CONFLICTS
            else ""
        )
        raise TaskConflict(
            f"{len(changed)} Task(s) differ from the Task already under the same key: {shown}{more}"
            "; keys are immutable, so give changed work a new key"
        )
    return tuple(new), len(batch) - len(new)


def _result(state: records.CampaignState, *, created: bool, added: int, existing: int) -> Authoring:
    return Authoring(created, added, existing, len(state.tasks), state.sealed)


def create_state(
    path: str | Path, tasks: Iterable[Task], *, appendable: bool = False
) -> tuple[records.CampaignState, Authoring]:
    """Create a campaign holding ``tasks``; refuse if one exists there (``TaskConflict``)."""
    batch = check_unique(tasks)
    with store.writing(path, create=True) as writer:
        if writer.state is not None:
            raise TaskConflict(f"a campaign already exists at {str(path)!r}")
        state = writer.initialize(store.new_campaign(batch, sealed=not appendable))
    return state, _result(state, created=True, added=len(batch), existing=0)


def check_fits(tasks: Iterable[Task], max_script_bytes: int) -> None:
    """Refuse a Task whose batch script could never fit ``max_script_bytes``: a script carries
    every byte of its Task's content (stdin, args, env), so content over the bound never fits."""
    for task in tasks:
        size = content_size(task)
        if size > max_script_bytes:
            raise ConfigurationError(
                f"Task {task.key!r} carries {size} bytes of stdin, args and env: its batch "
                f"script could never fit max_script_bytes ({max_script_bytes}); nothing was "
                "recorded"
            )


def ensure_state(
    path: str | Path,
    tasks: Iterable[Task],
    *,
    sealed: bool = False,
    max_script_bytes: int | None = None,
) -> tuple[records.CampaignState, Authoring]:
    """Create the campaign (appendable unless ``sealed``), or append the Tasks it has not seen.

    With ``sealed``, an existing appendable campaign is sealed after the append: asking for a
    sealed campaign and getting an appendable one would leave it open to later appends. The
    result's ``sealed`` says what the campaign is now. With ``max_script_bytes``, a Task whose
    script could never fit it is refused before anything is recorded (:func:`check_fits`).
    """
    batch = check_unique(tasks)
    if max_script_bytes is not None:
        check_fits(batch, max_script_bytes)
    with store.writing(path, create=True) as writer:
        state = writer.state
        if state is None:
            state = writer.initialize(store.new_campaign(batch, sealed=sealed))
            return state, _result(state, created=True, added=len(batch), existing=0)
        new, existing = split(state, batch)
        if new:
            if state.sealed:
                raise TaskConflict(
                    f"campaign {str(path)!r} is sealed; {len(new)} new Task(s) cannot be added"
                )
            state = writer.commit(records.Appended(new))
        if sealed and not state.sealed:
            state = writer.commit(records.Sealed())
    return state, _result(state, created=False, added=len(new), existing=existing)


def append_state(
    path: str | Path, tasks: Iterable[Task]
) -> tuple[records.CampaignState, Authoring]:
    """Append the new ones of ``tasks`` to an appendable campaign; identical ones are skipped."""
    batch = check_unique(tasks)
    with store.writing(path) as writer:
        state = writer.state
        assert state is not None
        if state.sealed:
            raise TaskConflict(f"campaign {str(path)!r} is sealed; no Task can be appended")
        new, existing = split(state, batch)
        if new:
            state = writer.commit(records.Appended(new))
    return state, _result(state, created=False, added=len(new), existing=existing)


def seal_state(path: str | Path) -> tuple[records.CampaignState, Authoring]:
    """End authoring irreversibly; sealing a sealed campaign changes nothing."""
    with store.writing(path) as writer:
        state = writer.state
        assert state is not None
        if not state.sealed:
            state = writer.commit(records.Sealed())
    return state, _result(state, created=False, added=0, existing=len(state.tasks))
