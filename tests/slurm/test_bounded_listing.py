"""The bounded marker listing: by name up to MAX_NAMED ids, by the file server's mtime beyond,
and everything without a basis; each gives the wanted allocations' markers exactly."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_transport import fake_ssh  # noqa: F401 - the fixture

from servatus.evidence import LOG_ROOT_MISSING, MarkerKind, MarkerQuery
from servatus_slurm import evidence
from servatus_slurm.evidence import MAX_NAMED, NAMED_IN_FIND, SlurmEvidenceReader
from servatus_slurm.markers import marker_name, step_log_name
from servatus_slurm.transport import Frame, LocalTransport, SshTransport, remote_command
from testkit import make_target

READER = SlurmEvidenceReader()
IDS = [f"{index:024x}" for index in range(1, 6)]
OTHER = "f" * 24  # another campaign's allocation in the same log_root
ARG_MAX_STRLEN = 128 * 1024


def populate(logs: Path) -> dict[str, float]:
    """Start and end markers (and logs) of IDS and OTHER, the i-th at mtime 1000 * (i + 1)."""
    logs.mkdir(exist_ok=True)
    times = {}
    for index, allocation in enumerate([*IDS, OTHER]):
        at = 1000.0 * (index + 1)
        for name in (
            marker_name(allocation, 7, MarkerKind.START),
            marker_name(allocation, 7, MarkerKind.END, slot=0, exit_code=index),
            step_log_name(allocation, 7, 0),
        ):
            (logs / name).touch()
            os.utime(logs / name, (at, at))
        times[allocation] = at
    return times


def listed_ids(transport: object, target: object, query: MarkerQuery | None) -> list[str]:
    result = transport.run(READER.marker_command(target, query))  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stderr
    assert READER.parse_clock(result) > 0
    return sorted({marker.allocation_id for marker in READER.parse_markers(result)})


def test_named_ids_list_exactly_their_markers(tmp_path: Path) -> None:
    populate(tmp_path / "logs")
    target = make_target(tmp_path, log_root=str(tmp_path / "logs"))
    local = LocalTransport()
    assert listed_ids(local, target, MarkerQuery.of([IDS[0], IDS[3]])) == [IDS[0], IDS[3]]
    assert listed_ids(local, target, MarkerQuery.of([IDS[2]], since=10**9)) == [IDS[2]]
    assert listed_ids(local, target, MarkerQuery.of([])) == []
    assert listed_ids(local, target, None) == sorted([*IDS, OTHER])


def test_beyond_the_named_bound_the_file_servers_mtime_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    times = populate(tmp_path / "logs")
    target = make_target(tmp_path, log_root=str(tmp_path / "logs"))
    monkeypatch.setattr(evidence, "MAX_NAMED", 2)
    local = LocalTransport()
    wanted = MarkerQuery.of(IDS[2:], since=times[IDS[2]] - 1)
    assert "-newermt" in READER.marker_command(target, wanted)
    # Newer than the basis: the wanted ones, and another campaign's recent markers (ignored
    # by the core, which asked for them by no id); never an older one.
    assert listed_ids(local, target, wanted) == sorted([*IDS[2:], OTHER])
    assert listed_ids(local, target, MarkerQuery.of(IDS[2:])) == sorted([*IDS, OTHER])


def test_the_named_bound_fits_one_ssh_argument(tmp_path: Path) -> None:
    target = make_target(tmp_path, log_root="/scratch/alice/a rather long/log root/" + "x" * 200)
    ids = [os.urandom(12).hex() for _ in range(MAX_NAMED)]
    command = remote_command(READER.marker_command(target, MarkerQuery.of(ids)), Frame.random())
    assert "-newermt" not in command and all(command.count(i) == 1 for i in ids)
    assert len(command.encode()) < ARG_MAX_STRLEN // 2, len(command)


@pytest.mark.parametrize("extra", [NAMED_IN_FIND - 2, NAMED_IN_FIND - 1, MAX_NAMED - 2])
def test_either_side_of_the_find_names_the_same_markers_are_listed(
    tmp_path: Path, extra: int
) -> None:
    """Up to NAMED_IN_FIND ids are find's -name tests, beyond it the awk filter's list: the
    same markers come back, the clock row first, and a foreign file only under a named id."""
    populate(tmp_path / "logs")
    target = make_target(tmp_path, log_root=str(tmp_path / "logs"))
    ids = [IDS[1], IDS[4], *(os.urandom(12).hex() for _ in range(extra))]
    command = READER.marker_command(target, MarkerQuery.of(ids))
    assert (command[3] == evidence.FILTER_LABEL) == (len(ids) > NAMED_IN_FIND)
    assert listed_ids(LocalTransport(), target, MarkerQuery.of(ids)) == [IDS[1], IDS[4]]
    assert listed_ids(LocalTransport(), target, MarkerQuery.of(ids[2:])) == []


def test_the_filter_keeps_the_listings_failure(tmp_path: Path) -> None:
    """A log_root that is gone, or a listing killed, is the listing's own exit status through
    the filter, and one whose status line never came is a failure (125), never a success."""
    target = make_target(tmp_path, log_root=str(tmp_path / "gone"))
    ids = [os.urandom(12).hex() for _ in range(NAMED_IN_FIND + 1)]
    command = READER.marker_command(target, MarkerQuery.of(ids))
    result = LocalTransport().run(command)
    assert result.returncode == LOG_ROOT_MISSING and b"is not a directory" in result.stderr
    killed = [*command[:5], "/bin/sh", "-c", 'echo "clock 5.0"; kill -9 $$']
    result = LocalTransport().run(killed)
    assert result.returncode == 128 + 9 and result.stdout == b"clock 5.0\n"
    # The subshell that would print the status line dies with it: no line, so 125.
    lost = [*command[:5], "/bin/sh", "-c", 'echo "clock 5.0"; kill -9 $PPID']
    result = LocalTransport().run(lost)
    assert result.returncode == 125 and result.stdout == b"clock 5.0\n"


def test_a_forged_status_line_cannot_end_the_filter(tmp_path: Path) -> None:
    """Only the listing's last line is its status: a row cannot hold one, since no marker name
    has a "!" in it and the find prints no other name."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "!exit 0").touch()
    target = make_target(tmp_path, log_root=str(logs))
    ids = [os.urandom(12).hex() for _ in range(NAMED_IN_FIND + 1)]
    result = LocalTransport().run(READER.marker_command(target, MarkerQuery.of(ids)))
    assert result.returncode == 0 and b"!exit" not in result.stdout


def test_the_named_listing_runs_through_ssh(
    tmp_path: Path,
    fake_ssh: dict[str, str],  # noqa: F811
) -> None:
    """The whole named listing is one argument to the remote shell, quoted once, and comes back
    exactly: MAX_NAMED ids, two of them present."""
    populate(tmp_path / "logs")
    target = make_target(tmp_path, log_root=str(tmp_path / "logs"))
    ids = [IDS[1], IDS[4], *(os.urandom(12).hex() for _ in range(MAX_NAMED - 2))]
    began = time.time()
    found = listed_ids(SshTransport("hpc", environ=fake_ssh), target, MarkerQuery.of(ids))
    assert found == [IDS[1], IDS[4]]
    assert time.time() - began < 30
