"""Redis's clock as a replica reads it between round trips.

The replicas sharing state through Redis compare times that different hosts wrote (when a
replica last published, when a stopped replica's spending leaves the window): on each host's
own wall clock, a host a minute off was taken for dead, and one ten minutes ahead removed
everyone else. So every time written to or compared in Redis is on Redis's clock (``TIME``),
the one clock they all share. A replica reads ``TIME`` with each sync, in the same round
trip, and carries it between syncs on its monotonic clock (which no NTP step moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

# a wall clock this far from Redis's is reported (sharing does not need it right, but the
# logs, the traces and the other services of the host do)
SKEW_REPORTED_S = 5.0


class RedisClock:
    """Redis's time, learnt from ``TIME`` replies: owns the offset between it and this
    process's monotonic clock, and how far this host's wall clock is from it."""

    __slots__ = ("_monotonic", "_offset_s", "_wall_clock", "skew_s")

    def __init__(self, wall_clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self._offset_s: float | None = None    # Redis's time less the monotonic clock's
        self.skew_s = 0.0      # this host's wall clock less Redis's, at the last reading

    @property
    def known(self) -> bool:
        """Whether a ``TIME`` reply was learnt (before, there is no time to write)."""
        return self._offset_s is not None

    def started(self) -> float:
        """The monotonic time a round trip carrying ``TIME`` starts (for ``learn``)."""
        return self._monotonic()

    def learn(self, reply: Sequence[int | str], started: float) -> None:
        """Learn Redis's time from a ``TIME`` reply (seconds, microseconds) to a round trip
        begun at ``started``: Redis read its clock somewhere within it, taken as midway
        (off by half a round trip at most)."""
        ended = self._monotonic()
        redis_s = int(reply[0]) + int(reply[1]) / 1e6
        self._offset_s = redis_s - (started + ended) / 2
        self.skew_s = self._wall_clock() - (ended + self._offset_s)

    def now_ms(self) -> int:
        """Redis's time now, in milliseconds since the epoch (``known`` first)."""
        if self._offset_s is None:
            raise RuntimeError("Redis's time is not known yet")
        return int(1000 * (self._monotonic() + self._offset_s))

    @property
    def skewed(self) -> bool:
        """Whether this host's wall clock is further from Redis's than ``SKEW_REPORTED_S``."""
        return abs(self.skew_s) > SKEW_REPORTED_S
