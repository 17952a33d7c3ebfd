"""Write the campaign and the saved plan that ``da44b63`` (0.14.1's main) wrote, as test data.

Run once with the code of that commit; its output is committed under ``da44b63/`` and read by
``tests/store/test_store_upgrade.py`` and ``tests/engine/test_plan_document.py`` to prove that
later code still opens what earlier code wrote (the upgrade path of ADR 0001). Never rerun it
with later code: the point is that the bytes come from the old code.

    python tests/data/make_da44b63.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from servatus.cli import main
from servatus.ids import target_key
from servatus.journal import records, store
from servatus.tasks import Task

HERE = Path(__file__).resolve().parent
OUT = HERE / "da44b63"

TARGET_ONE = '{"host":null,"log_root":"/l1"}'
TARGET_TWO = '{"host":"login.example.org","log_root":"/l2"}'
ONE = target_key(TARGET_ONE)
TWO = target_key(TARGET_TWO)

BEFORE_COMPACTION = [
    records.Created(
        "0123456789abcdef0123456789abcdef",
        1764600000.25,
        False,
        (
            Task("a", ["python", "train.py", "--lr", "1e-3"], stdin=b"\0\xff{}", env={"A": "1"}),
            Task("b", ["python", "train.py", "é ü"]),
        ),
    ),
    records.Appended((Task("c", ["/bin/true"], env={"X": "", "Y": "=y"}), Task("d", ["d"]))),
    records.TargetSeen(ONE, TARGET_ONE),
    records.Intent("a1a1a1a1a1a1a1a1a1a1a1a1", ("a", "b"), "digest-1", 1764600001.5, ONE, 600),
    records.Receipt("a1a1a1a1a1a1a1a1a1a1a1a1", 1001),
    records.Intent("a2a2a2a2a2a2a2a2a2a2a2a2", ("c",), "digest-1", 1764600002.0, ONE),
    records.Resolved("a2a2a2a2a2a2a2a2a2a2a2a2", None),
    records.Intent("a3a3a3a3a3a3a3a3a3a3a3a3", ("d",), "digest-1", 1764600003.0, ONE, 60),
    records.Resolved("a3a3a3a3a3a3a3a3a3a3a3a3", 1003),
]
"""Folded into the snapshot: every kind of column, a resolution either way."""

AFTER_COMPACTION = [
    records.Appended((Task("e", ["e"], stdin=b"line\n"), Task("f", ["f", ""]))),
    records.TargetSeen(TWO, TARGET_TWO),
    records.Intent("b4b4b4b4b4b4b4b4b4b4b4b4", ("e", "f"), "digest-2", 1764600004.0, TWO, 3600),
    records.Receipt("b4b4b4b4b4b4b4b4b4b4b4b4", 4_000_000),
    records.Intent("b5b5b5b5b5b5b5b5b5b5b5b5", ("e",), "digest-2", 1764600005.0, TWO),
    records.Resolved("b5b5b5b5b5b5b5b5b5b5b5b5", None),
    records.Intent("b6b6b6b6b6b6b6b6b6b6b6b6", ("f",), "digest-2", 1764600006.0, ONE, 120),
    records.Sealed(),
]
"""The journal's tail after the snapshot: every single-record kind, the last intent pending."""

PLAN_PROFILE = """\
default_profile = "cpu"

[target]
slurm_bin = "/usr/bin"
work_root = "/scratch/alice/sweep"
log_root = "/scratch/alice/sweep/logs"
partitions = ["debug"]
max_tasks_per_allocation = 2
max_cpus_per_allocation = 2
max_memory_mib_per_allocation = 2000
max_time_limit = "01:00:00"
max_allocations_per_submit = 2

[profiles.cpu.resources]
cpus = 1
memory_mib = 500
time_limit = "00:05:00"
"""
"""Deferral and a held Task make the plan's every field non-empty."""


def write_campaign(path: Path) -> None:
    with store.writing(path, create=True) as writer:
        first, *rest = BEFORE_COMPACTION
        assert isinstance(first, records.Created)
        writer.initialize(first)
        for change in rest:
            writer.add(change)
        writer.compact()
        for change in AFTER_COMPACTION:
            writer.add(change)
    (path / store.LOCK).unlink()


def write_plan(path: Path) -> None:
    path.mkdir()
    tasks = path / "tasks.jsonl"
    lines = [f'{{"key": "k{i}", "args": ["/bin/echo", "{i}"]}}\n' for i in range(6)]
    tasks.write_text("".join(lines))
    config = path / "SERVATUS.toml"
    config.write_text(PLAN_PROFILE)
    state = str(path / "state")
    assert main(["ensure", state, str(tasks)]) == 0
    only = [arg for key in ("k0", "k1", "k2", "k3", "k5") for arg in ("--only", key)]
    plan = ["plan", state, "--config", str(config), "--tasks-per-allocation", "2", *only]
    assert main([*plan, "--output", str(path / "plan.json")]) == 0
    (path / "state" / store.LOCK).unlink()
    tasks.unlink()


if __name__ == "__main__":
    if OUT.exists():
        sys.exit(f"{OUT} exists; this data is written once, by da44b63")
    OUT.mkdir()
    try:
        write_campaign(OUT / "campaign")
        write_plan(OUT / "plan")
    except BaseException:
        shutil.rmtree(OUT)
        raise
