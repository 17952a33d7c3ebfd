"""A saved plan shared for review cannot be turned into another user's jobs (issue #30, attack 6;
ADR 0011), with two real Unix users and real ``servatus`` processes.

The victim saves a plan into the project's group-writable directory and makes it readable by the
group (0640) for review. Mallory, in the same group, can read it and can rename a file of hers
over it. She points ``slurm_bin`` at her own directory, whose ``sbatch`` writes ``id`` to a file
of hers, re-seals the plan as the code before the seal did (a SHA-256 of the rest), or reuses
the seal she can read, and puts it in the plan's place. The victim's ``submit`` (and ``validate``)
must refuse in one line, exit 1, and never run her ``sbatch``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_bin import make_fake_bin, submitted

from userkit import User, owned, project_directory, python_code

RUN_SERVATUS = "import runpy; runpy.run_module('servatus', run_name='__main__', alter_sys=True)\n"
"""``python -m servatus`` as another user (:func:`userkit.python_code`)."""

SEAL_REFUSED = (
    "its seal is not this campaign's (the plan was saved for another campaign, or altered); "
    "plan again"
)

MALLORY_SBATCH = """#!/bin/sh
id >> @LOOT@
case "$*" in *--version*) echo "slurm 24.11.5" ;; *) cat >/dev/null; echo 4242 ;; esac
"""


def old_digest(document: dict[str, Any]) -> str:
    """The digest the code before the seal computed (and checked): the SHA-256 of the document's
    canonical JSON less its ``digest``. Anyone can compute it."""
    body = {key: value for key, value in document.items() if key != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def resealed_old_way(document: dict[str, Any]) -> dict[str, Any]:
    """Her edit with the digest recomputed as the old code did, any seal left as it was."""
    document["digest"] = old_digest(document)
    return document


def seal_dropped(document: dict[str, Any]) -> dict[str, Any]:
    document.pop("seal", None)
    document["digest"] = old_digest(document)
    return document


def as_version_4(document: dict[str, Any]) -> dict[str, Any]:
    """A perfect plan of the release before the seal."""
    document.pop("seal", None)
    document["schema"] = "servatus.plan/4"
    document["digest"] = old_digest(document)
    return document


FORGERIES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "digest recomputed, seal reused": resealed_old_way,
    "seal dropped": seal_dropped,
    "labelled servatus.plan/4": as_version_4,
}


class Scene:
    """The victim's campaign and fake Slurm, the project directory, and Mallory's trap."""

    def __init__(self, base: Path, victim: User, mallory: User) -> None:
        self.victim, self.mallory = victim, mallory
        home = owned(base / "victim", victim, 0o755)
        self.config, _ = make_fake_bin(home)
        (home / "tasks.jsonl").write_text(
            "".join(json.dumps({"key": f"k{i}", "args": ["/bin/true"]}) + "\n" for i in range(2))
        )
        for path in [home, *home.rglob("*")]:
            os.chown(path, victim.uid, victim.gid)
        self.home, self.state = home, home / "state"
        self.project = project_directory(base / "project")
        self.plan = self.project / "plan.json"
        trap = owned(base / "mallory", mallory, 0o755)
        loot = owned(trap / "loot", mallory, 0o777)  # so the victim's process could write it
        self.loot = loot / "id"
        self.mallory_bin = owned(trap / "bin", mallory, 0o755)
        sbatch = self.mallory_bin / "sbatch"
        sbatch.write_text(MALLORY_SBATCH.replace("@LOOT@", str(self.loot)))
        for name in ("squeue", "scancel"):
            (self.mallory_bin / name).write_text("#!/bin/sh\nexit 0\n")
        for path in self.mallory_bin.iterdir():
            os.chown(path, mallory.uid, mallory.gid)
            path.chmod(0o755)
        self.servatus("ensure", str(self.state), str(home / "tasks.jsonl"), check=True)

    def servatus(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """``servatus ARGS`` as the victim, a real process, from the victim's directory."""
        argv = python_code(self.victim, RUN_SERVATUS, *args)
        done = self.victim.run(argv, cwd=self.home)
        result = subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )
        assert not check or result.returncode == 0, result.stderr
        return result

    def save_plan(self, path: Path, mode: int = 0o640) -> dict[str, Any]:
        """``plan --output`` as the victim, then shared for review at ``mode``."""
        self.servatus("plan", str(self.state), "--config", str(self.config), "--output", str(path))
        assert self.victim.sh(f"chmod {mode:o} '{path}'").returncode == 0
        document: dict[str, Any] = json.loads(self.mallory.sh(f"cat '{path}'").stdout)
        return document

    def edited(self, document: dict[str, Any]) -> dict[str, Any]:
        """Mallory's edit: the plan's Slurm is now her directory."""
        edited = json.loads(json.dumps(document))
        edited["profile"]["target"]["slurm_bin"] = str(self.mallory_bin)
        return edited

    def as_mallory(self, path: Path, document: dict[str, Any]) -> None:
        """Mallory writes ``document`` beside ``path`` and renames it over ``path``."""
        text = json.dumps(document).replace("'", "'\\''")
        draft = path.with_name(path.name + ".new")
        made = self.mallory.sh(f"printf '%s' '{text}' > '{draft}' && mv -f '{draft}' '{path}'")
        assert made.returncode == 0, made.stderr
        assert path.stat().st_uid == self.mallory.uid

    def refused(self, path: Path) -> list[str]:
        """``submit`` and ``validate`` of ``path`` as the victim: each exits 1 with one line.
        Returns the two lines."""
        lines = []
        for command in ("submit", "validate"):
            result = self.servatus(command, str(self.state), str(path))
            assert result.returncode == 1, (command, result.stdout, result.stderr)
            assert result.stdout == ""
            assert result.stderr.count("\n") == 1 and result.stderr.startswith("servatus: ")
            lines.append(result.stderr)
        assert not self.loot.exists(), self.loot.read_text()  # her sbatch never ran
        assert submitted(self.home) == []  # nor the victim's: nothing was submitted
        return lines


