"""The marker listing reads lease steps' claims from the orders directories of live lease links,
as further start points of its one ``find`` (ADR 0009 "What status reads"), through the real
local transport: claims made by ``ln`` as the lease and a withdrawer make them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_helpers import make_target

from servatus.evidence import Marker, MarkerKind, MarkerQuery, fold_markers, step_observation
from servatus.lease import claim_name, orders_directory
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.markers import marker_name
from servatus_slurm.transport import LocalTransport

READER = SlurmEvidenceReader()
LEASE = "aaaaaaaaaaaaaaaaaaaaaaaa"
GONE = "bbbbbbbbbbbbbbbbbbbbbbbb"
TAKEN = "111111111111111111111111"
WITHDRAWN = "222222222222222222222222"
UNTAKEN = "333333333333333333333333"
JOB = 41234


def orders(logs: Path, lease: str) -> Path:
    directory = logs / orders_directory(lease)
    directory.mkdir(mode=0o700)
    return directory


def lease_tree(logs: Path) -> None:
    """A lease's orders directory with one order taken, one withdrawn, one not decided, and the
    taken step's own markers at the top level."""
    directory = orders(logs, LEASE)
    for step in (TAKEN, UNTAKEN):
        (directory / step).write_text("# servatus.order/1 ...\n")
    void = directory / f"{WITHDRAWN}.void.1"
    void.touch()
    subprocess.run(
        ["ln", str(directory / TAKEN), str(directory / claim_name(TAKEN, JOB))], check=True
    )
    subprocess.run(["ln", str(void), str(directory / claim_name(WITHDRAWN, JOB))], check=True)
    void.unlink()
    (directory / TAKEN).unlink()  # the lease removes a taken order; its claim keeps the text
    (logs / marker_name(LEASE, JOB, MarkerKind.START)).touch()
    (logs / marker_name(TAKEN, JOB, MarkerKind.STEP_START)).touch()
    (logs / marker_name(TAKEN, JOB, MarkerKind.END, slot=0, exit_code=0)).touch()


def listed(target_root: Path, query: MarkerQuery, *, clock: bool = True) -> list[Marker]:
    target = make_target(target_root.parent, log_root=str(target_root))
    result = LocalTransport().run(READER.marker_command(target, query, clock=clock))
    assert result.returncode == 0, result.stderr
    return READER.parse_markers(result)


def kinds(markers: list[Marker]) -> set[tuple[str, str, int | None]]:
    return {(m.allocation_id, m.kind.value, m.size) for m in markers}


@pytest.mark.parametrize("clock", [True, False])
@pytest.mark.parametrize("named", [True, False])
def test_claims_are_listed_from_the_orders_directory_with_their_verdict(
    tmp_path: Path, clock: bool, named: bool
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    lease_tree(logs)
    ids = [LEASE, TAKEN, WITHDRAWN, UNTAKEN]
    query = MarkerQuery.of(ids if named else [str(i) for i in range(2000)], None, [LEASE])
    found = listed(logs, query, clock=clock)
    assert kinds(found) == {
        (LEASE, "start", None),
        (TAKEN, "step-start", None),
        (TAKEN, "end", None),
        (TAKEN, "claim", len("# servatus.order/1 ...\n")),
        (WITHDRAWN, "claim", 0),
    }
    folded = fold_markers(found)
    taken, withdrawn = step_observation(folded[TAKEN]), step_observation(folded[WITHDRAWN])
    assert taken.step and taken.claim is True and taken.start is not None
    assert withdrawn.claim is False and withdrawn.start is None
    assert step_observation(folded.get(UNTAKEN)).claim is None


def test_without_the_lease_named_no_claim_is_listed(tmp_path: Path) -> None:
    """The listing never descends into an orders directory it was not given."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lease_tree(logs)
    found = listed(logs, MarkerQuery.of([LEASE, TAKEN, WITHDRAWN]))
    assert {kind for _, kind, _ in kinds(found)} == {"start", "step-start", "end"}


def test_a_purged_orders_directory_drops_out_instead_of_failing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    lease_tree(logs)
    (logs / "not-a-directory.orders").touch()
    query = MarkerQuery.of([LEASE, TAKEN, WITHDRAWN], None, [GONE, LEASE])
    assert (TAKEN, "claim", 23) in kinds(listed(logs, query))
    only_gone = MarkerQuery.of([LEASE, TAKEN], None, [GONE])
    assert (TAKEN, "claim", 23) not in kinds(listed(logs, only_gone))


def test_an_odd_log_root_is_a_start_point_by_value_never_evaluated(tmp_path: Path) -> None:
    """The directories are named on the ``find`` line through ``eval``, by variable name only:
    a log_root with spaces, quotes and ``$(...)`` is listed as written, and nothing runs."""
    logs = tmp_path / "my logs $(touch pwned) 'q' \"d\""
    logs.mkdir()
    lease_tree(logs)
    found = listed(logs, MarkerQuery.of([LEASE, TAKEN, WITHDRAWN], None, [LEASE]))
    assert (WITHDRAWN, "claim", 0) in kinds(found)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_many_lease_links_are_each_a_start_point(tmp_path: Path) -> None:
    """Each live link's directory is one start point (more than nine, past ``$9``)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    leases = [f"{index:024x}" for index in range(12)]
    for index, lease in enumerate(leases):
        directory = orders(logs, lease)
        step = f"{index + 100:024x}"
        (directory / claim_name(step, JOB)).write_text("x" * (index + 1))
    steps = [f"{index + 100:024x}" for index in range(12)]
    found = listed(logs, MarkerQuery.of(steps, None, leases))
    assert sorted(m.size or 0 for m in found if m.kind is MarkerKind.CLAIM) == list(range(1, 13))
