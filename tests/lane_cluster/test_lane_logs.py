"""``servatus logs`` on the real cluster: the step log's bounded tail, written 0600, never to a
terminal. The terminal is a real pseudo-terminal (``pty.fork``), inside the root for the
login-node case."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from lane_helpers import Lane

pytestmark = pytest.mark.cluster

PTY_RUN = """\
import json
import os
import pty
import sys

pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
output = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    output += chunk
_, status = os.waitpid(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "output": output.decode()}))
"""

LINES = 4000


def test_logs_tail_to_a_file_and_never_to_a_terminal(lane: Lane) -> None:
    lane.put_worker()
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("talker", "lines", str(LINES))]))
    lane.ok("plan", "state", "--output", "plan.json")
    lane.ok("submit", "state", "plan.json")
    done = lane.wait_for(
        "talker to succeed", lambda d: d["tasks"][0]["execution"] == "SUCCEEDED", seconds=120
    )
    talker = done["tasks"][0]
    step_log = Path(lane.log_root) / f"servatus-{talker['allocation']}-{talker['job']}.0.out"
    whole = step_log.read_bytes()
    assert whole.endswith(f"talker line {LINES - 1:06d}\ntalker done\n".encode())
    assert len(whole) > 65536

    lane.ok("logs", "state", "--task", "talker", "--output", "talker.log")
    written = lane.launch / "talker.log"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert written.read_bytes() == whole[-65536:]
    lane.ok("logs", "state", "--task", "talker", "--bytes", "100", "--output", "short.log")
    assert (lane.launch / "short.log").read_bytes() == whole[-100:]
    piped = lane.servatus("logs", "state", "--task", "talker", "--bytes", "4096")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.encode() == whole[-4096:]

    lane.put(lane.launch / "ptyrun.py", PTY_RUN)
    command = [lane.python, "-m", "servatus"] if lane.ssh else [lane.cluster.servatus_cli]
    ran = lane.run([lane.python, "ptyrun.py", *command, "logs", "state", "--task", "talker"])
    assert ran.returncode == 0, ran.stderr
    terminal = json.loads(ran.stdout)
    assert terminal["code"] == 1, terminal
    [line] = terminal["output"].splitlines()
    assert line.startswith("servatus: ConfigurationError: logs write raw bytes and never to a")
    assert "talker line" not in terminal["output"]
