"""What the status projection reads from the campaign's records (its submissions), and what it
says of the listings :mod:`servatus.operations.observation` fetched (the clock warnings)."""

from __future__ import annotations

from collections.abc import Mapping

from servatus.config import target_from_identity
from servatus.engine.status_values import Outcome, Submission
from servatus.evidence import Evidence, Observation
from servatus.journal.records import CampaignState

_new = tuple.__new__
"""Builds a named tuple from a tuple of its fields, as :mod:`servatus.engine.status` does."""
_ACCEPTED = Outcome.ACCEPTED


def submissions(state: CampaignState) -> list[Submission]:
    """The campaign's submissions in recording order, each with its recorded outcome."""
    receipts = {receipt.allocation_id: receipt.job for receipt in state.receipts}
    resolved = {item.allocation_id: item.job for item in state.resolutions}
    steps = {intent.allocation_id for intent in state.intents if intent.within is not None}
    settled = {
        item.allocation_id: _new(
            Observation,
            (item.start, item.stop, item.limit, item.ends, item.handed,
             item.allocation_id in steps, item.claim),
        )
        for item in state.settlements
    }  # fmt: skip
    observed = settled.get
    identities = state.target_identities()  # an intent names its Target by key
    result: list[Submission] = []
    append = result.append
    for intent in state.intents:
        allocation_id = intent.allocation_id
        job = receipts.get(allocation_id)
        if job is not None:
            outcome = _ACCEPTED
        elif allocation_id in resolved:
            job = resolved[allocation_id]
            outcome = Outcome.NOT_SUBMITTED if job is None else _ACCEPTED
        else:
            outcome = Outcome.PENDING
        append(
            _new(
                Submission,
                (allocation_id, intent.task_keys, identities[intent.target], intent.created_at,
                 intent.time_limit, outcome, job, observed(allocation_id), intent.chain,
                 None if intent.lease is None else intent.lease.slots, intent.within,
                 intent.budget),
            )
        )  # fmt: skip
    return result


def clock_warnings(evidence: Mapping[str, Evidence]) -> list[str]:
    """One line per Target whose listing read no file-server clock (its ``log_root`` cannot be
    written from here) but found markers: a running Task's run time then runs to this machine's
    clock. A Target with no marker to list is not listed at all, so it has no clock to read, and
    none of its Tasks has a start to count from."""
    return [
        f"the file server's clock was not read (cannot create a file in "
        f"{target_from_identity(identity).log_root}); a running Task's run time is counted on "
        "this machine's clock"
        for identity, listed in evidence.items()
        if listed.queue is not None and listed.markers and listed.clock is None
    ]
