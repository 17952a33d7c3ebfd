"""Write a campaign as ``d977980`` (main before the settled summary, journal version 4) wrote it.

Run once with the code of that commit; its output is committed under ``d977980/`` and read by
``tests/store/test_store_upgrade.py``: the snapshot carries what version 4 added after da44b63
(settlements with their ends and handoffs, horizons, chain links, a lease, Task resources), so
later code must keep reading all of it. Never rerun it with later code.

    python tests/data/make_d977980.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from servatus.evidence import SlotEnd
from servatus.ids import target_key
from servatus.journal import records, store
from servatus.tasks import Task

HERE = Path(__file__).resolve().parent
OUT = HERE / "d977980"

TARGET = '{"host":null,"log_root":"/l1"}'
KEY = target_key(TARGET)
A, B, C, D, E, F = (letter * 24 for letter in "abcdef")
LINK_1 = records.ChainLink(1, 2, "", (2, 1), 0)
LINK_2 = records.ChainLink(2, 2, A, (2, 1), 0)
TERMS = records.LeaseTerms("cpu", 2, 1, 500, 0, 30)
SLOT = records.TaskResources(1, 500, 0)

BEFORE_COMPACTION = [
    records.Created(
        "fedcba9876543210fedcba9876543210",
        1796000000.5,
        False,
        (Task("x", ["python", "x.py"], stdin=b"{}"), Task("y", ["y"], env={"Y": "1"})),
    ),
    records.Appended((Task("z", ["z"]),)),
    records.TargetSeen(KEY, TARGET),
    records.Intent(A, ("x", "y"), "plan-1", 1796000001.0, KEY, 600, LINK_1, None, None, SLOT),
    records.Receipt(A, 2001),
    records.Intent(B, ("x", "y"), "plan-1", 1796000001.0, KEY, 600, LINK_2, None, None, SLOT),
    records.Receipt(B, 2002),
    records.Settled(
        (
            records.Settlement(
                A,
                2001,
                1796000010.0,
                None,
                1796000500.0,
                (SlotEnd(0, 1796000100.0), SlotEnd(75, 1796000550.0)),
                (1,),
            ),
        ),
        (records.Listed(KEY, 1796000600.0),),
    ),
    records.Intent(C, ("z",), "plan-2", 1796000700.0, KEY, 60, None, None, None, SLOT),
    records.Resolved(C, 2003),
    records.Intent(D, (), "plan-3", 1796000800.0, KEY, 3600, None, TERMS),
    records.Receipt(D, 2004),
]
"""Folded into the snapshot: a settled chain link with a handoff, a horizon, a lease."""

AFTER_COMPACTION = [
    records.Intent(E, ("z",), "plan-4", 1796000900.0, KEY, 3600, None, None, D),
    records.Receipt(E, 2004),
    records.Settled(
        (
            records.Settlement(
                B, 2002, 1796000560.0, 1796000590.0, None, (None, SlotEnd(0, 1796000580.0))
            ),
            records.Settlement(C, 2003, None, None, None, (None,)),
        ),
        (records.Listed(KEY, 1796001000.0),),
    ),
    records.Intent(F, ("y",), "plan-5", 1796001100.0, KEY, 60, None, None, None, SLOT),
]
"""The tail: a step in the lease, a settled record of two allocations, a pending intent."""


def write_campaign(path: Path) -> None:
    with store.writing(path, create=True) as writer:
        first, *rest = BEFORE_COMPACTION
        assert isinstance(first, records.Created)
        writer.initialize(first)
        for change in rest:
            writer.add(change)
        writer.compact()
        for change in AFTER_COMPACTION:
            writer.add(change)
    (path / store.LOCK).unlink()


if __name__ == "__main__":
    if OUT.exists():
        sys.exit(f"{OUT} exists; this data is written once, by d977980")
    OUT.mkdir()
    try:
        write_campaign(OUT / "campaign")
    except BaseException:
        shutil.rmtree(OUT)
        raise
