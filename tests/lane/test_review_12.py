"""A hostile review of the issue #12 fixes: what still goes wrong, each pinned by a failing test.

Every test here is ``xfail(strict=True)``: it fails on today's main for the reason it names, and
turns into a failure of the suite (XPASS) once the product is fixed, so the marker must then go.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from servatus.cli import main
from servatus.testing import FakeScheduler
from servatus.transport import CommandResult
from testkit import CPU_PROFILE, run, write_tasks


def campaign_of_one(
    tmp_path: Path,
    fake: FakeScheduler,
    capsys: pytest.CaptureFixture[str],
    state: Path | str,
    plan: str | None = None,
    *,
    submit: bool = True,
) -> Path:
    """Create a campaign of one Task at ``state`` and, given ``plan``, plan it under CPU_PROFILE
    into ``plan`` and, unless told not to, submit it; returns the config's path (written only to
    plan)."""
    config = tmp_path / "SERVATUS.toml"
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    assert run(["create", str(state), tasks], fake, capsys)[0] == 0
    if plan is None:
        return config
    config.write_text(CPU_PROFILE)
    assert (
        run(["plan", str(state), "--config", str(config), "--output", plan], fake, capsys)[0] == 0
    )
    if submit:
        assert run(["submit", str(state), plan], fake, capsys)[0] == 0
    return config


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the working directory, with CPU_PROFILE as its SERVATUS.toml."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SERVATUS.toml").write_text(CPU_PROFILE)
    return tmp_path


def doctor_checks(out: str) -> dict[str, str]:
    """The status of each check in the document ``doctor --json`` printed."""
    return {check["name"]: check["status"] for check in json.loads(out)["checks"]}


def status_after_chmod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, mode: int
) -> tuple[Path, int, str]:
    """A new one-Task campaign whose file ``name`` is then given ``mode``, and what ``status
    --offline`` of it exits with and says on stderr."""
    state = tmp_path / "state"
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state)
    (state / name).chmod(mode)
    code, _, err = run(["status", str(state), "--offline"], fake, capsys)
    return state, code, err


# -- max_script_bytes at plan ----------------------------------------------------------------


def test_a_plan_whose_script_is_too_large_through_the_targets_binds_is_refused_at_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binds = [f"/data/{'x' * 90}{i:04d}:/mnt/{i:04d}:ro" for i in range(200)]  # ~21 KB a step
    config = tmp_path / "SERVATUS.toml"
    config.write_text(
        CPU_PROFILE.replace(
            'max_time_limit = "01:00:00"',
            'max_time_limit = "01:00:00"\nmax_script_bytes = 40000\n'
            f'apptainer = "/usr/bin/apptainer"\nimage = "/img/a.sif"\nbinds = {json.dumps(binds)}',
        )
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"key": f"k{i}", "args": ["python"]}) + "\n" for i in (0, 1))
    )
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = FakeScheduler()
    assert run(["create", state, str(tasks)], fake, capsys)[0] == 0
    planned, _, plan_err = run(
        ["plan", state, "--config", str(config), "--output", plan], fake, capsys
    )
    submitted, _, submit_err = run(["submit", state, plan], fake, capsys)
    # Today: plan exits 0 and saves it; submit then exits 1: "the batch script of allocation
    # ... is 50710 bytes, over max_script_bytes (40000)".
    assert (planned, submitted) == (1, 1), (plan_err, submit_err)
    assert "max_script_bytes" in plan_err and not Path(plan).exists()


# -- a directory that is not a campaign ------------------------------------------------------


@pytest.mark.parametrize("command", [["seal"], ["append", "TASKS"]], ids=["seal", "append"])
def test_a_command_on_a_directory_that_is_no_campaign_leaves_its_mode_alone(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README").write_text("shared with my group\n")
    project.chmod(0o755)
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    args = [tasks if word == "TASKS" else word for word in command]
    code, _, err = run([args[0], str(project), *args[1:]], FakeScheduler(), capsys)
    assert code == 1 and "no campaign" in err
    assert stat.S_IMODE(os.stat(project).st_mode) == 0o755, err
    assert err == f"servatus: ConfigurationError: no campaign at {str(project)!r}\n"
    assert sorted(os.listdir(project)) == ["README"]


def test_status_of_a_directory_that_is_no_campaign_advises_no_chmod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text("")
    home.chmod(0o755)
    code, _, err = run(["status", str(home), "--offline"], FakeScheduler(), capsys)
    assert code == 1
    assert err == f"servatus: ConfigurationError: no campaign at {str(home)!r}\n"


# -- --json whatever the exit ----------------------------------------------------------------


class _Broken(FakeScheduler):
    """A transport (``connect=`` is public) whose squeue fails in a way no one planned for (also
    within the one command that reads it with the markers)."""

    def run(self, argv, *, stdin=b"", timeout=30.0):  # type: ignore[no-untyped-def, override]
        if any(os.path.basename(word) == "squeue" for word in argv):
            raise RuntimeError("bug in a transport")
        return super().run(argv, stdin=stdin, timeout=timeout)


@pytest.mark.parametrize(
    "args",
    [["status", "STATE", "--json"], ["reconcile", "STATE", "--json"]],
    ids=["status", "reconcile"],
)
def test_json_prints_one_document_on_an_unexpected_error(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    broken = _Broken()
    broken.unavailable("sbatch")  # submit is interrupted: reconcile has work, status asks Slurm
    assert main(["create", state, write_tasks(tmp_path / "tasks.jsonl", 1)]) == 0
    assert main(["plan", state, "--config", str(config), "--output", plan]) == 0
    assert main(["submit", state, plan], connect=broken) == 3
    code, out, err = run([state if a == "STATE" else a for a in args], broken, capsys)
    assert code == 1 and err.startswith("servatus: unexpected error: RuntimeError")
    assert json.loads(out)["error"]["type"] == "RuntimeError"


# -- logs ------------------------------------------------------------------------------------


def test_logs_of_an_ended_task_whose_log_is_gone_says_so_and_is_not_retry_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.finish(1000, 0)
    fake.purge()  # SUCCEEDED; its step log was never kept (fake.logs is empty)
    code, _, err = run(["logs", state, "--task", "k0"], fake, capsys)
    assert "tail: cannot open" not in err
    assert code == 1, err


class _RealTail(FakeScheduler):
    """``tail`` of a missing file says what GNU tail says."""

    def run(self, argv, *, stdin=b"", timeout=30.0):  # type: ignore[no-untyped-def, override]
        if len(argv) > 3 and argv[3] == "tail":  # sh -c TAIL_OWN tail -c N -- PATH
            self.calls.append(tuple(argv))
            said = f"tail: cannot open '{argv[-1]}' for reading: No such file or directory\n"
            return CommandResult(tuple(argv), 1, b"", said.encode())
        return super().run(argv, stdin=stdin, timeout=timeout)


def test_logs_of_an_ended_allocation_whose_log_is_gone_names_the_file_and_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = _RealTail()
    campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.start(1000)
    fake.finish(1000, 0)
    fake.purge()
    allocation = fake.jobs[0].allocation_id
    code, _, err = run(["logs", state, "--allocation", allocation], fake, capsys)
    path = [call for call in fake.calls if len(call) > 3 and call[3] == "tail"][-1][-1]
    assert code == 1
    assert err == (
        f"servatus: ConfigurationError: allocation {allocation} has no log to read: allocation "
        f"{allocation} (job 1000) has ended and {path} cannot be read (No such file or "
        "directory); nothing writes it again, so retrying cannot help (was it removed, by a "
        "scratch purge say?)\n"
    )


# -- authoring errors in the user's terms -----------------------------------------------------


@pytest.mark.parametrize(
    ("content", "leak"),
    [
        (b'{"key": "k0", "args": ["/usr/bin/\xff"]}\n', "codec"),
        (b'\xef\xbb\xbf{"key": "k0", "args": ["/usr/bin/true"]}\n', "utf-8-sig"),
        (b'{"key": "k0", "args": ["/usr/bin/true", "a\x0cb"]}\n', "at at"),
        (b'{"key": "k0", "args": ["/usr/bin/true"], "stdin_file": ""}\n', "Is a directory"),
    ],
    ids=["not-utf8", "bom", "control-character", "empty-stdin-file"],
)
def test_every_tasks_file_error_speaks_the_users_terms(
    content: bytes, leak: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(content)
    code, _, err = run(["create", str(tmp_path / "state"), str(tasks)], FakeScheduler(), capsys)
    assert code == 1 and err.startswith(f"servatus: ConfigurationError: {tasks}:1: "), err
    assert leak not in err and "not a JSON object" not in err, err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (
            b'{"key": "k0", "args": ["/usr/bin/\xc3\xa9\xff"]}\n',
            "not UTF-8 text: byte 0xff at column 35; a Tasks file is UTF-8",
        ),
        (
            b'\xef\xbb\xbf{"key": "k0", "args": ["/usr/bin/true"]}\n',
            "starts with a byte order mark (U+FEFF); save the Tasks file as UTF-8 without one",
        ),
        (
            b'{"key": "k0", "args": ["a\x01b"]}\n',
            "not valid JSON: a raw control character (U+0001) at column 26; inside a string "
            "write it escaped (\\u0001)",
        ),
        (
            b'{"key": "k0", "args": ["/usr/bin/true"], "stdin_file": ""}\n',
            '"stdin_file" must not be empty; leave it out for no stdin',
        ),
    ],
    ids=["not-utf8", "bom", "control-character", "empty-stdin-file"],
)
def test_each_tasks_file_error_says_what_to_change(
    content: bytes, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(content)
    code, _, err = run(["create", str(tmp_path / "state"), str(tasks)], FakeScheduler(), capsys)
    assert (code, err) == (1, f"servatus: ConfigurationError: {tasks}:1: {said}\n")


# -- FakeScheduler controls ------------------------------------------------------------------


@pytest.mark.parametrize("times", [0, -1])
def test_a_control_that_fires_no_times_is_refused_or_never_fires(times: int) -> None:
    fake = FakeScheduler()
    try:
        fake.fail("ping", times=times)
    except ValueError:
        return
    result = fake.run(["/usr/bin/sbatch", "--version"])
    assert isinstance(result, CommandResult) and result.returncode == 0


# -- bad input is reported before Slurm is asked ----------------------------------------------


@pytest.mark.parametrize("option", ["--task", "--allocation"])
def test_cancel_of_an_unknown_name_is_bad_input_even_while_slurm_is_down(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.unavailable("squeue")
    code, _, err = run(["cancel", state, option, "typo"], fake, capsys)
    assert code == 1, err
    assert "typo" in err


# -- suggested commands run as printed -------------------------------------------------------


@pytest.mark.usefixtures("project")
def test_the_submit_command_plan_suggests_runs_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
    fake = FakeScheduler()
    assert run(["create", "--", "-st", tasks], fake, capsys)[0] == 0
    code, out, _ = run(["plan", "--output", "plan.json", "--", "-st"], fake, capsys)
    assert code == 0
    suggested = out.splitlines()[-1].split("submit it with: ", 1)[1]
    words = shlex.split(suggested)
    assert words[:2] == ["servatus", "submit"]
    code, _, err = run(words[1:], fake, capsys)
    assert code == 0, f"{suggested!r}: {err}"


def test_the_chmod_a_mode_warning_suggests_runs_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex
    import subprocess

    monkeypatch.chdir(tmp_path)
    fake = FakeScheduler()
    assert (
        run(["create", "--", "-st", write_tasks(tmp_path / "tasks.jsonl", 1)], fake, capsys)[0] == 0
    )
    (tmp_path / "-st" / "journal").chmod(0o644)
    code, _, err = run(["status", "--offline", "--", "-st"], fake, capsys)
    assert code == 0
    suggested = err.splitlines()[-1].split("make it owner-only: ", 1)[1]
    assert suggested == "chmod 600 ./-st/journal"
    subprocess.run(shlex.split(suggested), check=True)
    assert stat.S_IMODE(os.stat(tmp_path / "-st" / "journal").st_mode) == 0o600


@pytest.mark.usefixtures("project")
def test_the_reconcile_command_a_wait_suggests_runs_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    fake = FakeScheduler()
    assert (
        run(["create", "--", "-st", write_tasks(tmp_path / "tasks.jsonl", 1)], fake, capsys)[0] == 0
    )
    assert run(["plan", "--output", "plan.json", "--", "-st"], fake, capsys)[0] == 0
    fake.unavailable("sbatch")
    assert run(["submit", "--", "-st", "plan.json"], fake, capsys)[0] == 3
    code, _, err = run(["reconcile", "--", "-st"], FakeScheduler(), capsys)
    assert code == 75
    suggested = err.split("run ", 1)[1].split(" again after ", 1)[0]
    assert suggested == "servatus reconcile ./-st"
    code, _, err = run(shlex.split(suggested)[1:], FakeScheduler(), capsys)
    assert code == 75 and "still waits for evidence" in err, err


# -- FakeScheduler agrees with Slurm ---------------------------------------------------------


def test_the_fakes_time_out_ends_each_running_step_as_its_scancel_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def ended_slots(stop: str) -> list[str]:
        state, plan = str(tmp_path / stop), str(tmp_path / f"{stop}.json")
        fake = FakeScheduler()
        campaign_of_one(tmp_path, fake, capsys, state, plan)
        fake.start(1000)
        if stop == "time_out":
            fake.time_out(1000)
        else:
            assert run(["cancel", state, "--task", "k0"], fake, capsys)[0] == 0
        return sorted(name.split(".", 2)[2] for name in fake.markers)

    assert ended_slots("time_out") == ended_slots("scancel") == ["end.0.143", "start", "stop"]


# -- logs --output never replaces the campaign's own files ------------------------------------


@pytest.mark.parametrize("name", ["journal", "lock"])
def test_logs_output_refuses_to_replace_the_campaigns_own_files(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = tmp_path / "state", str(tmp_path / "plan.json")
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.start(1000)
    fake.logs[f"servatus-{fake.jobs[0].allocation_id}-1000.0.out"] = b"a step's log\n"
    before = (state / name).stat().st_ino, (state / "journal").read_bytes()
    code, _, err = run(
        ["logs", str(state), "--task", "k0", "--output", str(state / name)], fake, capsys
    )
    assert code == 1, f"logs replaced the campaign's own file: {err!r}"
    assert ((state / name).stat().st_ino, (state / "journal").read_bytes()) == before
    assert run(["status", str(state), "--offline"], fake, capsys)[0] == 0


@pytest.mark.parametrize(
    "where",
    ["state/journal.tmp", "state/new-file", "link/journal", "link/new-file", "other/../state/x"],
)
@pytest.mark.parametrize("command", ["logs", "plan"])
def test_no_output_goes_into_a_campaigns_directory_by_any_name(
    command: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = tmp_path / "state", str(tmp_path / "plan.json")
    (tmp_path / "link").symlink_to(state)
    (tmp_path / "other").mkdir()
    fake = FakeScheduler()
    config = campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.start(1000)
    fake.logs[f"servatus-{fake.jobs[0].allocation_id}-1000.0.out"] = b"a step's log\n"
    entries, journal = sorted(os.listdir(state)), (state / "journal").read_bytes()
    output = str(tmp_path / where)
    args = {
        "logs": ["logs", str(state), "--task", "k0", "--output", output],
        "plan": ["plan", str(state), "--config", str(config), "--output", output],
    }[command]
    code, _, err = run(args, fake, capsys)
    assert code == 1 and "inside the campaign" in err, err
    assert (sorted(os.listdir(state)), (state / "journal").read_bytes()) == (entries, journal)


def test_logs_output_over_a_hard_link_to_the_journal_leaves_the_journal_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = tmp_path / "state", str(tmp_path / "plan.json")
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state, plan)
    fake.start(1000)
    fake.logs[f"servatus-{fake.jobs[0].allocation_id}-1000.0.out"] = b"a step's log\n"
    linked = tmp_path / "backup"
    os.link(state / "journal", linked)
    journal = (state / "journal").read_bytes()
    code, _, err = run(["logs", str(state), "--task", "k0", "--output", str(linked)], fake, capsys)
    assert code == 0, err
    assert linked.read_bytes() == b"a step's log\n"
    assert (state / "journal").read_bytes() == journal
    assert run(["status", str(state), "--offline"], fake, capsys)[0] == 0


# -- a controller that timed out is no answer, not a refusal ----------------------------------

_TIMED_OUT = (
    b"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"
)


class _TestOnlyTimesOut(FakeScheduler):
    """``sbatch --test-only`` loses the controller, as Slurm under load answers it."""

    def run(self, argv, *, stdin=b"", timeout=30.0):  # type: ignore[no-untyped-def, override]
        if "--test-only" in argv:
            self.calls.append(tuple(argv))
            return CommandResult(tuple(argv), 1, b"", _TIMED_OUT)
        return super().run(argv, stdin=stdin, timeout=timeout)


def test_validate_reads_a_controller_timeout_as_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = _TestOnlyTimesOut()
    campaign_of_one(tmp_path, fake, capsys, state, plan, submit=False)
    code, out, err = run(["validate", state, plan], fake, capsys)
    assert code == 75, (out, err)
    assert "REJECTED" not in out


@pytest.mark.usefixtures("project")
def test_doctor_reads_a_controller_timeout_as_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["doctor", "--json"], _TestOnlyTimesOut(), capsys)
    checks = doctor_checks(out)
    assert (code, checks["sbatch --test-only"]) == (75, "unavailable")


@pytest.mark.usefixtures("project")
def test_a_real_refusal_of_the_shape_stays_a_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, plan = str(tmp_path / "state"), str(tmp_path / "plan.json")
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state)
    assert run(["plan", state, "--output", plan], fake, capsys)[0] == 0
    refusal = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    fake.fail("sbatch", stderr=refusal, times=2)
    code, out, _ = run(["validate", state, plan], fake, capsys)
    assert code == 1 and "REJECTED" in out, out
    code, out, _ = run(["doctor", "--json"], fake, capsys)
    checks = doctor_checks(out)
    assert (code, checks["sbatch --test-only"]) == (1, "fail")


@pytest.mark.usefixtures("project")
def test_doctor_reads_a_controller_that_cannot_be_contacted_as_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    said = "squeue: error: Unable to contact slurm controller (connect failure)\n"
    fake.fail("squeue", stderr=said)
    fake.fail("scontrol", stderr=said.replace("squeue", "scontrol"))
    code, out, _ = run(["doctor", "--json"], fake, capsys)
    checks = doctor_checks(out)
    assert code == 75, checks
    assert [checks[name] for name in ("squeue", "MinJobAge", "ProctrackType")] == [
        "unavailable"
    ] * 3


# -- every read validates the lock too -------------------------------------------------------


def test_a_campaign_whose_lock_others_can_write_is_refused_on_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, code, err = status_after_chmod(tmp_path, capsys, "lock", 0o666)
    assert code == 1 and "UnsafeFilesystem" in err and "lock" in err, err


def test_a_campaign_whose_lock_others_can_read_is_read_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, code, err = status_after_chmod(tmp_path, capsys, "lock", 0o644)
    assert code == 0
    assert err == (
        f"servatus: warning: {state / 'lock'}: other users can read it (mode 0644); "
        f"make it owner-only: chmod 600 {state / 'lock'}\n"
    )


@pytest.mark.parametrize("command", ["status", "plan"])
def test_a_campaign_others_can_read_is_a_warning_in_the_json_document_too(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    state = tmp_path / "state"
    fake = FakeScheduler()
    campaign_of_one(tmp_path, fake, capsys, state)
    (state / "journal").chmod(0o644)
    warning = (
        f"{state / 'journal'}: other users can read it (mode 0644); make it owner-only: "
        f"chmod 600 {state / 'journal'}"
    )
    args = {
        "status": ["status", str(state), "--offline", "--json"],
        "plan": ["plan", str(state), "--config", str(config), "--json"],
    }[command]
    code, out, err = run(args, fake, capsys)
    assert code == 0
    assert err == f"servatus: warning: {warning}\n"
    assert json.loads(out)["warnings"] == [warning]


# -- refusing an oversized script costs what reading it costs --------------------------------


def test_plan_refuses_a_task_with_megabytes_of_stdin_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    (tmp_path / "input.bin").write_bytes(os.urandom(6_000_000))
    tasks = write_tasks(tmp_path / "tasks.jsonl", 1, stdin_file="input.bin")
    state = str(tmp_path / "state")
    fake = FakeScheduler()
    assert run(["create", state, tasks], fake, capsys)[0] == 0
    started = time.monotonic()
    assert run(["status", state, "--offline"], fake, capsys)[0] == 0
    reading = time.monotonic() - started  # what reading the campaign costs
    started = time.monotonic()
    code, _, err = run(["plan", state, "--config", str(config)], fake, capsys)
    took = time.monotonic() - started
    assert code == 1 and "max_script_bytes" in err, err
    assert took < 10 * reading + 0.5, f"plan took {took:.2f} s to refuse it, status {reading:.2f} s"


# -- a closed stderr ----------------------------------------------------------------------------


@pytest.mark.parametrize("stdout_closed", [False, True], ids=["stderr", "stdout-and-stderr"])
def test_a_closed_stderr_still_gives_the_exit_code(
    stdout_closed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    if stdout_closed:
        monkeypatch.setattr(sys, "stdout", None)
        tasks = write_tasks(tmp_path / "tasks.jsonl", 1)
        assert main(["create", str(tmp_path / "state"), tasks]) == 75  # done, line lost
    else:
        assert main(["status", str(tmp_path / "none"), "--offline"]) == 1
