"""FakeScheduler's chains: afterany dependencies, the handoffs a link's watchers write and the
next link claims, the batch shell's early stop, and a link removing the rest of its chain
(docs/development/adr/0005-chains.md)."""

from __future__ import annotations

import pytest
from chainkit import SBATCH, link_id, link_script, sbatch, submit_chain

from servatus.testing import DEPENDENCY_PROBLEM, FakeJob, FakeScheduler


def job_of(fake: FakeScheduler, job: int) -> FakeJob:
    return next(item for item in fake.jobs if item.job == job)


def names(fake: FakeScheduler, job: int) -> list[str]:
    """The marker kinds a job wrote, in the order written (``end.0.75``, ``handoff.0``)."""
    found = job_of(fake, job)
    stem = f"servatus-{found.allocation_id}.{job}."
    return [name[len(stem) :] for name in fake.markers if name.startswith(stem)]


def states(fake: FakeScheduler, jobs: list[int]) -> list[str]:
    return [job_of(fake, job).state for job in jobs]


def test_a_dependent_waits_until_its_link_completes() -> None:
    fake = FakeScheduler()
    first, second, third = submit_chain(fake, 1, 3)
    fake.start()
    assert states(fake, [first, second, third]) == ["RUNNING", "PENDING", "PENDING"]
    with pytest.raises(ValueError, match=f"waits for afterok:{first}"):
        fake.start(second)
    fake.finish(first, 75)
    assert names(fake, first) == ["start", "end.0.75", "handoff.0"]
    assert states(fake, [first, second]) == ["COMPLETED", "PENDING"]
    fake.start()
    assert states(fake, [second, third]) == ["RUNNING", "PENDING"]
    assert job_of(fake, second).allocated and not job_of(fake, third).allocated


def test_a_link_that_hands_nothing_on_fails_and_slurm_removes_the_rest() -> None:
    fake = FakeScheduler()
    jobs = submit_chain(fake, 1, 4)
    fake.finish(jobs[0], 0)
    assert names(fake, jobs[0]) == ["start", "end.0.0"]
    assert states(fake, jobs) == ["FAILED", "CANCELLED", "CANCELLED", "CANCELLED"]
    assert [job_of(fake, job).allocated for job in jobs] == [True, False, False, False]
    assert all(names(fake, job) == [] for job in jobs[1:])


@pytest.mark.parametrize(
    ("signal", "code", "hands_on"),
    [
        (False, 75, True),  # yields at any time
        (True, 138, True),  # dies of SIGUSR1
        (True, 3, True),  # any nonzero after the signal
        (False, 3, False),  # nonzero before the signal
        (True, 0, False),  # succeeded
    ],
)
def test_each_exit_of_a_middle_link(signal: bool, code: int, hands_on: bool) -> None:
    fake = FakeScheduler()
    first, second = submit_chain(fake, 1, 2)
    fake.start(first)
    if signal:
        fake.signal_limit(first)
    fake.finish(first, code)
    assert ("handoff.0" in names(fake, first)) is hands_on
    assert states(fake, [first, second]) == (
        ["COMPLETED", "PENDING"] if hands_on else ["FAILED", "CANCELLED"]
    )


def test_the_shells_own_stop_after_the_signal_continues_the_chain() -> None:
    fake = FakeScheduler()
    first, second = submit_chain(fake, 1, 2)
    fake.start(first)
    fake.signal_limit(first)
    fake.time_out(first)
    # the shell's stop: marked as Slurm's would be, then the step's 143 and its handoff
    assert names(fake, first) == ["start", "limit", "stop", "end.0.143", "handoff.0"]
    assert states(fake, [first, second]) == ["COMPLETED", "PENDING"]


def test_slurms_time_limit_without_the_signal_ends_the_chain() -> None:
    fake = FakeScheduler()
    first, second, third = submit_chain(fake, 1, 3)
    fake.start(first)
    fake.time_out(first)
    assert names(fake, first) == ["start", "stop", "end.0.143"]
    assert states(fake, [first, second, third]) == ["TIMEOUT", "CANCELLED", "CANCELLED"]


