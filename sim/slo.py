"""The service-level objective a simulation judges its requests by, as one immutable value.

A request meets the SLO when its TTFT is within its target and its mean time per output
token after the first (TPOT) is within ``tpot_s``; a one-token answer has no TPOT. The TTFT
target is either one absolute number of seconds for every request (``ttft_s``, from
``kvroute sim --slo-ttft-s``) or, by default, relative to the prompt:
``max(ttft_floor_s, ttft_prefill_factor × its prefill time on an idle H100)``.
``attainment`` is the share of requests the goodput search requires to meet it.

``DEFAULT_SLO`` is the SLO every run used before the options existed (0.5 s floor, 3 ×
idle-H100 prefill, 50 ms TPOT, 90 %); the recorded benchmarks depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SLO_TTFT_FLOOR_S = 0.5
SLO_TTFT_PREFILL_FACTOR = 3.0
SLO_TPOT_S = 0.050
GOODPUT_ATTAINMENT = 0.9


@dataclass(frozen=True, slots=True)
class Slo:
    """What a request must meet, and the share of requests the goodput search requires."""

    ttft_s: float | None = None                 # absolute TTFT target; None: relative rule
    tpot_s: float = SLO_TPOT_S
    attainment: float = GOODPUT_ATTAINMENT
    ttft_floor_s: float = SLO_TTFT_FLOOR_S
    ttft_prefill_factor: float = SLO_TTFT_PREFILL_FACTOR

    def __post_init__(self) -> None:
        for name, value in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s),
                            ("ttft_floor_s", self.ttft_floor_s),
                            ("ttft_prefill_factor", self.ttft_prefill_factor)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not (math.isfinite(self.attainment) and 0 < self.attainment <= 1):
            raise ValueError(f"attainment must be in (0, 1], got {self.attainment}")

    @property
    def relative(self) -> bool:
        """Whether each prompt's TTFT target follows its idle-H100 prefill time."""
        return self.ttft_s is None

    def ttft_target(self, idle_h100_prefill_s: float) -> float:
        """The TTFT target of a prompt whose prefill on an idle H100 takes this long."""
        if self.ttft_s is not None:
            return self.ttft_s
        return max(self.ttft_floor_s, self.ttft_prefill_factor * idle_h100_prefill_s)

    def met(self, ttft_s: float | None, tpot_s: float | None, ttft_target_s: float) -> bool:
        """Whether a request with these latencies (``ttft_s`` None: not served) meets it."""
        if ttft_s is None or ttft_s > ttft_target_s:
            return False
        return tpot_s is None or tpot_s <= self.tpot_s

    def describe(self) -> str:
        """The TTFT and TPOT targets in words, as ``summary.md``'s header shows them."""
        if self.ttft_s is None:
            ttft = (f"TTFT ≤ max({self.ttft_floor_s:g} s, {self.ttft_prefill_factor:g} × "
                    "idle-H100 prefill)")
        else:
            ttft = f"TTFT ≤ {self.ttft_s:g} s"
        return f"{ttft} and TPOT ≤ {self.tpot_s * 1000:g} ms"

    def as_json(self) -> dict[str, Any]:
        """``summary.json``'s ``slo`` object."""
        return {"ttft": "relative" if self.ttft_s is None else "absolute",
                "ttft_s": self.ttft_s,
                "ttft_floor_s": self.ttft_floor_s if self.ttft_s is None else None,
                "ttft_prefill_factor": (self.ttft_prefill_factor if self.ttft_s is None
                                        else None),
                "tpot_s": self.tpot_s, "attainment": self.attainment}


DEFAULT_SLO = Slo()
