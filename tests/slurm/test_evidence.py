"""Parsing squeue and marker listings: exact for ours, silent on everything else, never partial."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slurm_helpers import ALLOCATION, make_target

from servatus.errors import ConfigurationError, Unavailable
from servatus.evidence import (
    Marker,
    MarkerKind,
    MarkerQuery,
    QueueEntry,
    _renamed,
    fetch_markers,
    renamed_warning,
)
from servatus.transport import CommandResult
from servatus_slurm import evidence
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.markers import marker_name, parse_marker_name, step_log_name
from servatus_slurm.transport import LocalTransport

READER = SlurmEvidenceReader()
OTHERS = [f"{n:024x}" for n in range(1, 30)]
"""More ids than the listing names as find tests, so the awk filter runs."""
OTHER = "fedcba9876543210fedcba98"


def result(stdout: bytes, *, code: int = 0, truncated: bool = False) -> CommandResult:
    return CommandResult(("x",), code, stdout, b"boom\n", truncated)


def test_commands(tmp_path: Path) -> None:
    target = make_target(tmp_path, slurm_bin="/opt/slurm/bin/")
    assert READER.queue_command(target) == [
        "/opt/slurm/bin/squeue",
        "--me",
        "--noheader",
        "--states=all",
        "--format=%A|%j|%T",
    ]
    listing = READER.marker_command(target, clock=False)
    assert listing[:2] == ["/bin/sh", "-c"] and "mktemp" not in listing[2]  # writes nothing
    assert listing[3:] == [
        "find",
        f"{tmp_path}/logs",
        "%f %T@ %s\\n",
        "0",
        "-name",
        "servatus-" + "?" * 24 + ".*",
    ]
    clocked = READER.marker_command(target)
    assert clocked[:2] == ["/bin/sh", "-c"]
    assert clocked[3:] == [
        "find",
        f"{tmp_path}/logs",
        "%f %T@ %s\\n",
        "0",
        "-name",
        "servatus-" + "?" * 24 + ".*",
    ]


def test_parse_queue_keeps_only_well_formed_servatus_jobs() -> None:
    listing = (
        b"\n".join(
            [
                f"41234|servatus-{ALLOCATION}|RUNNING".encode(),
                f"41235|servatus-{OTHER}|PENDING".encode(),
                f"  41236|servatus-{OTHER}|OUT_OF_MEMORY  ".encode(),  # squeue pads some fields
                b"41237|my-own-job|RUNNING",  # not ours
                f"41238|servatus-{ALLOCATION.upper()}|RUNNING".encode(),  # not our id form
                f"41239|servatus-{ALLOCATION}0|RUNNING".encode(),  # wrong length
                f"0|servatus-{ALLOCATION}|RUNNING".encode(),  # not a job number
                f"0041|servatus-{ALLOCATION}|RUNNING".encode(),
                f"41240_3|servatus-{ALLOCATION}|RUNNING".encode(),  # an array element
                f"99999999999|servatus-{ALLOCATION}|RUNNING".encode(),  # beyond 32 bits
                f"41241|servatus-{ALLOCATION}|running".encode(),
                f"41242|servatus-{ALLOCATION}|RUNNING|extra".encode(),
                f"41243|servatus-{ALLOCATION}".encode(),
                b"x" * 10000,
                "41244|servatus-\u00e9|RUNNING".encode(),
                b"",
            ]
        )
        + b"\n"
    )
    assert READER.parse_queue(result(listing)) == [
        QueueEntry(41234, f"servatus-{ALLOCATION}", "RUNNING"),
        QueueEntry(41235, f"servatus-{OTHER}", "PENDING"),
        QueueEntry(41236, f"servatus-{OTHER}", "OUT_OF_MEMORY"),
    ]


@pytest.mark.parametrize("method", ["parse_queue", "parse_markers"])
def test_failed_or_partial_listings_are_unavailable(method: str) -> None:
    parse = getattr(READER, method)
    with pytest.raises(Unavailable, match="exited 1: boom"):
        parse(result(b"", code=1))
    with pytest.raises(Unavailable, match="partial"):
        parse(result(b"anything\n", truncated=True))


def test_row_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "MAX_ROWS", 3)
    line = f"1|servatus-{ALLOCATION}|RUNNING\n".encode()
    assert len(READER.parse_queue(result(line * 3))) == 3
    with pytest.raises(Unavailable, match="more than 3 rows"):
        READER.parse_queue(result(line * 4))


def test_parse_markers_reads_every_kind() -> None:
    a = f"servatus-{ALLOCATION}.41234"
    listing = "\n".join(
        [
            f"{a}.start 1732880000.1234567890 0",
            f"{a}.end.0.0 1732880100.5 0",
            f"{a}.end.12.255 1732880200 0",
            f"{a}.stop 1732880300.0000000000 0",
            f"{a}.limit 1732880250.25 0",
            f"{a}.handoff.3 1732880260.0 0",
            f"servatus-{OTHER}.7.step-start 1732880270.0 0",
            f"servatus-{ALLOCATION}-41234.out 1732880300.0 5123",  # a log
            f"servatus-{ALLOCATION}-41234.0.out 1732880300.0 77",  # a step log
            f"{a}.end.0.256 1732880100.5 0",  # no such exit code
            f"{a}.end.01.0 1732880100.5 0",  # leading zero
            f"{a}.end.0 1732880100.5 0",  # no exit code
            f"{a}.start.tmp 1732880000.0 0",
            f"{a}.start 17328800x0.0 0",  # bad time
            f"{a}.start 1732880000.0",  # no size
            f"{a}.finish 1732880000.0 0",
            f"servatus-{ALLOCATION}.0.start 1732880000.0 0",
            f"servatus-{ALLOCATION}.4294967296.start 1732880000.0 0",
            f"servatus-{ALLOCATION[:-1]}.1.start 1732880000.0 0",
            f"{a}.start  1732880000.0 0",
            "servatus-x y.start 1.0 0",
            "",
        ]
    ).encode()
    assert READER.parse_markers(result(listing)) == [
        Marker(ALLOCATION, 41234, MarkerKind.START, 1732880000.123456789),
        Marker(ALLOCATION, 41234, MarkerKind.END, 1732880100.5, slot=0, exit_code=0),
        Marker(ALLOCATION, 41234, MarkerKind.END, 1732880200.0, slot=12, exit_code=255),
        Marker(ALLOCATION, 41234, MarkerKind.STOP, 1732880300.0),
        Marker(ALLOCATION, 41234, MarkerKind.LIMIT, 1732880250.25),
        Marker(ALLOCATION, 41234, MarkerKind.HANDOFF, 1732880260.0, slot=3),
        Marker(OTHER, 7, MarkerKind.STEP_START, 1732880270.0),
    ]


@given(
    kind=st.sampled_from(list(MarkerKind)),
    job=st.integers(1, 2**32 - 1),
    slot=st.integers(0, 9999),
    code=st.integers(0, 255),
)
def test_marker_names_round_trip(kind: MarkerKind, job: int, slot: int, code: int) -> None:
    name = marker_name(ALLOCATION, job, kind, slot=slot, exit_code=code)
    marker = parse_marker_name(name, 5.0)
    assert marker is not None
    assert (marker.allocation_id, marker.job, marker.kind) == (ALLOCATION, job, kind)
    assert marker.slot == (
        slot if kind in (MarkerKind.END, MarkerKind.HANDOFF, MarkerKind.TAKEN) else None
    )
    assert marker.exit_code == (code if kind is MarkerKind.END else None)
    assert parse_marker_name(step_log_name(ALLOCATION, job, slot), 5.0) is None


def test_real_find_listing(tmp_path: Path) -> None:
    logs = tmp_path / "real-logs"
    logs.mkdir()
    link = tmp_path / "linked-logs"
    link.symlink_to(logs)
    (logs / marker_name(ALLOCATION, 9, MarkerKind.START)).touch()
    (logs / marker_name(ALLOCATION, 9, MarkerKind.END, slot=1, exit_code=3)).touch()
    os.utime(logs / marker_name(ALLOCATION, 9, MarkerKind.START), (1000.5, 1000.5))
    (logs / "servatus-with\nnewline.start").touch()
    (logs / "unrelated").touch()
    (logs / f"servatus-{ALLOCATION}.orders").mkdir()
    (logs / f"servatus-{ALLOCATION}.orders" / marker_name(OTHER, 1, MarkerKind.START)).touch()
    for root in (logs, link):  # a symlinked log_root is followed
        target = make_target(tmp_path, log_root=str(root))
        found = READER.parse_markers(LocalTransport().run(READER.marker_command(target)))
        assert sorted((m.kind.value, m.slot, m.exit_code) for m in found) == [
            ("end", 1, 3),
            ("start", None, None),
        ]
        start = next(m for m in found if m.kind is MarkerKind.START)
        assert start.at == 1000.5


def test_real_find_lists_markers_but_not_logs(tmp_path: Path) -> None:
    """Logs are as many as markers; leaving them out keeps a large campaign's listing in bound."""
    logs = tmp_path / "logs"
    logs.mkdir()
    markers = [
        marker_name(ALLOCATION, 9, MarkerKind.START),
        marker_name(ALLOCATION, 9, MarkerKind.END, slot=0, exit_code=0),
        marker_name(ALLOCATION, 9, MarkerKind.HANDOFF, slot=2),
    ]
    for name in [*markers, f"servatus-{ALLOCATION}-9.out", step_log_name(ALLOCATION, 9, 0)]:
        (logs / name).touch()
    before = sorted(path.name for path in logs.iterdir())
    result = LocalTransport().run(READER.marker_command(make_target(tmp_path, log_root=str(logs))))
    clock, root, *rows = (line.split(b" ")[0].decode() for line in result.stdout.splitlines())
    assert (clock, root) == ("clock", "root")
    assert sorted(rows) == sorted(markers)
    assert len(READER.parse_markers(result)) == len(markers)
    assert sorted(path.name for path in logs.iterdir()) == before  # the clock file is gone


