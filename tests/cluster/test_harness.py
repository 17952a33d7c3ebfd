"""The real local cluster does what Servatus's tests rely on: Slurm 24.11, both ways in.

Jobs are submitted the way Servatus submits them (``--export=NIL --no-requeue --parsable``), as
alice, over ``ssh servatus-test`` unless a test is about the login-node case.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import fixture, harness
from cluster.fixture import SlurmCluster

HARNESS = str(Path(harness.__file__).resolve())
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
_serial = itertools.count()


def test_profile_toml_loads_as_both_profiles(tmp_path: Path) -> None:
    """The fixture's SERVATUS.toml is a valid spec profile for SSH and for the login node."""
    from servatus.config import Profile

    for host in ("servatus-test", None):
        path = tmp_path / f"{host}.toml"
        path.write_text(fixture.profile_toml(host=host))
        cpu = Profile.load(path)
        gpu = Profile.load(path, name="gpu")
        assert cpu.name == "cpu"
        assert cpu.target.host == host
        assert cpu.target.slurm_bin == "/usr/bin"
        assert cpu.target.partitions == ("debug",)
        assert (cpu.resources.cpus, cpu.resources.memory_mib, cpu.resources.gpus) == (1, 500, 0)
        assert cpu.resources.time_limit == 300
        assert gpu.target.gpu_gres == "gpu:a100"
        assert gpu.target.max_gpus_per_allocation == 2
        assert gpu.resources.gpus == 1


def test_recipe_stamp_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed recipe names a different cached root, so `up` rebuilds instead of reusing."""
    before = harness.root_dir()
    assert before == harness.root_dir()
    monkeypatch.setattr(harness, "PACKAGES", (*harness.PACKAGES, "strace"))
    assert harness.root_dir() != before
    assert harness.root_dir().parent == before.parent


# ---------------------------------------------------------------------- helpers over ssh


def unique_dir(cluster: SlurmCluster, name: str) -> str:
    """A fresh directory under work_root owned by alice, so tests never see each other's files."""
    inner = f"{cluster.work_root}/t-{os.getpid()}-{next(_serial)}-{name}"
    cluster.make_dirs(inner)
    return inner


def put_script(cluster: SlurmCluster, inner: str, text: str) -> None:
    """Write a file on the cluster as alice, over ssh, as a launcher on a laptop would."""
    result = cluster.ssh(
        f"cat > {shlex.quote(inner)} && chmod 700 {shlex.quote(inner)}", input=text
    )
    assert result.returncode == 0, result.stderr


def submit(cluster: SlurmCluster, script: str, log: str, *extra: str) -> int:
    argv = [
        f"{cluster.slurm_bin}/sbatch",
        "--parsable",
        "--export=NIL",
        "--no-requeue",
        "--mem=100",
        "--time=2",
        f"--output={log}",
        *extra,
        script,
    ]
    result = cluster.ssh(argv)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip().split(";")[0])


def job_state(cluster: SlurmCluster, job: int) -> str | None:
    """The job's state as squeue lists it (all states), or None once Slurm has purged it."""
    result = cluster.ssh(
        [f"{cluster.slurm_bin}/squeue", "--me", "-h", "-t", "all", "-j", str(job), "-o", "%T"]
    )
    text = result.stdout.strip()
    if result.returncode != 0 or not text:
        return None
    return text


def wait_finished(cluster: SlurmCluster, job: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(cluster, job)
        if state in FINISHED:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} did not finish within {timeout} s")


# ---------------------------------------------------------------------- the cluster


@pytest.mark.cluster
def test_sbatch_reports_24_11_over_ssh_as_alice(slurm_cluster: SlurmCluster) -> None:
    result = slurm_cluster.ssh("/usr/bin/sbatch --version; id -un; id -u")
    assert result.returncode == 0, result.stderr
    version, user, uid = result.stdout.split("\n")[:3]
    assert re.fullmatch(r"slurm(-wlm)? 24\.11\.\d+", version)
    assert (user, int(uid)) == ("alice", slurm_cluster.uid)


