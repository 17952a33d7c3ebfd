"""Issue #30, attack 2: another user swaps a Workspace's private directory for her own.

The victim and Mallory are real Unix users of one project group (``userkit``), each running
real processes. The results directory is the project's, group-writable without a sticky bit,
so Mallory can rename the victim's owner-only ``.servatus-workspace.<name>`` aside and plant
her own, mode 0777, holding the victim's identity record and a checkpoint of hers. The victim
must never read that checkpoint, never write into her directory, and never publish her file:
resume, publish and removal each refuse with ``UnsafeFilesystem``.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servatus_publish.publication import STAGE_PREFIX
from servatus_publish.workspace import PREFIX, _record
from userkit import User, owned, project_directory, python, python_code

IDENTITY = b"sweep v1"
HERS = b"MALLORY: pickle that runs her code"

VICTIM_ENTER = """\
import json, sys, time
from pathlib import Path
from servatus import Workspace
from servatus.errors import ServatusError

results, ready, swapped = (Path(a) for a in sys.argv[1:4])
steps = sys.argv[4].split(",")
out = {}

def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except ServatusError as exc:
        out[name] = [type(exc).__name__, str(exc)]

with Workspace(results / "run", identity=b"sweep v1") as ws:
    held = ws.path
    (held / "checkpoint.pt").write_bytes(b"victim step 1")
    ready.touch()
    while not swapped.exists():
        time.sleep(0.005)
    for step in steps:
        if step == "held":  # a path taken before the swap, used after it
            out["held-read"] = (held / "checkpoint.pt").read_bytes().decode()
            (held / "after-swap").write_bytes(b"victim step 2")
        elif step == "resume":
            attempt("resume", lambda: (ws.path / "checkpoint.pt").read_bytes().decode())
        elif step == "publish":
            attempt("publish", lambda: str(ws.publish(
                lambda d: (d.path / "model").write_bytes(b"victim model")).path))
        elif step == "publish-named":  # user code that builds the path by name
            named = ws.private / "work" / "checkpoint.pt"
            attempt("publish-named", lambda: str(ws.publish(
                lambda d: d.link(named, "model")).path))
        elif step == "discard":
            attempt("discard", ws.discard)
print(json.dumps(out))
"""

VICTIM_REOPEN = """\
import json, sys
from pathlib import Path
from servatus import Workspace
from servatus.errors import ServatusError

results = Path(sys.argv[1])
try:
    with Workspace(results / "run", identity=b"sweep v1") as ws:
        out = ["ok", (ws.path / "checkpoint.pt").read_bytes().decode()]
except ServatusError as exc:
    out = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""

MALLORY_SWAP = """\
import os, sys
results, record, hers = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
os.umask(0)
count = 0
for name in sorted(os.listdir(results)):
    if name.startswith(".servatus-workspace."):
        path = os.path.join(results, name)
        if os.lstat(path).st_uid == os.getuid():
            continue
        os.rename(path, os.path.join(results, "aside-" + str(count)))
        os.mkdir(path, 0o777)
        with open(os.path.join(path, "identity"), "wb") as f:
            f.write(record)
        os.mkdir(os.path.join(path, "work"), 0o777)
        with open(os.path.join(path, "work", "checkpoint.pt"), "wb") as f:
            f.write(hers)
        count += 1
print(count)
"""

MALLORY_LOOP = """\
import os, random, sys, time
results, stop = sys.argv[1], sys.argv[4]
record, hers = bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
os.umask(0)
me, swaps, tries, deadline = os.getuid(), 0, 0, time.monotonic() + float(sys.argv[5])
while not os.path.exists(stop) and time.monotonic() < deadline:
    try:
        names = os.listdir(results)
    except OSError:
        continue
    for name in names:
        if not name.startswith(".servatus-workspace."):
            continue
        path = os.path.join(results, name)
        try:
            if os.lstat(path).st_uid == me:
                continue
            # Her directory is built whole under another name, then renamed into place: the
            # victim may catch a name by rename for a moment (and put back what is not its own),
            # and a plant built in place would then be left half-made by her, not by the victim.
            tries += 1
            plant = os.path.join(results, "plant-%d" % tries)
            os.mkdir(plant, 0o777)
            with open(os.path.join(plant, "identity"), "wb") as f:
                f.write(record)
            os.mkdir(os.path.join(plant, "work"), 0o777)
            with open(os.path.join(plant, "work", "checkpoint.pt"), "wb") as f:
                f.write(hers)
            time.sleep(random.random() * 0.02)  # strike at any point of the victim's round
            os.rename(path, os.path.join(results, "aside-%d" % swaps))
            swaps += 1
            os.rename(plant, path)
        except OSError:
            pass
print(swaps)
"""

