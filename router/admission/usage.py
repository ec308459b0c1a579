"""What each budget spent over the last minute: requests and tokens, per one-second slot.

A ``UsageWindow`` keeps one budget's counts in a ring of ``WINDOW_S`` one-second slots and
their running totals; a slot older than the window is zeroed (and taken off the totals)
when time moves past it, so every read and write costs O(1) amortised. ``TenantUsage``
holds one window per budget key (a listed tenant's name, or ``OTHER_TENANTS_KEY`` for the
shared budget of every other request) and what the other router replicas published for the same
keys (``remote``, set by a shared ``StateStore``); a budget is judged on both.

Only budgets with a limit are counted, so memory is bounded by the routing file, not by the
tenants clients name; a window whose totals fell to zero is dropped when published.

Besides its totals a replica publishes, by key, what of them will still be in the window
``SCHEDULE_STEP_S``, 2 × that, … seconds later (``published_schedule``): another replica's
``Retry-After`` for a budget it spent is then read from when its spending leaves (rounded up
to a step), not from its totals taken to fade evenly (a budget spent in one burst a second
ago read as having room in a second, every second for a minute).
"""

from __future__ import annotations

import math

WINDOW_S = 60
SCHEDULE_STEP_S = 10            # the published schedule's step: 10, 20, ... 50 seconds ahead
SCHEDULE_STEPS = WINDOW_S // SCHEDULE_STEP_S - 1

# (requests, tokens) still in the window after each step of the schedule
Schedule = tuple[tuple[int, int], ...]


class UsageWindow:
    """Requests and tokens in each of the last ``WINDOW_S`` whole seconds."""

    __slots__ = ("_latest", "_requests", "_tokens", "requests", "tokens")

    def __init__(self) -> None:
        self._requests = [0] * WINDOW_S
        self._tokens = [0] * WINDOW_S
        self._latest = -1          # the last second written (slots after it are zero)
        self.requests = 0          # totals over the window, as of ``_latest``
        self.tokens = 0

    def _advance(self, second: int) -> None:
        latest = self._latest
        if second <= latest:
            return
        if second - latest >= WINDOW_S:
            self._requests = [0] * WINDOW_S
            self._tokens = [0] * WINDOW_S
            self.requests = self.tokens = 0
        else:
            requests, tokens = self._requests, self._tokens
            for expired in range(latest + 1, second + 1):
                slot = expired % WINDOW_S
                self.requests -= requests[slot]
                self.tokens -= tokens[slot]
                requests[slot] = tokens[slot] = 0
        self._latest = second

    def add(self, now: float, requests: int = 0, tokens: int = 0) -> None:
        second = math.floor(now)
        self._advance(second)
        slot = second % WINDOW_S
        self._requests[slot] += requests
        self._tokens[slot] += tokens
        self.requests += requests
        self.tokens += tokens

    def add_at(self, now: float, at: float, tokens: int, requests: int = 0) -> bool:
        """Add ``tokens`` and ``requests`` (negative: take them back) to the second ``at``
        fell in, when that second is still in the window at ``now``: a settlement lands where
        its charge was, and leaves the window with it. False (nothing added) when it has left
        already."""
        latest = math.floor(now)
        self._advance(latest)
        second = math.floor(at)
        if second <= latest - WINDOW_S or second > latest:
            return False
        slot = second % WINDOW_S
        self._tokens[slot] += tokens
        self.tokens += tokens
        self._requests[slot] += requests
        self.requests += requests
        return True

    def totals(self, now: float) -> tuple[int, int]:
        """(requests, tokens) over the last ``WINDOW_S`` seconds."""
        self._advance(math.floor(now))
        return self.requests, self.tokens

    def left_after(self, now: float, seconds: int) -> tuple[int, int]:
        """(requests, tokens) still in the window ``seconds`` whole seconds from ``now``, if
        nothing more is added."""
        second = math.floor(now)
        self._advance(second)
        requests, tokens = self.requests, self.tokens
        for expired in range(second - WINDOW_S + 1, second - WINDOW_S + 1 + seconds):
            slot = expired % WINDOW_S
            requests -= self._requests[slot]
            tokens -= self._tokens[slot]
        return requests, tokens


