"""The real-cluster lane's slow scenarios, run side by side on the one cluster from the session's
start instead of one after another.

A slow module registers its scenario when it is imported (at collection): a generator that
drives the cluster and yields, once, what its tests judge; what follows the ``yield`` (in a
``finally``) is its cleanup::

    @prelude.scenario(seconds=91)
    def watched(cluster: SlurmCluster, base: Path) -> Iterator[Chains]:
        lane = make_lane(cluster, "local", base, "chains")
        try:
            ...  # submit, watch, settle
            yield chains
        finally:
            lane.cleanup()

    @pytest.fixture(scope="module")
    def chains() -> Iterator[Chains]:
        with prelude.outcome(__name__) as seen:
            yield seen

The session fixture of ``tests/lane_cluster/conftest.py`` starts, in a few threads, every
scenario whose module has a selected test that is not marked ``cluster_alone`` (so one file, or
``-k``, starts only what it needs), longest first; ``base`` is a fresh directory it made for it in
the main thread. The module fixture waits for its own scenario: its tests get its result, or its
exception, and nobody else's. The cleanup runs when the module's tests are done (or at the
session's end).

Tests marked ``cluster_alone`` change the cluster for everyone (sshd, Slurm's daemons or
settings, its nodes) or need it to themselves (job numbers, latencies they assert): they wait for
every started scenario to end, and :func:`ordered` runs them last. ``SERVATUS_PRELUDE_WORKERS=1``
runs the scenarios one at a time (still beside the other tests), for telling a concurrency
problem from another.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

if TYPE_CHECKING:
    from cluster.fixture import SlurmCluster

FIXTURE = "prelude_scenarios"
"""The autouse session fixture that starts the scenarios (``tests/lane_cluster/conftest.py``)."""
ALONE = "cluster_alone"
WORKERS = int(os.environ.get("SERVATUS_PRELUDE_WORKERS", "4"))
"""Scenarios running at once. Their jobs mostly sleep, but each scenario polls the cluster through
whole ``servatus`` commands, on the machine's two cores, beside the main thread's tests: with four,
longest first, the eight end in about the longest two (some 230 s), long before the main thread's
other tests do, and each one's timing windows share the machine with three others at most."""

Scenario = Callable[["SlurmCluster", Path], Iterator[Any]]


@attrs.define
class _Entry:
    function: Scenario
    seconds: float
    """Its measured duration alone: the longest start first."""
    future: Future[Any] | None = None
    context: contextlib.AbstractContextManager[Any] | None = None
    closed: bool = False
    took: float | None = None


_registry: dict[str, _Entry] = {}
_pools: list[ThreadPoolExecutor] = []
"""The one pool of the session, once started."""
_lock = threading.Lock()


def scenario(*, seconds: float) -> Callable[[Scenario], Scenario]:
    """Register the decorated generator as its module's scenario (one per module)."""

    def register(function: Scenario) -> Scenario:
        name = function.__module__
        known = _registry.get(name)
        if known is not None and known.function.__qualname__ != function.__qualname__:
            raise RuntimeError(f"{name} registers two scenarios")
        _registry[name] = _Entry(function, seconds)
        return function

    return register


def alone(item: pytest.Item) -> bool:
    return item.get_closest_marker(ALONE) is not None


def _module(item: pytest.Item) -> str | None:
    module = getattr(item, "module", None)
    return None if module is None else str(module.__name__)


def wanted(items: Iterable[pytest.Item]) -> list[str]:
    """The scenarios the selected tests need, longest first: those of modules with a selected
    test that is not ``cluster_alone``."""
    names = {_module(item) for item in items if not alone(item)}
    return sorted((n for n in names if n in _registry), key=lambda n: -_registry[n].seconds)


def ordered(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """The session's order: tests that run before the scenarios start stay first (they never
    set up :data:`FIXTURE`); then the other tests, which run beside the scenarios; then the
    scenarios' own tests, by then mostly ready; then the ``cluster_alone`` tests, once every
    scenario has ended. Each group keeps its collection order."""
    first = next(
        (i for i, item in enumerate(items) if FIXTURE in getattr(item, "fixturenames", ())),
        len(items),
    )
    rest = items[first:]
    plain = [item for item in rest if not alone(item) and _module(item) not in _registry]
    scenarios = [item for item in rest if not alone(item) and _module(item) in _registry]
    last = [item for item in rest if alone(item)]
    return [*items[:first], *plain, *scenarios, *last]


def start(cluster: SlurmCluster, bases: Mapping[str, Path]) -> None:
    """Start each named scenario in the pool, in the order given, each in its own directory."""
    if not bases:
        return
    with _lock:
        if not _pools:
            _pools.append(ThreadPoolExecutor(max(1, WORKERS), thread_name_prefix="prelude"))
        for name, base in bases.items():
            entry = _registry[name]
            if entry.future is None:
                entry.future = _pools[0].submit(_run, entry, cluster, base)


def _run(entry: _Entry, cluster: SlurmCluster, base: Path) -> Any:
    began = time.monotonic()
    try:
        context = contextlib.contextmanager(entry.function)(cluster, base)
        value = context.__enter__()
        entry.context = context
        return value
    finally:
        entry.took = time.monotonic() - began


@contextlib.contextmanager
def outcome(name: str) -> Iterator[Any]:
    """The module's scenario's result (its exception raised here), then its cleanup."""
    entry = _registry[name]
    if entry.future is None:
        raise RuntimeError(f"the scenario of {name} was never started (is {FIXTURE} in use?)")
    try:
        yield entry.future.result()
    finally:
        _close(entry)


def _close(entry: _Entry) -> None:
    """Run a finished scenario's cleanup once (in the main thread)."""
    if entry.closed or entry.future is None or not entry.future.done():
        return
    entry.closed = True
    if entry.context is not None:
        entry.context.__exit__(None, None, None)


def settle() -> None:
    """Wait until every started scenario has ended, then run the cleanups not yet run: what a
    ``cluster_alone`` test waits for."""
    futures = [entry.future for entry in _registry.values() if entry.future is not None]
    wait_for_futures(futures)
    for entry in _registry.values():
        _close(entry)


def finish() -> None:
    """At the session's end: drop what never started, wait for the rest, clean up."""
    for entry in _registry.values():
        if entry.future is not None and entry.future.cancel():
            entry.future = None
    settle()
    while _pools:
        _pools.pop().shutdown()


def timings() -> list[str]:
    """Each scenario that ran, how long it took (beside the others)."""
    return [
        f"{name} {entry.took:.0f} s (alone {entry.seconds:.0f} s)"
        for name, entry in sorted(_registry.items(), key=lambda kv: -(kv[1].took or 0))
        if entry.took is not None
    ]