VICTIM_ROUNDS = """\
import json, sys, time
from pathlib import Path
from servatus import Workspace
from servatus.errors import ServatusError

results, rounds, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
hers = bytes.fromhex(sys.argv[4])
tally = {"rounds": 0, "published": 0, "refused": 0, "other": [], "read_hers": 0, "why": {}}
deadline = time.monotonic() + seconds
for i in range(rounds):
    if time.monotonic() > deadline:
        break
    tally["rounds"] += 1
    mine = f"victim round {i}".encode()
    destination = results / f"run-{i}"
    try:
        with Workspace(destination, identity=b"sweep v1") as ws:  # a first link, preempted
            (ws.path / "checkpoint.pt").write_bytes(mine)
            time.sleep(0.002)
            (ws.path / "log").write_bytes(mine)
        with Workspace(destination, identity=b"sweep v1") as ws:  # the next link resumes
            checkpoint = ws.path / "checkpoint.pt"
            seen = checkpoint.read_bytes() if checkpoint.exists() else b""
            if hers in seen:
                tally["read_hers"] += 1
            checkpoint.write_bytes(mine)
            time.sleep(0.002)
            ws.publish(lambda d: d.link(ws.path / "checkpoint.pt", "model"))
        tally["published"] += 1
    except ServatusError as exc:
        if type(exc).__name__ == "UnsafeFilesystem":
            tally["refused"] += 1
            why = next((k for k in ("renamed away", "belongs to uid") if k in str(exc)), "other")
            tally["why"][why] = tally["why"].get(why, 0) + 1
        else:
            tally["other"].append(f"{type(exc).__name__}: {exc}")
    except OSError as exc:  # the old code's named path, renamed away under the victim
        tally["other"].append(f"{type(exc).__name__}: {exc}")
print(json.dumps(tally))
"""


def run_ok(user: User, argv: list[str], **kwargs: object) -> str:
    done = user.run(argv, **kwargs)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture
def results(shared: Path) -> Path:
    """The project's results directory: root's, group-writable, setgid, no sticky bit."""
    return project_directory(shared / "results")


@pytest.fixture
def both(
    users: tuple[User, User], shared: Path
) -> Iterator[tuple[User, User, list[str], list[str]]]:
    victim, mallory = users
    owned(shared / "signals", victim, 0o755)  # the victim's, for the files saying where it is
    yield victim, mallory, python(victim), python(mallory)


def swap(mallory: User, py: list[str], results: Path) -> int:
    """Mallory renames every private directory of the victim's aside and plants her own."""
    out = run_ok(mallory, [*py, MALLORY_SWAP, str(results), _record(IDENTITY).hex(), HERS.hex()])
    return int(out)


def hers_untouched(results: Path, mallory: User) -> None:
    """Everything in Mallory's planted directories is still hers, as she left it."""
    planted = [p for p in results.iterdir() if p.name.startswith(PREFIX)]
    for directory in planted:
        if directory.lstat().st_uid != mallory.uid:
            continue
        for root, dirs, files in os.walk(directory):
            for name in dirs + files:
                owner = (Path(root) / name).lstat().st_uid
                assert owner == mallory.uid, f"{Path(root) / name} is not Mallory's"
        assert sorted(p.name for p in directory.iterdir()) == ["identity", "work"]
        assert [p.name for p in (directory / "work").iterdir()] == ["checkpoint.pt"]
        assert (directory / "work/checkpoint.pt").read_bytes() == HERS


