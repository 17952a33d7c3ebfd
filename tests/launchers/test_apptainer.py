"""The ``apptainer`` launcher: its step command, and that command run for real.

Apptainer is not installed here, so the runs go through ``stand_in_apptainer.py``, which holds
the command line to Apptainer's documented ``exec`` grammar and runs the Task as Apptainer would
(see its docstring). Each test's docstring names the Apptainer behaviour it stands for.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs
import pytest
from launch_helpers import (
    END_TIME,
    JOB,
    PYTHON,
    SLURM,
    Tree,
    install_stand_in,
    make_image,
    make_target,
    make_tree,
    probe_args,
    profile_for,
    read_probe,
    render_allocation,
    run_allocation,
    run_step,
    srun_environment,
    step_log,
)

from servatus.config import Apptainer, Target
from servatus.errors import ConfigurationError
from servatus.operations.submission import RUNTIME_VARIABLES, step_environment
from servatus.plugins import hooks
from servatus.tasks import Task
from servatus_apptainer.plugin import ApptainerLauncher, step_script

LAUNCHER = ApptainerLauncher()
ENV = {
    "SEED": "seed-value-7",
    "QUOTED": "it's $HOME and\nnewline",
    "SERVATUS_TASK_KEY": "task-key-0",
}
CARRY = (
    'export APPTAINERENV_SERVATUS_JOB_ID="$SERVATUS_JOB_ID"; '
    'export APPTAINERENV_SERVATUS_JOB_END_TIME="$SERVATUS_JOB_END_TIME"; '
)
TAIL = 'export PATH="${PATH:-/usr/bin:/bin}"; exec "$@"'
GPU = (
    'if [ "${CUDA_VISIBLE_DEVICES+set}" = set ]; then '
    'export APPTAINERENV_CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"; fi; '
)


def apptainer_target(root: Path, *binds: str, **changes: object) -> Target:
    settings = Apptainer(
        executable=str(root / "bin" / "apptainer"), image=str(root / "img.sif"), binds=binds
    )
    return make_target(root, apptainer=settings, launcher="apptainer", **changes)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A tree with the stand-in at ``bin/apptainer`` and a SIF-headed ``img.sif``."""
    make_tree(tmp_path)
    install_stand_in(tmp_path / "bin" / "apptainer")
    make_image(tmp_path / "img.sif")
    return tmp_path


# -- the command, as data ------------------------------------------------------------------------


def test_cpu_step_command_is_exact(tmp_path: Path) -> None:
    """`apptainer exec` options come before the image and the command after it; the values
    travel as APPTAINERENV_* variables, which Apptainer passes in even with --cleanenv."""
    target = apptainer_target(tmp_path)
    command = LAUNCHER.command(
        target, ["python3", "train.py", "--lr", "0.1"], ENV, inherit=RUNTIME_VARIABLES, gpus=0
    )
    assert command.argv == (
        "/bin/sh",
        "-c",
        CARRY + TAIL,
        "servatus-step",
        str(tmp_path / "bin" / "apptainer"),
        "exec",
        "--cleanenv",
        "--bind",
        str(tmp_path / "work"),
        "--pwd",
        str(tmp_path / "work"),
        str(tmp_path / "img.sif"),
        "python3",
        "train.py",
        "--lr",
        "0.1",
    )
    assert command.exported == (
        ("APPTAINERENV_QUOTED", "it's $HOME and\nnewline"),
        ("APPTAINERENV_SEED", "seed-value-7"),
        ("APPTAINERENV_SERVATUS_TASK_KEY", "task-key-0"),
    )
    words = " ".join(command.argv)
    assert all(value not in words for value in ENV.values())


def test_gpu_step_adds_nv_and_carries_cuda_visible_devices(tmp_path: Path) -> None:
    """--nv binds the host's NVIDIA driver into the container; CUDA_VISIBLE_DEVICES must be
    carried in explicitly because --cleanenv drops it."""
    target = apptainer_target(tmp_path)
    command = LAUNCHER.command(target, ["nvidia-smi"], {}, inherit=RUNTIME_VARIABLES, gpus=2)
    assert command.argv[2] == CARRY + GPU + TAIL
    apptainer = command.argv[4:]
    assert apptainer[:4] == (str(tmp_path / "bin" / "apptainer"), "exec", "--cleanenv", "--nv")
    assert apptainer[-2:] == (str(tmp_path / "img.sif"), "nvidia-smi")
    assert command.exported == ()


def test_binds_follow_work_root_in_one_list(tmp_path: Path) -> None:
    """Apptainer's --bind takes a comma-separated list of src[:dest[:opts]]."""
    target = apptainer_target(tmp_path, "/datasets:/datasets:ro", "/opt/models:/models")
    argv = LAUNCHER.command(target, ["a"], {}, inherit=(), gpus=0).argv
    at = argv.index("--bind")
    assert argv[at + 1] == f"{tmp_path}/work,/datasets:/datasets:ro,/opt/models:/models"
    assert argv.count("--bind") == 1
    assert argv[2] == TAIL


