"""The path ``docs/api.md`` documents submission's values under; submission itself is
:mod:`servatus.operations.submission`."""

from servatus.operations.submission import Progress, SubmittedAllocation

__all__ = ["Progress", "SubmittedAllocation"]
