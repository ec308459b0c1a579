"""The live stack (router, emulated fleet, Prometheus) shared by the observability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.observability.obs_stack import LiveStack, Stack, run_scenario


@pytest.fixture(scope="session")
def live_stack() -> Iterator[Stack]:
    live = LiveStack()
    with live as stack:
        run_scenario(stack, live)
        yield stack
