"""A saved plan edited after review is refused by its seal, whatever field was edited.

Most fields of a saved plan are checked only by its seal (ADR 0011): ``submit`` rebuilds the plan
with the saved profile, so an edited time limit, partition, account or launcher would otherwise
be sent to Slurm as if reviewed. Each row below edits fields of a real saved plan, leaves the
digest and seal as they were, and keeps the document well formed, so nothing but the seal can
tell; the digest recomputed, as anyone can, changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servatus.cli import main
from servatus.engine.plan_document import _Canonical
from servatus.testing import FakeScheduler

OTHER_ID = "0123456789abcdef01234567"

TAMPERS: dict[str, dict[str, Any]] = {
    # resources
    "time limit 300 -> 3000 s": {"profile.resources.time_limit": 3000},
    "memory per Task": {"profile.resources.memory_mib": 900},
    "cpus per Task": {
        "profile.resources.cpus": 2,
        "profile.target.max_cpus_per_allocation": 4,
    },
    "GPUs requested": {
        "profile.resources.gpus": 1,
        "profile.target.gpu_gres": "gpu",
        "profile.target.max_gpus_per_allocation": 2,
    },
    "signal before the end": {"profile.resources.signal_before_end": 60},
    # target
    "profile name": {"profile.name": "gpu"},
    "partitions": {"profile.target.partitions": ["long"]},
    "account": {"profile.target.account": "someone-else"},
    "qos": {"profile.target.qos": "high"},
    "constraint": {"profile.target.constraint": "fast"},
    "host": {"profile.target.host": "login.example.org"},
    "slurm_bin": {"profile.target.slurm_bin": "/opt/other/bin"},
    "work_root": {"profile.target.work_root": "/scratch/mallory"},
    "log_root": {"profile.target.log_root": "/scratch/mallory/logs"},
    "max_tasks_per_allocation": {"profile.target.max_tasks_per_allocation": 3},
    "max_cpus_per_allocation": {"profile.target.max_cpus_per_allocation": 4},
    "max_memory_mib_per_allocation": {"profile.target.max_memory_mib_per_allocation": 4000},
    "max_time_limit": {"profile.target.max_time_limit": 7200},
    "GPU ceiling and GRES": {
        "profile.target.gpu_gres": "gpu",
        "profile.target.max_gpus_per_allocation": 1,
    },
    "max_allocations_per_submit": {"profile.target.max_allocations_per_submit": 5},
    "max_script_bytes": {"profile.target.max_script_bytes": 65536},
    # launcher
    "launcher": {
        "profile.target.launcher": "apptainer",
        "profile.target.apptainer": {
            "executable": "/usr/bin/apptainer",
            "image": "/images/other.sif",
            "binds": [],
        },
    },
    "apptainer binds": {
        "profile.target.launcher": "apptainer",
        "profile.target.apptainer": {
            "executable": "/usr/bin/apptainer",
            "image": "/images/other.sif",
            "binds": ["/data"],
        },
    },
    "launcher options": {"profile.target.launcher_options": {"mode": "other"}},
    # the Tasks of the plan and how they are packed
    "Task keys of an allocation reordered": {"allocations.0.task_keys": ["k1", "k0"]},
    "allocation id": {"allocations.1.allocation_id": OTHER_ID},
    "selection reordered": {"decision.selected": ["k2", "k1", "k0"]},
    "a Task held": {"decision.held": [["k2", "SUBMITTED"]]},
    "a Task deferred": {"decision.deferred": ["k2"]},
    "spent": {"decision.spent": {"k0": 1}},
    "extensions": {"decision.extensions": ["k0"]},
    "continuation": {"decision.continuation": {}},
    "request --only": {"request.only": ["k0", "k1", "k2"]},
    "request --retry": {"request.retry": ["k0"]},
    "request --retry-failed": {"request.retry_failed": True},
    "request --tasks-per-allocation": {"request.tasks_per_allocation": 2},
    # where the plan comes from
    "campaign id": {"campaign_id": "0" * 32},
    "revision": {"revision": 2},
    "created at": {"created_at": 1.0},
    "probe": {"probe": True},
}


REFUSED = {
    False: "the plan was altered after it was saved; plan again",
    True: (
        "its seal is not this campaign's (the plan was saved for another campaign, or altered); "
        "plan again"
    ),
}
"""What ``submit`` says of an edit: by its digest, or, recomputed as anyone can, by its seal."""


@pytest.fixture
def saved(tmp_path: Path, config_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A campaign of three Tasks and its saved plan: k0 and k1 in one allocation, k2 in another."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"key": f"k{i}", "args": ["/bin/true", str(i)], "env": {"A": str(i)}}) + "\n"
            for i in range(3)
        )
    )
    assert main(["ensure", str(tmp_path / "state"), str(tasks)]) == 0
    plan = tmp_path / "plan.json"
    code = main(
        ["plan", str(tmp_path / "state"), "--config", str(config_path), "--output", str(plan)]
    )
    assert code == 0
    capsys.readouterr()
    return plan


def leaves(document: dict[str, Any], prefix: str = "") -> set[str]:
    """Every field path of a saved plan: into objects, and into each allocation."""
    paths = set()
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths |= leaves(value, f"{path}.")
        elif key == "allocations":
            for index, allocation in enumerate(value):
                paths |= leaves(allocation, f"{path}.{index}.")
        else:
            paths.add(path)
    return paths


def edit(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert last in node, path  # an edit of a field the plan has, not a new key
    assert node[last] != value, path
    node[last] = value


def test_every_field_of_a_saved_plan_has_a_tamper_row(saved: Path) -> None:
    document = json.loads(saved.read_text())
    edited = {path for change in TAMPERS.values() for path in change}
    allocation_fields = {p for p in leaves(document) if p.startswith("allocations.")}
    generic = {p.replace(".0.", ".N.").replace(".1.", ".N.") for p in allocation_fields}
    covered = {p.replace(".0.", ".N.").replace(".1.", ".N.") for p in edited}
    missing = (leaves(document) - allocation_fields - {"schema", "digest", "seal"} - edited) | (
        generic - covered
    )
    assert not missing, f"fields of a saved plan no tamper row edits: {sorted(missing)}"


@pytest.mark.parametrize("rehashed", [False, True], ids=["digest kept", "digest recomputed"])
@pytest.mark.parametrize("change", TAMPERS.values(), ids=TAMPERS.keys())
def test_a_plan_edited_after_it_was_saved_is_refused(
    saved: Path, change: dict[str, Any], rehashed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(saved.read_text())
    for path, value in change.items():
        edit(document, path, value)
    if rehashed:
        document["digest"] = _Canonical(document).digest()
    saved.write_text(json.dumps(document))  # the seal left as it was
    fake = FakeScheduler()
    state = str(saved.parent / "state")
    for command in ("submit", "validate"):
        code = main([command, state, str(saved)], connect=fake)
        out, err = capsys.readouterr()
        assert code == 1, (command, out, err)
        assert err == f"servatus: StalePlan: {saved}: {REFUSED[rehashed]}\n"
    assert fake.calls == []  # not even a ping: nothing reached Slurm
    assert main(["status", state, "--offline", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)["tasks"]
    assert {task["execution"] for task in tasks} == {"NOT_SUBMITTED"}
