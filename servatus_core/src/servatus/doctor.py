"""The path ``docs/api.md`` documents the checks' values under; the checks themselves are
:mod:`servatus.operations.doctor`."""

from servatus.operations.doctor import Check, Diagnosis

__all__ = ["Check", "Diagnosis"]
