"""The path ``docs/api.md`` documents :class:`Resolution` under; reconciliation itself is
:mod:`servatus.operations.reconcile`."""

from servatus.operations.reconcile import Resolution

__all__ = ["Resolution"]
