"""The in-flight limit: at most ``limit`` requests pass at once; the others wait in order.

``ConcurrencyGate.enter`` lets a request through while fewer than ``limit`` are in flight,
and otherwise queues it: highest priority first, first come first served within a priority.
A request that finds ``max_waiting`` already waiting takes the place of the newest waiter of
the lowest priority below its own, which is refused (``GateFull``), or, when none is lower,
is refused at once itself: a queue full of batch work does not turn a premium tenant away.
One that waits ``timeout_s`` is refused then (``GateTimeout``). ``leave`` hands the freed slot
to the next waiter. A waiter whose client goes away (its task cancelled) leaves the queue,
and a slot handed to it in that same instant is passed on, so no slot is ever lost.

The limit is given with every ``enter``, and by ``set_limit`` when the routing file is
reloaded; raising it, or setting it to 0 (no limit), lets waiters through at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Collection


class GateFull(Exception):
    """``max_waiting`` requests were already waiting."""


class GateTimeout(Exception):
    """The request waited ``timeout_s`` without a slot."""


class GateClosed(GateFull):
    """The router is stopping (``close``): a request that would wait is turned away."""


class ConcurrencyGate:
    """Counts the requests in flight and queues the ones over the limit."""

    __slots__ = ("_heap", "_order", "closed", "in_flight", "let_in", "limit", "waiting")

    def __init__(self) -> None:
        # (-priority, arrival order, future): a done future is a waiter that left
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.in_flight = 0
        self.waiting = 0
        self.limit = 0            # 0: no limit
        self.closed = False       # the router is stopping: no request waits any more
        self.let_in: frozenset[object] = frozenset()   # ... but these, there before it

    async def enter(self, limit: int, max_waiting: int, timeout_s: float,
                    priority: int = 0) -> float:
        """Take a slot (waiting for one if need be); returns the seconds waited (more than 0
        after any wait, however short)."""
        self.limit = limit
        self._hand_over()          # the limit may have risen since the last call
        if limit <= 0 or (self.in_flight < limit and self.waiting == 0):
            self.in_flight += 1
            return 0.0
        if self.closed:
            raise GateClosed
        if self.waiting >= max_waiting and not self._displace(priority):
            raise GateFull
        loop = asyncio.get_running_loop()
        # the host's monotonic clock, not the loop's: uvloop's ticks in milliseconds, and a
        # wait shorter than one read 0 s, as if the request had not waited at all (the
        # budget is checked again only after a wait)
        started = time.monotonic()
        granted: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._heap, (-priority, next(self._order), granted))
        self.waiting += 1
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(granted)
        except BaseException as exc:
            if granted.done() and not granted.cancelled() and granted.exception() is not None:
                pass                   # displaced by a higher priority: off the count already
            elif granted.done() and not granted.cancelled():
                self.leave()           # handed a slot as it gave up: pass it on
            else:
                granted.cancel()       # stays in the heap, skipped when its turn comes ...
                self.waiting -= 1
                if len(self._heap) > 2 * self.waiting + 64:    # ... unless they pile up
                    self._heap = [entry for entry in self._heap if not entry[2].done()]
                    heapq.heapify(self._heap)
            if isinstance(exc, TimeoutError):
                raise GateTimeout from None
            raise
        return time.monotonic() - started

    def _displace(self, priority: int) -> bool:
        """Refuse the newest waiter of the lowest priority below ``priority`` (its place is
        taken); False when every waiter's priority is at least ``priority``."""
        waiters = [entry for entry in self._heap if not entry[2].done()]
        if not waiters:
            return False
        lowest = max(waiters, key=lambda entry: (entry[0], entry[1]))   # -priority, arrival
        if -lowest[0] >= priority:
            return False
        lowest[2].set_exception(GateFull())
        self.waiting -= 1
        return True

    def close(self, let_in: Collection[object] = ()) -> int:
        """The router stops: every waiter is turned away now (``GateClosed``), as is any
        request that would wait from now on, rather than wait out the drain and be cut with
        no answer; returns how many were waiting. The requests in flight go on, and so do
        those of ``let_in`` (the tasks of requests the router was reading, not yet admitted:
        they arrived before the stop)."""
        self.closed = True
        self.let_in = frozenset(let_in)
        turned_away = 0
        for _, _, granted in self._heap:
            if not granted.done():
                granted.set_exception(GateClosed())
                turned_away += 1
        self._heap = []
        self.waiting -= turned_away
        return turned_away

    def set_limit(self, limit: int) -> None:
        """A new limit (a routing file reloaded): raised, or 0, lets waiters through now,
        without waiting for the next request's ``enter``."""
        self.limit = limit
        self._hand_over()

    def leave(self) -> None:
        """Give back a slot taken by ``enter``."""
        self.in_flight -= 1
        self._hand_over()

    def _hand_over(self) -> None:
        heap = self._heap
        while heap and (self.limit <= 0 or self.in_flight < self.limit):
            _, _, granted = heapq.heappop(heap)
            if granted.done():            # left the queue before its turn
                continue
            granted.set_result(None)
            self.waiting -= 1
            self.in_flight += 1
