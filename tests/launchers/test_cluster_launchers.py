"""The three launchers on the real one-node Slurm cluster (``slurm_cluster``), end to end.

Each test runs the same 2-Task sweep as a user would from a laptop: ``Campaign.ensure``, then
``submit(plan(profile))`` over SSH, then ``status()`` until nothing moves. Task ``ok`` must read
SUCCEEDED and Task ``bad`` FAILED with exit 3, and each records what it was started with.

Apptainer is the stand-in (``stand_in_apptainer.py``) installed on the cluster's shared scratch
with a SIF-headed image file beside it; the compute side runs it with its own
``/usr/bin/python3``. The bubblewrap plugin only shapes the step on the submitting side, so it is
installed here, outside, and the compute node needs only ``/usr/bin/bwrap``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import PROBE, install_stand_in, make_image, sweep

from cluster.fixture import SlurmCluster
from servatus.journal import store
from servatus.tasks import Task
from testkit import install_distribution

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "docs" / "examples" / "servatus-bubblewrap"
PYTHON = "/usr/bin/python3"
BWRAP = "/usr/bin/bwrap"
NAMESPACE_REFUSED = "No permissions to create a new namespace"


class Area:
    """One test's directory on the cluster's scratch (same path inside and outside)."""

    def __init__(self, cluster: SlurmCluster, base: str, local: Path) -> None:
        self.cluster = cluster
        self.base = Path(base)
        self.local = local

    def give(self, path: Path, mode: int = 0o644) -> Path:
        os.chmod(path, mode)
        os.chown(path, self.cluster.uid, self.cluster.gid)
        return path

    def config(self, target_lines: str) -> Path:
        text = self.cluster.profile_toml(
            ssh=True, work_root=str(self.base), log_root=str(self.base / "logs")
        )
        text = text.replace("[target]\n", f"[target]\n{target_lines}", 1)
        path = self.local / "SERVATUS.toml"
        path.write_text(text)
        return path

    def tasks(self, program: Sequence[str], *paths: str) -> list[Task]:
        out = self.base / "out"
        return [
            Task("ok", [*program, str(out / "ok.json"), "0", *paths], env={"SEED": "it's 7"}),
            Task("bad", [*program, str(out / "bad.json"), "3"]),
        ]

    def record(self, key: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.base / "out" / f"{key}.json").read_text())
        return data

    def cancel_own(self) -> None:
        """Cancel the jobs this test's campaign submitted, by number: never every job of
        alice's, since other tests' run beside this one (``cluster.prelude``)."""
        state = self.local / "state"
        if not state.exists():
            return
        jobs = [str(receipt.job) for receipt in store.read(state).receipts]
        if jobs:
            self.cluster.login([f"{self.cluster.slurm_bin}/scancel", *jobs])


@pytest.fixture
def area(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Area]:
    base = f"{slurm_cluster.work_root}/launchers-{uuid.uuid4().hex[:8]}"
    slurm_cluster.make_dirs(base, f"{base}/logs", f"{base}/out", f"{base}/bin")
    made = Area(slurm_cluster, base, tmp_path)
    made.give(Path(shutil.copy(PROBE, Path(base) / "probe.py")))
    try:
        yield made
    finally:
        made.cancel_own()


def check_outcome(outcome: Mapping[str, tuple[str, int | None, int | None]]) -> int:
    assert {key: value[:2] for key, value in outcome.items()} == {
        "ok": ("SUCCEEDED", 0),
        "bad": ("FAILED", 3),
    }
    job = outcome["ok"][2]
    assert job is not None and outcome["bad"][2] == job
    return job


def reserved(record: Mapping[str, Any], key: str, slot: int, job: int) -> dict[str, str]:
    env = dict(record["env"])
    end_time = env.pop("SERVATUS_JOB_END_TIME")
    assert int(end_time) > time.time() - 600
    allocation = env.pop("SERVATUS_ALLOCATION_ID")
    assert len(allocation) == 24
    assert env.pop("SERVATUS_JOB_ID") == str(job)
    assert env.pop("SERVATUS_TASK_KEY") == key
    assert env.pop("SERVATUS_SLOT") == str(slot)
    return env


def test_direct_launcher(area: Area) -> None:
    config = area.config("")
    outcome = sweep(config, area.local / "state", area.tasks([PYTHON, str(area.base / "probe.py")]))
    job = check_outcome(outcome)
    ok = area.record("ok")
    assert ok["cwd"] == str(area.base)
    assert reserved(ok, "ok", 0, job) == {"SEED": "it's 7"}
    assert reserved(area.record("bad"), "bad", 1, job) == {}


def test_apptainer_launcher_with_the_stand_in(area: Area) -> None:
    """What a site with Apptainer on its compute nodes gets: `apptainer exec --cleanenv` runs
    the Task from work_root with only its own variables (APPTAINERENV_*), no SLURM_*, and a
    relative args[0] found on the container's PATH."""
    apptainer = area.give(install_stand_in(area.base / "bin" / "apptainer"), 0o755)
    image = area.give(make_image(area.base / "images" / "train.sif"))
    area.give(image.parent, 0o755)
    config = area.config(
        f'apptainer = "{apptainer}"\nimage = "{image}"\nbinds = ["/usr/share:/usr/share:ro"]\n'
    )
    tasks = area.tasks(["python3", str(area.base / "probe.py")])
    job = check_outcome(sweep(config, area.local / "state", tasks))
    added = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "APPTAINER_CONTAINER": str(image),
        "APPTAINER_NAME": "train.sif",
    }
    ok = area.record("ok")
    assert ok["cwd"] == str(area.base)
    assert reserved(ok, "ok", 0, job) == {"SEED": "it's 7", **added}
    assert reserved(area.record("bad"), "bad", 1, job) == added


