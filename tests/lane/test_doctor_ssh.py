"""``doctor`` through the real OpenSSH client to a host it cannot reach: it prints ssh's own reason
for the unanswered ``sbatch --version``, as ``submit`` does, and ``--json`` carries it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servatus.cli import main
from testkit import CPU_PROFILE

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")

PING = "sbatch --version did not answer: cannot reach {host}: ssh: "


def test_doctor_prints_what_ssh_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An alias under ``.invalid`` never resolves (RFC 2606); a closed port, slower to fail
    (ssh tries three times), is the cluster lane's ``test_unreachable_host``."""
    host, said = "servatus-nowhere.invalid", "Could not resolve hostname servatus-nowhere.invalid"
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE.replace("[target]\n", f'[target]\nhost = "{host}"\n'))
    assert main(["doctor", "--config", str(config)]) == 75
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "doctor: profile cpu" and len(lines) == 2, out
    assert lines[1].startswith("  unavailable  slurm version  " + PING.format(host=host)), out
    assert said in lines[1], out

    assert main(["doctor", "--config", str(config), "--json"]) == 75
    out, _ = capsys.readouterr()
    (check,) = json.loads(out)["checks"]
    assert check["status"] == "unavailable"
    assert check["detail"].startswith(PING.format(host=host)) and said in check["detail"]

    (tmp_path / "tasks.jsonl").write_text('{"key": "k", "args": ["/bin/true"]}\n')
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    assert main(["ensure", state, str(tmp_path / "tasks.jsonl")]) == 0
    assert main(["plan", state, "--config", str(config), "--output", plan]) == 0
    capsys.readouterr()
    assert main(["submit", state, plan]) == 75
    _, err = capsys.readouterr()
    assert err == f"servatus: Unavailable: {check['detail']}\n"
