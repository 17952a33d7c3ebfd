"""The whole-listing parsers agree with a plain per-line reading on every kind of row.

The parsers read a listing with one regex instead of line by line; the reference below is the
per-line reading they replaced, kept here so any difference in what is kept or dropped shows.
"""

from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slurm_helpers import ALLOCATION

from servatus.errors import Unavailable
from servatus.evidence import Marker, MarkerKind, QueueEntry
from servatus.transport import CommandResult
from servatus_slurm import evidence
from servatus_slurm.evidence import MAX_LINE, SlurmEvidenceReader
from servatus_slurm.markers import ID_LENGTH, MAX_JOB, marker_name, parse_marker_name

READER = SlurmEvidenceReader()
OTHER = "fedcba9876543210fedcba98"

_QUEUE_LINE = re.compile(
    rb"(?P<job>[1-9][0-9]{0,9})\|(?P<name>servatus-[0-9a-f]{%d})\|(?P<state>[A-Z][A-Z_]{0,31})"
    % ID_LENGTH
)
_MARKER_LINE = re.compile(
    rb"(?P<name>servatus-[!-~]+) (?P<at>[0-9]{1,12}(?:\.[0-9]{1,10})?) (?P<size>[0-9]{1,20})"
)


def reference_lines(stdout: bytes) -> list[bytes]:
    lines = stdout.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) > evidence.MAX_ROWS:
        raise Unavailable("too many rows")
    return lines


def reference_queue(stdout: bytes) -> list[QueueEntry]:
    entries = []
    for line in reference_lines(stdout):
        if len(line) > MAX_LINE:
            continue
        match = _QUEUE_LINE.fullmatch(line.strip())
        if match is None or int(match["job"]) > MAX_JOB:
            continue
        entries.append(
            QueueEntry(int(match["job"]), match["name"].decode(), match["state"].decode())
        )
    return entries


def reference_markers(stdout: bytes) -> list[Marker]:
    markers = []
    for line in reference_lines(stdout):
        if len(line) > MAX_LINE:
            continue
        match = _MARKER_LINE.fullmatch(line)
        if match is None or not math.isfinite(float(match["at"])):
            continue
        name, at = match["name"].decode("ascii"), float(match["at"])
        marker = parse_marker_name(name, at, int(match["size"]))
        if marker is not None:
            markers.append(marker)
    return markers


def result(stdout: bytes) -> CommandResult:
    return CommandResult(("x",), 0, stdout, b"")


JOBS = ["1", "7", "41234", "0", "01", "4294967295", "4294967296", "9999999999", "99999999999"]
SLOTS = ["0", "3", "9999", "10000", "00", "012", "9999999999", "99999999999"]
EXITS = ["0", "255", "256", "007", "9999999999"]
TIMES = [
    "1732880000.1234567890",
    "1732880000",
    "0",
    "0.5",
    "01732880000.5",
    "999999999999.9999999999",
    "9999999999999",
    "1.12345678901",
    "1.",
    ".5",
    "inf",
    "nan",
    "1e9",
    "-1.0",
    "1_0",
]
SIZES = ["0", "5123", "9" * 20, "9" * 21, "-1", "1.0"]
GARBAGE = [
    "",
    " ",
    "unrelated",
    "servatus-",
    "servatus-\u00e9.start 1.0 0",
    f"servatus-{ALLOCATION}.41234.start",
    f"servatus-{ALLOCATION}.41234.start 1.0",
    f"servatus-{ALLOCATION}.41234.start  1.0 0",
    f"servatus-{ALLOCATION}.41234.start 1.0 0 extra",
    f"servatus-{ALLOCATION}.41234.finish 1.0 0",
    f"servatus-{ALLOCATION}.41234.start.tmp 1.0 0",
    f"servatus-{ALLOCATION.upper()}.41234.start 1.0 0",
    f"servatus-{ALLOCATION[:-1]}.41234.start 1.0 0",
    f"servatus-{ALLOCATION}0.41234.start 1.0 0",
    f"servatus-{ALLOCATION}-41234.out 1.0 5123",
    f"servatus-{ALLOCATION}-41234.0.out 1.0 77",
    f"41234|servatus-{ALLOCATION}|RUNNING",
    "x" * 10_000,
]
STATES = ["RUNNING", "PENDING", "OUT_OF_MEMORY", "A" * 32, "A" * 33, "running", "_X", "R"]
PADS = ["", " ", "  ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", " " * 440, " " * 600]
NOISE = ["\r", "\x00", "\xe9", "\xff", "\x80", " ", "\t", "|"]


def some_marker_name(rng: random.Random) -> str:
    identity = rng.choice([ALLOCATION, OTHER])
    job = rng.choice(JOBS)
    suffix = rng.choice(
        [
            *(
                kind.value
                for kind in MarkerKind
                if kind not in (MarkerKind.END, MarkerKind.HANDOFF)
            ),
            f"end.{rng.choice(SLOTS)}.{rng.choice(EXITS)}",
            f"handoff.{rng.choice(SLOTS)}",
            "end",
            f"end.{rng.choice(SLOTS)}",
            "handoff",
        ]
    )
    return f"servatus-{identity}.{job}.{suffix}"


