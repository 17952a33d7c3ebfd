"""The client's own CPU in ``status`` and ``plan --retry-failed``, with no cluster and no network:
``python benchmarks/bench_status_cpu.py [--allocations N] [--repeat R] [--checkout DIR]...
[--profile COMMAND [--when WHEN]]``.

Issue #33's floor for both commands is ``ssh true`` plus moving their bytes; what Servatus adds on
top is the remote command's own work and the client's CPU. This measures the second alone. A
campaign of N one-Task allocations (default 1,000) is made through the real CLI (``ensure``,
``plan``, ``submit``) against :class:`~servatus.testing.FakeScheduler`; the fake then runs every
job (90% exit 0, 5% exit 1, 5% cancelled while running) and keeps them listed, as
``bench_round_trips.py``'s cancelled jobs stay listed. Its markers become real files in a
``log_root`` of this run's own (mtimes kept), and its ``squeue`` rows what a ``squeue`` script in
``slurm_bin`` prints.

The timed commands then take the real path: the profile names an ``ssh`` host, so the ssh
transport frames the command, and only the process behind it is replaced. The first time a
remote command is seen (its frame tokens aside) it runs here under ``sh`` exactly as the login
shell would run it (the real ``find``, clock probe and awk filter on that ``log_root``); its
answer is kept, and every later call gets the same bytes in its own frame, fed to the
transport's reader as ``ssh`` would, 64 KiB at a time. So each timed command costs only the
client's work: parsing, the journal, projection, output.

Reported over R fresh processes (default 15), each the median and the least (on a shared
machine the least is the steadier measure of CPU a command needs):

* ``fresh``: one command in a fresh ``python`` process, CPU from the interpreter's start to the
  command's end (``time.process_time``): imports, plugins, the command; ``first``, that command
  alone (the harness imported the ssh transport before it); ``timed``: in another fresh
  process, the command after ``cli_timer.py``'s warm-up (``ensure`` and ``status --offline`` of
  a one-Task campaign), which is what ``bench_round_trips.py`` times;
* ``warm``: the same command again in one process (imports done);
* ``python -X importtime -c 'import servatus.cli'`` and wall time of ``python -c 'import
  servatus.cli'`` against ``python -c pass``.

``--profile status`` (or ``plan``) prints cProfile's view of one warm command (``--when warm``),
of the first in a fresh process (``first``), or of the one after the warm-up (``timed``).
``--checkout DIR`` (again for several) times that checkout's code (its ``src`` directories first
on ``PYTHONPATH``), the checkouts taking turns, each row's ratio against the first. Read the
ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cli_timer import checkout_option, warm_up

HERE = Path(__file__).resolve().parent

CONFIG = """\
default_profile = "one"

[target]
host = "canned"
slurm_bin = "{root}/bin"
work_root = "{root}/work"
log_root = "{root}/logs"
partitions = ["debug"]
max_tasks_per_allocation = 1
max_cpus_per_allocation = 1
max_memory_mib_per_allocation = 100
max_time_limit = "01:00:00"

[profiles.one.resources]
cpus = 1
memory_mib = 100
time_limit = "00:01:00"
"""
COMMANDS = {
    "status": ["status", "state"],
    "plan": ["plan", "state", "--retry-failed", "--output", "retry.json"],
}
KEPT: dict[str, str] = {}
"""Each remote command seen (its frame halves replaced), with its answer as JSON."""
PLACEHOLDERS = ("ab" * 8, "cd" * 8, "ef" * 8, "a1" * 8, "b2" * 8, "c3" * 8)
"""What stands for the frames' random halves in a kept command and its answer."""


def build(root: Path, count: int) -> None:
    """The campaign in ``root/state``, its markers in ``root/logs``, ``squeue`` in ``root/bin``."""
    from servatus.cli import main
    from servatus.testing import FakeScheduler

    start = 1_796_000_000.0
    clock = [start]
    fake = FakeScheduler(clock=lambda: clock[0])
    for part in ("bin", "logs", "work"):
        (root / part).mkdir(mode=0o700)
    (root / "SERVATUS.toml").write_text(CONFIG.format(root=root))
    (root / "tasks.jsonl").write_text(
        "".join(json.dumps({"key": f"t-{i}", "args": ["/bin/true"]}) + "\n" for i in range(count))
    )
    os.chdir(root)
    with contextlib.redirect_stdout(io.StringIO()):
        for argv in (
            ["ensure", "state", "tasks.jsonl"],
            ["plan", "state", "--output", "plan.json"],
            ["submit", "state", "plan.json"],
        ):
            if main(argv, connect=fake) != 0:
                raise SystemExit(f"servatus {' '.join(argv)} failed")
    fake.start()
    clock[0] += 30
    for index, job in enumerate(list(fake.jobs)):
        if index % 20 == 0:
            fake.run(["/usr/bin/scancel", f"--name={job.name}"])
        else:
            fake.finish(job.job, 1 if index % 20 == 1 else 0)
    clock[0] += 30
    for name, at in fake.markers.items():
        path = root / "logs" / name
        path.touch(mode=0o600)
        os.utime(path, (at, at))
    queue = fake.run(["/usr/bin/squeue", "--me", "--noheader", "--format=%A|%j|%T"]).stdout
    (root / "queue.txt").write_bytes(queue)
    squeue = root / "bin" / "squeue"
    squeue.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(root / 'queue.txt'))}\n")
    squeue.chmod(0o700)


