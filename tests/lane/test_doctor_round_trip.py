"""``doctor`` reports the round trip it measured: the fastest of its commands (issue #33)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from servatus.cli import main
from servatus.config import Target
from servatus.testing import FakeScheduler
from servatus.transport import COMMAND_TIMEOUT, CommandResult
from testkit import CPU_PROFILE

DELAY = 0.03


class Slow:
    """The fake behind a link that adds ``DELAY`` to every command, and more to the first (a
    connection being opened)."""

    def __init__(self) -> None:
        self.fake = FakeScheduler()
        self.sent = 0

    def __call__(self, target: Target) -> Slow:
        return self

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        time.sleep(DELAY * (5 if self.sent == 0 else 1))
        self.sent += 1
        return self.fake.run(argv, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        """Nothing to close."""


def test_doctor_prints_and_reports_the_fastest_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    slow = Slow()
    assert main(["doctor", "--config", str(config)], connect=slow) == 0
    out, _ = capsys.readouterr()
    last = out.splitlines()[-1]
    assert last.startswith("round trip: ") and last.endswith(
        f" ms (the fastest of {slow.sent} commands)"
    ), out
    shown = float(last.split()[2])
    assert DELAY * 1000 <= shown < DELAY * 5 * 1000, out

    slow = Slow()
    assert main(["doctor", "--config", str(config), "--json"], connect=slow) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"profile", "checks", "warnings", "round_trip"}
    assert DELAY <= document["round_trip"] < DELAY * 5


def test_no_answer_no_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    fake = FakeScheduler()
    fake.unavailable("ping")
    assert main(["doctor", "--config", str(config)], connect=fake) == 75
    assert "round trip" not in capsys.readouterr().out
    fake.unavailable("ping")
    assert main(["doctor", "--config", str(config), "--json"], connect=fake) == 75
    assert json.loads(capsys.readouterr().out)["round_trip"] is None