def test_empty_args_are_refused_at_check(tmp_path: Path) -> None:
    """`apptainer exec IMAGE` with no command is an error ("requires at least 2 arg(s)"), and
    Servatus never falls back to the image's runscript: refused at planning instead."""
    target = apptainer_target(tmp_path)
    with pytest.raises(ConfigurationError, match="at least one argument: the program to run in"):
        LAUNCHER.check(target, [])
    with pytest.raises(ConfigurationError, match="at least one argument"):
        LAUNCHER.command(target, [], {}, inherit=(), gpus=0)


def test_a_target_without_an_image_is_refused(tmp_path: Path) -> None:
    """Without an image there is nothing for `apptainer exec` to run in."""
    with pytest.raises(ConfigurationError, match=r"needs target\.apptainer and target\.image"):
        LAUNCHER.check(make_target(tmp_path), ["python3"])


def test_relative_program_passes_check(tmp_path: Path) -> None:
    """Apptainer resolves a command without '/' on the container's PATH, so it is allowed."""
    LAUNCHER.check(apptainer_target(tmp_path), ["python3", "x.py"])


def test_the_plugin_registers_the_launcher() -> None:
    """servatus-apptainer registers through the entry-point group, as a site plugin would."""
    assert hooks().launcher("apptainer") == ApptainerLauncher()
    names = {info.name: info.distribution for info in hooks().plugins()}
    assert names["servatus-apptainer"] == "servatus-apptainer"


def test_step_script_only_names_variables() -> None:
    """Without run-time variables the wrapper only gives Apptainer a PATH, which it needs to
    find the host's helpers (and the NVIDIA tools for --nv)."""
    assert step_script((), gpus=0) == TAIL


# -- the command, run through the stand-in --------------------------------------------------------


def test_cpu_step_runs_with_exactly_the_tasks_environment(root: Path) -> None:
    """--cleanenv: nothing from the host (no SLURM_*); APPTAINERENV_NAME becomes NAME; --pwd is
    the working directory; a command without '/' is found on the container's PATH."""
    target = apptainer_target(root)
    out = root / "out" / "cpu.json"
    args = ["python3", *probe_args(out, 0)[1:]]
    command = LAUNCHER.command(target, args, ENV, inherit=RUNTIME_VARIABLES, gpus=0)
    env = srun_environment(command, extra={"HOST_ONLY": "x", "CUDA_VISIBLE_DEVICES": "0"})
    done = run_step(command, cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    record = read_probe(out)
    assert record["cwd"] == str(root / "work")
    assert record["env"] == {
        **ENV,
        "SERVATUS_JOB_ID": str(JOB),
        "SERVATUS_JOB_END_TIME": END_TIME,
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "APPTAINER_CONTAINER": str(root / "img.sif"),
        "APPTAINER_NAME": "img.sif",
    }


@pytest.mark.parametrize("visible", ["1", None])
def test_gpu_step_carries_step_local_cuda_visible_devices(root: Path, visible: str | None) -> None:
    """--cleanenv drops the host's CUDA_VISIBLE_DEVICES; APPTAINERENV_CUDA_VISIBLE_DEVICES, set
    from Slurm's step-local value, puts it back. --nv is accepted where no GPU exists."""
    target = apptainer_target(root, gpu_gres="gpu", max_gpus_per_allocation=2)
    out = root / "out" / "gpu.json"
    command = LAUNCHER.command(target, probe_args(out, 0), {}, inherit=RUNTIME_VARIABLES, gpus=1)
    extra = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    done = run_step(command, cwd=root, env=srun_environment(command, extra=extra))
    assert done.returncode == 0, done.stderr
    env = read_probe(out)["env"]
    assert env.get("CUDA_VISIBLE_DEVICES") == visible
    assert env["SERVATUS_JOB_ID"] == str(JOB)
    assert not [name for name in env if name.startswith("SLURM_")]


def test_exit_status_is_the_tasks(root: Path) -> None:
    """apptainer exec becomes the command, so the step's exit status is the Task's."""
    target = apptainer_target(root)
    command = LAUNCHER.command(
        target, probe_args(root / "out" / "x.json", 3), {}, inherit=RUNTIME_VARIABLES, gpus=0
    )
    assert run_step(command, cwd=root, env=srun_environment(command)).returncode == 3


def test_two_task_allocation_through_the_rendered_batch_script(root: Path) -> None:
    """The whole chain: the Slurm plugin's script sets the APPTAINERENV_* assignments on srun and
    exports them by name; the stand-in turns them into the Task's environment."""
    target = apptainer_target(root, f"{root}/out")
    profile = profile_for(target)
    tasks = [
        Task("ok", ["python3", *probe_args(root / "out" / "ok.json", 0)[1:]], env={"A": "1"}),
        Task("bad", probe_args(root / "out" / "bad.json", 3), env={"B": "two words"}),
    ]
    script = render_allocation(profile, tasks, LAUNCHER)
    assert "APPTAINERENV_B='two words'" in script
    assert run_allocation(make_tree(root), profile, tasks, LAUNCHER) == {0: 0, 1: 3}
    for slot, (task, name) in enumerate(zip(tasks, ("ok", "bad"), strict=True)):
        record = read_probe(root / "out" / f"{name}.json")
        assert record["cwd"] == str(root / "work")
        expected = {
            **step_environment(task, "0123456789abcdef01234567", slot),
            "SERVATUS_JOB_ID": str(JOB),
            "SERVATUS_JOB_END_TIME": END_TIME,
        }
        env = record["env"]
        assert {k: v for k, v in env.items() if not k.startswith(("APPTAINER_", "PATH"))} == (
            expected
        )
    assert step_log(Tree(root), 0) == ""


# -- the stand-in refuses what Apptainer refuses --------------------------------------------------


def stand_in(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "bin" / "apptainer"), *argv],
        env={**SLURM, "APPTAINERENV_X": "1"},
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "{img}", "true"], "only knows 'apptainer exec'"),
        (["exec", "--cleanenv", "--contain", "{img}", "/bin/true"], "unknown flag: --contain"),
        (["exec", "--bind"], "flag needs an argument: --bind"),
        (
            ["exec", "--bind", "{work}:/w:rx", "{img}", "/bin/true"],
            "'rx' is not a valid bind option",
        ),
        (["exec", "--bind", "{work}:w", "{img}", "/bin/true"], "destination must be an absolute"),
        (["exec", "--bind", "{work},,/tmp", "{img}", "/bin/true"], "wrong bind syntax"),
        (["exec", "--bind", "/no/such/dir", "{img}", "/bin/true"], "mount source /no/such/dir"),
        (["exec", "--cleanenv", "{img}"], '"exec" requires at least 2 arg(s), only received 1'),
        (["exec", "{work}", "/bin/true"], "not a SIF file"),
        (["exec", "{notsif}", "/bin/true"], "image format not recognized"),
        (["exec", "/no/such.sif", "/bin/true"], "could not open image /no/such.sif"),
        (["exec", "--pwd", "/no/such/dir", "{img}", "/bin/true"], "could not set working"),
        (["exec", "--cleanenv", "{img}", "no-such-program"], "executable file not found in $PATH"),
    ],
)
def test_stand_in_refuses_bad_invocations_with_255(
    root: Path, argv: list[str], message: str
) -> None:
    """Apptainer's exec grammar: exec options before the image, binds src[:dest[:ro|rw]] with an
    existing src and an absolute dest, a SIF image file, and a command; its own errors are a
    FATAL line and exit status 255."""
    (root / "notsif").write_bytes(b"plain file")
    paths = {"img": root / "img.sif", "work": root / "work", "notsif": root / "notsif"}
    done = stand_in(root, *(word.format(**paths) for word in argv))
    assert done.returncode == 255
    assert done.stderr.startswith("FATAL:")
    assert message in done.stderr


