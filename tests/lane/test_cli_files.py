"""The files the CLI reads and writes, when they are odd: empty names, FIFOs, deep nesting, huge
numbers, links, and a filesystem or device that is full. One line, the spec's exit code, and
nothing left behind."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.cli import main
from servatus.engine.plan_document import _Canonical
from servatus.errors import ConfigurationError
from servatus.tasks import read_jsonl
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE


@pytest.fixture
def sweep(tmp_path: Path, config_path: Path) -> Path:
    (tmp_path / "tasks.jsonl").write_text(
        "".join(json.dumps({"key": f"k{i}", "args": ["/bin/true"]}) + "\n" for i in range(3))
    )
    assert main(["ensure", str(tmp_path / "state"), str(tmp_path / "tasks.jsonl")]) == 0
    return tmp_path


def run(args: list[str], capsys: pytest.CaptureFixture[str], fake: FakeScheduler | None = None):
    code = main(args, connect=fake or FakeScheduler())
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, kind: str) -> str:
    assert err.count("\n") == 1 and err.startswith(f"servatus: {kind}: "), err
    return err


def fill(filesystem: Path) -> Path:
    filler = filesystem / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_an_empty_path_is_a_usage_error(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(sweep / "state")
    for args in (
        ["status", ""],
        ["ensure", "", str(sweep / "tasks.jsonl")],
        ["plan", state, "--output", ""],
        ["plan", state, "--config", ""],
        ["logs", state, "--task", "k0", "--output", ""],
    ):
        code, out, err = run(args, capsys)
        assert (code, out) == (2, ""), args
        assert "must not be empty" in err and err.count("\n") == 1


def test_servatus_alone_prints_its_help_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "servatus"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Usage: servatus") and "\nCommands:\n" in done.stderr


def test_a_full_output_device_is_75_in_one_line() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "servatus", "plugins"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 75
    one_line(done.stderr, "Unavailable")
    assert "No space left on device" in done.stderr


def test_a_saved_plan_that_finds_no_room_leaves_nothing(
    sweep: Path, config_path: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = small_tmpfs / "plan.json"
    args = ["plan", str(sweep / "state"), "--config", str(config_path), "--output", str(plan)]
    filler = fill(small_tmpfs)
    code, _, err = run(args, capsys)
    assert code == 75
    assert "No space left on device" in one_line(err, "Unavailable")
    assert not plan.exists()
    filler.unlink()
    assert run(args, capsys)[0] == 0 and json.loads(plan.read_text())["schema"]


def _with_a_log(sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]):
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    run(["plan", state, "--config", str(config_path), "--output", plan], capsys, fake)
    run(["submit", state, plan], capsys, fake)
    job = fake.jobs[0]
    fake.logs[f"servatus-{job.allocation_id}-{job.job}.0.out"] = b"step log\n"
    return fake, ["logs", state, "--task", "k0", "--output"]


def test_logs_replace_only_a_regular_file(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, logs = _with_a_log(sweep, config_path, capsys)
    out = sweep / "out"
    out.mkdir()
    (out / "target").write_text("keep me\n")
    (out / "link").symlink_to("target")
    os.mkfifo(out / "fifo")
    (out / "directory").mkdir()
    for name in ("link", "fifo", "directory"):
        code, _, err = run([*logs, str(out / name)], capsys, fake)
        assert code == 1, name
        assert "is not a regular file" in one_line(err, "ConfigurationError")
    assert (out / "link").is_symlink() and (out / "target").read_text() == "keep me\n"
    assert sorted(p.name for p in out.iterdir()) == ["directory", "fifo", "link", "target"]
    assert run([*logs, str(out / "target")], capsys, fake)[0] == 0
    assert (out / "target").read_bytes() == b"step log\n"
    assert sorted(p.name for p in out.iterdir()) == ["directory", "fifo", "link", "target"]


def test_logs_that_find_no_room_are_75_and_leave_nothing(
    sweep: Path, config_path: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, logs = _with_a_log(sweep, config_path, capsys)
    out = small_tmpfs / "out"
    out.mkdir()
    fill(small_tmpfs)
    code, _, err = run([*logs, str(out / "k0.log")], capsys, fake)
    assert code == 75
    assert "No space left on device" in one_line(err, "Unavailable")
    assert list(out.iterdir()) == []


def test_a_fifo_is_refused_not_waited_on(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = sweep / "fifo"
    os.mkfifo(fifo)
    state = str(sweep / "state")
    for args in (
        ["submit", state, str(fifo)],
        ["ensure", state, str(fifo)],
        ["plan", state, "--config", str(fifo)],
    ):
        code, _, err = run(args, capsys)
        assert code == 1, args
        assert "is not a regular file" in err and err.count("\n") == 1, err


def test_deep_nesting_and_huge_numbers_are_said_plainly(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(sweep / "state")
    deep = sweep / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    code, _, err = run(["ensure", state, str(deep)], capsys)
    assert code == 1 and err.rstrip().endswith("not a JSON object: nested too deeply"), err
    deep_plan = sweep / "deep.json"
    deep_plan.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run(["submit", state, str(deep_plan)], capsys)
    assert code == 1 and "not a JSON plan document" in one_line(err, "StalePlan")
    toml = sweep / "deep.toml"
    toml.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, _, err = run(["plan", state, "--config", str(toml)], capsys)
    assert code == 1 and "invalid TOML: nested too deeply" in one_line(err, "ConfigurationError")
    toml.write_text(CPU_PROFILE.replace("cpus = 1", "cpus = " + "9" * 5000))
    code, _, err = run(["plan", state, "--config", str(toml)], capsys)
    assert code == 1 and "a number has too many digits" in one_line(err, "ConfigurationError")
    assert "set_int_max_str_digits" not in err


def test_a_duration_takes_ascii_digits_only(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path.write_text(CPU_PROFILE.replace('"00:05:00"', '"\u0660\u0660:05:00"'))
    code, _, err = run(["plan", str(sweep / "state"), "--config", str(config_path)], capsys)
    assert code == 1
    one_line(err, "ConfigurationError")


def test_a_rehashed_plan_that_does_not_hold_together_is_refused(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(sweep / "state"), sweep / "plan.json"
    run(["plan", state, "--config", str(config_path), "--output", str(plan)], capsys)
    document = json.loads(plan.read_text())
    for change in (
        lambda d: d["allocations"][0].update(task_keys=[None]),  # was read as the key "None"
        lambda d: d["allocations"][0].update(task_keys=["not-a-task"]),
        lambda d: d["allocations"][0].update(allocation_id="../../etc/passwd"),
        lambda d: d.update(campaign_id="0" * 32),
        lambda d: d.update(allocations=[]),  # its selection left as it was
        lambda d: d["allocations"][0]["task_keys"].append("k2"),  # k2 twice
    ):
        edited = json.loads(json.dumps(document))
        change(edited)
        edited["digest"] = _Canonical(edited).digest()
        altered = sweep / "altered.json"
        altered.write_text(json.dumps(edited))
        for command in ("validate", "submit"):
            code, _, err = run([command, state, str(altered)], capsys)
            assert code == 1, err
            one_line(err, "StalePlan")


def test_a_task_may_not_set_a_slurm_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"key": "a", "args": ["/bin/true"], "env": {"SLURM_JOB_ID": "1"}}) + "\n"
    )
    code, _, err = run(["ensure", str(tmp_path / "state"), str(tasks)], capsys)
    assert code == 1
    assert "SLURM_JOB_ID is Slurm's" in one_line(err, "ConfigurationError")
    assert not (tmp_path / "state" / "journal").exists()


def test_json_output_is_valid_utf8_whatever_the_path(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"key": "a", "args": ["/bin/true"]}) + "\n")
    state = os.fsdecode(os.fsencode(str(tmp_path)) + b"/st\xffate")
    assert main(["ensure", state, str(tasks), "--json"]) == 0
    out = capsysbinary.readouterr().out
    assert json.loads(out.decode("utf-8"))["state"] == state  # the byte, escaped


class _Full(io.TextIOBase):
    """A stdout whose every write and flush fails with ENOSPC, as a full device's can."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        """Closed as garbage without a last flush (the interpreter may be shutting down)."""


