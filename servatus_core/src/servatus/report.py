"""The path ``docs/api.md`` documents the report's data under; the report itself is
:mod:`servatus.engine.report`."""

from servatus.engine.report import ReportData
from servatus.engine.report import report_document as report_to_document

__all__ = ["ReportData", "report_to_document"]