@pytest.fixture
def scene(users: tuple[User, User], shared: Path) -> Scene:
    return Scene(shared, *users)


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_plan_resealed_by_another_user_and_renamed_over_is_refused(
    scene: Scene, forge: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    document = scene.save_plan(scene.plan)
    scene.as_mallory(scene.plan, forge(scene.edited(document)))
    for line in scene.refused(scene.plan):
        assert line == (
            f"servatus: UnsafeFilesystem: {scene.plan}: is owned by uid {scene.mallory.uid}, "
            "not by you, so a plan is not used from it; save your own with plan --output\n"
        )


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_her_plan_copied_into_a_file_of_the_victims_is_refused_by_its_seal(
    scene: Scene, forge: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Owning the file is not enough: "here is the plan, fixed", copied by the victim with
    ``cp`` into a file of their own, is refused by its seal alone."""
    document = scene.save_plan(scene.plan)
    scene.as_mallory(scene.plan, forge(scene.edited(document)))
    copy = scene.home / "fixed.json"
    assert scene.victim.sh(f"cp '{scene.plan}' '{copy}'").returncode == 0
    assert copy.stat().st_uid == scene.victim.uid
    expected = {
        # the old digest covers the seal, so it is not the digest of a sealed plan
        resealed_old_way: "the plan was altered after it was saved; plan again",
        seal_dropped: SEAL_REFUSED,  # a right digest, which anyone can compute: no seal
        as_version_4: "a servatus.plan/4 plan, saved by an earlier release without a seal, is "
        "not submitted; save it again with plan --output",
    }[forge]
    for line in scene.refused(copy):
        assert line == f"servatus: StalePlan: {copy}: {expected}\n"


def test_a_plan_file_of_hers_with_a_copied_seal_is_refused(scene: Scene) -> None:
    """Her own file, holding the victim's plan byte for byte (a valid seal) or her edit with
    that seal copied: refused for whose file it is."""
    document = scene.save_plan(scene.plan)
    for content in (document, resealed_old_way(scene.edited(document))):
        mine = scene.project / "review.json"
        scene.as_mallory(mine, content)
        for line in scene.refused(mine):
            assert f"{mine}: is owned by uid {scene.mallory.uid}, not by you" in line


def test_a_plan_others_can_write_is_refused_and_stays_refused_once_made_private(
    scene: Scene,
) -> None:
    """Shared 0660 by mistake: Mallory rewrites it in place (the file stays the victim's).
    Refused for its mode; after ``chmod go-w``, for its seal."""
    document = scene.save_plan(scene.plan, mode=0o660)
    text = json.dumps(resealed_old_way(scene.edited(document))).replace("'", "'\\''")
    assert scene.mallory.sh(f"printf '%s' '{text}' > '{scene.plan}'").returncode == 0
    assert scene.plan.stat().st_uid == scene.victim.uid
    for line in scene.refused(scene.plan):
        assert line == (
            f"servatus: UnsafeFilesystem: {scene.plan}: other users can write it (mode 0660), "
            f"so a plan is not used from it; make it writable only by you: chmod go-w "
            f"{scene.plan}\n"
        )
    assert scene.victim.sh(f"chmod go-w '{scene.plan}'").returncode == 0
    for line in scene.refused(scene.plan):
        assert line == (
            f"servatus: StalePlan: {scene.plan}: the plan was altered after it was saved; plan "
            "again\n"
        )


def test_a_symlink_of_hers_in_the_plans_place_is_refused(scene: Scene) -> None:
    """She swaps the plan for a symlink to a forged copy the victim made earlier: the name is
    opened without following it."""
    document = scene.save_plan(scene.plan)
    forged = scene.home / "old.json"
    forged.write_text(json.dumps(resealed_old_way(scene.edited(document))))
    os.chown(forged, scene.victim.uid, scene.victim.gid)
    made = scene.mallory.sh(
        f"ln -s '{forged}' '{scene.plan}.new' && mv -f '{scene.plan}.new' '{scene.plan}'"
    )
    assert made.returncode == 0, made.stderr
    for line in scene.refused(scene.plan):
        assert line == (
            f"servatus: UnsafeFilesystem: cannot read {scene.plan}: is a symbolic link\n"
        )


def test_a_plan_shared_for_review_that_others_can_only_read_submits(scene: Scene) -> None:
    document = scene.save_plan(scene.plan)
    assert document["profile"]["target"]["slurm_bin"] == str(scene.home / "bin")
    assert scene.plan.stat().st_mode & 0o777 == 0o640
    assert scene.plan.stat().st_uid == scene.victim.uid
    assert scene.servatus("validate", str(scene.state), str(scene.plan)).returncode == 0
    done = scene.servatus("submit", str(scene.state), str(scene.plan), "--json")
    assert done.returncode == 0, done.stderr
    receipts = json.loads(done.stdout)["receipts"]
    # The fake sbatch logs validate's --test-only too: the submission is its last entry.
    assert [(r["allocation_id"], r["job"]) for r in receipts] == submitted(scene.home)[-1:]
    assert len(receipts) == 1 and not scene.loot.exists()
    key = scene.state / "plan-key"
    assert key.stat().st_uid == scene.victim.uid and key.stat().st_mode & 0o777 == 0o600
    assert scene.mallory.sh(f"cat '{key}'").returncode != 0