def test_the_last_link_hands_nothing_on_and_completes() -> None:
    fake = FakeScheduler()
    first, second = submit_chain(fake, 1, 2)
    fake.finish(first, 75)
    fake.start(second)
    fake.signal_limit(second)
    fake.finish(second, 75)
    assert names(fake, second) == ["start", "limit", "end.0.75"]
    assert job_of(fake, second).state == "COMPLETED"


def test_a_packed_link_runs_only_the_slots_handed_to_it() -> None:
    fake = FakeScheduler()
    first, second, third = submit_chain(fake, 1, 3, slots=2, task_links=[3, 2])
    fake.finish(first, 0, 75)  # slot 0 succeeded, slot 1 yielded
    fake.start(second)
    fake.finish(second, 75, 75)  # slot 0 was not handed on: no step runs there
    assert names(fake, second) == ["start", "end.1.75"]  # link 2 is slot 1's last: no handoff
    assert states(fake, [second, third]) == ["FAILED", "CANCELLED"]


def test_a_link_handed_nothing_starts_runs_nothing_and_fails() -> None:
    fake = FakeScheduler()
    first, second, third = submit_chain(fake, 1, 3)
    fake.finish(first, 75)
    del fake.markers[f"servatus-{link_id(1, 1)}.{first}.handoff.0"]  # a lost handoff
    fake.start(second)
    assert names(fake, second) == ["start"]
    assert states(fake, [second, third]) == ["FAILED", "CANCELLED"]


def test_a_raw_scancel_of_a_pending_link_costs_one_empty_allocation() -> None:
    """A pending link's script never runs, so it removes nothing; afterany releases the next
    link, which finds no handoff of the cancelled one, runs nothing and removes the rest."""
    fake = FakeScheduler()
    jobs = submit_chain(fake, 1, 4)
    fake.start(jobs[0])
    fake.run(["/usr/bin/scancel", "--me", f"--name=servatus-{link_id(1, 2)}"])
    assert states(fake, jobs) == ["RUNNING", "CANCELLED", "PENDING", "PENDING"]
    fake.start()
    assert states(fake, jobs) == ["RUNNING", "CANCELLED", "FAILED", "CANCELLED"]
    assert [job_of(fake, job).allocated for job in jobs] == [True, False, True, False]


def test_a_raw_scancel_after_the_signal_hands_on_and_the_chain_continues() -> None:
    fake = FakeScheduler()
    first, second, third = submit_chain(fake, 1, 3)
    fake.start(first)
    fake.signal_limit(first)
    fake.run(["/usr/bin/scancel", f"--name=servatus-{link_id(1, 1)}"])
    assert names(fake, first) == ["start", "limit", "stop", "end.0.143", "handoff.0"]
    assert states(fake, [first, second, third]) == ["CANCELLED", "PENDING", "PENDING"]
    fake.start(second)
    assert fake.claims[f"servatus-{link_id(1, 1)}.{first}.taken.0"][1] == f"{second}\n".encode()
    assert job_of(fake, second).skipped == frozenset()
    fake.finish(second, 0)
    assert states(fake, [second, third]) == ["FAILED", "CANCELLED"]
    assert not job_of(fake, third).allocated


def test_a_raw_scancel_before_the_signal_removes_the_rest_unallocated() -> None:
    fake = FakeScheduler()
    jobs = submit_chain(fake, 1, 3)
    fake.start(jobs[0])
    fake.run(["/usr/bin/scancel", f"--name=servatus-{link_id(1, 1)}"])
    assert names(fake, jobs[0]) == ["start", "stop", "end.0.143"]
    assert states(fake, jobs) == ["CANCELLED", "CANCELLED", "CANCELLED"]
    assert [job_of(fake, job).allocated for job in jobs] == [True, False, False]


