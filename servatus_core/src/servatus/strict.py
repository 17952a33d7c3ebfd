"""Strict scalars: a document's value is taken only as itself.

cattrs would take ``"None"`` for a null, ``1`` for ``true`` or a string's characters for a list;
every document servatus reads (journal records, saved plans, Task lines, SERVATUS.toml) refuses
them instead. Each kind of document keeps its own words: records and plans raise TypeErrors for
cattrs to locate, Task lines name JSON types, the configuration raises ConfigurationErrors in
TOML's words.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import cattrs

from servatus.errors import ConfigurationError

# -- journal records and saved plans ------------------------------------------------------------

RECORDED_BELOW = 2**36
"""No time or duration a journal record holds reaches this many seconds (as a wall time, the year
4147): beyond it a value is damage, and formatting it would fail. What is written must stay
below it, or every later read refuses the record."""


def exactly(kind: type[Any]) -> Callable[[Any, Any], Any]:
    """A hook taking a value only if it is exactly ``kind`` (no bool for an int)."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return structure


def finite(value: float) -> bool:
    """Whether a number is finite as a float: an integer too large for one is not (math.isfinite
    raises for it, which a reader of bad input must never let escape)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def finite_float(value: Any, _: Any) -> float:
    """A hook taking a float from a finite number, an integer included."""
    if type(value) not in (int, float) or not finite(value):
        raise TypeError(f"expected a finite number, got {value!r:.40}")
    return float(value)


def strict_scalars(converter: cattrs.Converter) -> cattrs.Converter:
    """Take a string, integer or boolean only as itself (cattrs' JSON converter would make
    ``"None"`` of a null) and a float only from a number; returns ``converter``."""
    for kind in (str, int, bool):
        converter.register_structure_hook(kind, exactly(kind))
    converter.register_structure_hook(float, finite_float)
    return converter


# -- Task lines ---------------------------------------------------------------------------------


def line_string(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def line_string_list(value: Any, _: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array of strings, got {type(value).__name__}")
    return [line_string(item, str) for item in value]


def line_string_dict(value: Any, _: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object of strings, got {type(value).__name__}")
    return {name: line_string(item, str) for name, item in value.items()}


def line_strings(converter: cattrs.Converter) -> cattrs.Converter:
    """Take a string, an array of strings or an object of strings only as itself; returns
    ``converter``."""
    converter.register_structure_hook(str, line_string)
    converter.register_structure_hook_func(lambda kind: kind == list[str], line_string_list)
    converter.register_structure_hook_func(lambda kind: kind == dict[str, str], line_string_dict)
    return converter


# -- the configuration --------------------------------------------------------------------------


def kind_of(value: object) -> str:
    """A value's kind in the words of a TOML (or JSON) document, for a message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def config_string(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"expected a string, got {kind_of(value)}")
    return value


def config_integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"expected an integer, got {kind_of(value)}")
    return value


__all__ = [
    "config_integer",
    "config_string",
    "exactly",
    "finite_float",
    "kind_of",
    "line_string",
    "line_string_dict",
    "line_string_list",
    "line_strings",
    "strict_scalars",
]
