"""A real ``redis-server`` on 127.0.0.1 for the benchmarks and the router's tests, started
and found answering (the caller stops it by its pid)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence

from workers.ports import free_port


def start_redis(binary: str, attempts: int = 3, port: int | None = None,
                options: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], int]:
    """A ``redis-server`` answering PING on a free port (or on ``port``, tried once), with
    ``options`` added to its command line (``--rename-command XADD ""``). A port taken by
    another process between ``free_port`` and redis binding it makes redis exit: then
    another port is tried."""
    for _ in range(attempts if port is None else 1):
        port_now = free_port() if port is None else port
        proc = subprocess.Popen([binary, "--port", str(port_now), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", *options],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30.0
        while proc.poll() is None and time.monotonic() < deadline:
            if answers_ping(port_now):
                return proc, port_now
            time.sleep(0.02)
        if proc.poll() is None:      # alive but silent for 30 s: give up on it
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    raise AssertionError(f"redis-server did not start on {port or 'a free port'}")


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False
