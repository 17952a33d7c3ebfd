"""publish, publish_file and Workspace on a real filesystem: modes, drafts, and every error."""

from __future__ import annotations

import os
import stat
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from publish_helpers import leftovers

from servatus import Workspace, publish, publish_file
from servatus.errors import (
    ConfigurationError,
    DestinationExists,
    UnsafeFilesystem,
    WorkspaceConflict,
)
from servatus_publish._fs import CleanupPendingWarning
from servatus_publish.publication import Draft
from testkit import is_root


@pytest.fixture
def out(tmp_path: Path) -> Path:
    directory = tmp_path / "outputs"
    directory.mkdir()
    return directory


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- publish ------------------------------------------------------------------------------------


def test_stage_is_private_and_directories_get_the_default_mode(out: Path, umask_027: None) -> None:
    seen: dict[str, int] = {}

    def build(draft: Draft) -> None:
        seen["draft"] = mode_of(draft.path)
        seen["container"] = mode_of(draft.path.parent.parent)
        (draft.path / "sub").mkdir()
        (draft.path / "sub/private.txt").write_text("p")
        os.chmod(draft.path / "sub/private.txt", 0o600)
        (draft.path / "open.txt").write_text("o")
        os.chmod(draft.path / "open.txt", 0o644)

    result = publish(out / "run", build)
    assert seen == {"draft": 0o700, "container": 0o700}
    assert result.path == out / "run"
    assert not result.cleanup_pending
    assert mode_of(out / "run") == 0o750
    assert mode_of(out / "run/sub") == 0o750
    assert mode_of(out / "run/sub/private.txt") == 0o600
    assert mode_of(out / "run/open.txt") == 0o644
    assert leftovers(out) == []


def test_explicit_mode_applies_to_every_directory(out: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a/b").mkdir(parents=True)
    (src / "a/b/f").write_text("f")
    publish(out / "run", lambda d: d.link_tree(src, "tree"), mode=0o555)
    for directory in ("run", "run/tree", "run/tree/a", "run/tree/a/b"):
        assert mode_of(out / directory) == 0o555


def test_draft_refuses_use_after_the_builder_returns(out: Path, tmp_path: Path) -> None:
    kept: list[Draft] = []
    publish(out / "run", kept.append)
    draft = kept[0]
    (tmp_path / "f").write_text("f")
    with pytest.raises(RuntimeError):
        _ = draft.path
    with pytest.raises(RuntimeError):
        draft.link(tmp_path / "f", "f")
    with pytest.raises(RuntimeError):
        draft.link_tree(tmp_path, "t")


def test_link_publishes_the_same_inode(out: Path, tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"weights")

    def build(draft: Draft) -> None:
        draft.link(tmp_path / "model.pt", "nested/dir/model.pt")

    publish(out / "run", build)
    assert (out / "run/nested/dir/model.pt").stat().st_ino == (tmp_path / "model.pt").stat().st_ino


class Boom(Exception):
    pass


@pytest.mark.parametrize("error", [Boom("builder"), OSError(28, "the builder's own ENOSPC")])
def test_builder_exceptions_propagate_unchanged(out: Path, error: Exception) -> None:
    def build(draft: Draft) -> None:
        (draft.path / "half").write_text("half")
        raise error

    with pytest.raises(type(error)) as caught:
        publish(out / "run", build)
    assert caught.value is error
    assert list(out.iterdir()) == []


def test_an_existing_destination_is_refused_before_building(out: Path) -> None:
    (out / "run").mkdir()
    (out / "file").write_text("old")
    os.symlink("nowhere", out / "link")
    calls: list[object] = []
    for name in ("run", "file", "link"):
        with pytest.raises(DestinationExists):
            publish(out / name, calls.append)
        with pytest.raises(DestinationExists):
            publish_file(out / name, calls.append)
    assert calls == []
    assert (out / "file").read_text() == "old"


def test_a_destination_created_during_the_build_is_never_replaced(out: Path) -> None:
    def build(draft: Draft) -> None:
        (out / "run").mkdir()  # an empty directory: a plain rename would replace it
        (draft.path / "mine").write_text("mine")

    with pytest.raises(DestinationExists):
        publish(out / "run", build)
    assert list((out / "run").iterdir()) == []
    assert leftovers(out) == []

    def write(path: Path) -> None:
        (out / "w").write_text("theirs")
        path.write_text("mine")

    with pytest.raises(DestinationExists):
        publish_file(out / "w", write)
    assert (out / "w").read_text() == "theirs"
    assert leftovers(out) == []


# -- publish_file -------------------------------------------------------------------------------


def test_publish_file_mode_overrides_the_writer(out: Path, umask_027: None) -> None:
    def write(path: Path) -> None:
        path.write_text("data")
        os.chmod(path, 0o777)
        (path.parent / "scratch.tmp").write_text("discarded")

    publish_file(out / "a.txt", write)
    assert mode_of(out / "a.txt") == 0o640
    publish_file(out / "b.txt", write, mode=0o600)
    assert mode_of(out / "b.txt") == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "b.txt"]


