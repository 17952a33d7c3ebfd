"""The example site plugin ``docs/examples/servatus-bubblewrap``: built, installed, selected, and
its sandbox run for real with this machine's ``/usr/bin/bwrap``.

The distribution is built with hatchling (no build isolation, so no network) and installed with
``pip install --target`` into a private directory, which the ``servatus`` subprocesses get on
``PYTHONPATH``: the way a site installs its plugin next to Servatus.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
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

from servatus.errors import ConfigurationError
from servatus.operations.submission import RUNTIME_VARIABLES, step_environment
from servatus.tasks import Task
from testkit import install_distribution

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "servatus-bubblewrap"
sys.path.insert(0, str(EXAMPLE))
from servatus_bubblewrap.plugin import BubblewrapLauncher, settings  # noqa: E402

BWRAP = "/usr/bin/bwrap"
LAUNCHER = BubblewrapLauncher()
needs_bwrap = pytest.mark.skipif(not os.access(BWRAP, os.X_OK), reason="needs /usr/bin/bwrap")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example distribution, built and installed into a private directory."""
    return install_distribution(EXAMPLE, tmp_path_factory.mktemp("bubblewrap-site"))


def servatus(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "servatus", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )


def write_config(path: Path, launcher: str, *, options: str = "") -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            [target]
            slurm_bin = "/usr/bin"
            work_root = "{path.parent}/work"
            log_root = "{path.parent}/logs"
            partitions = ["debug"]
            max_tasks_per_allocation = 2
            max_cpus_per_allocation = 2
            max_memory_mib_per_allocation = 1000
            max_time_limit = "01:00:00"
            launcher = "{launcher}"
            {options}

            [resources]
            cpus = 1
            memory_mib = 100
            time_limit = "00:10:00"
            """
        )
    )
    return path


def write_tasks(path: Path, *tasks: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


# -- installed, listed, selected ----------------------------------------------------------------


def test_installed_plugin_is_listed(site: Path) -> None:
    listing = servatus(site, "plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    document = json.loads(listing.stdout)
    plugins = {p["name"]: (p["distribution"], p["version"]) for p in document["plugins"]}
    assert plugins["servatus-bubblewrap"] == ("servatus-bubblewrap", "1.0.0")
    assert {"bubblewrap", "direct", "apptainer"} <= set(document["launchers"])


def test_selected_in_a_profile_it_shapes_the_planned_steps(site: Path, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "SERVATUS.toml",
        "bubblewrap",
        options='launcher_options = { writable = "/srv/x" }',
    )
    tasks = write_tasks(
        tmp_path / "tasks.jsonl",
        {"key": "a", "args": ["/usr/bin/python3", "a.py"], "env": {"SEED": "1"}},
        {"key": "b", "args": ["/usr/bin/python3", "b.py"]},
    )
    assert servatus(site, "ensure", str(tmp_path / "state"), str(tasks)).returncode == 0
    probe = textwrap.dedent(
        f"""
        from servatus.campaign import Campaign
        from servatus.config import Profile
        campaign = Campaign.open({str(tmp_path / "state")!r})
        plan = campaign.plan(Profile.load({str(config)!r}))
        print(len(plan.allocations))
        print(campaign.scripts(plan)[0])
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    count, script = run.stdout.split("\n", 1)
    assert count == "1"
    work = f"{tmp_path}/work"
    assert (
        f"'/usr/bin/bwrap' '--ro-bind' '/' '/' '--dev' '/dev' '--proc' '/proc' '--tmpfs' '/tmp' "
        f"'--bind' '{work}' '{work}' '--bind' '/srv/x' '/srv/x' '--chdir' '{work}' "
        "'--unshare-pid' '--new-session' '--die-with-parent' '--' '/usr/bin/env' '-u' 'PWD' "
        "'--default-signal=USR1,TERM' '/usr/bin/python3' 'a.py'"
    ) in script
    assert "SEED='1' " in script  # set on the srun line, passed by name