def test_listing_of_many_markers_fits_the_output_bound(tmp_path: Path) -> None:
    """The markers of 120,000 one-Task allocations with 8-digit job numbers (18 MB, over the
    16 MiB the transports used to read) are read whole."""
    names = []
    for index in range(120_000):
        allocation, job = f"{index:024x}", 10_000_000 + index
        names.append(marker_name(allocation, job, MarkerKind.START))
        names.append(marker_name(allocation, job, MarkerKind.END, slot=0, exit_code=0))
    rows = "".join(f"{name} 1795957376.7304720000 0\n" for name in names).encode()
    listing = tmp_path / "listing"
    listing.write_bytes(rows)
    result = LocalTransport().run(["/bin/cat", str(listing)])
    assert not result.truncated and len(result.stdout) == len(rows) > 16 * 1024 * 1024
    assert len(READER.parse_markers(result)) == 240_000


def test_the_listing_reads_the_file_servers_clock(tmp_path: Path) -> None:
    """The clock row comes first, from a fresh file the listing itself creates (so its mtime is
    the file server's "now") and removes: no file of anyone's, stale or forged, is the clock."""
    logs = tmp_path / "logs"
    logs.mkdir()
    target = make_target(tmp_path, log_root=str(logs))
    stale = logs / f"servatus-clock.{os.getuid()}"  # the old per-user file, dated 1970
    stale.touch()
    os.utime(stale, (1000.0, 1000.0))
    for _ in range(2):
        before = time.time()
        listed = LocalTransport().run(READER.marker_command(target))
        clock = READER.parse_clock(listed)
        assert clock is not None and before - 1 <= clock <= time.time() + 1
        assert READER.parse_markers(listed) == []
        assert [path.name for path in logs.iterdir()] == [stale.name]
    assert stale.stat().st_mtime == 1000.0


