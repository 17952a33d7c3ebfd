"""A seeded fault plan: which fault, when, with what parameters. Pure: no clock, no I/O.

Each kind draws from its own generator, seeded by the soak's seed and the kind's name, so a kind
added later or a rate changed leaves every other kind's events where they were: a failing run
replays from its seed and rates alone.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

SCHEMA = "servatus.soak.faults/1"


class FaultKind(enum.Enum):
    """What the injector does. Each maps to one action on the cluster (or the client)."""

    KILL_SLURMCTLD = "kill-slurmctld"
    """SIGKILL slurmctld; restart it ``hold`` seconds later."""
    KILL_SLURMD = "kill-slurmd"
    """SIGKILL ``node``'s slurmd; restart it ``hold`` seconds later."""
    KILL_SSHD = "kill-sshd"
    """SIGKILL the login node's sshd; restart it ``hold`` seconds later."""
    KILL_CLIENT = "kill-client"
    """SIGKILL the next ``servatus`` command once it is ``hold`` of its usual length in (a
    share, 0 to 1); a command that ends first passes the kill on to the one after it."""
    DROP_MASTER = "drop-master"
    """End the client's ssh master connection (``ssh -O exit``)."""
    FILL_LOG_ROOT = "fill-log-root"
    """Fill log_root's filesystem for ``hold`` seconds, then free it."""
    STEP_CLOCK = "step-clock"
    """Step the file server's clock by ``step`` seconds (either sign) for ``hold`` seconds, then
    back. The cluster soak cannot (its file server is the machine itself) and leaves it out."""
    STEP_CLIENT_CLOCK = "step-client-clock"
    """Step the client's clock by ``step`` seconds (either sign) for ``hold`` seconds, then back:
    every servatus command started meanwhile reads the stepped clock."""


RESTARTED = frozenset({FaultKind.KILL_SLURMCTLD, FaultKind.KILL_SLURMD, FaultKind.KILL_SSHD})
"""Kinds that take a daemon down until ``hold`` has passed."""

HOLD_RANGE: Mapping[FaultKind, tuple[float, float]] = {
    FaultKind.KILL_SLURMCTLD: (1.0, 30.0),
    FaultKind.KILL_SLURMD: (1.0, 60.0),
    FaultKind.KILL_SSHD: (1.0, 20.0),
    FaultKind.KILL_CLIENT: (0.05, 0.95),
    FaultKind.DROP_MASTER: (0.0, 0.0),
    FaultKind.FILL_LOG_ROOT: (5.0, 120.0),
    FaultKind.STEP_CLOCK: (10.0, 300.0),
    FaultKind.STEP_CLIENT_CLOCK: (10.0, 300.0),
}
"""Seconds a fault lasts, drawn uniformly (for KILL_CLIENT: how far into the command, as a
share of its length)."""

FIELD_HOLDS: Mapping[FaultKind, tuple[float, float]] = {
    **HOLD_RANGE,
    FaultKind.KILL_SLURMCTLD: (0.5, 3.0),
    FaultKind.KILL_SLURMD: (0.5, 4.0),
    FaultKind.KILL_SSHD: (0.5, 2.5),
    FaultKind.FILL_LOG_ROOT: (0.5, 3.0),
    FaultKind.STEP_CLOCK: (1.0, 4.0),
    FaultKind.STEP_CLIENT_CLOCK: (1.0, 4.0),
}
"""Short outages, so that hundreds of each kind fit in half an hour (:func:`field_rates`)."""

CLOCK_STEPS = (-600.0, -60.0, -5.0, 5.0, 60.0, 600.0)
"""Clock steps drawn from: small and large, both ways (a step back is the harder case)."""

DEFAULT_RATES: Mapping[FaultKind, float] = {
    FaultKind.KILL_SLURMCTLD: 6.0,
    FaultKind.KILL_SLURMD: 6.0,
    FaultKind.KILL_SSHD: 6.0,
    FaultKind.KILL_CLIENT: 20.0,
    FaultKind.DROP_MASTER: 10.0,
    FaultKind.FILL_LOG_ROOT: 4.0,
    FaultKind.STEP_CLOCK: 4.0,
    FaultKind.STEP_CLIENT_CLOCK: 4.0,
}
"""Mean events per hour of each kind."""

CLOCKS = frozenset({FaultKind.STEP_CLOCK, FaultKind.STEP_CLIENT_CLOCK})


@attrs.frozen
class Fault:
    """One event of the plan: at ``at`` seconds from the soak's start, ``kind``, on ``node``
    (KILL_SLURMD only), lasting ``hold`` seconds, stepping the clock by ``step`` (STEP_CLOCK)."""

    at: float
    kind: FaultKind
    hold: float = 0.0
    node: str | None = None
    step: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind.value,
            "hold": self.hold,
            "node": self.node,
            "step": self.step,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fault:
        return cls(
            at=float(data["at"]),
            kind=FaultKind(data["kind"]),
            hold=float(data["hold"]),
            node=data["node"],
            step=float(data["step"]),
        )


