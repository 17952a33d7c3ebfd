"""What ``servatus`` refuses against the real cluster: one stderr line each, the right exit code,
and nothing recorded or submitted."""

from __future__ import annotations

import json

import pytest
from lane_helpers import Lane, one_line_error

pytestmark = pytest.mark.cluster

GREEDY = """
# Asks for more than its own ceiling allows.
[profiles.greedy.target]
max_cpus_per_allocation = 1

[profiles.greedy.resources]
cpus = 2
"""


def test_tampered_plan_unknown_profile_and_ceiling(lane: Lane) -> None:
    lane.put_worker()
    lane.put(lane.launch / "SERVATUS.toml", lane.toml() + GREEDY)
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("one", "exit", "0")]))
    lane.ok("plan", "state", "--output", "plan.json")
    saved = (lane.launch / "plan.json").read_bytes()
    allocation = json.loads(saved)["allocations"][0]["allocation_id"]
    lane.ok("validate", "state", "plan.json")  # the reviewed plan itself is fine
    # One byte: the last hex digit of the allocation id.
    at = saved.index(allocation.encode()) + len(allocation) - 1
    other = b"0" if saved[at : at + 1] != b"0" else b"1"
    tampered = saved[:at] + other + saved[at + 1 :]
    assert sum(a != b for a, b in zip(saved, tampered, strict=True)) == 1
    lane.put(lane.launch / "tampered.json", tampered.decode(), mode=0o600)
    journal = lane.journal()
    refused = lane.servatus("submit", "state", "tampered.json")
    assert refused.returncode == 1, refused
    one_line_error(refused, "StalePlan")
    assert refused.stdout == ""
    assert lane.journal() == journal
    assert lane.executions() == {"one": ("NOT_SUBMITTED", None)}
    assert not [name for _, name, _ in lane.squeue() if allocation[:20] in name]

    unknown = lane.servatus("plan", "state", "--profile", "no-such-profile")
    assert unknown.returncode == 1, unknown
    assert "no-such-profile" in one_line_error(unknown, "ConfigurationError")

    for argv in (("plan", "state", "--profile", "greedy"), ("doctor", "--profile", "greedy")):
        greedy = lane.servatus(*argv)
        assert greedy.returncode == 1, greedy
        assert "max_cpus_per_allocation" in one_line_error(greedy, "ConfigurationError"), argv
    assert lane.journal() == journal


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("servatus-nowhere.invalid", "Could not resolve hostname"),
        ("ssh://alice@127.0.0.1:2299", "Connection refused"),
    ],
    ids=["unresolvable-alias", "closed-port"],
)
def test_unreachable_host(ssh_lane: Lane, host: str, said: str) -> None:
    lane = ssh_lane
    lane.put_worker()
    toml = lane.toml().replace(f'host = "{lane.cluster.alias}"', f'host = "{host}"')
    assert host in toml
    lane.put(lane.launch / "SERVATUS.toml", toml)
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("one", "exit", "0")]))
    lane.ok("plan", "state", "--output", "plan.json")  # a first plan needs no Slurm
    journal = lane.journal()
    submit = lane.servatus("submit", "state", "plan.json")
    assert submit.returncode == 75, submit
    assert said in one_line_error(submit, "Unavailable")
    assert lane.journal() == journal  # a failed ping records nothing
    doctor = lane.servatus("doctor")
    assert doctor.returncode == 75, doctor
    ping = one_line_error(submit, "Unavailable").removeprefix("servatus: Unavailable: ")
    assert f"  unavailable  slurm version  {ping}" in doctor.stdout.splitlines(), doctor.stdout
    as_json = lane.servatus("doctor", "--json")
    assert as_json.returncode == 75, as_json
    assert [c["detail"] for c in json.loads(as_json.stdout)["checks"]] == [ping]
    validate = lane.servatus("validate", "state", "plan.json")
    assert validate.returncode == 75, validate
    one_line_error(validate, "Unavailable")
