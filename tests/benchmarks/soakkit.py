"""A soak's pieces on the fake-Slurm CLI lane: the lane's fake ``slurm_bin``
(tests/lane/fake_bin.py) with three switches, files beside the bin: ``delay`` (seconds ``sbatch``
waits before taking the job: room to SIGKILL the client mid-submit), ``refuse`` (``sbatch``
then exits 1 without taking it: with the client killed, its intent stays unresolved), and
``failing`` (every third job's steps exit 1, so ``--retry-failed`` has work)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import soak_fake_bin
from soak import commandlog, drive, evidence, worker
from soak.commandlog import CommandRecord
from soak.evidence import SoakEvidence

SWITCHES = """here = os.path.dirname(os.path.abspath(sys.argv[0]))
import time
from collections.abc import Callable
if os.path.exists(os.path.join(here, "delay")):
    time.sleep(float(open(os.path.join(here, "delay")).read()))
if os.path.exists(os.path.join(here, "refuse")):
    sys.exit(1)
"""


def make_lane(root: Path, count: int = 4) -> tuple[Path, Path, Path]:
    """The fake lane under ``root`` and a roster of ``count`` Tasks; returns the config, the
    log root and the roster."""
    root.mkdir(exist_ok=True)
    config, logs = soak_fake_bin.make_fake_bin(root)
    sbatch = root / "bin" / "sbatch"
    text = sbatch.read_text()
    text = text.replace("script = sys.stdin.read()\n", "script = sys.stdin.read()\n" + SWITCHES, 1)
    failing = 'code = 1 if job % 3 == 0 and os.path.exists(os.path.join(here, "failing")) else 0'
    text = text.replace(
        "    for slot in range(slots):\n", f"    {failing}\n    for slot in range(slots):\n", 1
    )
    text = text.replace('end.{slot}.0"', 'end.{slot}.{code}"')
    assert "failing" in text and "refuse" in text
    sbatch.write_text(text)
    # Chains (plan --budget) need the pre-limit signal.
    config.write_text(
        config.read_text().replace(
            'time_limit = "00:05:00"\n', 'time_limit = "00:05:00"\nsignal_before_end = "00:01:00"\n'
        )
    )
    assert "signal_before_end" in config.read_text()
    (root / "results").mkdir()
    tasks = root / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"key": f"k{i}", "args": ["/bin/true", str(i)]}) + "\n" for i in range(count)
        )
    )
    return config, logs, tasks


def settings(root: Path, **changes: object) -> drive.Settings:
    """Drive settings for the lane under ``root`` (made by :func:`make_lane` first)."""
    fields: dict[str, object] = {
        "state": root / "state",
        "config": root / "SERVATUS.toml",
        "tasks": root / "tasks.jsonl",
        "work": root / "work",
        "seed": 7,
        "duration": 1e9,
        "results": root / "results",
        "max_commands": 12,
        "finale": 0.0,
    }
    fields.update(changes)
    return drive.Settings(**fields)  # type: ignore[arg-type]


def publishing_worker(results: Path | None) -> Callable[[CommandRecord], None]:
    """An ``after`` hook standing in for the workers: after each ``status --json``, every Task
    that reads SUCCEEDED and has no result yet publishes one, as the step that ran it."""

    assert results is not None

    def after(record: CommandRecord) -> None:
        if record.verb != "status" or "--json" not in record.argv or record.exit_code != 0:
            return
        for task in json.loads(record.stdout)["tasks"]:
            if task["execution"] == "SUCCEEDED" and not (results / task["key"]).exists():
                writer = f"{task['allocation']}.{task['job']}"
                worker.publish_result(results, task["key"], writer)

    return after


def collect(s: drive.Settings) -> SoakEvidence:
    return evidence.collect(
        state=s.state,
        log_root=s.config.parent / "logs",
        command_log=s.log,
        results=s.results,
        now=time.time(),
    )


def rewrite(s: drive.Settings, index: int, **changes: object) -> None:
    """Replace fields of command ``index`` in the log, as a run that went otherwise would
    have logged it."""
    import attrs

    records = list(commandlog.read(s.log))
    records[index] = attrs.evolve(records[index], **changes)
    commandlog.write(s.log, records)


def grow_roster(root: Path) -> Path:
    """A roster of one new Task, ``fresh``, beside the first."""
    path = root / "fresh.jsonl"
    path.write_text(json.dumps({"key": "fresh", "args": ["/bin/true"]}) + "\n")
    return path
