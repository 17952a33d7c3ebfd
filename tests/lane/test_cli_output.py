"""The CLI's output contract: help for every option, escaped human output, JSON whatever the exit,
and the lines a user reads when something did not go as planned."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest

from servatus import batch
from servatus.cli import cli, main
from servatus.errors import Unavailable
from servatus.journal import records, store
from servatus.operations.reconcile import RECONCILE_AFTER
from servatus.testing import FakeJob, FakeScheduler
from testkit import run, write_tasks


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = [group]
    for command in group.commands.values():
        found += _commands(command) if isinstance(command, click.Group) else [command]
    return found


def test_every_command_and_option_has_help_text() -> None:
    missing = [
        f"{command.name} {'/'.join(param.opts)}"
        for command in _commands(cli)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    missing += [command.name or "" for command in _commands(cli) if not command.help]
    assert missing == []


def test_a_newline_in_a_value_never_starts_an_output_line(
    tmp_path: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    state = str(tmp_path / "st\nline2: 1 Task (sealed)\x1b[2J")
    code, out, _ = run(["create", state, tasks], FakeScheduler(), capsys)
    assert code == 0
    assert out.splitlines() == [
        f"created {tmp_path}/st\\nline2: 1 Task (sealed)\\x1b[2J: 1 Task (sealed)"
    ]
    code, out, _ = run(
        ["plan", state, "--config", str(config_path), "--output", str(tmp_path / "p\n.json")],
        FakeScheduler(),
        capsys,
    )
    assert code == 0
    saved = out.splitlines()[-1]
    assert saved.startswith("saved ") and saved.count("p\\n.json") == 2 and "st\\nline2" in saved
    assert f"; submit it with: servatus submit '{tmp_path}/st\\n" in saved  # quoted, escaped


@pytest.mark.parametrize("redirect", [">&-", "1</dev/null"], ids=["closed", "read-only"])
def test_a_closed_stdout_is_75_in_one_line(redirect: str) -> None:
    done = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "servatus", "plugins"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert done.returncode == 75, done.stderr
    assert done.stderr.startswith("servatus: Unavailable: cannot write the output: ")
    assert done.stderr.count("\n") == 1, done.stderr


def test_with_stdout_closed_the_work_is_done_and_the_lost_line_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["create", str(tmp_path / "state"), tasks]) == 75
    assert sys.stdout is None
    assert (tmp_path / "state").is_dir()  # done, and said so on stderr; only the line was lost


@pytest.fixture
def sweep(tmp_path: Path, config_path: Path) -> tuple[str, str]:
    """A campaign of three Tasks and its saved plan (two allocations under the CPU profile)."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", 3)
    state, plan = str(tmp_path / "my state"), str(tmp_path / "plan.json")
    assert main(["ensure", state, tasks]) == 0
    assert main(["plan", state, "--config", str(config_path), "--output", plan]) == 0
    return state, plan


def submitted(
    state: str, plan: str, capsys: pytest.CaptureFixture[str], *, sbatch_answers: bool = True
) -> FakeScheduler:
    """A new FakeScheduler the saved plan was submitted to: accepted (exit 0) or, with sbatch
    unanswered, interrupted (exit 3)."""
    fake = FakeScheduler()
    if not sbatch_answers:
        fake.unavailable("sbatch")
    assert run(["submit", state, plan], fake, capsys)[0] == (0 if sbatch_answers else 3)
    return fake


