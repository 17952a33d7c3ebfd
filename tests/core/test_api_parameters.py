"""Every parameter of the public API that the reference shows has a sentence of its own there
(issue #31): a ``:param NAME:`` field in its docstring, which ``docs/api.md`` renders beside the
type. A new parameter without one fails here, naming it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import servatus
import servatus.cli
import servatus.config
import servatus.plan
import servatus.report
import servatus.testing
from servatus_publish.publication import Draft


def _public_methods(cls: type, *, skip: tuple[str, ...] = ()) -> Iterator[Callable[..., Any]]:
    for name, member in vars(cls).items():
        if name.startswith("_") or name in skip:
            continue
        if isinstance(member, classmethod | staticmethod):
            yield member.__func__
        elif inspect.isfunction(member):
            yield member


def documented() -> Iterator[tuple[str, Callable[..., Any], str]]:
    """Each callable, the docstring its parameters belong in (a class's own, for its
    constructor), by name."""
    for cls in (servatus.Campaign, servatus.Workspace, servatus.testing.FakeScheduler):
        yield cls.__qualname__, cls.__init__, cls.__doc__ or ""
        for method in _public_methods(cls, skip=("close",)):
            yield method.__qualname__, method, method.__doc__ or ""
    for cls in (servatus.config.Target, servatus.config.Resources, servatus.config.Apptainer):
        yield cls.__qualname__, cls.__init__, cls.__doc__ or ""
    for function in (
        servatus.Profile.load,
        Draft.link,
        Draft.link_tree,
        servatus.publish,
        servatus.publish_file,
        servatus.cli.main,
        servatus.config.capacity,
        servatus.config.profile_problems,
        servatus.plan.plan_from_document,
        servatus.plan.seal_document,
        servatus.report.report_to_document,
    ):
        yield function.__qualname__, function, function.__doc__ or ""


def parameters(function: Callable[..., Any]) -> list[str]:
    return [
        name
        for name in inspect.signature(function).parameters
        if name not in ("self", "cls") and not name.startswith("_")
    ]


@pytest.mark.parametrize(
    ("function", "doc"), [pytest.param(f, d, id=name) for name, f, d in documented()]
)
def test_every_parameter_has_a_sentence(function: Callable[..., Any], doc: str) -> None:
    missing = [p for p in parameters(function) if f":param {p}:" not in doc]
    assert not missing, f"no ':param NAME:' for {', '.join(missing)}"
