"""From ``offer`` returning to the step's own ``step-start``: how long a started Task waits.

Run ``python benchmarks/bench_lease_latency.py [--starts N] [--poll P]`` as root with the test
cluster up. One one-slot lease (``leasekit.running_lease``) takes N orders (default 20), one at
a time: offer one through ``servatus.lease.offer`` over SSH, note when the offer returned, watch
the listing (``find``, over the same transport) until the step's ``step-start`` appears, and wait
for its end before the next. A random pause of up to one poll before each offer spreads the
offers over the lease's poll phase. The latency is the marker's mtime less the offer's return
(one machine, one clock); its floor is ``srun`` creating the step, its spread the poll.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from leasekit import new_id, running_lease, wait_until


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--starts", type=int, default=20, metavar="N")
    parser.add_argument("--poll", type=int, default=5, metavar="P", help="the lease's poll")
    options = parser.parse_args()
    latencies = []
    with running_lease(slots=1, time_limit=600, poll_seconds=options.poll) as lease:
        for _ in range(options.starts):
            time.sleep(random.uniform(0, options.poll))
            step = new_id()
            offered = lease.offer({step: lease.order(step)})
            began = wait_until(
                "the step-start", lambda step=step: lease.step_start(step), seconds=60, every=0.1
            )
            latencies.append(began.mtime - offered)
            wait_until("the step's end", lambda step=step: lease.ended(step), seconds=60)
    shown = ", ".join(f"{latency:.2f}" for latency in latencies)
    median, most, least = statistics.median(latencies), max(latencies), min(latencies)
    print(f"offer returned -> step-start, {len(latencies)} starts, poll {options.poll} s:")
    print(f"  median {median:.2f} s, max {most:.2f} s, min {least:.2f} s (lease job {lease.job})")
    print(f"  each: {shown}")


if __name__ == "__main__":
    main()
