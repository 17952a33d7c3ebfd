"""Reading ``squeue`` and the run-marker listing: strict, bounded, identity-checked.

A partial listing is worse than none: a job missing from ``squeue`` or a marker missing from
``log_root`` is read as "Slurm forgot it" or "it never ended". So a command that failed, or whose
output was cut at the read bound or has more rows than :data:`MAX_ROWS`, raises
:class:`~servatus.errors.Unavailable` instead of returning what it could read. Rows that are not
ours (other jobs, foreign files, lines too long, malformed lines) are dropped, never guessed at.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import attrs

from servatus.errors import Unavailable
from servatus.evidence import Marker, QueueEntry
from servatus_slurm.markers import (
    ID_LENGTH,
    MAX_JOB,
    allocation_log_name,
    parse_marker_name,
    step_log_name,
)

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.transport import CommandResult

QUEUE_FORMAT = "%A|%j|%T"
"""Job number, name, state. Our names (``servatus-<hex>``) never contain ``|``."""
MARKER_FORMAT = "%f %T@ %s\\n"
"""File name, mtime in UNIX seconds (file server's clock), size."""
MAX_ROWS = 1_000_000
MAX_LINE = 512
"""Longer lines are not ours: our names are under 80 bytes."""

_QUEUE_LINE = re.compile(
    rb"(?P<job>[1-9][0-9]{0,9})\|(?P<name>servatus-[0-9a-f]{%d})\|(?P<state>[A-Z][A-Z_]{0,31})"
    % ID_LENGTH
)
_MARKER_LINE = re.compile(
    rb"(?P<name>servatus-[!-~]+) (?P<at>[0-9]{1,12}(?:\.[0-9]{1,10})?) (?P<size>[0-9]{1,20})"
)


def _lines(result: CommandResult, what: str) -> list[bytes]:
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        reason = said[-1] if said else "no message"
        raise Unavailable(f"{what} exited {result.returncode}: {reason}")
    if result.truncated:
        raise Unavailable(f"{what} printed more than can be read; the listing would be partial")
    lines = result.stdout.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) > MAX_ROWS:
        raise Unavailable(f"{what} listed more than {MAX_ROWS} rows; the listing would be partial")
    return lines


@attrs.frozen
class SlurmEvidenceReader:
    """Reads ``squeue --me`` and ``find`` listings of ``log_root``."""

    def queue_command(self, target: Target) -> list[str]:
        """Every job of the user in every state Slurm still keeps (``--states=all``): a finished
        job stays listed until ``MinJobAge`` passes, which is what makes ``ENDING`` visible."""
        return [
            f"{target.slurm_bin.rstrip('/')}/squeue",
            "--me",
            "--noheader",
            "--states=all",
            f"--format={QUEUE_FORMAT}",
        ]

    def parse_queue(self, result: CommandResult) -> list[QueueEntry]:
        entries = []
        for line in _lines(result, "squeue"):
            if len(line) > MAX_LINE:
                continue
            match = _QUEUE_LINE.fullmatch(line.strip())
            if match is None:
                continue
            job = int(match["job"])
            if job > MAX_JOB:
                continue
            entries.append(QueueEntry(job, match["name"].decode(), match["state"].decode()))
        return entries

    def marker_command(self, target: Target) -> list[str]:
        """``-H`` follows a symlinked ``log_root`` itself (and nothing below it)."""
        return [
            "find",
            "-H",
            target.log_root,
            "-mindepth",
            "1",
            "-maxdepth",
            "1",
            "-name",
            "servatus-*",
            "-printf",
            MARKER_FORMAT,
        ]

    def parse_markers(self, result: CommandResult) -> list[Marker]:
        markers = []
        for line in _lines(result, "find"):
            if len(line) > MAX_LINE:
                continue
            match = _MARKER_LINE.fullmatch(line)
            if match is None:
                continue
            at = float(match["at"])
            if not math.isfinite(at):
                continue
            marker = parse_marker_name(match["name"].decode("ascii"), at)
            if marker is not None:
                markers.append(marker)
        return markers

    def log_path(self, target: Target, allocation_id: str, job: int, slot: int | None) -> str:
        """The allocation's Slurm log (``slot`` None) or the step log of ``slot``."""
        name = (
            allocation_log_name(allocation_id, job)
            if slot is None
            else step_log_name(allocation_id, job, slot)
        )
        return f"{target.log_root.rstrip('/')}/{name}"
