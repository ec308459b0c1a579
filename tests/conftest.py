"""Fixtures shared by the whole suite: where the repository and the shared material are
(CI clones the repository next to a copy of ``shared/``), Ctrl-C as a terminal gives it,
and the event loop the async tests run on (uvloop, as the router's)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (``nohup … &``) inherits SIGINT ignored, and so
    would every command a test starts: the tests that stop one with Ctrl-C then wait on a
    command that never hears it. Commands started here get the default disposition."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs on uvloop, the loop the router and the emulator serve on: its
    transports and servers derive from none of asyncio's classes, and its clock ticks in
    milliseconds, which code tested on asyncio's loop alone had taken for granted."""
    return {"uvloop": uvloop.new_event_loop}


REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def shared_dir() -> Path:
    return SHARED_DIR
