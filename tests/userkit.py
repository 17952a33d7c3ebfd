"""Two real Unix users for the security tests (issue #30): the campaign's owner and another user
of the same project group, made once per machine by root and kept (``useradd`` is not cheap, and
the tox environments run side by side).

Everything the two share lives under :func:`shared_base`, a root-owned directory every user can
enter: pytest's own ``tmp_path`` is root's alone, so neither user could reach it.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

VICTIM = "servatus-victim"
"""Runs Servatus: owns the campaign, the lease, the results."""
MALLORY = "servatus-mallory"
"""Another user of the same project group, with every right the group gives her."""
GROUP = "servatus-project"
"""The project group both belong to, as on a cluster where a project shares directories."""
HOMES = Path("/var/tmp/servatus-users")
_LOCK = Path("/var/tmp/servatus-users.lock")


@attrs.frozen
class User:
    name: str
    uid: int
    gid: int
    project_gid: int
    home: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/bin:/bin",
            "LC_ALL": "C.UTF-8",
            **(extra or {}),
        }

    def _as(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        env = kwargs.pop("env", None)
        return {
            "user": self.uid,
            "group": self.gid,
            "extra_groups": [self.project_gid],
            "umask": kwargs.pop("umask", 0o022),
            "env": self.env(env),
            **kwargs,
        }

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """``argv`` as this user, with this user's groups and a small clean environment."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("timeout", 120)
        return subprocess.run(list(argv), **self._as(kwargs))

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), **self._as(kwargs))

    def sh(self, text: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return self.run(["/bin/sh", "-c", text], **kwargs)


def _ensure_group(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", name], check=True, capture_output=True)
        return grp.getgrnam(name).gr_gid


def _ensure_user(name: str, project_gid: int) -> User:
    home = HOMES / name
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "-M", "-U", "-d", str(home), "-G", GROUP, "-s", "/bin/sh", name],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(name)
    if not home.is_dir():
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        home.chmod(0o755)
    return User(name, entry.pw_uid, entry.pw_gid, project_gid, home)


def two_users() -> tuple[User, User]:
    """The victim and Mallory, made under a machine-wide lock if they are not there yet."""
    HOMES.parent.mkdir(parents=True, exist_ok=True)
    HOMES.mkdir(exist_ok=True)
    HOMES.chmod(0o755)
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        project = _ensure_group(GROUP)
        return _ensure_user(VICTIM, project), _ensure_user(MALLORY, project)


@contextmanager
def shared_base() -> Iterator[Path]:
    """A fresh root-owned directory (0755) both users can enter; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="servatus-users-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def project_directory(path: Path, mode: int = 0o2770) -> Path:
    """A project directory as clusters make them: root's, the project group's, group-writable
    (setgid, no sticky bit unless ``mode`` says so)."""
    path.mkdir()
    os.chown(path, 0, grp.getgrnam(GROUP).gr_gid)
    path.chmod(mode)
    return path


def owned(path: Path, user: User, mode: int, *, directory: bool = True) -> Path:
    """``path`` made as ``user``'s own, as that user would make it."""
    if directory:
        path.mkdir()
    else:
        path.touch()
    os.chown(path, user.uid, user.gid)
    path.chmod(mode)
    return path
