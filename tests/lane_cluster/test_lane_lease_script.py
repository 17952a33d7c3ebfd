"""The lease's batch script and the order/claim protocol (ADR 0009) on the real Slurm 24.11.

No CLI builds leases yet, so each lease is submitted by hand (``lane_lease.submit``: the orders
directory made ``0700`` first, then ``sbatch`` of ``render_lease``), orders are offered and
withdrawn with ``servatus.lease`` and read back with ``find``, all through the SSH transport.
One module fixture submits every lease at once, the short-limit one first, so the cases cost
about the slowest of them rather than their sum; each case then works on its own lease, and
every job is cancelled by its number at the end (never ``scancel --me``). Timings are printed
(``pytest -s``) for the ADR's record.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest
from lane_helpers import Lane, make_lane
from lane_lease import Entry, Lease, new_id, said, submit, wait_until

from cluster.fixture import SlurmCluster
from servatus.config import Profile, Target
from servatus.lease import Verdict
from servatus.plugins import hooks
from servatus.transport import Transport

# After every concurrent scenario (cluster.prelude):
# it asserts latencies of a poll plus srun.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]

POLL = 5
"""The lease's poll, the spec's 5 s."""
SRUN = 5
"""Seconds allowed for ``srun`` to create a step and start its process, on top of the poll: 1 to
2 s on an idle machine, more with both cores busy beside the cluster (CI)."""
LIMIT_SECONDS, LIMIT_BEFORE = 60, 20
"""The short lease: ``--time=1``, ``--signal=B:USR1@20`` (Slurm may send it up to 60 s early)."""
GRACE = 5
"""The stop lease's ``signal_before_end``: between ``SIGUSR1`` and ``SIGTERM`` of a stopped step."""
RACE_BATCHES, RACE_ORDERS = 7, 8
"""The contention case: 7 batches of 8 fresh orders (56 rounds), each withdrawn 0-6 s later."""


@attrs.define
class Leases:
    lane: Lane
    transport: Transport
    cpu: Target
    gpu: Target
    limit: Lease
    limit_step: str
    queued: Lease
    slots: Lease
    stop: Lease
    race: Lease
    cancelled: Lease
    raw: dict[str, int]
    """Plain jobs checking Slurm facts: ``signals``, ``gres``."""
    jobs: list[int]
    after_limit: Future[AfterLimit]


WAITING_SIGNALS = ("USR1", "USR2", "TERM", "HUP")


def _raw_signals(log_root: str) -> str:
    """One slot held by a sleeping step; four more ``srun``s wait for it and each gets one
    signal. Each writes its exit code; a command that ran leaves ``ran.<signal>``."""
    d = f"{log_root}/raw-signals"
    sruns = "".join(
        f'/usr/bin/srun $o /bin/sh -c ": >{d}/ran.{s}" >{d}/{s}.out 2>&1 &\np_{s}=$!\n'
        for s in WAITING_SIGNALS
    )
    kills = "".join(f"kill -{s} $p_{s}\n" for s in WAITING_SIGNALS)
    waits = "".join(f'wait $p_{s}; echo "{s} $?" >>{d}/codes\n' for s in WAITING_SIGNALS)
    return (
        "#!/bin/sh\n"
        f"#SBATCH --export=NIL --no-requeue --ntasks=1 --cpus-per-task=1 --mem=200M --time=2"
        f" --job-name=servatus-raw-signals -o {d}/job.out\n"
        "o='--ntasks=1 --nodes=1 --exact --cpus-per-task=1 --mem=50M --gres=none'\n"
        "/usr/bin/srun $o /bin/sh -c 'sleep 15' &\n"
        "sleep 3\n" + sruns + "sleep 5\n" + kills + waits + "wait\n"
    )


def _raw_gres(log_root: str) -> str:
    """A two-GPU job's steps with ``--gres=none``, without ``--gres``, and with one GPU."""
    d = f"{log_root}/raw-gres"
    show = "${SLURM_GPUS_ON_NODE-unset}"
    return (
        "#!/bin/sh\n"
        "#SBATCH --export=NIL --no-requeue --ntasks=2 --cpus-per-task=1 --mem=200M"
        f" --gres=gpu:a100:2 --time=2 --job-name=servatus-raw-gres -o {d}/job.out\n"
        "o='--ntasks=1 --nodes=1 --exact --cpus-per-task=1 --mem=50M'\n"
        f"/usr/bin/srun $o --gres=none /bin/sh -c 'echo none {show}'\n"
        f"/usr/bin/srun $o /bin/sh -c 'echo omitted {show}'\n"
        f"/usr/bin/srun $o --gres=gpu:a100:1 /bin/sh -c 'echo one {show}'\n"
    )


