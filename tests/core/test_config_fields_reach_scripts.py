"""Every SERVATUS.toml field that reaches a shell script or an ssh command line is quoted there or
refused when the file is loaded (issue #30).

For each field, a hostile value (command substitution, backquotes, ``;``, a newline, quotes) is
written into a real SERVATUS.toml. Either :meth:`Profile.load` refuses it with a
ConfigurationError, or the real batch script of a one-Task allocation is rendered through the
plugins and run under ``dash`` and ``bash --posix`` with the fake ``srun`` of the Slurm tests: no
planted file may appear, and the value must arrive byte-exact where it belongs (an ``#SBATCH``
line, an ``srun`` option, the Apptainer command line). Fields that only choose (profile names,
``launcher``) or are numbers and durations must never reach a script as text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))

from slurm_helpers import FakeCluster, make_fake_cluster

from servatus.config import Profile
from servatus.engine.plan import Allocation
from servatus.errors import ConfigurationError
from servatus.operations.submission import script_spec
from servatus.plugins import hooks
from servatus.tasks import Task
from servatus_slurm.transport import (
    Frame,
    SshTransport,
    remote_command,
)

SHELLS = [("dash",), ("bash", "--posix")]
ALLOCATION = "0123456789abcdef01234567"


def hostile(planted: Path) -> list[str]:
    """Fragments that run ``touch PLANTED`` if a shell ever evaluates them."""
    p = str(planted)
    return [
        f"$(touch {p})",
        f"$(touch${{IFS}}{p})",
        f"`touch${{IFS}}{p}`",
        f";touch${{IFS}}{p};",
        f"\ntouch {p}\n",
        f"'$(touch${{IFS}}{p})'",
        f'"$(touch${{IFS}}{p})"',
        f"&&touch${{IFS}}{p}",
        f"|touch${{IFS}}{p}",
    ]


def toml(value: object) -> str:
    """A TOML value: JSON's strings (ASCII, escaped) and arrays are TOML's too."""
    return json.dumps(value)


def write_config(root: Path, target: dict[str, object], resources: dict[str, object]) -> Path:
    lines = ["[target]", *(f"{k} = {toml(v)}" for k, v in target.items())]
    lines += ["[resources]", *(f"{k} = {toml(v)}" for k, v in resources.items())]
    path = root / "SERVATUS.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def base_target(cluster: FakeCluster) -> dict[str, object]:
    return {
        "slurm_bin": str(cluster.root / "bin"),
        "work_root": str(cluster.root / "work"),
        "log_root": str(cluster.root / "logs"),
        "partitions": ["debug"],
        "max_tasks_per_allocation": 2,
        "max_cpus_per_allocation": 4,
        "max_memory_mib_per_allocation": 4000,
        "max_time_limit": "01:00:00",
        "gpu_gres": "gpu",
        "max_gpus_per_allocation": 2,
    }


BASE_RESOURCES: dict[str, object] = {"cpus": 1, "memory_mib": 100, "time_limit": "00:10:00"}

RECORDER = """#!/bin/sh
# A stand-in apptainer: records its argv, NUL-separated, and runs nothing.
printf '%s\\0' "$0" "$@" >@OUT@
"""


def make_apptainer(directory: Path, out: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / "apptainer"
    program.write_text(RECORDER.replace("@OUT@", str(out / "argv")))
    program.chmod(0o755)
    return program


def load(path: Path) -> Profile | None:
    try:
        return Profile.load(path)
    except ConfigurationError as exc:
        assert "\n" not in str(exc)
        return None


def run_script(cluster: FakeCluster, profile: Profile, gpus: int) -> tuple[str, list[dict]]:
    """Render the one-Task allocation's real script and run it under each shell; returns the
    script and every fake srun record."""
    plugins = hooks()
    launcher = plugins.launcher(profile.target.launcher)
    task = Task("k", ["/bin/true"])
    spec = script_spec(profile, Allocation(ALLOCATION, (task.key,)), {task.key: task}, launcher)
    assert spec.gpus == gpus
    script = plugins.batch_script(spec)
    records = []
    for shell in SHELLS:
        for directory in (cluster.root / "srun", Path(profile.target.log_root)):
            for old in directory.iterdir():
                old.unlink()
        env = {
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_END_TIME": "1900000000",
            "FAKE_SRUN_RECORD": str(cluster.root / "srun"),
            "PATH": "/usr/bin:/bin",
        }
        path = cluster.root / "job.sh"
        path.write_text(script)
        done = subprocess.run(
            [*shell, str(path)],
            env=env,
            cwd=cluster.root / "work",
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        found = list((cluster.root / "srun").iterdir())
        assert len(found) == 1, (shell, done.stderr)
        records.append(json.loads(found[0].read_text()))
    return script, records


Check = Callable[[FakeCluster, str, str, list[dict]], None]


def directive(option: str) -> Check:
    def check(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
        assert f"#SBATCH --{option}={value}\n" in script

    return check


def gres(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert f"#SBATCH --gres={value}:1\n" in script
    assert all(r["options"]["--gres"] == f"{value}:1" for r in records)


def work_root(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert all(r["options"]["--chdir"] == value for r in records)


def log_root(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert any(name.endswith(".start") for name in os.listdir(value))


def slurm_bin(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert records  # the srun in that directory ran the step


def apptainer_argv(cluster: FakeCluster) -> list[bytes]:
    return (cluster.out / "argv").read_bytes().split(b"\0")[:-1]


def executable(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert apptainer_argv(cluster)[0] == value.encode()


def image(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    assert value.encode() in apptainer_argv(cluster)


def binds(cluster: FakeCluster, value: str, script: str, records: list[dict]) -> None:
    argv = apptainer_argv(cluster)
    assert argv[argv.index(b"--bind") + 1].endswith(b"," + value.encode())


def apptainer_target(cluster: FakeCluster) -> dict[str, object]:
    program = make_apptainer(cluster.root / "app", cluster.out)
    return {"apptainer": str(program), "image": str(cluster.root / "image.sif")}


# field -> (how the hostile fragment becomes a value, extra target keys, the exact-arrival check)
FIELDS: dict[str, tuple[Callable[[FakeCluster, str], object], Callable[..., dict], Check]] = {
    "gpu_gres": (lambda c, h: "gpu" + h, lambda c: {}, gres),
    "partitions": (lambda c, h: ["debug" + h], lambda c: {}, directive("partition")),
    "account": (lambda c, h: "acct" + h, lambda c: {}, directive("account")),
    "qos": (lambda c, h: "normal" + h, lambda c: {}, directive("qos")),
    "constraint": (lambda c, h: "a100" + h, lambda c: {}, directive("constraint")),
    "work_root": (lambda c, h: str(c.root / "work") + h, lambda c: {}, work_root),
    "log_root": (lambda c, h: str(c.root / "logs") + h, lambda c: {}, log_root),
    "slurm_bin": (lambda c, h: str(c.root / "bin") + h, lambda c: {}, slurm_bin),
    "apptainer": (
        lambda c, h: str(c.root / "app") + h + "/apptainer",
        apptainer_target,
        executable,
    ),
    "image": (lambda c, h: str(c.root / "image") + h + ".sif", apptainer_target, image),
    "binds": (lambda c, h: [str(c.root / "data") + h], apptainer_target, binds),
}


def prepare(cluster: FakeCluster, field: str, value: object) -> None:
    """Make what the hostile value names exist, so the script can run with it."""
    if field in ("work_root", "log_root"):
        assert isinstance(value, str)
        Path(value).mkdir(parents=True, exist_ok=True)
    elif field == "slurm_bin":
        assert isinstance(value, str)
        Path(value).mkdir(parents=True, exist_ok=True)
        for name in ("srun", "scancel"):
            (Path(value) / name).write_bytes((cluster.root / "bin" / name).read_bytes())
            (Path(value) / name).chmod(0o755)
    elif field == "apptainer":
        assert isinstance(value, str)
        make_apptainer(Path(value).parent, cluster.out)


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_hostile_value_is_refused_at_load_or_arrives_byte_exact(
    tmp_path: Path, field: str
) -> None:
    cluster = make_fake_cluster(tmp_path)
    planted = tmp_path / "PWNED"
    shape, extra, check = FIELDS[field]
    gpus = 1 if field == "gpu_gres" else 0
    outcomes = []
    for fragment in hostile(planted):
        value = shape(cluster, fragment)
        target = {**base_target(cluster), **extra(cluster), field: value}
        config = write_config(tmp_path, target, {**BASE_RESOURCES, "gpus": gpus})
        profile = load(config)
        if profile is None:
            outcomes.append("refused")
            continue
        prepare(cluster, field, value)
        script, records = run_script(cluster, profile, gpus)
        assert not planted.exists(), f"{field} = {value!r} ran a command"
        check(cluster, value[0] if isinstance(value, list) else value, script, records)
        outcomes.append("ran")
    assert len(outcomes) == len(hostile(planted))


@pytest.mark.parametrize(
    "field",
    [
        "max_tasks_per_allocation",
        "max_cpus_per_allocation",
        "max_memory_mib_per_allocation",
        "max_gpus_per_allocation",
        "max_allocations_per_submit",
        "max_script_bytes",
        "max_time_limit",
    ],
)
def test_numbers_and_durations_are_refused_unless_they_are_ones(tmp_path: Path, field: str) -> None:
    cluster = make_fake_cluster(tmp_path)
    for fragment in hostile(tmp_path / "PWNED"):
        target = {**base_target(cluster), field: "1" + fragment}
        assert load(write_config(tmp_path, target, BASE_RESOURCES)) is None


@pytest.mark.parametrize("field", ["cpus", "memory_mib", "gpus", "time_limit", "signal_before_end"])
def test_resources_are_refused_unless_they_are_numbers(tmp_path: Path, field: str) -> None:
    cluster = make_fake_cluster(tmp_path)
    for fragment in hostile(tmp_path / "PWNED"):
        resources = {**BASE_RESOURCES, field: "00:01:00" + fragment}
        assert load(write_config(tmp_path, base_target(cluster), resources)) is None


def test_host_is_refused_at_load_and_is_one_ssh_argument(tmp_path: Path) -> None:
    cluster = make_fake_cluster(tmp_path)
    for fragment in hostile(tmp_path / "PWNED"):
        target = {**base_target(cluster), "host": "login" + fragment}
        assert load(write_config(tmp_path, target, BASE_RESOURCES)) is None
    # An accepted host is one argv word of ssh, after the options, never in the remote program.
    target = {**base_target(cluster), "host": "alice@login.example.org"}
    profile = load(write_config(tmp_path, target, BASE_RESOURCES))
    assert profile is not None and profile.target.host is not None
    ssh = SshTransport(profile.target.host, environ={"PATH": "/usr/bin:/bin"})
    program = remote_command(["/usr/bin/true"], Frame.random())
    argv = ssh.argv(program)
    assert argv[-3:] == [profile.target.host, "--", program]
    assert profile.target.host not in program


def test_remote_words_from_config_are_quoted_for_the_remote_shell(tmp_path: Path) -> None:
    """slurm_bin, work_root and log_root reach the ssh transport's remote sh program as argv
    words (sbatch's path, doctor's probes, the marker listing): each is one quoted word."""
    planted = tmp_path / "PWNED"
    for fragment in hostile(planted):
        word = "/x" + fragment
        program = remote_command(["/bin/sh", "-c", 'printf %s "$1"', "sh", word], Frame("ab"))
        done = subprocess.run(["dash", "-c", program], capture_output=True, check=False)
        assert not planted.exists()
        assert done.stdout == b"ab>\n" + word.encode() + b"\n<ab 0\n"


def test_names_that_only_choose_reach_no_script(tmp_path: Path) -> None:
    """Profile names, default_profile, launcher and launcher_options select things; the first
    three never reach a script, and an unknown launcher is refused when a plan asks for it."""
    cluster = make_fake_cluster(tmp_path)
    name = "p$(touch${IFS}x)"
    lines = [f"default_profile = {toml(name)}", f"[profiles.{toml(name)}.target]"]
    lines += [f"{k} = {toml(v)}" for k, v in base_target(cluster).items()]
    lines += [f"[profiles.{toml(name)}.resources]"]
    lines += [f"{k} = {toml(v)}" for k, v in BASE_RESOURCES.items()]
    path = tmp_path / "SERVATUS.toml"
    path.write_text("\n".join(lines) + "\n")
    profile = Profile.load(path)
    script, _ = run_script(cluster, profile, 0)
    assert name not in script
    target = {**base_target(cluster), "launcher": "x;touch${IFS}y"}
    odd = load(write_config(tmp_path, target, BASE_RESOURCES))
    assert odd is not None
    with pytest.raises(ConfigurationError):
        hooks().launcher(odd.target.launcher)


def test_rendering_refuses_a_gres_the_loader_would(tmp_path: Path) -> None:
    """Defence in depth: a Target built in Python, around the loader, still cannot put a hostile
    GRES on a step's srun line (plain, chain, or lease: all go through slot_options)."""
    from servatus_slurm.script import directives, slot_options

    cluster = make_fake_cluster(tmp_path)
    target = {**base_target(cluster), "gpu_gres": "gpu$(touch${IFS}x)"}
    profile = load(write_config(tmp_path, {**target, "gpu_gres": "gpu"}, BASE_RESOURCES))
    assert profile is not None
    import attrs

    bad = attrs.evolve(profile.target, gpu_gres="gpu$(touch${IFS}x)")
    with pytest.raises(ConfigurationError, match="not a GRES name"):
        slot_options(bad, 1, 100, 1)
    assert slot_options(bad, 1, 100, 0, gres_none=True)[-1] == "--gres=none"
    task = Task("k", ["/bin/true"])
    spec = script_spec(
        attrs.evolve(profile, resources=attrs.evolve(profile.resources, gpus=1)),
        Allocation(ALLOCATION, (task.key,)),
        {task.key: task},
        hooks().launcher("direct"),
    )
    with pytest.raises(ConfigurationError, match="not a GRES name"):
        directives(attrs.evolve(spec, target=bad))
