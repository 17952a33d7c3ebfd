#!/usr/bin/env python3
"""A real, local Slurm 24.11 cluster for Servatus's tests: one node most tests use, three more.

Usage (as root)::

    python3 tests/cluster/harness.py up [--min-job-age S] [--proctrack P] [--wheels DIR]
    python3 tests/cluster/harness.py down [--purge]
    python3 tests/cluster/harness.py status
    python3 tests/cluster/harness.py env
    python3 tests/cluster/harness.py build-wheels OUT
    python3 tests/cluster/harness.py install-wheels DIR

The cluster is a Debian 13 root (Debian 12 ships Slurm 22.05, which lacks ``--export=NIL``) built
once with debootstrap and cached outside the checkout. munged, slurmctld, slurmd and sshd run in it
inside one private mount namespace whose root the harness made the Debian 13 root with
``pivot_root`` (not ``chroot``, under which the kernel refuses the unprivileged user namespaces
bubblewrap needs); the root is the login node, sshd on loopback makes it reachable as a laptop
reaches a cluster, and its ``/scratch`` is bind-mounted at ``/scratch`` outside so both sides see
one filesystem. See docs/development/cluster.md. Standard library only: this runs before anything
is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("SERVATUS_CLUSTER_CACHE", "/var/cache/servatus-cluster"))
RUN_DIR = Path("/run/servatus-cluster")
SSH_INCLUDE = Path("/etc/ssh/ssh_config.d/servatus-test.conf")
SCRATCH = Path("/scratch")

# What the root is built from; all of it goes into the recipe stamp, so changing any of it rebuilds.
SUITE = "trixie"
VARIANT = "minbase"
PACKAGES = (
    "slurm-wlm",
    "munge",
    "openssh-server",
    "python3",
    "python3-venv",
    "procps",
    "bubblewrap",
    "dash",
)
FAKE_GPU_DIR = "/var/lib/fakegpu"
FAKE_GPUS = ("nvidia0", "nvidia1")
BUILD_REVISION = 1  # bump when the post-debootstrap steps in build_root() change

ALIAS = "servatus-test"
SSH_PORT = 2222
USER = "alice"
FIRST_UID = 1001
SECOND_USER = "mallory"
"""Another user of the cluster, inside the root only: a member of alice's primary group (her
project group) and nothing more, for the tests of a shared ``log_root`` (issue #30)."""
SECOND_FIRST_UID = 2001
CPUS = 64
"""CPUs the node declares: far more than the machine has (slurmd accepts it with
``config_overrides``), so the lane's slow scenarios, which start together at the session's start
(``tests/cluster/prelude.py``), and the tests beside them never wait for a CPU; their jobs mostly
sleep. At most about 45 are held at once."""
REAL_MEMORY_MIB = 32000
"""500 MiB per declared CPU, as before: memory never binds before the CPUs do."""
SSH_MAX_SESSIONS = 64
"""sshd's sessions per connection (OpenSSH's default is 10): every SSH lane of the concurrent
scenarios shares the one ControlMaster connection, and a session the master is refused falls
back to a connection of its own with an error line on stderr."""
PARTITION = "debug"
GPU_TYPE = "a100"
GPU_COUNT = len(FAKE_GPUS)
SLURM_BIN = "/usr/bin"
VENV = "/opt/servatus"
WHEELHOUSE = "/opt/servatus-wheels"
DEFAULT_MIN_JOB_AGE = 30
DEFAULT_PROCTRACK = "proctrack/linuxproc"
DISTRIBUTIONS = ("servatus_core", "servatus_publish", "servatus_slurm", "servatus_apptainer", ".")
INNER_PYTHON = "3.13"

NODES = ("n1", "n2", "n3")
"""More compute nodes, each its own ``slurmd -N NAME`` on this machine, in partition ``nodes``
only: the node named after ``hostname`` and partition ``debug`` stay as they were, so a test
that never names ``nodes`` sees the one-node cluster. Each node has the feature of its own name,
so a profile's ``constraint = "n2"`` (or ``"n1|n2"``) places work on it."""
NODE_PORT = 17001
"""n1's slurmd port; n2's is the next, and so on (the first node keeps Slurm's 6818)."""
NODE_CPUS = 8
NODE_MEMORY_MIB = 2000
NODES_PARTITION = "nodes"
LEGACY_SLURMD_PID = "run/slurmd.pid"
"""Where slurmd's pid file was before the nodes had one each; a running cluster started then
has its slurmd found and stopped through it."""

# Daemons in start order; each writes its pid file inside the namespace, and is stopped by it.
# "slurmd" is the first node's; "slurmd@n1" and so on the other nodes'.
DAEMONS = ("munged", "slurmctld", "slurmd", *(f"slurmd@{name}" for name in NODES), "sshd")
PID_FILES = {
    "munged": "run/munge/munged.pid",
    "slurmctld": "run/slurmctld.pid",
    "slurmd": f"run/slurmd-{socket.gethostname().split('.')[0]}.pid",
    **{f"slurmd@{name}": f"run/slurmd-{name}.pid" for name in NODES},
    "sshd": "run/sshd.pid",
}


class HarnessError(RuntimeError):
    """The cluster could not be brought to the asked state; the message says why."""


def log(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- recipe, paths, state


def recipe() -> dict[str, object]:
    return {
        "suite": SUITE,
        "variant": VARIANT,
        "packages": sorted(PACKAGES),
        "fake_gpus": [FAKE_GPU_DIR, *FAKE_GPUS],
        "revision": BUILD_REVISION,
    }


def stamp() -> str:
    text = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def root_dir() -> Path:
    return CACHE_DIR / f"root-{stamp()}"


def node_name() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class Settings:
    """The per-start knobs; a different value than the running cluster restarts Slurm."""

    min_job_age: int = DEFAULT_MIN_JOB_AGE
    proctrack: str = DEFAULT_PROCTRACK


@dataclass
class State:
    """What `up` did, kept in RUN_DIR so `down` and `status` act on facts, not guesses."""

    root: str
    uid: int
    gid: int
    settings: Settings
    mounts: list[str]
    """Mounts made outside, in this machine's namespace: the /scratch bind."""
    holder: int | None = None
    """The process that holds the cluster's mount namespace open (``sleep infinity``)."""
    namespace: str | None = None
    """That namespace as ``/proc/PID/ns/mnt`` names it, e.g. ``mnt:[4026532177]``."""


def read_state() -> State | None:
    path = RUN_DIR / "state.json"
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return State(
        root=raw["root"],
        uid=raw["uid"],
        gid=raw["gid"],
        settings=Settings(**raw["settings"]),
        mounts=list(raw["mounts"]),
        holder=raw.get("holder"),
        namespace=raw.get("namespace"),
    )


def write_state(state: State) -> None:
    write_if_changed(RUN_DIR / "state.json", json.dumps(asdict(state), indent=2) + "\n", 0o600)


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write only on a difference, so a repeated `up` changes nothing."""
    try:
        if path.read_text() == text and (path.stat().st_mode & 0o7777) == mode:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialise harness commands: two `up`s at once would race on mounts and daemons."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / "lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    capture: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv),
        check=False,
        capture_output=capture,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()[-2000:] if capture else ""
        raise HarnessError(f"{shlex.join(argv)} exited {result.returncode}: {detail}")
    return result


ROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


def in_root(root: Path, argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command as root in the root with a plain environment: in the cluster's namespace
    while it exists, else (building a root, before the first start) under a plain chroot."""
    state = live_state(root)
    prefix = enter_argv(state) if state is not None else ["chroot", str(root)]
    return run([*prefix, *argv], env=ROOT_ENV, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- building the root


def apt_mirror() -> str:
    """The Debian mirror this machine already uses (deb822 or one-line sources)."""
    override = os.environ.get("SERVATUS_CLUSTER_MIRROR")
    if override:
        return override
    candidates: list[str] = []
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for line in path.read_text().splitlines():
            if line.strip().lower().startswith("uris:"):
                candidates.extend(line.split(":", 1)[1].split())
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]:
        if path.is_file():
            for line in path.read_text().splitlines():
                match = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", line)
                if match:
                    candidates.append(match.group(1))
    for uri in candidates:
        if "security" not in uri and uri.startswith(("http://", "https://", "file:")):
            return uri
    return "http://deb.debian.org/debian"


def build_root(root: Path) -> None:
    """debootstrap the root into a temporary directory, finish it, then rename it into place."""
    if shutil.which("debootstrap") is None:
        raise HarnessError("debootstrap is not installed (apt-get install debootstrap)")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for stale in CACHE_DIR.glob("root-*"):
        if stale != root and not mounts_under(stale):
            log(f"removing stale root {stale}")
            shutil.rmtree(stale)
    tmp = root.with_name(root.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    mirror = apt_mirror()
    log(f"building the {SUITE} root in {root} from {mirror} (about 70 s, once per recipe)")
    started = time.monotonic()
    run(
        [
            "debootstrap",
            f"--variant={VARIANT}",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(tmp),
            mirror,
        ],
        timeout=1800,
    )
    # pip inside would fail TLS against this machine's proxy CA without the outside bundle.
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file():
        target = tmp / "etc/ssl/certs/ca-certificates.crt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        shutil.copyfile(bundle, target)
    gpu_dir = tmp / FAKE_GPU_DIR.lstrip("/")
    gpu_dir.mkdir(parents=True, exist_ok=True)
    for name in FAKE_GPUS:
        (gpu_dir / name).touch()
    (tmp / "scratch").mkdir(exist_ok=True)
    for archive in (tmp / "var/cache/apt/archives").glob("*.deb"):
        archive.unlink()
    in_root(tmp, ["ssh-keygen", "-A"])
    key = tmp / "etc/munge/munge.key"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
    munge_uid, munge_gid = lookup_ids(tmp, "munge")
    os.chown(key, munge_uid, munge_gid)
    key.chmod(0o400)
    (tmp / ".servatus-recipe.json").write_text(json.dumps(recipe(), indent=2) + "\n")
    tmp.rename(root)
    log(f"built the root in {time.monotonic() - started:.0f} s")


def lookup_ids(root: Path, name: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(fields[3])
    raise HarnessError(f"no user {name} in {root}/etc/passwd")


def ids_in(path: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[2].isdigit():
                found[fields[0]] = int(fields[2])
    return found


# ---------------------------------------------------------------- mounts


def mountinfo() -> list[tuple[str, str]]:
    """(mount point, root within its filesystem) for every mount, octal escapes decoded."""

    def unescape(text: str) -> str:
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)

    result = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        result.append((unescape(fields[4]), unescape(fields[3])))
    return result


def mounted(path: Path) -> bool:
    return any(point == str(path) for point, _ in mountinfo())


def mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    points = [point for point, _ in mountinfo() if point.startswith(prefix)]
    points += [point for point, src in mountinfo() if src.startswith(prefix)]
    return points


def ensure_scratch_mount(root: Path, done: list[str]) -> None:
    """The one outside mount: the root's /scratch at /scratch, the cluster filesystem both sides
    share (inside the namespace it is just the root's own /scratch directory)."""
    if mounted(SCRATCH):
        if not same_file(SCRATCH, root / "scratch"):
            raise HarnessError(f"{SCRATCH} is a mount that is not this cluster's scratch")
    else:
        if SCRATCH.exists() and any(SCRATCH.iterdir()):
            raise HarnessError(f"{SCRATCH} exists and is not empty; refusing to hide it")
        if not SCRATCH.exists():
            (CACHE_DIR / "outside-scratch-created").touch()
            SCRATCH.mkdir(parents=True)
        run(["mount", "--bind", str(root / "scratch"), str(SCRATCH)])
    if str(SCRATCH) not in done:
        done.append(str(SCRATCH))


# ---------------------------------------------------------------- the mount namespace

# Run by `unshare --mount --propagation private`, so none of these mounts is seen outside and
# none made outside later is seen inside. The kernel filesystems are mounted below the root,
# then pivot_root makes the root the namespace's own "/" and the old one is detached: its
# processes are then not "chrooted" (the root is the namespace's root), which is what lets an
# unprivileged user create a user namespace (bubblewrap, rootless containers) in a job. /run is
# a fresh tmpfs, so no pid file outlives the namespace. A background `sleep infinity` holds the
# namespace open; the daemons and login() enter it with nsenter.
NAMESPACE_SETUP = r"""set -eu
root=$1
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --bind /sys "$root/sys"
if [ -d /sys/fs/cgroup ]; then
    # The host's cgroup hierarchies, so proctrack/cgroup can work as on a real cluster.
    mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
fi
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs -o mode=1777,size=256m tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=755,size=64m tmpfs "$root/run"
cd "$root"
pivot_root . .
umount -l .
cd /
/bin/bash -c "exec -a $2 /bin/sleep infinity" </dev/null >/dev/null 2>&1 &
echo "$!"
"""
HOLDER_NAME = "servatus-cluster-namespace"


def identity(path: Path | str) -> tuple[int, int] | None:
    """(device, inode) of a directory, following /proc/PID/root into another namespace."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def namespace_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def holder_alive(state: State) -> bool:
    """True while the recorded holder still holds the recorded namespace rooted at the root."""
    holder = state.holder
    return (
        holder is not None
        and state.namespace is not None
        and not zombie(holder)
        and namespace_of(holder) == state.namespace
        and identity(f"/proc/{holder}/root") == identity(state.root)
    )


def live_state(root: Path) -> State | None:
    """The state, if it is this root's and its namespace is alive."""
    state = read_state()
    if state is None or state.root != str(root) or not holder_alive(state):
        return None
    return state


def enter_argv(state: State) -> list[str]:
    """The command prefix that runs a program in the cluster's namespace, at its "/" (setns(2)
    into a mount namespace also moves root and working directory to the namespace's root)."""
    return ["nsenter", f"--mount=/proc/{state.holder}/ns/mnt", "--"]


def inside(root: Path) -> Path:
    """Where the namespace's "/" is from outside: its holder's root, or the bare root without."""
    state = live_state(root)
    return Path(f"/proc/{state.holder}/root") if state is not None else root


def start_namespace(root: Path) -> tuple[int, str]:
    for tool in ("unshare", "nsenter", "pivot_root"):
        if shutil.which(tool) is None:
            raise HarnessError(f"{tool} is missing (apt-get install util-linux)")
    result = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "--"),
            *("/bin/sh", "-c", NAMESPACE_SETUP, "servatus-namespace", str(root), HOLDER_NAME),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=ROOT_ENV,
        timeout=60,
        start_new_session=True,  # the holder must not die with the caller's process group
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        detail = (result.stderr or result.stdout).strip()[-2000:]
        raise HarnessError(f"could not make the cluster's mount namespace: {detail}")
    holder = int(result.stdout.strip())
    namespace = namespace_of(holder)
    if namespace is None or namespace == namespace_of(os.getpid()):
        raise HarnessError(f"the namespace holder {holder} is gone or not in its own namespace")
    return holder, namespace


def ensure_namespace(root: Path, previous: State | None) -> tuple[int, str]:
    """The running namespace, or, after a crash or a chroot-era cluster, a clean new one."""
    if previous is not None and previous.root == str(root) and holder_alive(previous):
        assert previous.holder is not None and previous.namespace is not None
        return previous.holder, previous.namespace
    leftovers = processes_in(root, previous.namespace if previous is not None else None)
    if leftovers:
        log(f"ending {len(leftovers)} processes left by a cluster whose namespace is gone")
        close_master()
        terminate(leftovers, grace=2)
    legacy = [point for point, _ in mountinfo() if point.startswith(f"{root}/")]
    if legacy:
        log(f"unmounting {len(legacy)} mounts left under the root")
        unmount_all(None, legacy)
    return start_namespace(root)


def namespace_mounts(state: State | None) -> list[str]:
    """The mount points inside the live namespace, as its processes see them."""
    if state is None or state.holder is None:
        return []
    try:
        text = Path(f"/proc/{state.holder}/mountinfo").read_text()
    except OSError:
        return []
    return [line.split()[4] for line in text.splitlines()]


def same_file(a: Path, b: Path) -> bool:
    first, second = a.stat(), b.stat()
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def unmount_all(root: Path | None, recorded: Sequence[str]) -> list[str]:
    """Unmount what `up` mounted, deepest and newest first; return what would not go."""
    points = list(recorded)
    if root is not None:
        points += [p for p in mounts_under(root) if p not in points]
    stuck: list[str] = []
    for point in sorted(set(points), key=points.index, reverse=True):
        path = Path(point)
        # Submounts the kernel shows beneath this point go first.
        for inner in sorted((p for p, _ in mountinfo() if p.startswith(point + "/")), reverse=True):
            run(["umount", inner], check=False)
        for _ in range(20):
            if not mounted(path):
                break
            if run(["umount", point], check=False).returncode != 0:
                time.sleep(0.25)
        if mounted(path):
            run(["umount", "-l", point], check=False)
            stuck.append(point)
    return stuck


# ---------------------------------------------------------------- users and ssh


def choose_ids(root: Path) -> tuple[int, int, bool]:
    """alice's uid/gid, the same inside and out; True when the outside user must be created."""
    outside = ids_in(Path("/etc/passwd"))
    outside_groups = ids_in(Path("/etc/group"))
    if USER in outside:
        uid = outside[USER]
        gid = int(run(["id", "-g", USER]).stdout.strip())
        return uid, gid, False
    inside = ids_in(root / "etc/passwd")
    inside_groups = ids_in(root / "etc/group")
    taken = set(outside.values()) | set(outside_groups.values())
    taken |= {v for k, v in inside.items() if k != USER}
    taken |= {v for k, v in inside_groups.items() if k != USER}
    candidates = [inside[USER]] if USER in inside else []
    candidates += list(range(FIRST_UID, 60000))
    for number in candidates:
        if number not in taken:
            return number, number, True
    raise HarnessError("no free uid for alice")


def ensure_users(root: Path) -> tuple[int, int]:
    uid, gid, create_outside = choose_ids(root)
    if create_outside:
        log(f"creating the outside user {USER} ({uid}:{gid}) so /scratch ownership has a name")
        run(["groupadd", "-g", str(gid), USER])
        run(
            ["useradd", "-M", "-N", "-u", str(uid), "-g", str(gid), "-s", "/usr/sbin/nologin", USER]
        )
        (CACHE_DIR / "outside-user-created").write_text(f"{USER} {uid} {gid}\n")
    inside = ids_in(root / "etc/passwd")
    if USER in inside and inside[USER] != uid:
        in_root(root, ["userdel", "-r", USER], check=False)
        in_root(root, ["groupdel", USER], check=False)
        inside = {}
    if USER not in inside:
        if USER in ids_in(root / "etc/group"):
            in_root(root, ["groupdel", USER])
        in_root(root, ["groupadd", "-g", str(gid), USER])
        in_root(root, ["useradd", "-m", "-u", str(uid), "-g", str(gid), "-s", "/bin/bash", USER])
    return uid, gid


def ensure_second_user(root: Path, alice_gid: int) -> tuple[int, int]:
    """Mallory inside the root: her own group, plus alice's primary group as a supplementary
    one (a project group both are in), a home, no sshd login (sshd admits alice only), no
    sudo. Her uid is free inside and outside, so her files on /scratch read as nobody else's.
    Idempotent: an existing mallory is kept and only put back into alice's group if missing."""
    inside = ids_in(root / "etc/passwd")
    if SECOND_USER not in inside:
        taken = set(ids_in(Path("/etc/passwd")).values()) | set(ids_in(Path("/etc/group")).values())
        taken |= set(inside.values()) | set(ids_in(root / "etc/group").values())
        number = next((n for n in range(SECOND_FIRST_UID, 60000) if n not in taken), None)
        if number is None:
            raise HarnessError(f"no free uid for {SECOND_USER}")
        if SECOND_USER not in ids_in(root / "etc/group"):
            in_root(root, ["groupadd", "-g", str(number), SECOND_USER])
        in_root(root, ["useradd", "-m", "-u", str(number), "-g", SECOND_USER, "-s", "/bin/bash",
                       SECOND_USER])  # fmt: skip
    group = alice_group(root, alice_gid)
    if SECOND_USER not in group_members(root, group):
        in_root(root, ["usermod", "-a", "-G", group, SECOND_USER])
    return lookup_ids(root, SECOND_USER)


def alice_group(root: Path, gid: int) -> str:
    for line in (root / "etc/group").read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 2 and fields[2] == str(gid):
            return fields[0]
    raise HarnessError(f"no group {gid} in {root}/etc/group")


def group_members(root: Path, name: str) -> list[str]:
    for line in (root / "etc/group").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name and len(fields) > 3:
            return [member for member in fields[3].split(",") if member]
    return []


def second_user_ids(root: Path, alice_gid: int) -> tuple[int, int, tuple[int, ...]]:
    """Mallory's uid, gid and every group she is in (her own, then alice's primary group)."""
    uid, gid = lookup_ids(root, SECOND_USER)
    return uid, gid, (gid, alice_gid)


def ensure_ssh(root: Path, uid: int, gid: int) -> bool:
    """A key-only login for alice and an ssh_config alias root's ssh reads by itself; True if
    sshd's own configuration changed (a running sshd must be restarted to read it)."""
    RUN_DIR.mkdir(mode=0o700, exist_ok=True)
    key = RUN_DIR / "id_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", ALIAS, "-f", str(key)])
    ssh_dir = root / "home" / USER / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    authorized = ssh_dir / "authorized_keys"
    write_if_changed(authorized, key.with_suffix(".pub").read_text(), 0o600)
    for path in (ssh_dir, authorized):
        os.chown(path, uid, gid)
    ssh_dir.chmod(0o700)
    host_key = (root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    write_if_changed(RUN_DIR / "known_hosts", f"{ALIAS} {host_key[0]} {host_key[1]}\n", 0o600)
    config = f"""\
# Written by tests/cluster/harness.py up; removed by down.
Host {ALIAS}
    HostName 127.0.0.1
    Port {SSH_PORT}
    User {USER}
    IdentityFile {key}
    IdentitiesOnly yes
    HostKeyAlias {ALIAS}
    UserKnownHostsFile {RUN_DIR / "known_hosts"}
    StrictHostKeyChecking yes
    ControlMaster auto
    ControlPath {RUN_DIR}/control-%C
    ControlPersist 30m
    ServerAliveInterval 10
    ServerAliveCountMax 2
"""
    write_if_changed(SSH_INCLUDE, config, 0o644)
    return write_if_changed(
        root / "etc/ssh/sshd_config.d/servatus-test.conf", f"MaxSessions {SSH_MAX_SESSIONS}\n"
    )


def ensure_scratch(root: Path, uid: int, gid: int) -> None:
    user_root = root / "scratch" / USER
    for path in (
        user_root,
        user_root / "sweep",
        user_root / "sweep/logs",
        user_root / "sweep/results",
    ):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chown(path, uid, gid)


# ---------------------------------------------------------------- slurm configuration


def node_lines() -> str:
    """One line per extra node: its own port, its name as its feature, this machine as host."""
    return "".join(
        f"NodeName={name} NodeHostname={node_name()} Port={NODE_PORT + index} CPUs={NODE_CPUS}"
        f" RealMemory={NODE_MEMORY_MIB} Features={name} State=UNKNOWN\n"
        for index, name in enumerate(NODES)
    )


def slurm_conf(settings: Settings) -> str:
    node = node_name()
    gres = f"gpu:{GPU_TYPE}:{GPU_COUNT}"
    extra = ",".join(NODES)
    return f"""\
# Written by tests/cluster/harness.py; no accounting, fast scheduling. The first node and
# partition debug are the one-node cluster most tests use; n1..n3 are more slurmd daemons on this
# machine (their own ports; %n gives each its own spool, log and pid file), partition nodes.
ClusterName=servatus
SlurmctldHost={node}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ProctrackType={settings.proctrack}
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge={settings.min_job_age}
ReturnToService=2
SlurmdParameters=config_overrides
DefMemPerCPU=256
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
NodeName={node} CPUs={CPUS} RealMemory={REAL_MEMORY_MIB} Gres={gres} State=UNKNOWN
{node_lines()}PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName={NODES_PARTITION} Nodes={extra} Default=NO MaxTime=INFINITE State=UP
"""


def ensure_configs(root: Path, settings: Settings) -> bool:
    """Write slurm.conf, gres.conf, cgroup.conf and /etc/hosts; True if slurm's files changed."""
    node = node_name()
    etc = root / "etc/slurm"
    gpus = f"{FAKE_GPU_DIR}/nvidia[0-{GPU_COUNT - 1}]"
    changed = write_if_changed(etc / "slurm.conf", slurm_conf(settings))
    gres = f"NodeName={node} Name=gpu Type={GPU_TYPE} File={gpus}\n"
    changed |= write_if_changed(etc / "gres.conf", gres)
    # linuxproc needs no cgroups, and slurmd refuses to start where none is mounted; with
    # proctrack/cgroup it uses the host's hierarchies, bound into the root, without systemd.
    cgroup = "CgroupPlugin=autodetect\nIgnoreSystemd=yes\n"
    if settings.proctrack != "proctrack/cgroup":
        cgroup = "CgroupPlugin=disabled\n"
    changed |= write_if_changed(etc / "cgroup.conf", cgroup)
    write_if_changed(root / "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.0.1\t{node}\n")
    spools = [f"var/spool/slurmd/{name}" for name in (node, *NODES)]
    for sub in ("var/spool/slurmctld", *spools, "var/log/slurm"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return changed


# ---------------------------------------------------------------- daemons


def pid_of(root: Path, daemon: str) -> int | None:
    """The daemon's pid from its pid file, if that process is alive and belongs to the cluster:
    its root is the root, and it is in the cluster's namespace (or, for a cluster started by
    the chroot-era harness, in none of its own)."""
    try:
        pid = int((inside(root) / PID_FILES[daemon]).read_text().split()[0])
    except (FileNotFoundError, NotADirectoryError, ValueError, IndexError):
        return None
    if zombie(pid) or identity(f"/proc/{pid}/root") != identity(root):
        return None
    state = live_state(root)
    if state is not None and namespace_of(pid) != state.namespace:
        return None
    return pid


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def processes_in(root: Path, namespace: str | None = None) -> list[int]:
    """Every process of the cluster, all of them started from what the harness ran.

    That is: a process whose root is the root (the namespace's own "/", a bwrap sandbox's
    read-only bind of it, a chroot-era daemon); one in the cluster's mount namespace (e.g.
    sshd's privilege-separated child, chrooted to /run/sshd), taken from the state unless
    given, and trusted only when a process rooted in the root is in it too, since the kernel
    reuses a dead namespace's number; and every descendant of those.
    """
    wanted = identity(root)
    if namespace is None:
        state = read_state()
        if state is not None and state.root == str(root):
            namespace = state.namespace
    if wanted is None:
        return []
    table: dict[int, tuple[int | None, bool, str | None]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            rooted = identity(f"/proc/{pid}/root") == wanted
            table[pid] = (parent_of(pid), rooted, namespace_of(pid))
    table.pop(os.getpid(), None)
    ours = {pid for pid, (_, rooted, _) in table.items() if rooted}
    proven = {space for pid, (_, _, space) in table.items() if pid in ours}
    proven.discard(namespace_of(os.getpid()))  # never this machine's own namespace
    if namespace is not None and namespace in proven:
        ours |= {pid for pid, (_, _, space) in table.items() if space == namespace}
    grown = True
    while grown:
        children = {pid for pid, (parent, _, _) in table.items() if parent in ours} - ours
        ours |= children
        grown = bool(children)
    return sorted(ours)


def terminate(pids: Sequence[int], grace: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and not zombie(pid)]
        if alive:
            time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def start_daemon(root: Path, daemon: str, *, keep_state: bool = False) -> None:
    """Start one daemon of the cluster; slurmctld starts clean (``-c``) unless ``keep_state``,
    which reloads its jobs from StateSaveLocation as a restarted controller at a site does."""
    if pid_of(root, daemon) is not None:
        return
    state = live_state(root)
    if state is None:
        raise HarnessError("the cluster's mount namespace is not running")
    enter = enter_argv(state)
    run_dir = inside(root) / "run"
    if daemon == "munged":
        uid, gid = lookup_ids(root, "munge")
        (run_dir / "munge").mkdir(mode=0o755, exist_ok=True)
        os.chown(run_dir / "munge", uid, gid)
        argv = [*enter, *as_user(uid, gid), "/usr/sbin/munged"]
    elif daemon == "slurmctld":
        argv = [*enter, "/usr/sbin/slurmctld", *(() if keep_state else ("-c",))]
    elif daemon.startswith("slurmd"):
        # Named with -N even for the first node: the extra nodes share its hostname, so slurmd
        # must not guess which node it is from that.
        argv = [*enter, "/usr/sbin/slurmd", "-N", slurmd_node(daemon)]
    else:
        (run_dir / "sshd").mkdir(mode=0o755, exist_ok=True)
        argv = [
            *enter,
            "/usr/sbin/sshd",
            "-p",
            str(SSH_PORT),
            "-o",
            "ListenAddress=127.0.0.1",
            "-o",
            "PidFile=/run/sshd.pid",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "KbdInteractiveAuthentication=no",
            "-o",
            "PermitRootLogin=no",
            "-o",
            f"AllowUsers={USER}",
        ]
        if port_open(SSH_PORT):
            raise HarnessError(f"something else listens on 127.0.0.1:{SSH_PORT}")
    run(argv, env=ROOT_ENV, timeout=60)
    wait_for(lambda: pid_of(root, daemon) is not None, 20, f"{daemon} to write its pid file")
    if daemon == "sshd":
        wait_for(lambda: port_open(SSH_PORT), 10, "sshd to listen")


def slurmd_node(daemon: str) -> str:
    """The node a slurmd daemon is: ``slurmd`` the first node, ``slurmd@n2`` node n2."""
    return node_name() if daemon == "slurmd" else daemon.removeprefix("slurmd@")


def node_daemon(node: str) -> str:
    """The harness's name for a node's slurmd, the inverse of :func:`slurmd_node`."""
    if node == node_name():
        return "slurmd"
    if node not in NODES:
        raise HarnessError(
            f"no such node: {node} (the nodes are {node_name()}, {', '.join(NODES)})"
        )
    return f"slurmd@{node}"


SLURMDS = tuple(daemon for daemon in DAEMONS if daemon.startswith("slurmd"))


def stop_legacy_slurmd(root: Path) -> None:
    """Stop a slurmd that a harness from before the extra nodes started (pid file without the
    node's name), so the first node's slurmd can take its port."""
    path = inside(root) / LEGACY_SLURMD_PID
    try:
        pid = int(path.read_text().split()[0])
    except (FileNotFoundError, NotADirectoryError, ValueError, IndexError):
        return
    mine = not zombie(pid) and identity(f"/proc/{pid}/root") == identity(root)
    if mine and "slurmd" in command_line(pid):
        terminate([pid])
    path.unlink(missing_ok=True)


def as_user(uid: int, gid: int, groups: Sequence[int] = ()) -> list[str]:
    """The root's setpriv, run in the namespace: become uid:gid with only gid as group, or
    with ``groups`` (gid among them) where given."""
    listed = ",".join(str(g) for g in (groups or (gid,)))
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={listed}", "--"]


def stop_daemon(root: Path, daemon: str) -> None:
    pid = pid_of(root, daemon)
    if pid is not None:
        terminate([pid])
    with contextlib.suppress(NotADirectoryError):
        (inside(root) / PID_FILES[daemon]).unlink(missing_ok=True)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for(predicate: object, seconds: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise HarnessError(f"timed out after {seconds:.0f} s waiting for {what}")


def node_states(root: Path) -> dict[str, str]:
    """Each node's state as ``sinfo -N`` prints it (``idle``, ``down*``, ``drained``, ...)."""
    result = in_root(
        root, [f"{SLURM_BIN}/sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=10
    )
    if result.returncode != 0:
        return {}
    return dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)


def resume_left_nodes(root: Path) -> None:
    """Return an extra node a test left down or drained (a test that failed midway): `up`
    brings every node up. The first node is never touched."""
    for node, state in node_states(root).items():
        if node in NODES and state.rstrip("*~#").startswith(("down", "drain")):
            log(f"node {node} was left {state}: resuming it")
            scontrol_node(root, node, "RESUME")


def scontrol_node(root: Path, node: str, state: str, reason: str | None = None) -> None:
    argv = [f"{SLURM_BIN}/scontrol", "update", f"NodeName={node}", f"State={state}"]
    if reason is not None:
        argv.append(f"Reason={reason}")
    in_root(root, argv, timeout=20)


def node_ready(root: Path) -> bool:
    result = in_root(root, [f"{SLURM_BIN}/sinfo", "-h", "-N", "-o", "%T"], check=False, timeout=10)
    states = result.stdout.split()
    return (
        result.returncode == 0
        and bool(states)
        and all(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states)
    )


def cancel_jobs(root: Path) -> None:
    """Cancel every job while Slurm still runs, so their steps end the way Slurm ends them."""
    if pid_of(root, "slurmctld") is None:
        return
    listed = in_root(root, [f"{SLURM_BIN}/squeue", "-h", "-o", "%A"], check=False, timeout=10)
    jobs = listed.stdout.split()
    if not jobs:
        return
    in_root(root, [f"{SLURM_BIN}/scancel", *jobs], check=False, timeout=10)
    steps = [pid for pid in processes_in(root) if "slurmstepd" in command_line(pid)]
    with contextlib.suppress(HarnessError):
        wait_for(lambda: all(zombie(pid) for pid in steps), 10, "job steps to end")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def close_master() -> None:
    """End the ControlMaster connection, so nothing keeps a session open into the root."""
    if SSH_INCLUDE.exists():
        run(["ssh", "-O", "exit", ALIAS], check=False, timeout=10)


def remove_slurm_cgroups() -> None:
    """slurmd with proctrack/cgroup makes slurm_NODE cgroups on the host; remove the empty ones."""
    base = Path("/sys/fs/cgroup")
    names = (node_name(), *NODES)
    tops = [
        path for name in names for path in (*base.glob(f"*/slurm_{name}"), base / f"slurm_{name}")
    ]
    for top in tops:
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


# ---------------------------------------------------------------- wheels


def wheels_digest(directory: Path) -> str:
    """A hash of the wheels' contents, blind to zip timestamps."""
    digest = hashlib.sha256()
    for wheel in sorted(directory.glob("*.whl")):
        digest.update(wheel.name.encode() + b"\0")
        with zipfile.ZipFile(wheel) as archive:
            for name in sorted(archive.namelist()):
                digest.update(name.encode() + b"\0" + hashlib.sha256(archive.read(name)).digest())
    return digest.hexdigest()


def build_wheels(out: Path, python: str = sys.executable) -> Path:
    """The five distributions from this checkout plus their third-party wheels for Python 3.13."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    sources = [str(CHECKOUT / name) for name in DISTRIBUTIONS]
    run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), *sources])
    requirements: set[str] = set()
    for wheel in out.glob("servatus*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            for line in archive.read(meta).decode().splitlines():
                if line.startswith("Requires-Dist:"):
                    requirement = line.split(":", 1)[1].strip()
                    name = re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]
                    if not name.lower().startswith("servatus"):
                        requirements.add(requirement)
    if requirements:
        run(
            [
                python,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                f"--python-version={INNER_PYTHON}",
                "-d",
                str(out),
                *sorted(requirements),
            ]
        )
    return out


def install_wheels(root: Path, wheels: Path) -> bool:
    """Install the wheels into the root's venv offline; skip when the same wheels are in."""
    digest = wheels_digest(wheels)
    marker = root / VENV.lstrip("/") / ".servatus-wheels-sha256"
    python = root / VENV.lstrip("/") / "bin/python"
    if python.exists() and marker.exists() and marker.read_text().strip() == digest:
        return False
    log(f"installing {len(list(wheels.glob('*.whl')))} wheels into {VENV} inside the root")
    house = root / WHEELHOUSE.lstrip("/")
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir(parents=True)
    for wheel in wheels.glob("*.whl"):
        shutil.copy2(wheel, house / wheel.name)
    shutil.rmtree(root / VENV.lstrip("/"), ignore_errors=True)
    in_root(root, ["/usr/bin/python3", "-m", "venv", VENV])
    pip = [f"{VENV}/bin/python", "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir"]
    in_root(root, [*pip, "--find-links", WHEELHOUSE, "servatus[slurm,apptainer]"])
    link = root / "usr/local/bin/servatus"
    link.unlink(missing_ok=True)
    link.symlink_to(f"{VENV}/bin/servatus")
    marker.write_text(digest + "\n")
    return True


# ---------------------------------------------------------------- the commands


def require_root() -> None:
    if os.geteuid() != 0:
        raise HarnessError("the cluster harness must run as root (namespaces, mounts, daemons)")


def up(
    min_job_age: int | None = None,
    proctrack: str | None = None,
    wheels: Path | None = None,
) -> State:
    """Build if needed, then bring every piece up; with the same settings again, change nothing."""
    require_root()
    with locked():
        root = root_dir()
        if not root.is_dir():
            build_root(root)
        previous = read_state()
        if previous is not None and previous.root != str(root):
            raise HarnessError(
                f"a cluster from another recipe runs at {previous.root}; run down first"
            )
        base = previous.settings if previous is not None else Settings()
        settings = Settings(
            min_job_age=base.min_job_age if min_job_age is None else min_job_age,
            proctrack=base.proctrack if proctrack is None else proctrack,
        )
        RUN_DIR.mkdir(mode=0o700, exist_ok=True)
        holder, namespace = ensure_namespace(root, previous)
        mounts: list[str] = []
        ensure_scratch_mount(root, mounts)
        # Recorded at once, so in_root() finds the namespace and a failure below is cleaned up
        # by `down`; alice's ids are filled in when she exists.
        uid, gid = (previous.uid, previous.gid) if previous is not None else (-1, -1)
        write_state(State(str(root), uid, gid, settings, mounts, holder, namespace))
        uid, gid = ensure_users(root)
        state = State(str(root), uid, gid, settings, mounts, holder, namespace)
        write_state(state)
        ensure_second_user(root, gid)
        ensure_scratch(root, uid, gid)
        if ensure_ssh(root, uid, gid) and pid_of(root, "sshd") is not None:
            log("sshd's configuration changed: restarting sshd, its master connection closed")
            close_master()
            stop_daemon(root, "sshd")
        changed = ensure_configs(root, settings)
        stop_legacy_slurmd(root)
        running = [d for d in (*SLURMDS, "slurmctld") if pid_of(root, d) is not None]
        if running and (changed or (previous is not None and previous.settings != settings)):
            log(f"slurm configuration changed: restarting slurmctld and slurmd with {settings}")
            for daemon in running:
                stop_daemon(root, daemon)
        for daemon in DAEMONS:
            start_daemon(root, daemon)
        resume_left_nodes(root)
        wait_for(lambda: node_ready(root), 60, "every node to become idle")
        if wheels is not None:
            install_wheels(root, wheels)
        return state


def sessions_using() -> bool:
    """True while a pytest session holds the cluster (the fixture keeps a shared lock)."""
    path = CACHE_DIR / "sessions.lock"
    if not path.exists():
        return False
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def down(purge: bool = False) -> list[str]:
    """Stop what `up` started, unmount what it mounted, remove what it added; keep the cache."""
    require_root()
    with locked():
        state = read_state()
        root = Path(state.root) if state is not None else root_dir()
        namespace = state.namespace if state is not None else None
        close_master()
        cancel_jobs(root)
        for daemon in reversed(DAEMONS):
            stop_daemon(root, daemon)
        stop_legacy_slurmd(root)
        # Job steps (slurmstepd and its children), login() leftovers and the namespace's holder
        # outlive the daemons; when the last of them is gone, so are the namespace and its mounts.
        terminate(processes_in(root, namespace), grace=2)
        wait_for(
            lambda: all(map(zombie, processes_in(root, namespace))), 10, "the namespace to empty"
        )
        remove_slurm_cgroups()
        stuck = unmount_all(root, state.mounts if state is not None else [])
        SSH_INCLUDE.unlink(missing_ok=True)
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        scratch_created = CACHE_DIR / "outside-scratch-created"
        if scratch_created.exists() and not mounted(SCRATCH):
            with contextlib.suppress(OSError):
                SCRATCH.rmdir()  # only if empty: never delete anything that is not ours
            scratch_created.unlink()
        created = CACHE_DIR / "outside-user-created"
        if created.exists():
            run(["userdel", USER], check=False)
            run(["groupdel", USER], check=False)
            created.unlink()
        if purge and not mounts_under(root):
            shutil.rmtree(CACHE_DIR / "wheels", ignore_errors=True)
            for built in CACHE_DIR.glob("root-*"):
                shutil.rmtree(built)
        return stuck


def status() -> dict[str, object]:
    state = read_state()
    root = Path(state.root) if state is not None else root_dir()
    daemons = {name: pid_of(root, name) for name in DAEMONS}
    live = live_state(root)
    outside = [p for p, _ in mountinfo() if p == str(SCRATCH) or p.startswith(f"{root}/")]
    return {
        "built": root.is_dir(),
        "root": str(root),
        "daemons": daemons,
        "namespace": live.namespace if live is not None else None,
        "holder": live.holder if live is not None else None,
        "mounts": outside,
        "namespace_mounts": namespace_mounts(live),
        "ssh_include": SSH_INCLUDE.exists(),
        "settings": asdict(state.settings) if state is not None else None,
        "nodes": node_states(root) if live is not None and daemons["slurmctld"] else {},
        "up": live is not None and all(pid is not None for pid in daemons.values()),
    }


def environment() -> dict[str, object]:
    """The facts tests need, as one JSON-able mapping."""
    state = read_state()
    root = Path(state.root) if state is not None else root_dir()
    settings = state.settings if state is not None else Settings()
    work_root = f"{SCRATCH}/{USER}/sweep"
    return {
        "running": bool(status()["up"]),
        "root": str(root),
        "ssh_alias": ALIAS,
        "ssh_port": SSH_PORT,
        "ssh_config": str(SSH_INCLUDE),
        "slurm_bin": SLURM_BIN,
        "node": node_name(),
        "partition": PARTITION,
        "nodes": list(NODES),
        "nodes_partition": NODES_PARTITION,
        "node_cpus": NODE_CPUS,
        "node_memory_mib": NODE_MEMORY_MIB,
        "cpus": CPUS,
        "real_memory_mib": REAL_MEMORY_MIB,
        "gres": f"gpu:{GPU_TYPE}:{GPU_COUNT}",
        "scratch": str(SCRATCH),
        "work_root": work_root,
        "log_root": f"{work_root}/logs",
        "results": f"{work_root}/results",
        "user": USER,
        "uid": state.uid if state is not None else None,
        "gid": state.gid if state is not None else None,
        "home": f"/home/{USER}",
        "second_user": SECOND_USER,
        "second_home": f"/home/{SECOND_USER}",
        "min_job_age": settings.min_job_age,
        "proctrack": settings.proctrack,
        "venv": VENV,
        "venv_python": f"{VENV}/bin/python",
        "servatus_cli": f"{VENV}/bin/servatus",
    }


# ---------------------------------------------------------------- helpers for tests


def login_env(extra: Mapping[str, str] | None = None, user: str = USER) -> dict[str, str]:
    """A fresh login's environment: what a user on the login node would start from."""
    env = {
        "HOME": f"/home/{user}",
        "USER": user,
        "LOGNAME": user,
        "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    env.update(extra or {})
    return env


def login(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
    user: str = USER,
) -> subprocess.CompletedProcess[str]:
    """Run argv as alice on the login node, i.e. in the cluster's namespace, with a clean login
    environment: ``nsenter`` into the namespace, the root's ``setpriv`` to alice, ``env -i``.
    ``user=SECOND_USER`` runs it as mallory instead, with her two groups."""
    state = read_state()
    if state is None or live_state(Path(state.root)) is None:
        raise HarnessError("the cluster is not up")
    if user == USER:
        become = as_user(state.uid, state.gid)
    elif user == SECOND_USER:
        uid, gid, groups = second_user_ids(Path(state.root), state.gid)
        become = as_user(uid, gid, groups)
    else:
        raise HarnessError(f"no such test user: {user}")
    variables = [f"{k}={v}" for k, v in login_env(env, user).items()]
    command = [
        *enter_argv(state),
        *become,
        "/usr/bin/env",
        "-i",
        f"--chdir={cwd or f'/home/{user}'}",
        *variables,
        *argv,
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        check=False,
    )


SSH_OPTIONS = (
    "-T",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=8",
    "-o",
    "ConnectionAttempts=3",
)


def ssh(
    command: str | Sequence[str], *, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a remote command exactly as Servatus's SSH transport does, with its environment."""
    remote = command if isinstance(command, str) else shlex.join(command)
    home = os.path.expanduser("~root") if os.geteuid() == 0 else os.path.expanduser("~")
    name = "root" if os.geteuid() == 0 else os.environ.get("USER", "")
    env = {"HOME": home, "LOGNAME": name, "USER": name, "PATH": os.environ.get("PATH", "/usr/bin")}
    return subprocess.run(
        ["ssh", *SSH_OPTIONS, ALIAS, remote],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env=env,
        check=False,
    )


def stop_sshd() -> None:
    """Make the login node unreachable over SSH, master connection included."""
    state = read_state()
    if state is None:
        raise HarnessError("the cluster is not up")
    close_master()
    stop_daemon(Path(state.root), "sshd")


def start_sshd() -> None:
    state = read_state()
    if state is None:
        raise HarnessError("the cluster is not up")
    start_daemon(Path(state.root), "sshd")


def node_processes(node: str) -> dict[int, str]:
    """Every process running on ``node``: its ``slurmstepd`` daemons and all their descendants
    (batch shell, ``srun``, step processes), pid to command line; its slurmd is not among them.

    All nodes share this machine's pids, and a ``slurmstepd`` names only its step on its command
    line (``slurmstepd: [JOB.STEP]``). What tells its node is its spool: it listens on a unix
    socket ``SlurmdSpoolDir/NODE_JOB.STEP``, and SlurmdSpoolDir is ``/var/spool/slurmd/%n``. A
    stepd is the node's when one of its open sockets is bound under that node's spool directory
    (``/proc/net/unix`` gives the bound path of each socket inode), or when it has the node's
    own log file (``SlurmdLogFile=/var/log/slurm/slurmd-%n.log``) open, as every stepd does.
    """
    state = read_state()
    if state is None:
        raise HarnessError("the cluster is not up")
    node_daemon(node)  # refuses an unknown node
    spool = f"/var/spool/slurmd/{node}/"
    bound = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith(spool):
                bound.add(f"socket:[{fields[6]}]")
    own_log = f"/var/log/slurm/slurmd-{node}.log"
    everything = processes_in(Path(state.root))
    steps = set()
    for pid in everything:
        if not command_line(pid).startswith("slurmstepd:"):
            continue
        try:
            opened = {os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
        if opened & bound or own_log in opened:
            steps.add(pid)
    parents = {pid: parent_of(pid) for pid in everything}
    found = set(steps)
    grown = True
    while grown:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grown = bool(children)
    return {pid: command_line(pid).strip() for pid in sorted(found)}


def _extra_node_root(node: str, done: str) -> Path:
    """The running cluster's root, for an action ``done`` to one of the extra nodes only."""
    if node not in NODES:
        raise HarnessError(f"only the extra nodes {', '.join(NODES)} are {done}, not {node}")
    state = read_state()
    if state is None:
        raise HarnessError("the cluster is not up")
    return Path(state.root)


def fail_node(node: str, reason: str = "servatus-test node failure") -> dict[int, str]:
    """Fail an extra node for real, as a power cut would: freeze (SIGSTOP) its slurmd, every
    ``slurmstepd`` of the node and every process under them until no new one appears, SIGKILL
    them all, then tell Slurm the node is down (``scontrol update State=DOWN``), which ends its
    jobs NODE_FAIL. Returns what was killed (pid to command line, slurmd included). Waits until
    ``sinfo`` shows the node down and no process of it is left."""
    root = _extra_node_root(node, "failed")
    daemon = node_daemon(node)
    frozen: dict[int, str] = {}
    slurmd = pid_of(root, daemon)
    if slurmd is not None:
        os.kill(slurmd, signal.SIGSTOP)
        frozen[slurmd] = command_line(slurmd).strip()
    while True:
        fresh = {pid: cmd for pid, cmd in node_processes(node).items() if pid not in frozen}
        if not fresh:
            break
        for pid, command in fresh.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            frozen[pid] = command
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all(zombie(pid) for pid in frozen), 10, f"{node}'s processes to die")
    with contextlib.suppress(NotADirectoryError):
        (inside(root) / PID_FILES[daemon]).unlink(missing_ok=True)
    scontrol_node(root, node, "DOWN", reason)
    wait_for(lambda: node_states(root).get(node, "").startswith("down"), 30, f"{node} down")
    return frozen


def return_node(node: str) -> None:
    """Bring a failed (or drained) extra node back: start its slurmd, ``State=RESUME``, and
    wait until Slurm shows it in service (idle, or already running work queued for it)."""
    root = _extra_node_root(node, "returned")
    start_daemon(root, node_daemon(node))
    # ReturnToService=2 may already have returned it on registration; RESUME then says the
    # state is invalid, which is fine: being in service is what is waited for.
    argv = [f"{SLURM_BIN}/scontrol", "update", f"NodeName={node}", "State=RESUME"]
    in_root(root, argv, check=False, timeout=20)
    ready = ("idle", "mixed", "allocated")
    wait_for(lambda: node_states(root).get(node) in ready, 60, f"{node} to be in service")


def drain_node(node: str, reason: str = "servatus-test drain") -> None:
    """Stop Slurm from starting new work on an extra node; what runs there goes on. Waits until
    ``sinfo`` shows it draining or drained."""
    root = _extra_node_root(node, "drained")
    scontrol_node(root, node, "DRAIN", reason)
    wait_for(lambda: node_states(root).get(node, "").startswith("drain"), 30, f"{node} drained")


def undrain_node(node: str) -> None:
    """Undo :func:`drain_node`: ``State=RESUME``, then wait until the node is no longer drained."""
    root = _extra_node_root(node, "drained")
    scontrol_node(root, node, "RESUME")
    ready = ("idle", "mixed", "allocated")
    wait_for(lambda: node_states(root).get(node) in ready, 30, f"{node} to be undrained")


def bounce(daemon: str, down_for: float) -> None:
    """Stop slurmctld or slurmd, leave it down ``down_for`` seconds, and start it again with the
    jobs it knew: a controller or node restart at a site, not the clean start of ``up``."""
    if daemon not in ("slurmctld", "slurmd"):
        raise HarnessError(f"only slurmctld and slurmd are bounced, not {daemon}")
    state = read_state()
    if state is None:
        raise HarnessError("the cluster is not up")
    root = Path(state.root)
    stop_daemon(root, daemon)
    time.sleep(down_for)
    start_daemon(root, daemon, keep_state=True)


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness.py", description=(__doc__ or "").split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="build once, then start the cluster (idempotent)")
    start.add_argument("--min-job-age", type=int, default=None, help="seconds (default 30)")
    start.add_argument("--proctrack", default=None, help="ProctrackType (default linuxproc)")
    start.add_argument("--wheels", type=Path, default=None, help="install these wheels inside")
    stop = commands.add_parser("down", help="stop daemons, unmount, remove outside additions")
    stop.add_argument("--purge", action="store_true", help="also delete the cached root")
    stop.add_argument("--force", action="store_true", help="even while a test session uses it")
    commands.add_parser("status", help="say what runs")
    commands.add_parser("env", help="print the facts tests need as JSON")
    enter = commands.add_parser("exec", help="run a command as root in the cluster's namespace")
    enter.add_argument("argv", nargs=argparse.REMAINDER, help="e.g. sinfo -N, scontrol show node")
    build = commands.add_parser("build-wheels", help="build the project's wheels for the root")
    build.add_argument("out", type=Path)
    install = commands.add_parser("install-wheels", help="install wheels into the root's venv")
    install.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            started = time.monotonic()
            state = up(args.min_job_age, args.proctrack, args.wheels)
            log(f"up in {time.monotonic() - started:.1f} s: {state.settings}")
        elif args.command == "down":
            if not args.force and sessions_using():
                raise HarnessError("a test session is using the cluster (down --force to insist)")
            started = time.monotonic()
            stuck = down(args.purge)
            log(f"down in {time.monotonic() - started:.1f} s")
            if stuck:
                log(f"lazily unmounted (were busy): {', '.join(stuck)}")
                return 1
        elif args.command == "status":
            report = status()
            for name, pid in dict(report["daemons"]).items():  # type: ignore[call-overload]
                print(f"{name:10} {'running, pid ' + str(pid) if pid else 'stopped'}")
            print(f"mounts     {', '.join(report['mounts']) or 'none'}")  # type: ignore[arg-type]
            if report["namespace"]:
                inner = ", ".join(report["namespace_mounts"])  # type: ignore[arg-type]
                print(f"namespace  {report['namespace']}, held by pid {report['holder']}: {inner}")
            else:
                print("namespace  none")
            print(f"root       {report['root']} ({'built' if report['built'] else 'not built'})")
            print(f"settings   {report['settings']}")
            nodes = dict(report["nodes"])  # type: ignore[call-overload]
            print(f"nodes      {', '.join(f'{n} {s}' for n, s in nodes.items()) or 'none'}")
            return 0 if report["up"] else 1
        elif args.command == "env":
            print(json.dumps(environment(), indent=2))
        elif args.command == "exec":
            require_root()
            if not args.argv:
                raise HarnessError("exec needs a command")
            found = read_state()
            live = live_state(Path(found.root)) if found is not None else None
            if live is None:
                raise HarnessError("the cluster is not up")
            return subprocess.run([*enter_argv(live), *args.argv], env=ROOT_ENV).returncode
        elif args.command == "build-wheels":
            build_wheels(args.out)
        elif args.command == "install-wheels":
            require_root()
            state = up()
            with locked():
                install_wheels(Path(state.root), args.dir)
    except HarnessError as error:
        log(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