def _sbatch(lane: Lane, transport: Transport, slurm_bin: str, name: str, script: str) -> int:
    lane.cluster.make_dirs(f"{lane.log_root}/raw-{name}")
    answer = transport.run([f"{slurm_bin}/sbatch", "--parsable"], stdin=script.encode())
    assert answer.returncode == 0, answer.stderr
    return int(answer.stdout.decode().split(";")[0])


@pytest.fixture(scope="module")
def leases(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Leases]:
    lane = make_lane(slurm_cluster, "ssh", tmp_path_factory.mktemp("lease"), "lease-script")
    toml = lane.put(lane.launch / "SERVATUS.toml", lane.toml())
    cpu = Profile.load(toml, name="cpu").target
    gpu = Profile.load(toml, name="gpu").target
    transport = hooks().transport("ssh").connect(cpu)
    jobs: list[int] = []
    watcher = ThreadPoolExecutor(max_workers=1)

    def lease(**options: object) -> Lease:
        made = submit(transport, cpu, **options)  # type: ignore[arg-type]
        jobs.append(made.job)
        return made

    try:
        limit = lease(slots=1, time_limit=LIMIT_SECONDS, signal_before_end=LIMIT_BEFORE)
        limit_step, limit_waiting = new_id(), new_id()
        limit.offer({limit_step: limit.order(limit_step, "ignore", 300)})
        raw = {
            "signals": _sbatch(
                lane, transport, cpu.slurm_bin, "signals", _raw_signals(lane.log_root)
            ),
            "gres": _sbatch(lane, transport, cpu.slurm_bin, "gres", _raw_gres(lane.log_root)),
        }
        jobs.extend(raw.values())
        made = Leases(
            lane=lane,
            transport=transport,
            cpu=cpu,
            gpu=gpu,
            limit=limit,
            limit_step=limit_step,
            queued=lease(slots=1, hold=True),
            slots=lease(slots=2),
            stop=lease(slots=1, signal_before_end=GRACE),
            race=lease(slots=2),
            cancelled=lease(slots=1),
            raw=raw,
            jobs=jobs,
            after_limit=watcher.submit(_after_the_limit, limit, limit_step, limit_waiting),
        )
        yield made
    finally:
        watcher.shutdown(wait=False, cancel_futures=True)
        if jobs:
            transport.run([f"{cpu.slurm_bin}/scancel", *map(str, jobs)])


