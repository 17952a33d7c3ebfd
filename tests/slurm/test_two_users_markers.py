"""Run markers, step logs and chain handoffs against another user of the project group (issue #30,
attacks 3 and 5), with two real Unix users and the real batch scripts under dash and bash.

``log_root`` is the project's: root's, group-writable, no sticky bit. Mallory can create any name
in it, and a pending job's allocation id and job number are visible to her in ``squeue``. What
she plants there must never be written through, and never count as the victim's evidence.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slurm_helpers import ALLOCATION, HERE, direct_step, job_env, make_spec
from test_script import chain_spec, chain_step

from servatus.evidence import MarkerKind, _renamed, renamed_warning
from servatus.transport import CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.markers import allocation_log_name, marker_name, step_log_name
from servatus_slurm.script import render
from servatus_slurm.transport import LocalTransport
from testkit import make_target
from userkit import User, owned, project_directory

SHELLS = [("dash",), ("bash", "--posix")]
JOB = 4242
PROFILE = b"# the victim's shell start-up file\nexport EDITOR=vi\n"


class Scene:
    """The victim's batch scripts on the project's ``log_root``; Mallory's files in it."""

    def __init__(self, base: Path, victim: User, mallory: User) -> None:
        self.base, self.victim, self.mallory = base, victim, mallory
        bindir = base / "bin"
        bindir.mkdir()
        for name, text in (
            ("srun", "#!/usr/bin/python3\n" + (HERE / "fake_srun.py").read_text()),
            ("scancel", "#!/bin/sh\nexit 0\n"),
            ("squeue", "#!/bin/sh\nexit 0\n"),
        ):
            (bindir / name).write_text(text)
            (bindir / name).chmod(0o755)
        self.logs = project_directory(base / "logs", 0o770)
        for name in ("work", "record", "out"):
            owned(base / name, victim, 0o755)
        self.target = make_target(base)
        # The victim's shell start-up file: in a home of this test's own (the tox environments
        # run side by side with the same users, so never the shared home's).
        self.home = owned(base / "home", victim, 0o755)
        self.profile = self.home / ".profile"
        self.profile.write_bytes(PROFILE)
        os.chown(self.profile, victim.uid, victim.gid)

    def run(self, script: str, shell: tuple[str, ...]) -> tuple[int, str]:
        """The batch script as the victim's job ``JOB``: its exit code and its own output (what
        Slurm writes to the allocation's log)."""
        path = self.base / "job.sh"
        path.write_text(script)
        path.chmod(0o644)
        done = self.victim.run(
            [*shell, str(path)],
            cwd=self.base / "work",
            env=job_env(self.base / "record", JOB),
            timeout=60,
        )
        log = self.logs / allocation_log_name(ALLOCATION, JOB)  # the script's own log
        said = log.read_text(errors="replace") if log.exists() else ""
        return done.returncode, (done.stdout + done.stderr).decode(errors="replace") + said

    def plant(self, name: str, *, link_to: Path | None = None, text: str = "") -> None:
        """A file (or a symlink) of Mallory's at ``log_root/name``."""
        path = self.logs / name
        if link_to is not None:
            command = f"ln -s {link_to} {path}"
        else:
            command = f"printf %s '{text}' >{path} && chmod 666 {path}"
        done = self.mallory.sh(command)
        assert done.returncode == 0, done.stderr.decode()

    def ran(self) -> list[str]:
        """The steps the fake srun started, as recorded."""
        return os.listdir(self.base / "record")

    def step(self, slot: int, name: str) -> object:
        out = self.base / "out"
        return direct_step(self.target, slot, ["/bin/sh", "-c", f"echo {name} >>{out}/{name}"])


