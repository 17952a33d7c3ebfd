"""The Task the launcher tests run: it records what it was started with, then exits as asked.

Usage: ``probe.py OUT EXIT [PATH...]``. It writes ``OUT`` (JSON): its argv, environment, working
directory, its PID and the PIDs it can see in ``/proc``, and for each ``PATH`` whether creating a
file there worked. Then it exits with ``EXIT``. Standard library only; it runs as
``/usr/bin/python3`` on Debian 12 outside and Debian 13 inside the test cluster.
"""

import json
import os
import sys


def attempt(path: str) -> str:
    try:
        with open(path, "x") as handle:
            handle.write("written\n")
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror}"
    return "ok"


def main() -> int:
    out, code, *paths = sys.argv[1:]
    env = dict(os.environ)
    if env.get("LC_CTYPE") == "C.UTF-8":
        del env["LC_CTYPE"]  # Python adds it when started without a locale (PEP 538)
    record = {
        "argv": sys.argv,
        "env": env,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "visible_pids": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()),
        "writes": {path: attempt(path) for path in paths},
    }
    with open(out, "w") as handle:
        json.dump(record, handle)
    return int(code)


sys.exit(main())
