"""An ssh alias to the test cluster through :mod:`relay`, with a master connection of its own.

Servatus' ssh transport runs the ``ssh`` it finds on the caller's ``PATH`` with the alias as
destination and no ``-F`` (``servatus_slurm/src/servatus_slurm/transport.py``), so
:func:`slow_alias` needs no product change: it writes, in a directory of its own,

* ``ssh_config``: Host ``servatus-slow`` = the harness' ``servatus-test`` login (alice's key, the
  root's host key under ``HostKeyAlias servatus-test``) but at the relay's port, with its own
  ``ControlPath`` in that directory, so its master connection runs through the delay and never
  shares the direct alias' one;
* ``bin/ssh``: ``exec /usr/bin/ssh -F ssh_config "$@"``, after appending a line to ``ssh.log``
  (each line is one ``ssh`` process: one remote command, as Servatus counts them).

A profile with ``host = "servatus-slow"`` run with :attr:`Link.env`'s ``PATH`` then goes through
the relay, and so does :meth:`Link.ssh` for the floors. ``-F`` reads no system file, so the alias
exists only for that ``PATH``: nothing reaches the cluster around the delay by mistake.

``python benchmarks/slowlink.py --delay-ms 50`` keeps one up for a shell and prints the ``PATH``
to export (the delay given is the round trip).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import relay

SLOW_ALIAS = "servatus-slow"
RUN_DIR = Path("/run/servatus-cluster")  # tests/cluster/harness.py RUN_DIR: key, known_hosts
CLUSTER_ALIAS = "servatus-test"  # the host key is known under this name
USER = "alice"
SSH = "/usr/bin/ssh"
SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR")  # as the transport's


@dataclass(frozen=True)
class Link:
    """A slow alias that is up: its name, the environment that reaches it, its ``ssh`` count."""

    alias: str
    round_trip_ms: float
    directory: Path
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return self.directory / "ssh.log"

    def count(self) -> int:
        """``ssh`` processes started through this link so far."""
        with contextlib.suppress(FileNotFoundError):
            return len(self.log.read_bytes().splitlines())
        return 0

    def ssh(
        self, remote: str, *, input: bytes = b"", timeout: float = 600
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``remote`` through the link as the transport would (one ``ssh``, this ``PATH``)."""
        return subprocess.run(
            ["ssh", *SSH_OPTIONS, self.alias, remote],
            input=input,
            capture_output=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def timed(self, remote: str, *, input: bytes = b"") -> float:
        """Wall seconds of one successful :meth:`ssh`."""
        began = time.perf_counter()
        done = self.ssh(remote, input=input)
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()[-300:]
            raise SystemExit(f"ssh {self.alias} {remote[:60]!r} exited {done.returncode}: {said}")
        return elapsed


def write_config(directory: Path, port: int, alias: str = SLOW_ALIAS) -> Path:
    """The ``ssh_config`` and the ``bin/ssh`` wrapper of a link through ``port``."""
    config = directory / "ssh_config"
    config.write_text(f"""\
Host {alias}
    HostName {relay.LOOPBACK}
    Port {port}
    User {USER}
    IdentityFile {RUN_DIR / "id_ed25519"}
    IdentitiesOnly yes
    HostKeyAlias {CLUSTER_ALIAS}
    UserKnownHostsFile {RUN_DIR / "known_hosts"}
    StrictHostKeyChecking yes
    ControlMaster auto
    ControlPath {directory}/cm-%C
    ControlPersist 30m
""")
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "ssh"
    wrapper.write_text(
        f"#!/bin/sh\necho x >> '{directory}/ssh.log'\nexec {SSH} -F '{config}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return config


@contextlib.contextmanager
def slow_alias(round_trip_ms: float) -> Iterator[Link]:
    """A relay delaying half of ``round_trip_ms`` each way, the alias through it, its master
    connection opened (so no measurement pays the login) and closed at the end."""
    # Short: a ControlPath must fit in a socket address (108 bytes).
    directory = Path(tempfile.mkdtemp(prefix="slow-", dir="/tmp"))
    with relay.spawned(round_trip_ms / 2) as port:
        config = write_config(directory, port)
        env = {
            "PATH": f"{directory / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.path.expanduser("~"),
            "USER": os.environ.get("USER", "root"),
            "LOGNAME": os.environ.get("LOGNAME", "root"),
        }
        link = Link(SLOW_ALIAS, round_trip_ms, directory, env)
        try:
            link.timed("true")
            yield link
        finally:
            subprocess.run(
                [SSH, "-F", str(config), "-O", "exit", SLOW_ALIAS],
                capture_output=True,
                timeout=30,
                check=False,
            )
            for path in sorted(directory.rglob("*"), reverse=True):
                with contextlib.suppress(OSError):
                    path.rmdir() if path.is_dir() else path.unlink()
            with contextlib.suppress(OSError):
                directory.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=50, help="round trip (default 50)")
    options = parser.parse_args()
    with slow_alias(options.delay_ms) as link:
        print(f"export PATH={link.env['PATH']}")
        print(f"ssh {link.alias} true: {link.timed('true'):.3f} s; Ctrl-C ends it")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
