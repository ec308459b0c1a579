"""Fixtures shared by the whole suite: where things are, and free loopback ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def shared_dir() -> Path:
    return SHARED_DIR
