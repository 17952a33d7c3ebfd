"""A site's own plugin distribution, built and installed for real, loads through entry points.

Each test builds a throwaway distribution with hatchling (no build isolation, so no network),
installs it with pip into a private target directory, and runs the real ``servatus`` CLI in a
subprocess with that directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testkit import install_distribution

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
version = "{version}"

[project.entry-points.servatus]
{entry} = "{module}"

[tool.hatch.build.targets.wheel]
packages = ["{module}"]
"""

LAUNCHER_PLUGIN = """\
import attrs

from servatus import hookimpl
from servatus.launcher import StepCommand


@attrs.frozen
class Wrapped:
    name: str = "site-wrap"

    def check(self, target, args):
        pass

    def command(self, target, args, env, *, inherit, gpus):
        return StepCommand(argv=("/usr/bin/site-wrap", *args), exported=tuple(sorted(env.items())))


@hookimpl
def servatus_launchers():
    return [Wrapped()]
"""


def install(tmp_path: Path, dist: str, module: str, source: str, *, entry: str = "") -> Path:
    """Build and install a one-module distribution; return the directory it was installed into."""
    project = tmp_path / f"src-{dist}"
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(source)
    (project / "pyproject.toml").write_text(
        PYPROJECT.format(dist=dist, version="1.2.3", entry=entry or dist, module=module)
    )
    return install_distribution(project, tmp_path / "site")


def servatus(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "servatus", *args], capture_output=True, text=True, env=env
    )


def test_site_launcher_is_listed_and_selectable(tmp_path: Path) -> None:
    from servatus import hookimpl  # noqa: F401 - the marker plugins import must exist

    site = install(tmp_path, "servatus-site-wrap", "site_wrap", LAUNCHER_PLUGIN)
    listing = servatus(site, "plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    document = json.loads(listing.stdout)
    names = {p["name"]: (p["distribution"], p["version"]) for p in document["plugins"]}
    assert names["servatus-site-wrap"] == ("servatus-site-wrap", "1.2.3")
    assert "site-wrap" in document["launchers"]
    human = servatus(site, "plugins")
    assert "servatus-site-wrap  servatus-site-wrap 1.2.3" in human.stdout

    probe = textwrap.dedent(
        """
        from servatus.plugins import hooks
        command = hooks().launcher("site-wrap").command(
            None, ["python", "x.py"], {"A": "1"}, inherit=(), gpus=0)
        print(command.argv, command.exported)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    assert run.stdout.strip() == "('/usr/bin/site-wrap', 'python', 'x.py') (('A', '1'),)"


def test_broken_plugin_is_one_line_and_exit_1(tmp_path: Path) -> None:
    site = install(tmp_path, "servatus-broken", "broken_plugin", "raise RuntimeError('boom')\n")
    result = servatus(site, "plugins")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "servatus: PluginError: plugin 'servatus-broken' from servatus-broken failed to load: "
        "RuntimeError: boom"
    ]
    assert "Traceback" not in result.stderr


def test_duplicate_launcher_name_is_refused(tmp_path: Path) -> None:
    source = LAUNCHER_PLUGIN.replace('"site-wrap"', '"direct"')
    site = install(tmp_path, "servatus-dup", "dup_plugin", source)
    result = servatus(site, "plugins")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "servatus: PluginError: two plugins provide a launcher named 'direct'"
    )


def test_duplicate_plugin_name_is_refused(tmp_path: Path) -> None:
    site = install(tmp_path, "servatus-impostor", "impostor", "", entry="servatus-direct")
    result = servatus(site, "plugins")
    assert result.returncode == 1
    assert "plugin name 'servatus-direct' is registered by both" in result.stderr


def test_blocking_a_plugin_by_name(tmp_path: Path) -> None:
    site = install(tmp_path, "servatus-broken", "broken_plugin", "raise RuntimeError('boom')\n")
    env = {**os.environ, "PYTHONPATH": str(site), "SERVATUS_DISABLE_PLUGINS": "servatus-broken"}
    result = subprocess.run(
        [sys.executable, "-m", "servatus", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "servatus-broken" not in result.stdout


def test_bad_hook_implementation_is_refused(tmp_path: Path) -> None:
    source = (
        "from servatus import hookimpl\n\n"
        "@hookimpl\n"
        "def servatus_launchers(unknown_argument):\n"
        "    return []\n"
    )
    site = install(tmp_path, "servatus-badimpl", "badimpl", source)
    result = servatus(site, "plugins")
    assert result.returncode == 1
    assert result.stderr.startswith("servatus: PluginError: plugin 'servatus-badimpl'")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["--version"], ["plugins"]])
def test_python_dash_m_matches_console_script(argv: list[str]) -> None:
    via_module = subprocess.run(
        [sys.executable, "-m", "servatus", *argv], capture_output=True, text=True
    )
    via_script = subprocess.run(
        [str(Path(sys.executable).with_name("servatus")), *argv], capture_output=True, text=True
    )
    assert via_module.returncode == via_script.returncode == 0
    assert via_module.stdout == via_script.stdout
