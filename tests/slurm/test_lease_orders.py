"""Offering and withdrawing a lease's orders (``servatus.lease``), through the local transport on
the real filesystem, including a withdraw racing a lease-side claim in real processes."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from servatus.errors import ConfigurationError
from servatus.lease import (
    GUARD_FAILED,
    Guard,
    Offer,
    OfferAnswer,
    Verdict,
    claim_name,
    offer,
    offer_command,
    read_offers,
    read_withdrawals,
    withdraw,
)
from servatus.transport import COMMAND_TIMEOUT, CommandResult
from servatus_slurm.transport import LocalTransport

JOB = 77
LEASE = "feedfacefeedfacefeedface"


def step_id(n: int) -> str:
    return f"{n:024x}"


def order_text(step: str, body: str = "servatus_step() {\n    :\n}\n") -> str:
    return (
        f"# servatus.order/1 {step} lease={LEASE} slot=1/100/0\n{body}"
        f"# servatus.order/1 end {step}\n"
    )


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    directory = tmp_path / f"servatus-{LEASE}.orders"
    directory.mkdir(mode=0o700)
    directory.chmod(0o700)
    return directory


class PathTransport:
    """The local transport with a directory of stand-in programs first on ``PATH``."""

    def __init__(self, bin_dir: Path) -> None:
        self.inner = LocalTransport()
        self.path = f"{bin_dir}:/usr/bin:/bin"

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        return self.inner.run(["/usr/bin/env", f"PATH={self.path}", *argv], stdin=stdin)

    def close(self) -> None:
        self.inner.close()


def take(orders: Path, step: str) -> str:
    """What the lease does to take an order: its ``ln``, then its reading of the claim."""
    claim = orders / claim_name(step, JOB)
    return subprocess.run(
        [
            "dash",
            "-c",
            'ln "$1" "$2" 2>/dev/null; case $(wc -c <"$2" 2>/dev/null) in'
            " *[1-9]*) echo taken ;; *0*) echo withdrawn ;; *) echo undecided ;; esac",
            "sh",
            str(orders / step),
            str(claim),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_offers_are_written_whole_owner_only_then_renamed(orders: Path) -> None:
    texts = {
        step_id(1): order_text(step_id(1)),
        step_id(2): order_text(step_id(2), "servatus_step() {\n" + "    : " + "x" * 9000 + "\n}\n"),
    }
    answers = offer(LocalTransport(), str(orders), JOB, texts)
    assert answers == dict.fromkeys(texts, OfferAnswer(Offer.OFFERED))
    assert sorted(os.listdir(orders)) == sorted(texts)
    for step, text in texts.items():
        assert (orders / step).read_text() == text
        assert (orders / step).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("problem", ["missing", "open", "link"])
def test_offers_into_anything_but_an_owner_only_directory_are_refused(
    tmp_path: Path, problem: str
) -> None:
    directory = tmp_path / "orders"
    if problem == "open":
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    elif problem == "link":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        directory.symlink_to(real)
    step = step_id(1)
    answers = offer(LocalTransport(), str(directory), JOB, {step: order_text(step)})
    assert answers == {step: OfferAnswer(Offer.REFUSED, "directory")}
    assert not (tmp_path / "real").exists() or not os.listdir(tmp_path / "real")
    assert problem != "missing" or not directory.exists()


def test_a_short_write_is_refused_before_any_rename(orders: Path) -> None:
    first, second = step_id(1), step_id(2)
    argv, data = offer_command(
        str(orders), JOB, {first: order_text(first), second: order_text(second)}, "n0nce"
    )
    size = argv.index(second) + 1
    argv[size] = str(int(argv[size]) + 1)  # the file on disk is one byte short of the plan
    result = LocalTransport().run(argv, stdin=data)
    assert read_offers(result.stdout, [first, second]) == {
        first: OfferAnswer(Offer.OFFERED),
        second: OfferAnswer(Offer.REFUSED, "write"),
    }
    assert os.listdir(orders) == [first]


def fake_mv(bin_dir: Path, also: str = "") -> None:
    """An ``mv`` that renames and then reports failure, as after a retransmitted RENAME."""
    bin_dir.mkdir()
    script = bin_dir / "mv"
    script.write_text(f'#!/bin/sh\nshift\n/bin/mv -- "$1" "$2"\n{also}\nexit 1\n')
    script.chmod(0o755)


def test_a_rename_that_reports_failure_is_withdrawn_by_the_claim(
    tmp_path: Path, orders: Path
) -> None:
    fake_mv(tmp_path / "bin")
    step = step_id(1)
    answers = offer(PathTransport(tmp_path / "bin"), str(orders), JOB, {step: order_text(step)})
    assert answers == {step: OfferAnswer(Offer.WITHDRAWN)}
    assert (orders / step).exists()  # the rename did happen; the empty claim makes it harmless
    assert (orders / claim_name(step, JOB)).stat().st_size == 0
    assert take(orders, step) == "withdrawn"


def test_a_rename_that_reports_failure_after_the_lease_took_it_is_offered(
    tmp_path: Path, orders: Path
) -> None:
    step = step_id(1)
    fake_mv(tmp_path / "bin", f'ln "$2" "$(dirname "$2")/{claim_name(step, JOB)}"')
    answers = offer(PathTransport(tmp_path / "bin"), str(orders), JOB, {step: order_text(step)})
    assert answers == {step: OfferAnswer(Offer.OFFERED)}


def test_withdraw_decides_before_during_and_after_the_offer(orders: Path) -> None:
    early, offered, taken = step_id(1), step_id(2), step_id(3)
    transport = LocalTransport()
    assert withdraw(transport, str(orders), JOB, [early]) == {early: Verdict.WITHDRAWN}
    answers = offer(
        transport, str(orders), JOB, {s: order_text(s) for s in (early, offered, taken)}
    )
    assert {answer.outcome for answer in answers.values()} == {Offer.OFFERED}
    assert take(orders, early) == "withdrawn"  # the late order finds its claim already made
    assert take(orders, taken) == "taken"
    assert withdraw(transport, str(orders), JOB, [offered, taken, early]) == {
        offered: Verdict.WITHDRAWN,
        taken: Verdict.TAKEN,
        early: Verdict.WITHDRAWN,
    }
    assert withdraw(transport, str(orders), JOB, [offered]) == {offered: Verdict.WITHDRAWN}
    assert not any(".void." in name for name in os.listdir(orders))


def test_a_withdrawer_never_makes_a_missing_directory(tmp_path: Path) -> None:
    directory = tmp_path / "gone"
    step = step_id(1)
    assert withdraw(LocalTransport(), str(directory), JOB, [step]) == {step: Verdict.UNDECIDED}
    assert not directory.exists()


def test_answers_cut_short_or_repeated_are_undecided() -> None:
    a, b, c = step_id(1), step_id(2), step_id(3)
    out = f"taken {a}\nwithdrawn {b}\nwithdrawn {b}\nwithd".encode()
    assert read_withdrawals(out, [a, b, c]) == {
        a: Verdict.TAKEN,
        b: Verdict.UNDECIDED,
        c: Verdict.UNDECIDED,
    }
    out = f"offered {a}\nrefused {b}\nrefused {c} write\n".encode()
    assert read_offers(out, [a, b, c]) == {
        a: OfferAnswer(Offer.OFFERED),
        b: OfferAnswer(Offer.UNDECIDED),
        c: OfferAnswer(Offer.REFUSED, "write"),
    }


def test_a_withdraw_racing_the_lease_decides_each_order_exactly_once(orders: Path) -> None:
    """Real processes on the real filesystem: whichever link lands first, both sides read the
    same verdict, and no order is both taken and withdrawn or neither."""
    transport = LocalTransport()
    rounds = 60
    seen: dict[str, int] = {"taken": 0, "withdrawn": 0}
    rng = random.Random(15)
    for n in range(rounds):
        step = step_id(1000 + n)
        (orders / step).write_text(order_text(step))
        lease_side: list[str] = []
        delay = rng.uniform(0, 0.03)

        def lease(step: str = step, delay: float = delay, into: list[str] = lease_side) -> None:
            time.sleep(delay)
            into.append(take(orders, step))

        thread = threading.Thread(target=lease)
        thread.start()
        client = withdraw(transport, str(orders), JOB, [step])[step]
        thread.join()
        assert client is not Verdict.UNDECIDED
        assert lease_side == [client.value], f"round {n}"
        claim = orders / claim_name(step, JOB)
        assert (claim.stat().st_size > 0) == (client is Verdict.TAKEN)
        assert claim.stat().st_nlink in (1, 2)  # one link won: the order's, or the void file's
        seen[client.value] += 1
    assert sum(seen.values()) == rounds
    assert seen["taken"] and seen["withdrawn"], seen


# -- the wake-up ---------------------------------------------------------------------------------


def stand_in(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_an_offer_wakes_its_own_lease_job_once_its_orders_are_in_place(
    orders: Path, tmp_path: Path
) -> None:
    called = tmp_path / "called"
    scancel = stand_in(tmp_path / "scancel", f'ls "$PWD" >"{called}.ls"; echo "$@" >"{called}"')
    texts = {step_id(1): order_text(step_id(1)), step_id(2): order_text(step_id(2))}
    answers = offer(LocalTransport(), str(orders), JOB, texts, wake=str(scancel))
    assert answers == dict.fromkeys(texts, OfferAnswer(Offer.OFFERED))
    deadline = time.monotonic() + 10
    while not called.exists() or not called.read_text():
        assert time.monotonic() < deadline, "the lease was never woken"
        time.sleep(0.02)
    assert called.read_text() == f"--batch --signal=URG {JOB}\n"
    assert sorted(called.with_suffix(".ls").read_text().split()) == sorted(texts)


@pytest.mark.parametrize("wake", ["loud", "failing", "hanging", "missing"])
def test_a_wake_up_that_fails_changes_nothing_in_the_offers_answer(
    orders: Path, tmp_path: Path, wake: str
) -> None:
    other = step_id(9)
    bodies = {
        "loud": f'echo "refused {step_id(1)} write"; echo "offered {other}" >&2',
        "failing": "echo 'scancel: error: Kill job error' >&2; exit 1",
        "hanging": "sleep 8",
    }
    scancel = tmp_path / "scancel"
    if wake in bodies:
        stand_in(scancel, bodies[wake])
    step = step_id(1)
    argv, data = offer_command(str(orders), JOB, {step: order_text(step)}, "n0nce", str(scancel))
    began = time.monotonic()
    result = LocalTransport().run(argv, stdin=data)
    assert time.monotonic() - began < 4
    said = (result.returncode, result.stdout, result.stderr)
    assert said == (0, f"offered {step}\n".encode(), b"")
    assert read_offers(result.stdout, [step]) == {step: OfferAnswer(Offer.OFFERED)}


def test_no_wake_up_without_an_order_in_place(orders: Path, tmp_path: Path) -> None:
    called = tmp_path / "called"
    scancel = stand_in(tmp_path / "scancel", f': >"{called}"')
    orders.chmod(0o755)  # refused: no order exists, so nothing to wake the lease for
    step = step_id(1)
    answers = offer(LocalTransport(), str(orders), JOB, {step: order_text(step)}, wake=str(scancel))
    assert answers == {step: OfferAnswer(Offer.REFUSED, "directory")}
    time.sleep(0.3)
    assert not called.exists()


def test_the_wake_up_is_an_absolute_command() -> None:
    with pytest.raises(ConfigurationError):
        offer_command("/orders", JOB, {step_id(1): order_text(step_id(1))}, "n", "scancel")


# -- the guarded offer (start in one round trip) ---------------------------------------------------


def guarded(tmp_path: Path, answer: str) -> Guard:
    """A guard whose ``squeue`` stand-in prints ``answer`` for job JOB (and notes its words)."""
    squeue = stand_in(
        tmp_path / "squeue",
        f'echo "$@" >"{tmp_path}/squeue.args"\n'
        f'case "$*" in *--jobs={JOB}*) printf "%s\\n" "{answer}" ;; esac',
    )
    return Guard(str(squeue), f"servatus-{LEASE}", str(tmp_path / f"servatus-{LEASE}.{JOB}.limit"))


@pytest.mark.parametrize(
    ("answer", "woken"),
    [(f"servatus-{LEASE}|RUNNING", True), (f"  servatus-{LEASE}|PENDING ", False)],
)
def test_a_guarded_offer_offers_to_a_live_link_and_wakes_only_a_running_one(
    orders: Path, tmp_path: Path, answer: str, woken: bool
) -> None:
    called = tmp_path / "called"
    scancel = stand_in(tmp_path / "scancel", f'echo "$@" >"{called}"')
    texts = {step_id(1): order_text(step_id(1)), step_id(2): order_text(step_id(2))}
    guard = guarded(tmp_path, answer)
    answers = offer(LocalTransport(), str(orders), JOB, texts, str(scancel), guard)
    assert answers == dict.fromkeys(texts, OfferAnswer(Offer.OFFERED))
    assert sorted(os.listdir(orders)) == sorted(texts)
    asked = (tmp_path / "squeue.args").read_text().split()
    assert asked == ["--me", "--noheader", "--states=all", f"--jobs={JOB}", "--format=%j|%T"]
    time.sleep(0.5)
    assert called.exists() == woken


@pytest.mark.parametrize(
    "answer",
    [
        f"servatus-{LEASE}|COMPLETING",  # live, but not a state the guess can vouch for
        f"servatus-{LEASE}|COMPLETED",
        f"servatus-{'0' * 24}|RUNNING",  # another job under that number
        "",  # squeue forgot it, or failed
        f"servatus-{LEASE}|RUNNING\nservatus-{LEASE}|RUNNING",
    ],
)
def test_a_guard_that_fails_writes_nothing_and_withdraws_every_step(
    orders: Path, tmp_path: Path, answer: str
) -> None:
    called = tmp_path / "called"
    scancel = stand_in(tmp_path / "scancel", f': >"{called}"')
    texts = {step_id(1): order_text(step_id(1)), step_id(2): order_text(step_id(2))}
    answers = offer(
        LocalTransport(), str(orders), JOB, texts, str(scancel), guarded(tmp_path, answer)
    )
    assert answers == dict.fromkeys(texts, OfferAnswer(Offer.WITHDRAWN, GUARD_FAILED))
    assert os.listdir(orders) == []
    time.sleep(0.3)
    assert not called.exists()


@pytest.mark.parametrize("kind", ["file", "foreign link", "directory"])
def test_a_limit_marker_of_any_kind_fails_the_guard(
    orders: Path, tmp_path: Path, kind: str
) -> None:
    """The guard cannot tell a planted file from the lease's own marker, and need not: failing
    it only costs the reading a plan would have made anyway."""
    guard = guarded(tmp_path, f"servatus-{LEASE}|RUNNING")
    limit = Path(guard.limit)
    if kind == "file":
        limit.touch()
    elif kind == "foreign link":
        limit.symlink_to(tmp_path / "nowhere")
    else:
        limit.mkdir()
    texts = {step_id(1): order_text(step_id(1))}
    answers = offer(LocalTransport(), str(orders), JOB, texts, None, guard)
    assert answers == {step_id(1): OfferAnswer(Offer.WITHDRAWN, GUARD_FAILED)}
    assert os.listdir(orders) == []


def test_a_withdrawal_says_guard_only_when_a_guard_failed() -> None:
    """Without the reason a withdrawal is the claim's (an offer whose rename failed); any
    other reason is no clear answer."""
    step = step_id(1)
    assert read_offers(f"withdrawn {step}\n".encode(), [step]) == {
        step: OfferAnswer(Offer.WITHDRAWN)
    }
    assert read_offers(f"withdrawn {step} directory\n".encode(), [step]) == {
        step: OfferAnswer(Offer.UNDECIDED)
    }


def test_a_slow_squeue_fails_the_guard_within_its_bound(orders: Path, tmp_path: Path) -> None:
    """Review of #33: a slurmctld slower than the guard's bound fails the guard (nothing written,
    every step withdrawn) instead of holding the offer past the command's time limit, to write
    its orders after the client gave up. The bound is 10 s; here 1 s, on the same text."""
    squeue = stand_in(tmp_path / "squeue", f'sleep 3; echo "servatus-{LEASE}|RUNNING"')
    guard = Guard(str(squeue), f"servatus-{LEASE}", str(tmp_path / "limit"))
    texts = {step_id(1): order_text(step_id(1))}
    argv, data = offer_command(str(orders), JOB, texts, "n0nce", None, guard)
    assert "timeout 10 " in argv[2]
    argv[2] = argv[2].replace("timeout 10 ", "timeout 1 ")
    began = time.monotonic()
    result = LocalTransport().run(argv, stdin=data)
    assert time.monotonic() - began < 4
    assert read_offers(result.stdout, list(texts)) == {
        step_id(1): OfferAnswer(Offer.WITHDRAWN, GUARD_FAILED)
    }
    time.sleep(3)  # past the stand-in's answer: the offer never went on to write
    assert os.listdir(orders) == []
