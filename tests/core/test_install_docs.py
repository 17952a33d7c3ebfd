"""The guide installs Servatus the way the README does (the command `tox -e install` runs), and
nowhere with `pip install servatus`, which fetches an unrelated project from PyPI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "python3 -m pip install -r requirements.txt"
WORKER_WHEELS = "python3 -m pip wheel -w dist ./servatus_core ./servatus_publish"
# `pip install` of a Servatus distribution by name with nothing to find it in: PyPI's.
FROM_PYPI = re.compile(
    r"pip install (?:-{1,2}[\w-]+ )*\"?servatus(?:-core|-publish|-slurm|-apptainer)?(?![\w-])"
)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def shown_lines() -> list[tuple[Path, str]]:
    """Every line of a fenced block in the README and the guide: what a reader copies."""
    return [
        (page, line)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for block in FENCE.findall(page.read_text())
        for line in block.splitlines()
    ]


def test_the_readme_quickstart_and_demo_install_with_one_command() -> None:
    assert f"```sh\n{INSTALL}\n```" in (ROOT / "README.md").read_text()
    assert f"```sh\n{INSTALL}\n```" in (ROOT / "docs" / "quickstart.md").read_text()
    assert "-m pip install --quiet -r requirements.txt" in (ROOT / "demo" / "run").read_text()


def test_worker_wheels_are_built_as_the_readme_builds_them() -> None:
    assert WORKER_WHEELS in (ROOT / "README.md").read_text()
    assert WORKER_WHEELS in (ROOT / "docs" / "clusters.md").read_text()


def test_no_page_installs_servatus_from_pypi() -> None:
    found = [
        f"{page.relative_to(ROOT)}: {line.strip()}"
        for page, line in shown_lines()
        if FROM_PYPI.search(line) and "--no-index" not in line and "--find-links" not in line
    ]
    assert found == []