@pytest.mark.cluster
def test_batch_job_output_lands_in_scratch_owned_by_alice(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    work = unique_dir(cluster, "batch")
    put_script(cluster, f"{work}/job.sh", '#!/bin/sh\necho "user=$(id -un) path=${PATH-unset}"\n')
    log = f"{work}/job.out"
    job = submit(cluster, f"{work}/job.sh", log)
    assert wait_finished(cluster, job) == "COMPLETED"
    outside = Path(log)  # scratch has the same path on both sides
    assert outside.read_text().startswith("user=alice path=")
    assert (outside.stat().st_uid, outside.stat().st_gid) == (cluster.uid, cluster.gid)
    assert outside.stat().st_uid != os.getuid()


@pytest.mark.cluster
def test_srun_step_exit_code_reaches_the_batch_script(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    work = unique_dir(cluster, "srun")
    script = (
        "#!/bin/sh\n"
        "/usr/bin/srun --ntasks=1 --export=NIL /usr/bin/env -i /bin/sh -c 'echo in-step; exit 75'\n"
        'echo "step-exit=$?"\n'
        "/usr/bin/srun --ntasks=1 --export=NIL env true\n"
        'echo "relative-exit=$?"\n'
    )
    put_script(cluster, f"{work}/job.sh", script)
    job = submit(cluster, f"{work}/job.sh", f"{work}/job.out")
    assert wait_finished(cluster, job) == "COMPLETED"
    text = Path(f"{work}/job.out").read_text()
    assert "in-step" in text
    assert "step-exit=75" in text
    # With --export=NIL a step has no PATH, so relative programs fail: why Servatus uses
    # absolute paths.
    assert re.search(r"relative-exit=[1-9]", text), text


@pytest.mark.cluster
def test_gpu_gres_is_scheduled_and_over_asking_is_refused(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    work = unique_dir(cluster, "gpu")
    put_script(cluster, f"{work}/job.sh", '#!/bin/sh\necho "gpus=$SLURM_GPUS_ON_NODE"\n')
    job = submit(cluster, f"{work}/job.sh", f"{work}/job.out", "--gres=gpu:a100:1")
    assert wait_finished(cluster, job) == "COMPLETED"
    assert "gpus=1" in Path(f"{work}/job.out").read_text()

    refused = cluster.ssh(
        [
            f"{cluster.slurm_bin}/sbatch",
            "--parsable",
            "--export=NIL",
            "--gres=gpu:a100:3",
            f"--output={work}/never.out",
            f"{work}/job.sh",
        ]
    )
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr
    assert not Path(f"{work}/never.out").exists()


@pytest.mark.cluster
def test_squeue_lists_a_job_then_forgets_it_after_min_job_age(
    slurm_cluster: SlurmCluster,
) -> None:
    cluster = slurm_cluster
    work = unique_dir(cluster, "purge")
    put_script(cluster, f"{work}/job.sh", "#!/bin/sh\n/usr/bin/sleep 4\n")
    job = submit(cluster, f"{work}/job.sh", f"{work}/job.out")
    listed = cluster.ssh([f"{cluster.slurm_bin}/squeue", "--me", "-h", "-o", "%i %T"])
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^{job} (PENDING|RUNNING|CONFIGURING)$", listed.stdout, re.M), listed.stdout
    assert wait_finished(cluster, job) == "COMPLETED"
    finished = time.monotonic()
    # Still known shortly after the end: purging follows MinJobAge, not the job's end.
    time.sleep(max(0, cluster.min_job_age / 2 - (time.monotonic() - finished)))
    assert job_state(cluster, job) == "COMPLETED"
    # slurmctld purges on a periodic pass, so allow MinJobAge plus one pass and some slack.
    deadline = finished + cluster.min_job_age + 90
    while job_state(cluster, job) is not None:
        assert time.monotonic() < deadline, f"job {job} still listed after MinJobAge"
        time.sleep(2)
    harness.log(f"job {job} purged {time.monotonic() - finished:.0f} s after it finished")
    assert time.monotonic() - finished >= cluster.min_job_age - 2


@pytest.mark.cluster
def test_root_venv_imports_servatus_with_python_3_13_in_a_step(
    slurm_cluster: SlurmCluster,
) -> None:
    cluster = slurm_cluster
    work = unique_dir(cluster, "venv")
    code = (
        "import importlib.metadata as m, sys, servatus; "
        "print(sys.version_info[:2], m.version('servatus-core'), servatus.__file__)"
    )
    script = (
        "#!/bin/sh\n"
        f"/usr/bin/srun --ntasks=1 --export=NIL {cluster.venv_python} -c {shlex.quote(code)}\n"
    )
    put_script(cluster, f"{work}/job.sh", script)
    job = submit(cluster, f"{work}/job.sh", f"{work}/job.out")
    assert wait_finished(cluster, job) == "COMPLETED"
    text = Path(f"{work}/job.out").read_text()
    version = importlib.metadata.version("servatus-core")
    assert f"(3, 13) {version} /opt/servatus/lib/python3.13/site-packages/servatus/" in text


@pytest.mark.cluster
@pytest.mark.cluster_alone  # restarts Slurm with other settings
def test_scontrol_reports_the_settings_started_with(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster

    def config() -> dict[str, str]:
        result = cluster.ssh([f"{cluster.slurm_bin}/scontrol", "show", "config"])
        assert result.returncode == 0, result.stderr
        pairs = (line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        return {key.strip(): value.strip() for key, value in pairs}

    first = config()
    assert first["MinJobAge"] == f"{cluster.min_job_age} sec"
    assert first["ProctrackType"] == cluster.proctrack == "proctrack/linuxproc"
    with cluster.configured(min_job_age=300, proctrack="proctrack/cgroup"):
        during = config()
        assert during["MinJobAge"] == "300 sec"
        assert during["ProctrackType"] == "proctrack/cgroup"
        # Steps really run under proctrack/cgroup, not just a configuration string.
        work = unique_dir(cluster, "cgroup")
        script = (
            "#!/bin/sh\n"
            "/usr/bin/srun --ntasks=1 --export=NIL /bin/sh -c 'exit 3'\n"
            'echo "step-exit=$?"\n'
        )
        put_script(cluster, f"{work}/job.sh", script)
        job = submit(cluster, f"{work}/job.sh", f"{work}/job.out")
        assert wait_finished(cluster, job) == "COMPLETED"
        assert "step-exit=3" in Path(f"{work}/job.out").read_text()
    assert config()["MinJobAge"] == f"{cluster.min_job_age} sec"
    assert config()["ProctrackType"] == "proctrack/linuxproc"


@pytest.mark.cluster
def test_login_node_case_runs_servatus_and_slurm_locally(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    version = cluster.login(["servatus", "--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"servatus {importlib.metadata.version('servatus')}"
    who = cluster.login(["/bin/sh", "-c", "id -un; echo $HOME; env | sort | cut -d= -f1"])
    lines = who.stdout.split()
    assert lines[:2] == ["alice", "/home/alice"]
    assert "PYTEST_CURRENT_TEST" not in lines  # a fresh login, not this process's environment
    queue = cluster.login([f"{cluster.slurm_bin}/squeue", "--me", "-h"])
    assert queue.returncode == 0, queue.stderr
    work = unique_dir(cluster, "local")
    wrote = cluster.login(["/bin/sh", "-c", f"echo local > {work}/mark"], cwd=work)
    assert wrote.returncode == 0, wrote.stderr
    mark = Path(f"{work}/mark")
    assert mark.read_text() == "local\n"
    assert mark.stat().st_uid == cluster.uid


@pytest.mark.cluster
def test_a_second_user_shares_alice_group_and_nothing_else(slurm_cluster: SlurmCluster) -> None:
    """mallory, on the login node: her own uid and group plus alice's primary group, her own
    home; alice's groups are alice's alone; alice's private directories stay closed to her,
    a directory of alice's group (2770) is open to her, and she sees alice's jobs' names."""
    cluster = slurm_cluster
    uid, gid = cluster.second_ids()
    who = cluster.as_second_user(["/bin/sh", "-c", "id -u; id -g; id -G; echo $HOME"])
    assert who.returncode == 0, who.stderr
    assert who.stdout.split("\n")[:4] == [
        str(uid),
        str(gid),
        f"{gid} {cluster.gid}",
        "/home/mallory",
    ]
    assert uid not in (0, cluster.uid) and gid != cluster.gid
    alice = cluster.login(["/usr/bin/id", "-G"])
    assert alice.stdout.split() == [str(cluster.gid)]
    closed = cluster.as_second_user(["/bin/ls", cluster.work_root])
    assert closed.returncode != 0 and "Permission denied" in closed.stderr
    shared = cluster.scratch / f"shared-{next(_serial)}-{os.getpid()}"
    shared.mkdir()
    try:
        os.chown(shared, 0, cluster.gid)
        shared.chmod(0o2770)
        made = cluster.as_second_user(["/usr/bin/touch", f"{shared}/hers"])
        assert made.returncode == 0, made.stderr
        assert (shared / "hers").stat().st_uid == uid
        queue = cluster.as_second_user([f"{cluster.slurm_bin}/squeue", "-h", "-u", cluster.user])
        assert queue.returncode == 0, queue.stderr
    finally:
        shutil.rmtree(shared)


@pytest.mark.cluster
def test_bwrap_sandboxes_as_alice_in_a_job_and_on_the_login_node(
    slurm_cluster: SlurmCluster,
) -> None:
    """The daemons run in a namespace entered by pivot_root, not under chroot(2), so alice may
    create the user namespace bubblewrap needs: in a batch script, in an srun step, and on the
    login node (the kernel refuses that to any chrooted process)."""
    cluster = slurm_cluster
    work = unique_dir(cluster, "bwrap")
    bwrap = "/usr/bin/bwrap --ro-bind / / --unshare-user --unshare-pid"
    script = (
        "#!/bin/sh\n"
        'echo "user=$(id -un)"\n'
        f"{bwrap} /bin/true\n"
        'echo "batch-bwrap=$?"\n'
        f"/usr/bin/srun --ntasks=1 --export=NIL {bwrap} /bin/true\n"
        'echo "step-bwrap=$?"\n'
        f"/usr/bin/srun --ntasks=1 --export=NIL {bwrap} /bin/sh -c 'echo \"inner-pid=$$\"'\n"
    )
    put_script(cluster, f"{work}/job.sh", script)
    job = submit(cluster, f"{work}/job.sh", f"{work}/job.out")
    assert wait_finished(cluster, job) == "COMPLETED"
    text = Path(f"{work}/job.out").read_text()
    assert "No permissions to create a new namespace" not in text, text
    for line in ("user=alice", "batch-bwrap=0", "step-bwrap=0", "inner-pid=2"):
        assert line in text.splitlines(), text
    local = cluster.login([*bwrap.split(), "--proc", "/proc", "/bin/sh", "-c", "echo $$"])
    assert (local.returncode, local.stdout) == (0, "2\n"), local.stderr


@pytest.mark.cluster
@pytest.mark.cluster_alone  # stops sshd
def test_stopping_sshd_cuts_the_ssh_way_in_and_starting_restores_it(
    slurm_cluster: SlurmCluster,
) -> None:
    cluster = slurm_cluster
    assert cluster.ssh("true").returncode == 0  # a master connection exists now
    with cluster.sshd_stopped():
        started = time.monotonic()
        cut = cluster.ssh("true")
        assert cut.returncode == 255
        assert time.monotonic() - started < 30
        # The login node itself still works: only the way in is gone.
        assert cluster.login(["/bin/true"]).returncode == 0
    assert cluster.ssh("true").returncode == 0


@pytest.mark.cluster
@pytest.mark.cluster_alone  # runs up, and times it
def test_a_second_up_with_the_same_settings_changes_nothing(slurm_cluster: SlurmCluster) -> None:
    root = slurm_cluster.root
    pids = {daemon: harness.pid_of(root, daemon) for daemon in harness.DAEMONS}
    before = harness.read_state()
    assert before is not None and before.holder is not None and before.namespace is not None
    conf = root / "etc/slurm/slurm.conf"
    mtime = conf.stat().st_mtime_ns
    started = time.monotonic()
    harness.up(min_job_age=slurm_cluster.min_job_age, proctrack=slurm_cluster.proctrack)
    assert time.monotonic() - started < 10
    assert {daemon: harness.pid_of(root, daemon) for daemon in harness.DAEMONS} == pids
    assert None not in pids.values()
    assert conf.stat().st_mtime_ns == mtime
    after = harness.read_state()
    assert after is not None
    assert (after.holder, after.namespace) == (before.holder, before.namespace)
    # Every daemon runs in that one namespace, at its root, which is the root: not chrooted.
    assert before.namespace != harness.namespace_of(os.getpid())
    for pid in pids.values():
        assert pid is not None
        assert harness.namespace_of(pid) == before.namespace
        assert os.readlink(f"/proc/{pid}/root") == "/"
        assert harness.identity(f"/proc/{pid}/root") == harness.identity(root)


def live_processes_in(root: Path) -> list[int]:
    return [pid for pid in harness.processes_in(root) if not harness.zombie(pid)]


def ticks_since_boot() -> int:
    """Now, in the unit of /proc/PID/stat's start time."""
    ticks = os.sysconf("SC_CLK_TCK")
    return int(float(Path("/proc/uptime").read_text().split()[0]) * ticks)


def still_in(namespace: str, before: int) -> list[int]:
    """Live processes in the mount namespace ``namespace`` that started before ``before``
    (a process started later is in a new namespace that reuses the number, not in ours)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or harness.namespace_of(int(entry.name)) != namespace:
            continue
        try:
            started = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            continue
        if started <= before and not harness.zombie(int(entry.name)):
            found.append(int(entry.name))
    return found


def outside_mounts(root: Path) -> list[str]:
    """This machine's mounts of the root or below it, /scratch included."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [
        line.split()[4]
        for line in lines
        if str(root) in line.split()[3] or line.split()[4].startswith(str(root))
    ]


@pytest.mark.cluster
@pytest.mark.cluster_alone  # takes the cluster down
def test_down_leaves_nothing_behind_and_up_restores(slurm_cluster: SlurmCluster) -> None:
    """Runs the command line as a user would; brings the cluster back for later tests."""
    cluster = slurm_cluster
    root = cluster.root
    work = unique_dir(cluster, "down")
    put_script(cluster, f"{work}/job.sh", "#!/bin/sh\n/usr/bin/sleep 300\n")
    running = submit(cluster, f"{work}/job.sh", f"{work}/job.out")  # down must end its step too
    deadline = time.monotonic() + 30
    while job_state(cluster, running) != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    before = {daemon: harness.pid_of(root, daemon) for daemon in harness.DAEMONS}
    state = harness.read_state()
    assert state is not None and state.namespace is not None and state.holder is not None
    assert sorted(outside_mounts(root)) == ["/scratch"]

    # This session holds the cluster, so a plain down refuses rather than pull it from under us.
    refused = subprocess.run([sys.executable, HARNESS, "down"], capture_output=True, text=True)
    assert refused.returncode == 1
    assert "a test session is using the cluster" in refused.stderr
    assert {daemon: harness.pid_of(root, daemon) for daemon in harness.DAEMONS} == before

    started = time.monotonic()
    down = subprocess.run(
        [sys.executable, HARNESS, "down", "--force"], capture_output=True, text=True
    )
    harness.log(f"down took {time.monotonic() - started:.1f} s")
    assert down.returncode == 0, down.stderr
    assert live_processes_in(root) == []
    for pid in [*before.values(), state.holder]:
        assert pid is not None
        assert not Path(f"/proc/{pid}").exists() or harness.zombie(pid)
    # The namespace is gone with its last process, and its mounts (/proc, /run, ...) with it.
    assert still_in(state.namespace, ticks_since_boot()) == []
    mounts = Path("/proc/mounts").read_text()
    assert str(root) not in mounts
    assert " /scratch " not in mounts
    assert outside_mounts(root) == []
    assert not harness.SSH_INCLUDE.exists()
    assert not harness.RUN_DIR.exists()
    assert root.is_dir()  # the cache stays
    status = subprocess.run([sys.executable, HARNESS, "status"], capture_output=True, text=True)
    assert status.returncode == 1
    assert "running" not in status.stdout

    settings = ["--min-job-age", str(harness.DEFAULT_MIN_JOB_AGE)]
    settings += ["--proctrack", harness.DEFAULT_PROCTRACK, "--wheels", str(cluster.wheels)]
    started = time.monotonic()
    up = subprocess.run([sys.executable, HARNESS, "up", *settings], capture_output=True, text=True)
    harness.log(f"up from cache took {time.monotonic() - started:.1f} s")
    assert up.returncode == 0, up.stderr
    env = json.loads(
        subprocess.run([sys.executable, HARNESS, "env"], capture_output=True, text=True).stdout
    )
    assert env["running"] is True
    assert (env["root"], env["uid"], env["min_job_age"]) == (str(root), cluster.uid, 30)
    assert cluster.ssh("/usr/bin/squeue --me -h").returncode == 0
    assert Path(f"{work}/job.sh").exists()  # scratch is cluster storage: it survives a restart


@pytest.mark.cluster
@pytest.mark.cluster_alone  # kills every cluster process
def test_up_recovers_when_every_cluster_process_was_killed(slurm_cluster: SlurmCluster) -> None:
    """A crash: SIGKILL to every process of the cluster, the namespace's holder included. The
    namespace and its mounts die with them; `up` then starts a new one and the cluster works."""
    cluster = slurm_cluster
    root = cluster.root
    state = harness.read_state()
    assert state is not None and state.namespace is not None
    victims = harness.processes_in(root)
    assert state.holder in victims
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    crashed = ticks_since_boot()
    deadline = time.monotonic() + 10
    while live_processes_in(root) or still_in(state.namespace, crashed):
        assert time.monotonic() < deadline, live_processes_in(root)
        time.sleep(0.1)
    assert harness.status()["up"] is False
    assert sorted(outside_mounts(root)) == ["/scratch"]  # outside, only what up made

    started = time.monotonic()
    harness.up(min_job_age=cluster.min_job_age, proctrack=cluster.proctrack, wheels=cluster.wheels)
    harness.log(f"up after a crash took {time.monotonic() - started:.1f} s")
    after = harness.read_state()
    assert after is not None and after.holder not in victims
    assert harness.status()["up"] is True
    assert sorted(outside_mounts(root)) == ["/scratch"]
    assert cluster.ssh("/usr/bin/squeue --me -h").returncode == 0
    idle = cluster.login([f"{cluster.slurm_bin}/sinfo", "-h", "-p", harness.PARTITION, "-o", "%T"])
    assert idle.stdout.strip() == "idle"


@pytest.mark.cluster
@pytest.mark.cluster_alone  # fails n2 and needs n1..n3 idle
def test_each_node_has_its_own_slurmd_and_its_steps_are_told_apart_then_one_fails_and_returns(
    slurm_cluster: SlurmCluster,
) -> None:
    """n1..n3 run beside the first node, each its own slurmd; ``node_processes`` finds each
    node's slurmstepd daemons (and the processes under them) and no other node's, which is what
    ``fail_node`` kills: the failed node's job ends NODE_FAIL, the others run on."""
    cluster = slurm_cluster
    daemons = harness.status()["daemons"]
    assert all(daemons[f"slurmd@{node}"] for node in cluster.nodes), daemons  # type: ignore[index]
    assert {n: s for n, s in cluster.node_states().items() if n in cluster.nodes} == dict.fromkeys(
        cluster.nodes, "idle"
    )
    work = unique_dir(cluster, "nodes")
    put_script(cluster, f"{work}/job.sh", "#!/bin/sh\n/usr/bin/srun /usr/bin/sleep 120\n")
    where = [*cluster.nodes, harness.node_name()]
    jobs = {}
    for node in where:
        partition = harness.PARTITION if node == harness.node_name() else cluster.nodes_partition
        jobs[node] = submit(
            cluster, f"{work}/job.sh", f"{work}/{node}.out", f"--partition={partition}", "-w", node
        )
    try:

        def placed() -> dict[str, dict[int, str]] | None:
            found = {node: harness.node_processes(node) for node in where}
            steps = {
                n: [c for c in p.values() if c.startswith("slurmstepd:")] for n, p in found.items()
            }
            sleeping = all("/usr/bin/sleep 120" in p.values() for p in found.values())
            return found if sleeping and all(len(s) == 2 for s in steps.values()) else None

        deadline = time.monotonic() + 60
        while (found := placed()) is None:
            assert time.monotonic() < deadline, {n: harness.node_processes(n) for n in where}
            time.sleep(0.5)
        for node, processes in found.items():
            job = jobs[node]
            steps = sorted(c for c in processes.values() if c.startswith("slurmstepd:"))
            assert steps == [f"slurmstepd: [{job}.0]", f"slurmstepd: [{job}.batch]"], (
                node,
                processes,
            )
            assert "/usr/bin/sleep 120" in processes.values(), (node, processes)
            listed = cluster.ssh([f"{cluster.slurm_bin}/squeue", "-h", "-j", str(job), "-o", "%N"])
            assert listed.stdout.strip() == node, (node, listed.stdout)

        killed = cluster.fail_node("n2", "test_harness")
        assert set(killed) == set(found["n2"]) | {daemons["slurmd@n2"]}, (killed, found["n2"])  # type: ignore[index]
        assert cluster.node_states()["n2"].startswith("down")
        assert harness.node_processes("n2") == {}
        assert wait_finished(cluster, jobs["n2"]) == "NODE_FAIL"
        for node in ("n1", "n3", harness.node_name()):
            assert job_state(cluster, jobs[node]) == "RUNNING", node
            assert all(pid not in killed for pid in found[node]), node
        cluster.return_node("n2")  # in service: idle, or already given a concurrent test's job
        assert cluster.node_states()["n2"] in ("idle", "mixed", "allocated")
        assert harness.status()["daemons"]["slurmd@n2"] not in (None, daemons["slurmd@n2"])  # type: ignore[index]
    finally:
        cluster.ssh([f"{cluster.slurm_bin}/scancel", *map(str, jobs.values())])
        for node in cluster.nodes:
            if not cluster.node_states().get(node, "").startswith(("idle", "mixed", "alloc")):
                cluster.return_node(node)
