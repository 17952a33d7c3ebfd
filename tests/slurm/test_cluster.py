"""The Slurm plugin against the real local Slurm 24.11 cluster (``slurm_cluster``).

Scripts are submitted with ``sbatch --parsable`` through the ssh transport, as from a laptop;
markers and queue are read back with the evidence reader through the same transport.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from slurm_helpers import ALLOCATION, STEP_PROGRAM, direct_step, make_spec, make_target

from cluster.fixture import SlurmCluster
from servatus.config import Target
from servatus.evidence import Marker, MarkerKind, QueueEntry
from servatus.script import ScriptSpec
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.script import render
from servatus_slurm.transport import SshTransport

pytestmark = pytest.mark.cluster

READER = SlurmEvidenceReader()
INNER_PYTHON = "/usr/bin/python3"


@attrs.define
class Remote:
    """One test's directory on the cluster's scratch, and a way to submit and watch jobs."""

    root: Path
    alias: str
    slurm_bin: str
    jobs: list[int] = attrs.field(factory=list)
    queue_seen: list[QueueEntry] = attrs.field(factory=list)

    @property
    def transport(self) -> SshTransport:
        return SshTransport(self.alias)

    def target(self, **changes: object) -> Target:
        return make_target(self.root, slurm_bin=self.slurm_bin, host=self.alias, **changes)

    def args(self, name: str, mode: str, *extra: str) -> list[str]:
        return [
            INNER_PYTHON,
            str(self.root / "step.py"),
            str(self.root / "out"),
            name,
            mode,
            *extra,
        ]

    def submit(self, spec: ScriptSpec) -> int:
        result = self.transport.run(
            [f"{self.slurm_bin}/sbatch", "--parsable"], stdin=render(spec).encode()
        )
        assert result.returncode == 0, result.stderr
        job = int(result.stdout.split(b";")[0])
        self.jobs.append(job)
        return job

    def markers(self, job: int) -> list[Marker]:
        target = self.target()
        found = READER.parse_markers(self.transport.run(READER.marker_command(target)))
        return [m for m in found if m.job == job and m.allocation_id == ALLOCATION]

    def queue(self, job: int) -> list[QueueEntry]:
        listed = READER.parse_queue(self.transport.run(READER.queue_command(self.target())))
        mine = [entry for entry in listed if entry.job == job]
        self.queue_seen.extend(mine)
        return mine

    def wait(
        self, job: int, done: Callable[[list[Marker]], bool], seconds: float = 120
    ) -> list[Marker]:
        deadline = time.monotonic() + seconds
        while True:
            self.queue(job)
            markers = self.markers(job)
            if done(markers):
                return markers
            assert time.monotonic() < deadline, f"job {job} did not get there: {markers}"
            time.sleep(1)

    def record(self, name: str) -> dict[str, object]:
        return json.loads((self.root / "out" / f"{name}.json").read_text())

    def cancel_all(self) -> None:
        for job in self.jobs:
            self.transport.run([f"{self.slurm_bin}/scancel", str(job)])


@pytest.fixture
def remote(slurm_cluster: SlurmCluster) -> Iterator[Remote]:
    base = f"{slurm_cluster.work_root}/slurm-plugin-{uuid.uuid4().hex[:8]}"
    slurm_cluster.make_dirs(base, f"{base}/logs", f"{base}/out", f"{base}/work")
    root = Path(base)
    shutil.copy(STEP_PROGRAM, root / "step.py")
    os.chmod(root / "step.py", 0o644)
    made = Remote(root, slurm_cluster.alias, slurm_cluster.slurm_bin)
    try:
        yield made
    finally:
        made.cancel_all()


def kinds(markers: list[Marker]) -> set[tuple[str, int | None, int | None]]:
    return {(m.kind.value, m.slot, m.exit_code) for m in markers}


def ended(slots: int) -> Callable[[list[Marker]], bool]:
    return lambda markers: sum(m.kind is MarkerKind.END for m in markers) >= slots


def decode_env(raw: object) -> dict[bytes, bytes]:
    assert isinstance(raw, dict)
    env = {bytes.fromhex(k): bytes.fromhex(v) for k, v in raw.items()}
    if env.get(b"LC_CTYPE") == b"C.UTF-8":
        del env[b"LC_CTYPE"]  # Python adds it when started without a locale (PEP 538)
    return env


def test_two_steps_run_with_exact_bytes_and_exit_codes(remote: Remote) -> None:
    target = remote.target()
    odd = ["it's", "two  words", "new\nline", "\udcff\udc80", "", "$HOME"]
    stdin = bytes(range(256)) * 2
    steps = [
        direct_step(
            target,
            0,
            remote.args("a", "exit:0", *odd),
            stdin=stdin,
            env={"NEWLINE": "a\nb", "QUOTE": "it's"},
        ),
        direct_step(target, 1, remote.args("b", "exit:3")),
    ]
    submitted = time.time()
    job = remote.submit(make_spec(target, steps, memory_mib=200))
    markers = remote.wait(job, ended(2))
    assert kinds(markers) == {("start", None, None), ("end", 0, 0), ("end", 1, 3)}
    start = next(m.at for m in markers if m.kind is MarkerKind.START)
    assert all(start <= m.at for m in markers)
    a = remote.record("a")
    assert [bytes.fromhex(h) for h in a["argv"]] == [os.fsencode(w) for w in odd]
    assert bytes.fromhex(a["stdin"]) == stdin
    assert a["cwd"] == target.work_root
    env = decode_env(a["env"])
    end_time = int(env.pop(b"SERVATUS_JOB_END_TIME"))
    assert submitted < end_time <= submitted + 600 + 120
    assert env == {b"NEWLINE": b"a\nb", b"QUOTE": b"it's", b"SERVATUS_JOB_ID": str(job).encode()}
    assert bytes.fromhex(remote.record("b")["stdin"]) == b""
    assert {e.name for e in remote.queue_seen} == {f"servatus-{ALLOCATION}"}
    assert {e.state for e in remote.queue_seen} <= {"PENDING", "RUNNING", "COMPLETING", "COMPLETED"}
    log = remote.root / "logs" / f"servatus-{ALLOCATION}-{job}.1.out"
    assert "exit code 3" in log.read_text()


def test_pre_limit_signal_writes_limit_and_reaches_every_step(remote: Remote) -> None:
    target = remote.target()
    steps = [
        direct_step(target, 0, remote.args("a", "usr1-then:75")),
        direct_step(target, 1, ["/bin/sleep", "300"]),
    ]
    spec = make_spec(target, steps, memory_mib=200, time_limit=60, signal_before_end=30)
    job = remote.submit(spec)
    markers = remote.wait(job, ended(2), seconds=150)
    # A step that handles SIGUSR1 chooses its code; one that does not dies of it (128 + 10).
    assert kinds(markers) == {
        ("start", None, None),
        ("limit", None, None),
        ("end", 0, 75),
        ("end", 1, 138),
    }
    limit = next(m.at for m in markers if m.kind is MarkerKind.LIMIT)
    assert all(limit <= m.at for m in markers if m.kind is MarkerKind.END)
    assert json.loads((remote.root / "out" / "a.usr1.json").read_text())["at"]


def test_scancel_writes_stop(remote: Remote) -> None:
    target = remote.target()
    steps = [
        direct_step(target, 0, remote.args("a", "sleep")),
        direct_step(target, 1, ["/bin/sleep", "300"]),
    ]
    job = remote.submit(make_spec(target, steps, memory_mib=200))
    remote.wait(job, lambda ms: any(m.kind is MarkerKind.START for m in ms))
    deadline = time.monotonic() + 60
    while not (remote.root / "out" / "a.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.5)
    result = remote.transport.run([f"{remote.slurm_bin}/scancel", str(job)])
    assert result.returncode == 0, result.stderr
    markers = remote.wait(job, lambda ms: any(m.kind is MarkerKind.STOP for m in ms))
    deadline = time.monotonic() + 60
    while any(e.state in ("RUNNING", "COMPLETING") for e in remote.queue(job)):
        assert time.monotonic() < deadline
        time.sleep(1)
    markers = remote.markers(job)
    stop = next(m.at for m in markers if m.kind is MarkerKind.STOP)
    ends = [m for m in markers if m.kind is MarkerKind.END]
    assert all(m.exit_code != 0 and m.at >= stop for m in ends)
    assert ("limit", None, None) not in kinds(markers)


def test_gpu_steps_request_their_share(remote: Remote) -> None:
    target = remote.target(gpu_gres="gpu:a100", max_gpus_per_allocation=2)
    # No run-time variables either: srun gets --export=NIL.
    steps = [direct_step(target, slot, ["/bin/true"], inherit=()) for slot in range(2)]
    spec = make_spec(target, steps, memory_mib=200, gpus=1, inherit=())
    assert "--export=NIL --chdir" in render(spec)
    job = remote.submit(spec)
    markers = remote.wait(job, ended(2))
    assert kinds(markers) == {("start", None, None), ("end", 0, 0), ("end", 1, 0)}


def test_local_transport_and_reader_on_the_login_node(slurm_cluster: SlurmCluster) -> None:
    code = f"""
import json
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.transport import LocalTransport
from servatus.config import Target
target = Target(
    slurm_bin={slurm_cluster.slurm_bin!r}, work_root={slurm_cluster.work_root!r},
    log_root={slurm_cluster.log_root!r}, partitions=("debug",), max_tasks_per_allocation=1,
    max_cpus_per_allocation=1, max_memory_mib_per_allocation=1, max_time_limit=60,
)
reader = SlurmEvidenceReader()
transport = LocalTransport()
queue = transport.run(reader.queue_command(target))
listing = transport.run(reader.marker_command(target))
env = transport.run(["env"])
print(json.dumps([queue.returncode, listing.returncode, len(reader.parse_queue(queue)),
                  len(reader.parse_markers(listing)), env.stdout.decode()]))
"""
    ran = slurm_cluster.login([slurm_cluster.venv_python, "-c", code])
    assert ran.returncode == 0, ran.stderr
    queue_code, listing_code, _, _, env = json.loads(ran.stdout)
    assert (queue_code, listing_code) == (0, 0)
    assert sorted(env.splitlines()) == ["LANG=C.UTF-8", "PATH=/usr/bin:/bin"]
