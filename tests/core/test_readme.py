"""The README's five minutes are the guide's tested ones: each of its commands is run by a page of
the guide (whose examples run through Sybil), its SERVATUS.toml and tasks.jsonl are accepted as
written, and each link into the guide names a page that exists."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from servatus.cli import main
from servatus.testing import FakeScheduler

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def guide_commands() -> set[str]:
    commands: set[str] = set()
    for page in (ROOT / "docs").glob("*.md"):
        for lang, body in BLOCK.findall(page.read_text()):
            if lang == "console":
                commands |= {line[2:].strip() for line in body.splitlines() if line[:2] == "$ "}
    return commands


def readme_commands() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for body in blocks("sh") for line in body.splitlines())
    return [line for line in lines if line.startswith("servatus ")]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv), connect=FakeScheduler())
    return code, out.getvalue()


@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_runs_in_a_page_of_the_guide(command: str) -> None:
    assert command in guide_commands()


def test_the_readme_shows_its_commands() -> None:
    assert len(readme_commands()) >= 5


def test_the_readme_config_and_tasks_are_accepted_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (config,) = blocks("toml")
    (tasks,) = blocks("json")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SERVATUS.toml").write_text(config)
    (tmp_path / "tasks.jsonl").write_text(tasks)
    assert run("profile")[0] == 0
    code, printed = run("create", "state", "tasks.jsonl")
    assert code == 0, printed
    code, printed = run("plan", "state")
    assert code == 0, printed
    assert "2 Tasks" in printed or "selected: 2" in printed, printed


def test_every_link_into_the_guide_names_a_page() -> None:
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []
