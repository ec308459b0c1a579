"""Fixtures shared by the whole suite: where the repository and the shared material are
(CI clones the repository next to a copy of ``shared/``), and Ctrl-C as a terminal gives it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (``nohup … &``) inherits SIGINT ignored, and so
    would every command a test starts: the tests that stop one with Ctrl-C then wait on a
    command that never hears it. Commands started here get the default disposition."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def shared_dir() -> Path:
    return SHARED_DIR
