"""Stopping a background task: cancel it, wait for it to end, keep the caller cancellable.

``task.cancel()`` followed by ``with suppress(CancelledError): await task`` is the usual
idiom, and it has a hole: when the *caller* is cancelled while it waits (a shutdown with a
deadline), the ``CancelledError`` it receives is swallowed too, and the caller carries on
as if nothing happened. ``cancel_and_wait`` swallows only the stopped task's own
cancellation.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended. An exception the task raises instead
    propagates; so does a cancellation of the caller itself."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