def test_output_that_cannot_be_written_is_reported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", _Full())
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["plugins"]) == 75
    one_line(err.getvalue(), "Unavailable")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status", "{tmp}/st\0ate", "--offline"], "campaign '{tmp}/st\\x00ate'"),
        (["create", "{tmp}/new\0", "{tmp}/tasks.jsonl"], "campaign '{tmp}/new\\x00'"),
        (["ensure", "{tmp}/new", "{tmp}/ta\0sks.jsonl"], "path '{tmp}/ta\\x00sks.jsonl'"),
        (["plan", "{tmp}/state", "--config", "{tmp}/c\0.toml"], "path '{tmp}/c\\x00.toml'"),
        (["plan", "{tmp}/state", "--config", "{config}", "--output", "p\0"], "path 'p\\x00'"),
        (["submit", "{tmp}/state", "{tmp}/p\0.json"], "path '{tmp}/p\\x00.json'"),
        (["logs", "{tmp}/state", "--task", "k0", "--output", "{tmp}/o\0"], "path '{tmp}/o\\x00'"),
    ],
    ids=["state", "create", "tasks-file", "config", "plan-output", "plan-file", "logs-output"],
)
def test_a_nul_byte_in_any_path_is_bad_input(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    fake = _with_a_log(sweep, config_path, capsys)[0] if argv[0] == "logs" else None
    args = [arg.format(tmp=sweep, config=config_path) for arg in argv]
    code, _, err = run(args, capsys, fake)
    assert code == 1
    line = one_line(err, "ConfigurationError")
    assert f"{named.format(tmp=sweep)} contains a NUL byte" in line
    assert not (sweep / "new").exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda: Campaign.ensure("st\0ate", [Task("a", ["/bin/true"])]),
        lambda: Campaign.create("st\0ate", [Task("a", ["/bin/true"])]),
        lambda: Campaign.open("st\0ate"),
        lambda: read_jsonl("tasks\0.jsonl"),
    ],
    ids=["ensure", "create", "open", "read_jsonl"],
)
def test_a_nul_byte_through_the_api_is_configuration_error(call: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError, match="contains a NUL byte"):
        call()
