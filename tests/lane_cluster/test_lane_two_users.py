"""Two real users of one cluster (issue #30, "Proof"): alice runs a lease, a plain Task, a chain
and a held job through the real CLI on the login node, while mallory, another user of the login
node in alice's project group and nothing more (``harness.SECOND_USER``), attacks the shared
``log_root`` with the rights that group gives her.

``log_root`` here is a project directory, ``root:<alice's group>`` mode ``2770``: group-writable,
setgid, no sticky bit, so mallory can create, rename and delete any entry in it. ``work_root`` is
alice's own, as in every lane. Everything mallory knows she reads as herself: job names
(``servatus-<allocation id>``) and numbers from ``squeue``.

Each scenario has its own lane and thread, all at once (about the longest, the chain's
settling). A scenario records what it saw; the tests below judge it.

- **lease**: mallory renames a running lease's orders directory aside and plants hers, holding
  an order for the lease's slot and its claim already made, whose step would append ``id -u`` to
  a file of hers; alice then ``start``s another Task into the lease.
- **marker**: a plain Task that exits 3; mallory plants ``end.0.0`` for its job while it runs.
- **chain**: link 1 of a chain exits 3 before its pre-limit signal; mallory plants a handoff
  and an ``over`` file for link 1's job while it runs.
- **output**: the CLI's ``sbatch`` is made ``--hold``; mallory plants a symlink at one job's
  allocation log (``servatus-<id>-<job>.out``) and at another's step log
  (``servatus-<id>-<job>.0.out``), each to a file of alice's; alice releases both. (Slurm
  itself follows such a link at ``#SBATCH --output``, which is why that is ``/dev/null``.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import FINAL, Lane, make_lane, steps_of, task_of, wait_until
from lane_traps import wrap_sbatch

from cluster import prelude
from cluster.fixture import SlurmCluster
from servatus.config import Profile
from servatus.direct import DirectLauncher
from servatus.lease import claim_name, orders_directory
from servatus.script import CHAIN_VARIABLES, LeaseOrder
from servatus_slurm.lease import render_order
from servatus_slurm.script import RUNTIME_VARIABLES

pytestmark = pytest.mark.cluster

HER_STEP = "0ddba11c0ffee0ddba11c0ff"
"""The step id of mallory's forged order (any 24 hex digits will do)."""
VICTIM_TEXT = "alice's own words, never to be overwritten\n"


