"""``python benchmarks/soak COMMAND``: ``faults`` prints a seeded fault plan; ``drive`` runs the
user's commands against a SERVATUS.toml (client kills of the plan included, no other fault),
then checks and reports; ``check`` checks and reports a finished run from its work directory;
``run`` is one whole soak on the test cluster, injector included (:mod:`soak.oncluster`; as
root, cluster up). Exit 0 with no violation, 1 with any (``run``: 2 when it could not start)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servatus.config import Profile
from soak import drive, evidence, invariants, report, schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/soak")
    sub = parser.add_subparsers(dest="command", required=True)
    faults = sub.add_parser("faults", help="print the fault plan of a seed")
    run = sub.add_parser("drive", help="drive the CLI, then check and report")
    check = sub.add_parser("check", help="check and report a finished run")
    soak = sub.add_parser("run", help="one soak on the test cluster (root, cluster up)")
    soak.add_argument("--minutes", type=float, required=True)
    soak.add_argument("--seed", type=int, required=True)
    soak.add_argument("--out", type=Path, default=None, help="the run's directory")
    soak.add_argument(
        "--finale",
        type=float,
        default=1020.0,
        help="seconds of final reconcile (default 17 min: an intent nothing shows waits 15)",
    )
    soak.add_argument(
        "--rates-x", type=float, default=1.0, help="multiply the cluster-side fault rates"
    )
    soak.add_argument("--tasks", type=int, default=8, help="Tasks in the roster")
    soak.add_argument(
        "--per-kind",
        type=int,
        default=None,
        help="plan this many faults of every kind, short outages (the field soak: 200)",
    )
    soak.add_argument(
        "--later",
        action="store_true",
        help="end with a reconcile whose clock is past the 15-minute rule, if the real one waits",
    )
    for p in (faults, run):
        p.add_argument("--seed", type=int, required=True)
        p.add_argument("--duration", type=float, default=1800.0, help="seconds (default 30 min)")
        p.add_argument("--node", action="append", default=None, help="a compute node (repeat)")
    for p in (run, check):
        p.add_argument("--state", type=Path, required=True)
        p.add_argument("--config", type=Path, required=True)
        p.add_argument("--work", type=Path, required=True)
        p.add_argument("--results", type=Path, default=None)
        p.add_argument("--json", action="store_true", help="print the JSON report, not the table")
    run.add_argument("--tasks", type=Path, required=True)
    run.add_argument("--budget", default=None, help="enable chains: plan --budget DURATION")
    run.add_argument("--lease", default=None, help="enable start into this lease")
    run.add_argument("--finale", type=float, default=1200.0, help="seconds of final reconcile")
    check.add_argument(
        "--log-root", type=Path, default=None, help="read markers here, not the config's log_root"
    )
    args = parser.parse_args(argv)

    if args.command == "run":
        from soak import oncluster

        return oncluster.run(
            minutes=args.minutes,
            seed=args.seed,
            out=args.out,
            finale=args.finale,
            rates_x=args.rates_x,
            tasks=args.tasks,
            per_kind=args.per_kind,
            later=args.later,
        )

    plan: schedule.FaultPlan | None = None
    if args.command in ("faults", "drive"):
        plan = schedule.plan_faults(
            args.seed, args.duration, nodes=args.node or ("node1",), quiet_tail=60.0
        )
    if args.command == "faults":
        assert plan is not None
        print(json.dumps(plan.to_json(), indent=1))
        return 0
    if args.command == "drive":
        args.work.mkdir(parents=True, exist_ok=True)
        assert plan is not None
        (args.work / "faults.json").write_text(json.dumps(plan.to_json(), indent=1) + "\n")
        settings = drive.Settings(
            state=args.state,
            config=args.config,
            tasks=args.tasks,
            work=args.work,
            seed=args.seed,
            duration=args.duration,
            results=args.results,
            budget=args.budget,
            lease=args.lease,
            finale=args.finale,
        )
        drive.drive(settings, plan)
    elif (args.work / "faults.json").exists():
        plan = schedule.FaultPlan.from_json(json.loads((args.work / "faults.json").read_text()))
    log_root = getattr(args, "log_root", None) or Path(Profile.load(args.config).target.log_root)
    found = evidence.collect(
        state=args.state,
        log_root=log_root,
        command_log=args.work / "commands.jsonl",
        results=args.results,
        now=time.time(),
    )
    document = report.build(plan, found, invariants.check(found))
    (args.work / "report.json").write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(document, indent=1) if args.json else report.table(document), end="")
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
