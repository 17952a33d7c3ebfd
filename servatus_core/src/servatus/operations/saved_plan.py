"""Saved plans (ADR 0011): the document ``plan --output`` writes, sealed with the campaign's plan
key, and the checks a saved plan passes before it is validated or submitted."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from servatus.engine.plan import Plan
from servatus.engine.plan_document import (
    check_seal,
    plan_from_document,
    sealed_plan_document,
)
from servatus.errors import ConfigurationError, StalePlan, from_os_error
from servatus.files import read_own
from servatus.journal import store


def saved_plan_document(state: str | Path, plan: Plan) -> dict[str, Any]:
    """The document ``plan --output`` saves: the plan's, sealed with the campaign's plan key,
    which the first saved plan creates (ADR 0011)."""
    key = store.plan_key(state, create=True)
    assert key is not None
    return sealed_plan_document(plan, key)


def read_saved_plan(state: str | Path, path: str | os.PathLike[str]) -> Plan:
    """A plan saved for campaign ``state``, to validate or submit (ADR 0011): the file must be
    the user's own and writable by no one else, checked on the descriptor it is read from, and
    its seal the one the campaign's plan key makes; anything else is refused in one line
    (:class:`~servatus.errors.UnsafeFilesystem` or :class:`~servatus.errors.StalePlan`)."""
    name = os.fspath(path)
    try:
        text = read_own(name, "a plan")
    except FileNotFoundError:
        raise ConfigurationError(f"no plan file {name}") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise StalePlan(f"{name}: not a JSON plan document (altered?)") from None
    check_seal(data, where=name, key=store.plan_key(state, create=False))
    return plan_from_document(data, where=name)
