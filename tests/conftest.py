"""Fixtures shared by the whole suite: where the repository and the shared material are
(CI clones the repository next to a copy of ``shared/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def shared_dir() -> Path:
    return SHARED_DIR