def test_publish_file_accepts_a_temporary_renamed_into_place(out: Path) -> None:
    def write(path: Path) -> None:
        temporary = path.with_suffix(".partial")
        temporary.write_bytes(b"complete")
        os.replace(temporary, path)

    publish_file(out / "weights.bin", write)
    assert (out / "weights.bin").read_bytes() == b"complete"
    assert [p.name for p in out.iterdir()] == ["weights.bin"]


def test_writer_exceptions_propagate_unchanged(out: Path) -> None:
    error = OSError(5, "the writer's own EIO")

    def write(path: Path) -> None:
        path.write_text("half")
        raise error

    with pytest.raises(OSError) as caught:
        publish_file(out / "w", write)
    assert caught.value is error
    assert list(out.iterdir()) == []


# -- the Errors paragraph, one case each ------------------------------------------------------


def _occupied(draft: Draft, src: Path) -> None:
    (draft.path / "f").write_text("mine")
    draft.link(src, "f")


CONFIGURATION_CASES = {
    "unsafe draft path ..": lambda d, src: d.link(src, "../escape"),
    "unsafe absolute draft path": lambda d, src: d.link(src, "/etc/escape"),
    "unsafe empty draft path": lambda d, src: d.link(src, ""),
    "link onto an occupied draft path": _occupied,
    "link_tree onto an occupied draft path": lambda d, src: (
        (d.path / "t").mkdir(),
        d.link_tree(src.parent, "t"),
    ),
    "missing link source": lambda d, src: d.link(src.parent / "absent", "x"),
    "link source is a directory": lambda d, src: d.link(src.parent, "x"),
    "missing link_tree source": lambda d, src: d.link_tree(src.parent / "absent", "x"),
    "link_tree source contains the draft": lambda d, src: d.link_tree(d.path.parent, "x"),
    "draft path through a symlink": lambda d, src: (
        os.symlink(src.parent, d.path / "s"),
        d.link(src, "s/x"),
    ),
}


@pytest.mark.parametrize("case", sorted(CONFIGURATION_CASES))
def test_bad_draft_input_is_a_configuration_error(out: Path, tmp_path: Path, case: str) -> None:
    src = tmp_path / "src" / "file"
    src.parent.mkdir()
    src.write_text("source")
    with pytest.raises(ConfigurationError):
        publish(out / "run", lambda d: CONFIGURATION_CASES[case](d, src))
    assert list(out.iterdir()) == []
    assert sorted(p.name for p in src.parent.iterdir()) == ["file"]


def test_a_file_its_owner_cannot_read_is_refused(out: Path, tmp_path: Path) -> None:
    src = tmp_path / "unreadable"
    src.write_text("secret")
    os.chmod(src, 0o200)
    with pytest.raises(ConfigurationError, match="owner cannot read"):
        publish(out / "run", lambda d: d.link(src, "f"))

    def build(draft: Draft) -> None:
        (draft.path / "made").write_text("x")
        os.chmod(draft.path / "made", 0o000)

    with pytest.raises(ConfigurationError, match="owner cannot read"):
        publish(out / "run", build)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("mode", ["755", 0o10000, -1, True, 0o044, 0o300])
