"""The ``fake_scheduler`` fixture that ``servatus-core`` gives pytest through its ``pytest11``
entry point: no conftest here or in a user's project defines it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from servatus.testing import FakeScheduler


def test_the_fixture_is_a_new_fake_scheduler(fake_scheduler: FakeScheduler) -> None:
    assert isinstance(fake_scheduler, FakeScheduler)
    assert (fake_scheduler.jobs, fake_scheduler.calls) == ([], [])


def test_a_project_without_a_conftest_gets_a_new_fake_per_test(tmp_path: Path) -> None:
    (tmp_path / "test_launcher.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('attempt', [1, 2])\n"
        "def test_each_test_starts_empty(fake_scheduler, attempt):\n"
        "    assert fake_scheduler.calls == []\n"
        "    fake_scheduler.run(['/usr/bin/sbatch', '--version'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


def test_loading_the_plugin_does_not_load_the_fake() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, servatus.pytest_plugin; print('servatus.testing' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout == "False\n"
