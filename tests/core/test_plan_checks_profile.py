"""A Profile changed in Python is held to SERVATUS.toml's rules when it is planned with: one
Task over a ceiling is refused in one line (it used to pack into a ``range()`` error, or be
planned past ``max_time_limit``)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from servatus import Campaign, Profile, Task
from servatus.errors import ConfigurationError
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    (tmp_path / "SERVATUS.toml").write_text(CPU_PROFILE)
    return Profile.load(tmp_path / "SERVATUS.toml")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"cpus": 10_000}, "resources.cpus = 10000 exceeds target.max_cpus_per_allocation"),
        ({"time_limit": 400 * 86400}, "resources.time_limit = 400-00:00:00 exceeds"),
    ],
)
def test_plan_and_hold_refuse_a_profile_over_a_ceiling(
    tmp_path: Path, profile: Profile, change: dict[str, int], words: str
) -> None:
    over = attrs.evolve(profile, resources=attrs.evolve(profile.resources, **change))
    campaign = Campaign.create(
        tmp_path / "state", [Task("t", ["/usr/bin/true"])], connect=FakeScheduler()
    )
    for planning in (lambda: campaign.plan(over), lambda: campaign.hold(over, slots=2)):
        with pytest.raises(ConfigurationError, match=r"^profile 'cpu': ") as refused:
            planning()
        assert words in str(refused.value)
    assert campaign.plan(profile).decision.selected  # the file's own profile still plans