def can_ssh() -> None:
    """Replace the process behind the ssh transport with kept answers (see the docstring)."""
    from servatus_slurm import transport

    tokens: list[str] = []
    random = transport.Frame.random

    def recorded() -> Any:
        frame = random()
        tokens.append(frame.token)
        return frame

    def exchange(argv: Any, env: Any, *, stdin: bytes, out: Any, err: Any, **_: Any) -> int:
        halves = [half for token in tokens for half in (token[:16], token[16:])]
        tokens.clear()
        command = argv[-1]
        for half, stand_in in zip(halves, PLACEHOLDERS, strict=False):
            command = command.replace(half, stand_in)
        answer = KEPT.get(command)
        if answer is None:
            done = subprocess.run(
                ["/bin/sh", "-c", command], input=stdin, capture_output=True, check=False
            )
            answer = KEPT[command] = json.dumps(
                [done.returncode, done.stdout.decode("latin-1"), done.stderr.decode("latin-1")]
            )
        code, stdout, stderr = json.loads(answer)
        for stand_in, half in zip(PLACEHOLDERS, halves, strict=False):
            stdout = stdout.replace(stand_in, half)
            stderr = stderr.replace(stand_in, half)
        for stream, data in ((out, stdout.encode("latin-1")), (err, stderr.encode("latin-1"))):
            for at in range(0, len(data), 65536):
                stream.feed(data[at : at + 65536])
        return int(code)

    transport.Frame.random = staticmethod(recorded)  # type: ignore[method-assign]
    transport._exchange = exchange


def run(command: str) -> tuple[float, float, int]:
    """CPU and wall seconds of one command in this process, and its exit code."""
    from servatus.cli import main

    with contextlib.suppress(FileNotFoundError):
        os.unlink("retry.json")  # a saved plan is never overwritten
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        cpu, wall = time.process_time(), time.perf_counter()
        code = main(COMMANDS[command])
        return time.process_time() - cpu, time.perf_counter() - wall, code


def child(root: str, command: str, repeat: int, mode: str = "fresh") -> None:
    """One fresh process. ``fresh``: the first command's CPU from the interpreter's start, and
    that command alone, then ``repeat`` warm ones; ``timed``: the command after
    :func:`warm_up`, as ``bench_round_trips.py`` times it. ``profile-first``, ``profile-timed``,
    ``profile-warm``: cProfile's view of that command instead."""
    os.chdir(root)
    can_ssh()
    KEPT.update(json.loads(Path(root, "kept.json").read_text()))
    if mode.startswith("profile-"):
        import cProfile
        import pstats

        if mode == "profile-timed":
            warm_up()
        elif mode == "profile-warm":
            run(command)
        profiler = cProfile.Profile()
        profiler.enable()
        run(command)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(50)
        stats.sort_stats("tottime").print_stats(30)
        return
    if mode == "timed":
        warm_up()
        cpu, _, code = run(command)
        print(json.dumps({"timed": cpu, "code": code}))
        return
    first_cpu, _, code = run(command)
    fresh = time.process_time()
    warm = [run(command) for _ in range(repeat)]
    print(
        json.dumps(
            {
                "fresh": fresh,
                "first": first_cpu,
                "code": code,
                "warm_cpu": [w[0] for w in warm],
                "warm_wall": [w[1] for w in warm],
            }
        )
    )


def prime(root: str) -> None:
    """Run each command once with real ``sh`` answers and keep them for the children."""
    os.chdir(root)
    can_ssh()
    with contextlib.suppress(FileNotFoundError):  # another checkout's, primed before
        KEPT.update(json.loads(Path(root, "kept.json").read_text()))
    for command in COMMANDS:
        if run(command)[2] not in (0, 1):
            raise SystemExit(f"{command} failed")
    Path(root, "kept.json").write_text(json.dumps(KEPT))


CACHES: dict[str, str] = {}
"""The environment of every child: bytecode caches written and read (an installed package has
them; ``PYTHONDONTWRITEBYTECODE`` would time the compiler), under the run's own directory."""
SOURCES = ("servatus_core", "servatus_slurm", "servatus_publish", "servatus_apptainer")


