"""Campaign state is owner-only and checked on every read: what other users can write is refused,
what they can only read is used and said (docs/development/adr/0001-campaign-store.md,
SECURITY.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from store_helpers import make_tasks, write_jsonl

from servatus.campaign import Campaign, create_state
from servatus.cli import main
from servatus.errors import UnsafeFilesystem

COMMANDS = [
    ["status", "{state}", "--offline"],
    ["append", "{state}", "{more}"],
    ["ensure", "{state}", "{more}"],
    ["seal", "{state}"],
]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    more = write_jsonl(tmp_path / "more.jsonl", make_tasks("u", 1))
    state = str(tmp_path / "state")
    code = main([arg.format(state=state, more=more) for arg in argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize(
    ("entry", "loose", "fix"),
    [
        ("", 0o775, "chmod 700"),
        ("", 0o707, "chmod 700"),
        ("journal", 0o664, "chmod 600"),
        ("journal", 0o646, "chmod 600"),
    ],
)
def test_state_others_can_write_is_refused_and_kept(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    entry: str,
    loose: int,
    fix: str,
) -> None:
    create_state(tmp_path / "state", make_tasks("t", 3), appendable=True)
    path = tmp_path / "state" / entry if entry else tmp_path / "state"
    journal = (tmp_path / "state" / "journal").read_bytes()
    os.chmod(path, loose)
    code, err = run(argv, tmp_path, capsys)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("servatus: UnsafeFilesystem: ")
    assert f"{path}: other users can write it (mode {loose:04o})" in err
    assert err.rstrip().endswith(f"{fix} {path}")
    assert mode(path) == loose  # refused: not repaired behind the user's back
    assert (tmp_path / "state" / "journal").read_bytes() == journal
    os.chmod(path, 0o700 if entry == "" else 0o600)  # the fix the line gives
    assert [task.key for task in Campaign.open(tmp_path / "state").tasks] == ["t-0", "t-1", "t-2"]


def test_state_others_can_read_is_read_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_state(tmp_path / "state", make_tasks("t", 2), appendable=True)
    os.chmod(tmp_path / "state", 0o755)
    os.chmod(tmp_path / "state" / "journal", 0o644)
    code, err = run(["status", "{state}", "--offline"], tmp_path, capsys)
    state = tmp_path / "state"
    assert code == 0
    assert err.splitlines() == [
        f"servatus: warning: {state}: other users can read it (mode 0755); "
        f"make it owner-only: chmod 700 {state}",
        f"servatus: warning: {state}/journal: other users can read it (mode 0644); "
        f"make it owner-only: chmod 600 {state}/journal",
    ]
    assert (mode(state), mode(state / "journal")) == (0o755, 0o644)  # a read changes nothing
    code, err = run(["append", "{state}", "{more}"], tmp_path, capsys)
    assert code == 0
    assert f"servatus: warning: {state}: other users can read it (mode 0755); made it" in err
    assert (mode(state), mode(state / "journal")) == (0o700, 0o600)
    assert [task.key for task in Campaign.open(state).tasks] == ["t-0", "t-1", "u-0"]
    code, err = run(["status", "{state}", "--offline"], tmp_path, capsys)
    assert (code, err) == (0, "")


def test_the_api_refuses_what_others_can_write(tmp_path: Path) -> None:
    create_state(tmp_path / "state", make_tasks("t", 1))
    os.chmod(tmp_path / "state" / "journal", 0o622)
    with pytest.raises(UnsafeFilesystem, match="other users can write it"):
        Campaign.open(tmp_path / "state")


def test_an_empty_directory_a_umask_left_group_writable_is_adopted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is recorded there yet, so nothing needs protecting: it is made owner-only."""
    (tmp_path / "state").mkdir(mode=0o775)
    os.chmod(tmp_path / "state", 0o775)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", make_tasks("t", 1))
    assert main(["create", str(tmp_path / "state"), str(tasks)]) == 0
    assert capsys.readouterr().err == ""
    assert mode(tmp_path / "state") == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("entry", ["", "journal"])
def test_state_another_user_owns_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str
) -> None:
    create_state(tmp_path / "state", make_tasks("t", 1))
    path = tmp_path / "state" / entry if entry else tmp_path / "state"
    os.chown(path, 12345, 12345)
    code, err = run(["status", "{state}", "--offline"], tmp_path, capsys)
    assert code == 1 and err.count("\n") == 1
    assert f"UnsafeFilesystem: {path}: is owned by uid 12345, not by you" in err
