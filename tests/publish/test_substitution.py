"""A symlink swapped in for a directory mid-publication is refused and never followed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from publish_helpers import leftovers

from servatus import Workspace, publish, publish_file
from servatus.errors import ConfigurationError, UnsafeFilesystem
from servatus_publish.publication import Draft

SWAPPER = """\
import os, sys, time
parent, elsewhere, done, written = sys.argv[1:]
while not os.path.exists(written):
    time.sleep(0.001)
os.rename(parent, parent + ".real")
os.symlink(elsewhere, parent)
open(done, "w").close()
"""


def test_parent_swapped_by_another_process_is_refused(tmp_path: Path) -> None:
    out, elsewhere, done = tmp_path / "outputs", tmp_path / "elsewhere", tmp_path / "done"
    written = tmp_path / "written"
    out.mkdir()
    elsewhere.mkdir()
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(out), str(elsewhere), str(done), str(written)]
    )

    def build(draft: Draft) -> None:
        # The swap comes after the draft is written, while publication is under way: waiting
        # only for the stage container raced the write itself.
        (draft.path / "result").write_text("r")
        written.touch()
        deadline = time.monotonic() + 30
        while not done.exists():
            assert time.monotonic() < deadline
            time.sleep(0.001)

    try:
        with pytest.raises(UnsafeFilesystem, match="replaced"):
            publish(out / "run", build)
    finally:
        swapper.wait(timeout=30)
    assert list(elsewhere.iterdir()) == []
    real = tmp_path / "outputs.real"
    assert list(real.iterdir()) == []
    assert leftovers(real) == []


def test_higher_component_swapped_for_a_symlink_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "outputs").mkdir(parents=True)
    decoy = tmp_path / "decoy"
    (decoy / "outputs").mkdir(parents=True)

    def write(path: Path) -> None:
        path.write_text("secret")
        os.rename(base, tmp_path / "base.real")
        os.symlink(decoy, base)

    with pytest.raises(UnsafeFilesystem):
        publish_file(base / "outputs/weights", write)
    assert list((decoy / "outputs").iterdir()) == []
    assert list((tmp_path / "base.real/outputs").iterdir()) == []


def test_workspace_parent_swapped_before_publish_is_refused(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "outputs", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    with Workspace(out / "run", identity=b"v1") as ws:
        (ws.path / "checkpoint").write_text("c")
        os.rename(out, tmp_path / "outputs.real")
        os.symlink(elsewhere, out)
        with pytest.raises(UnsafeFilesystem):
            ws.publish(
                lambda d: d.link(
                    tmp_path / "outputs.real/.servatus-workspace.run/work/checkpoint", "c"
                )
            )
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "outputs.real/run").exists()


def test_a_symlink_inside_the_draft_is_not_followed(tmp_path: Path) -> None:
    out, outside = tmp_path / "outputs", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (tmp_path / "model").write_text("m")

    def build(draft: Draft) -> None:
        os.symlink(outside, draft.path / "sub")
        draft.link(tmp_path / "model", "sub/model")

    with pytest.raises(ConfigurationError, match="not a directory"):
        publish(out / "run", build)
    assert list(outside.iterdir()) == []
    assert list(out.iterdir()) == []


def test_workspace_private_directory_renamed_away_is_refused_everywhere(tmp_path: Path) -> None:
    # The two-user version is in test_two_users.py; here the planted directory is even this
    # user's own and owner-only, so only the binding to the directory entered can tell.
    out = tmp_path / "outputs"
    out.mkdir()
    private = out / ".servatus-workspace.run"
    with Workspace(out / "run", identity=b"v1") as ws:
        held = ws.path
        (held / "checkpoint").write_text("mine")
        os.rename(private, out / "aside")
        (private / "work").mkdir(parents=True, mode=0o700)
        (private / "work/checkpoint").write_text("planted")
        assert (held / "checkpoint").read_text() == "mine"
        for attempt in (
            lambda: ws.path,
            lambda: ws.publish(lambda d: (d.path / "r").write_text("r")),
            ws.discard,
        ):
            with pytest.raises(UnsafeFilesystem, match="renamed away or replaced"):
                attempt()
    assert not (out / "run").exists()
    assert (private / "work/checkpoint").read_text() == "planted"
    assert (out / "aside/work/checkpoint").read_text() == "mine"
