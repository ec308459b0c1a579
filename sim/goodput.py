"""Goodput search: the largest arrival-rate scale at which a policy still meets its SLO.

``find_goodput(attainment_at, start)`` probes ``start``, then doubles (or halves) the scale
until attainment crosses ``target`` (0.9 by default), then bisects between the last passing
and the first failing scale. Each probe is a whole simulation, so the number of probes is
bounded: ``max_doublings`` each way plus ``bisections``. Halving also stops once attainment
no longer improves (by ``plateau`` or more) at the lower rate: the misses then come from
requests the fleet cannot serve within the SLO even when idle, and the goodput is 0.0.
A search whose every doubling passed stops at ``start × 2**max_doublings`` without finding
where the SLO fails: that scale is a lower bound (``capped``), not the goodput.

A search that ends at 0.0 says why (``floor``): ``"plateau"`` when halving stopped because
attainment no longer rose as the load fell (the SLO is not met even near idle on this fleet),
``"limit"`` when its halvings ran out while attainment was still rising (the goodput is
below the smallest scale probed, not necessarily none). ``idle_attainment`` is then the
attainment at the smallest scale probed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sim.slo import GOODPUT_ATTAINMENT

Floor = Literal["plateau", "limit"]


@dataclass(slots=True)
class GoodputSearch:
    rate_scale: float                          # largest passing scale found (0.0: none)
    capped: bool = False                       # every doubling passed: at least rate_scale
    probes: list[tuple[float, float]] = field(default_factory=list)   # (scale, attainment)
    floor: Floor | None = None                 # why no scale passed (None: one did)

    @property
    def idle_attainment(self) -> float | None:
        """With no passing scale, the attainment at the smallest scale probed."""
        if self.floor is None or not self.probes:
            return None
        return min(self.probes)[1]

    @property
    def smallest_scale(self) -> float | None:
        """The smallest scale probed (None before any probe)."""
        return min(self.probes)[0] if self.probes else None


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
        search.floor = "limit"         # unless a halving passes, or attainment stops rising
        for _ in range(max_doublings):
            if passes(high / 2):
                low = high / 2
                search.floor = None
                break
            high /= 2
            if search.probes[-1][1] < previous + plateau:
                search.floor = "plateau"
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