@contextlib.contextmanager
def project_directory(slurm_cluster: SlurmCluster) -> Iterator[Path]:
    """``/scratch/project-*``: root's, alice's group, ``2770``; its ``logs`` the same (the shared
    ``log_root``), and ``loot``, mallory's own, writable by all, where her order would write."""
    base = slurm_cluster.scratch / f"project-{uuid.uuid4().hex[:8]}"
    for directory in (base, base / "logs"):
        directory.mkdir()
        os.chown(directory, 0, slurm_cluster.gid)
        directory.chmod(0o2770)
    uid, gid = slurm_cluster.second_ids()
    (base / "loot").mkdir()
    os.chown(base / "loot", uid, gid)
    (base / "loot").chmod(0o777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Scene:
    """One scenario's lane with the project ``log_root``, and mallory's hands on it."""

    def __init__(self, lane: Lane, project: Path, name: str) -> None:
        self.lane, self.cluster = lane, lane.cluster
        self.logs = project / "logs" / name
        self.logs.mkdir()
        os.chown(self.logs, 0, self.cluster.gid)
        self.logs.chmod(0o2770)
        self.loot = project / "loot" / f"{name}.id"
        (lane.launch / "SERVATUS.toml").unlink()
        lane.put(lane.launch / "SERVATUS.toml", lane.toml(log_root=str(self.logs)))

    def mallory(self, script: str, *, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """A shell of mallory's on the login node."""
        done = self.cluster.as_second_user(["/bin/sh", "-c", script], input=input, timeout=60)
        assert done.returncode == 0, (script, done.stdout, done.stderr)
        return done

    def her_squeue(self) -> dict[str, tuple[int, str]]:
        """alice's jobs as mallory sees them: name -> (job, state)."""
        listed = self.mallory(f"{self.cluster.slurm_bin}/squeue -h -u alice -o '%A|%j|%T'")
        rows = {}
        for line in listed.stdout.splitlines():
            job, name, state = line.strip().split("|")
            rows[name] = (int(job), state)
        return rows

    def job_of(self, allocation_id: str) -> int:
        """The job mallory reads in squeue for an allocation id (waiting until it is listed)."""
        name = f"servatus-{allocation_id}"
        found = wait_until(
            f"{name} in mallory's squeue",
            lambda: self.her_squeue().get(name),
            seconds=60,
        )
        return found[0]

    def kinds(self, allocation_id: str) -> list[str]:
        """The names in log_root that start with ``servatus-<id>.``, prefix cut."""
        prefix = f"servatus-{allocation_id}."
        return sorted(
            p.name.removeprefix(prefix) for p in self.logs.iterdir() if p.name.startswith(prefix)
        )

    def readings(
        self, into: list[tuple[str, int | None]], key: str
    ) -> Callable[[], dict[str, Any]]:
        def read() -> dict[str, Any]:
            document = self.lane.status()
            task = task_of(document, key)
            reading = (task["execution"], task["exit_code"])
            if not into or into[-1] != reading:
                into.append(reading)
            return document

        return read


def _forged_order(scene: Scene, lease: str, program: list[str]) -> str:
    """mallory's order for alice's lease, rendered as the client renders one (the text is no
    secret: the format is public and the profile's paths are in alice's SERVATUS.toml)."""
    target = Profile.load(scene.lane.launch / "SERVATUS.toml").target
    carried = (*RUNTIME_VARIABLES, *CHAIN_VARIABLES)
    command = DirectLauncher().command(target, program, {}, inherit=carried, gpus=0)
    order = LeaseOrder(
        step_id=HER_STEP,
        lease_id=lease,
        task_key="loot",
        command=command,
        stdin=b"",
        cpus=1,
        memory_mib=100,
        gpus=0,
        inherit=tuple(RUNTIME_VARIABLES),
    )
    return render_order(order, target)


def _slow_exit(key: str, seconds: int, code: int) -> dict[str, Any]:
    """A Task that leaves ``runs/<key>.<job>`` in work_root, sleeps, then exits ``code``."""
    script = f'/usr/bin/touch "runs/{key}.$SERVATUS_JOB_ID"; /bin/sleep {seconds}; exit {code}'
    return {"key": key, "args": ["/bin/sh", "-c", script]}


def _final(read: Callable[[], dict[str, Any]], key: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        document = read()
        return document if task_of(document, key)["execution"] in FINAL else None

    return probe


# -- scenarios ----------------------------------------------------------------------------------


def lease_swap(scene: Scene, seen: dict[str, Any]) -> None:
    """(a) The lease: her directory under the orders directory's name, with a claimed order."""
    lane = scene.lane
    lane.put_worker()
    lane.limit("00:05:00", "00:00:20")
    lane.ok(
        "ensure", "state", lane.tasks_file([lane.worker_task("keep", "sleep", "45")], "keep.jsonl")
    )
    [(lease, job)], _ = lane.lease("--hold", "2")
    seen["lease"], seen["job"] = lease, job
    wait_until("the lease running", lambda: lane.job_state(job) == "RUNNING", seconds=90)
    seen["start_keep"] = lane.ok("start", "state", "keep.jsonl", "--lease", lease).stdout
    lane.wait_for(
        "keep running", lambda d: task_of(d, "keep")["execution"] == "RUNNING", seconds=60
    )
    her_job = scene.job_of(lease)
    seen["her_job"] = her_job
    orders = scene.logs / orders_directory(lease)
    claim = claim_name(HER_STEP, her_job)
    order = _forged_order(scene, lease, ["/bin/sh", "-c", f"/usr/bin/id -u >>{scene.loot}"])
    scene.mallory(
        f"mv {orders} {scene.logs}/aside-mallory && mkdir -m 777 {orders} && "
        f"cat >{orders}/{HER_STEP} && chmod 666 {orders}/{HER_STEP} && "
        f"ln {orders}/{HER_STEP} {orders}/{claim}",
        input=order,
    )
    seen["swapped_at"] = time.time()
    seen["planted"] = sorted(p.name for p in orders.iterdir())
    lane.tasks_file([lane.worker_task("late", "sleep", "5")], "late.jsonl")
    seen["start_late"] = lane.servatus("start", "state", "late.jsonl", "--lease", lease)
    # The lease polls every 5 s: four polls and more pass while keep runs on.
    seen["final_keep"] = lane.wait_for(
        "keep final", lambda d: task_of(d, "keep")["execution"] in FINAL, seconds=120
    )
    time.sleep(max(0.0, seen["swapped_at"] + 25 - time.time()))
    seen["lease_after"] = lane.job_state(job)
    seen["loot"] = scene.loot.read_text() if scene.loot.exists() else None
    seen["her_markers"] = scene.kinds(HER_STEP)
    seen["claim_links"] = (orders / claim).stat().st_nlink if (orders / claim).exists() else None
    seen["status"] = lane.status()
    seen["runs"] = {key: lane.run_records(key) for key in ("keep", "late")}
    seen["cancel"] = lane.servatus("cancel", "state", "--allocation", lease)


def forged_end(scene: Scene, seen: dict[str, Any]) -> None:
    """(b) A plain Task exiting 3 after 20 s; her ``end.0.0`` for its job while it runs."""
    lane = scene.lane
    lane.submitted([_slow_exit("three", 20, 3)])
    [allocation] = [a["allocation_id"] for a in lane.status()["attempts"]]
    job = scene.job_of(allocation)
    seen["allocation"], seen["job"] = allocation, job
    forged = scene.logs / f"servatus-{allocation}.{job}.end.0.0"
    wait_until("the Task running", lambda: lane.job_state(job) == "RUNNING", seconds=60)
    scene.mallory(f"/usr/bin/touch {forged}")
    readings: list[tuple[str, int | None]] = []
    read = scene.readings(readings, "three")
    seen["failed"] = wait_until("three final", _final(read, "three"), seconds=120, every=1.5)
    wait_until("Slurm forgets the job", lambda: lane.job_state(job) is None, seconds=150, every=3)
    seen["settled"] = read()
    seen["forged_owner"] = forged.stat().st_uid
    scene.mallory(f"rm -f {forged}")
    seen["after_delete"] = read()
    seen["readings"] = readings
    seen["kinds"] = scene.kinds(allocation)
    seen["runs"] = lane.run_records("three")


def forged_handoff(scene: Scene, seen: dict[str, Any]) -> None:
    """(b) Link 1 of a chain exits 3 after 15 s, long before its pre-limit signal (2-minute
    links, 20 s); her ``handoff.0`` and ``over`` file for link 1's job while it runs."""
    lane = scene.lane
    lane.limit("00:02:00", "00:00:20")
    lane.submitted([_slow_exit("c", 15, 3)], "--budget", "00:06:00")
    links = [(a["allocation_id"], a["job"]) for a in lane.status()["attempts"]]
    seen["links"] = links
    (first, first_job), *_ = links
    wait_until("link 1 running", lambda: lane.job_state(first_job) == "RUNNING", seconds=60)
    her_job = scene.job_of(first)
    seen["her_job"] = her_job
    handoff = scene.logs / f"servatus-{first}.{her_job}.handoff.0"
    over = scene.logs / f".servatus-{first}.{her_job}.over"
    scene.mallory(f"/usr/bin/touch {handoff} {over}")
    readings: list[tuple[str, int | None]] = []
    read = scene.readings(readings, "c")
    seen["failed"] = wait_until("c final", _final(read, "c"), seconds=150, every=1.5)
    states: dict[int, list[str | None]] = {job: [] for _, job in links}

    def links_gone() -> bool | None:
        read()
        for _, job in links:
            state = lane.job_state(job)
            if not states[job] or states[job][-1] != state:
                states[job].append(state)
        return True if all(lane.job_state(job) is None for _, job in links) else None

    wait_until("Slurm forgets every link", links_gone, seconds=240, every=3)
    seen["states"] = states
    seen["settled"] = read()
    seen["readings"] = readings
    seen["kinds"] = {link: scene.kinds(link) for link, _ in links}
    seen["runs"] = lane.run_records("c")
    scene.mallory(f"rm -f {handoff} {over}")
    seen["after_delete"] = read()


HOLDING_SBATCH = """\
#!/bin/sh
case " $* " in
*" --parsable "*) exec /usr/bin/sbatch --hold "$@" ;;
esac
exec /usr/bin/sbatch "$@"
"""


def planted_logs(scene: Scene, seen: dict[str, Any]) -> None:
    """(c) Two held jobs of alice's, one Task each: at the first, a link of hers at the
    allocation's log name (``servatus-<id>-<job>.out``); at the second, at its step log's
    (``servatus-<id>-<job>.0.out``); each to a file of alice's. Then alice releases both."""
    lane, cluster = scene.lane, scene.cluster
    home = cluster.outside(cluster.home)
    victims = {"out": home / "victim-out.txt", "step": home / "victim-step.txt"}
    for path in victims.values():
        path.write_text(VICTIM_TEXT)
        os.chown(path, cluster.uid, cluster.gid)
        path.chmod(0o600)
    lane.put_worker()
    wrap_sbatch(lane, HOLDING_SBATCH)
    (lane.launch / "SERVATUS.toml").unlink()  # wrap_sbatch wrote the lane's own log_root back
    lane.put(
        lane.launch / "SERVATUS.toml",
        lane.toml(slurm_bin=f"{lane.base}/bin", log_root=str(scene.logs)),
    )
    lane.submitted(
        [lane.worker_task("plain", "exit", "0"), lane.worker_task("steplog", "exit", "0")],
        "--tasks-per-allocation",
        "1",
    )
    allocations = {t["key"]: t["allocation"] for t in lane.status()["tasks"]}
    jobs = {key: scene.job_of(allocation) for key, allocation in allocations.items()}
    seen["allocations"], seen["jobs"] = allocations, jobs
    seen["held"] = {key: scene.her_squeue()[f"servatus-{a}"][1] for key, a in allocations.items()}
    out = scene.logs / f"servatus-{allocations['plain']}-{jobs['plain']}.out"
    step = scene.logs / f"servatus-{allocations['steplog']}-{jobs['steplog']}.0.out"
    seen["out"], seen["step"] = out, step
    scene.mallory(
        f"ln -s {cluster.home}/victim-out.txt {out} && ln -s {cluster.home}/victim-step.txt {step}"
    )
    for job in jobs.values():
        released = cluster.login([f"{cluster.slurm_bin}/scontrol", "release", str(job)], timeout=30)
        assert released.returncode == 0, (released.stdout, released.stderr)
    seen["final"] = lane.wait_for(
        "steplog final", lambda d: task_of(d, "steplog")["execution"] in FINAL, seconds=120
    )
    for job in jobs.values():
        wait_until(
            "the job ends",
            lambda j=job: lane.job_state(j) not in ("PENDING", "RUNNING"),
            seconds=60,
        )
    seen["slurm_states"] = {key: lane.job_state(job) for key, job in jobs.items()}
    seen["victims"] = {name: path.read_text() for name, path in victims.items()}
    seen["out_is_link"], seen["step_is_link"] = out.is_symlink(), step.is_symlink()
    seen["names"] = sorted(p.name for p in scene.logs.iterdir())
    seen["runs"] = {key: lane.run_records(key) for key in jobs}
    own_log = scene.logs / f"servatus-{allocations['steplog']}-{jobs['steplog']}.out"
    seen["steplog_allocation_log"] = own_log.read_text() if own_log.is_file() else None
    seen["own_log_owner"] = own_log.stat().st_uid if own_log.is_file() else None
    seen["alice_uid"] = cluster.uid
    logs = lane.servatus("logs", "state", "--task", "steplog")
    seen["logs"] = (logs.returncode, logs.stdout, logs.stderr)


SCENARIOS: dict[str, Callable[[Scene, dict[str, Any]], None]] = {
    "lease": lease_swap,
    "marker": forged_end,
    "chain": forged_handoff,
    "output": planted_logs,
}


@prelude.scenario(seconds=58)
def every_attack(cluster: SlurmCluster, base: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The scenarios above, each in its own lane and thread, in one project directory, beside
    the lane's other slow scenarios (``cluster.prelude``)."""
    with project_directory(cluster) as project:
        yield from _attacked(cluster, project, base)


def _attacked(
    slurm_cluster: SlurmCluster, project: Path, base: Path
) -> Iterator[dict[str, dict[str, Any]]]:
    scenes = {
        name: Scene(make_lane(slurm_cluster, "local", base, f"two-{name}"), project, name)
        for name in SCENARIOS
    }
    seen: dict[str, dict[str, Any]] = {name: {} for name in SCENARIOS}
    lock = threading.Lock()

    def run(name: str) -> None:
        began = time.monotonic()
        try:
            SCENARIOS[name](scenes[name], seen[name])
        except BaseException:  # the tests report it; the other scenarios go on
            with lock:
                seen[name]["error"] = traceback.format_exc()
        seen[name]["took"] = time.monotonic() - began

    try:
        with ThreadPoolExecutor(len(SCENARIOS)) as pool:
            list(pool.map(run, SCENARIOS))
        yield seen
    finally:
        for scene in scenes.values():
            scene.lane.cleanup()


@pytest.fixture(scope="module")
def attacked() -> Iterator[dict[str, dict[str, Any]]]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _ok(seen: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in seen, seen["error"]
    return seen


def _her_warnings(document: dict[str, Any], name: str, uid: int) -> list[str]:
    return [
        warning
        for warning in document["warnings"]
        if warning.startswith(f"{name} in log_root belongs to another user (uid {uid})")
    ]


def test_report(attacked: dict[str, dict[str, Any]]) -> None:
    """Not a check: what each scenario saw, for ``pytest -s``."""
    for name, seen in attacked.items():
        shown = {k: v for k, v in seen.items() if k not in ("status", "settled", "failed", "final")}
        print(f"\n== {name}: {shown}")


# -- (a) the lease ------------------------------------------------------------------------------


def test_her_order_in_a_swapped_orders_directory_never_runs_as_alice(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """Her order for the lease's slot, claimed and in a directory under the orders directory's
    own name, is never run: no ``id -u`` in her file, no marker of her step, for 25 s and more
    of a lease polling every 5 s."""
    seen = _ok(attacked["lease"])
    assert seen["her_job"] == seen["job"]
    assert seen["planted"] == [HER_STEP, claim_name(HER_STEP, seen["job"])]
    assert seen["loot"] is None, seen["loot"]
    assert seen["her_markers"] == [], seen["her_markers"]


def test_a_start_into_the_swapped_lease_is_refused_and_offers_nothing(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """alice's ``start`` after the swap finds a directory that is not hers under the name: it
    is refused, exit 1 (``ShapeRejected``), one line naming the directory; nothing is offered,
    the Task reads ``NOT_SUBMITTED`` and never runs."""
    seen = _ok(attacked["lease"])
    late = seen["start_late"]
    assert late.returncode == 1, (late.returncode, late.stdout, late.stderr)
    [line] = late.stderr.strip().splitlines()
    assert line.startswith("servatus: ShapeRejected: the lease's orders directory "), line
    assert line.endswith("(late: directory); 0 were offered"), line
    assert task_of(seen["status"], "late")["execution"] == "NOT_SUBMITTED"
    assert seen["runs"]["late"] == []


def test_the_swapped_lease_keeps_running_its_own_step(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """The step offered before the swap runs to its end once, and the lease runs on."""
    seen = _ok(attacked["lease"])
    keep = task_of(seen["final_keep"], "keep")
    assert (keep["execution"], keep["exit_code"]) == ("SUCCEEDED", 0), keep
    [step] = steps_of(seen["final_keep"], "keep")
    assert step["within"] == seen["lease"]
    assert len(seen["runs"]["keep"]) == 1, seen["runs"]
    assert seen["lease_after"] == "RUNNING"
    assert seen["cancel"].returncode == 0, seen["cancel"].stderr


# -- (b) markers and handoffs -------------------------------------------------------------------


def test_her_end_marker_never_turns_a_failure_into_a_success(
    attacked: dict[str, dict[str, Any]], slurm_cluster: SlurmCluster
) -> None:
    """Her ``end.0.0`` under the Task's own job: ``status`` never reads a success; it reads
    FAILED 3 and names her file in a warning as the Task ends, still FAILED 3 once Slurm forgot
    the job (a settled status may no longer list the markers, so no warning is required then),
    and her deleting her file then changes nothing."""
    seen = _ok(attacked["marker"])
    uid, _gid = slurm_cluster.second_ids()
    assert seen["forged_owner"] == uid
    assert ("SUCCEEDED", 0) not in seen["readings"], seen["readings"]
    assert seen["readings"][-1] == ("FAILED", 3), seen["readings"]
    name = f"servatus-{seen['allocation']}.{seen['job']}.end.0.0"
    assert _her_warnings(seen["failed"], name, uid), seen["failed"]["warnings"]
    for moment in ("failed", "settled"):
        three = task_of(seen[moment], "three")
        assert (three["execution"], three["exit_code"]) == ("FAILED", 3), (moment, three)
    after = task_of(seen["after_delete"], "three")
    assert (after["execution"], after["exit_code"]) == ("FAILED", 3), after
    assert seen["runs"] == [f"three.{seen['job']}"], seen["runs"]


def test_her_handoff_never_makes_a_later_link_run_the_task(
    attacked: dict[str, dict[str, Any]], slurm_cluster: SlurmCluster
) -> None:
    """Link 1 exits 3 before its signal, with her ``handoff.0`` and ``over`` file under its
    job: the Task runs in link 1 only (no later link ends or claims a slot), reads FAILED 3 with
    her handoff named in a warning as it ends, and still FAILED 3 once Slurm forgot every link
    and she deleted her files."""
    seen = _ok(attacked["chain"])
    uid, _gid = slurm_cluster.second_ids()
    (first, first_job), *_ = seen["links"]
    assert seen["her_job"] == first_job
    assert seen["runs"] == [f"c.{first_job}"], seen["runs"]
    assert ("SUCCEEDED", 0) not in seen["readings"], seen["readings"]
    name = f"servatus-{first}.{first_job}.handoff.0"
    assert _her_warnings(seen["failed"], name, uid), seen["failed"]["warnings"]
    for moment in ("failed", "settled"):
        c = task_of(seen[moment], "c")
        assert (c["execution"], c["exit_code"]) == ("FAILED", 3), (moment, c)
    after = task_of(seen["after_delete"], "c")
    assert (after["execution"], after["exit_code"]) == ("FAILED", 3), after
    for link, _job in seen["links"][1:]:
        assert not any(".end." in kind or ".taken." in kind for kind in seen["kinds"][link])


def test_her_handoff_does_not_get_the_next_link_allocated(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """A link that handed nothing on of its own removes the rest of its chain, whatever
    handoff of hers lies there: link 2 is never allocated."""
    seen = _ok(attacked["chain"])
    (_first, first_job), (second, second_job), *_ = seen["links"]
    assert seen["states"][first_job][0] == "FAILED", seen["states"]
    assert "RUNNING" not in seen["states"][second_job], seen["states"]
    assert seen["kinds"][second] == [], seen["kinds"]


# -- (c) planted log names ----------------------------------------------------------------------


def test_a_planted_allocation_log_is_never_written_through(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """Slurm 24.11.5 opens ``#SBATCH --output`` by name, as the job's user, and follows a link
    planted there while the job waits: before ``--output`` was ``/dev/null`` it truncated
    alice's ``~/victim-out.txt`` behind mallory's link and wrote the job's log into it (seen on
    this cluster). Now Slurm writes nowhere and the batch script opens its own log as a new file:
    her link makes the job exit 1 before its start marker, and alice's file is untouched."""
    seen = _ok(attacked["output"])
    assert seen["held"] == {"plain": "PENDING", "steplog": "PENDING"}
    assert seen["victims"]["out"] == VICTIM_TEXT
    assert seen["out_is_link"]
    plain = f"servatus-{seen['allocations']['plain']}.{seen['jobs']['plain']}."
    assert not any(name.startswith(plain) for name in seen["names"]), seen["names"]
    assert seen["runs"]["plain"] == []
    assert seen["slurm_states"]["plain"] in ("FAILED", None), seen["slurm_states"]


def test_a_planted_step_log_refuses_the_step_and_is_never_written(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """Her link at the step log's name: the watcher's ``O_EXCL`` open refuses it, the step never
    runs (no run record), ``end.0.1`` and FAILED 1, the reason in the allocation's own log (a
    file of alice's), and alice's file behind the link is unchanged."""
    seen = _ok(attacked["output"])
    steplog = task_of(seen["final"], "steplog")
    assert (steplog["execution"], steplog["exit_code"]) == ("FAILED", 1), steplog
    assert seen["runs"]["steplog"] == []
    allocation, job = seen["allocations"]["steplog"], seen["jobs"]["steplog"]
    assert f"servatus-{allocation}.{job}.end.0.1" in seen["names"]
    assert seen["victims"]["step"] == VICTIM_TEXT
    assert seen["step_is_link"]
    assert seen["own_log_owner"] == seen["alice_uid"]
    assert f"{seen['step']} already exists or is not a new file of this user's" in (
        seen["steplog_allocation_log"] or ""
    )


def test_logs_never_prints_the_file_behind_her_planted_step_log(
    attacked: dict[str, dict[str, Any]],
) -> None:
    """``servatus logs --task`` of the refused step refuses her link in one line (exit 1) and
    shows no text of the file it points to."""
    seen = _ok(attacked["output"])
    code, out, err = seen["logs"]
    assert VICTIM_TEXT not in out, out
    assert code == 1 and "not a file of this user's" in err, (code, err)
