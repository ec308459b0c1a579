"""cancel_and_wait: ends the task, and never swallows the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from workers.task_cancel import cancel_and_wait


async def test_the_task_ends_and_its_cancellation_stays_inside() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_a_task_that_fails_while_stopping_raises_its_error() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)


async def test_the_callers_own_cancellation_propagates() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await release.wait()      # takes its time to clean up
            raise

    worker = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(worker))
    await asyncio.sleep(0)             # the stopper now waits for the worker
    stopper.cancel()                   # a shutdown deadline cancels the stopper itself
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert stopper.cancelled()
