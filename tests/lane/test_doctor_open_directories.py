"""doctor warns of each directory on the way to work_root, log_root and work_root/results that
others can write to without the sticky bit, asked on the target through the local transport."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_bin import make_fake_bin

from servatus.cli import main


def test_doctor_warns_of_directories_others_can_rename_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "shared" / "sweep"
    root.mkdir(parents=True)
    config, logs = make_fake_bin(root)
    (root / "results").mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "shared", 0o2770)  # a project group's directory: group-writable
    os.chmod(root, 0o755)
    os.chmod(logs, 0o1777)  # writable by all, but sticky: only owners rename
    os.chmod(root / "results", 0o777)
    code = main(["doctor", "--config", str(config), "--json"])
    out, err = capsys.readouterr()
    warnings = json.loads(out)["warnings"]
    assert [w.split(" ", 1)[0] for w in warnings] == [
        str(tmp_path / "shared"),
        str(root / "results"),
    ]
    assert "writable by its group without the sticky bit (mode 2770)" in warnings[0]
    assert "writable by group and others without the sticky bit (mode 0777)" in warnings[1]
    assert f"chmod go-w {root / 'results'}" in warnings[1]
    assert err.splitlines() == [f"servatus: warning: {w}" for w in warnings]
    assert code == 1  # the fake bin has no scontrol; the warnings change no exit code
    os.chmod(tmp_path / "shared", 0o755)
    os.chmod(root / "results", 0o700)
    main(["doctor", "--config", str(config), "--json"])
    out, err = capsys.readouterr()
    assert json.loads(out)["warnings"] == []
    assert "warning" not in err


def test_doctor_sees_through_links_and_sticky_directories_of_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of issue #30: a sticky directory on the way that belongs to another user lets its
    owner rename anything in it; and a path reached through a link is judged where it leads, not
    by the link's own 0777."""
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2770)  # the project's directory the link leads into
    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 0)  # nobody's, sticky and open to all
    os.chmod(theirs, 0o1777)
    real = theirs / "sweep"
    real.mkdir()
    (tmp_path / "scratch").symlink_to(real)
    config, _ = make_fake_bin(real)
    text = config.read_text().replace(str(real), str(tmp_path / "scratch"))
    config.write_text(text)
    (real / "results").mkdir()
    main(["doctor", "--config", str(config), "--json"])
    out, _ = capsys.readouterr()
    warnings = json.loads(out)["warnings"]
    named = [w.split(" ", 1)[0] for w in warnings]
    assert str(tmp_path / "scratch") not in named  # the link's own mode is no directory's
    assert str(shared) in named
    assert any(w.startswith(f"{theirs} is sticky but belongs to uid 65534") for w in warnings)
