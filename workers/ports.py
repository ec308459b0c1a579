"""Pick a TCP port for a server that binds it later (tests, benchmarks, ``kvroute up``).

A port found by binding port 0 comes from the kernel's ephemeral range, the same range every
process on the machine draws from for its own port-0 binds and outgoing connections. A server
that binds the chosen port seconds later (vLLM's engine binds its KV-event socket after loading
the model) can then find it taken. ``free_port`` therefore picks, when the kernel leaves room,
a port below or above the ephemeral range (which the kernel never hands out by itself), checks
that it binds right now, and only falls back to port 0 when no such room exists.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000        # below this live the well-known and commonly configured services
HIGHEST_PORT = 65_535
MIN_ROOM = 1_000            # fewer ports than this outside the ephemeral range: use port 0
ATTEMPTS = 64


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range ``(low, high)``, or ``None`` where it cannot be read."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def ports_outside(ephemeral: tuple[int, int] | None) -> list[range]:
    """The ranges of ports from ``LOWEST_PORT`` up that the kernel never picks by itself."""
    if ephemeral is None:
        return []
    low, high = ephemeral
    spans = [range(LOWEST_PORT, low), range(high + 1, HIGHEST_PORT + 1)]
    return [span for span in spans if len(span) > 0]


def bindable(host: str, port: int) -> bool:
    """Whether a TCP socket can bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def kernel_port(host: str) -> int:
    """A port the kernel chooses (port 0), free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1", *, chooser: random.Random | None = None,
              ephemeral: tuple[int, int] | None = None) -> int:
    """A TCP port free on ``host`` now and outside the kernel's ephemeral range when it can be.

    ``ephemeral`` overrides the range read from the kernel, ``chooser`` the random source
    (both for tests)."""
    spans = ports_outside(ephemeral if ephemeral is not None else ephemeral_range())
    room = sum(len(span) for span in spans)
    if room < MIN_ROOM:
        return kernel_port(host)
    pick = chooser or random.SystemRandom()
    for _ in range(ATTEMPTS):
        port = nth_port(spans, pick.randrange(room))
        if bindable(host, port):
            return port
    return kernel_port(host)


def free_ports(count: int, host: str = "127.0.0.1",
               draw: Callable[[str], int] = free_port) -> list[int]:
    """``count`` distinct ports, each free on ``host`` now: the servers of one fleet bind
    theirs later, so two drawn alike (``free_port`` draws each alone, at random) would have
    the second refused. ``draw`` draws one (for tests)."""
    ports: list[int] = []
    while len(ports) < count:
        port = draw(host)
        if port not in ports:
            ports.append(port)
    return ports


def nth_port(spans: list[range], index: int) -> int:
    """The ``index``-th port counting through ``spans`` in order."""
    for span in spans:
        if index < len(span):
            return span[index]
        index -= len(span)
    raise IndexError(f"port index {index} beyond the spans")