def test_bad_modes(out: Path, mode: object) -> None:
    with pytest.raises(ConfigurationError):
        publish(out / "run", lambda d: None, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        publish_file(out / "f", lambda p: p.write_text("x"), mode=mode)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        publish_file(out / "f", lambda p: p.write_text("x"), mode=0o4755)


def test_unusable_destinations(out: Path) -> None:
    with pytest.raises(ConfigurationError, match="missing"):
        publish(out / "no/such/run", lambda d: None)
    with pytest.raises(ConfigurationError, match="too long"):
        publish(out / ("x" * 300), lambda d: None)
    with pytest.raises(ConfigurationError):
        publish(out / ".servatus-stage-0", lambda d: None)
    with pytest.raises(ConfigurationError):
        publish(out / "..", lambda d: None)
    (out / "plain").write_text("not a directory")
    with pytest.raises(ConfigurationError):
        publish(out / "plain/run", lambda d: None)


def test_a_writer_that_creates_nothing_or_a_directory(out: Path) -> None:
    with pytest.raises(ConfigurationError, match="created nothing"):
        publish_file(out / "f", lambda path: None)
    with pytest.raises(ConfigurationError, match="other than a file"):
        publish_file(out / "f", lambda path: path.mkdir())
    assert list(out.iterdir()) == []


def test_paths_on_different_filesystems(out: Path, other_tmpfs: Path) -> None:
    (other_tmpfs / "elsewhere").write_text("x")
    with pytest.raises(ConfigurationError, match="different filesystems"):
        publish(out / "run", lambda d: d.link(other_tmpfs / "elsewhere", "x"))
    assert list(out.iterdir()) == []


def test_a_read_only_filesystem_is_a_configuration_error(other_tmpfs: Path) -> None:
    (other_tmpfs / "results").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(other_tmpfs)], check=True)
    with pytest.raises(ConfigurationError, match="read-only"):
        publish(other_tmpfs / "results/run", lambda d: None)


def test_a_substituted_stage_container_is_refused(out: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, out / f".servatus-stage-{os.geteuid()}")
    with pytest.raises(UnsafeFilesystem):
        publish(out / "run", lambda d: None)
    assert list(elsewhere.iterdir()) == []
    os.unlink(out / f".servatus-stage-{os.geteuid()}")
    (out / f".servatus-stage-{os.geteuid()}").mkdir(mode=0o755)
    with pytest.raises(UnsafeFilesystem, match="owner-only"):
        publish(out / "run", lambda d: None)


@pytest.mark.skipif(not is_root(), reason="chown needs root")
def test_another_users_stage_container_is_refused(out: Path) -> None:
    container = out / f".servatus-stage-{os.geteuid()}"
    container.mkdir(mode=0o700)
    os.chown(container, 65534, 65534)
    with pytest.raises(UnsafeFilesystem, match="uid 65534"):
        publish_file(out / "f", lambda p: p.write_text("x"))


# -- leftovers and cleanup ------------------------------------------------------------------


def test_a_dead_stage_is_reclaimed_by_the_next_publication(out: Path) -> None:
    container = out / f".servatus-stage-{os.geteuid()}"
    container.mkdir(mode=0o700)
    dead = container / "0123456789abcdef" / "run"
    dead.mkdir(parents=True)
    (dead / "half").write_text("half")
    os.chmod(dead, 0o500)  # sealed just before the crash
    publish(out / "other", lambda d: None)
    assert leftovers(out) == []


@pytest.mark.skipif(not is_root(), reason="chattr +i needs root")
def test_unprovable_cleanup_sets_cleanup_pending_and_warns(out: Path) -> None:
    stuck: list[Path] = []

    def write(path: Path) -> None:
        path.write_text("result")
        (path.parent / "stuck").write_text("immutable")
        subprocess.run(["chattr", "+i", str(path.parent / "stuck")], check=True)
        stuck.append(path.parent / "stuck")

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = publish_file(out / "f", write)
        assert result.cleanup_pending
        assert (out / "f").read_text() == "result"
        assert any(issubclass(w.category, CleanupPendingWarning) for w in caught)
    finally:
        for path in stuck:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    publish_file(out / "g", lambda p: p.write_text("g"))
    assert leftovers(out) == []


# -- Workspace --------------------------------------------------------------------------------


