"""Every bound of the run-marker grammar (docs/development/markers.md), at it and one beyond, as
literal names with the reading written out by hand.

The listing tests compare the parsers with a reference built on the product's own name parser,
so a bound dropped from that parser drops from the reference too; these rows cannot follow it.
Each row is read alone (``parse_marker_name``) and inside a ``find`` listing (``parse_markers``).
"""

from __future__ import annotations

import pytest

from servatus.evidence import Marker, MarkerKind
from servatus.transport import CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.markers import parse_marker_name

ID = "0123456789abcdef01234567"  # 24 lowercase hex digits
AT = 5.0

START, END, STOP, LIMIT = MarkerKind.START, MarkerKind.END, MarkerKind.STOP, MarkerKind.LIMIT
HANDOFF, STEP_START, CLAIM = MarkerKind.HANDOFF, MarkerKind.STEP_START, MarkerKind.CLAIM
TAKEN = MarkerKind.TAKEN

ROWS: list[tuple[str, Marker | None]] = [
    # id: exactly 24 lowercase hex digits
    ("servatus-0123456789abcdef01234567.7.start", Marker(ID, 7, START, AT)),
    ("servatus-0123456789abcdef0123456.7.start", None),  # 23 digits
    ("servatus-0123456789abcdef012345678.7.start", None),  # 25 digits
    ("servatus-0123456789ABCDEF01234567.7.start", None),  # upper case
    ("servatus-0123456789abcdeg01234567.7.start", None),  # not hex
    # job: 1-9 then up to 9 digits, at most 2^32-1
    ("servatus-0123456789abcdef01234567.1.start", Marker(ID, 1, START, AT)),
    ("servatus-0123456789abcdef01234567.0.start", None),
    ("servatus-0123456789abcdef01234567.07.start", None),
    ("servatus-0123456789abcdef01234567.4294967295.start", Marker(ID, 4294967295, START, AT)),
    ("servatus-0123456789abcdef01234567.4294967296.start", None),
    ("servatus-0123456789abcdef01234567.9999999999.start", None),  # 10 digits, over 2^32-1
    ("servatus-0123456789abcdef01234567.10000000000.start", None),  # 11 digits
    ("servatus-0123456789abcdef01234567..start", None),
    # the plain kinds, and nothing more or less
    ("servatus-0123456789abcdef01234567.7.stop", Marker(ID, 7, STOP, AT)),
    ("servatus-0123456789abcdef01234567.7.limit", Marker(ID, 7, LIMIT, AT)),
    ("servatus-0123456789abcdef01234567.7.step-start", Marker(ID, 7, STEP_START, AT)),
    ("servatus-0123456789abcdef01234567.7.claim", Marker(ID, 7, CLAIM, AT, size=0)),
    ("servatus-0123456789abcdef01234567.7.claim.0", None),
    ("servatus-0123456789abcdef01234567.7.Claim", None),
    ("servatus-0123456789abcdef01234567.7.Start", None),
    ("servatus-0123456789abcdef01234567.7.start.0", None),
    ("servatus-0123456789abcdef01234567.7.stop.", None),
    ("servatus-0123456789abcdef01234567.7", None),
    # end.<slot>.<exit>: slot "0" or 1-9 then digits, at most 9999
    ("servatus-0123456789abcdef01234567.7.end.0.0", Marker(ID, 7, END, AT, 0, 0)),
    ("servatus-0123456789abcdef01234567.7.end.9999.0", Marker(ID, 7, END, AT, 9999, 0)),
    ("servatus-0123456789abcdef01234567.7.end.10000.0", None),
    ("servatus-0123456789abcdef01234567.7.end.99999.0", None),
    ("servatus-0123456789abcdef01234567.7.end.00.0", None),
    ("servatus-0123456789abcdef01234567.7.end.01.0", None),
    ("servatus-0123456789abcdef01234567.7.end.-1.0", None),
    # end.<slot>.<exit>: exit "0" or 1-9 then up to 2 digits, at most 255
    ("servatus-0123456789abcdef01234567.7.end.3.255", Marker(ID, 7, END, AT, 3, 255)),
    ("servatus-0123456789abcdef01234567.7.end.3.256", None),
    ("servatus-0123456789abcdef01234567.7.end.3.1000", None),
    ("servatus-0123456789abcdef01234567.7.end.3.143", Marker(ID, 7, END, AT, 3, 143)),
    ("servatus-0123456789abcdef01234567.7.end.3.00", None),
    ("servatus-0123456789abcdef01234567.7.end.3.075", None),
    ("servatus-0123456789abcdef01234567.7.end.3", None),
    ("servatus-0123456789abcdef01234567.7.end.3.", None),
    ("servatus-0123456789abcdef01234567.7.end", None),
    ("servatus-0123456789abcdef01234567.7.end.3.0.1", None),
    # handoff.<slot>: the same slot bound
    ("servatus-0123456789abcdef01234567.7.handoff.0", Marker(ID, 7, HANDOFF, AT, 0, None)),
    ("servatus-0123456789abcdef01234567.7.handoff.9999", Marker(ID, 7, HANDOFF, AT, 9999, None)),
    ("servatus-0123456789abcdef01234567.7.handoff.10000", None),
    ("servatus-0123456789abcdef01234567.7.handoff.00", None),
    ("servatus-0123456789abcdef01234567.7.handoff.012", None),
    ("servatus-0123456789abcdef01234567.7.handoff", None),
    ("servatus-0123456789abcdef01234567.7.handoff.1.0", None),
    # taken.<slot>: the same slot bound, and its size kept (the claim's verdict)
    ("servatus-0123456789abcdef01234567.7.taken.0", Marker(ID, 7, TAKEN, AT, 0, None, 0)),
    ("servatus-0123456789abcdef01234567.7.taken.9999", Marker(ID, 7, TAKEN, AT, 9999, None, 0)),
    ("servatus-0123456789abcdef01234567.7.taken.10000", None),
    ("servatus-0123456789abcdef01234567.7.taken.01", None),
    ("servatus-0123456789abcdef01234567.7.taken", None),
    ("servatus-0123456789abcdef01234567.7.Taken.0", None),
    # logs share the prefix and are never markers
    ("servatus-0123456789abcdef01234567-7.out", None),
    ("servatus-0123456789abcdef01234567-7.0.out", None),
]


