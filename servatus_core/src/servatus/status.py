"""The path ``docs/api.md`` documents the status projection's values under, with the ones the
package root re-exports from it; they are defined in :mod:`servatus.engine.status_values`, the
projection itself is :mod:`servatus.engine.status`, its document
:mod:`servatus.engine.status_document`."""

from servatus.engine.status_document import status_document as report_to_document
from servatus.engine.status_values import (
    YIELD_EXIT,
    Attempt,
    Execution,
    Report,
    RunTime,
    StopReason,
    TaskLink,
    TaskStatus,
)

__all__ = [
    "YIELD_EXIT",
    "Attempt",
    "Execution",
    "Report",
    "RunTime",
    "StopReason",
    "TaskLink",
    "TaskStatus",
    "report_to_document",
]