def _report(what: str, **numbers: object) -> None:
    print(f"\n[lease] {what}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


@attrs.frozen
class AfterLimit:
    """What the short lease showed around its pre-limit signal, watched from the fixture's start
    (so the case does not depend on when it runs): the markers when the signal came, and an
    order offered right after it, two polls later."""

    start: Entry
    limit: Entry
    step: dict[str, Entry]
    waiting: str
    late: str
    listing: dict[str, Entry]
    state: str


def _after_the_limit(lease: Lease, step: str, waiting: str) -> AfterLimit:
    start = wait_until("the start", lambda: lease.markers(lease.id).get("start"), seconds=60)
    wait_until("the running step", lambda: lease.step_start(step), seconds=30)
    lease.offer({waiting: lease.order(waiting, "ignore", 0)})  # taken, waiting for the slot
    limit = wait_until("the limit", lambda: lease.markers(lease.id).get("limit"), seconds=90)
    marks = lease.markers(step)
    late = new_id()
    lease.offer({late: lease.order(late, "ignore", 0)})
    time.sleep(2 * POLL + 1)
    listing = lease.listing()
    return AfterLimit(start, limit, marks, waiting, late, listing, lease.state())


def test_the_pre_limit_signal_reaches_the_running_step_and_no_order_is_taken_after(
    leases: Leases,
) -> None:
    lease, step = leases.limit, leases.limit_step
    seen = leases.after_limit.result(timeout=180)
    assert "step-start" in seen.step and "limit" in seen.step, seen.step
    assert seen.step["limit"].mtime >= seen.limit.mtime
    got = said(lease.step_log(step), "usr1")
    assert len(got) == 1, lease.step_log(step)
    _report(
        "pre-limit signal",
        after_start_s=round(seen.limit.mtime - seen.start.mtime, 1),
        early_by_s=round(seen.start.mtime + LIMIT_SECONDS - LIMIT_BEFORE - seen.limit.mtime, 1),
        step_usr1_after_limit_s=round(got[0] - seen.limit.mtime, 2),
    )
    # A taken step still waiting for the slot is marked and relayed the signal; it ends
    # unstarted (checked once the lease ended: srun does not always act on it at once).
    claim, waited = (
        lease.claim(seen.waiting, seen.listing),
        lease.markers(seen.waiting, seen.listing),
    )
    assert claim is not None and claim.size > 0, "the waiting order was not taken"
    assert "limit" in waited and "step-start" not in waited, waited
    # An order offered after the signal is never taken: no claim after two polls.
    assert seen.state == "RUNNING", "the short lease ended before two polls passed"
    assert seen.late in seen.listing, "the untaken order was removed"
    assert lease.claim(seen.late, seen.listing) is None
    assert lease.markers(seen.late, seen.listing) == {}


def test_an_order_offered_while_queued_starts_with_the_lease_then_each_within_a_poll(
    leases: Leases,
) -> None:
    lease = leases.queued
    assert lease.state() == "PENDING"
    first = new_id()
    lease.offer({first: lease.order(first)})
    time.sleep(1)
    assert lease.claim(first) is None and lease.step_start(first) is None
    lease.release()
    start = wait_until(
        "the lease's start", lambda: lease.markers(lease.id).get("start"), seconds=30
    )
    began = wait_until("the first step-start", lambda: lease.step_start(first), seconds=POLL + SRUN)
    with_lease = began.mtime - start.mtime
    assert 0 <= with_lease < SRUN, with_lease
    wait_until("the first step's end", lambda: lease.ended(first), seconds=10)
    latencies = []
    for _ in range(5):
        step = new_id()
        offered = lease.offer({step: lease.order(step)})
        began = wait_until(
            "a step-start", lambda step=step: lease.step_start(step), seconds=POLL + SRUN + 2
        )
        latencies.append(round(began.mtime - offered, 2))
        assert lease.ended(step) or wait_until(
            "its end", lambda step=step: lease.ended(step), seconds=10
        )
        time.sleep(random.uniform(0, POLL))
    _report(
        "queued then running", with_lease_start_s=round(with_lease, 2), offer_to_start_s=latencies
    )
    assert all(0 < latency < POLL + SRUN for latency in latencies), latencies


def test_a_third_step_waits_in_two_slots_until_one_frees(leases: Leases) -> None:
    lease = leases.slots
    assert "--gres=none" in lease.script  # a lease without GPUs runs --gres=none steps
    a, b, c = new_id(), new_id(), new_id()
    lease.offer({a: lease.order(a, seconds=8), b: lease.order(b, seconds=12)})
    for step in (a, b):
        wait_until("both long steps", lambda step=step: lease.step_start(step), seconds=30)
    lease.offer({c: lease.order(c)})
    claim = wait_until("the third order's claim", lambda: lease.claim(c), seconds=POLL + 4)
    assert claim is not None and claim.size > 0, "the third order was not taken"
    seen_waiting = 0
    while True:
        started = lease.step_start(c)  # read before a's log, so a start seen first is a fault
        if said(lease.step_log(a), "done"):
            break
        assert started is None, "the third step started with both slots busy"
        seen_waiting += 1
        time.sleep(1)
    began = wait_until("the third step-start", lambda: lease.step_start(c), seconds=30)
    freed = said(lease.step_log(a), "done")[0]
    assert began.mtime > freed
    wait_until("the third step's end", lambda: lease.ended(c), seconds=30)
    for step in (a, b, c):
        wait_until("every end", lambda step=step: lease.ended(step) == "end.0.0", seconds=30)
        assert "gpus_on_node=unset" in (lease.step_log(step) or "")
    _report(
        "2 slots, 3 steps",
        seen_waiting_polls=seen_waiting,
        woken_after_slot_freed_s=round(began.mtime - freed, 2),
    )


def test_a_stop_request_stops_a_waiting_step_unstarted_and_a_running_one_usr1_then_term(
    leases: Leases,
) -> None:
    lease = leases.stop
    running, waiting = new_id(), new_id()
    lease.offer({running: lease.order(running, "ignore", 120)})
    wait_until("the running step", lambda: lease.step_start(running), seconds=30)
    lease.offer({waiting: lease.order(waiting, "ignore", 0)})
    wait_until("the waiting step's claim", lambda: lease.claim(waiting), seconds=POLL + 4)
    assert lease.claim(waiting).size > 0  # type: ignore[union-attr]
    time.sleep(1)
    asked = lease.stop(waiting)
    end = wait_until("the waiting step's end", lambda: lease.ended(waiting), seconds=POLL + 5)
    marks = lease.markers(waiting)
    assert end == "end.0.1" and "step-start" not in marks and "stop" in marks, marks
    assert "began" not in (lease.step_log(waiting) or ""), lease.step_log(waiting)
    cancelled = marks[end].mtime - asked
    asked = lease.stop(running)
    end = wait_until(
        "the running step's end", lambda: lease.ended(running), seconds=POLL + GRACE + 10
    )
    marks = lease.markers(running)
    log = lease.step_log(running)
    (usr1,) = said(log, "usr1")
    assert "stop" in marks and said(log, "term") == [], log
    assert end == "end.0.137", end  # srun turned the SIGTERM into SIGKILL
    signalled, ended = usr1 - asked, marks[end].mtime - usr1
    # The timer starts as the watcher sends SIGUSR1, a moment before the step's trap notes it.
    assert signalled < POLL + 2 and GRACE - 0.5 <= ended < GRACE + 5, (signalled, ended)
    _report(
        "stop requests",
        waiting_cancelled_after_request_s=round(cancelled, 2),
        running_usr1_after_request_s=round(signalled, 2),
        end_after_usr1_s=round(ended, 2),
        srun_returned_after_term_s=round(ended - GRACE, 2),
        end=end,
    )


def test_the_claim_decides_every_order_once_under_contention(leases: Leases) -> None:
    lease = leases.race
    verdicts: dict[str, Verdict] = {}
    lock = threading.Lock()

    def withdraw_later(step: str, delay: float) -> None:
        time.sleep(delay)
        (verdict,) = lease.withdraw([step]).values()
        with lock:
            verdicts[step] = verdict

    steps: list[str] = []
    threads = []
    for _ in range(RACE_BATCHES):
        batch = [new_id() for _ in range(RACE_ORDERS)]
        lease.offer({step: lease.order(step) for step in batch})
        steps += batch
        for step in batch:
            thread = threading.Thread(target=withdraw_later, args=(step, random.uniform(0, 6)))
            thread.start()
            threads.append(thread)
        time.sleep(random.uniform(0.5, 1.5))
    for thread in threads:
        thread.join(timeout=60)
    taken = [s for s in steps if verdicts.get(s) is Verdict.TAKEN]
    withdrawn = [s for s in steps if verdicts.get(s) is Verdict.WITHDRAWN]
    assert len(taken) + len(withdrawn) == len(steps), verdicts
    for step in taken:
        wait_until("every taken step's end", lambda step=step: lease.ended(step), seconds=60)
    time.sleep(POLL + 1)  # the lease removes withdrawn orders at its next poll
    listing = lease.listing()
    for step in taken:
        claim, marks, log = (
            lease.claim(step, listing),
            lease.markers(step, listing),
            lease.step_log(step),
        )
        assert claim is not None and claim.size > 0, step
        assert "step-start" in marks and marks.get("end.0.0") is not None, marks
        assert len(said(log, "began")) == 1, log
    for step in withdrawn:
        claim, marks = lease.claim(step, listing), lease.markers(step, listing)
        assert claim is not None and claim.size == 0, step
        assert marks == {} and lease.step_log(step) is None, marks
    assert not set(steps) & set(listing), "an order was neither taken nor removed"
    assert taken and withdrawn, (len(taken), len(withdrawn))
    _report("contention", rounds=len(steps), ran=len(taken), withdrawn=len(withdrawn))


def test_two_gpu_steps_run_at_once_in_a_two_slot_lease_each_with_one_gpu(leases: Leases) -> None:
    gres = Path(leases.lane.log_root) / "raw-gres" / "job.out"
    seen = wait_until(
        "the raw GRES job",
        lambda: gres.exists() and gres.read_text().count("\n") >= 3 and gres.read_text(),
        seconds=60,
    )
    # A step without --gres took both GPUs; the next one may wait for them ("srun: Step created").
    shown = [line for line in seen.splitlines() if not line.startswith("srun: ")]
    assert shown == ["none unset", "omitted 2", "one 1"], seen
    lease = submit(leases.transport, leases.gpu, slots=2, gpus=1)
    leases.jobs.append(lease.job)
    assert "#SBATCH --gres=gpu:a100:2" in lease.script and "--gres=gpu:a100:1" in lease.script
    one, two = new_id(), new_id()
    lease.offer({one: lease.order(one, seconds=6), two: lease.order(two, seconds=6)})
    for step in (one, two):
        wait_until(
            "both GPU steps' ends", lambda step=step: lease.ended(step) == "end.0.0", seconds=60
        )
    logs = [lease.step_log(step) or "" for step in (one, two)]
    began = [said(log, "began")[0] for log in logs]
    done = [said(log, "done")[0] for log in logs]
    assert began[0] < done[1] and began[1] < done[0], "the GPU steps did not overlap"
    for log in logs:
        assert "gpus_on_node=1 " in log, log
    lease.cancel()
    _report(
        "GPU steps",
        overlap_s=round(min(done) - max(began), 2),
        steps=[log.split("\n")[0] for log in logs],
    )


def test_a_waiting_srun_ends_unstarted_on_each_signal(leases: Leases) -> None:
    d = Path(leases.lane.log_root) / "raw-signals"
    codes = wait_until(
        "the raw job's exit codes",
        lambda: (
            (d / "codes").exists()
            and (d / "codes").read_text().count("\n") == 4
            and (d / "codes").read_text()
        ),
        seconds=60,
    )
    assert codes.split("\n")[:4] == [f"{s} 1" for s in WAITING_SIGNALS], codes
    numbers = {"USR1": 10, "USR2": 12, "TERM": 15, "HUP": 1}
    for name in WAITING_SIGNALS:
        out = (d / f"{name}.out").read_text()
        assert f"Cancelled pending job step with signal {numbers[name]}" in out, out
        assert not (d / f"ran.{name}").exists(), name


def test_the_short_lease_ends_at_its_limit_with_the_late_order_untaken(leases: Leases) -> None:
    lease, step = leases.limit, leases.limit_step
    seen = leases.after_limit.result(timeout=180)
    late = seen.late
    wait_until(
        "the short lease's end", lambda: lease.state() not in ("RUNNING", "PENDING"), seconds=120
    )
    listing = lease.listing()
    assert "stop" in lease.markers(lease.id, listing)
    marks = lease.markers(step, listing)
    end = lease.ended(step, listing)
    assert "stop" in marks and end is not None, marks
    assert late in listing and lease.claim(late, listing) is None
    assert lease.markers(late, listing) == {}
    # The waiting srun got SIGUSR1 at the limit and ended without starting (conflict 1). Early
    # in its wait srun acts on a signal at once; later, only at its next retry.
    waited = lease.markers(seen.waiting, listing)
    assert {"limit", "end.0.1"} <= set(waited) and "step-start" not in waited, waited
    log = lease.step_log(seen.waiting) or ""
    assert "began" not in log, log
    _report(
        "short lease ended",
        state=lease.state(),
        step_end=end,
        waiting_ended_after_limit_s=round(waited["end.0.1"].mtime - seen.limit.mtime, 2),
        waiting_srun=[line for line in log.splitlines() if line.startswith("srun")],
    )


def test_a_step_whose_start_marker_cannot_be_made_exits_1_before_running(leases: Leases) -> None:
    lease = leases.race
    step = new_id()
    taken = f"{lease.log_root}/servatus-{step}.{lease.job}.step-start"
    leases.lane.cluster.make_dirs(taken)  # the marker's name is taken (by a directory)
    lease.offer({step: lease.order(step)})
    end = wait_until("the step's end", lambda: lease.ended(step), seconds=POLL + SRUN + 5)
    log = lease.step_log(step) or ""
    assert end == "end.0.1" and "step-start" not in lease.markers(step), lease.markers(step)
    assert "cannot create" in log and "began" not in log, log


def test_scancel_of_a_lease_stops_its_running_and_its_waiting_step(leases: Leases) -> None:
    lease = leases.cancelled
    running, waiting = new_id(), new_id()
    lease.offer({running: lease.order(running, "ignore", 120)})
    wait_until("the running step", lambda: lease.step_start(running), seconds=30)
    lease.offer({waiting: lease.order(waiting, "ignore", 0)})
    wait_until("the waiting step's claim", lambda: lease.claim(waiting), seconds=POLL + 4)
    time.sleep(1)
    lease.cancel()
    for step in (running, waiting):
        wait_until("both ends", lambda step=step: lease.ended(step), seconds=30)
    listing = lease.listing()
    assert "stop" in lease.markers(lease.id, listing)
    ran, waited = lease.markers(running, listing), lease.markers(waiting, listing)
    # Slurm's SIGTERM reaches the running task itself (not through srun), and the waiting srun,
    # which gives up unstarted; the batch shell's trap marks both stopped first.
    assert {"step-start", "stop", "end.0.143"} <= set(ran), ran
    assert set(waited) == {"stop", "end.0.1"}, waited
    assert waited["stop"].mtime <= waited["end.0.1"].mtime
    assert "began" not in (lease.step_log(waiting) or "")