def test_offline_nothing_was_listed_or_not(
    sweep: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake = submitted(state, plan, capsys)
    fake.finish(1000)
    fake.purge()
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    assert code == 0
    assert [a["listed"] for a in json.loads(out)["attempts"]] == [False, True]
    code, out, _ = run(["status", state, "--offline", "--json"], fake, capsys)
    assert code == 0
    assert [a["listed"] for a in json.loads(out)["attempts"]] == [None, None]


def late_sbatch(
    state: str,
    plan: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    job_state: str = "RUNNING",
) -> tuple[FakeScheduler, str]:
    """The first allocation's sbatch gets no answer (nor the rest of its batch), reconcile
    records them as not submitted 15 minutes later, and then Slurm lists a job for the first
    after all (an sbatch that arrived late), in ``job_state``: COMPLETED is ended, and still
    listed until MinJobAge passes."""
    fake = submitted(state, plan, capsys, sbatch_answers=False)
    later = time.time() + RECONCILE_AFTER + 1
    monkeypatch.setattr(time, "time", lambda: later)
    code, out, _ = run(["reconcile", state, "--json"], fake, capsys)
    assert code == 0
    resolutions = json.loads(out)["resolutions"]
    assert {resolution["outcome"] for resolution in resolutions} == {"not_submitted"}
    allocation_id = resolutions[0]["allocation_id"]
    fake.jobs.append(FakeJob(1999, allocation_id, "", 2, state=job_state))
    return fake, allocation_id


def test_the_late_sbatch_warning_names_the_campaign(
    sweep: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake, allocation_id = late_sbatch(state, plan, monkeypatch, capsys)
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    assert code == 0
    (warning,) = json.loads(out)["warnings"]
    assert warning.endswith(
        f"(servatus cancel {shlex.quote(state)} --allocation {allocation_id} stops it)"
    )
    assert "'" in shlex.quote(state)  # the path holds a space


def test_the_late_sbatch_warning_suggests_no_cancel_once_the_job_has_ended(
    sweep: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake, allocation_id = late_sbatch(state, plan, monkeypatch, capsys, "COMPLETED")
    code, out, err = run(["status", state, "--json"], fake, capsys)
    assert code == 0
    (warning,) = json.loads(out)["warnings"]
    assert "servatus cancel" not in warning and "servatus cancel" not in err
    assert warning.endswith(
        "its Tasks are held ACTIVE until it leaves the queue (it has ended, COMPLETED: nothing "
        "to cancel)"
    )
    assert run(["cancel", state, "--allocation", allocation_id], fake, capsys)[1] == (
        "nothing to cancel: no matching allocation is queued or running\n"
    )


def test_cancel_of_a_late_job_that_already_ended_cancels_nothing(
    sweep: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake, allocation_id = late_sbatch(state, plan, monkeypatch, capsys, "COMPLETED")
    code, out, _ = run(["cancel", state, "--allocation", allocation_id], fake, capsys)
    assert (code, out) == (0, "nothing to cancel: no matching allocation is queued or running\n")
    code, out, _ = run(["cancel", state, "--allocation", allocation_id, "--json"], fake, capsys)
    assert code == 0 and json.loads(out)["cancelled"] == []
    assert fake.count("scancel") == 0
    fake.jobs[-1].state = "RUNNING"
    code, out, _ = run(["cancel", state, "--allocation", allocation_id], fake, capsys)
    assert (code, out) == (0, f"cancelled allocation {allocation_id}\n")


def test_reconcile_says_when_to_run_again_with_the_date(
    sweep: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    monkeypatch.setenv("TZ", "XST-5:30")  # POSIX, no tz database needed: local is UTC+05:30
    time.tzset()
    try:
        fake = submitted(state, plan, capsys, sbatch_answers=False)
        code, out, _ = run(["reconcile", state, "--json"], fake, capsys)
        assert code == 75
        resolutions = json.loads(out)["resolutions"]  # the whole batch went unanswered
        assert {resolution["outcome"] for resolution in resolutions} == {"waiting"}
        retry_at = resolutions[-1]["retry_at"]
        assert isinstance(retry_at, float)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(retry_at)) + " +0530"
        code, out, err = run(["reconcile", state], fake, capsys)
        assert code == 75
        assert out.endswith(f": no evidence yet; decidable after {when}\n")
        assert err.endswith(f"run servatus reconcile {shlex.quote(state)} again after {when}\n")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_more_tasks_per_allocation_than_fit_is_lowered_with_a_warning(
    sweep: tuple[str, str], config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, _ = sweep
    plan = ["plan", state, "--config", str(config_path), "--tasks-per-allocation"]
    warning = (
        "5 Tasks per allocation were asked, but profile cpu fits 2; each allocation holds at most 2"
    )
    code, out, err = run([*plan, "5"], FakeScheduler(), capsys)
    assert code == 0 and "selected: 3 Tasks in 2 allocations" in out
    assert err == f"servatus: warning: {warning}\n" and "warning" not in out
    code, out, err = run([*plan, "5", "--json"], FakeScheduler(), capsys)
    assert code == 0 and json.loads(out)["warnings"] == [warning]
    assert err == f"servatus: warning: {warning}\n"
    code, out, err = run([*plan, "2", "--json"], FakeScheduler(), capsys)
    assert (code, err, json.loads(out)["warnings"]) == (0, "", [])


def test_the_log_of_a_task_that_has_not_started_does_not_exist_yet(
    sweep: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake = submitted(state, plan, capsys)
    first, second = fake.jobs
    where = f"allocation {first.allocation_id} (job {first.job})"
    code, out, err = run(["logs", state, "--task", "k0"], fake, capsys)
    assert (code, out) == (75, "")
    assert err == (
        f"servatus: Unavailable: Task k0 has no log yet: {where} is still queued; "
        "retry once it runs\n"
    )
    code, _, err = run(["logs", state, "--allocation", first.allocation_id], fake, capsys)
    assert code == 75 and err.startswith(
        f"servatus: Unavailable: allocation {first.allocation_id} has no log yet: {where} is "
    )
    first.state = "RUNNING"  # Slurm runs it; its batch script has not marked the start yet
    code, _, err = run(["logs", state, "--task", "k1"], fake, capsys)
    assert code == 75
    assert err == (
        f"servatus: Unavailable: Task k1 has no log yet: {where} has not started it; "
        "retry shortly\n"
    )
    first.state = "PENDING"
    fake.start(first.job)  # started, so its log should be there: failing to read it is said
    code, _, err = run(["logs", state, "--task", "k1"], fake, capsys)
    assert code == 75 and err.startswith("servatus: Unavailable: cannot read ")
    assert run(["cancel", state, "--task", "k2"], fake, capsys)[0] == 0
    fake.purge()
    code, _, err = run(["logs", state, "--task", "k2"], fake, capsys)
    assert code == 1
    assert err == (
        f"servatus: ConfigurationError: Task k2 has no log: allocation {second.allocation_id} "
        f"(job {second.job}) ended before it started\n"
    )


class _Stops(FakeScheduler):
    """A FakeScheduler whose ``at``-th submitting sbatch raises ``error``: no answer, or Ctrl-C."""

    def __init__(self, at: int, error: BaseException) -> None:
        super().__init__()
        self.at, self.error, self.seen = at, error, 0

    def run(self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = 30.0) -> Any:
        if argv[-1] == "--parsable":
            self.seen += 1
            if self.seen == self.at:
                raise self.error
        return super().run(argv, stdin=stdin, timeout=timeout)


def one_by_one(state: str, config_path: Path, tmp_path: Path) -> str:
    plan = str(tmp_path / "one-by-one.json")
    args = ["plan", state, "--config", str(config_path), "--tasks-per-allocation", "1"]
    assert main([*args, "--output", plan]) == 0
    return plan


@pytest.mark.parametrize(
    ("error", "code", "kind"),
    [
        (Unavailable("FakeScheduler: no answer from sbatch"), 3, "SubmissionInterrupted"),
        (KeyboardInterrupt(), 130, "Interrupted"),
    ],
    ids=["no-answer", "ctrl-c"],
)
def test_an_interrupted_submit_still_prints_what_slurm_accepted(
    sweep: tuple[str, str],
    config_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    code: int,
    kind: str,
) -> None:
    state, _ = sweep
    plan = one_by_one(state, config_path, tmp_path)
    fake = _Stops(2, error)  # the first of three allocations is accepted, the second stops it
    got, out, err = run(["submit", state, plan, "--json"], fake, capsys)
    assert got == code and err.count("\n") == 1
    document = json.loads(out)
    (job,) = fake.jobs
    assert document["receipts"] == [
        {"allocation_id": job.allocation_id, "job": job.job, "task_keys": ["k0"]}
    ]
    assert document["error"]["type"] == kind
    said = document["error"]["message"]
    assert err == (f"servatus: {said}\n" if code == 130 else f"servatus: {kind}: {said}\n")


def test_a_cancel_with_one_failing_scancel_prints_what_was_cancelled(
    sweep: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    fake = submitted(state, plan, capsys)
    first, second = fake.jobs
    fake.fail("scancel")  # the newest, second, is tried first and fails; the first is cancelled
    code, out, err = run(["cancel", state, "--task", "k0", "--task", "k2", "--json"], fake, capsys)
    assert code == 75
    document = json.loads(out)
    assert document["cancelled"] == [first.allocation_id]
    assert document["error"]["type"] == "Unavailable"
    assert err == f"servatus: Unavailable: {document['error']['message']}\n"
    assert second.allocation_id in document["error"]["message"]
    assert [job.state for job in fake.jobs] == ["CANCELLED", "PENDING"]


def test_every_json_command_prints_a_document_whatever_the_exit(
    sweep: tuple[str, str], config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep
    missing, tasks = str(tmp_path / "missing"), str(tmp_path / "tasks.jsonl")
    (tmp_path / "other.jsonl").write_text(json.dumps({"key": "k0", "args": ["/bin/false"]}) + "\n")
    failing = {
        "profile": (["--config", str(tmp_path / "none.toml")], 1),
        "create": ([state, tasks], 1),
        "ensure": ([state, str(tmp_path / "other.jsonl")], 1),
        "append": ([missing, tasks], 1),
        "seal": ([missing], 1),
        "plan": ([state, "--config", str(config_path), "--retry", "zz"], 1),
        "validate": ([state, plan], 1),
        "submit": ([state, str(tmp_path / "none.json")], 1),
        "status": ([state], 75),
        "report": ([state], 75),
        "reconcile": ([state], 75),
        "cancel": ([state, "--task", "zz"], 1),
        "doctor": (["--config", str(tmp_path / "none.toml")], 1),
        "start": ([state, str(tmp_path / "other.jsonl"), "--lease", "0" * 24], 1),
    }
    json_commands = {
        name
        for name, command in cli.commands.items()
        if any(param.name == "as_json" for param in command.params)
    }
    assert json_commands - set(failing) == {"plugins"}  # it cannot fail but for a bug
    submitted(state, plan, capsys, sbatch_answers=False)  # interrupted: reconcile then waits
    for name, (args, code) in failing.items():
        fake = FakeScheduler()
        if name == "validate":
            fake.fail("sbatch", times=5, stderr="sbatch: error: Invalid partition")
        if name in ("status", "report"):
            fake.unavailable("squeue")
        got, out, err = run([name, *args, "--json"], fake, capsys)
        assert got == code, (name, err)
        (line,) = err.splitlines()
        document = json.loads(out)
        assert line == f"servatus: {document['error']['type']}: {document['error']['message']}"
        if name in ("validate", "reconcile"):  # what they found stands beside the error
            assert document[{"validate": "checks", "reconcile": "resolutions"}[name]]
    code, out, _ = run(["cancel", state, "--json"], FakeScheduler(), capsys)
    assert (code, out) == (2, "")  # a usage error prints no document


def test_a_newline_in_a_value_is_escaped_on_stderr_too(
    sweep: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, _ = sweep
    code, out, err = run(["submit", state, str(tmp_path / "no\nsuch")], FakeScheduler(), capsys)
    assert (code, out) == (1, "")
    assert err == f"servatus: ConfigurationError: no plan file {tmp_path}/no\\nsuch\n"


class _SilentAfter(FakeScheduler):
    """A FakeScheduler that stops answering ``sbatch --test-only`` after the first one."""

    def run(self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = 30.0) -> Any:
        if "--test-only" in argv and self.count("sbatch"):  # the ping counts as "ping"
            raise Unavailable("FakeScheduler: no answer from sbatch")
        return super().run(argv, stdin=stdin, timeout=timeout)


def test_a_validate_cut_short_prints_the_checks_it_made(
    sweep: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = sweep  # two shapes: 2 Tasks, then 1
    code, out, err = run(["validate", state, plan, "--json"], _SilentAfter(), capsys)
    assert code == 75 and err.startswith("servatus: Unavailable: ")
    document = json.loads(out)
    assert [(c["tasks"], c["accepted"]) for c in document["checks"]] == [(1, True)]
    assert document["error"]["type"] == "Unavailable"


def test_a_reconcile_that_cannot_record_them_all_prints_what_it_recorded(
    sweep: tuple[str, str],
    config_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, plan = sweep
    monkeypatch.setattr(batch, "MAX_ALLOCATIONS", 1)  # the lost answer is its batch's last
    fake = FakeScheduler()
    fake.lose_answer("sbatch")  # Slurm has job 1000, the campaign an unresolved intent
    assert run(["submit", state, plan], fake, capsys)[0] == 3
    again = str(tmp_path / "again.json")  # the Tasks left: the third, in one allocation
    assert main(["plan", state, "--config", str(config_path), "--output", again]) == 0
    fake.lose_answer("sbatch")  # and job 1001
    assert run(["submit", state, again], fake, capsys)[0] == 3
    add = store.Writer.add

    def full_on_the_second(writer: store.Writer, change: object) -> None:
        if isinstance(change, records.Resolved) and change.job == 1001:
            raise Unavailable("no space left on device")
        add(writer, change)

    monkeypatch.setattr(store.Writer, "add", full_on_the_second)
    code, out, err = run(["reconcile", state, "--json"], fake, capsys)
    assert code == 75 and err == "servatus: Unavailable: no space left on device\n"
    document = json.loads(out)
    assert [(r["outcome"], r["job"]) for r in document["resolutions"]] == [("accepted", 1000)]
    assert document["error"] == {"type": "Unavailable", "message": "no space left on device"}


def test_a_submit_on_a_terminal_names_each_batch_as_it_goes_out(
    sweep: tuple[str, str],
    config_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, _ = sweep
    plan = one_by_one(state, config_path, tmp_path)
    monkeypatch.setattr(batch, "MAX_ALLOCATIONS", 2)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    fake = FakeScheduler()
    got, out, err = run(["submit", state, plan], fake, capsys)
    assert (got, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "sending allocations 1-2 of 3 in one batch"
    assert lines[3] == "sending allocation 3 of 3"
    assert [line.split(":")[0] for line in lines[1:3] + lines[4:5]] == [
        "allocation 1 of 3",
        "allocation 2 of 3",
        "allocation 3 of 3",
    ]
