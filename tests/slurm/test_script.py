"""Batch scripts: what they ask Slurm for, and what they really do when a shell runs them.

The run tests execute rendered scripts under ``dash`` (Debian's ``/bin/sh``) and ``bash --posix``
(``/bin/sh`` on RHEL-like clusters) with a fake ``srun`` that starts the step as Slurm would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurm_helpers import (
    ALLOCATION,
    INHERIT,
    PYTHON,
    FakeCluster,
    allocation_log,
    direct_step,
    make_spec,
    make_target,
)

from servatus.config import Target
from servatus.continuation import Link
from servatus.engine.slots import link_execution
from servatus.engine.status_values import Execution, StopReason
from servatus.errors import ConfigurationError
from servatus.evidence import MarkerKind, observe
from servatus.journal.records import ChainLink
from servatus.launcher import StepCommand
from servatus.script import BUDGET_VARIABLE, CHAIN_VARIABLES, ScriptSpec, ScriptStep
from servatus.transport import CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.script import END_MARGIN, END_TRIES, GRACE, render
from servatus_slurm.transport import LocalTransport
from testkit import fill_inodes, tmpfs

SHELLS = [("dash",), ("bash", "--posix")]
ODD_ARGS = [
    "it's",
    'say "hi"',
    "two  spaces",
    "new\nline",
    "tab\there",
    "",
    "$HOME `x` \\",
    "caf\u00e9",
    "raw\udcff\udc80byte",
    "%s%d",
    "-dash",
    "cr\rlf",
    "\x01\x7f",
]
ODD_ENV = {"QUOTE": "it's", "NEWLINE": "a\nb\n", "EMPTY": "", "RAW": "\udcfe!", "EQ": "a=b"}


def wait_exit(process: subprocess.Popen[bytes], seconds: float = 30) -> str:
    """The script's exit, which must be 0, and what it said in its own log."""
    out, _ = process.communicate(timeout=seconds)
    said = out.decode(errors="replace") + allocation_log(FakeCluster(Path(process.args[-1]).parent))
    assert process.returncode == 0, said
    return said


def markers(cluster: FakeCluster) -> dict[str, float]:
    return {
        name: (cluster.logs / name).stat().st_mtime
        for name in os.listdir(cluster.logs)
        if not name.endswith(".out")
    }


def record(cluster: FakeCluster, name: str) -> dict[str, object]:
    return json.loads((cluster.out / f"{name}.json").read_text())


def decode_env(raw: dict[str, str]) -> dict[bytes, bytes]:
    env = {bytes.fromhex(k): bytes.fromhex(v) for k, v in raw.items()}
    # Python itself adds LC_CTYPE when it starts without a locale (PEP 538 coercion).
    if env.get(b"LC_CTYPE") == b"C.UTF-8":
        del env[b"LC_CTYPE"]
    return env


def wait_for(predicate: object, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# -- rendering ----------------------------------------------------------------------------------


def test_directives_request_the_whole_allocation(tmp_path: Path) -> None:
    target = make_target(
        tmp_path,
        partitions=("gpu", "gpu2"),
        account="lab",
        qos="normal",
        constraint="a100|h100",
        gpu_gres="gpu:a100",
        max_gpus_per_allocation=4,
    )
    steps = [direct_step(target, slot, ["/bin/true"]) for slot in range(3)]
    script = render(
        make_spec(
            target, steps, cpus=4, memory_mib=1000, gpus=1, time_limit=3601, signal_before_end=600
        )
    )
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        f"#SBATCH --job-name=servatus-{ALLOCATION}",
        "#SBATCH --output=/dev/null",
        f"#SBATCH --chdir={tmp_path}/work",
        "#SBATCH --export=NIL",
        "#SBATCH --no-requeue",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=3",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=3000M",
        "#SBATCH --gres=gpu:a100:3",
        "#SBATCH --time=61",
        "#SBATCH --partition=gpu,gpu2",
        "#SBATCH --account=lab",
        "#SBATCH --qos=normal",
        "#SBATCH --constraint=a100|h100",
        "#SBATCH --signal=B:USR1@600",
    ]
    assert script.startswith("#!/bin/sh\n#SBATCH")
    assert script.count("--gres=gpu:a100:1 ") == 3
    assert script.isascii() and "\r" not in script


