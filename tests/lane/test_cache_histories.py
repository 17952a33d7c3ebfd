"""The status cache (ADR 0010) over random campaign histories against FakeScheduler: whatever
was submitted, retried, chained, cancelled, reconciled, ended, forgotten by Slurm or purged from
scratch, and whenever a status wrote a cache, ``status`` in every mode and form (and with the
marker listing failing) and ``plan`` for every kind of request print what they print from the
whole journal, before and after the statuses that rewrite the caches, and a plan saved from the
cache is one ``submit`` takes. The fixed cases in ``test_status_cache`` and ``test_plan_cache``
name each path; this one looks for the history they did not think of.

Mutants this kills (each checked by hand): the live work left out of a cached plan, the cached
counts left out of a status, a cache holding Tasks of an unsettled component. Those it cannot
kill are masked by a later guard by design: a cached plan that selects a Task whose content the
cache did not keep falls back to the whole journal, so the early "retry of a cached Task" check
and the choice of which content to keep only save work."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_plan_cache import BUDGETED, cacheless, config, named, normal, whole
from test_status_cache import MODES, cache_files, loads, uncached

from servatus.errors import Unavailable
from servatus.journal import store
from servatus.testing import FakeJob, FakeScheduler
from testkit import run

__all__ = ["loads"]  # the fixture

pytestmark = pytest.mark.slow

KEYS = [f"t{i}" for i in range(8)]
ENDED = ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"]

REQUESTS = [
    [],
    ["--retry-failed"],
    ["--retry-failed", "--tasks-per-allocation", "1"],
    ["--retry-failed", "--max-links", "2"],
    ["--retry-failed", "--budget", "00:12:00"],
    ["--retry-failed", "--only", "t1", "--only", "t4"],
    ["--retry", "t0"],
    ["--retry", "t3", "--retry", "t5"],
]
"""What a history submits, and what its last step plans; ``--budget`` with the profile that
has a ``signal_before_end`` (the other refuses it, the same from the cache)."""

submit = st.tuples(st.just("submit"), st.integers(0, len(REQUESTS) - 1), st.booleans())
start = st.tuples(st.just("start"), st.integers(0, 30))
finish = st.tuples(
    st.just("finish"), st.integers(0, 30), st.lists(st.sampled_from([0, 0, 1, 143]), max_size=2)
)
forget = st.just(("forget",))
ended = st.tuples(  # a job ends and Slurm forgets it at once: it can settle
    st.just("ended"), st.integers(0, 30), st.lists(st.sampled_from([0, 1, 143]), max_size=2)
)
step = st.one_of(
    submit,
    submit,
    start,
    start,
    finish,
    finish,
    finish,
    forget,
    ended,
    ended,
    ended,
    st.tuples(st.just("end_step"), st.integers(0, 30), st.integers(0, 1), st.sampled_from([0, 2])),
    st.tuples(st.just("signal_limit"), st.integers(0, 30)),
    st.tuples(st.just("time_out"), st.integers(0, 30)),
    st.tuples(st.just("vanish"), st.integers(0, 30), st.sampled_from([None, *ENDED[1:]])),
    st.tuples(st.just("scratch_purge"), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.sampled_from([5.0, 600.0, 7200.0])),
    st.tuples(st.just("status"), st.integers(0, len(MODES) - 1)),
    st.tuples(st.just("cancel"), st.sampled_from(KEYS)),
    st.tuples(st.just("lose_answer"), st.integers(0, len(REQUESTS) - 1)),
    st.just(("reconcile",)),
    st.just(("append",)),
)


class History:
    """One campaign, its FakeScheduler on a clock the history moves, and what was counted."""

    def __init__(
        self,
        root: Path,
        capsys: pytest.CaptureFixture[str],
        loads: list[int],
        counts: Counter[str],
    ) -> None:
        self.now = 1_800_000_000.0
        self.fake = FakeScheduler(clock=lambda: self.now)
        self.root = root
        self.state = root / "state"
        self.capsys = capsys
        self.loads = loads
        self.counts = counts
        self.configs = {False: config(root), True: config(root, BUDGETED, "budgeted.toml")}
        self.keys = 4
        tasks = root / "tasks.jsonl"
        tasks.write_text("".join(_task(key) for key in KEYS[: self.keys]))
        assert self.cli(["ensure", str(self.state), str(tasks)])[0] == 0
        self.saved = 0

    def cli(self, args: list[str]) -> tuple[int, str, str]:
        return run(args, self.fake, self.capsys)

    def job(self, index: int, states: set[str]) -> FakeJob | None:
        """The listed job ``index`` picks among those in one of ``states``, if any is, less
        those waiting on a dependency (Slurm would not start them)."""
        jobs = [j for j in self.fake.jobs if j.state in states and j.listed and not j.waiting]
        return jobs[index % len(jobs)] if jobs else None

    def submit(self, request: int, budgeted: bool, *, lose: bool = False) -> None:
        """Plan ``REQUESTS[request]`` and submit the saved plan: a plan made (from a cache or
        not) is one ``submit`` takes. With ``lose``, the answer of its first ``sbatch`` is lost
        (exit 3, the submission left for ``reconcile``)."""
        self.saved += 1
        saved = self.root / f"plan-{self.saved}.json"
        args = [*self.configs[budgeted], *REQUESTS[request], "--output", str(saved)]
        code, _out, err = self.cli(["plan", str(self.state), *args])
        if code != 0:
            assert code == 1 and err.startswith("servatus: ") and err.count("\n") == 1, err
            return
        if lose:
            if not json.loads(saved.read_bytes())["decision"]["selected"]:
                return  # no sbatch would take the lost answer
            self.fake.lose_answer("sbatch")
        code, out, err = self.cli(["submit", str(self.state), str(saved)])
        assert (code, err == "") == ((3, False) if lose else (0, True)), (out, err)
        self.counts["submitted"] += 1

    def take(self, action: tuple[object, ...]) -> None:
        fake, state, running = self.fake, str(self.state), {"PENDING", "RUNNING"}
        match action:
            case ("submit", int(request), bool(budgeted)):
                self.submit(request, budgeted)
            case ("lose_answer", int(request)):
                self.submit(request, False, lose=True)
            case ("start", int(index)):
                if (job := self.job(index, {"PENDING"})) is not None:
                    fake.start(job.job)
            case ("signal_limit" | "time_out" as name, int(index)):
                if (job := self.job(index, {"RUNNING"})) is not None:
                    getattr(fake, name)(job.job)
            case ("finish", int(index), list(codes)):
                if (job := self.job(index, running)) is not None:
                    fake.finish(job.job, *([*codes, 0, 0][: job.slots] if codes else []))
            case ("ended", int(index), list(codes)):
                self.take(("finish", index, codes))
                fake.purge()
            case ("end_step", int(index), int(slot), int(code)):
                job = self.job(index, {"RUNNING"})
                if job is not None and slot < job.slots and not job.link and job.lease is None:
                    ended = f"{job.name}.{job.job}.end.{slot}."
                    if not any(name.startswith(ended) for name in fake.markers):
                        fake.end_step(job.job, slot, code)
            case ("vanish", int(index), ended):
                if (job := self.job(index, running)) is not None:
                    fake.vanish(job.job, state=ended if isinstance(ended, str) else None)
            case ("scratch_purge", int(index)):
                if (job := self.job(index, {*ENDED, *running, "NODE_FAIL"})) is not None:
                    for name in [name for name in fake.markers if f".{job.job}." in name]:
                        del fake.markers[name]
            case ("wait", float(seconds)):
                self.now += seconds
            case ("status", int(mode)):
                code, _out, err = self.cli(["status", state, *MODES[mode]])
                assert code == 0, err
            case ("cancel", str(key)):
                self.refused_in_one_line(self.cli(["cancel", state, "--task", key]))
            case ("reconcile",):
                self.refused_in_one_line(self.cli(["reconcile", state]))
            case ("forget",):
                fake.purge()
            case ("append",) if self.keys < len(KEYS):
                self.keys += 1
                tasks = self.root / f"more-{self.keys}.jsonl"
                tasks.write_text(_task(KEYS[self.keys - 1]))
                code, _out, err = self.cli(["append", state, str(tasks)])
                assert code == 0, err
            case ("append",):
                pass
            case _:
                raise AssertionError(f"no such step {action!r}")

    @staticmethod
    def refused_in_one_line(shown: tuple[int, str, str]) -> None:
        code, _out, err = shown
        assert code == 0 or (err.startswith("servatus: ") and err.count("\n") == 1), shown

    def check(self) -> None:
        """Every request against the whole journal's answer, from the caches the history left
        (their remainder holding what came after them), then every status mode, then every
        request again from the caches those statuses wrote."""
        self.plans()
        for args in MODES[:2]:
            self.unlisted(args)
        for args in MODES:
            reference = uncached(self.state, self.fake, self.capsys, args)
            assert self.cli(["status", str(self.state), *args]) == reference, args
            self.loads.clear()
            assert self.cli(["status", str(self.state), *args]) == reference, args
            self.counts[f"status {args} {'from a cache' if self.loads == [] else 'whole'}"] += 1
        self.plans()
        self.counts["cached Tasks"] += max(
            (_cached_tasks(path) for path in cache_files(self.state)), default=0
        )

    def unlisted(self, args: list[str]) -> None:
        """``status ARGS`` with the marker listing failing answers as the whole journal does
        with it failing: a cache is what a status that read every listing saw."""
        copy = cacheless(self.state, "unlisted")
        listed = self.fake.count("find")
        self.fake.unavailable("find")
        reference = named(self.cli(["status", str(copy), *args]), copy, self.state)
        if self.fake.count("find") == listed:
            with pytest.raises(Unavailable):  # no listing was read: disarm the fault
                self.fake.run(["find", "-false"])
            return
        self.fake.unavailable("find")
        assert self.cli(["status", str(self.state), *args]) == reference, args
        self.counts["unlisted status"] += 1

    def plans(self) -> None:
        for request in REQUESTS:
            for budgeted in (False, True):
                asked = [*self.configs[budgeted], *request]
                reference = whole(self.state, self.fake, self.capsys, asked)
                self.loads.clear()
                shown = normal(self.cli(["plan", str(self.state), *asked]))
                assert shown == reference, asked
                self.counts["plan from a cache" if self.loads == [] else "plan whole"] += 1
                self.counts["plan refused" if shown[0] else "plan made"] += 1


def _task(key: str) -> str:
    return f'{{"key": "{key}", "args": ["/usr/bin/python3", "train.py", "{key}"]}}\n'


def _cached_tasks(path: Path) -> int:
    header: dict[str, int] = json.loads(path.read_bytes().split(b"\n")[1])
    return header["cached_tasks"]


def test_random_histories_answer_from_the_cache_as_from_the_whole_journal(
    capsys: pytest.CaptureFixture[str], loads: list[int], tmp_path: Path
) -> None:
    counts: Counter[str] = Counter()

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(step, min_size=4, max_size=24))
    @example([("ended", 0, [0, 1]), ("ended", 0, [0, 0]), ("status", 0)])  # works shared
    @example([("ended", 0, [1]), ("status", 0), ("status", 0), ("append",), ("lose_answer", 0)])
    @example([("append",), ("finish", 0, []), ("lose_answer", 3), ("reconcile",)])  # cut short
    def history(steps: list[tuple[object, ...]]) -> None:
        root = Path(tempfile.mkdtemp(dir=tmp_path))
        campaign = History(root, capsys, loads, counts)
        for action in [("submit", 0, False), *steps]:
            campaign.take(action)
        journal = (campaign.state / store.JOURNAL).read_bytes()
        campaign.check()
        assert (campaign.state / store.JOURNAL).read_bytes().startswith(journal)

    history()
    assert counts["plan from a cache"] > 0 and counts["status [] from a cache"] > 0, counts
    assert counts["plan made"] > 0 and counts["cached Tasks"] > 0, counts
    print(dict(counts))  # what the histories covered, with -s
