"""The authoring commands through the real CLI: create, ensure, append, seal."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from store_helpers import make_tasks, run_servatus, write_jsonl

from servatus.campaign import Campaign
from servatus.cli import main
from servatus.errors import CorruptState
from servatus.journal import store
from servatus.tasks import Task, read_jsonl


def test_spec_example_through_ensure_is_idempotent(spec_files: Path, tmp_path: Path) -> None:
    first = run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path)
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == "created state: 2 Tasks (appendable)\n"
    second = run_servatus("ensure", "state", "tasks.jsonl", "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {
        "command": "ensure",
        "state": "state",
        "created": False,
        "added": 0,
        "existing": 2,
        "total": 2,
        "sealed": False,
    }
    third = run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path)
    assert third.stdout == "ensure state: 0 new, 2 existing\n"
    campaign = Campaign.open(tmp_path / "state")
    assert campaign.tasks == read_jsonl(spec_files)
    assert campaign.appendable and not campaign.sealed


def test_ensure_appends_new_keys_in_order(spec_files: Path, tmp_path: Path) -> None:
    assert run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path).returncode == 0
    with spec_files.open("a") as handle:
        handle.write('{"key": "lr-1e-4", "args": ["python", "train.py"]}\n')
        handle.write('{"key": "lr-1e-5", "args": ["python", "train.py"]}\n')
    done = run_servatus("ensure", "state", "tasks.jsonl", "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["added"] == 2
    keys = [task.key for task in Campaign.open(tmp_path / "state").tasks]
    assert keys == ["lr-1e-3", "lr-3e-4", "lr-1e-4", "lr-1e-5"]


def test_a_changed_task_under_an_existing_key_is_refused(spec_files: Path, tmp_path: Path) -> None:
    assert run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path).returncode == 0
    before = (tmp_path / "state" / "journal").read_bytes()
    (tmp_path / "configs" / "lr-3e-4.json").write_text('{"lr": 0.0003, "changed": true}\n')
    with spec_files.open("a") as handle:
        handle.write('{"key": "new-one", "args": ["python", "train.py"]}\n')
    for command in ("ensure", "append"):
        refused = run_servatus(command, "state", "tasks.jsonl", cwd=tmp_path)
        assert refused.returncode == 1
        assert refused.stderr.startswith("servatus: TaskConflict: ")
        assert "lr-3e-4" in refused.stderr
        assert refused.stderr.count("\n") == 1
    assert (tmp_path / "state" / "journal").read_bytes() == before


def test_create_is_sealed_and_refuses_an_existing_campaign(
    spec_files: Path, tmp_path: Path
) -> None:
    created = run_servatus("create", "state", "tasks.jsonl", cwd=tmp_path)
    assert created.stdout == "created state: 2 Tasks (sealed)\n"
    again = run_servatus("create", "state", "tasks.jsonl", "--appendable", cwd=tmp_path)
    assert again.returncode == 1 and again.stderr.startswith("servatus: TaskConflict: ")
    assert Campaign.open(tmp_path / "state").sealed
    # ensure of the same Tasks on a sealed campaign is a harmless rerun; new ones are refused
    assert run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path).returncode == 0
    with spec_files.open("a") as handle:
        handle.write('{"key": "new-one", "args": ["python", "train.py"]}\n')
    refused = run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path)
    assert refused.returncode == 1 and "sealed" in refused.stderr


def test_seal_then_append_is_refused(spec_files: Path, tmp_path: Path) -> None:
    created = run_servatus("create", "state", "tasks.jsonl", "--appendable", cwd=tmp_path)
    assert created.stdout == "created state: 2 Tasks (appendable)\n"
    extra = write_jsonl(tmp_path / "extra.jsonl", [Task("eval-7", ["python", "eval.py"])])
    appended = run_servatus("append", "state", str(extra), "--json", cwd=tmp_path)
    assert json.loads(appended.stdout)["added"] == 1
    sealed = run_servatus("seal", "state", cwd=tmp_path)
    assert (sealed.returncode, sealed.stdout) == (0, "sealed state: 3 Tasks\n")
    again = run_servatus("seal", "state", "--json", cwd=tmp_path)
    assert json.loads(again.stdout)["sealed"] is True
    late = write_jsonl(tmp_path / "late.jsonl", [Task("eval-8", ["python", "eval.py"])])
    refused = run_servatus("append", "state", str(late), cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.startswith("servatus: TaskConflict: ") and "sealed" in refused.stderr
    assert [t.key for t in Campaign.open(tmp_path / "state").tasks][-1] == "eval-7"


def test_permissions_with_umask_zero(spec_files: Path, tmp_path: Path) -> None:
    done = run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path, umask=0)
    assert done.returncode == 0, done.stderr
    extra = write_jsonl(tmp_path / "extra.jsonl", make_tasks("x", 2))
    assert run_servatus("append", "state", str(extra), cwd=tmp_path, umask=0).returncode == 0
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    names = sorted(entry.name for entry in (tmp_path / "state").iterdir())
    assert names == ["journal", "lock"]
    for name in names:
        assert stat.S_IMODE((tmp_path / "state" / name).stat().st_mode) == 0o600


def test_a_truncated_state_file_is_corrupt(spec_files: Path, tmp_path: Path) -> None:
    assert run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path).returncode == 0
    journal = tmp_path / "state" / "journal"
    data = journal.read_bytes()
    for size in (len(data) // 2, 10, 0):
        journal.write_bytes(data[:size])
        for command in ("ensure", "append"):
            refused = run_servatus(command, "state", "tasks.jsonl", cwd=tmp_path)
            assert refused.returncode == 1, refused
            assert refused.stderr.startswith("servatus: CorruptState: "), refused.stderr
            assert str(Path("state") / "journal") in refused.stderr
        with pytest.raises(CorruptState):
            Campaign.open(tmp_path / "state")
        assert journal.read_bytes() == data[:size]  # never "repaired" into a new campaign


def test_an_edited_state_file_is_corrupt(spec_files: Path, tmp_path: Path) -> None:
    assert run_servatus("ensure", "state", "tasks.jsonl", cwd=tmp_path).returncode == 0
    journal = tmp_path / "state" / "journal"
    data = journal.read_bytes()
    edits = [
        data.replace(b"train.py", b"train.pz", 1),  # same length: the checksum catches it
        data.replace(b'"sealed":false', b'"sealed":true '),
        data.replace(b"R0", b"R1", 1),  # the length field: the header check catches it
    ]
    for edited in edits:
        assert edited != data
        journal.write_bytes(edited)
        refused = run_servatus("seal", "state", cwd=tmp_path)
        assert refused.returncode == 1
        assert refused.stderr.startswith("servatus: CorruptState: "), refused.stderr
        with pytest.raises(CorruptState):
            Campaign.open(tmp_path / "state")
    journal.write_bytes(data)
    assert run_servatus("seal", "state", cwd=tmp_path).returncode == 0


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert main(["create"]) == 2
    assert main(["ensure", "state"]) == 2
    assert main(["seal", "a", "b"]) == 2


def test_bad_jsonl_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.jsonl").write_text('{"key": "a", "args": ["x"]}\n{"key": "b"}\n')
    assert main(["ensure", str(tmp_path / "state"), str(tmp_path / "t.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("servatus: ConfigurationError: ") and "t.jsonl:2: " in err
    assert not (tmp_path / "state").exists()


# -- concurrency --------------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    from servatus.journal import store
    with store.writing(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()
    """
)