def test_a_link_whose_shell_was_killed_leaves_the_removal_to_the_next() -> None:
    fake = FakeScheduler()
    jobs = submit_chain(fake, 1, 3)
    fake.start(jobs[0])
    fake.vanish(jobs[0])  # no marker, no removal: the node failed
    fake.start()
    assert names(fake, jobs[1]) == ["start"]
    assert states(fake, jobs[1:]) == ["FAILED", "CANCELLED"]
    assert not job_of(fake, jobs[2]).allocated


def test_a_handoff_is_claimed_once() -> None:
    """A second job of the next link (a late sbatch of it) finds the handoff taken and runs
    nothing; so does one whose handoff reconcile withheld first (an empty claim)."""
    fake = FakeScheduler()
    first, second = submit_chain(fake, 1, 2)
    fake.finish(first, 75)
    script = link_script(link_id(1, 2), 1, position=2, of=2, after=link_id(1, 1), task_links=[2])
    late = sbatch(fake, script, first)
    fake.start(second)
    fake.start(late)
    assert states(fake, [second, late]) == ["RUNNING", "COMPLETED"]
    assert names(fake, late) == ["start"]
    claim = ["/bin/sh", "-c", "", "claim", "/logs", link_id(1, 1), str(first), "n", "0"]
    assert fake.run(claim).stdout.decode() == f"taken 0 {second}\n"
    other, withheld = submit_chain(fake, 2, 2)
    fake.finish(other, 75)
    claim[5:7] = [link_id(2, 1), str(other)]
    assert fake.run(claim).stdout.decode() == "withdrawn 0\n"
    fake.start(withheld)
    assert names(fake, withheld) == ["start"]
    assert job_of(fake, withheld).state == "COMPLETED"


def test_afterok_on_a_job_slurm_does_not_know_is_refused() -> None:
    fake = FakeScheduler()
    (first,) = submit_chain(fake, 1, 1)
    script = link_script(link_id(2, 2), 1, position=2, of=2, after=link_id(2, 1), task_links=[2])
    for after in (99999, first):
        if after == first:
            fake.finish(first, 0)
            fake.purge()  # forgotten
        argv = [*SBATCH, f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
        result = fake.run(argv, stdin=script.encode())
        assert (result.returncode, result.stderr.decode()) == (1, DEPENDENCY_PROBLEM)
        assert "Job dependency problem" in DEPENDENCY_PROBLEM
    assert len(fake.jobs) == 1


def test_afterok_on_a_job_that_already_ended_but_is_still_listed() -> None:
    fake = FakeScheduler()
    done, failed = sbatch(fake, link_script("a" * 24, 1)), sbatch(fake, link_script("b" * 24, 1))
    fake.finish(done, 0)
    fake.finish(failed, 3)
    job_of(fake, failed).state = "FAILED"
    eligible = sbatch(fake, link_script("c" * 24, 1), after=done, afterok=True)
    removed = sbatch(fake, link_script("d" * 24, 1), after=failed, afterok=True)
    assert states(fake, [eligible, removed]) == ["PENDING", "CANCELLED"]
    fake.start()
    assert states(fake, [eligible, removed]) == ["RUNNING", "CANCELLED"]


def test_without_kill_on_invalid_dep_a_dead_dependent_pends_for_ever() -> None:
    fake = FakeScheduler()
    (first,) = submit_chain(fake, 1, 1)
    argv = [*SBATCH, f"--dependency=afterok:{first}"]
    second = int(fake.run(argv, stdin=link_script("e" * 24, 1).encode()).stdout)
    fake.time_out(first)
    fake.start()
    assert states(fake, [first, second]) == ["TIMEOUT", "PENDING"]


def test_a_plain_job_is_not_a_link() -> None:
    fake = FakeScheduler()
    job = sbatch(fake, link_script("f" * 24, 2))
    fake.start(job)
    fake.signal_limit(job)
    fake.finish(job, 75, 138)
    assert names(fake, job) == ["start", "limit", "end.0.75", "end.1.138"]
    assert job_of(fake, job).state == "COMPLETED"
