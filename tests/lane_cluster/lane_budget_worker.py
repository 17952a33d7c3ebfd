"""The spec's budget-counting application inside a Workspace worker, copied in as ``budget.py``.

Its ``on_usr1`` is the spec's snippet (``servatus-0.14.1-README.md``, "The application
protocol"), with ``save(state)`` the worker's checkpoint. The worker "trains" one step a second
into a checkpoint that survives in its Workspace from link to link, and publishes once the snippet
decides it is done (exit 0): a resumed run whose result exists exits 0 at once. It leaves
``runs/<key>.<job>.json`` in work_root with the chain's reserved variables, like ``chain_step.py``.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from servatus import Workspace
from servatus.errors import DestinationExists

env = os.environ
key, job = env["SERVATUS_TASK_KEY"], env["SERVATUS_JOB_ID"]
record = {"started": time.time(), **{n: env[n] for n in sorted(env) if n.startswith("SERVATUS_")}}
(Path("runs") / f"{key}.{job}.json").write_text(json.dumps(record))
destination = Path("results") / key

started = time.monotonic()
budget = int(os.environ.get("SERVATUS_BUDGET", 600))  # noqa: PLW1508 (the spec's snippet)
used_before = int(os.environ.get("SERVATUS_RUN_TIME", 0))  # noqa: PLW1508
last = os.environ.get("SERVATUS_LINK") == os.environ.get("SERVATUS_LINKS")


def main() -> int:
    try:
        with Workspace(destination, identity=key.encode()) as workspace:
            checkpoint = workspace.path / "checkpoint.json"
            if checkpoint.exists():
                state = json.loads(checkpoint.read_text())
            else:
                state = {"steps": 0, "links": []}
            state["links"].append(int(env["SERVATUS_LINK"]))

            def save(state):
                temporary = checkpoint.with_name(".checkpoint.tmp")
                temporary.write_text(json.dumps(state))
                os.replace(temporary, checkpoint)

            def on_usr1(*_):
                save(state)
                spent = used_before + time.monotonic() - started >= budget
                sys.exit(0 if spent or last else 75)

            signal.signal(signal.SIGUSR1, on_usr1)
            try:
                while True:
                    time.sleep(1)
                    state["steps"] += 1
            except SystemExit as done:
                if done.code == 0:
                    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

                    def assemble(draft):
                        draft.link(checkpoint, "checkpoint.json")
                        with open(Path("runs") / f"{key}.published", "a") as log:
                            log.write(f"{job}\n")

                    workspace.publish(assemble)
                raise
    except DestinationExists:
        return 0  # an earlier run already published it


sys.exit(main())
