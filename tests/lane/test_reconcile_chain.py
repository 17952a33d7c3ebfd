"""reconcile withholds the handoff a chain link would take before it records that link as never
submitted, so a late ``sbatch`` of it runs nothing (ADR 0005, "Conflict 1 revisited")."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from chainkit import chain_campaign, link_id, link_script, sbatch

from servatus.config import Profile, target_identity
from servatus.errors import StateWarning
from servatus.journal import records, store
from servatus.operations.reconcile import (
    RECONCILE_AFTER,
    Resolution,
    claim_command,
    decide_link,
    read_claims,
)
from servatus.testing import FakeScheduler

T0 = 1_800_000_000.0


def test_a_link_reconcile_records_as_never_submitted_never_runs_if_it_arrives_late(
    tmp_path: Path, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [T0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    fake = FakeScheduler(clock=lambda: now[0])
    campaign, [[first]] = chain_campaign(
        tmp_path / "s", fake, profile, [(("k",), 2, [2])], stop_after=1
    )
    with store.writing(campaign.path) as writer:  # link 2's intent; its sbatch never answered
        target = writer.target(target_identity(profile.target))
        link = records.ChainLink(2, 2, link_id(1, 1), (2,), 0)
        writer.add(records.Intent(link_id(1, 2), ("k",), "digest", T0, target, 300, link))
    fake.finish(first, 75)
    handoff = f"servatus-{link_id(1, 1)}.{first}"
    assert f"{handoff}.handoff.0" in fake.markers
    now[0] = T0 + RECONCILE_AFTER - 1
    assert [d.outcome for d in campaign.reconcile()] == ["waiting"]
    assert f"{handoff}.taken.0" not in fake.claims  # nothing withheld while it may still come
    now[0] = T0 + RECONCILE_AFTER + 1
    with pytest.warns(StateWarning, match=r"link 2 was never sent, so k stops after it"):
        assert [d.outcome for d in campaign.reconcile()] == ["not_submitted"]
    assert fake.claims[f"{handoff}.taken.0"][1] == b""
    late = sbatch(
        fake,
        link_script(link_id(1, 2), 1, position=2, of=2, after=link_id(1, 1), task_links=[2]),
        first,
    )
    fake.start(late)
    assert [name for name in fake.markers if f".{late}." in name] == [
        f"servatus-{link_id(1, 2)}.{late}.start"
    ]
    [task] = campaign.status().tasks
    assert (task.execution.value, task.link.position if task.link else None) == ("STOPPED", 1)


def test_a_claim_a_link_took_first_means_the_link_was_accepted() -> None:
    never = Resolution("a" * 24, "not_submitted")
    claims = read_claims(b"taken 0 4242\nwithdrawn 1\n", [0, 1])
    assert claims == {0: 4242, 1: False}
    assert decide_link(never, claims, now=5.0) == Resolution("a" * 24, "accepted", job=4242)
    assert decide_link(never, {0: False, 1: False}, now=5.0) is never
    waiting = Resolution("a" * 24, "waiting", retry_at=5.0)
    assert decide_link(never, {0: False, 1: None}, now=5.0) == waiting
    assert decide_link(never, None, now=5.0) == waiting
    # Lines that are not answers, or name another slot, decide nothing.
    assert read_claims(b"taken 0 x\ntaken 7 1\nwithdrawn\n", [0]) == {0: None}


@pytest.mark.parametrize("shell", ["/bin/sh", "dash", "bash"])
def test_the_claim_script_in_a_real_shell(tmp_path: Path, shell: str) -> None:
    """A claim a link made first is read back with its job number; an unclaimed handoff gets
    reconcile's empty claim; a second reconcile reads its own withheld claim the same way."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    previous = "b" * 24
    (tmp_path / f"servatus-{previous}.17.taken.0").write_text("4242\n")
    argv = claim_command(str(tmp_path), previous, 17, [0, 1])
    for _ in range(2):
        done = subprocess.run([shell, *argv[1:]], capture_output=True, check=True)
        assert read_claims(done.stdout, [0, 1]) == {0: 4242, 1: False}
    assert (tmp_path / f"servatus-{previous}.17.taken.1").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"servatus-{previous}.17.taken.0",
        f"servatus-{previous}.17.taken.1",
    ]