def test_workspace_resumes_then_publishes_and_removes_private_work(out: Path) -> None:
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "checkpoint").write_text("step 1")
    assert leftovers(out) == [".servatus-workspace.run"]
    with Workspace(out / "run", identity=b"v1") as ws:
        assert (ws.path / "checkpoint").read_text() == "step 1"
        result = ws.publish(lambda d: d.link(ws.path / "checkpoint", "model"))
        assert not result.cleanup_pending
        with pytest.raises(RuntimeError):
            ws.publish(lambda d: None)
    assert (out / "run/model").read_text() == "step 1"
    assert leftovers(out) == []
    with pytest.raises(DestinationExists), Workspace(out / "run", identity=b"v1"):
        pass
    assert leftovers(out) == []


def test_workspace_identity_conflicts(out: Path) -> None:
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "checkpoint").write_text("v1")
    with pytest.raises(WorkspaceConflict, match="another identity") as caught:
        Workspace(out / "run", identity=b"v2").__enter__()
    assert ".servatus-workspace.run" in str(caught.value)
    (out / ".servatus-workspace.run/identity").unlink()
    with pytest.raises(WorkspaceConflict, match="no identity"):
        Workspace(out / "run", identity=b"v1").__enter__()
    assert (out / ".servatus-workspace.run/work/checkpoint").read_text() == "v1"


def test_entering_after_publication_removes_leftover_private_work(out: Path) -> None:
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "checkpoint").write_text("leftover")
    (out / "run").mkdir()  # another run published meanwhile
    with pytest.raises(DestinationExists), Workspace(out / "run", identity=b"v1"):
        pass
    assert leftovers(out) == []


def test_an_interrupted_removal_is_finished_by_the_next_entry(out: Path) -> None:
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "checkpoint").write_text("x")
    private = out / ".servatus-workspace.run"
    os.rename(private / "work", private / "work.removing")  # removal stopped here
    with Workspace(out / "run", identity=b"v1") as ws:
        assert sorted(p.name for p in private.iterdir()) == ["identity", "work"]
        assert list(ws.path.iterdir()) == []


def test_discard_removes_private_work(out: Path) -> None:
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "sub").mkdir()
        (ws.path / "sub/f").write_text("x")
        ws.discard()
    assert list(out.iterdir()) == []
    with pytest.raises(RuntimeError):
        Workspace(out / "run", identity=b"v1").publish(lambda d: None)


def test_workspace_input_errors(out: Path) -> None:
    with pytest.raises(ConfigurationError):
        Workspace(out / "run", identity="text")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Workspace(out / "run", identity=b"v1").child("a/b", identity=b"c")
    with (
        pytest.raises(ConfigurationError, match="missing"),
        Workspace(out / "absent/run", identity=b"v1"),
    ):
        pass


def test_children_are_independent_until_the_parent_publishes(out: Path) -> None:
    parent = Workspace(out / "study", identity=b"study v1")
    with parent.child("a", identity=b"a v1") as a:
        (a.path / "r").write_text("a")
        a.publish(lambda d: d.link(a.path / "r", "r"))
    with parent.child("b", identity=b"b v1") as b:
        (b.path / "partial").write_text("b")  # not finished yet
    with pytest.raises(DestinationExists, match="/a"), parent.child("a", identity=b"a v1"):
        pass
    with parent.child("b", identity=b"b v1") as b:
        assert (b.path / "partial").read_text() == "b"
    with pytest.raises(WorkspaceConflict), Workspace(out / "study", identity=b"study v2"):
        pass
    with parent as ws:
        ws.publish(lambda d: d.link_tree(ws.path / "a", "a"))
    assert (out / "study/a/r").read_text() == "a"
    assert leftovers(out) == []


def test_a_child_of_an_entered_parent_in_the_same_process(out: Path) -> None:
    with Workspace(out / "study", identity=b"s") as parent:
        with parent.child("a", identity=b"a") as child:
            child.publish(lambda d: (d.path / "r").write_text("a"))
        parent.publish(lambda d: d.link_tree(parent.path / "a", "a"))
    assert (out / "study/a/r").read_text() == "a"
    assert leftovers(out) == []
