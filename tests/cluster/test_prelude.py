"""``cluster.prelude`` without a cluster: which scenarios a session starts, the session's order,
and a scenario's result, exception and cleanup reaching its own module only."""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from cluster import prelude


class Item:
    """What prelude reads of a pytest item: its module, fixtures and ``cluster_alone``."""

    def __init__(self, module: str, *, alone: bool = False, lane: bool = True) -> None:
        self.module = types.SimpleNamespace(__name__=module)
        self.fixturenames = [prelude.FIXTURE] if lane else []
        self.alone = alone
        self.nodeid = f"{module}::{id(self)}"

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == prelude.ALONE and self.alone else None


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    fresh: dict[str, Any] = {}
    monkeypatch.setattr(prelude, "_registry", fresh)
    monkeypatch.setattr(prelude, "_pools", [])
    return fresh


def register(module: str, seconds: float) -> None:
    def scenario(cluster: Any, base: Path) -> Iterator[str]:
        yield module

    scenario.__module__ = module
    prelude.scenario(seconds=seconds)(scenario)


def items(*made: Item) -> list[pytest.Item]:
    return cast(list[pytest.Item], list(made))


def test_a_session_starts_the_scenarios_its_tests_need_longest_first(
    registry: dict[str, Any],
) -> None:
    register("test_short", 10)
    register("test_long", 100)
    register("test_unselected", 50)
    register("test_only_alone", 70)
    selected = items(
        Item("test_plain"),
        Item("test_short"),
        Item("test_long"),
        Item("test_long"),
        Item("test_only_alone", alone=True),
    )
    assert prelude.wanted(selected) == ["test_long", "test_short"]


def test_the_order_keeps_what_runs_before_the_scenarios_and_puts_the_alone_last(
    registry: dict[str, Any],
) -> None:
    register("test_scenario", 10)
    harness_plain, harness_alone = (
        Item("test_harness", lane=False),
        Item("test_harness", alone=True, lane=False),
    )
    plain, scenario, scenario_alone = (
        Item("test_plain"),
        Item("test_scenario"),
        Item("test_scenario", alone=True),
    )
    alone, later_plain, outside = (
        Item("test_doctor", alone=True),
        Item("test_other"),
        Item("test_launchers", lane=False),
    )
    collected = items(
        harness_alone, harness_plain, scenario, scenario_alone, plain, alone, later_plain, outside
    )
    assert prelude.ordered(collected) == items(
        harness_alone, harness_plain, plain, later_plain, outside, scenario, scenario_alone, alone
    )


def test_each_module_gets_its_own_result_or_exception_and_cleanup_runs_once(
    registry: dict[str, Any], tmp_path: Path
) -> None:
    cleaned: list[str] = []
    release = threading.Event()

    def works(cluster: Any, base: Path) -> Iterator[str]:
        release.wait(10)
        try:
            yield f"worked in {base.name}"
        finally:
            cleaned.append("works")

    def fails(cluster: Any, base: Path) -> Iterator[str]:
        raise ValueError("its own failure")
        yield "never"

    works.__module__, fails.__module__ = "test_works", "test_fails"
    prelude.scenario(seconds=2)(works)
    prelude.scenario(seconds=1)(fails)
    (tmp_path / "w").mkdir()
    (tmp_path / "f").mkdir()
    prelude.start(cast(Any, None), {"test_works": tmp_path / "w", "test_fails": tmp_path / "f"})
    with pytest.raises(ValueError, match="its own failure"), prelude.outcome("test_fails"):
        pass
    release.set()
    with prelude.outcome("test_works") as result:
        assert result == "worked in w"
        assert cleaned == []
    assert cleaned == ["works"]
    prelude.finish()
    assert cleaned == ["works"]
    assert [line.split()[0] for line in prelude.timings()] == ["test_works", "test_fails"]


def test_settle_waits_for_every_started_scenario_and_cleans_it_up(
    registry: dict[str, Any], tmp_path: Path
) -> None:
    cleaned: list[str] = []

    def slow(cluster: Any, base: Path) -> Iterator[None]:
        threading.Event().wait(0.3)
        try:
            yield None
        finally:
            cleaned.append("slow")

    slow.__module__ = "test_slow"
    prelude.scenario(seconds=1)(slow)
    prelude.start(cast(Any, None), {"test_slow": tmp_path})
    prelude.settle()
    assert cleaned == ["slow"]
    prelude.finish()
