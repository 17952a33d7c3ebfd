"""The client's stop request (``servatus.lease.stop``) and what a withdraw says of a missing
directory, through the local transport, and the lease script acting on exactly the file the
client writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import test_lease_orders
import test_lease_script
from slurm_helpers import FakeCluster
from test_lease_orders import JOB as ORDERS_JOB
from test_lease_orders import order_text, take
from test_lease_orders import step_id as order_id
from test_lease_script import JOB as LEASE_JOB
from test_lease_script import LEASE, SHELLS, make_orders, offer, step_id, wait_for

from servatus.lease import (
    Verdict,
    read_directory_missing,
    read_stops,
    stop,
    stop_command,
    withdraw_orders,
)
from servatus_slurm.transport import LocalTransport

orders = test_lease_orders.orders  # the fixtures, shared
start_lease = test_lease_script.start_lease


def test_a_stop_request_is_written_once_owner_only_and_again_is_fine(orders: Path) -> None:
    first, second = order_id(1), order_id(2)
    transport = LocalTransport()
    assert stop(transport, str(orders), [first]) == {first: True}
    request = orders / f"{first}.stop"
    assert request.stat().st_size == 0 and request.stat().st_mode & 0o777 == 0o600
    before = request.stat().st_mtime_ns
    assert stop(transport, str(orders), [first, second]) == {first: True, second: True}
    assert request.stat().st_mtime_ns == before  # the first request stands, untouched
    assert sorted(os.listdir(orders)) == [f"{first}.stop", f"{second}.stop"]


def test_a_stop_request_never_goes_into_a_missing_or_open_directory(tmp_path: Path) -> None:
    step = order_id(1)
    gone = tmp_path / "gone"
    assert stop(LocalTransport(), str(gone), [step]) == {step: False}
    assert not gone.exists()
    open_directory = tmp_path / "open"
    open_directory.mkdir(mode=0o755)
    open_directory.chmod(0o755)
    assert stop(LocalTransport(), str(open_directory), [step]) == {step: False}
    assert os.listdir(open_directory) == []


def test_a_name_taken_by_something_else_is_no_stop_request(orders: Path) -> None:
    step = order_id(1)
    (orders / f"{step}.stop").mkdir()
    assert stop(LocalTransport(), str(orders), [step]) == {step: False}


def test_stop_answers_cut_short_or_odd_say_no() -> None:
    a, b, c, d = (order_id(n) for n in range(1, 5))
    out = f"stopping {a}\nunwritten {b}\nstopping {c} directory\nstopp".encode()
    assert read_stops(out, [a, b, c, d]) == {a: True, b: False, c: False, d: False}
    with pytest.raises(Exception, match="allocation id"):
        stop_command("/x", ["nope"])


def test_a_withdraw_tells_a_missing_directory_from_an_unreadable_claim(
    tmp_path: Path,
    orders: Path,
) -> None:
    step = order_id(1)
    missing = withdraw_orders(LocalTransport(), str(tmp_path / "gone"), ORDERS_JOB, [step])
    assert missing.verdicts == {step: Verdict.UNDECIDED} and missing.no_directory
    (orders / f"servatus-{step}.{ORDERS_JOB}.claim").mkdir()  # a claim nobody can read
    unreadable = withdraw_orders(LocalTransport(), str(orders), ORDERS_JOB, [step])
    assert unreadable.verdicts == {step: Verdict.UNDECIDED} and not unreadable.no_directory
    a, b = order_id(2), order_id(3)
    assert not read_directory_missing(f"undecided {a} directory\n".encode(), [a, b])
    assert read_directory_missing(
        f"undecided {a} directory\nundecided {b} directory\n".encode(), [a, b]
    )


def test_a_taken_order_is_stopped_by_its_request_and_an_untaken_one_withdrawn(
    orders: Path,
) -> None:
    taken, untaken = order_id(1), order_id(2)
    for step in (taken, untaken):
        (orders / step).write_text(order_text(step))
    assert take(orders, taken) == "taken"
    verdicts = withdraw_orders(LocalTransport(), str(orders), ORDERS_JOB, [taken, untaken])
    assert verdicts.verdicts == {taken: Verdict.TAKEN, untaken: Verdict.WITHDRAWN}
    assert take(orders, untaken) == "withdrawn"


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_lease_stops_a_running_step_on_the_request_the_client_writes(
    fake_cluster: FakeCluster,
    start_lease: object,
    shell: tuple[str],
) -> None:
    """The client's request, not a hand-made file: the lease writes the step's ``stop`` and
    relays ``SIGUSR1``; a second request for the same step changes nothing; the lease goes on."""
    orders = make_orders(fake_cluster)
    polite = step_id(1)
    offer(fake_cluster, polite, fake_cluster.step_args("polite", "usr1"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.marker(polite, "step-start").exists())
    assert stop(LocalTransport(), str(orders), [polite]) == {polite: True}
    wait_for(lambda: lease.ended(polite))
    assert lease.ended(polite) == [f"servatus-{polite}.{LEASE_JOB}.end.0.138"]
    assert json.loads((fake_cluster.out / "polite.usr1.json").read_text())["at"]
    assert lease.marker(polite, "stop").exists()
    assert stop(LocalTransport(), str(orders), [polite]) == {polite: True}
    assert not lease.marker(LEASE, "stop").exists()  # the lease goes on
    lease.finish()
