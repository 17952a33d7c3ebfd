"""The path ``docs/api.md`` documents the plan's values under; the plan itself is
:mod:`servatus.engine.plan`, its saved document :mod:`servatus.engine.plan_document`."""

from servatus.engine.plan import (
    Allocation,
    Decision,
    Hold,
    LeaseHold,
    Plan,
    Request,
    Totals,
)
from servatus.engine.plan_document import plan_from_document, seal_document

__all__ = [
    "Allocation",
    "Decision",
    "Hold",
    "LeaseHold",
    "Plan",
    "Request",
    "Totals",
    "plan_from_document",
    "seal_document",
]
