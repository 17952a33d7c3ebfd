"""The injector: a thread beside the driver that does a fault plan's events for real.

Each fault is one :class:`Injected` record: when it was due and when it happened (seconds from
the soak's start), what happened (``outcome``: ``injected``, ``skipped`` when it could not land,
e.g. no master connection to drop, ``failed`` when the action itself broke), and for a fault that
lasts (a daemon down, log_root full) when and how it was undone. The actions themselves are an
:class:`Actions`; :class:`ClusterActions` (in :mod:`soak.oncluster`) acts on the test cluster.

``kill-client`` is the driver's (it kills its own command), so the injector leaves it alone.
``step-client-clock`` steps the client's clock (:meth:`Actions.step_clock`) and steps it back
after ``hold``. A kind the soak cannot run is given in ``left_out`` with the reason.
"""

from __future__ import annotations

import heapq
import itertools
import json
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from soak.schedule import Fault, FaultKind, FaultPlan

FILE_SERVER_CLOCK = (
    "log_root's file server is this machine, whose CLOCK_REALTIME is not namespaced: stepping "
    "it steps Slurm, the nodes and the client with it (step-client-clock steps the client's)"
)
"""Why the cluster soak leaves ``step-clock`` out (the report's ``faults_left_out``)."""

DAEMONS: Mapping[FaultKind, str] = {
    FaultKind.KILL_SLURMCTLD: "slurmctld",
    FaultKind.KILL_SLURMD: "slurmd",
    FaultKind.KILL_SSHD: "sshd",
}


class Skipped(Exception):
    """The fault could not land (nothing to act on); the message says why."""


class Actions(Protocol):
    """What the injector does; each returns a line saying what it did, raises :class:`Skipped`
    when there is nothing to act on, and anything else when the action broke."""

    def kill(self, daemon: str, node: str | None) -> str: ...

    def restart(self, daemon: str, node: str | None) -> str: ...

    def drop_master(self) -> str: ...

    def fill(self) -> str: ...

    def free(self) -> str: ...

    def step_clock(self, by: float) -> str: ...