class TenantUsage:
    """Every limited budget's window, and the other replicas' totals by budget key."""

    __slots__ = ("_windows", "remote", "remote_schedule")

    def __init__(self) -> None:
        self._windows: dict[str, UsageWindow] = {}
        self.remote: dict[str, tuple[int, int]] = {}   # key -> (requests, tokens), others'
        # key -> what of ``remote`` stays after each step (others' ``published_schedule``)
        self.remote_schedule: dict[str, Schedule] = {}

    def add(self, key: str, now: float, requests: int = 0, tokens: int = 0) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = UsageWindow()
        window.add(now, requests, tokens)

    def settle(self, key: str, now: float, charged_at: float, tokens: int,
               requests: int = 0) -> None:
        """Correct a charge made at ``charged_at`` by ``tokens`` and ``requests`` (negative:
        a refund): in the charge's own second while it is in the window, so spending never
        reads below zero nor a budget above its limit; once the charge has left, only an
        excess of tokens is added (now)."""
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = UsageWindow()
        if not window.add_at(now, charged_at, tokens, requests) and tokens > 0:
            window.add(now, tokens=tokens)

    def totals(self, key: str, now: float) -> tuple[int, int]:
        """(requests, tokens) of ``key`` over the window, this replica's and the others'."""
        window = self._windows.get(key)
        requests, tokens = window.totals(now) if window is not None else (0, 0)
        other_requests, other_tokens = self.remote.get(key, (0, 0))
        return requests + other_requests, tokens + other_tokens

    def seconds_until(self, key: str, now: float, max_requests: int | None,
                      max_tokens: int | None) -> int:
        """Whole seconds until ``key`` is back under both limits (None: no limit), if nothing
        more is spent: this replica's slots expire as they were written, the others' totals
        leave by their ``remote_schedule`` (what stays until each step's end), or, without
        one, evenly over the window. At most ``WINDOW_S``."""
        window = self._windows.get(key)
        other_requests, other_tokens = self.remote.get(key, (0, 0))
        schedule = self.remote_schedule.get(key)
        for seconds in range(1, WINDOW_S + 1):
            requests, tokens = (window.left_after(now, seconds) if window is not None
                                else (0, 0))
            left_requests: float
            left_tokens: float
            if schedule is not None:
                step = seconds // SCHEDULE_STEP_S      # the steps wholly past
                left_requests, left_tokens = (
                    (other_requests, other_tokens) if step == 0
                    else schedule[step - 1] if step <= len(schedule) else (0, 0))
            else:
                fading = 1.0 - seconds / WINDOW_S
                left_requests, left_tokens = other_requests * fading, other_tokens * fading
            if ((max_requests is None or requests + left_requests < max_requests)
                    and (max_tokens is None or tokens + left_tokens < max_tokens)):
                return seconds
        return WINDOW_S

    def published(self, now: float) -> dict[str, tuple[int, int]]:
        """This replica's own totals by key, for the other replicas (``remote``); windows
        that emptied are dropped."""
        totals: dict[str, tuple[int, int]] = {}
        for key, window in list(self._windows.items()):
            requests, tokens = window.totals(now)
            if requests == 0 and tokens == 0:
                del self._windows[key]
            else:
                totals[key] = (requests, tokens)
        return totals

    def published_schedule(self, now: float) -> dict[str, Schedule]:
        """This replica's spending by key still in the window ``SCHEDULE_STEP_S``, 2 × that,
        … seconds from ``now`` (``SCHEDULE_STEPS`` pairs), for the other replicas."""
        return {key: tuple(window.left_after(now, SCHEDULE_STEP_S * step)
                           for step in range(1, SCHEDULE_STEPS + 1))
                for key, window in self._windows.items()}

    def __len__(self) -> int:
        return len(self._windows)