def test_plan_cli_shows_the_bwrap_steps(site: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "SERVATUS.toml", "bubblewrap")
    tasks = write_tasks(tmp_path / "tasks.jsonl", {"key": "a", "args": ["/bin/true"]})
    assert servatus(site, "ensure", str(tmp_path / "state"), str(tasks)).returncode == 0
    shown = servatus(
        site, "plan", "--config", str(config), "--show-scripts", str(tmp_path / "state")
    )
    assert shown.returncode == 0, shown.stderr
    assert "'/usr/bin/bwrap' '--ro-bind' '/' '/'" in shown.stdout


def test_campaign_plan_refuses_an_unknown_launcher(site: Path, tmp_path: Path) -> None:
    """The profile loads (launchers are plugins, checked when planning); Campaign.plan names the
    installed launchers, the site's included."""
    config = write_config(tmp_path / "SERVATUS.toml", "bubblewarp")
    probe = textwrap.dedent(
        f"""
        from servatus.campaign import Campaign
        from servatus.config import Profile
        from servatus.errors import ConfigurationError
        from servatus.tasks import Task
        profile = Profile.load({str(config)!r})
        print(profile.target.launcher)
        campaign = Campaign.ensure({str(tmp_path / "state")!r}, [Task("a", ["/bin/true"])])
        try:
            campaign.plan(profile)
        except ConfigurationError as exc:
            print(exc)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "bubblewarp",
        "unknown launcher 'bubblewarp'; installed launchers: apptainer, bubblewrap, direct",
    ]


def test_unknown_launcher_is_one_line_naming_the_installed_ones(site: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "SERVATUS.toml", "bubblewarp")
    tasks = write_tasks(tmp_path / "tasks.jsonl", {"key": "a", "args": ["/bin/true"]})
    assert servatus(site, "ensure", str(tmp_path / "state"), str(tasks)).returncode == 0
    assert servatus(site, "profile", "--config", str(config)).returncode == 0
    planned = servatus(site, "plan", "--config", str(config), str(tmp_path / "state"))
    assert planned.returncode == 1
    assert planned.stderr.splitlines() == [
        "servatus: ConfigurationError: unknown launcher 'bubblewarp'; "
        "installed launchers: apptainer, bubblewrap, direct"
    ]


# -- the command, as data -------------------------------------------------------------------------


def test_gpu_steps_see_the_host_devices_and_keep_cuda_visible_devices(tmp_path: Path) -> None:
    command = LAUNCHER.command(
        make_target(tmp_path), ["/bin/true"], {}, inherit=RUNTIME_VARIABLES, gpus=1
    )
    argv = command.argv
    assert argv[argv.index("--dev-bind") : argv.index("--dev-bind") + 3] == (
        "--dev-bind",
        "/dev",
        "/dev",
    )
    assert "'CUDA_VISIBLE_DEVICES')" in argv[2]


def test_values_never_reach_a_command_line(tmp_path: Path) -> None:
    env = {"TOKEN": "s3cret-value", "SERVATUS_TASK_KEY": "a"}
    command = LAUNCHER.command(make_target(tmp_path), ["/bin/true"], env, inherit=(), gpus=0)
    assert "s3cret-value" not in " ".join(command.argv)
    assert dict(command.exported) == env


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        ([], {}, "at least one argument"),
        (["python3"], {}, "needs an absolute args[0], got 'python3'"),
        (["/opt/a=b/run"], {}, "contains '='"),
        (["/bin/true"], {"writeable": "/x"}, "has no option 'writeable' (writable: comma"),
        (["/bin/true"], {"writable": "scratch"}, "launcher_options.writable: 'scratch' is not"),
        (["/bin/true"], {"network": "off"}, "network: 'off' is not one of host, none"),
        (["/bin/true"], {"bwrap": "bwrap"}, "launcher_options.bwrap: 'bwrap' is not"),
    ],
)
def test_refusals(tmp_path: Path, args: list[str], options: dict[str, str], message: str) -> None:
    target = make_target(tmp_path, launcher="bubblewrap", launcher_options=tuple(options.items()))
    with pytest.raises(ConfigurationError) as caught:
        LAUNCHER.check(target, args)
    assert message in str(caught.value)


def test_options_are_read(tmp_path: Path) -> None:
    target = make_target(
        tmp_path,
        launcher_options=(
            ("bwrap", "/opt/bin/bwrap"),
            ("network", "none"),
            ("writable", "/a/, /b"),
        ),
    )
    chosen = settings(target)
    assert (chosen.bwrap, chosen.network, chosen.writable) == (
        "/opt/bin/bwrap",
        "none",
        ("/a", "/b"),
    )
    argv = LAUNCHER.command(target, ["/bin/true"], {}, inherit=(), gpus=0).argv
    assert argv[4] == "/opt/bin/bwrap"
    assert "--unshare-net" in argv


# -- the sandbox, for real ------------------------------------------------------------------------


@needs_bwrap
def test_sandbox_is_read_only_outside_work_root_with_its_own_pids_and_exact_env(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    writable = tmp_path / "extra"
    writable.mkdir()
    target = make_target(tmp_path, launcher_options=(("writable", str(writable)),))
    out = tree.work / "probe.json"
    var_tmp = f"/var/tmp/servatus-bwrap-{os.getpid()}-{time.monotonic_ns()}"
    paths = [str(tree.work / "inside"), str(writable / "extra"), var_tmp, "/etc/x"]
    paths.append(str(tmp_path / "in-private-tmp"))
    env = {"A": "1", "QUOTED": "it's\n$HOME", "SERVATUS_TASK_KEY": "t"}
    command = LAUNCHER.command(
        target, probe_args(out, 0, *paths), env, inherit=RUNTIME_VARIABLES, gpus=0
    )
    done = run_step(
        command, cwd=tmp_path, env=srun_environment(command, extra={"CUDA_VISIBLE_DEVICES": "0"})
    )
    assert done.returncode == 0, done.stderr
    record = read_probe(out)
    assert record["env"] == {**env, "SERVATUS_JOB_ID": str(JOB), "SERVATUS_JOB_END_TIME": END_TIME}
    assert record["cwd"] == str(tree.work)
    assert record["writes"] == {
        paths[0]: "ok",
        paths[1]: "ok",
        paths[2]: "OSError: Read-only file system",
        paths[3]: "OSError: Read-only file system",
        paths[4]: "ok",
    }
    # Writes inside work_root (and `writable`) land on the host; /tmp is the sandbox's own.
    assert (tree.work / "inside").exists() and (writable / "extra").exists()
    assert not os.path.exists(var_tmp) and not (tmp_path / "in-private-tmp").exists()
    # Its own PID namespace: bwrap's init is 1, the Task 2, and nothing of the host is visible.
    assert record["pid"] == 2
    assert record["visible_pids"] == [1, 2]


@needs_bwrap
def test_slurms_signals_reach_the_task_and_bwrap_survives_them(tmp_path: Path) -> None:
    """Slurm signals every process of the step; the Task must get SIGUSR1 and still choose its
    own exit status, rather than die with bwrap."""
    make_tree(tmp_path)
    ready = tmp_path / "work" / "ready"
    program = tmp_path / "work" / "handler.py"
    program.write_text(
        "import signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda *_: got.append(1))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "end = time.monotonic() + 20\n"
        "while not got and time.monotonic() < end:\n"
        "    time.sleep(0.05)\n"
        "sys.exit(75 if got else 1)\n"
    )
    command = LAUNCHER.command(
        make_target(tmp_path), ["/usr/bin/python3", str(program)], {}, inherit=(), gpus=0
    )
    step = subprocess.Popen(list(command.argv), cwd=tmp_path, env=srun_environment(command))
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline and step.poll() is None
        time.sleep(0.05)
    for pid in descendants(step.pid):  # as proctrack/linuxproc and cgroup signal a step
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    assert step.wait(timeout=20) == 75


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


@needs_bwrap
def test_two_task_allocation_through_the_rendered_batch_script(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    profile = profile_for(tree.target(launcher="bubblewrap"))
    tasks = [
        Task("ok", probe_args(tree.work / "ok.json", 0), env={"A": "x y"}),
        Task("bad", probe_args(tree.work / "bad.json", 3)),
    ]
    assert run_allocation(tree, profile, tasks, LAUNCHER) == {0: 0, 1: 3}
    for slot, task in enumerate(tasks):
        record = read_probe(tree.work / f"{task.key}.json")
        assert record["env"] == {
            **step_environment(task, "0123456789abcdef01234567", slot),
            "SERVATUS_JOB_ID": str(JOB),
            "SERVATUS_JOB_END_TIME": END_TIME,
        }
        assert record["pid"] == 2
