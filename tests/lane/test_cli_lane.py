"""The lane's CLI through ``servatus.cli.main(connect=FakeScheduler())``: output, documents, and
the Recovery playbook's exit codes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import attrs
import pytest
from fake_bin import make_fake_bin

from servatus.cli import main
from servatus.config import Profile
from servatus.engine.plan import Allocation
from servatus.operations.submission import script_may_exceed, script_room, script_spec
from servatus.plugins import Hooks, hooks
from servatus.tasks import Task, content_size
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE


@pytest.fixture
def sweep(tmp_path: Path, config_path: Path) -> Path:
    (tmp_path / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"key": f"k{i}", "args": ["/usr/bin/python3", "train.py"]}) + "\n"
            for i in range(3)
        )
    )
    assert main(["ensure", str(tmp_path / "state"), str(tmp_path / "tasks.jsonl")]) == 0
    return tmp_path


def run(
    args: list[str], fake: FakeScheduler | None, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    code = main(args, connect=fake)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_submit_status_json(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    capsys.readouterr()
    code, out, _ = run(
        ["plan", state, "--config", str(config_path), "--output", plan], fake, capsys
    )
    assert code == 0
    assert "selected: 3 Tasks in 2 allocations" in out
    assert "requests at most 0.3 CPU-hours, 0.1 GiB-hours" in out
    assert stat.S_IMODE(os.stat(plan).st_mode) == 0o600
    code, _, err = run(
        ["plan", state, "--config", str(config_path), "--output", plan], fake, capsys
    )
    assert code == 1 and "never overwritten" in err
    code, out, _ = run(["submit", state, plan, "--json"], fake, capsys)
    assert code == 0
    receipts = json.loads(out)["receipts"]
    assert receipts == [
        {"allocation_id": receipts[0]["allocation_id"], "job": 1000, "task_keys": ["k0", "k1"]},
        {"allocation_id": receipts[1]["allocation_id"], "job": 1001, "task_keys": ["k2"]},
    ]
    fake.finish(1000, 0, 137)
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    document = json.loads(out)
    assert document["schema"] == "servatus.status/4"
    assert {t["key"]: (t["execution"], t["exit_code"]) for t in document["tasks"]} == {
        "k0": ("SUCCEEDED", 0),
        "k1": ("FAILED", 137),
        "k2": ("QUEUED", None),
    }
    assert document["counts"] == {"QUEUED": 1, "SUCCEEDED": 1, "FAILED": 1}
    assert document["quiescent"] is False and document["results_ready"] is False
    calls = len(fake.calls)  # a retry reads Slurm, but not to be refused its --output
    retry = ["plan", state, "--config", str(config_path), "--retry-failed", "--output", plan]
    code, out, err = run(retry, fake, capsys)
    assert (code, out, fake.calls[calls:]) == (1, "", [])
    assert (
        err == f"servatus: ConfigurationError: {plan} exists; a saved plan is never overwritten\n"
    )
    assert set(document) == {
        "schema",
        "tasks",
        "attempts",
        "counts",
        "quiescent",
        "results_ready",
        "warnings",
    }
    code, out, _ = run(["status", state], fake, capsys)
    assert out.splitlines()[0].split() == [
        "KEY",
        "RESULT",
        "EXECUTION",
        "EXIT",
        "RUN",
        "TIME",
        "LINK",
        "ALLOCATION",
    ]
    assert "3 Tasks: 1 QUEUED, 1 SUCCEEDED, 1 FAILED" in out


def test_one_byte_changed_plan_is_stale(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), sweep / "plan.json"
    run(["plan", state, "--config", str(config_path), "--output", str(plan)], fake, capsys)
    data = plan.read_bytes()
    index = data.index(b'"k2"') + 2
    plan.write_bytes(data[:index] + b"3" + data[index + 1 :])
    code, _, err = run(["submit", state, str(plan)], fake, capsys)
    assert code == 1
    assert err.startswith("servatus: StalePlan: ") and len(err.strip().splitlines()) == 1
    assert fake.jobs == []


def test_bad_profile_inputs_are_one_line_exit_1(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state = str(sweep / "state")
    code, _, err = run(
        ["plan", state, "--config", str(config_path), "--profile", "nope"], fake, capsys
    )
    assert code == 1 and "nope" in err and len(err.strip().splitlines()) == 1
    over = sweep / "over.toml"
    over.write_text(config_path.read_text().replace("cpus = 1\n", "cpus = 4\n"))
    code, _, err = run(["plan", state, "--config", str(over)], fake, capsys)
    assert code == 1 and "ConfigurationError" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["plan", state, "--config", str(config_path), "--retry", "zz"], fake, capsys)
    assert code == 1 and err.startswith("servatus: PlanRefused: zz: unknown Task")
    code, _, err = run(["plan", state, "--bogus"], fake, capsys)
    assert code == 2


def test_unreachable_cluster_exits_75_and_records_nothing(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    run(["plan", state, "--config", str(config_path), "--output", plan], fake, capsys)
    fake.unavailable("ping")
    code, _, err = run(["submit", state, plan], fake, capsys)
    assert code == 75 and "Unavailable" in err
    code, out, _ = run(["status", state, "--offline", "--json"], fake, capsys)
    assert {t["execution"] for t in json.loads(out)["tasks"]} == {"NOT_SUBMITTED"}
    assert run(["submit", state, plan], fake, capsys)[0] == 0
    fake.unavailable("squeue")
    code, _, err = run(["status", state], fake, capsys)
    assert code == 75 and err.startswith("servatus: Unavailable: ")


def test_interrupted_submit_exits_3_then_reconcile(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    run(["plan", state, "--config", str(config_path), "--output", plan], fake, capsys)
    fake.unavailable("sbatch")  # this sbatch never reached Slurm
    code, _, err = run(["submit", state, plan], fake, capsys)
    assert code == 3 and "SubmissionInterrupted" in err
    code, out, err = run(["reconcile", state], fake, capsys)
    assert code == 75 and "still wait" in err and "no evidence yet" in out


def test_validate_and_doctor(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    run(["plan", state, "--config", str(config_path), "--output", plan], fake, capsys)
    code, out, _ = run(["validate", state, plan], fake, capsys)
    assert code == 0 and out.count("accepted") == 2
    assert fake.jobs == []
    fake.fail(
        "sbatch", times=5, stderr="sbatch: error: Requested node configuration is not available"
    )
    code, _, err = run(["validate", state, plan], fake, capsys)
    assert code == 1 and "ShapeRejected" in err
    fake = FakeScheduler()
    code, out, _ = run(["doctor", "--config", str(config_path), "--json"], fake, capsys)
    checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
    assert code == 0 and set(checks.values()) == {"pass"}
    assert list(checks) == [
        "slurm version",
        "squeue",
        "scancel",
        "MinJobAge",
        "ProctrackType",
        "work_root",
        "log_root",
        "find -printf",
        "sbatch --test-only",
    ]
    weak = FakeScheduler(min_job_age=30, proctrack="proctrack/linuxproc")
    code, out, _ = run(["doctor", "--config", str(config_path), "--json"], weak, capsys)
    checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
    assert code == 1 and checks["MinJobAge"] == checks["ProctrackType"] == "fail"
    gone = FakeScheduler()
    gone.missing_directories.add("/scratch/alice/sweep/logs")
    code, out, _ = run(["doctor", "--config", str(config_path), "--json"], gone, capsys)
    checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
    assert code == 1 and checks["log_root"] == "fail" and checks["work_root"] == "pass"
    silent = FakeScheduler()
    silent.unavailable("ping")
    code, out, _ = run(["doctor", "--config", str(config_path)], silent, capsys)
    assert code == 75 and "unavailable" in out and len(silent.calls) == 1


def test_doctor_asks_scancel_at_slurm_bin(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``servatus cancel`` and every chain link's epilogue run ``slurm_bin/scancel``: doctor
    asks it for its version, reads a missing one as ``fail`` (exit 1), saying what breaks, and
    no answer as ``unavailable`` (exit 75)."""
    fake = FakeScheduler()
    code, out, _ = run(["doctor", "--config", str(config_path)], fake, capsys)
    assert code == 0, out
    assert "  pass         scancel             /usr/bin/scancel answers" in out.splitlines()
    assert fake.count("scancel") == 1 and ("/usr/bin/scancel", "--version") in fake.calls
    missing = FakeScheduler()
    missing.fail("scancel", returncode=127, stderr="/usr/bin/scancel: not found\n")
    code, out, _ = run(["doctor", "--config", str(config_path), "--json"], missing, capsys)
    checks = {c["name"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert code == 1
    assert checks.pop("scancel") == (
        "fail",
        "/usr/bin/scancel: not found (servatus cancel and chains need scancel in slurm_bin)",
    )
    assert {status for status, _ in checks.values()} == {"pass"}
    silent = FakeScheduler()
    silent.unavailable("scancel")
    code, out, _ = run(["doctor", "--config", str(config_path), "--json"], silent, capsys)
    checks = {c["name"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert (code, checks["scancel"]) == (
        75,
        ("unavailable", "no answer: FakeScheduler: no answer from scancel"),
    )


def test_doctor_finds_no_scancel_in_a_real_slurm_bin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The local transport's own answer for a program that is not there, read the same way."""
    config, _ = make_fake_bin(tmp_path)
    bindir = tmp_path / "bin"
    code, out, _ = run(["doctor", "--config", str(config), "--json"], None, capsys)
    checks = {c["name"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert checks["scancel"] == ("pass", f"{bindir}/scancel answers"), out
    (bindir / "scancel").unlink()
    code, out, _ = run(["doctor", "--config", str(config), "--json"], None, capsys)
    checks = {c["name"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert code == 1
    assert checks["scancel"] == (
        "fail",
        f"{bindir}/scancel: not found (servatus cancel and chains need scancel in slurm_bin)",
    )


def test_cancel_and_logs(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    run(["plan", state, "--config", str(config_path), "--output", plan], fake, capsys)
    run(["submit", state, plan], fake, capsys)
    fake.start()
    code, out, _ = run(["cancel", state, "--task", "k2"], fake, capsys)
    assert code == 0 and out.startswith("cancelled allocation ")
    assert [j.state for j in fake.jobs] == ["RUNNING", "CANCELLED"]
    job = fake.jobs[0]
    fake.logs[f"servatus-{job.allocation_id}-{job.job}.1.out"] = b"step says \x1b[31mhi\n"
    out_file = sweep / "k1.log"
    code, _, _ = run(["logs", state, "--task", "k1", "--output", str(out_file)], fake, capsys)
    assert code == 0 and out_file.read_bytes() == b"step says \x1b[31mhi\n"
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600


SLOW_SBATCH = """
import signal, sys, time
from servatus.cli import main

# Python leaves SIGINT ignored if it started ignored (a background job of a script): undo that.
signal.signal(signal.SIGINT, signal.default_int_handler)
from servatus.testing import FakeScheduler

class Slow(FakeScheduler):
    def run(self, argv, *, stdin=b"", timeout=30.0):
        if argv[-1] == "--parsable":
            print("in-sbatch", flush=True)
            time.sleep(30)
        return super().run(argv, stdin=stdin, timeout=timeout)

sys.exit(main(sys.argv[1:], connect=Slow()))
"""


def test_ctrl_c_during_sbatch_exits_130_and_keeps_the_intent(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SIGINT to a real process while sbatch is in flight."""
    import signal
    import subprocess
    import sys

    script = sweep / "slow.py"
    script.write_text(SLOW_SBATCH)
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    planned = subprocess.run(
        [
            sys.executable,
            str(script),
            "plan",
            state,
            "--config",
            str(config_path),
            "--output",
            plan,
        ],
        capture_output=True,
    )
    assert planned.returncode == 0, planned.stderr
    child = subprocess.Popen(
        [sys.executable, str(script), "submit", state, plan],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "in-sbatch"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=20)
    assert child.returncode == 130
    assert err == "servatus: interrupted; recorded intent survives; run status\n"
    capsys.readouterr()
    assert main(["status", state, "--offline", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)["tasks"]
    # The batch's intents survive, none of them answered.
    assert {t["key"]: t["execution"] for t in tasks} == {
        "k0": "UNRESOLVED",
        "k1": "UNRESOLVED",
        "k2": "UNRESOLVED",
    }


def test_logs_without_a_selection_is_a_usage_error_as_cancel_is(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["logs", str(sweep / "state"), "--output", "x.log"], FakeScheduler(), capsys
    )
    assert (code, out) == (2, "")
    assert "name at least one --task or --allocation" in err and err.count("\n") == 1


def test_cancel_without_a_selection_is_a_usage_error(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["cancel", str(sweep / "state")], FakeScheduler(), capsys)
    assert (code, out) == (2, "")
    assert "name at least one --task or --allocation" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("task", "said"),
    [
        ({"stdin_file": "big.json"}, "Task 'big': its stdin (30000 bytes) is too large; give it"),
        ({"env": {"BLOB": "x" * 30000}}, "Task 'big': its env (30005 bytes) is too large; pass"),
        ({"args": ["/bin/echo", "x" * 30000]}, "Task 'big': its args (30011 bytes) is too large"),
    ],
    ids=["stdin", "env", "args"],
)
def test_plan_refuses_a_script_over_max_script_bytes_naming_task_and_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: dict[str, object], said: str
) -> None:
    """plan used to save such a plan, and submit refused it for good with a hint about stdin
    whatever the cause."""
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE.replace("[profiles", "max_script_bytes = 20000\n\n[profiles"))
    (tmp_path / "big.json").write_text("y" * 30000)
    lines = [{"key": "small", "args": ["/bin/true"]}, {"key": "big", "args": ["/bin/cat"], **task}]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    state, plan = str(tmp_path / "state"), tmp_path / "plan.json"
    assert main(["ensure", state, str(tmp_path / "tasks.jsonl")]) == 0
    capsys.readouterr()
    fake = FakeScheduler()
    code, _, err = run(
        ["plan", state, "--config", str(config), "--output", str(plan)], fake, capsys
    )
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"servatus: ConfigurationError: {said}")
    assert "over max_script_bytes 20000" in err
    assert not plan.exists() and fake.calls == []


@pytest.mark.parametrize(
    ("stdin", "renders", "said"),
    [
        (b"y" * 30000, 0, "its batch script would be more than 30008 bytes"),
        (b"\x01" * 15000, 1, "its batch script is 6"),  # each byte a 4-character escape
    ],
    ids=["content-over", "escapes-over"],
)
def test_plan_renders_an_oversized_script_at_most_once(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: bytes,
    renders: int,
    said: str,
) -> None:
    """Content over max_script_bytes is refused unrendered; else the script is rendered once and
    its exact size said."""
    rendered: list[int] = []
    batch_script = Hooks.batch_script

    def counting(self: Hooks, spec):  # type: ignore[no-untyped-def]
        rendered.extend(1 for step in spec.steps if len(step.stdin) == len(stdin))
        return batch_script(self, spec)

    monkeypatch.setattr(Hooks, "batch_script", counting)
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE.replace("[profiles", "max_script_bytes = 20000\n\n[profiles"))
    (tmp_path / "big.bin").write_bytes(stdin)
    line = {"key": "big", "args": ["/bin/cat"], "stdin_file": "big.bin"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(line) + "\n")
    state = str(tmp_path / "state")
    assert main(["ensure", state, str(tmp_path / "tasks.jsonl")]) == 0
    capsys.readouterr()
    code, _, err = run(["plan", state, "--config", str(config)], FakeScheduler(), capsys)
    assert code == 1 and "Task 'big': its stdin" in err and said in err, err
    assert "bytes, over max_script_bytes 20000" in err
    assert len(rendered) == renders


def test_plan_says_fewer_tasks_per_allocation_when_no_task_is_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "SERVATUS.toml"
    config.write_text(
        CPU_PROFILE.replace("max_tasks_per_allocation = 2", "max_tasks_per_allocation = 8")
        .replace("max_cpus_per_allocation = 2", "max_cpus_per_allocation = 8")
        .replace("max_memory_mib_per_allocation = 2000", "max_memory_mib_per_allocation = 8000")
        .replace("[profiles", "max_script_bytes = 9000\n\n[profiles")
    )
    lines = [{"key": f"k{i}", "args": ["/bin/echo", "z" * 100]} for i in range(8)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = str(tmp_path / "state")
    assert main(["ensure", state, str(tmp_path / "tasks.jsonl")]) == 0
    capsys.readouterr()
    code, _, err = run(["plan", state, "--config", str(config)], FakeScheduler(), capsys)
    assert code == 1 and "the 8 Tasks of one allocation do not fit" in err, err
    code, _, err = run(
        ["plan", state, "--config", str(config), "--tasks-per-allocation", "1"],
        FakeScheduler(),
        capsys,
    )
    assert code == 0, err


def test_status_without_the_file_servers_clock_warns_and_exits_0(
    sweep: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """log_root read-only from here: no clock, one warning line (and in --json), never a
    failure."""
    fake = FakeScheduler()
    state, plan = str(sweep / "state"), str(sweep / "plan.json")
    planned = run(["plan", state, "--config", str(config_path), "--output", plan], fake, capsys)
    assert planned[0] == 0 and run(["submit", state, plan], fake, capsys)[0] == 0
    fake.start()
    fake.read_only_directories.add("/scratch/alice/sweep/logs")
    code, out, err = run(["status", state], fake, capsys)
    said = [line for line in (out + err).splitlines() if "clock" in line]
    assert code == 0 and len(said) == 1 and "/scratch/alice/sweep/logs" in said[0], out + err
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    warnings = json.loads(out)["warnings"]
    assert code == 0 and [w for w in warnings if "clock" in w] == warnings and len(warnings) == 1


@pytest.mark.parametrize("binds", [0, 200], ids=["direct", "apptainer-200-binds"])
def test_the_planning_bound_is_never_below_the_script_it_bounds(tmp_path: Path, binds: int) -> None:
    """script_may_exceed may say "may exceed" wrongly, never "fits" wrongly: its bound is at
    least the script submit renders, whatever the launcher adds per step."""
    extra = ""
    if binds:
        paths = [f"/data/{'x' * 90}{i:04d}:/mnt/{i:04d}:ro" for i in range(binds)]
        extra = (
            f'apptainer = "/usr/bin/apptainer"\nimage = "/img/a.sif"\nbinds = {json.dumps(paths)}\n'
        )
    config = tmp_path / "SERVATUS.toml"
    config.write_text(CPU_PROFILE.replace("[profiles", f"{extra}\n[profiles"))
    profile = Profile.load(config)
    registry = hooks()
    launcher = registry.launcher(profile.target.launcher)
    room = script_room(registry, profile, launcher)
    assert room is not None
    tasks = [
        Task("plain", ["/usr/bin/python3"]),
        Task("args", ["/bin/echo", *(f"a{i}" for i in range(300))]),
        Task("odd", ["/bin/echo", "é\x01'%" * 500], env={"X": "\t" * 700, "Y": ""}),
        Task("stdin", ["/bin/cat"], stdin=bytes(range(256)) * 40),
        Task("k" * 128, ["/bin/true"], env={f"V{i}": "v" for i in range(100)}),
    ]
    index = {task.key: task for task in tasks}
    for count in (1, 2, len(tasks)):
        keys = tuple(task.key for task in tasks[:count])
        spec = script_spec(profile, Allocation("ab" * 12, keys), index, launcher)
        size = len(registry.batch_script(spec).encode())
        just_under = attrs.evolve(profile.target, max_script_bytes=size - 1)
        sizes = [content_size(index[key]) for key in keys]
        assert script_may_exceed(just_under, sizes, room), (binds, count, size)
