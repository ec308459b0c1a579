"""Observers of every routing decision beyond the metrics: the decision log, the
infinite-cache prefix ceiling, and the known cached prefix chosen against the best on offer.
The director calls each sink after each decision; this module builds them for one app and
closes what they opened.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TextIO

from policies.base import Decision, RoutingRequest
from router.decision_log import DecisionLogConfig, DecisionLogWriter
from router.metrics import RouterMetrics
from router.prefix_ceiling import PrefixCeiling
from router.prefix_choice import PrefixChoice


class DecisionSink(Protocol):
    """Sees every decision (``attempt`` 0 first, then retries). Must not raise or block."""

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float) -> None: ...


def open_decision_sinks(metrics: RouterMetrics, env: Mapping[str, str]
                        ) -> tuple[Sequence[DecisionSink], Callable[[], None]]:
    """The sinks configured by ``env`` and a function closing what they opened.

    Raises ``DecisionLogConfigError`` on an invalid setting and ``OSError`` on a log file
    that cannot be opened."""
    sinks: list[DecisionSink] = [PrefixCeiling(metrics), PrefixChoice(metrics)]
    config = DecisionLogConfig.from_env(env)
    stream: TextIO | None = None
    if config.path is not None and config.sample_rate > 0:
        stream = sys.stdout if config.path == "-" else open(  # noqa: SIM115 (closed below)
            config.path, "a", encoding="utf-8")
        sinks.append(DecisionLogWriter(stream, config.sample_rate))

    def close() -> None:
        if stream is not None and stream is not sys.stdout:
            with contextlib.suppress(OSError):     # what could not be written is lost
                stream.close()

    return sinks, close
