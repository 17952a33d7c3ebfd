"""ensure refuses a Task whose batch script could never fit max_script_bytes before anything is
recorded: nothing is created, and an existing campaign's journal is unchanged (issue #30)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servatus.campaign import Campaign
from servatus.cli import main
from servatus.config import Profile
from servatus.errors import ConfigurationError
from servatus.tasks import Task
from testkit import CPU_PROFILE

SMALL = CPU_PROFILE.replace("max_time_limit", "max_script_bytes = 4096\nmax_time_limit")


def snapshot(state: Path) -> dict[str, bytes]:
    return {name: (state / name).read_bytes() for name in sorted(os.listdir(state))}


def test_ensure_refuses_a_task_that_could_never_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(SMALL)
    (tmp_path / "big.bin").write_bytes(b"x" * 5000)
    small = json.dumps({"key": "small", "args": ["/bin/true"]}) + "\n"
    big = json.dumps({"key": "big", "args": ["/bin/true"], "stdin_file": "big.bin"}) + "\n"
    (tmp_path / "small.jsonl").write_text(small)
    (tmp_path / "both.jsonl").write_text(small + big)
    state = tmp_path / "state"
    args = ["--config", str(config)]

    assert main(["ensure", str(state), str(tmp_path / "both.jsonl"), *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Task 'big' carries 5009 bytes" in err and "max_script_bytes (4096)" in err
    assert not state.exists()

    assert main(["ensure", str(state), str(tmp_path / "small.jsonl"), *args]) == 0
    before = snapshot(state)
    capsys.readouterr()
    assert main(["ensure", str(state), str(tmp_path / "both.jsonl"), *args]) == 1
    assert "could never fit" in capsys.readouterr().err
    assert snapshot(state) == before
    # Without --config or --profile nothing bounds it: ensure stays what it was.
    assert main(["ensure", str(state), str(tmp_path / "both.jsonl")]) == 0
    assert snapshot(state) != before


def test_campaign_ensure_with_a_profile_refuses_first(tmp_path: Path) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(SMALL)
    profile = Profile.load(config)
    big = Task("big", ["/bin/true"], stdin=b"x" * 5000)
    with pytest.raises(ConfigurationError, match="could never fit"):
        Campaign.ensure(tmp_path / "state", [big], profile=profile)
    assert not (tmp_path / "state").exists()
