"""Smoke test run by `tox -e wheels` against the built wheels, never the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import servatus

REPO = Path(__file__).resolve().parents[2]


def test_imports_come_from_installed_wheels() -> None:
    location = Path(servatus.__file__).resolve()
    assert "site-packages" in location.parts
    assert REPO not in location.parents
    import servatus_publish
    import servatus_slurm

    for module in (servatus_publish, servatus_slurm):
        assert REPO not in Path(module.__file__ or "").resolve().parents


def test_public_api_imports() -> None:
    from servatus import Campaign, Profile, Task, Workspace, publish, publish_file
    from servatus.errors import DestinationExists

    assert all(callable(item) for item in (Campaign, Profile, Task, Workspace, publish))
    assert callable(publish_file)
    assert issubclass(DestinationExists, Exception)


def test_cli_version_and_plugins() -> None:
    servatus_bin = Path(sys.executable).with_name("servatus")
    version = subprocess.run(
        [servatus_bin, "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == "servatus 0.14.1"
    listing = subprocess.run(
        [sys.executable, "-m", "servatus", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    for name in ("servatus-direct", "servatus-slurm", "servatus-apptainer", "servatus-publish"):
        assert f'"{name}"' in listing.stdout
