"""The demo's worker: a tiny training-like loop shaped like the Quickstart's train.py.

It reads its config from stdin, resumes from a checkpoint in its private Workspace, saves a
checkpoint every few steps (write a temporary file, then os.replace), on SIGUSR1 saves one and
yields (exit 75, YIELD_EXIT: stopped cleanly, continue me), and publishes model.pt and
metrics.json atomically to results/<key>.
"""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from servatus import YIELD_EXIT, Workspace
from servatus.errors import DestinationExists

stopping = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: stopping.set())

config = sys.stdin.buffer.read()
settings = json.loads(config)
destination = Path("results") / os.environ["SERVATUS_TASK_KEY"]


def save(path: Path, state: dict[str, float]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state))
    os.replace(temporary, path)


def main() -> int:
    try:
        with Workspace(destination, identity=config) as workspace:
            checkpoint = workspace.path / "checkpoint.pt"
            state = (
                json.loads(checkpoint.read_text())
                if checkpoint.exists()
                else {"step": 0, "loss": 1.0}
            )
            print(f"starting at step {state['step']} of {settings['steps']}", flush=True)
            while state["step"] < settings["steps"]:
                time.sleep(settings["seconds_per_step"])
                state["step"] += 1
                state["loss"] *= 1.0 - settings["lr"]
                if stopping.is_set() or state["step"] % 5 == 0:
                    save(checkpoint, state)
                    print(f"step {state['step']}: loss {state['loss']:.4f}, saved", flush=True)
                if stopping.is_set():
                    print("told to stop: yielding, to be continued", flush=True)
                    return YIELD_EXIT
            save(checkpoint, state)
            metrics = json.dumps({"steps": state["step"], "loss": state["loss"]}) + "\n"

            def assemble(draft):  # type: ignore[no-untyped-def]
                draft.link(checkpoint, "model.pt")
                (draft.path / "metrics.json").write_text(metrics)

            workspace.publish(assemble)
            print(f"published {destination}", flush=True)
    except DestinationExists:
        print(f"{destination} was published by an earlier run", flush=True)
    return 0


sys.exit(main())
