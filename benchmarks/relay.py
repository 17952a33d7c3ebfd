"""A loopback TCP relay that delivers every chunk a fixed time after it arrived: a slow link.

Run ``python benchmarks/relay.py --delay-ms 25 [--to 127.0.0.1:2222] [--port P]``: it listens on
``127.0.0.1:P`` (a free port when P is 0, the default), prints ``listening on 127.0.0.1:PORT`` and
forwards each connection to ``--to`` (the test cluster's sshd by default) until interrupted.
``--delay-ms`` is ONE WAY: 25 ms each way is a 50 ms round trip.

The delay is a latency, not a throughput cap: each direction reads whatever arrives, stamps it,
and a writer delivers it once its own stamp plus the delay has passed, in order. A chunk waits
only for its own due time (and the socket's real back-pressure), never for the chunks before it
to have aged, so a bulk transfer pays the delay once, not once per chunk. End of stream is
delayed like data, so a half-closed ``ssh`` session closes as it would over a real link.

From Python, :func:`running` serves in a thread of this process and :func:`spawned` in a child
process (better while this process itself is being timed: no shared GIL); both yield the port.
Nothing here listens beyond loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = "127.0.0.1"
CHUNK = 65536
DEFAULT_TARGET = (LOOPBACK, 2222)  # tests/cluster/harness.py SSH_PORT


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy one direction, each chunk delivered ``delay`` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while True:
                chunk = await reader.read(CHUNK)
                queue.put_nowait((loop.time() + delay, chunk))
                if not chunk:
                    return
        except OSError:
            queue.put_nowait((loop.time() + delay, b""))

    async def write() -> None:
        while True:
            due, chunk = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not chunk:
                if writer.can_write_eof() and not writer.is_closing():
                    writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    reading = asyncio.ensure_future(read())
    try:
        await write()
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await reading


class Relay:
    """One listening socket on loopback; every accepted connection is relayed to ``target``."""

    def __init__(self, target: tuple[str, int], delay_ms: float, port: int = 0) -> None:
        self.target = target
        self.delay = delay_ms / 1000
        self.port = port
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, LOOPBACK, self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for connection in list(self.connections):
            connection.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)

    async def _serve(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            try:
                up_r, up_w = await asyncio.open_connection(*self.target)
            except OSError:
                down_w.close()
                return
            try:
                await asyncio.gather(
                    _carry(down_r, up_w, self.delay), _carry(up_r, down_w, self.delay)
                )
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                for writer in (up_w, down_w):
                    writer.close()
        finally:
            self.connections.discard(task)


@contextlib.contextmanager
def running(
    delay_ms: float, target: tuple[str, int] = DEFAULT_TARGET, port: int = 0
) -> Iterator[int]:
    """Serve a :class:`Relay` in a thread with its own event loop; yield its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="relay", daemon=True)
    thread.start()
    relay = Relay(target, delay_ms, port)
    try:
        yield asyncio.run_coroutine_threadsafe(relay.start(), loop).result(10)
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(relay.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def spawned(
    delay_ms: float, target: tuple[str, int] = DEFAULT_TARGET, port: int = 0
) -> Iterator[int]:
    """Serve a :class:`Relay` in a child process (this file's command line); yield its port."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--delay-ms", str(delay_ms)]
    argv += ["--to", f"{target[0]}:{target[1]}", "--port", str(port)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        said = child.stdout.readline()
        found = re.search(r":(\d+)$", said.strip())
        if found is None:
            raise RuntimeError(f"the relay did not start: {said!r}")
        yield int(found.group(1))
    finally:
        child.terminate()
        child.wait(10)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or LOOPBACK, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True, help="ONE-WAY delay, each way")
    parser.add_argument(
        "--to",
        type=_address,
        default=DEFAULT_TARGET,
        metavar="HOST:PORT",
        help="default: 127.0.0.1:2222",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    options = parser.parse_args()

    async def serve() -> None:
        relay = Relay(options.to, options.delay_ms, options.port)
        port = await relay.start()
        print(f"listening on {LOOPBACK}:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await relay.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