def test_apptainer_gpu_steps_with_the_stand_in(area: Area) -> None:
    """What --nv on a GPU step gets: Apptainer accepts it on a node without NVIDIA files, and
    Slurm's step-local CUDA_VISIBLE_DEVICES is carried only when Slurm set it. This cluster's
    fake GRES are regular files, so Slurm schedules the GPUs but sets no CUDA_VISIBLE_DEVICES."""
    apptainer = area.give(install_stand_in(area.base / "bin" / "apptainer"), 0o755)
    image = area.give(make_image(area.base / "train.sif"))
    config = area.config(f'apptainer = "{apptainer}"\nimage = "{image}"\n')
    tasks = area.tasks(["python3", str(area.base / "probe.py")])
    job = check_outcome(sweep(config, area.local / "state", tasks, profile="gpu"))
    for slot, key in enumerate(("ok", "bad")):
        env = reserved(area.record(key), key, slot, job)
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert not [name for name in env if name.startswith("SLURM_")]


def bwrap_refusal(cluster: SlurmCluster) -> str | None:
    """Why bwrap cannot sandbox on this cluster's node, or None when it can."""
    probe = cluster.login(
        [
            BWRAP,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-pid",
            "/bin/true",
        ]
    )
    return None if probe.returncode == 0 else probe.stderr.strip()


def test_bubblewrap_plugin(area: Area, tmp_path: Path) -> None:
    refusal = bwrap_refusal(area.cluster)
    assert refusal is None, f"bwrap cannot make its namespaces in a job: {refusal}"
    site = install_distribution(EXAMPLE, tmp_path / "site")
    config = area.config('launcher = "bubblewrap"\n')
    tasks = area.tasks([PYTHON, str(area.base / "probe.py")], str(area.base / "in"), "/etc/x")
    lines, state = tmp_path / "tasks.jsonl", area.local / "state"
    lines.write_text(
        "".join(
            json.dumps({"key": t.key, "args": list(t.args), "env": dict(t.env)}) + "\n"
            for t in tasks
        )
    )
    run = subprocess.run(
        [sys.executable, str(HERE / "launch_helpers.py"), str(config), str(state), str(lines)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(HERE.parent)])},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    outcome = {
        key: (state, code, job) for key, (state, code, job) in json.loads(run.stdout).items()
    }
    job = check_outcome(outcome)
    ok = area.record("ok")
    assert reserved(ok, "ok", 0, job) == {"SEED": "it's 7"}
    assert ok["writes"] == {
        str(area.base / "in"): "ok",
        "/etc/x": "OSError: Read-only file system",
    }
    assert ok["pid"] == 2
    assert ok["visible_pids"] == [1, 2]
    assert reserved(area.record("bad"), "bad", 1, job) == {}
