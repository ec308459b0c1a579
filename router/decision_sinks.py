"""Observers of every routing decision beyond the metrics: the decision log, the
infinite-cache prefix ceiling, and the known cached prefix chosen against the best on offer.
The director calls each sink after each decision (and the outcome sinks, the decision log,
when each routed attempt ends); this module builds them for one app and closes what they
opened. The decision log also sees the requests admission refused before
routing (a refusal sink, ``router.refusals``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from policies.base import Decision, RoutingRequest
from router.decision_log import (
    ENV_PATH,
    DecisionLogConfig,
    DecisionLogConfigError,
    DecisionLogWriter,
)
from router.followed_file import FollowedFile
from router.metrics import RouterMetrics
from router.prefix_ceiling import PrefixCeiling
from router.prefix_choice import PrefixChoice
from router.refusals import RefusalSink


class DecisionSink(Protocol):
    """Sees every decision (``attempt`` 0 first, then retries; ``routing_sha256``: the
    fingerprint of the routing file whose policy took it). Must not raise or block."""

    def on_decision(self, request: RoutingRequest, decision: Decision, attempt: int,
                    seconds: float, routing_sha256: str | None = None) -> None: ...


class OutcomeSink(Protocol):
    """Sees how each routed attempt ended (``outcome``: its fields as ``/debug/decisions``
    shows them). Must not raise or block."""

    def on_outcome(self, request: RoutingRequest, decision: Decision, attempt: int,
                   outcome: Mapping[str, Any]) -> None: ...


class OpenedSinks(NamedTuple):
    decisions: Sequence[DecisionSink]
    refusals: Sequence[RefusalSink]    # those that also see the admission refusals
    close: Callable[[], None]          # closes what the sinks opened
    outcomes: Sequence[OutcomeSink] = ()   # those that also see how attempts ended


def open_decision_sinks(metrics: RouterMetrics, env: Mapping[str, str],
                        loop: asyncio.AbstractEventLoop | None = None) -> OpenedSinks:
    """The sinks configured by ``env`` and a function closing what they opened. With
    ``loop`` (the router's), the decision log writes each second's count of suppressed
    refusals by a timer there, within about a second of that second's end, without waiting
    for a later refusal or decision (``DecisionLogWriter``); closing cancels the timer.

    Raises ``DecisionLogConfigError`` on an invalid setting and ``OSError`` on a log file
    that cannot be opened."""
    sinks: list[DecisionSink] = [PrefixCeiling(metrics), PrefixChoice(metrics)]
    refusals: list[RefusalSink] = []
    outcomes: list[OutcomeSink] = []
    config = DecisionLogConfig.from_env(env)
    followed: FollowedFile | None = None
    writer: DecisionLogWriter | None = None
    if config.path is not None and config.writes:
        if config.path == "-":
            writer = DecisionLogWriter.configured(sys.stdout, config, loop)
        else:       # reopened after a rotation (``router.followed_file``)
            followed = FollowedFile(config.path)
            writer = DecisionLogWriter.configured(followed, config, loop)
        if config.sample_rate > 0:
            sinks.append(writer)
            outcomes.append(writer)
        if config.refusal_rate > 0:
            refusals.append(writer)

    def close() -> None:
        if writer is not None:
            with contextlib.suppress(Exception):   # what could not be written is lost
                writer.close()
        if followed is not None:
            with contextlib.suppress(OSError):     # what could not be written is lost
                followed.close()

    return OpenedSinks(sinks, refusals, close, outcomes)


def decision_log_problem(env: Mapping[str, str]) -> str | None:
    """What would stop ``open_decision_sinks`` (a bad setting, a log file that cannot be
    opened), in one line, else None: checked at start, before anything is launched."""
    try:
        config = DecisionLogConfig.from_env(env)
    except DecisionLogConfigError as exc:
        return str(exc)
    if config.path is None or config.path == "-" or not config.writes:
        return None
    try:                                 # opened as the log will be (FollowedFile)
        FollowedFile(config.path).close()
    except OSError as exc:
        return f"{ENV_PATH}: cannot open {config.path}: {exc.strerror}"
    return None