def damaged(rng: random.Random, line: str) -> str:
    """``line`` with a stray byte inserted, prepended or appended (CR, NUL, non-ASCII...)."""
    where = rng.randrange(len(line) + 1)
    return line[:where] + rng.choice(NOISE) + line[where:]


def marker_listing(rng: random.Random, rows: int) -> bytes:
    lines = []
    for _ in range(rows):
        roll = rng.random()
        if roll < 0.55:
            line = f"{some_marker_name(rng)} {rng.choice(TIMES)} {rng.choice(SIZES)}"
        elif roll < 0.75:
            kind = rng.choice(list(MarkerKind))
            name = marker_name(ALLOCATION, rng.randrange(1, MAX_JOB), kind, slot=2, exit_code=3)
            line = f"{name} {rng.choice(TIMES[:3])} 0"
        elif roll < 0.9:
            line = rng.choice(GARBAGE)
        else:
            line = f"{some_marker_name(rng)} {rng.choice(TIMES)} {rng.choice(SIZES)}"
            line = damaged(rng, line)
        lines.append(line)
    return "\n".join(lines).encode("latin-1") + rng.choice([b"", b"\n"])


def queue_listing(rng: random.Random, rows: int) -> bytes:
    lines = []
    for _ in range(rows):
        roll = rng.random()
        if roll < 0.7:
            job, state = rng.choice(JOBS), rng.choice(STATES)
            name = rng.choice([f"servatus-{ALLOCATION}", f"servatus-{OTHER}", "my-job", ALLOCATION])
            line = f"{rng.choice(PADS)}{job}|{name}|{state}{rng.choice(PADS)}"
            if rng.random() < 0.1:
                line = damaged(rng, line)
        else:
            line = rng.choice(GARBAGE)
        lines.append(line)
    return "\n".join(lines).encode("latin-1") + rng.choice([b"", b"\n"])


@pytest.mark.parametrize("seed", range(20))
def test_parse_markers_matches_the_per_line_reading(seed: int) -> None:
    listing = marker_listing(random.Random(seed), 2000)
    expected = reference_markers(listing)
    assert {m.kind for m in expected} == set(MarkerKind)
    assert READER.parse_markers(result(listing)) == expected


@pytest.mark.parametrize("seed", range(20))
def test_parse_queue_matches_the_per_line_reading(seed: int) -> None:
    listing = queue_listing(random.Random(seed), 2000)
    expected = reference_queue(listing)
    assert any(entry.job == MAX_JOB for entry in expected)
    assert READER.parse_queue(result(listing)) == expected


@settings(max_examples=300)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(GARBAGE),
            st.builds(
                lambda name, at, size: f"{name} {at} {size}",
                st.builds(some_marker_name, st.randoms(use_true_random=False)),
                st.sampled_from(TIMES),
                st.sampled_from(SIZES),
            ),
            st.builds(
                lambda pad, job, state, end: f"{pad}{job}|servatus-{OTHER}|{state}{end}",
                st.sampled_from(PADS),
                st.sampled_from(JOBS),
                st.sampled_from(STATES),
                st.sampled_from(PADS),
            ),
            st.text(alphabet=st.characters(max_codepoint=255), max_size=80),
        ),
        max_size=30,
    ),
    st.sampled_from(["", "\n"]),
)
def test_both_parsers_match_the_per_line_reading_on_any_rows(lines: list[str], end: str) -> None:
    listing = ("\n".join(lines) + end).encode("latin-1")
    assert READER.parse_markers(result(listing)) == reference_markers(listing)
    assert READER.parse_queue(result(listing)) == reference_queue(listing)


@pytest.mark.parametrize(
    "stdout",
    [b"", b"\n", b"\n\n\n", b"\n\n\n\n", b"a\nb\nc", b"a\nb\nc\n", b"a\nb\nc\nd", b"a\n\n\nd\n"],
)
def test_row_bound_counts_rows_like_the_per_line_reading(
    monkeypatch: pytest.MonkeyPatch, stdout: bytes
) -> None:
    monkeypatch.setattr(evidence, "MAX_ROWS", 3)
    try:
        reference_lines(stdout)
    except Unavailable:
        with pytest.raises(Unavailable, match="more than 3 rows"):
            READER.parse_markers(result(stdout))
        with pytest.raises(Unavailable, match="more than 3 rows"):
            READER.parse_queue(result(stdout))
    else:
        assert READER.parse_markers(result(stdout)) == []
        assert READER.parse_queue(result(stdout)) == []


def test_the_longest_marker_row_fits_in_a_line() -> None:
    """Why ``parse_markers`` needs no length check: the grammar caps every field."""
    ten = "9" * 10
    longest = f"servatus-{ALLOCATION}.{ten}.end.{ten}.{ten} {'9' * 12}.{ten} {'9' * 20}"
    assert evidence._MARKER_ROW.fullmatch(f"\n{longest}")
    assert len(longest) == 115 <= MAX_LINE


def test_queue_padding_beyond_a_line_is_dropped() -> None:
    row = f"41234|servatus-{ALLOCATION}|RUNNING"
    fits = " " * (MAX_LINE - len(row) - 1) + row + " "
    assert READER.parse_queue(result(fits.encode())) == [
        QueueEntry(41234, f"servatus-{ALLOCATION}", "RUNNING")
    ]
    assert READER.parse_queue(result((fits + "\t").encode())) == []
