"""The requests being handled, and cutting them when the drain at shutdown runs out.

aiohttp's own shutdown waits ``shutdown_timeout`` for each connection's handler, then asks
the request to stop and waits ``shutdown_timeout`` again before it cancels the handler, so
a stream that does not read its request body runs for twice the drain it was given.
``RequestTasks`` keeps the task of every request being handled (its middleware, outermost)
and ``cut_after(s)`` cancels those still running ``s`` seconds later: a stream is cut when
``--drain-timeout`` says, and aiohttp's wait ends with it. The cut cancels each with
``CUT_BY_DRAIN`` and why (``cut_by_drain`` tells such a cancellation from a client leaving),
so that a stream cut gets an error event and a request its worker had not answered a 503,
not a connection closed with no word. ``StopNotice`` says the stop
began, for ``/health`` to say so. ``idle()`` waits until none is
being handled (the drain waits on it while the port of this process alone still answers,
for what the requests in flight add to be scraped).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

log = logging.getLogger(__name__)

# the message of the cancellations ``RequestTasks.cut`` sends, before ": " and why
CUT_BY_DRAIN = "cut by the router's drain"


def cut_by_drain(cancelled: BaseException) -> str | None:
    """Why ``RequestTasks.cut`` cancelled the request (``"drain timeout"``, ``"a second
    signal"``) when ``cancelled`` is its cancellation, else None (a client leaving, ...)."""
    message = cancelled.args[0] if cancelled.args else None
    if isinstance(message, str) and message.startswith(CUT_BY_DRAIN):
        return message[len(CUT_BY_DRAIN) + 2:] or "drain timeout"
    return None


class StopNotice:
    """Whether the router was told to stop (a signal): ``/health`` answers 503 from then on,
    through the delay it goes on serving (``Settings.drain_delay_s``) and the drain."""

    def __init__(self) -> None:
        self.given = False


class RequestTasks:
    """The tasks of the requests this process is handling now."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[object], web.Request] = {}
        self._cut: set[asyncio.Task[object]] = set()     # cut once: told once (``cut``)
        self._none: asyncio.Event | None = None   # made on the loop, when first waited on

    def __len__(self) -> int:
        return len(self._tasks)

    def tasks(self) -> frozenset[asyncio.Task[object]]:
        """The tasks of the requests being handled now."""
        return frozenset(self._tasks)

    def connections(self) -> set[object]:
        """The connections (aiohttp's ``request.protocol``) a request is being handled on."""
        return {request.protocol for request in self._tasks.values()}

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Handler) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is None:          # not inside a task: nothing to cut later
            return await handler(request)
        self._tasks[task] = request
        if self._none is not None:
            self._none.clear()
        try:
            return await handler(request)
        finally:
            self._tasks.pop(task, None)
            self._cut.discard(task)
            if self._none is not None and not self._tasks:
                self._none.set()

    async def idle(self) -> None:
        """Return once no request is being handled (at once when none is)."""
        if self._none is None:
            self._none = asyncio.Event()
        if not self._tasks:
            self._none.set()
        await self._none.wait()

    def cut_after(self, timeout_s: float) -> asyncio.TimerHandle:
        """Cancel, ``timeout_s`` seconds from now, every request still being handled (the
        handle cancels the cut)."""
        return asyncio.get_running_loop().call_later(timeout_s, self.cut)

    def cut(self, why: str = "drain timeout") -> int:
        """Cancel every request still being handled and not cut already; how many were."""
        running = [task for task in self._tasks
                   if not task.done() and task not in self._cut]
        if running:
            log.warning("%s: cutting %d request(s) still in flight", why, len(running))
        for task in running:
            self._cut.add(task)
            task.cancel(f"{CUT_BY_DRAIN}: {why}")
        return len(running)
