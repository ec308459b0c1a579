"""Goodput search: the largest arrival-rate scale at which a policy still meets its SLO.

``find_goodput(attainment_at, start)`` probes ``start``, then doubles (or halves) the scale
until attainment crosses ``target`` (0.9 by default), then bisects between the last passing
and the first failing scale. Each probe is a whole simulation, so the number of probes is
bounded: ``max_doublings`` each way plus ``bisections``. Halving also stops once attainment
no longer improves (by ``plateau`` or more) at the lower rate: the misses then come from
requests the fleet cannot serve within the SLO even when idle, and the goodput is 0.0.
A search whose every doubling passed stops at ``start × 2**max_doublings`` without finding
where the SLO fails: that scale is a lower bound (``capped``), not the goodput.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sim.metrics import GOODPUT_ATTAINMENT


@dataclass(slots=True)
class GoodputSearch:
    rate_scale: float                          # largest passing scale found (0.0: none)
    capped: bool = False                       # every doubling passed: at least rate_scale
    probes: list[tuple[float, float]] = field(default_factory=list)   # (scale, attainment)


def find_goodput(attainment_at: Callable[[float], float], start: float = 1.0, *,
                 target: float = GOODPUT_ATTAINMENT, max_doublings: int = 6,
                 bisections: int = 5, plateau: float = 0.005) -> GoodputSearch:
    if start <= 0:
        raise ValueError(f"start scale must be > 0, got {start}")
    search = GoodputSearch(rate_scale=0.0)

    def passes(scale: float) -> bool:
        value = attainment_at(scale)
        search.probes.append((scale, value))
        return value >= target

    low: float | None = None
    high: float | None = None
    if passes(start):
        low = start
        for _ in range(max_doublings):
            if not passes(low * 2):
                high = low * 2
                break
            low *= 2
        else:
            search.capped = True       # never failed: the goodput is at least low
    else:
        high = start
        previous = search.probes[-1][1]
        for _ in range(max_doublings):
            if passes(high / 2):
                low = high / 2
                break
            high /= 2
            if search.probes[-1][1] < previous + plateau:
                break                  # idle-bound: a lower rate does not help
            previous = search.probes[-1][1]
    if low is None:
        return search              # fails even at start / 2**max_doublings
    if high is not None:
        for _ in range(bisections):
            middle = (low + high) / 2
            if passes(middle):
                low = middle
            else:
                high = middle
    search.rate_scale = low
    return search
