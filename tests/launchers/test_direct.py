"""The built-in ``direct`` launcher: its command shape, and that command run for real."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_helpers import (
    END_TIME,
    JOB,
    make_target,
    make_tree,
    probe_args,
    profile_for,
    read_probe,
    run_allocation,
    run_step,
    srun_environment,
)

from servatus.direct import DirectLauncher
from servatus.errors import ConfigurationError
from servatus.launcher import ENV_COMMAND, StepCommand
from servatus.operations.submission import RUNTIME_VARIABLES, step_environment
from servatus.plugins import hooks
from servatus.tasks import Task

LAUNCHER = DirectLauncher()
ENV = {"B": "2", "A": "it's\n$HOME"}


def test_without_run_time_variables_it_is_env_i(tmp_path: Path) -> None:
    command = LAUNCHER.command(
        make_target(tmp_path), ["/usr/bin/python3", "x.py"], ENV, inherit=(), gpus=0
    )
    assert command.argv == (
        "/usr/bin/env",
        "-i",
        "A=it's\n$HOME",
        "B=2",
        "/usr/bin/python3",
        "x.py",
    )
    assert command.exported == ()


def test_run_time_variables_are_read_by_name_in_a_fixed_script(tmp_path: Path) -> None:
    command = LAUNCHER.command(
        make_target(tmp_path), ["/bin/true"], ENV, inherit=RUNTIME_VARIABLES, gpus=1
    )
    assert command.argv == (
        "/bin/sh",
        "-c",
        'exec /usr/bin/env -i SERVATUS_JOB_ID="$SERVATUS_JOB_ID" '
        'SERVATUS_JOB_END_TIME="$SERVATUS_JOB_END_TIME" '
        '${CUDA_VISIBLE_DEVICES+CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"} "$@"',
        "servatus-step",
        "A=it's\n$HOME",
        "B=2",
        "/bin/true",
    )


@pytest.mark.parametrize("program", ["python3", "./train.py", "bin/python"])
def test_relative_program_is_refused_with_a_clear_message(tmp_path: Path, program: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        LAUNCHER.check(make_target(tmp_path), [program, "x"])
    assert str(caught.value) == (
        f"the direct launcher needs an absolute args[0], got {program!r}; "
        "give the full path of the program (for example /usr/bin/python3)"
    )


def test_empty_args_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="at least one argument"):
        LAUNCHER.check(make_target(tmp_path), [])


def test_program_path_with_equals_is_refused(tmp_path: Path) -> None:
    """env reads NAME=VALUE words as variables: such a program would never run."""
    odd = tmp_path / "a=b"
    odd.mkdir()
    program = odd / "prog"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    with pytest.raises(ConfigurationError, match="contains '='"):
        LAUNCHER.check(make_target(tmp_path), [str(program)])
    # Why: shaped without the check, env never runs it.
    command = StepCommand(argv=(ENV_COMMAND, "-i", str(program)))
    done = run_step(command, cwd=tmp_path, env={})
    assert "ran" not in done.stdout


def test_run_time_and_gpu_variables_reach_the_task(tmp_path: Path) -> None:
    make_tree(tmp_path)
    out = tmp_path / "out" / "gpu.json"
    command = LAUNCHER.command(
        make_target(tmp_path), probe_args(out, 0), {"A": "1"}, inherit=RUNTIME_VARIABLES, gpus=1
    )
    env = srun_environment(command, extra={"CUDA_VISIBLE_DEVICES": "1,0", "HOST_ONLY": "x"})
    done = run_step(command, cwd=tmp_path / "work", env=env)
    assert done.returncode == 0, done.stderr
    assert read_probe(out)["env"] == {
        "A": "1",
        "SERVATUS_JOB_ID": str(JOB),
        "SERVATUS_JOB_END_TIME": END_TIME,
        "CUDA_VISIBLE_DEVICES": "1,0",
    }


def test_unset_cuda_visible_devices_stays_unset(tmp_path: Path) -> None:
    make_tree(tmp_path)
    out = tmp_path / "out" / "nogpu.json"
    command = LAUNCHER.command(
        make_target(tmp_path), probe_args(out, 4), {}, inherit=RUNTIME_VARIABLES, gpus=1
    )
    done = run_step(command, cwd=tmp_path, env=srun_environment(command))
    assert done.returncode == 4
    assert "CUDA_VISIBLE_DEVICES" not in read_probe(out)["env"]


def test_cpu_steps_do_not_carry_cuda_visible_devices(tmp_path: Path) -> None:
    make_tree(tmp_path)
    out = tmp_path / "out" / "cpu.json"
    command = LAUNCHER.command(
        make_target(tmp_path), probe_args(out, 0), {}, inherit=RUNTIME_VARIABLES, gpus=0
    )
    env = srun_environment(command, extra={"CUDA_VISIBLE_DEVICES": "0"})
    assert run_step(command, cwd=tmp_path, env=env).returncode == 0
    assert set(read_probe(out)["env"]) == {"SERVATUS_JOB_ID", "SERVATUS_JOB_END_TIME"}


def test_two_task_allocation_through_the_rendered_batch_script(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    profile = profile_for(tree.target())
    tasks = [
        Task("ok", probe_args(tree.out / "ok.json", 0), env={"A": "x y"}),
        Task("bad", probe_args(tree.out / "bad.json", 3)),
    ]
    assert run_allocation(tree, profile, tasks, hooks().launcher("direct")) == {0: 0, 1: 3}
    for slot, task in enumerate(tasks):
        record = read_probe(tree.out / f"{task.key}.json")
        assert record["cwd"] == str(tree.work)
        assert record["env"] == {
            **step_environment(task, "0123456789abcdef01234567", slot),
            "SERVATUS_JOB_ID": str(JOB),
            "SERVATUS_JOB_END_TIME": END_TIME,
        }
