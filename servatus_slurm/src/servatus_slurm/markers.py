"""The run-marker and log names in ``log_root``: one grammar, used to write and to read them.

Every name starts with ``servatus-`` and the allocation id; a ``.`` after the id starts a marker,
a ``-`` a log, so one ``find -name`` :data:`MARKER_GLOB` lists every marker and no log::

    servatus-<id>.<job>.start             the batch script began, before any step
    servatus-<id>.<job>.end.<slot>.<exit> the step in <slot> returned <exit> (0-255)
    servatus-<id>.<job>.stop              the job was told to end (SIGTERM: scancel, time limit)
    servatus-<id>.<job>.limit             the pre-limit SIGUSR1 arrived and was relayed
    servatus-<id>.<job>.handoff.<slot>    a chain link hands <slot> on to its next link (the
                                          file holds its own name, which the next link reads)
    servatus-<id>.<job>.taken.<slot>      the claim on that handoff, made once by ln: its size
                                          is the verdict, more than 0 taken by the next link
                                          (it holds that job's number), 0 withheld by reconcile
    servatus-<id>.<job>.step-start        a lease step (<id> is the step's own id) really began
    servatus-<id>.<job>.claim             the decision on a step's order (in its lease's orders
                                          directory): its size is the verdict, 0 withdrawn,
                                          more than 0 taken (a hard link to the order)
    servatus-<id>-<job>.out               the allocation's log: its batch script's stdout and stderr
    servatus-<id>-<job>.<slot>.out        the step log of <slot>

``<id>`` is :data:`ID_LENGTH` lowercase hex digits, ``<job>`` Slurm's job number without leading
zeros, ``<slot>`` a non-negative integer without leading zeros. A marker is an empty file whose
mtime, stamped by the file server when it was created, is the time of the event; a claim is the
one marker read by its size instead (``docs/development/adr/0009-leases.md``), and so is a
handoff's claim (``taken``, ADR 0005).
"""

from __future__ import annotations

import re

from servatus.evidence import MAX_JOB, Marker, MarkerKind
from servatus.ids import ALLOCATION_ID_HEX

ID_LENGTH = ALLOCATION_ID_HEX
"""Hex digits in an allocation id (96 random bits)."""
MARKER_GLOB = "servatus-" + "?" * ID_LENGTH + ".*"
"""Matches marker names and no log name: a campaign of 100,000 one-Task allocations has 200,000
markers (about 15 MB listed) and as many logs, which the listing need not carry."""
MAX_SLOT = 9999
MAX_EXIT = 255

_NUMBER = r"(?:0|[1-9][0-9]{0,9})"
MARKER_NAME = re.compile(
    rf"servatus-(?P<id>[0-9a-f]{{{ID_LENGTH}}})\.(?P<job>[1-9][0-9]{{0,9}})\."
    rf"(?:(?P<plain>start|stop|limit|step-start|claim)"
    rf"|end\.(?P<end_slot>{_NUMBER})\.(?P<exit>{_NUMBER})"
    rf"|(?P<handoff>(?:handoff|taken)\.{_NUMBER}))"
)
"""A marker name in full. The listing parser embeds this pattern in its row pattern and reads the
groups by position, so it stays unanchored, ASCII, and keeps its group order."""


def marker_name(
    allocation_id: str,
    job: int,
    kind: MarkerKind,
    *,
    slot: int | None = None,
    exit_code: int | None = None,
) -> str:
    """The file name of one marker (what the batch script writes; tests and tools use it)."""
    base = f"servatus-{allocation_id}.{job}."
    if kind is MarkerKind.END:
        return f"{base}end.{slot}.{exit_code}"
    if kind is MarkerKind.HANDOFF or kind is MarkerKind.TAKEN:
        return f"{base}{kind.value}.{slot}"
    return base + str(kind.value)


def parse_marker_name(name: str, at: float, size: int = 0) -> Marker | None:
    """The marker a file name records, or None when it is not one of ours (logs included);
    ``size`` is the file's, read only for a claim."""
    match = MARKER_NAME.fullmatch(name)
    if match is None:
        return None
    identity, job, plain, end_slot, code, handoff = match.groups()
    return marker_from_groups(identity, job, plain, end_slot, code, handoff, at, str(size))


_KINDS = {kind.value: kind for kind in MarkerKind}
_END, _HANDOFF, _CLAIM, _TAKEN = (
    MarkerKind.END,
    MarkerKind.HANDOFF,
    MarkerKind.CLAIM,
    MarkerKind.TAKEN,
)
_new = tuple.__new__


def marker_from_groups(
    identity: str,
    job: str,
    plain: str,
    end_slot: str,
    exit_code: str,
    handoff: str,
    at: float,
    size: str = "0",
) -> Marker | None:
    """The marker that :data:`MARKER_NAME`'s six groups describe (the last is a whole
    ``handoff.<slot>`` or ``taken.<slot>``) (a group that did not take part
    is None from a match, ``""`` from ``findall``), or None when a number is out of bounds: the
    one reading of the grammar, for a single name and for a whole listing (which calls it once
    per row, so it builds the named tuple without its Python ``__new__``). ``size`` (the row's
    file size, in digits) is kept only for a claim, whose verdict it is."""
    number = int(job)
    if number > MAX_JOB:
        return None
    if plain:
        kind = _KINDS[plain]
        if kind is _CLAIM:
            return _new(Marker, (identity, number, kind, at, None, None, int(size)))
        return _new(Marker, (identity, number, kind, at, None, None, None))
    if end_slot:
        slot, code = int(end_slot), int(exit_code)
        if slot > MAX_SLOT or code > MAX_EXIT:
            return None
        return _new(Marker, (identity, number, _END, at, slot, code, None))
    dot = handoff.index(".")
    slot = int(handoff[dot + 1 :])
    if slot > MAX_SLOT:
        return None
    if dot == 5:  # taken
        return _new(Marker, (identity, number, _TAKEN, at, slot, None, int(size)))
    return _new(Marker, (identity, number, _HANDOFF, at, slot, None, None))


def allocation_log_name(allocation_id: str, job: int | str) -> str:
    """The allocation's log, which its batch script opens (``job`` may be a shell expansion
    when rendering)."""
    return f"servatus-{allocation_id}-{job}.out"


def step_log_name(allocation_id: str, job: int | str, slot: int) -> str:
    """The step log of ``slot`` (``job`` may be a shell expansion when rendering)."""
    return f"servatus-{allocation_id}-{job}.{slot}.out"
