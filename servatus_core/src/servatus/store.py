"""The path ``docs/api.md`` documents :class:`ChainLink` under, kept for who imports it from
there; the journal itself is :mod:`servatus.journal`."""

from servatus.journal.records import ChainLink

__all__ = ["ChainLink"]
