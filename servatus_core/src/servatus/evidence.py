"""Scheduler evidence: what ``squeue`` lists and what run markers in ``log_root`` say.

An evidence reader (a plugin, ``servatus_evidence_reader``) names the two listing commands and
parses their output into these values; status projection in the core reads only these values.
Readers bound what they accept and drop rows that fail the identity check instead of guessing.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.transport import CommandResult


@attrs.frozen
class QueueEntry:
    """One job ``squeue`` lists for the user: its number, name and Slurm state word."""

    job: int
    name: str
    state: str


class MarkerKind(enum.Enum):
    """What a run marker records. ``START``: the batch script began, before any step.
    ``END``: one step returned, with its slot and exit code. ``STOP``: the job was interrupted.
    ``LIMIT``: the pre-limit signal arrived. ``HANDOFF``: a chain link handed a slot on.
    ``STEP_START``: a lease step really began."""

    START = "start"
    END = "end"
    STOP = "stop"
    LIMIT = "limit"
    HANDOFF = "handoff"
    STEP_START = "step-start"


@attrs.frozen
class Marker:
    """One run marker: which allocation and job wrote it, what it says, and its mtime (the file
    server's clock, so spans between markers never mix clocks)."""

    allocation_id: str
    job: int
    kind: MarkerKind
    at: float
    slot: int | None = None
    exit_code: int | None = None


class EvidenceReader(Protocol):
    """Names the two listing commands for a Target and parses what they print."""

    def queue_command(self, target: Target) -> list[str]: ...

    def parse_queue(self, result: CommandResult) -> list[QueueEntry]: ...

    def marker_command(self, target: Target) -> list[str]: ...

    def parse_markers(self, result: CommandResult) -> list[Marker]: ...
