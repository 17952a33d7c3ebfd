"""Two real Unix users for the security tests (issue #30): the campaign's owner and another user
of the same project group, made once per machine by root and kept (``useradd`` is not cheap, and
the tox environments run side by side).

Everything the two share lives under :func:`shared_base`, a root-owned directory every user can
enter: pytest's own ``tmp_path`` is root's alone, so neither user could reach it.
"""

from __future__ import annotations

import atexit
import fcntl
import grp
import importlib.metadata
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

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


_PACKAGES = (
    "servatus",
    "servatus_slurm",
    "servatus_publish",
    "servatus_apptainer",
    "attr",
    "attrs",
    "cattrs",
    "click",
    "pluggy",
    "typing_extensions",
)
"""What a Servatus process of the test users imports."""
_DISTRIBUTIONS = (
    "servatus",
    "servatus-core",
    "servatus-slurm",
    "servatus-publish",
    "servatus-apptainer",
    "attrs",
    "cattrs",
    "click",
    "pluggy",
    "typing_extensions",
)
"""Whose metadata they read: the entry points that load the plugins, and versions."""
_SITE: list[Path] = []


def readable_site() -> Path:
    """A copy of what :data:`_PACKAGES` and :data:`_DISTRIBUTIONS` need, readable by every user,
    made once per test process: the tests' own environment may sit under root's home (pyenv,
    or a clone there), which the test users cannot enter."""
    if _SITE:
        return _SITE[0]
    site = Path(tempfile.mkdtemp(prefix="servatus-site-", dir="/var/tmp"))
    atexit.register(shutil.rmtree, site, True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if spec.submodule_search_locations:
            shutil.copytree(origin.parent, site / name, ignore=skip)
        else:
            shutil.copy2(origin, site / origin.name)
    for name in _DISTRIBUTIONS:
        try:
            found = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        metadata = Path(str(found.locate_file(""))) / f"{found._path.name}"  # type: ignore[attr-defined]
        if metadata.is_dir():
            shutil.copytree(metadata, site / metadata.name, ignore=skip)
    for path in [site, *site.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    _SITE.append(site)
    return site


PRELUDE = "import sys; sys.path.insert(0, sys.argv.pop(1))\n"
"""The first line of code a test user's Python runs: the readable site goes first on its path,
given as the first argument after ``-c``."""


def python(user: User) -> list[str]:
    """``[interpreter, "-c"]`` for ``user``: this Python's version, one the user can run (the
    tests' own, or the system's of the same version), with :func:`readable_site` (code given to
    it must start with :data:`PRELUDE`, its first argument be :func:`readable_site`)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        sys.executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ):
        try:
            check = user.run([candidate, "-c", "pass"])
        except OSError:
            continue
        if check.returncode == 0:
            return [candidate, "-c"]
    pytest.skip(f"no python{version} that the test users can run (the tests run under one)")


def python_code(user: User, code: str, *args: str) -> list[str]:
    """The argv that runs ``code`` (seeing ``args`` as ``sys.argv[1:]``) as ``user``."""
    return [*python(user), PRELUDE + code, str(readable_site()), *args]
