"""How numbers read in a sentence: the one plural rule every message, table and page uses."""

from __future__ import annotations

from collections.abc import Callable


def plural(count: int, word: str, number: Callable[[int], str] = str) -> str:
    """``count`` and ``word``, with an ``s`` unless there is exactly one; ``number`` writes the
    count (the HTML report groups thousands: ``f"{n:,}"``)."""
    return f"{number(count)} {word}" if count == 1 else f"{number(count)} {word}s"