@attrs.frozen
class FaultPlan:
    """The whole plan of one soak, ordered by time (ties by kind, then node)."""

    seed: int
    duration: float
    rates: tuple[tuple[FaultKind, float], ...]
    nodes: tuple[str, ...]
    faults: tuple[Fault, ...]

    def by_kind(self) -> dict[str, int]:
        counts = {kind.value: 0 for kind, _ in self.rates}
        for fault in self.faults:
            counts[fault.kind.value] = counts.get(fault.kind.value, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "seed": self.seed,
            "duration": self.duration,
            "rates": {kind.value: rate for kind, rate in self.rates},
            "nodes": list(self.nodes),
            "faults": [fault.to_json() for fault in self.faults],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultPlan:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document")
        return cls(
            seed=int(data["seed"]),
            duration=float(data["duration"]),
            rates=tuple((FaultKind(k), float(v)) for k, v in data["rates"].items()),
            nodes=tuple(data["nodes"]),
            faults=tuple(Fault.from_json(f) for f in data["faults"]),
        )


def field_rates(
    per_kind: int,
    duration: float,
    *,
    quiet_tail: float = 0.0,
    holds: Mapping[FaultKind, tuple[float, float]] = FIELD_HOLDS,
    kinds: Sequence[FaultKind] = tuple(FaultKind),
    margin: float = 1.6,
) -> dict[FaultKind, float]:
    """Rates (per hour) at which each of ``kinds`` is expected to strike ``margin`` x
    ``per_kind`` times in the soak's ``duration`` less its quiet tail. A kind that takes
    something down is idle while it is down, so its rate covers the time between outages. The
    margin covers chance: a kind with no outage is a plain Poisson count, and at 1.6 x 34 (the
    CI soak) fewer than 34 come one seed in a few thousand."""
    window = duration - quiet_tail
    if window <= 0 or per_kind <= 0:
        raise ValueError("a field soak needs a positive window and count")
    rates = {}
    for kind in kinds:
        low, high = holds[kind]
        busy = 0.0 if kind is FaultKind.KILL_CLIENT else (low + high) / 2
        gap = window / (per_kind * margin) - busy
        if gap <= 0:
            raise ValueError(f"{per_kind} {kind.value} do not fit in {window:.0f} s")
        rates[kind] = 3600.0 / gap
    return rates


def plan_faults(
    seed: int,
    duration: float,
    *,
    rates: Mapping[FaultKind, float] = DEFAULT_RATES,
    nodes: Sequence[str] = ("node1",),
    quiet_tail: float = 0.0,
    holds: Mapping[FaultKind, tuple[float, float]] = HOLD_RANGE,
) -> FaultPlan:
    """The fault plan of a soak of ``duration`` seconds: for each kind with a positive rate (per
    hour), a Poisson process of events in ``[0, duration - quiet_tail)``. A kind that takes
    something down is not struck again until its previous event has ended, so each event is one
    down-and-up. ``quiet_tail`` leaves the end free of faults, for the driver's final reconcile.
    ``holds`` gives each kind's range of ``hold``.
    """
    if duration <= 0:
        raise ValueError("duration must be positive")
    if not nodes:
        raise ValueError("at least one node")
    unknown = [kind for kind in rates if not isinstance(kind, FaultKind)]
    if unknown:
        raise ValueError(f"not fault kinds: {unknown!r}")
    end = duration - quiet_tail
    faults: list[Fault] = []
    ordered = sorted(rates.items(), key=lambda item: item[0].value)
    for kind, rate in ordered:
        if rate < 0:
            raise ValueError(f"negative rate for {kind.value}")
        if rate == 0:
            continue
        rng = random.Random(f"servatus-soak/{seed}/{kind.value}")
        low, high = holds[kind]
        at = 0.0
        while True:
            at += rng.expovariate(rate / 3600.0)
            if at >= end:
                break
            hold = round(rng.uniform(low, high), 3)
            node = rng.choice(list(nodes)) if kind is FaultKind.KILL_SLURMD else None
            step = rng.choice(CLOCK_STEPS) if kind in CLOCKS else 0.0
            faults.append(Fault(at=round(at, 3), kind=kind, hold=hold, node=node, step=step))
            if kind is not FaultKind.KILL_CLIENT:
                at += hold
    faults.sort(key=lambda f: (f.at, f.kind.value, f.node or ""))
    return FaultPlan(
        seed=seed,
        duration=duration,
        rates=tuple((kind, float(rate)) for kind, rate in ordered),
        nodes=tuple(nodes),
        faults=tuple(faults),
    )