def test_optional_directives_are_absent_when_unset(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    script = render(make_spec(target, [direct_step(target, 0, ["/bin/true"])]))
    assert "--gres" not in script and "--signal" not in script
    for option in ("account", "qos", "constraint"):
        assert f"--{option}" not in script


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_rendered_scripts_parse(tmp_path: Path, shell: str) -> None:
    target = make_target(tmp_path)
    steps = [
        direct_step(target, 0, ["/bin/echo", *ODD_ARGS], stdin=bytes(range(256)) * 9, env=ODD_ENV),
        direct_step(target, 1, ["/bin/true"]),
    ]
    path = tmp_path / "job.sh"
    path.write_text(render(make_spec(target, steps, signal_before_end=60)))
    checked = subprocess.run([shell, "-n", str(path)], capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_script_size_is_bounded(tmp_path: Path) -> None:
    target = make_target(tmp_path, max_script_bytes=8192)
    small = make_spec(target, [direct_step(target, 0, ["/bin/cat"], stdin=b"x" * 100)])
    assert len(render(small).encode()) <= 8192
    big = make_spec(target, [direct_step(target, 0, ["/bin/cat"], stdin=b"\xff" * 2000)])
    with pytest.raises(ConfigurationError, match=f"allocation {ALLOCATION}.*max_script_bytes"):
        render(big)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"log_root": "/tmp/has space"}, "log_root"),
        ({"log_root": "/tmp/100%"}, "%"),
        ({"partitions": ("a b",)}, "partitions"),
        ({"account": "x#y"}, "account"),
        ({"qos": "it's"}, "qos"),
        ({"work_root": "relative"}, "absolute"),
    ],
)
def test_unsafe_target_values_are_refused(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    target = make_target(tmp_path, **changes)
    with pytest.raises(ConfigurationError, match=message):
        render(make_spec(target, [direct_step(make_target(tmp_path), 0, ["/bin/true"])]))


def test_bad_steps_are_refused(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    ok = direct_step(target, 0, ["/bin/true"])
    cases = [
        (attrs.evolve(ok, command=StepCommand(argv=("true",))), "absolute"),
        (attrs.evolve(ok, command=StepCommand(argv=("/bin/echo", "a\0b"))), "NUL"),
        (attrs.evolve(ok, command=StepCommand(("/bin/true",), (("A-B", "1"),))), "name"),
        (attrs.evolve(ok, command=StepCommand(("/bin/true",), (("SLURM_X", "1"),))), "srun"),
    ]
    for step, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            render(make_spec(target, [step]))
    with pytest.raises(ConfigurationError, match="allocation id"):
        render(make_spec(target, [ok], allocation_id="XYZ"))
    with pytest.raises(ConfigurationError, match="run-time variable"):
        render(make_spec(target, [ok], inherit=("SERVATUS_SECRET",)))
    with pytest.raises(ConfigurationError, match="slots"):
        render(make_spec(target, [ok, ok]))
    with pytest.raises(ConfigurationError, match="other links but no link"):
        render(make_spec(target, [ok], earlier=("f" * 24,)))


# -- running ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_steps_get_exact_bytes_and_markers(fake_cluster: FakeCluster, shell: tuple[str]) -> None:
    target = fake_cluster.target
    stdin = bytes(range(256)) * 3 + b"\n\n"
    exported = StepCommand(
        argv=tuple(fake_cluster.step_args("e", "exit:0")),
        exported=(("APPTAINERENV_X", "it's\nodd\udcff"), ("PLAIN", "v")),
    )
    steps = [
        direct_step(
            target, 0, fake_cluster.step_args("a", "exit:0", *ODD_ARGS), stdin=stdin, env=ODD_ENV
        ),
        direct_step(target, 1, fake_cluster.step_args("b", "exit:3")),
        ScriptStep(slot=2, task_key="e", command=exported, stdin=b""),
    ]
    script = render(make_spec(target, steps))
    wait_exit(fake_cluster.start(script, shell=shell))

    a = record(fake_cluster, "a")
    assert [bytes.fromhex(h) for h in a["argv"]] == [  # type: ignore[union-attr]
        os.fsencode(arg) for arg in ODD_ARGS
    ]
    assert bytes.fromhex(a["stdin"]) == stdin  # type: ignore[arg-type]
    assert a["cwd"] == target.work_root
    env = decode_env(a["env"])  # type: ignore[arg-type]
    assert env == {
        **{os.fsencode(k): os.fsencode(v) for k, v in ODD_ENV.items()},
        b"SERVATUS_JOB_ID": b"4242",
        b"SERVATUS_JOB_END_TIME": b"1900000000",
    }
    assert bytes.fromhex(record(fake_cluster, "b")["stdin"]) == b""  # type: ignore[arg-type]

    e_env = decode_env(record(fake_cluster, "e")["env"])  # type: ignore[arg-type]
    assert e_env[b"APPTAINERENV_X"] == b"it's\nodd\xff"
    assert e_env[b"PLAIN"] == b"v"
    assert e_env[b"SERVATUS_JOB_ID"] == b"4242"
    assert b"NOT_FOR_STEPS" not in e_env and b"PATH" not in e_env

    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert set(names) == {
        prefix + "start",
        prefix + "end.0.0",
        prefix + "end.1.3",
        prefix + "end.2.0",
    }
    assert all(names[prefix + "start"] <= names[n] for n in names)
    for slot in range(3):
        log = fake_cluster.logs / f"servatus-{ALLOCATION}-4242.{slot}.out"
        assert log.stat().st_mode & 0o777 == 0o600
    srun_calls = [json.loads(p.read_text()) for p in (fake_cluster.root / "srun").iterdir()]
    assert len(srun_calls) == 3
    for call in srun_calls:
        options = call["options"]
        assert options["--ntasks"] == "1" and options["--nodes"] == "1"
        assert options["--exact"] is True
        assert options["--cpus-per-task"] == "1" and options["--mem"] == "100M"
        assert options["--chdir"] == target.work_root
    exports = sorted(call["options"]["--export"] for call in srun_calls)
    assert exports == [
        "SERVATUS_JOB_ID,SERVATUS_JOB_END_TIME",
        "SERVATUS_JOB_ID,SERVATUS_JOB_END_TIME",
        "SERVATUS_JOB_ID,SERVATUS_JOB_END_TIME,APPTAINERENV_X,PLAIN",
    ]


def test_steps_run_concurrently(fake_cluster: FakeCluster) -> None:
    target = fake_cluster.target
    steps = [
        direct_step(target, 0, fake_cluster.step_args("a", "wait:b")),
        direct_step(target, 1, fake_cluster.step_args("b", "wait:a")),
    ]
    wait_exit(fake_cluster.start(render(make_spec(target, steps))))
    prefix = f"servatus-{ALLOCATION}.4242."
    assert {prefix + "end.0.0", prefix + "end.1.0"} <= set(markers(fake_cluster))


def test_end_marker_is_written_as_soon_as_its_step_returns(fake_cluster: FakeCluster) -> None:
    target = fake_cluster.target
    steps = [
        direct_step(target, 0, fake_cluster.step_args("quick", "exit:5")),
        direct_step(target, 1, fake_cluster.step_args("slow", "sleep")),
    ]
    process = fake_cluster.start(render(make_spec(target, steps)))
    end = fake_cluster.logs / f"servatus-{ALLOCATION}.4242.end.0.5"
    try:
        wait_for(end.exists)
        assert process.poll() is None  # the other step still runs
    finally:
        wait_for((fake_cluster.out / "slow.json").exists)
        os.kill(record(fake_cluster, "slow")["pid"], signal.SIGKILL)  # type: ignore[arg-type]
    wait_exit(process)
    assert (fake_cluster.logs / f"servatus-{ALLOCATION}.4242.end.1.137").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_usr1_writes_limit_and_reaches_every_step(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [
        direct_step(target, 0, fake_cluster.step_args("a", "usr1")),
        direct_step(target, 1, fake_cluster.step_args("b", "usr1-then:0")),
        direct_step(target, 2, fake_cluster.step_args("c", "usr1-then:75")),
    ]
    process = fake_cluster.start(
        render(make_spec(target, steps, signal_before_end=60)), shell=shell
    )
    for name in "abc":
        wait_for(lambda name=name: (fake_cluster.out / f"{name}.json").exists())
    time.sleep(0.3)
    process.send_signal(signal.SIGUSR1)  # B: Slurm signals only the batch shell
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert set(names) == {
        prefix + "start",
        prefix + "limit",
        prefix + "end.0.138",
        prefix + "end.1.0",
        prefix + "end.2.75",
    }
    for name in "abc":
        assert json.loads((fake_cluster.out / f"{name}.usr1.json").read_text())["at"]
    assert names[prefix + "limit"] <= min(names[prefix + f"end.{s}"] for s in ("0.138", "1.0"))


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_sigterm_writes_stop_and_steps_still_end(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [
        direct_step(target, slot, fake_cluster.step_args(f"s{slot}", "sleep")) for slot in range(2)
    ]
    process = fake_cluster.start(render(make_spec(target, steps)), shell=shell)
    for slot in range(2):
        wait_for(lambda slot=slot: (fake_cluster.out / f"s{slot}.json").exists())
    # Slurm's scancel and time limit send SIGTERM to every process of the job: the batch shell,
    # the watchers, srun (here the task itself) all at once.
    os.killpg(process.pid, signal.SIGTERM)
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    assert set(markers(fake_cluster)) == {
        prefix + "start",
        prefix + "stop",
        prefix + "end.0.143",
        prefix + "end.1.143",
    }


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize(
    ("listed", "stopped"),
    [("CANCELLED", True), ("TIMEOUT", True), ("COMPLETING", True), ("RUNNING", False)],
)
def test_a_step_failing_while_slurm_ends_the_job_ends_after_a_stop(
    fake_cluster: FakeCluster, shell: tuple[str], listed: str, stopped: bool
) -> None:
    """A step the cancel killed can return before the batch shell's trap marks the stop (seen on
    the real cluster); its watcher asks squeue and, when the job is ending, marks the stop first,
    so the end reads as stopped, never as failed. A running job's failure stays a failure."""
    squeue = fake_cluster.root / "bin" / "squeue"
    squeue.write_text(f'#!/bin/sh\necho "$*" >>{fake_cluster.out}/squeue.args\necho {listed}\n')
    squeue.chmod(0o755)
    target = fake_cluster.target
    steps = [direct_step(target, 0, fake_cluster.step_args("killed", "exit:143"))]
    wait_exit(fake_cluster.start(render(make_spec(target, steps)), shell=shell))
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert (fake_cluster.out / "squeue.args").read_text() == "-hj 4242 -o %T\n"
    if not stopped:
        assert set(names) == {prefix + "start", prefix + "end.0.143"}
        return
    assert set(names) == {prefix + "start", prefix + "stop", prefix + "end.0.143"}
    assert names[prefix + "end.0.143"] >= names[prefix + "stop"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_failed_step_waits_for_the_stop_when_squeue_does_not_answer(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """When squeue gives no state (unreachable, or the job already gone), the watcher of a step
    that returned nonzero waits a second before its end marker, so a stop trap running just
    after it still marks the stop first and the end reads as stopped, not failed."""
    asked = fake_cluster.out / "squeue.asked"
    squeue = fake_cluster.root / "bin" / "squeue"
    squeue.write_text(f"#!/bin/sh\n: >{asked}\nexit 1\n")
    squeue.chmod(0o755)
    target = fake_cluster.target
    steps = [direct_step(target, 0, fake_cluster.step_args("killed", "exit:143"))]
    process = fake_cluster.start(render(make_spec(target, steps)), shell=shell)
    wait_for(asked.exists)
    process.send_signal(signal.SIGTERM)  # the batch shell's trap, just after the step returned
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert set(names) == {prefix + "start", prefix + "stop", prefix + "end.0.143"}
    assert names[prefix + "end.0.143"] >= names[prefix + "stop"]


def test_markers_are_read_back_by_the_evidence_reader(fake_cluster: FakeCluster) -> None:
    target = fake_cluster.target
    steps = [
        direct_step(target, 0, fake_cluster.step_args("a", "exit:0")),
        direct_step(target, 1, fake_cluster.step_args("b", "exit:3")),
    ]
    wait_exit(fake_cluster.start(render(make_spec(target, steps)), job=77))
    reader = SlurmEvidenceReader()
    result = LocalTransport().run(reader.marker_command(target))
    found = {(m.kind, m.slot, m.exit_code) for m in reader.parse_markers(result)}
    assert found == {(MarkerKind.START, None, None), (MarkerKind.END, 0, 0), (MarkerKind.END, 1, 3)}
    assert all(m.allocation_id == ALLOCATION and m.job == 77 for m in reader.parse_markers(result))
    assert isinstance(result, CommandResult)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=st.lists(st.binary(max_size=40).filter(lambda b: b"\0" not in b), max_size=6),
    stdin=st.binary(max_size=600),
)
def test_random_arguments_and_stdin_survive(
    fake_cluster: FakeCluster, args: list[bytes], stdin: bytes
) -> None:
    for path in fake_cluster.out.iterdir():
        path.unlink()
    for path in fake_cluster.logs.iterdir():
        path.unlink()
    target = fake_cluster.target
    words = [os.fsdecode(arg) for arg in args]
    step = direct_step(target, 0, fake_cluster.step_args("r", "exit:0", *words), stdin=stdin)
    wait_exit(fake_cluster.start(render(make_spec(target, [step]))))
    got = record(fake_cluster, "r")
    assert [bytes.fromhex(h) for h in got["argv"]] == args  # type: ignore[union-attr]
    assert bytes.fromhex(got["stdin"]) == stdin  # type: ignore[arg-type]


def test_python_is_where_the_fake_expects() -> None:
    assert os.access(PYTHON, os.X_OK)


def test_a_step_launched_after_the_signal_still_gets_it(fake_cluster: FakeCluster) -> None:
    """Slurm may signal up to a minute early; a watcher forked after the batch shell's trap ran
    inherits the news and relays the signal once its srun is up."""
    target = fake_cluster.target
    steps = [direct_step(target, 0, fake_cluster.step_args("late", "usr1-then:0"))]
    script = render(make_spec(target, steps, signal_before_end=60))
    # As if servatus_limit had run before the step blocks: the flag is all a watcher sees.
    guard = 'no step was started" >&2; exit 1; }\n'
    assert script.count(guard) == 1
    script = script.replace(guard, guard + "servatus_limited=1\n")
    wait_exit(fake_cluster.start(script))
    assert json.loads((fake_cluster.out / "late.usr1.json").read_text())["at"]
    assert (fake_cluster.logs / f"servatus-{ALLOCATION}.4242.end.0.0").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("blocked", ["name taken", "log_root gone"])
def test_no_start_marker_no_step(
    fake_cluster: FakeCluster, shell: tuple[str], blocked: str
) -> None:
    """A job that cannot leave its start marker runs nothing: otherwise, once Slurm forgot it,
    it would read as never started and its Tasks would be selected again."""
    target = fake_cluster.target
    steps = [direct_step(target, 0, fake_cluster.step_args("a", "exit:0"))]
    if blocked == "name taken":
        (fake_cluster.logs / f"servatus-{ALLOCATION}.4242.start").mkdir()
    else:
        fake_cluster.logs.rmdir()
    script = render(make_spec(target, steps))
    process = fake_cluster.start(script, shell=shell)
    process.communicate(timeout=30)
    assert process.returncode == 1
    # With log_root gone the script has nowhere to say why (nor would Slurm have had).
    said = (
        []
        if blocked == "log_root gone"
        else [f"servatus: cannot create the start marker in {target.log_root}; no step was started"]
    )
    assert allocation_log(fake_cluster).splitlines() == said
    assert not (fake_cluster.out / "a.json").exists() and not os.listdir(fake_cluster.root / "srun")
    if blocked == "name taken":  # a directory under a marker's name is no evidence
        listed = LocalTransport().run(SlurmEvidenceReader().marker_command(target))
        assert SlurmEvidenceReader().parse_markers(listed) == []


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_end_marker_is_tried_again_while_log_root_has_no_inode_left(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """A step that ends while ``log_root`` (a real tmpfs) has no inode left keeps its outcome:
    its watcher tries the end marker again each second, and writes it once an inode is free,
    rather than leave the Task to read LOST."""
    with tmpfs(fake_cluster.logs, "size=1m,nr_inodes=32,mode=755"):
        target = fake_cluster.target
        steps = [direct_step(target, 0, fake_cluster.step_args("a", "wait:go"))]
        process = fake_cluster.start(render(make_spec(target, steps)), shell=shell)
        wait_for((fake_cluster.out / "a.json").exists)
        fillers = fill_inodes(fake_cluster.logs)
        (fake_cluster.out / "go.json").write_text("{}")
        end = fake_cluster.logs / f"servatus-{ALLOCATION}.4242.end.0.0"
        time.sleep(2.5)  # two tries at least, each refused
        assert process.poll() is None and not end.exists()
        freed = time.time()
        for path in fillers:
            path.unlink()
        said = wait_exit(process)
        assert end.exists() and end.stat().st_mtime >= freed - 0.01
        [line] = [line for line in said.splitlines() if "run marker" in line]
        assert re.fullmatch(
            r"servatus: wrote run marker end\.0\.0 at try ([2-9]|[1-9][0-9]) \(log_root was full\)",
            line,
        )


def test_the_end_marker_is_not_tried_past_the_jobs_end_time_less_the_margin(
    fake_cluster: FakeCluster,
) -> None:
    """A chain link must still hand on and exit inside its limit: with the job's end time
    ``END_MARGIN`` + 2 s away, the watcher gives up after about two tries and the job ends."""
    with tmpfs(fake_cluster.logs, "size=1m,nr_inodes=32,mode=755"):
        target = fake_cluster.target
        steps = [direct_step(target, 0, fake_cluster.step_args("a", "wait:go"))]
        script = render(make_spec(target, steps))
        process = fake_cluster.start(script, end_time=int(time.time()) + END_MARGIN + 3)
        wait_for((fake_cluster.out / "a.json").exists)
        fill_inodes(fake_cluster.logs)
        gave_up = time.monotonic()
        (fake_cluster.out / "go.json").write_text("{}")
        said = wait_exit(process, seconds=END_TRIES)
        assert time.monotonic() - gave_up < END_TRIES / 2
        assert not (fake_cluster.logs / f"servatus-{ALLOCATION}.4242.end.0.0").exists()
        [line] = [line for line in said.splitlines() if "run marker" in line]
        assert re.fullmatch(r"servatus: could not write run marker end\.0\.0 \([1-9] tries\)", line)


# -- chain links (ADR 0005) ---------------------------------------------------------------------

EARLIER = ("a" * 24, "b" * 24)
LATER = ("c" * 24, "d" * 24, "e" * 24)
CHAIN_INHERIT = (*INHERIT, *CHAIN_VARIABLES)


def chain_step(
    target: Target,
    slot: int,
    args: list[str],
    *,
    links: int,
    run_time: int = 0,
    budget: bool = True,
) -> ScriptStep:
    inherit = (*CHAIN_INHERIT, *([BUDGET_VARIABLE] if budget else []))
    step = direct_step(target, slot, args, inherit=inherit)
    return attrs.evolve(step, links=links, run_time=run_time)


def chain_spec(
    target: Target,
    steps: list[ScriptStep],
    position: int,
    of: int,
    *,
    budget: int | None = 3000,
    signal_before_end: int | None = 60,
    time_limit: int = 600,
) -> ScriptSpec:
    inherit = (*CHAIN_INHERIT, *([BUDGET_VARIABLE] if budget is not None else []))
    return make_spec(
        target,
        steps,
        time_limit=time_limit,
        link=Link(position, of, time_limit),
        earlier=EARLIER[: position - 1],
        later=LATER[: of - position],
        budget=budget,
        inherit=inherit,
        signal_before_end=signal_before_end,
    )


def step_env(cluster: FakeCluster, name: str) -> dict[str, str]:
    env = decode_env(record(cluster, name)["env"])  # type: ignore[arg-type]
    return {k.decode(): v.decode() for k, v in env.items() if k.startswith(b"SERVATUS_")}


def removed(cluster: FakeCluster) -> list[str]:
    """What the link's scancel calls named, in order (none: the file is absent)."""
    log = cluster.root / "scancel.log"
    return log.read_text().splitlines() if log.exists() else []


def handoff(cluster: FakeCluster, allocation: str, job: int, slot: int) -> None:
    """What a link leaves for the next: a handoff holding its own name."""
    name = f"servatus-{allocation}.{job}.handoff.{slot}"
    (cluster.logs / name).write_text(name)


def over(cluster: FakeCluster, allocation: str, job: int) -> None:
    """What a link's shell leaves once every end and handoff of it is written."""
    (cluster.logs / over_name(allocation, job)).touch()


def over_name(allocation: str, job: int) -> str:
    return f".servatus-{allocation}.{job}.over"


NO_OVER = "servatus: the previous link left no over file; its handoffs are read as listed"


def test_a_chain_link_carries_its_machine_readable_lines(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    steps = [chain_step(target, s, ["/bin/true"], links=links) for s, links in ((0, 3), (1, 2))]
    first = render(chain_spec(target, steps, 1, 3)).splitlines()
    squeue = first.index(f"servatus_squeue='{tmp_path}/bin/squeue'")
    assert first[squeue + 1 : squeue + 3] == ["servatus_link=1", "servatus_links=3"]
    assert not any(line.startswith("servatus_after=") for line in first)
    later = render(chain_spec(target, steps, 3, 3)).splitlines()
    squeue = later.index(f"servatus_squeue='{tmp_path}/bin/squeue'")
    assert later[squeue + 1 : squeue + 4] == [
        "servatus_link=3",
        "servatus_links=3",
        f"servatus_after={EARLIER[1]}",
    ]
    for lines in (first, later):
        for slot, links in ((0, 3), (1, 2)):
            at = lines.index(f"# slot {slot}")
            assert lines[at + 1] == f"# slot {slot} links {links}"
    # The last link is a plain allocation: no early stop, no handoff, exit 0.
    last = "\n".join(later)
    guard = last.replace('handoff.$1"', "").replace("handoff.$1}", "")
    assert "servatus_early" not in last and "handoff." not in guard
    assert "servatus_remove" not in last and "scancel" not in last
    assert last.endswith("until wait; do :; done\nexit 0")
    plain = render(make_spec(target, [direct_step(target, 0, ["/bin/true"])]))
    assert "servatus_link" not in plain and "links" not in plain


def test_a_chain_link_is_refused_without_its_chain(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    step = chain_step(target, 0, ["/bin/true"], links=2)
    spec = chain_spec(target, [step], 2, 2)
    with pytest.raises(ConfigurationError, match="names 0 earlier"):
        render(attrs.evolve(spec, earlier=()))
    with pytest.raises(ConfigurationError, match="allocation id"):
        render(attrs.evolve(spec, earlier=("x",)))
    with pytest.raises(ConfigurationError, match="SERVATUS_BUDGET"):
        render(attrs.evolve(spec, budget=None))
    with pytest.raises(ConfigurationError, match="SERVATUS_RUN_TIME"):
        render(attrs.evolve(spec, inherit=INHERIT))
    with pytest.raises(ConfigurationError, match="cannot run it"):
        render(attrs.evolve(spec, steps=(attrs.evolve(step, links=3),)))
    with pytest.raises(ConfigurationError, match="cannot provide"):
        render(make_spec(target, [direct_step(target, 0, ["/bin/true"])], inherit=CHAIN_INHERIT))


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_middle_link_hands_on_what_yields_and_exits_0(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("yields", "exit:75"), links=3, run_time=41),
        chain_step(target, 1, fake_cluster.step_args("done", "exit:0"), links=3),
        chain_step(target, 2, fake_cluster.step_args("failed", "exit:3"), links=3),
        chain_step(target, 3, fake_cluster.step_args("spent", "exit:75"), links=1),
    ]
    wait_exit(fake_cluster.start(render(chain_spec(target, steps, 1, 3)), shell=shell))
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert set(names) == {
        prefix + "start",
        prefix + "end.0.75",
        prefix + "handoff.0",
        prefix + "end.1.0",
        prefix + "end.2.3",
        prefix + "end.3.75",
        over_name(ALLOCATION, 4242),
    }
    assert names[prefix + "handoff.0"] >= names[prefix + "end.0.75"]
    assert names[over_name(ALLOCATION, 4242)] >= max(names.values())
    assert step_env(fake_cluster, "yields") == {
        "SERVATUS_JOB_ID": "4242",
        "SERVATUS_JOB_END_TIME": "1900000000",
        "SERVATUS_LINK": "1",
        "SERVATUS_LINKS": "3",
        "SERVATUS_RUN_TIME": "41",
        "SERVATUS_BUDGET": "3000",
    }
    assert step_env(fake_cluster, "spent")["SERVATUS_LINKS"] == "1"


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_middle_link_that_hands_nothing_on_exits_1(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """A failure before the signal and the Task's own last link hand nothing on; exit 1 is what
    makes Slurm cancel the rest of the chain unallocated."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("failed", "exit:3"), links=3, budget=False),
        chain_step(target, 1, fake_cluster.step_args("spent", "exit:75"), links=2, budget=False),
    ]
    script = render(chain_spec(target, steps, 2, 3, budget=None))
    handoff(fake_cluster, EARLIER[0], 17, 0)
    handoff(fake_cluster, EARLIER[0], 17, 1)
    over(fake_cluster, EARLIER[0], 17)
    process = fake_cluster.start(script, shell=shell)
    process.communicate(timeout=30)
    assert process.returncode == 1
    assert allocation_log(fake_cluster).splitlines() == [
        "servatus: link 2/3 hands nothing on; it removes the rest of the chain"
    ]
    assert removed(fake_cluster) == [f"--name=servatus-{LATER[0]}"]
    prefix = f"servatus-{ALLOCATION}.4242."
    assert {n for n in markers(fake_cluster) if n.startswith(prefix)} == {
        prefix + "start",
        prefix + "end.0.3",
        prefix + "end.1.75",
    }
    assert "SERVATUS_BUDGET" not in step_env(fake_cluster, "failed")


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_signal_then_the_timer_stop_what_still_runs(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """After SIGUSR1 a middle link stops every step still running at signal_before_end - grace:
    the stop marker, then its srun gets SIGTERM, the end (143) and the handoff follow, and the
    link exits 0."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("dies", "usr1"), links=2),
        chain_step(target, 1, fake_cluster.step_args("ignores", "sleep"), links=2),
        chain_step(target, 2, fake_cluster.step_args("done", "usr1-then:0"), links=2),
    ]
    script = render(chain_spec(target, steps, 1, 2, signal_before_end=GRACE + 2))
    process = fake_cluster.start(script, shell=shell)
    for name in ("dies", "ignores", "done"):
        wait_for(lambda name=name: (fake_cluster.out / f"{name}.json").exists())
    time.sleep(0.3)
    process.send_signal(signal.SIGUSR1)
    signalled = time.time()
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert set(names) == {
        prefix + "start",
        prefix + "limit",
        prefix + "end.0.138",
        prefix + "handoff.0",
        prefix + "stop",
        prefix + "end.1.143",
        prefix + "handoff.1",
        prefix + "end.2.0",
        over_name(ALLOCATION, 4242),
    }
    assert 1.5 <= names[prefix + "end.1.143"] - signalled <= 4
    assert names[prefix + "stop"] <= names[prefix + "end.1.143"]
    assert names[prefix + "handoff.1"] >= names[prefix + "end.1.143"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_packed_link_waits_for_every_watcher_before_it_decides(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """The signal reaches the batch shell while it waits for slot 0's watcher; slot 1 is done
    at once, slot 0 saves for a second and yields. The link must still wait for slot 0: its
    handoff comes before the over file, the link exits 0 and removes nothing. (The traps once
    shared the epilogue's loop variable, so it waited for the last watcher only, found nothing
    handed on, and removed the rest of the chain while slot 0 was handing on.)"""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("saves", "usr1-slow:75"), links=3),
        chain_step(target, 1, fake_cluster.step_args("done", "usr1-then:0"), links=3),
    ]
    script = render(chain_spec(target, steps, 1, 3, signal_before_end=GRACE + 30))
    process = fake_cluster.start(script, shell=shell)
    for name in ("saves", "done"):
        wait_for(lambda name=name: (fake_cluster.out / f"{name}.json").exists())
    time.sleep(0.3)
    process.send_signal(signal.SIGUSR1)
    out = wait_exit(process)
    assert "hands nothing on" not in out
    assert removed(fake_cluster) == []
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert {prefix + "end.0.75", prefix + "handoff.0", prefix + "end.1.0"} <= set(names)
    assert names[over_name(ALLOCATION, 4242)] >= names[prefix + "handoff.0"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_timer_stop_reads_as_a_stop_on_a_packed_tasks_own_last_link(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """Slot 1's Task has 1 link of the chain's 2, so this middle link is its own last one and it
    hands nothing on. The timer kills it all the same; that must read as the stop at the limit
    it is (``STOPPED (time limit)``, as on an unpacked Task's last link), not as a failure."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("goes-on", "sleep"), links=2),
        chain_step(target, 1, fake_cluster.step_args("own-last", "sleep"), links=1),
    ]
    script = render(chain_spec(target, steps, 1, 2, signal_before_end=GRACE + 1))
    process = fake_cluster.start(script, shell=shell, job=77)
    for name in ("goes-on", "own-last"):
        wait_for(lambda name=name: (fake_cluster.out / f"{name}.json").exists())
    process.send_signal(signal.SIGUSR1)
    wait_exit(process)
    reader = SlurmEvidenceReader()
    found = reader.parse_markers(LocalTransport().run(reader.marker_command(target)))
    observation = observe(ALLOCATION, 2, found, link=True)
    assert observation.handed == (0,)
    chain = ChainLink(1, 2, "", (2, 1), 3000)
    read = [link_execution(None, observation, s, last=chain.spends(s)) for s in (0, 1)]
    assert read[0] == (Execution.STOPPED, 143, StopReason.TIME_LIMIT)
    assert read[1] == (Execution.STOPPED, None, StopReason.TIME_LIMIT)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_timer_fires_by_the_job_end_time_when_the_signal_comes_late(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("ignores", "sleep"), links=2)]
    script = render(chain_spec(target, steps, 1, 2, signal_before_end=600))
    process = fake_cluster.start(script, shell=shell, end_time=int(time.time()) + GRACE + 3)
    wait_for((fake_cluster.out / "ignores.json").exists)
    process.send_signal(signal.SIGUSR1)
    signalled = time.time()
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    names = markers(fake_cluster)
    assert {prefix + "end.0.143", prefix + "handoff.0"} <= set(names)
    assert names[prefix + "end.0.143"] - signalled <= 5


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_middle_link_ends_when_its_steps_do_not_when_its_timer_would(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """A step that yields on the signal ends the link at once: the batch shell waits for its
    watchers, not for the timer, so the next link starts as soon as it can."""
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("yields", "usr1-then:75"), links=2)]
    script = render(chain_spec(target, steps, 1, 2, signal_before_end=GRACE + 30))
    process = fake_cluster.start(script, shell=shell)
    wait_for((fake_cluster.out / "yields.json").exists)
    process.send_signal(signal.SIGUSR1)
    signalled = time.monotonic()
    wait_exit(process)
    assert time.monotonic() - signalled < 10
    prefix = f"servatus-{ALLOCATION}.4242."
    assert {prefix + "limit", prefix + "end.0.75", prefix + "handoff.0"} <= set(
        markers(fake_cluster)
    )


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_link_without_its_start_marker_removes_the_rest_of_the_chain(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """A link that cannot leave its start marker runs no step, so it hands nothing on: it must
    remove its later links while they are still pending, as any such link does, rather than
    leave the next one to be allocated, wait for an over file that never comes, and remove."""
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("a", "exit:75"), links=3)]
    (fake_cluster.logs / f"servatus-{ALLOCATION}.4242.start").mkdir()
    process = fake_cluster.start(render(chain_spec(target, steps, 1, 3)), shell=shell)
    process.communicate(timeout=30)
    assert process.returncode == 1
    assert allocation_log(fake_cluster).splitlines() == [
        f"servatus: cannot create the start marker in {target.log_root}; no step was started"
    ]
    assert not os.listdir(fake_cluster.root / "srun")
    assert removed(fake_cluster) == [f"--name=servatus-{LATER[1]}", f"--name=servatus-{LATER[0]}"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_later_link_runs_only_handed_slots_with_their_run_time(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """Slot 0 was handed on by link 2 (any job number), slot 1 was not: it starts no srun and
    leaves no marker. SERVATUS_RUN_TIME adds each earlier link's end.<slot> - start, rounded
    as floor(span + 0.5), to the plan's measure."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("goes-on", "exit:0"), links=3, run_time=7),
        chain_step(target, 1, fake_cluster.step_args("ended", "exit:0"), links=3),
    ]
    logs = fake_cluster.logs
    base = 1_700_000_000.0
    spans = {  # file: mtime
        f"servatus-{EARLIER[0]}.11.start": base,
        f"servatus-{EARLIER[0]}.11.end.0.75": base + 100.4,
        f"servatus-{EARLIER[0]}.11.end.1.75": base + 30.0,
        f"servatus-{EARLIER[0]}.11.handoff.0": base + 100.4,
        f"servatus-{EARLIER[0]}.11.handoff.1": base + 30.0,
        f"servatus-{EARLIER[1]}.12.start": base + 200.0,
        f"servatus-{EARLIER[1]}.12.limit": base + 230.0,
        f"servatus-{EARLIER[1]}.12.end.0.143": base + 250.5,
        f"servatus-{EARLIER[1]}.12.handoff.0": base + 250.5,
        f"servatus-{EARLIER[1]}.12.end.1.0": base + 201.0,
        f"servatus-{'c' * 24}.13.start": base,  # another allocation's markers count for nothing
        f"servatus-{'c' * 24}.13.end.0.0": base + 999.0,
    }
    for name, mtime in spans.items():
        (logs / name).write_text(name if ".handoff." in name else "")  # a handoff holds its name
        os.utime(logs / name, (mtime, mtime))
    over(fake_cluster, EARLIER[1], 12)
    script = render(chain_spec(target, steps, 3, 3))
    wait_exit(fake_cluster.start(script, shell=shell))
    env = step_env(fake_cluster, "goes-on")
    assert env["SERVATUS_RUN_TIME"] == str(7 + 100 + 51)
    assert env["SERVATUS_LINK"] == "3" and env["SERVATUS_LINKS"] == "3"
    assert not (fake_cluster.out / "ended.json").exists()
    assert len(os.listdir(fake_cluster.root / "srun")) == 1
    prefix = f"servatus-{ALLOCATION}.4242."
    assert {n for n in markers(fake_cluster) if n.startswith(prefix)} == {
        prefix + "start",
        prefix + "end.0.0",
    }


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_link_handed_nothing_runs_nothing_and_exits_1(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("a", "exit:0"), links=3)]
    over(fake_cluster, EARLIER[0], 17)
    process = fake_cluster.start(render(chain_spec(target, steps, 2, 3)), shell=shell)
    process.communicate(timeout=30)
    assert process.returncode == 1
    assert allocation_log(fake_cluster).splitlines() == [
        "servatus: link 2/3 hands nothing on; it removes the rest of the chain"
    ]
    assert removed(fake_cluster) == [f"--name=servatus-{LATER[0]}"]
    assert set(markers(fake_cluster)) == {
        f"servatus-{ALLOCATION}.4242.start",
        over_name(EARLIER[0], 17),
        over_name(ALLOCATION, 4242),
    }
    assert not os.listdir(fake_cluster.root / "srun")


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_link_after_one_killed_outright_waits_its_bound_then_trusts_the_listing(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """No over file: the previous link never reached its end. A 1-minute link waits an eighth
    of its limit (7 s) for one, then reads what is listed: here a handoff of slot 0, which runs
    (and yields, so this link hands it on), and none of slot 1."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("handed", "exit:75"), links=3),
        chain_step(target, 1, fake_cluster.step_args("killed", "exit:75"), links=3),
    ]
    handoff(fake_cluster, EARLIER[0], 17, 0)
    began = time.monotonic()
    process = fake_cluster.start(
        render(chain_spec(target, steps, 2, 3, time_limit=60, signal_before_end=20)), shell=shell
    )
    process.communicate(timeout=60)
    assert 7 <= time.monotonic() - began < 30
    assert process.returncode == 0
    assert allocation_log(fake_cluster).splitlines() == [NO_OVER]
    assert (fake_cluster.out / "handed.json").exists()
    assert not (fake_cluster.out / "killed.json").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_handoff_listed_late_is_run_once_the_over_file_shows(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """What an NFS client's stale directory cache looks like to the next link: the previous
    link's handoff and over file appear only after this link started. It waits for the over
    file, then runs the slot, where a first listing would have found nothing handed on."""
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("late", "exit:75"), links=3)]
    process = fake_cluster.start(render(chain_spec(target, steps, 2, 3)), shell=shell)
    time.sleep(3)
    assert not (fake_cluster.out / "late.json").exists()
    handoff(fake_cluster, EARLIER[0], 17, 0)
    over(fake_cluster, EARLIER[0], 17)
    process.communicate(timeout=30)
    assert process.returncode == 0, allocation_log(fake_cluster)
    assert allocation_log(fake_cluster) == ""
    assert (fake_cluster.out / "late.json").exists()
    assert removed(fake_cluster) == []


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_last_link_hands_nothing_on_and_exits_0(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("spent", "usr1-then:75"), links=2)]
    handoff(fake_cluster, EARLIER[0], 9, 0)
    over(fake_cluster, EARLIER[0], 9)
    process = fake_cluster.start(render(chain_spec(target, steps, 2, 2)), shell=shell)
    wait_for((fake_cluster.out / "spent.json").exists)
    process.send_signal(signal.SIGUSR1)
    wait_exit(process)
    prefix = f"servatus-{ALLOCATION}.4242."
    assert {n for n in markers(fake_cluster) if n.startswith(prefix)} == {
        prefix + "start",
        prefix + "limit",
        prefix + "end.0.75",
    }
