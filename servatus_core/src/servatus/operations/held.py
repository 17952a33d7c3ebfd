"""A campaign held at a state read elsewhere, and the steps ``status`` and ``plan`` take over it:
what the status cache runs, without a :class:`~servatus.campaign.Campaign`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servatus.journal import records
from servatus.operations import observation
from servatus.operations.context import Context, connector
from servatus.plugins import hooks

if TYPE_CHECKING:
    from servatus.config import Profile
    from servatus.continuation import Continuation
    from servatus.engine.plan import Plan, Request
    from servatus.engine.status_values import Report
    from servatus.engine.work import Work
    from servatus.evidence import Evidence
    from servatus.launcher import Launcher
    from servatus.transport import Connect


class HeldState:
    """A campaign held at a state read elsewhere (the status cache's remainder, or its whole
    journal read once), and the steps ``status`` and ``plan`` take over it."""

    def __init__(
        self,
        directory: Path,
        state: records.CampaignState,
        version: tuple[int, ...],
        connect: Connect | None,
    ) -> None:
        registry = hooks()
        self._context = Context(directory, connector(registry, connect), registry)
        self._known = (version, state)
        self._record_warning: str | None = None

    @property
    def record_warning(self) -> str | None:
        """Why what settled was not recorded by the last :meth:`record`, if it was not."""
        return self._record_warning

    def observe(
        self,
        state: records.CampaignState,
        *,
        offline: bool,
        targets: Sequence[str] = (),
        evidence: Mapping[str, Evidence] | None = None,
    ) -> tuple[Report, records.Settled, dict[str, Evidence]]:
        """The projection, what settled, and the evidence read (see
        :func:`~servatus.operations.observation.observe`)."""
        return observation.observe(
            self._context, state, offline=offline, targets=targets, evidence=evidence
        )

    def record(self, change: records.Settled, *, partial: bool = False) -> None:
        """Record what settled if the lock is free at once (see
        :func:`~servatus.operations.observation.record`)."""
        self._record_warning = observation.record(
            self._context.path, change, known=self._known, partial=partial
        )

    def make_plan(
        self,
        state: records.CampaignState,
        profile: Profile,
        request: Request,
        continuation: Continuation | None,
    ) -> tuple[Plan, records.Settled]:
        """The plan of the whole state, checked, and what its listings showed settled."""
        from servatus.operations import planning  # noqa: PLC0415 - status never plans

        return planning.plan_tasks(self._context, state, profile, request, continuation)

    def launcher(self, profile: Profile) -> Launcher:
        """The profile's launcher, the profile refused first if SERVATUS.toml's rules do."""
        from servatus.operations import planning  # noqa: PLC0415 - status never plans

        return planning.launcher_of(self._context, profile)

    def decide(
        self,
        state: records.CampaignState,
        profile: Profile,
        request: Request,
        continuation: Continuation | None,
        work: Mapping[str, Work],
        warnings: Sequence[str],
        keys: Sequence[str],
    ) -> Plan:
        """The plan of the roster ``keys`` when ``state`` holds only some of its Tasks."""
        from servatus.operations import planning  # noqa: PLC0415 - status never plans

        return planning.decide(
            self._context, state, profile, request, continuation, work, warnings, keys=keys
        )

    def check(
        self, state: records.CampaignState, profile: Profile, made: Plan, launcher: Launcher
    ) -> None:
        """Refuse a plan ``submit`` would refuse; ``state`` holds the selected Tasks."""
        from servatus.operations import planning  # noqa: PLC0415 - status never plans

        planning.check(self._context, state, profile, made, launcher)
