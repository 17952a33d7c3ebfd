"""The two engine fixes the real cluster forced, pinned without it (fast, no Slurm needed).

1. A cancelled step's ``srun`` returns after the batch script's ``stop`` marker, and its watcher
   writes ``end.<slot>.143``: the real cluster does this every time
   (``tests/lane_cluster/test_lane_outcomes.py``). That end marker is the stop, not a failure:
   ``ENDING`` while listed, ``STOPPED`` once purged; an end stamped at the stop's very mtime (a
   coarse file server clock) is the stop too.
2. An intent records the profile's time limit, so a ``LOST`` run counts at its whole limit.

They need no cluster, so they run in the fast lane (they used to sit, marked ``cluster``, with
the real-cluster tests).
"""

from __future__ import annotations

from pathlib import Path

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.engine.slots import slot_execution
from servatus.engine.status import project
from servatus.engine.status_values import Execution, Outcome, Submission
from servatus.evidence import Evidence, Marker, MarkerKind, Observation, QueueEntry, SlotEnd
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE

ALLOC = "0123456789abcdef01234567"


def observed(end: SlotEnd | None, *, stop: float | None) -> Observation:
    return Observation(start=100.0, stop=stop, ends=(end,))


def test_an_end_marker_written_after_the_stop_is_a_stop() -> None:
    cancelled = observed(SlotEnd(143, 105.0), stop=104.9)
    listed = QueueEntry(7, "servatus-" + "a" * 24, "CANCELLED")
    assert slot_execution(listed, cancelled, 0) == (Execution.ENDING, None, None)
    assert slot_execution(None, cancelled, 0) == (Execution.STOPPED, None, None)
    # Same mtime (a coarse file server clock) still reads as the stop.
    assert slot_execution(None, observed(SlotEnd(143, 104.9), stop=104.9), 0)[0] is (
        Execution.STOPPED
    )


def test_an_end_stamped_at_the_stop_time_is_a_stop_in_the_projection() -> None:
    """The same rule through ``project``, from markers: end and stop share one mtime."""
    accepted = Submission(ALLOC, ("a", "b"), "ssh:hpc", 1000.0, 3600, Outcome.ACCEPTED, 42)

    def mark(
        kind: MarkerKind, at: float, slot: int | None = None, code: int | None = None
    ) -> Marker:
        return Marker(ALLOC, 42, kind, at, slot, code)

    markers = (
        mark(MarkerKind.START, 2000.0),
        mark(MarkerKind.STOP, 2100.0),
        mark(MarkerKind.END, 2100.0, slot=0, code=143),  # the same mtime as the stop
        mark(MarkerKind.END, 2099.0, slot=1, code=143),  # a second before it: a failure
    )
    for queue, first in (
        ((QueueEntry(42, f"servatus-{ALLOC}", "CANCELLED"),), Execution.ENDING),
        ((), Execution.STOPPED),
    ):
        report = project(("a", "b"), [accepted], {"ssh:hpc": Evidence(queue, markers)}, now=3000.0)
        a, b = report.tasks
        assert (a.execution, a.exit_code) == (first, None)
        assert (b.execution, b.exit_code) == (Execution.FAILED, 143)
    assert a.detail is None  # cancelled: no limit marker, no other reason


def test_end_markers_that_decide_stay_decisive() -> None:
    # Exit 0 on the signal is a success; a failure before the stop stays a failure.
    assert slot_execution(None, observed(SlotEnd(0, 105.0), stop=104.0), 0)[0] is (
        Execution.SUCCEEDED
    )
    assert slot_execution(None, observed(SlotEnd(3, 103.0), stop=104.0), 0) == (
        Execution.FAILED,
        3,
        None,
    )
    assert slot_execution(None, observed(SlotEnd(3, 103.0), stop=None), 0)[0] is Execution.FAILED


def test_an_intent_records_the_time_limit(tmp_path: Path) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", [Task("a", ["/bin/true"])], connect=fake)
    campaign.submit(campaign.plan(Profile.load(config)))
    assert [intent.time_limit for intent in campaign.state.intents] == [300]
    [job] = [receipt.job for receipt in campaign.state.receipts]
    fake.start(job)
    fake.vanish(job)
    fake.purge()
    [task] = campaign.status().tasks
    assert task.execution is Execution.LOST
    assert task.run_time is not None
    assert (task.run_time.total, task.run_time.complete) == (300, False)
