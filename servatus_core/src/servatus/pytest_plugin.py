"""The ``fake_scheduler`` fixture for a project's own tests, registered with pytest through the
``pytest11`` entry point of ``servatus-core``, as pytest plugins ship fixtures: a project that
installs Servatus can test its launcher against FakeScheduler with no conftest code.

pytest imports this module in every run of every project where Servatus is installed, so it
imports FakeScheduler only when a test asks for the fixture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from servatus.testing import FakeScheduler


@pytest.fixture
def fake_scheduler() -> FakeScheduler:
    """A new servatus.testing.FakeScheduler for each test, with its defaults: pass it as
    connect= to Campaign, diagnose or servatus.cli.main. A test that needs other settings (a
    clock, a Slurm version) builds its own."""
    from servatus.testing import FakeScheduler  # noqa: PLC0415 - only for the tests that use it

    return FakeScheduler()
