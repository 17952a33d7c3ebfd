"""Smoke test run by `tox -e wheels` against the built wheels, never the source tree."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import servatus

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("servatus_core", "servatus_publish", "servatus_slurm", "servatus_apptainer")


SOURCES = [REPO / name / "src" for name in DISTRIBUTIONS]


def test_imports_come_from_installed_wheels() -> None:
    import servatus_apptainer
    import servatus_publish
    import servatus_slurm

    for module in (servatus, servatus_publish, servatus_slurm, servatus_apptainer):
        location = Path(module.__file__ or "").resolve()
        assert "site-packages" in location.parts, location
        assert not any(source in location.parents for source in SOURCES), location
    for name in ("servatus-core", "servatus-publish", "servatus-slurm", "servatus-apptainer"):
        origin = importlib.metadata.distribution(name).read_text("direct_url.json") or "{}"
        assert '"editable": true' not in origin.replace(" ", "").replace(":true", ": true"), name


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


def test_publish_from_the_wheel(tmp_path: Path) -> None:
    from servatus import publish
    from servatus.errors import DestinationExists

    def build(draft: object) -> None:
        (draft.path / "summary.json").write_text('{"ok": true}\n')  # type: ignore[attr-defined]

    publish(tmp_path / "run-42", build, mode=0o755)
    assert (tmp_path / "run-42" / "summary.json").read_text() == '{"ok": true}\n'
    try:
        publish(tmp_path / "run-42", build)
    except DestinationExists:
        pass
    else:
        raise AssertionError("a second publish must raise DestinationExists")
