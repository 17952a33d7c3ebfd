"""Submitting a chain: each later link depends on the job of the link before it, accepted
earlier in the same submission, and a refused link stops the chain (ADR 0005)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.continuation import Link
from servatus.engine.plan import Allocation, earlier_links, later_links
from servatus.errors import ConfigurationError, ShapeRejected
from servatus.journal import store
from servatus.operations.submission import (
    script_problem,
    script_room,
    script_spec,
    submit_allocations,
)
from servatus.testing import FakeScheduler
from servatus.transport import CommandResult

IDS = ("c1" * 12, "c2" * 12, "c3" * 12)
FORGOTTEN = "sbatch: error: Batch job submission failed: Job dependency problem\n"
"""What sbatch 24.11 says, with exit 1, to afterok on a job slurmctld no longer knows (seen on
the test cluster, for a purged job and for one that never existed)."""


def chain(keys: tuple[str, ...] = ("a",), count: int = 3) -> list[Allocation]:
    return [
        Allocation(
            IDS[j],
            keys,
            Link(j + 1, count, 60),
            IDS[j - 1] if j else None,
            (count,) * len(keys),
        )
        for j in range(count)
    ]


def submit(
    tmp_path: Path, profile: Profile, fake: FakeScheduler, allocations: list[Allocation]
) -> Campaign:
    campaign = Campaign.ensure(tmp_path / "state", [Task("a", ["/bin/true"])], connect=fake)
    hooks = campaign._hooks()
    transport = fake(profile.target)
    with store.writing(campaign.path) as writer:
        assert writer.state is not None
        submit_allocations(
            writer,
            transport,
            hooks,
            profile,
            allocations,
            writer.state.tasks.by_key(),
            hooks.launcher(profile.target.launcher),
            plan_digest="d" * 64,
            target_identity="{}",
            budget=180,
        )
    return campaign


def sbatch_calls(fake: FakeScheduler) -> list[tuple[str, ...]]:
    return [call for call in fake.calls if call[0].endswith("/sbatch")]


def test_each_later_link_depends_on_the_job_of_the_one_before(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler(first_job=500)
    submit(tmp_path, profile, fake, chain())
    calls = sbatch_calls(fake)
    assert [call[1:] for call in calls] == [
        ("--parsable",),
        ("--parsable", "--dependency=afterany:500"),
        ("--parsable", "--dependency=afterany:501"),
    ]
    scripts = [job.script for job in fake.jobs]
    assert "servatus_link=1\nservatus_links=3\n" in scripts[0]
    assert f"servatus_link=3\nservatus_links=3\nservatus_after={IDS[1]}\n" in scripts[2]
    # A link that hands nothing on removes the later ones, newest first.
    assert f"servatus_later='{IDS[2]} {IDS[1]}'\n" in scripts[0]
    assert f"servatus_later='{IDS[2]}'\n" in scripts[1]
    assert "SERVATUS_BUDGET=180\n" in scripts[1]


def test_a_link_whose_predecessor_is_not_sent_before_it_is_never_sent(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    links = chain()
    with pytest.raises(ConfigurationError, match=f"follows {IDS[0]}"):
        submit(tmp_path, profile, fake, links[1:])
    with pytest.raises(ConfigurationError, match=f"follows {IDS[1]}"):
        submit(tmp_path, profile, fake, [links[0], links[2], links[1]])
    assert not sbatch_calls(fake)
    with store.writing(tmp_path / "state") as writer:
        assert writer.state is not None and not writer.state.intents


def test_afterok_on_a_forgotten_job_is_a_refusal_and_ends_the_chain(
    tmp_path: Path, profile: Profile
) -> None:
    """Slurm refuses afterok on a job it forgot: a definite refusal (the link is recorded as not
    submitted), not a lost controller, and none of the chain's later links is sent."""
    fake = FakeScheduler()
    links = chain()
    original = fake.run
    sent: list[int] = []

    def run(argv: Sequence[str], **kw: Any) -> CommandResult:
        if argv[0].endswith("/sbatch") and "--parsable" in argv:
            sent.append(1)
            if len(sent) == 2:  # the first link ran, ended and was purged before this sbatch
                fake.fail("sbatch", stderr=FORGOTTEN)
        return original(argv, **kw)

    fake.run = run  # type: ignore[method-assign]
    with pytest.raises(
        ShapeRejected,
        match=r"Job dependency problem \(chain link 2/3: none of its later links was sent\)",
    ):
        submit(tmp_path, profile, fake, links)
    assert len(sbatch_calls(fake)) == 2
    with store.writing(tmp_path / "state") as writer:
        assert writer.state is not None
        intents = {i.allocation_id for i in writer.state.intents}
        assert intents == {IDS[0], IDS[1], IDS[2]}  # one batch: every intent before it went out
        unsent = {(r.allocation_id, r.job) for r in writer.state.resolutions}
        assert unsent == {(IDS[1], None), (IDS[2], None)}  # refused, and never sent after it


def test_planning_measures_a_chain_link_as_long_as_submission_renders_it(
    tmp_path: Path, profile: Profile
) -> None:
    """A link's script carries the early stop, the guard and its earlier links' ids: planning
    must measure that, not the plain script of the same Tasks, or a link that fits at planning
    could be over max_script_bytes at submit."""
    campaign = Campaign.ensure(tmp_path / "state", [Task("a", ["/bin/true"])])
    hooks = campaign._hooks()
    launcher = hooks.launcher(profile.target.launcher)
    tasks = {"a": Task("a", ["/bin/true"])}
    links = [
        Allocation(f"{j:024x}", ("a",), Link(j, 32, 60), f"{j - 1:024x}" if j > 1 else None, (32,))
        for j in range(1, 33)
    ]
    earlier, later = earlier_links(links), later_links(links)
    rendered = [
        len(
            hooks.batch_script(
                script_spec(
                    profile,
                    link,
                    tasks,
                    launcher,
                    earlier=earlier.get(link.allocation_id, ()),
                    later=later.get(link.allocation_id, ()),
                    budget=10**6,
                    spent={"a": 10**6},
                )
            ).encode()
        )
        for link in links
    ]
    plain = len(
        hooks.batch_script(
            script_spec(profile, Allocation("0" * 24, ("a",)), tasks, launcher)
        ).encode()
    )
    assert max(rendered) > plain
    room = script_room(hooks, profile, launcher)
    assert room is not None and room.frame >= max(rendered)
    for link, size in zip(links, rendered, strict=True):
        tight = attrs.evolve(
            profile, target=attrs.evolve(profile.target, max_script_bytes=size - 1)
        )
        assert script_problem(hooks, tight, link, tasks, launcher) is not None
        # Measured with the widest budget and run time, so a few bytes more than this one's.
        roomy = attrs.evolve(
            profile, target=attrs.evolve(profile.target, max_script_bytes=size + 32)
        )
        assert script_problem(hooks, roomy, link, tasks, launcher) is None
