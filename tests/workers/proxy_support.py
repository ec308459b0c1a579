"""``HTTP_PROXY`` naming a proxy that is not there, for tests of traffic that must ignore it."""

from __future__ import annotations

import socket

import pytest


def unused_port() -> int:
    """A loopback port in 45000-45999 that nothing listens on."""
    for port in range(45999, 44999, -1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 45000-45999")


def set_dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    """Point ``HTTP_PROXY``/``HTTPS_PROXY`` (both spellings) at a port nothing listens on,
    with no ``NO_PROXY``: a request that follows them is refused."""
    proxy = f"http://127.0.0.1:{unused_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, proxy)
        monkeypatch.setenv(name.lower(), proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return proxy