def test_without_cleanenv_the_host_environment_leaks(root: Path) -> None:
    """Apptainer passes the host's environment unless --cleanenv: so the launcher's --cleanenv is
    what keeps SLURM_* out, and APPTAINERENV_X still wins over a host X."""
    out = root / "out" / "leak.json"
    done = stand_in(root, "exec", "--pwd", str(root), str(root / "img.sif"), *probe_args(out, 0))
    assert done.returncode == 0, done.stderr
    env = read_probe(out)["env"]
    assert env["SLURM_JOB_ID"] == str(JOB)
    assert env["X"] == "1"
    assert "APPTAINERENV_X" not in env


def test_bind_equals_form_and_short_flags(root: Path) -> None:
    """Apptainer's flags also take ``--bind=SPEC``, and ``-B``/``-e`` are their short forms."""
    out = root / "out" / "short.json"
    done = stand_in(
        root, "exec", "-e", f"--bind={root}/work", "-B", "/tmp:/tmp:ro",
        str(root / "img.sif"), *probe_args(out, 0),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SLURM_JOB_ID" not in read_probe(out)["env"]


def test_stand_in_runs_under_the_system_python() -> None:
    """It must start where no PATH exists (an srun step): its shebang names /usr/bin/python3."""
    first = (Path(__file__).parent / "stand_in_apptainer.py").read_text().splitlines()[0]
    assert first.startswith(f"#!{PYTHON} ")
    assert os.access(PYTHON, os.X_OK)


def test_a_changed_target_changes_the_command(tmp_path: Path) -> None:
    """--pwd and the bound work_root are the same directory, written without a trailing '/'."""
    target = apptainer_target(tmp_path)
    moved = attrs.evolve(target, work_root="/scratch/alice/other/")
    argv = LAUNCHER.command(moved, ["a"], {}, inherit=(), gpus=0).argv
    assert argv[argv.index("--pwd") + 1] == "/scratch/alice/other"
    assert argv[argv.index("--bind") + 1] == "/scratch/alice/other"
