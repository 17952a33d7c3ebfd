"""A stand-in for ``srun`` in script tests: parses the options the script gives, then becomes the
step the way Slurm would start it (its ``--export`` names plus ``SLURM_*``, in ``--chdir``).

It records each call as JSON in ``$FAKE_SRUN_RECORD`` (a directory) and execs the command, so the
step's PID is this process's and signals sent to "srun" reach the task, as real srun forwards them.

With ``$FAKE_SRUN_SLOTS`` (a directory), it first waits for one of the job's slots, as a step of a
lease waits inside its allocation: a slot is a ``flock`` on ``slot.<n>`` (``$FAKE_SRUN_SLOT_COUNT``
of them), held by the step until it exits. A signal while it waits cancels the step without
starting it and exits 1, as real srun does ("Cancelled pending job step").
"""

import fcntl
import json
import os
import signal
import sys
import time

VALUED = {"--ntasks", "--nodes", "--cpus-per-task", "--mem", "--gres", "--export", "--chdir"}
FLAGS = {"--exact"}


def cancelled(signum: int, _frame: object) -> None:
    sys.stderr.write(f"fake srun: Cancelled pending job step with signal {signum}\n")
    os._exit(1)


def wait_for_slot(directory: str, count: int) -> None:
    for number in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(number, cancelled)
    while True:
        for slot in range(count):
            fd = os.open(os.path.join(directory, f"slot.{slot}"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.set_inheritable(fd, True)
            return
        time.sleep(0.05)


def main() -> None:
    args = sys.argv[1:]
    options: dict[str, str | bool] = {}
    while args and args[0].startswith("--"):
        name, _, value = args.pop(0).partition("=")
        if name in FLAGS:
            options[name] = True
        elif name in VALUED and value:
            options[name] = value
        else:
            sys.stderr.write(f"fake srun: unknown option {name}\n")
            sys.exit(2)
    if not args:
        sys.stderr.write("fake srun: no command\n")
        sys.exit(2)
    exported = str(options.get("--export", "ALL"))
    env = {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}
    env["SLURM_STEP_ID"] = "0"
    if exported != "NIL":
        for name in exported.split(","):
            value = os.environb.get(name.encode())
            if value is not None:
                env[name] = os.fsdecode(value)
    record = os.environ.get("FAKE_SRUN_RECORD")
    if record:
        path = os.path.join(record, f"srun.{os.getpid()}.json")
        with open(path, "w") as handle:
            json.dump({"options": options, "argv": [os.fsencode(a).hex() for a in args]}, handle)
    slots = os.environ.get("FAKE_SRUN_SLOTS")
    if slots:
        wait_for_slot(slots, int(os.environ.get("FAKE_SRUN_SLOT_COUNT", "1")))
    os.chdir(str(options["--chdir"]))
    os.execve(args[0], args, env)


main()