def test_a_clock_file_swapped_for_a_link_is_no_clock(tmp_path: Path) -> None:
    """A link put at the fresh file's name before the row is read (someone else who can write
    log_root) is not followed, and its own mtime is never read as the clock."""
    logs = tmp_path / "logs"
    logs.mkdir()
    elsewhere = tmp_path / "elsewhere"
    script = evidence.CLOCK_SCRIPT.replace(
        '&& { find "$clock"',
        f'&& rm -f -- "$clock" && ln -s {shlex.quote(str(elsewhere))} "$clock" '
        '&& touch -h -d @2000000000 "$clock" && { find "$clock"',
    )
    argv = READER.marker_command(make_target(tmp_path, log_root=str(logs)))
    assert argv[2] == evidence.CLOCK_SCRIPT
    argv[2] = script
    listed = LocalTransport().run(argv)
    assert listed.returncode == 0, listed.stderr
    assert READER.parse_clock(listed) is None
    assert not elsewhere.exists() and list(logs.iterdir()) == []


def test_doctor_listing_writes_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    target = make_target(tmp_path, log_root=str(logs))
    assert LocalTransport().run(READER.marker_command(target, clock=False)).returncode == 0
    assert list(logs.iterdir()) == []


@pytest.mark.parametrize(
    "stdout",
    [
        b"",
        f"{marker_name(ALLOCATION, 9, MarkerKind.START)} 1.0 0\n".encode(),
        b"servatus-clock.1 x 0\n",
        b"servatus-clock.0 2000000000.5 0\n",  # the old clock row: a file anyone could set
        b"clock x\n",
        b"clock 2000000000.5 0\n",
        b" clock 2000000000.5\n",
        f"{marker_name(ALLOCATION, 9, MarkerKind.START)} 1.0 0\nclock 2000000000.5\n".encode(),
    ],
)
def test_a_listing_without_the_clock_row_has_no_clock(stdout: bytes) -> None:
    """No first-line clock row, no clock: run time falls back, the listing still counts."""
    assert READER.parse_clock(result(stdout)) is None