@attrs.define
class Injected:
    """One fault of the plan and what became of it (times in seconds from the soak's start)."""

    kind: str
    planned_at: float
    hold: float
    node: str | None
    at: float | None = None
    outcome: str = "pending"
    detail: str = ""
    undone_at: float | None = None
    undone: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Injector:
    """Runs the plan's events from :meth:`start` until :meth:`stop`, which undoes whatever is
    still down (restarts, frees) at once and marks what never came due.

    One thread keeps time and hands each due event to its kind's own thread: a kind's events
    (a kill, then its restart) run in order, and a slow restart of one daemon never holds back
    another kind's fault that is due meanwhile."""

    def __init__(
        self,
        plan: FaultPlan,
        actions: Actions,
        *,
        log: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        left_out: Mapping[FaultKind, str] | None = None,
    ) -> None:
        self.plan = plan
        self.actions = actions
        self.log = log
        self.clock = clock
        self.origin = 0.0
        self.records: list[Injected] = []
        self._events: list[tuple[float, int, bool, str, Callable[[], None]]] = []
        """(due, order, undo, kind, action); an undo always runs, even at stop."""
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lanes: dict[str, queue.SimpleQueue[Callable[[], None] | None]] = {}
        self._workers: list[threading.Thread] = []
        self._writing = threading.Lock()
        """The kinds' threads each write the log; one at a time, through one temporary."""
        self.broken: list[str] = []
        """What escaped an action (a bug of the soak's own): the report's reader should know."""
        for fault in plan.faults:
            if fault.kind is FaultKind.KILL_CLIENT:
                continue
            record = Injected(fault.kind.value, fault.at, fault.hold, fault.node)
            self.records.append(record)
            if fault.kind in (left_out or {}):
                record.outcome = "left-out"
                record.detail = (left_out or {})[fault.kind]
                continue
            self._push(fault.at, False, fault.kind.value, self._starter(fault, record))

    # -- the loop --------------------------------------------------------------------------------

    def start(self, origin: float | None = None) -> None:
        self.origin = self.clock() if origin is None else origin
        for kind in sorted({kind for _, _, _, kind, _ in self._events}):
            lane: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
            self._lanes[kind] = lane
            worker = threading.Thread(
                target=self._work, args=(lane,), name=f"soak-{kind}", daemon=True
            )
            self._workers.append(worker)
            worker.start()
        self._thread = threading.Thread(target=self._loop, name="soak-injector", daemon=True)
        self._thread.start()

    def elapsed(self) -> float:
        return self.clock() - self.origin

    def stop(self) -> list[Injected]:
        """Stop, undo what is still down, and return every record."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
        for lane in self._lanes.values():  # what each kind has begun, it finishes
            lane.put(None)
        for worker in self._workers:
            worker.join()
        # Undo in due order; starts that never came due are marked so.
        while self._events:
            _, _, undo, _, action = heapq.heappop(self._events)
            if undo:
                action()
        for record in self.records:
            if record.outcome == "pending":
                record.outcome = "skipped"
                record.detail = "the soak ended before it was due"
        self._write()
        return self.records

    def injected_kinds(self) -> list[str]:
        """One kind per fault that landed: what ``report.build(injected=)`` takes."""
        return [r.kind for r in self.records if r.outcome == "injected"]

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and (
                    not self._events or self._events[0][0] > self.elapsed()
                ):
                    wait = self._events[0][0] - self.elapsed() if self._events else None
                    self._wake.wait(timeout=None if wait is None else max(0.0, wait))
                if self._stopping:
                    return
                _, _, _, kind, action = heapq.heappop(self._events)
            self._lanes[kind].put(action)

    def _work(self, lane: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (action := lane.get()) is not None:
            try:
                action()
            except Exception as exc:  # the kind's thread lives on: its later undos must run
                self.broken.append(f"{type(exc).__name__}: {exc}")

    def _push(self, due: float, undo: bool, kind: str, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (due, next(self._order), undo, kind, action))

    # -- one fault -------------------------------------------------------------------------------

    def _starter(self, fault: Fault, record: Injected) -> Callable[[], None]:
        def begin() -> None:
            began = self.elapsed()
            record.at = round(began, 3)
            undo: Callable[[], str] | None = None
            try:
                if fault.kind in DAEMONS:
                    daemon = DAEMONS[fault.kind]
                    record.detail = self.actions.kill(daemon, fault.node)
                    undo = lambda: self.actions.restart(daemon, fault.node)  # noqa: E731
                elif fault.kind is FaultKind.DROP_MASTER:
                    record.detail = self.actions.drop_master()
                elif fault.kind is FaultKind.FILL_LOG_ROOT:
                    record.detail = self.actions.fill()
                    undo = self.actions.free
                elif fault.kind is FaultKind.STEP_CLIENT_CLOCK:
                    record.detail = self.actions.step_clock(fault.step)
                    undo = lambda: self.actions.step_clock(0.0)  # noqa: E731
                else:
                    raise Skipped(f"no action for {fault.kind.value}")
                record.outcome = "injected"
            except Skipped as exc:
                record.outcome, record.detail = "skipped", str(exc)
            except Exception as exc:  # recorded; the soak goes on
                record.outcome, record.detail = "failed", f"{type(exc).__name__}: {exc}"
                if fault.kind is FaultKind.FILL_LOG_ROOT:
                    undo = self.actions.free  # a fill that broke half-way is freed all the same
            if undo is not None:  # first: whatever fails after, what is down comes back
                with self._lock:
                    due = max(fault.at, began) + fault.hold  # the whole hold, if late
                    self._push(due, True, fault.kind.value, self._undoer(record, undo))
                    self._wake.notify_all()
            self._write()

        return begin

    def _undoer(self, record: Injected, undo: Callable[[], str]) -> Callable[[], None]:
        def end() -> None:
            try:
                record.undone = undo()
            except Exception as exc:  # recorded; the soak goes on
                record.undone = f"FAILED {type(exc).__name__}: {exc}"
            record.undone_at = round(self.elapsed(), 3)
            self._write()

        return end

    def _write(self) -> None:
        if self.log is None:
            return
        with self._writing:
            text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in self.records)
            temporary = self.log.with_name(f".{self.log.name}.tmp")
            temporary.write_text(text)
            temporary.replace(self.log)
