"""The two engine fixes the real cluster forced, pinned without it (fast, no Slurm needed).

1. A cancelled step's ``srun`` returns after the batch script's ``stop`` marker, and its watcher
   writes ``end.<slot>.143``: the real cluster does this every time (``test_lane_outcomes``). That
   end marker is the stop, not a failure: ``ENDING`` while listed, ``STOPPED`` once purged.
2. An intent records the profile's time limit, so a ``LOST`` run counts at its whole limit.

Marked ``cluster`` with the rest of this directory; they run in a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.evidence import QueueEntry
from servatus.status import Execution, Observation, SlotEnd, slot_execution
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE

pytestmark = pytest.mark.cluster


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
