"""``benchmarks/relay.py``: the slow link issue #33's benchmarks measure through.

Its numbers are only worth something if it really delays each way and carries every byte intact
and in order, end of stream included. Lower bounds only: this machine is shared and noisy.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

RELAY = Path(__file__).resolve().parents[2] / "benchmarks" / "relay.py"
ONE_WAY_MS = 30


def load_relay() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_relay", RELAY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


relay = load_relay()


class Echo(socketserver.BaseRequestHandler):
    """Send back everything, then close the sending half once the peer closed its own."""

    def handle(self) -> None:
        connection: socket.socket = self.request
        while chunk := connection.recv(65536):
            connection.sendall(chunk)
        connection.shutdown(socket.SHUT_WR)


@pytest.fixture
def echo_port() -> Iterator[int]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            thread.join()


def round_trips(port: int, times: int) -> list[float]:
    """Seconds from sending one byte to its echo arriving, ``times`` times on one connection."""
    seen = []
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(times):
            began = time.perf_counter()
            client.sendall(b"x")
            assert client.recv(1) == b"x"
            seen.append(time.perf_counter() - began)
    return seen


def test_each_round_trip_takes_at_least_twice_the_one_way_delay(echo_port: int) -> None:
    with relay.running(ONE_WAY_MS, ("127.0.0.1", echo_port)) as port:
        seen = round_trips(port, 5)
    assert min(seen) >= 2 * ONE_WAY_MS / 1000, seen


def test_no_delay_relays_too(echo_port: int) -> None:
    with relay.running(0, ("127.0.0.1", echo_port)) as port:
        assert len(round_trips(port, 3)) == 3


def test_a_large_transfer_arrives_intact_in_order_and_ends(echo_port: int) -> None:
    payload = os.urandom(16 * 1024 * 1024)
    received = bytearray()
    with (
        relay.running(5, ("127.0.0.1", echo_port)) as port,
        socket.create_connection(("127.0.0.1", port)) as client,
    ):

        def send() -> None:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)  # the end of stream must reach the echo too

        sender = threading.Thread(target=send)
        sender.start()
        while chunk := client.recv(1 << 20):
            received += chunk
        sender.join()
    assert len(received) == len(payload)
    assert received == payload


def test_the_command_line_relay_delays_too(echo_port: int) -> None:
    with relay.spawned(ONE_WAY_MS, ("127.0.0.1", echo_port)) as port:
        seen = round_trips(port, 3)
    assert min(seen) >= 2 * ONE_WAY_MS / 1000, seen


def test_a_refused_target_closes_the_client_connection() -> None:
    unused = socket.create_server(("127.0.0.1", 0))
    target = unused.getsockname()[1]
    unused.close()  # nothing listens there now
    with (
        relay.running(1, ("127.0.0.1", target)) as port,
        socket.create_connection(("127.0.0.1", port)) as client,
    ):
        client.settimeout(10)
        assert client.recv(1) == b""