@pytest.fixture
def scene(shared: Path, users: tuple[User, User]) -> Scene:
    return Scene(shared, *users)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_step_log_planted_as_a_symlink_is_never_written_through(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Attack 5: Mallory links the step log's name (predictable once ``squeue`` shows the job)
    to the victim's ``~/.profile``. The step does not run, the file is untouched, and the
    allocation's log and end marker say why."""
    scene.plant(step_log_name(ALLOCATION, JOB, 0), link_to=scene.profile)
    script = render(make_spec(scene.target, [scene.step(0, "a")]))
    code, said = scene.run(script, shell)
    assert scene.profile.read_bytes() == PROFILE
    assert code == 0, said
    assert scene.ran() == []
    assert "already exists or is not a new file of this user's; the step did not run" in said
    end = scene.logs / marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=1)
    assert end.stat().st_uid == scene.victim.uid


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_allocation_log_planted_as_a_symlink_is_never_written_through(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Slurm opens ``--output`` by name and follows a link planted there while the job waits
    (it truncated the file behind it on the test cluster), so ``--output`` is ``/dev/null`` and
    the script opens its own log: a link planted at that name makes the job exit 1 before its
    start marker, the file behind it untouched."""
    planted = scene.logs / f"servatus-{ALLOCATION}-{JOB}.out"
    scene.plant(planted.name, link_to=scene.profile)
    script = render(make_spec(scene.target, [scene.step(0, "a")]))
    assert "#SBATCH --output=/dev/null" in script.splitlines()
    code, _ = scene.run(script, shell)
    assert code == 1
    assert scene.profile.read_bytes() == PROFILE
    assert scene.ran() == []
    assert not (scene.logs / marker_name(ALLOCATION, JOB, MarkerKind.START)).exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_step_log_of_hers_under_the_name_is_not_appended_to(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """A regular file of hers under the log's name (which she could read): refused the same."""
    scene.plant(step_log_name(ALLOCATION, JOB, 0), text="hers\n")
    _, said = scene.run(render(make_spec(scene.target, [scene.step(0, "a")])), shell)
    assert (scene.logs / step_log_name(ALLOCATION, JOB, 0)).read_text() == "hers\n"
    assert scene.ran() == [], said


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_step_log_is_the_victims_own_new_file(scene: Scene, shell: tuple[str, ...]) -> None:
    """Nothing planted: the step runs and its output is in a new owner-only file of its own."""
    code, said = scene.run(render(make_spec(scene.target, [scene.step(0, "a")])), shell)
    log = scene.logs / step_log_name(ALLOCATION, JOB, 0)
    assert code == 0, said
    assert len(scene.ran()) == 1
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (scene.victim.uid, 0o600)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("claim", ["none", "hers holding the victim's job"])
def test_a_handoff_planted_by_another_user_runs_nothing(
    scene: Scene, shell: tuple[str, ...], claim: str
) -> None:
    """Attack 3, chains: a forged handoff of the previous link (any job number) and its over
    file, even with a claim of hers that names the victim's job, never make the next link run
    a slot again."""
    previous = "a" * 24
    scene.plant(f"servatus-{previous}.777.handoff.0")
    scene.plant(f".servatus-{previous}.777.over")
    if claim != "none":
        scene.plant(f"servatus-{previous}.777.taken.0", text=str(JOB))
    step = chain_step(scene.target, 0, ["/bin/sh", "-c", "echo again"], links=2)
    script = render(chain_spec(scene.target, [step], 2, 2, time_limit=60))
    _, said = scene.run(script, shell)
    assert scene.ran() == [], said


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_file_of_the_victims_renamed_to_a_handoff_runs_nothing(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Review of issue #30: without the sticky bit Mallory can rename the victim's own files. The
    previous link's start marker renamed to its handoff is still the victim's file, but not a
    handoff: a handoff holds its own name, and the next link reads it."""
    previous = "a" * 24
    for name in (f"servatus-{previous}.777.start", f".servatus-{previous}.777.over"):
        assert scene.victim.sh(f"umask 077 && : >{scene.logs / name}").returncode == 0
    prefix = scene.logs / f"servatus-{previous}.777"
    done = scene.mallory.sh(f"mv {prefix}.start {prefix}.handoff.0")
    assert done.returncode == 0, done.stderr.decode()
    step = chain_step(scene.target, 0, ["/bin/sh", "-c", "echo again"], links=2)
    _, said = scene.run(render(chain_spec(scene.target, [step], 2, 2, time_limit=60)), shell)
    assert scene.ran() == [], said


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_over_file_planted_as_a_link_is_not_the_previous_links(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Review of issue #30: her link named as the previous link's ``over`` file, pointing at a
    file of the victim's, does not end the wait for the previous link's handoffs."""
    previous = "a" * 24
    assert scene.victim.sh(f"umask 077 && : >{scene.home}/any").returncode == 0
    scene.plant(f".servatus-{previous}.777.over", link_to=scene.home / "any")
    step = chain_step(scene.target, 0, ["/bin/sh", "-c", "echo again"], links=2)
    _, said = scene.run(render(chain_spec(scene.target, [step], 2, 2, time_limit=60)), shell)
    assert "the previous link left no over file" in said
    assert scene.ran() == [], said


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_victims_own_handoff_still_runs_the_next_link(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    previous = "a" * 24
    handoff = f"servatus-{previous}.777.handoff.0"
    for name, text in ((handoff, handoff), (f".servatus-{previous}.777.over", "")):
        done = scene.victim.sh(f"umask 077 && printf %s '{text}' >{scene.logs / name}")
        assert done.returncode == 0
    step = chain_step(scene.target, 0, ["/bin/sh", "-c", "echo again"], links=2)
    _, said = scene.run(render(chain_spec(scene.target, [step], 2, 2, time_limit=60)), shell)
    assert len(scene.ran()) == 1, said


def test_a_listing_counts_only_the_users_own_markers(scene: Scene) -> None:
    """The reader's listing, run as the victim: Mallory's ``end.0.0`` under the victim's
    allocation is no marker, and comes back as hers, by uid."""
    mine = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=3)
    hers = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=0)
    assert scene.victim.sh(f"umask 077 && : >{scene.logs / mine}").returncode == 0
    scene.plant(hers)
    reader = SlurmEvidenceReader()
    argv = reader.marker_command(scene.target)
    done = scene.victim.run(argv)
    assert done.returncode == 0, done.stderr.decode()
    result = LocalTransport().run(["/bin/true"])  # a CommandResult to fill with what the victim saw
    listed = type(result)(tuple(argv), 0, done.stdout, done.stderr)
    assert [(m.kind, m.exit_code) for m in reader.parse_markers(listed)] == [(MarkerKind.END, 3)]
    assert reader.parse_foreign(listed) == [(hers, scene.mallory.uid)]
    assert reader.parse_clock(listed) is not None


@pytest.mark.parametrize("junk", ["x", "x\udcff"], ids=["plain", "invalid-utf8"])
def test_a_name_with_a_newline_never_prints_a_row_of_its_own(scene: Scene, junk: str) -> None:
    """Review of issue #30: a file of hers whose name holds a newline and, after it, a marker row
    of the victim's (an end.0.0 of the victim's job) must not be read as that row, in the sticky
    directory SECURITY.md recommends too; nor may a byte invalid in UTF-8 hide the newline."""
    sticky = project_directory(scene.base / "sticky", 0o3770)
    target = make_target(scene.base, log_root=str(sticky))
    mine = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=3)
    assert scene.victim.sh(f"umask 077 && : >{sticky / mine}").returncode == 0
    forged = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=0)
    name = os.fsencode(f"servatus-{ALLOCATION}.{junk}\n{forged} 1700000000 0")
    done = scene.mallory.run(["/usr/bin/touch", b"/".join([os.fsencode(sticky), name])])
    assert done.returncode == 0, done.stderr
    reader = SlurmEvidenceReader()
    argv = reader.marker_command(target)
    listed = scene.victim.run(argv, env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    assert listed.returncode == 0, listed.stderr.decode()
    result = LocalTransport().run(["/bin/true"])
    result = type(result)(tuple(argv), 0, listed.stdout, listed.stderr)
    assert [(m.kind, m.exit_code) for m in reader.parse_markers(result)] == [(MarkerKind.END, 3)]
    assert b"1700000000" not in listed.stdout


def test_the_scene_needs_both_shells() -> None:
    for shell in ("dash", "bash"):
        assert subprocess.run(["which", shell], capture_output=True).returncode == 0


def test_a_marker_she_renames_reads_as_another_outcome_and_the_listing_says_it_could(
    scene: Scene,
) -> None:
    """ADR 0012's open end, shown for real: in the project's log_root (group-writable, no
    sticky bit) Mallory renames the victim's own end.0.3 to end.0.0, and the victim's file now
    says success: ownership cannot tell. What the listing can say is that she could, and it
    does, in the same find: status names it as a warning every time it reads the markers."""
    failed = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=3)
    forged = marker_name(ALLOCATION, JOB, MarkerKind.END, slot=0, exit_code=0)
    assert scene.victim.sh(f"umask 077 && : >{scene.logs / failed}").returncode == 0
    renamed = scene.mallory.run(["/bin/mv", str(scene.logs / failed), str(scene.logs / forged)])
    assert renamed.returncode == 0, renamed.stderr
    reader = SlurmEvidenceReader()
    argv = reader.marker_command(scene.target)
    done = scene.victim.run(argv)
    assert done.returncode == 0, done.stderr.decode()
    listed = CommandResult(tuple(argv), 0, done.stdout, done.stderr)
    assert [(m.kind, m.exit_code) for m in reader.parse_markers(listed)] == [(MarkerKind.END, 0)]
    assert reader.parse_root(listed) == (0o770, 0, scene.victim.uid)
    warning = _renamed(reader, scene.target, listed)
    assert warning == renamed_warning(scene.target.log_root, 0o770, "its group")
