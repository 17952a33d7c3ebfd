"""What the lease benchmarks share: one lease on the test cluster, submitted by hand as the
cluster tests do (``tests/lane_cluster/lane_lease.py``), through the real SSH transport.

Needs root and the test cluster up (``python3 tests/cluster/harness.py up``). It holds the test
sessions' shared lock while it runs (as ``bench_submit_cluster.py`` does), and cancels its lease
by job number, never ``scancel --me``."""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(CHECKOUT), str(CHECKOUT / "tests"), str(CHECKOUT / "tests" / "lane_cluster")]

from bench_submit_cluster import sharing_the_cluster  # noqa: E402
from lane_lease import Lease, new_id, submit, wait_until  # noqa: E402

from cluster import harness  # noqa: E402
from cluster.fixture import profile_toml  # noqa: E402
from servatus.config import Profile  # noqa: E402
from servatus.plugins import hooks  # noqa: E402

WORK = f"/scratch/{harness.USER}/sweep"
__all__ = ["new_id", "running_lease", "wait_until"]


@contextlib.contextmanager
def running_lease(*, slots: int, time_limit: int, poll_seconds: int = 5) -> Iterator[Lease]:
    """A lease of ``slots`` one-CPU slots, started (its ``start`` marker seen), in a fresh
    ``log_root`` of its own; cancelled on the way out."""
    base = f"{WORK}/bench-lease-{secrets.token_hex(4)}"
    with sharing_the_cluster(), tempfile.TemporaryDirectory() as temporary:
        config = Path(temporary) / "SERVATUS.toml"
        config.write_text(
            profile_toml(host=harness.ALIAS, work_root=f"{base}/work", log_root=f"{base}/logs")
        )
        target = Profile.load(config, name="cpu").target
        transport = hooks().transport("ssh").connect(target)
        made = transport.run(["mkdir", "-p", f"{base}/work", f"{base}/logs"])
        if made.returncode != 0:
            raise SystemExit(f"cannot make {base}: {made.stderr.decode().strip()}")
        lease = submit(
            transport, target, slots=slots, time_limit=time_limit, poll_seconds=poll_seconds
        )
        try:
            wait_until(
                "the lease's start", lambda: lease.markers(lease.id).get("start"), seconds=60
            )
            yield lease
        finally:
            lease.cancel()
