"""The spec's Publication examples and the Quickstart worker, run as written in real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from publish_helpers import python

PUBLISH_EXAMPLE = """\
from servatus import publish


def build(draft):
    (draft.path / "summary.json").write_text('{"ok": true}\\n')
    draft.link_tree("runs/42/plots", "plots")  # hard-link every regular file under a tree


publish("outputs/run-42", build, mode=0o755)
"""

PUBLISH_FILE_EXAMPLE = """\
import numpy as np

from servatus import publish_file

weights = np.zeros((4, 4))
publish_file("outputs/weights.npy", lambda path: np.save(path, weights))
"""

CHILDREN_EXAMPLE = """\
from servatus import Workspace

parent = Workspace("outputs/study", identity=b"study v1")
with parent.child("method-a", identity=b"method-a v1") as child:
    (child.path / "result.bin").write_bytes(b"...")  # create or resume the child's work
    child.publish(lambda draft: draft.link(child.path / "result.bin", "result.bin"))
with parent as workspace:
    workspace.publish(lambda draft: draft.link_tree(workspace.path / "method-a", "method-a"))
"""

# Quickstart step 2, verbatim.
TRAIN_PY = """\
# train.py, in work_root
import os, signal, sys, threading
from pathlib import Path

from mylab import Trainer  # your code
from servatus import Workspace
from servatus.errors import DestinationExists

stopping = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: stopping.set())

config = sys.stdin.buffer.read()  # the Task's stdin bytes
destination = Path("results") / os.environ["SERVATUS_TASK_KEY"]


def main() -> int:
    try:
        with Workspace(destination, identity=config) as workspace:
            checkpoint = workspace.path / "checkpoint.pt"
            trainer = Trainer.resume(checkpoint) if checkpoint.exists() else Trainer(config)
            while not trainer.done:
                trainer.step()
                if stopping.is_set() or trainer.step_count % 500 == 0:
                    trainer.save(checkpoint)  # write a temp file, then os.replace
                if stopping.is_set():
                    return 1  # out of time; the checkpoint survives
            trainer.save(checkpoint)

            def assemble(draft):
                draft.link(checkpoint, "model.pt")
                (draft.path / "metrics.json").write_text(trainer.metrics_json())

            workspace.publish(assemble)
    except DestinationExists:
        pass  # an earlier run already published it
    return 0


sys.exit(main())
"""

# A tiny stand-in for "your code": counts steps, checkpoints by replacement.
MYLAB_PY = """\
import json, os, time


class Trainer:
    def __init__(self, config, step_count=0, resumed_from=None):
        self.config = json.loads(config)
        self.step_count = step_count
        self.resumed_from = resumed_from

    @classmethod
    def resume(cls, checkpoint):
        state = json.loads(checkpoint.read_text())
        return cls(state["config"].encode(), state["step_count"], state["step_count"])

    @property
    def done(self):
        return self.step_count >= self.config["steps"]

    def step(self):
        time.sleep(self.config["sleep"])
        self.step_count += 1

    def save(self, checkpoint):
        state = {"config": json.dumps(self.config), "step_count": self.step_count}
        temporary = checkpoint.with_name(checkpoint.name + ".tmp")
        temporary.write_text(json.dumps(state))
        os.replace(temporary, checkpoint)

    def metrics_json(self):
        return json.dumps({"steps": self.step_count, "resumed_from": self.resumed_from})
"""


def run_example(code: str, cwd: Path) -> None:
    script = cwd / "example.py"
    script.write_text(code)
    result = python(str(script), cwd=cwd)
    assert result.returncode == 0, result.stderr


def test_publish_example(tmp_path: Path) -> None:
    plots = tmp_path / "runs/42/plots"
    (plots / "loss").mkdir(parents=True)
    (plots / "accuracy.png").write_bytes(b"png-a")
    (plots / "loss/curve.png").write_bytes(b"png-b")
    (tmp_path / "outputs").mkdir()
    os.chmod(tmp_path / "outputs", 0o755)
    run_example(PUBLISH_EXAMPLE, tmp_path)
    run = tmp_path / "outputs/run-42"
    assert (run / "summary.json").read_text() == '{"ok": true}\n'
    assert (run / "plots/accuracy.png").stat().st_ino == (plots / "accuracy.png").stat().st_ino
    assert (run / "plots/loss/curve.png").read_bytes() == b"png-b"
    for directory in (run, run / "plots", run / "plots/loss"):
        assert directory.stat().st_mode & 0o7777 == 0o755
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["run-42"]
    rerun = python(str(tmp_path / "example.py"), cwd=tmp_path)
    assert rerun.returncode == 1
    assert "DestinationExists" in rerun.stderr


def test_publish_file_example(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    (tmp_path / "outputs").mkdir()
    run_example(PUBLISH_FILE_EXAMPLE, tmp_path)
    weights = np.load(tmp_path / "outputs/weights.npy")
    assert weights.shape == (4, 4)
    assert not weights.any()
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "outputs/weights.npy").stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["weights.npy"]


def test_children_example(tmp_path: Path) -> None:
    (tmp_path / "outputs").mkdir()
    run_example(CHILDREN_EXAMPLE, tmp_path)
    assert (tmp_path / "outputs/study/method-a/result.bin").read_bytes() == b"..."
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["study"]
    again = tmp_path / "again.py"
    again.write_text(
        textwrap.dedent(
            """\
            from servatus import Workspace
            from servatus.errors import DestinationExists
            parent = Workspace("outputs/study", identity=b"study v1")
            try:
                with parent.child("method-a", identity=b"method-a v1"):
                    raise SystemExit("entered a child of a published parent")
            except DestinationExists as exc:
                print(exc)
            """
        )
    )
    result = python(str(again), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "outputs/study" in result.stdout
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["study"]


def _start_worker(work_root: Path, config: bytes) -> subprocess.Popen[bytes]:
    env = dict(os.environ, SERVATUS_TASK_KEY="lr-1e-3", PYTHONPATH=str(work_root / "lib"))
    process = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=work_root,
        env=env,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(config)
    process.stdin.close()
    return process


def test_quickstart_worker_resumes_publishes_once(tmp_path: Path) -> None:
    """SIGUSR1 stops the worker with its checkpoint kept; the rerun resumes and publishes; a
    third run finds the result and exits 0 without touching it."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/mylab.py").write_text(MYLAB_PY)
    (tmp_path / "train.py").write_text(TRAIN_PY)
    (tmp_path / "results").mkdir()
    config = json.dumps({"steps": 1500, "sleep": 0.002}, sort_keys=True).encode()
    private = tmp_path / "results/.servatus-workspace.lr-1e-3/work/checkpoint.pt"

    first = _start_worker(tmp_path, config)
    deadline = time.monotonic() + 60
    while not private.exists():
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first.send_signal(signal.SIGUSR1)
    assert first.wait(timeout=60) == 1
    saved = json.loads(private.read_text())["step_count"]
    assert 500 <= saved < 1500
    assert not (tmp_path / "results/lr-1e-3").exists()

    second = _start_worker(tmp_path, config)
    assert second.wait(timeout=60) == 0, second.stderr.read() if second.stderr else ""
    result = tmp_path / "results/lr-1e-3"
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics == {"steps": 1500, "resumed_from": saved}
    assert json.loads((result / "model.pt").read_text())["step_count"] == 1500
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["lr-1e-3"]

    before = {p.name: p.stat().st_mtime_ns for p in result.iterdir()}
    third = _start_worker(tmp_path, config)
    assert third.wait(timeout=60) == 0
    assert {p.name: p.stat().st_mtime_ns for p in result.iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["lr-1e-3"]
