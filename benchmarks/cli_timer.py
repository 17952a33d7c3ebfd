"""Time one ``servatus`` command in a fresh process of whichever checkout is on ``PYTHONPATH``.

``bench_round_trips.py`` runs ``python cli_timer.py SPEC`` (SPEC a JSON object) in the campaign's
directory, with ``PYTHONPATH`` naming the checkout's sources and ``PATH`` reaching the slow
alias. It imports nothing from the benchmark's own checkout, so another branch's code is timed
as it is. The process first warms up (imports, plugins: ``ensure`` and ``status --offline`` of a
one-Task campaign), runs SPEC's ``setup`` commands untimed, then times ``timed`` and prints one
JSON line: exit code, wall and CPU seconds, its stdout, the ``ssh`` processes the link's log
counted meanwhile, and what the ssh transport ran (program names, the seconds spent in each,
bytes received and sent, and the commands themselves when there were few and none had stdin).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPLAYED = 20
"""Commands without stdin kept verbatim, so the benchmark can run the same in one ``ssh``."""


def count_lines(path: str) -> int:
    with contextlib.suppress(FileNotFoundError):
        return len(Path(path).read_bytes().splitlines())
    return 0


def warm_up() -> None:
    """Imports and plugins loaded: ``ensure`` and ``status --offline`` of a one-Task campaign
    (``bench_status_cpu.py`` warms up the same way)."""
    from servatus.cli import main as servatus

    with tempfile.TemporaryDirectory() as warm, open(os.devnull, "w") as sink:
        tasks = Path(warm) / "t.jsonl"
        tasks.write_text('{"key": "w", "args": ["/bin/true"]}\n')
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            servatus(["ensure", f"{warm}/state", str(tasks)])
            servatus(["status", f"{warm}/state", "--offline"])


def checkout_option(parser: argparse.ArgumentParser) -> None:
    """``--checkout DIR``, repeatable: the checkouts a benchmark times side by side."""
    parser.add_argument(
        "--checkout",
        type=lambda text: Path(text).resolve(),
        action="append",
        metavar="DIR",
        help="time this checkout's servatus (again for several; default: this one)",
    )


def main() -> None:
    spec: dict[str, Any] = json.loads(sys.argv[1])
    from servatus.cli import main as servatus

    warm_up()
    for argv in spec.get("setup", []):
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            code = servatus(argv)
        if code != 0:
            raise SystemExit(f"servatus {' '.join(argv)} exited {code}: {printed.getvalue()}")

    seen: Counter[str] = Counter()
    waited: dict[str, float] = {}
    commands: list[list[str]] = []
    moved = {"received": 0, "sent": 0}
    from servatus_slurm.transport import SshTransport

    plain_run = SshTransport.run

    def run(self: Any, argv: Any, *, stdin: bytes = b"", **options: Any) -> Any:
        began = time.perf_counter()
        result = plain_run(self, argv, stdin=stdin, **options)
        name = os.path.basename(argv[0])
        waited[name] = waited.get(name, 0.0) + time.perf_counter() - began
        seen[name] += 1
        if not stdin and len(commands) < REPLAYED:
            commands.append(list(argv))
        moved["received"] += len(result.stdout) + len(result.stderr)
        moved["sent"] += len(stdin)
        return result

    SshTransport.run = run  # type: ignore[method-assign]
    log = spec["ssh_log"]
    before = count_lines(log)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        cpu = time.process_time()
        began = time.perf_counter()
        code = servatus(spec["timed"])
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu
    answer = {
        "code": code,
        "elapsed": elapsed,
        "cpu": cpu,
        "ssh": count_lines(log) - before,
        "commands": dict(seen),
        "waited": dict(waited),
        "argvs": commands if sum(seen.values()) == len(commands) else None,
        **moved,
        "stdout": printed.getvalue(),
    }
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