def test_a_second_writer_process_exits_75_at_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_jsonl(tmp_path / "base.jsonl", make_tasks("base", 5))
    created = run_servatus("create", str(state), str(tmp_path / "base.jsonl"), "--appendable")
    assert created.returncode == 0, created.stderr
    batch = write_jsonl(tmp_path / "batch.jsonl", make_tasks("batch", 100))
    before = (state / "journal").read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        for command in ("append", "ensure", "seal"):
            args = (command, str(state)) + ((str(batch),) if command != "seal" else ())
            busy = run_servatus(*args, timeout=30)
            assert busy.returncode == 75, busy
            assert busy.stderr.startswith("servatus: Busy: ")
        assert (state / "journal").read_bytes() == before
        assert len(Campaign.open(state).tasks) == 5  # readers are not blocked
    finally:
        holder.communicate("", timeout=30)
    assert holder.returncode == 0
    assert run_servatus("append", str(state), str(batch)).returncode == 0
    assert len(Campaign.open(state).tasks) == 105


def test_two_concurrent_appends(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_jsonl(tmp_path / "base.jsonl", make_tasks("base", 3))
    created = run_servatus("create", str(state), str(tmp_path / "base.jsonl"), "--appendable")
    assert created.returncode == 0, created.stderr
    batches = {
        name: write_jsonl(tmp_path / f"{name}.jsonl", make_tasks(name, 20000))
        for name in ("left", "right")
    }
    for _ in range(3):
        race = tmp_path / "race"
        if race.exists():
            for entry in race.iterdir():
                entry.unlink()
            race.rmdir()
        race.mkdir(mode=0o700)
        for entry in state.iterdir():
            (race / entry.name).write_bytes(entry.read_bytes())
        racers = {
            name: subprocess.Popen(
                [sys.executable, "-m", "servatus", "append", str(race), str(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, path in batches.items()
        }
        codes = {name: racer.wait(timeout=120) for name, racer in racers.items()}
        for racer in racers.values():
            racer.communicate()
        assert set(codes.values()) <= {0, 75} and 0 in codes.values()
        keys = [task.key for task in Campaign.open(race).tasks]
        assert keys[:3] == ["base-0", "base-1", "base-2"]
        winners = [name for name, code in codes.items() if code == 0]
        expected_blocks = [[f"{name}-{i}" for i in range(20000)] for name in winners]
        if len(winners) == 1:
            assert keys[3:] == expected_blocks[0]
        else:
            assert keys[3:] in (
                expected_blocks[0] + expected_blocks[1],
                expected_blocks[1] + expected_blocks[0],
            )
        assert store.read(race).revision == 1 + len(winners)


def test_ensure_sealed_appends_unseen_tasks_then_seals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked for a sealed campaign, ensure never leaves it appendable, and says it sealed it."""
    state = str(tmp_path / "state")
    first = write_jsonl(tmp_path / "first.jsonl", make_tasks("t", 2))
    both = write_jsonl(tmp_path / "both.jsonl", make_tasks("t", 3))
    assert main(["ensure", state, str(first)]) == 0
    capsys.readouterr()
    assert main(["ensure", state, str(both), "--sealed"]) == 0
    assert capsys.readouterr().out == f"ensure {state}: 1 new, 2 existing; sealed\n"
    campaign = Campaign.open(state)
    assert campaign.sealed and [t.key for t in campaign.tasks] == ["t-0", "t-1", "t-2"]
    assert main(["ensure", state, str(both), "--sealed", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sealed"] is True
    assert main(["append", state, str(first)]) == 1
    api = Campaign.ensure(tmp_path / "api", make_tasks("a", 1))
    assert Campaign.ensure(tmp_path / "api", make_tasks("a", 2), sealed=True).sealed
    assert api.appendable  # the object read before the change keeps what it read
