"""A stand-in for ``srun`` in script tests: parses the options the script gives, then becomes the
step the way Slurm would start it (its ``--export`` names plus ``SLURM_*``, in ``--chdir``).

It records each call as JSON in ``$FAKE_SRUN_RECORD`` (a directory) and execs the command, so the
step's PID is this process's and signals sent to "srun" reach the task, as real srun forwards them.
"""

import json
import os
import sys

VALUED = {"--ntasks", "--nodes", "--cpus-per-task", "--mem", "--gres", "--export", "--chdir"}
FLAGS = {"--exact"}


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
    os.chdir(str(options["--chdir"]))
    os.execve(args[0], args, env)


main()