def python(*args: str, checkout: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh process, with ``checkout``'s code first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | CACHES
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(checkout / part / "src") for part in SOURCES)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=False, env=env
    )


def import_times(repeat: int, checkout: Path) -> tuple[float, float, int]:
    """Median wall of ``import servatus.cli`` and of ``pass`` in fresh processes, and the
    microseconds ``-X importtime`` gives ``servatus.cli`` (cumulative, the median too)."""

    def wall(code: str) -> float:
        began = time.perf_counter()
        python("-c", code, checkout=checkout)
        return time.perf_counter() - began

    def own() -> int:
        said = python("-X", "importtime", "-c", "import servatus.cli", checkout=checkout).stderr
        found = re.search(r"\|\s*(\d+) \|\s*servatus\.cli$", said, re.MULTILINE)
        return int(found[1]) if found else -1

    cli = statistics.median(wall("import servatus.cli") for _ in range(repeat))
    bare = statistics.median(wall("pass") for _ in range(repeat))
    return cli, bare, int(statistics.median(own() for _ in range(repeat)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--allocations", type=int, default=1000, metavar="N")
    parser.add_argument("--repeat", type=int, default=15, metavar="R")
    checkout_option(parser)
    parser.add_argument("--profile", choices=sorted(COMMANDS), help="cProfile one warm command")
    parser.add_argument(
        "--when",
        dest="profile_when",
        choices=("first", "timed", "warm"),
        default="warm",
        help="with --profile: the first command of a process, after the warm-up, or again",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--prime", metavar="ROOT", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(*options.child[:2], int(options.child[2]), *options.child[3:])
        return
    if options.prime:
        prime(options.prime)
        return
    checkouts: list[Path] = options.checkout or [HERE.parent]
    me = str(Path(__file__))
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        CACHES["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        build(root, options.allocations)
        for checkout in checkouts:
            primed = python(me, "--prime", str(root), checkout=checkout)
            if primed.returncode != 0:
                raise SystemExit(primed.stderr[-2000:])
        if options.profile:
            mode = f"profile-{options.profile_when}"
            args = ("--child", str(root), options.profile, "0", mode)
            done = python(me, *args, checkout=checkouts[-1])
            print(done.stdout, done.stderr[-2000:])
            return
        received = len((root / "kept.json").read_bytes())
        print(
            f"{options.allocations} one-Task allocations, {len(os.listdir(root / 'logs'))} "
            f"marker files, answers kept ({received:,} B as JSON); medians of "
            f"{options.repeat} fresh processes and the least (warm: 3 commands after each first "
            "one); ratios to the first checkout"
        )
        heads = ("fresh cpu", "first cpu", "timed cpu", "warm cpu", "warm wall")
        print(f"{'command':<28} {'checkout':<16} " + " ".join(f"{head:>16}" for head in heads))
        for command in COMMANDS:
            seen: dict[Path, dict[str, list[float]]] = {
                checkout: {"fresh": [], "first": [], "timed": [], "warm_cpu": [], "warm_wall": []}
                for checkout in checkouts
            }
            for _ in range(options.repeat):
                for checkout in checkouts:  # in turns, so load falls on each alike
                    done = python(me, "--child", str(root), command, "3", checkout=checkout)
                    if done.returncode != 0:
                        raise SystemExit(done.stderr[-2000:])
                    answer = json.loads(done.stdout.splitlines()[-1])
                    done = python(
                        me, "--child", str(root), command, "0", "timed", checkout=checkout
                    )
                    if done.returncode != 0:
                        raise SystemExit(done.stderr[-2000:])
                    answer |= json.loads(done.stdout.splitlines()[-1])
                    for name, values in seen[checkout].items():
                        found = answer[name]
                        values.extend(found if isinstance(found, list) else [found])
            label = COMMANDS[command][0] + (" --retry-failed" if command == "plan" else "")
            for kind, pick in (("median", statistics.median), ("min", min)):
                base = {name: pick(values) for name, values in seen[checkouts[0]].items()}
                for checkout in checkouts:
                    picked = [pick(values) for values in seen[checkout].values()]
                    cells = [
                        f"{value:>7.3f} s {value / base[name]:>5.2f}x"
                        for name, value in zip(base, picked, strict=True)
                    ]
                    row = f"{label} ({kind})"
                    print(f"{row:<28} {checkout.name[:16]:<16} " + " ".join(cells))
        for checkout in checkouts:
            cli, bare, own = import_times(options.repeat, checkout)
            print(
                f"{checkout.name}: python -c 'import servatus.cli' {cli:.3f} s wall, "
                f"python -c pass {bare:.3f} s (imports {cli - bare:.3f} s); "
                f"-X importtime servatus.cli cumulative {own / 1e6:.3f} s"
            )


if __name__ == "__main__":
    main()
