"""SIGTERM stops a kvroute command as Ctrl-C does, also while an event loop runs."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from router.cli import SigtermAsInterrupt


def test_outside_an_event_loop_the_interrupt_is_raised_at_once() -> None:
    with pytest.raises(KeyboardInterrupt):
        SigtermAsInterrupt()(15, None)


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_inside_an_event_loop_it_is_raised_by_the_loop_and_cleanup_runs(run: object) -> None:
    handler = SigtermAsInterrupt()
    happened: list[str] = []

    async def command() -> None:
        try:
            handler(15, None)                 # as if the signal landed in a callback
            happened.append("handler returned")
            await asyncio.sleep(30)
            happened.append("slept through")
        finally:
            happened.append("cleanup")

    with pytest.raises(KeyboardInterrupt):
        run(command())                         # type: ignore[operator]
    assert happened == ["handler returned", "cleanup"]


def test_a_second_sigterm_raises_at_once_even_inside_a_loop() -> None:
    handler = SigtermAsInterrupt()
    second: list[str] = []

    async def command() -> None:
        handler(15, None)
        try:
            handler(15, None)
            second.append("returned")
        except KeyboardInterrupt:
            second.append("raised")

    with pytest.raises(KeyboardInterrupt):      # the first one still arrives through the loop
        asyncio.run(command())
    assert second == ["raised"]