def enter_swap_then(
    victim: User, mallory: User, vpy: list[str], mpy: list[str], results: Path, steps: str
) -> dict[str, object]:
    ready, swapped = results.parent / "signals/ready", results.parent / "signals/swapped"
    process = victim.popen(
        python_code(victim, VICTIM_ENTER, str(results), str(ready), str(swapped), steps),
        stdout=-1,
        stderr=-1,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert swap(mallory, mpy, results) == 1
        swapped.touch()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()
    result: dict[str, object] = json.loads(out)
    return result


def test_reopening_a_swapped_private_directory_is_refused(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    victim, mallory, _, mpy = both
    ready, swapped = results.parent / "signals/ready", results.parent / "signals/swapped"
    swapped.touch()
    run_ok(
        victim,
        python_code(victim, VICTIM_ENTER, str(results), str(ready), str(swapped), ""),
    )
    assert swap(mallory, mpy, results) == 1
    kind, message = json.loads(run_ok(victim, python_code(victim, VICTIM_REOPEN, str(results))))
    assert kind == "UnsafeFilesystem"
    assert f"{results}/{PREFIX}run" in message and "\n" not in message
    hers_untouched(results, mallory)
    assert (results / "aside-0/work/checkpoint.pt").read_bytes() == b"victim step 1"


def test_resume_publish_and_removal_after_a_swap_are_refused(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    victim, mallory, vpy, mpy = both
    out = enter_swap_then(
        victim, mallory, vpy, mpy, results, "resume,publish,publish-named,discard"
    )
    shown = f"{results}/{PREFIX}run"
    for step in ("resume", "publish", "publish-named", "discard"):
        kind, message = out[step]  # type: ignore[misc]
        assert kind == "UnsafeFilesystem", (step, out[step])
        assert shown in message and "\n" not in message, message
    assert not (results / "run").exists()
    hers_untouched(results, mallory)
    # The victim's own work is left where Mallory moved it, untouched, for the victim to judge.
    aside = results / "aside-0"
    assert aside.stat().st_uid == victim.uid
    assert (aside / "work/checkpoint.pt").read_bytes() == b"victim step 1"


def test_a_path_taken_before_the_swap_keeps_naming_the_victims_work(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    victim, mallory, vpy, mpy = both
    out = enter_swap_then(victim, mallory, vpy, mpy, results, "held,discard")
    assert out["held-read"] == "victim step 1"
    assert out["discard"][0] == "UnsafeFilesystem"  # type: ignore[index]
    hers_untouched(results, mallory)
    assert (results / "aside-0/work/after-swap").read_bytes() == b"victim step 2"


def test_another_users_file_is_never_linked(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    victim, mallory, _, _ = both
    planted = results / "planted"
    run_ok(mallory, ["/bin/sh", "-c", f"umask 0; printf MALLORY > {planted}"])
    script = """\
import sys
from servatus import publish
from servatus.errors import UnsafeFilesystem
try:
    publish(sys.argv[1] + "/model", lambda d: d.link(sys.argv[1] + "/planted", "model"))
except UnsafeFilesystem as exc:
    print("refused:", exc)
"""
    out = run_ok(victim, python_code(victim, script, str(results)))
    assert out.startswith(f"refused: {planted} belongs to uid {mallory.uid}")
    assert not (results / "model").exists()


@pytest.mark.slow
def test_a_swapping_loop_never_gets_anything_in_or_out(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    victim, mallory, _, mpy = both
    stop = results.parent / "stop"
    seconds = 20.0
    swapper = mallory.popen(
        [
            *mpy,
            MALLORY_LOOP,
            str(results),
            _record(IDENTITY).hex(),
            HERS.hex(),
            str(stop),
            str(seconds + 30),
        ],
        stdout=-1,
        stderr=-1,
    )
    try:
        tally = json.loads(
            run_ok(
                victim,
                python_code(victim, VICTIM_ROUNDS, str(results), "200", str(seconds), HERS.hex()),
                timeout=seconds + 60,
            )
        )
    finally:
        stop.touch()
        swaps_out, swaps_err = swapper.communicate(timeout=60)
    assert swapper.returncode == 0, swaps_err.decode()
    swaps = int(swaps_out)
    print(
        f"\nrace: {tally['rounds']} rounds, {swaps} swaps, {tally['published']} published, "
        f"{tally['refused']} refused, {len(tally['other'])} other; refusals: {tally['why']}"
    )
    assert tally["read_hers"] == 0
    assert tally["rounds"] >= 20 and swaps > 0 and tally["refused"] > 0
    assert all(o.startswith("Busy") for o in tally["other"]), tally["other"]
    # Nothing of the victim's was ever written into a directory of Mallory's.
    for root, dirs, files in os.walk(results):
        owner = Path(root).lstat().st_uid
        if owner == mallory.uid:
            for name in dirs + files:
                assert (Path(root) / name).lstat().st_uid == mallory.uid, Path(root) / name
    hers_untouched(results, mallory)
    # Every published result is the victim's own file, with the victim's bytes.
    published = sorted(results.glob("run-*"))
    assert len(published) == tally["published"]
    for result in published:
        model = result / "model"
        st = model.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == victim.uid, model
        assert model.read_bytes() == f"victim round {result.name[4:]}".encode()


def test_reclaiming_leaves_another_users_directory_in_the_container(
    both: tuple[User, User, list[str], list[str]], results: Path
) -> None:
    """A removal that caught her planted directory by name and could not put it back leaves it
    in the victim's stage container; the victim's next reclaim must not empty it."""
    victim, mallory, _, _ = both
    container = owned(results / f"{STAGE_PREFIX}{victim.uid}", victim, 0o700)
    hers = container / f"{PREFIX}run"
    hers.mkdir(0o777)
    (hers / "work").mkdir(0o777)
    (hers / "work/checkpoint.pt").write_bytes(HERS)
    for path in (hers, hers / "work", hers / "work/checkpoint.pt"):
        os.chown(path, mallory.uid, mallory.gid)
        path.chmod(0o777)
    dead = owned(container / "stage-dead", victim, 0o700)
    (dead / "half").write_bytes(b"")
    os.chown(dead / "half", victim.uid, victim.gid)
    script = """\
import sys
from pathlib import Path
from servatus_publish._fs import HeldDirectory
from servatus_publish.publication import reclaim_beside
held = HeldDirectory.open(Path(sys.argv[1]), "results")
reclaim_beside(held)
"""
    run_ok(victim, python_code(victim, script, str(results)))
    assert (hers / "work/checkpoint.pt").read_bytes() == HERS
    assert hers.lstat().st_uid == mallory.uid
    assert not dead.exists()
