"""Over the real OpenSSH transport, ``status`` reads a Target's ``squeue``, clock and run markers
in one ``ssh`` (issue #33), and ``cancel`` adds only its ``scancel``: counted by a wrapper ``ssh``
on ``PATH`` that logs each time it is started."""

from __future__ import annotations

from typing import Any

import pytest
from lane_helpers import Lane, task_of

pytestmark = pytest.mark.cluster

COUNTING_SSH = """\
#!/bin/sh
echo ssh >>"$(dirname "$0")/started"
exec /usr/bin/ssh "$@"
"""


def test_status_is_one_ssh_per_target(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    tasks = [lane.worker_task("failed", "exit", "3"), lane.worker_task("runs", "sleep", "120")]
    lane.ok("ensure", "state", lane.tasks_file(tasks))
    lane.ok("plan", "state", "--tasks-per-allocation", "1", "--output", "plan.json")
    lane.ok("submit", "state", "plan.json")

    def ready(document: dict[str, Any]) -> bool:
        return (
            task_of(document, "failed")["execution"],
            task_of(document, "runs")["execution"],
        ) == (
            "FAILED",
            "RUNNING",
        )

    lane.wait_for("one failed, one running", ready, seconds=120)
    wrappers = lane.launch / "wrappers"
    wrappers.mkdir()
    lane.put(wrappers / "ssh", COUNTING_SSH, 0o755)
    started = wrappers / "started"
    lane.extra_path.insert(0, str(wrappers))
    try:
        document = lane.status()
        assert started.read_text().count("ssh") == 1
        # The markers came in the same command: the exit code, and the running one's run time.
        assert task_of(document, "failed")["exit_code"] == 3
        assert task_of(document, "runs")["execution"] == "RUNNING"
        assert task_of(document, "runs")["run_time"]["total"] >= 0
        started.unlink()
        cancelled = lane.servatus("cancel", "state", "--task", "runs")
        assert cancelled.returncode == 0, cancelled.stderr
        assert started.read_text().count("ssh") == 2  # the reading, then its one scancel
    finally:
        lane.extra_path.remove(str(wrappers))