@pytest.mark.parametrize(("name", "expected"), ROWS, ids=[name[34:] for name, _ in ROWS])
def test_a_marker_name_at_and_beyond_each_bound(name: str, expected: Marker | None) -> None:
    assert parse_marker_name(name, AT) == expected
    listing = f"{name} 5.0 0\n".encode()
    found = SlurmEvidenceReader().parse_markers(CommandResult(("find",), 0, listing, b""))
    assert found == ([] if expected is None else [expected])


def test_the_rows_cover_each_kind_and_both_sides_of_each_bound() -> None:
    kept = [marker for _, marker in ROWS if marker is not None]
    assert {marker.kind for marker in kept} == set(MarkerKind)


LISTED = "servatus-0123456789abcdef01234567.7.start"

LISTING_ROWS: list[tuple[str, float | None]] = [
    # mtime: up to 12 integer digits, and up to 10 after the point
    (f"{LISTED} 999999999999 0", 999999999999.0),
    (f"{LISTED} 1000000000000 0", None),
    (f"{LISTED} 1.1234567891 0", 1.1234567891),
    (f"{LISTED} 1.12345678912 0", None),
    (f"{LISTED} 0 0", 0.0),
    (f"{LISTED} 1. 0", None),
    (f"{LISTED} .5 0", None),
    (f"{LISTED} -1 0", None),
    # size: up to 20 digits
    (f"{LISTED} 5.0 99999999999999999999", 5.0),
    (f"{LISTED} 5.0 999999999999999999999", None),
    (f"{LISTED} 5.0", None),
    (f"{LISTED}  5.0 0", None),
]


@pytest.mark.parametrize(("row", "at"), LISTING_ROWS)
def test_a_listing_row_at_and_beyond_each_bound(row: str, at: float | None) -> None:
    found = SlurmEvidenceReader().parse_markers(
        CommandResult(("find",), 0, f"{row}\n".encode(), b"")
    )
    assert found == ([] if at is None else [Marker(ID, 7, START, at)])


CLAIMED = "servatus-0123456789abcdef01234567.7.claim"


@pytest.mark.parametrize(
    ("size", "kept"),
    [("0", 0), ("1", 1), ("5123", 5123), ("9" * 20, int("9" * 20)), ("9" * 21, None)],
)
def test_a_claims_size_is_its_verdict_and_only_a_claim_keeps_one(
    size: str, kept: int | None
) -> None:
    """0 is withdrawn (an empty file linked in), more is taken (a link to the order)."""
    listing = f"{CLAIMED} 5.0 {size}\n{LISTED} 5.0 {size}\n".encode()
    found = SlurmEvidenceReader().parse_markers(CommandResult(("find",), 0, listing, b""))
    if kept is None:
        assert found == []
    else:
        assert found == [Marker(ID, 7, CLAIM, 5.0, size=kept), Marker(ID, 7, START, 5.0)]
