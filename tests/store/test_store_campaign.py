"""The Python authoring API, as the quickstart uses it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.errors import ConfigurationError, TaskConflict


def quickstart_tasks(lrs: tuple[float, ...] = (1e-3, 3e-4, 1e-4)) -> list[Task]:
    return [
        Task(
            f"lr-{lr}-seed-{seed}",
            ["python", "train.py"],
            stdin=json.dumps({"lr": lr, "seed": seed}, sort_keys=True).encode(),
        )
        for lr in lrs
        for seed in range(3)
    ]


def finished(tasks: tuple[Task, ...]) -> set[str]:
    return set()


def test_quickstart_launcher_is_rerunnable(tmp_path: Path) -> None:
    state = tmp_path / "state"
    campaign = Campaign.ensure(state, quickstart_tasks(), probe=finished)
    assert campaign.probe is finished and campaign.connect is None
    assert [task.key for task in campaign.tasks][:3] == [
        "lr-0.001-seed-0",
        "lr-0.001-seed-1",
        "lr-0.001-seed-2",
    ]
    assert campaign.appendable and not campaign.sealed
    again = Campaign.ensure(state, quickstart_tasks(), probe=finished)
    assert again.tasks == campaign.tasks
    assert again.state.revision == campaign.state.revision == 1
    grown = Campaign.ensure(state, quickstart_tasks((1e-3, 3e-4, 1e-4, 3e-5)))
    assert grown.tasks[:9] == campaign.tasks
    assert [task.key for task in grown.tasks[9:]] == [f"lr-3e-05-seed-{s}" for s in range(3)]
    assert grown.task("lr-3e-05-seed-1").stdin == b'{"lr": 3e-05, "seed": 1}'


def test_changing_a_task_under_its_key_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    Campaign.ensure(state, quickstart_tasks())
    changed = quickstart_tasks()
    changed[4] = Task(changed[4].key, ["python", "train.py"], stdin=b"{}")
    with pytest.raises(TaskConflict, match=r"lr-0\.0003-seed-1"):
        Campaign.ensure(state, changed)
    with pytest.raises(TaskConflict):
        Campaign.open(state).append([Task("lr-0.001-seed-0", ["python", "other.py"])])
    assert Campaign.open(state).tasks == tuple(quickstart_tasks())


def test_create_append_seal(tmp_path: Path) -> None:
    state = tmp_path / "gpu"
    campaign = Campaign.create(state, quickstart_tasks()[:2], appendable=True)
    with pytest.raises(TaskConflict, match="already exists"):
        Campaign.create(state, [])
    done = campaign.append([Task("eval-7", ["python", "eval.py"], stdin=b'{"ckpt": 7}')])
    assert (done.added, done.existing, done.total) == (1, 0, 3)
    assert campaign.tasks[-1].key == "eval-7"
    again = campaign.append([*quickstart_tasks()[:2], Task("eval-8", ["python", "eval.py"])])
    assert (again.added, again.existing) == (1, 2)
    assert campaign.seal().sealed and campaign.sealed and not campaign.appendable
    assert campaign.seal().sealed  # sealing again changes nothing
    with pytest.raises(TaskConflict, match="sealed"):
        campaign.append([Task("eval-9", ["python", "eval.py"])])
    with pytest.raises(TaskConflict, match="sealed"):
        Campaign.ensure(state, [Task("eval-9", ["python", "eval.py"])])
    assert len(Campaign.open(state).tasks) == 4
    sealed = Campaign.create(tmp_path / "sealed", quickstart_tasks())
    assert sealed.sealed


def test_duplicate_keys_in_one_batch_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="more than once"):
        Campaign.ensure(tmp_path / "s", [Task("a", ["x"]), Task("a", ["x"])])
    assert not (tmp_path / "s").exists()


def test_refresh_sees_other_writers(tmp_path: Path) -> None:
    reader = Campaign.ensure(tmp_path / "s", [Task("a", ["x"])])
    Campaign.open(tmp_path / "s").append([Task("b", ["x"])])
    assert len(reader.tasks) == 1
    reader.refresh()
    assert [task.key for task in reader.tasks] == ["a", "b"]


def test_tasks_pickle() -> None:
    task = Task("a", ["x"], stdin=b"1", env={"A": "b"})
    assert pickle.loads(pickle.dumps(task)) == task


def test_capacity_is_reexported() -> None:
    from servatus import campaign, config

    assert campaign.capacity is config.capacity