def test_a_failed_listing_has_no_clock() -> None:
    assert READER.parse_clock(result(b"clock 2000000000.5\n")) == 2000000000.5
    assert READER.parse_clock(result(b"clock 2000000000.5\n", code=1)) is None


def test_a_missing_log_root_is_a_configuration_error(tmp_path: Path) -> None:
    """The listing says a gone log_root apart (exit 66); the reader's parse still refuses it as
    unavailable, and fetching turns it into a configuration error, since asking again cannot
    help (issue #30)."""
    target = make_target(tmp_path, log_root=str(tmp_path / "absent"))
    with pytest.raises(Unavailable, match=r"find exited 66: log_root .* is not a directory"):
        READER.parse_markers(LocalTransport().run(READER.marker_command(target)))
    with pytest.raises(ConfigurationError, match="is not a directory on the cluster"):
        fetch_markers(LocalTransport(), READER, target)


def test_log_paths_match_what_the_script_writes(tmp_path: Path) -> None:
    target = make_target(tmp_path, log_root=f"{tmp_path}/logs/")
    assert READER.log_path(target, ALLOCATION, 41, None) == (
        f"{tmp_path}/logs/servatus-{ALLOCATION}-41.out"
    )
    assert READER.log_path(target, ALLOCATION, 41, 2) == (
        f"{tmp_path}/logs/servatus-{ALLOCATION}-41.2.out"
    )


@pytest.mark.parametrize(
    ("mode", "chown", "who"),
    [
        (0o755, None, None),
        (0o700, None, None),
        (0o2775, None, "its group"),
        (0o757, None, "others"),
        (0o777, None, "group and others"),
        (0o1777, None, None),  # sticky and the user's own: only she renames her files
        (0o1777, 0, None),  # /tmp's way: sticky, root's
        (0o1777, 4242, "uid 4242"),  # sticky, but its owner may rename anything in it
    ],
)
def test_status_says_when_others_can_rename_markers_in_log_root(
    tmp_path: Path, mode: int, chown: int | None, who: str | None
) -> None:
    """Issue #30's open end (ADR 0012): where others can rename entries in log_root, the user's
    own markers can be renamed into another outcome, which ownership cannot tell. The listing
    reads log_root's mode and owner in the same find; status then says so every time."""
    if chown is not None and os.geteuid() != 0:
        pytest.skip("needs root to give log_root another owner")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / marker_name(ALLOCATION, 9, MarkerKind.START)).touch()
    if chown is not None:
        os.chown(logs, chown, -1)
    logs.chmod(mode)
    target = make_target(tmp_path, log_root=str(logs))
    for query in (None, MarkerQuery.of([ALLOCATION]), MarkerQuery.of([ALLOCATION, *OTHERS])):
        result = LocalTransport().run(READER.marker_command(target, query))
        assert result.returncode == 0, result.stderr
        assert READER.parse_root(result) == (mode, os.stat(logs).st_uid, os.geteuid())
        assert len(READER.parse_markers(result)) == 1
        renamed = _renamed(READER, target, result)
        if who is None:
            assert renamed is None
        else:
            assert renamed == renamed_warning(str(logs), mode, who)


def test_no_row_but_the_first_two_can_be_the_root_row() -> None:
    rows = b"clock 5.0\nservatus-x 1 0\nroot 0777 1 1\n"
    assert READER.parse_root(CommandResult(("find",), 0, rows, b"")) is None
    assert READER.parse_root(CommandResult(("find",), 1, b"root 0777 1 1\n", b"")) is None
    assert READER.parse_root(CommandResult(("find",), 0, b"root 0777 1 1\n", b"")) == (
        0o777,
        1,
        1,
    )
