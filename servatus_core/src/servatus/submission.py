"""The path ``docs/api.md`` documents submission's values under; submission itself is
:mod:`servatus.operations.submission`."""

from servatus.operations import submission as _submission
from servatus.operations.submission import SubmittedAllocation

Progress = _submission.Progress
"""Called after each accepted allocation: (index from 1, count, allocation id, job number)."""

__all__ = ["Progress", "SubmittedAllocation"]
