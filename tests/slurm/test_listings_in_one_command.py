"""``squeue``, the clock and the marker listing in one remote command (issue #33): read back
exactly as if each had run alone, with the same failures as before, and nothing either prints
can pass for the other's output."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
from slurm_helpers import ALLOCATION

from servatus.errors import ConfigurationError, Unavailable
from servatus.evidence import MarkerKind, MarkerQuery, QueueEntry, fetch, renamed_warning
from servatus.transport import COMMAND_TIMEOUT, CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.markers import marker_name
from servatus_slurm.transport import LocalTransport
from testkit import make_target

READER = SlurmEvidenceReader()
OTHER = "fedcba9876543210fedcba98"


class Counting:
    """A local transport that counts its commands."""

    def __init__(self, inner: LocalTransport | None = None) -> None:
        self.inner = inner or LocalTransport()
        self.sent: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        self.sent.append(tuple(argv))
        return self.inner.run(argv, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        """Nothing to close."""


def cluster(tmp_path: Path, squeue: str) -> Path:
    """A ``slurm_bin`` whose ``squeue`` is the shell text ``squeue``, and an empty ``log_root``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
    (bindir / "squeue").chmod(0o755)
    (tmp_path / "logs").mkdir()
    return tmp_path / "logs"


def test_one_command_gives_the_queue_the_clock_and_the_markers(tmp_path: Path) -> None:
    logs = cluster(tmp_path, f"echo '41|servatus-{ALLOCATION}|RUNNING'")
    start = logs / marker_name(ALLOCATION, 41, MarkerKind.START)
    start.write_text("")
    transport = Counting()
    found = fetch(transport, READER, make_target(tmp_path), MarkerQuery.of([ALLOCATION]))
    assert len(transport.sent) == 1
    assert found.queue == (QueueEntry(41, f"servatus-{ALLOCATION}", "RUNNING"),)
    assert [(m.allocation_id, m.job, m.kind) for m in found.markers or ()] == [
        (ALLOCATION, 41, MarkerKind.START)
    ]
    assert found.clock is not None and found.clock >= start.stat().st_mtime - 1
    assert list(logs.iterdir()) == [start]  # the clock's file is gone again


def test_what_squeue_prints_never_passes_for_markers_or_a_clock(tmp_path: Path) -> None:
    """A job name or stray output shaped like a marker row, a clock row, or a frame of the
    transport's form (another token) stays squeue's: the listing's rows come from its own
    frame alone."""
    forged = marker_name(OTHER, 7, MarkerKind.START)
    fake_frame = "0" * 32
    logs = cluster(
        tmp_path,
        f"printf '%s\\n' '41|servatus-{ALLOCATION}|PENDING' 'clock 2000000000.5' "
        f"'{forged} 1.0 0' '\\n<{fake_frame} 0' '{fake_frame}>' '{forged} 2.0 0'; "
        f"printf '\\n<{fake_frame}\\n' >&2",
    )
    found = fetch(Counting(), READER, make_target(tmp_path), MarkerQuery.of([OTHER, ALLOCATION]))
    assert found.queue == (QueueEntry(41, f"servatus-{ALLOCATION}", "PENDING"),)
    assert found.markers == ()
    assert found.clock is not None and found.clock != 2000000000.5
    assert not list(logs.iterdir())


@pytest.mark.parametrize(
    ("squeue", "message"),
    [
        (
            "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1",
            "squeue failed (exit 1): squeue: error: Unable to contact slurm controller",
        ),
        ("exec /nonexistent/squeue", "squeue failed (exit 127): "),
    ],
)
def test_a_failing_squeue_is_said_as_before_and_nothing_is_listed(
    tmp_path: Path, squeue: str, message: str
) -> None:
    """A failing ``squeue`` is unavailable evidence with its own message; the listing, which
    would write the clock's file, does not run."""
    logs = cluster(tmp_path, squeue)
    transport = Counting()
    with pytest.raises(Unavailable) as caught:
        fetch(transport, READER, make_target(tmp_path), MarkerQuery.of([ALLOCATION]))
    assert str(caught.value).startswith(message)
    assert len(transport.sent) == 1
    assert not list(logs.iterdir())


def test_a_missing_squeue_is_said_as_before(tmp_path: Path) -> None:
    cluster(tmp_path, "exit 0")
    (tmp_path / "bin" / "squeue").unlink()
    with pytest.raises(Unavailable, match=r"^squeue failed \(exit 127\): .*squeue"):
        fetch(Counting(), READER, make_target(tmp_path), MarkerQuery.of([ALLOCATION]))


def test_a_gone_log_root_is_still_a_configuration_error(tmp_path: Path) -> None:
    logs = cluster(tmp_path, "exit 0")
    logs.rmdir()
    with pytest.raises(ConfigurationError, match="is not a directory on the cluster"):
        fetch(Counting(), READER, make_target(tmp_path), MarkerQuery.of([ALLOCATION]))


def test_an_answer_cut_at_the_read_bound_is_a_partial_listing(tmp_path: Path) -> None:
    logs = cluster(tmp_path, f"echo '41|servatus-{ALLOCATION}|RUNNING'")
    for job in range(1, 200):
        (logs / marker_name(ALLOCATION, job, MarkerKind.START)).write_text("")
    transport = Counting(LocalTransport(output_limit=4096))
    with pytest.raises(Unavailable, match="find printed more than can be read"):
        fetch(transport, READER, make_target(tmp_path))


def test_an_answer_without_its_frames_is_no_answer() -> None:
    """A transport that ran something else (or lost the frames) gives no evidence at all."""

    class Blank:
        def run(self, argv: Sequence[str], **_: object) -> CommandResult:
            return CommandResult(tuple(argv), 0, b"41|servatus-x|RUNNING\n", b"")

        def close(self) -> None:
            """Nothing to close."""

    with pytest.raises(Unavailable, match="no complete answer from squeue"):
        fetch(Blank(), READER, make_target(Path("/nonexistent")), MarkerQuery.of([ALLOCATION]))


def test_no_markers_asked_is_squeue_alone(tmp_path: Path) -> None:
    cluster(tmp_path, "exit 0")
    transport = Counting()
    found = fetch(transport, READER, make_target(tmp_path), MarkerQuery.of([]))
    assert found.markers == () and [argv[0] for argv in transport.sent] == [
        f"{tmp_path}/bin/squeue"
    ]


class TwoCommands:
    """The Slurm reader as one from before ``run_listings``: asked the two listings in turn."""

    def __init__(self) -> None:
        self.queue_command = READER.queue_command
        self.parse_queue = READER.parse_queue
        self.marker_command = READER.marker_command
        self.parse_markers = READER.parse_markers
        self.parse_foreign = READER.parse_foreign
        self.parse_clock = READER.parse_clock
        self.parse_root = READER.parse_root


def test_a_reader_without_run_listings_also_warns_of_renamers(tmp_path: Path) -> None:
    """The warning that others can rename markers comes from the marker listing, so the
    two-command path gives it as the one-command path does."""
    logs = cluster(tmp_path, f"echo '41|servatus-{ALLOCATION}|RUNNING'")
    (logs / marker_name(ALLOCATION, 41, MarkerKind.START)).write_text("")
    logs.chmod(0o777)
    target = make_target(tmp_path)
    query = MarkerQuery.of([ALLOCATION])
    transport = Counting()
    found = fetch(transport, TwoCommands(), target, query)  # type: ignore[arg-type]
    assert len(transport.sent) == 2
    assert found.renamed == renamed_warning(target.log_root, 0o777, "group and others")
    assert found == attrs.evolve(fetch(Counting(), READER, target, query), clock=found.clock)
