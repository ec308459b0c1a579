"""The load a trace slice offers, as absolute rates: requests and prompt tokens per second.

A slice's clock starts at its first request, so its span (``Trace.span_s``) is the last
arrival on the trace's own clock, before any ``--rate-scale``. At rate scale ``x`` the same
requests arrive over ``span_s / x`` seconds: the offered rate is ``requests / span_s × x``
(and likewise for prompt tokens). A slice whose requests all arrive at once has no rate
(None). A goodput rate scale reads as an absolute rate the same way: the rate at scale 1
times the goodput scale.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.traces import Trace


@dataclass(frozen=True, slots=True)
class OfferedLoad:
    """What a slice offers at rate scale 1 (None: its requests span no time)."""

    requests_per_s: float | None
    prompt_tokens_per_s: float | None

    @classmethod
    def of(cls, trace: Trace) -> OfferedLoad:
        span = trace.span_s
        if span <= 0:
            return cls(None, None)
        prompt = sum(r.num_prompt_tokens for r in trace.requests)
        return cls(len(trace.requests) / span, prompt / span)

    def requests_at(self, scale: float) -> float | None:
        """Requests per second at rate scale ``scale``."""
        return None if self.requests_per_s is None else self.requests_per_s * scale

    def prompt_tokens_at(self, scale: float) -> float | None:
        """Prompt tokens per second at rate scale ``scale``."""
        return None if self.prompt_tokens_per_s is None else self.prompt_tokens_per_s * scale
