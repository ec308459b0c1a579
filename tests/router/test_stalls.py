"""``router.stalls``: deadlines and settling on a test clock, then a live router whose worker
stops answering (its ``/metrics`` still fine) setting it aside long before the upstream
timeout, and taking it back once its requests have settled."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from router.keys import METRICS, REGISTRY
from router.stalls import StallWatch
from tests.router.gateway_support import (
    MODEL,
    ROUTING_ROUND_ROBIN,
    RouterFactory,
    RouterHandle,
    fleet_entry,
    short_chat,
    subset,
    url_fleet_file,
)
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig, load_fleet


def test_a_worker_is_stalled_while_an_attempt_is_past_its_deadline() -> None:
    told: list[str] = []
    watch = StallWatch(2.0, 100.0, on_stall=told.append)
    quick = watch.waiting("a", 0.0, 0.1)            # deadline max(2, 10 x 0.1) = 2
    slow = watch.waiting("a", 0.0, 0.5)             # 10 x 0.5 = 5
    other = watch.waiting("b", 0.0, None)           # the floor: 2
    watch.settled(quick)                            # answered in time
    watch.settled(other)
    assert watch.stalled(4.0) == frozenset()
    assert watch.stalled(5.0) == {"a"} and watch.is_stalled("a", 5.0)
    late = watch.waiting("a", 5.0, None)
    assert watch.stalled(7.5) == {"a"} and told == ["a"]    # one episode, told once
    watch.settled(slow)
    assert watch.stalled(7.5) == {"a"}              # the later attempt is overdue too
    watch.settled(late)
    assert watch.stalled(8.0) == frozenset() and not watch.is_stalled("a", 8.0)
    watch.stalled(100.0)


def test_the_stall_names_the_request_that_waited_and_how_long(
        caplog: pytest.LogCaptureFixture) -> None:
    """The line said "a request has waited past its deadline": which one, and how long, the
    on-call person could not tell."""
    watch = StallWatch(2.0, 100.0)
    watch.waiting("a", 1.0, None, "req-42")
    with caplog.at_level(logging.WARNING, logger="router.stalls"):
        assert watch.stalled(4.5) == {"a"}
    assert "worker a: request req-42 has waited 3.5 s, past its deadline" in caplog.text


def test_a_forgotten_worker_is_not_stalled_by_its_former_attempts() -> None:
    """A worker removed from the fleet, its attempts still awaited, then added again: those
    attempts going overdue set the new declaration aside."""
    watch = StallWatch(2.0, 100.0)
    old = watch.waiting("a", 0.0, None)
    other = watch.waiting("b", 0.0, None)
    assert watch.stalled(3.0) == {"a", "b"}
    watch.forget("a")
    assert watch.stalled(3.0) == {"b"}
    watch.waiting("a", 3.0, None)                    # the worker added again, answering
    watch.settled(old)                               # its former attempt ends: no trace
    assert watch.stalled(4.0) == {"b"}
    watch.settled(other)


def test_the_deadline_is_capped_and_zero_never_watches() -> None:
    watch = StallWatch(1.0, 30.0)
    watch.waiting("a", 0.0, 1000.0)                 # 10 x 1000 s, capped at 30 s
    assert watch.stalled(29.0) == frozenset() and watch.stalled(30.0) == {"a"}
    off = StallWatch(0.0, 30.0)
    off.settled(off.waiting("a", 0.0, None))
    off.waiting("a", 0.0, None)
    assert not off.enabled and off.stalled(1e9) == frozenset()


def test_an_attempt_past_its_deadline_while_its_engine_generates_is_watched_on() -> None:
    """A healthy worker writing a long whole answer (8,135 tokens in 194 s, no max_tokens)
    was marked stalled at 120 s and set aside. An engine generating is busy, not hung: an
    attempt past its deadline is watched on until the floor after the engine's last token,
    and stalls once the engine has been still that long."""
    moved_at: dict[str, float | None] = {"a": 1.5, "b": -0.5, "c": None}
    watch = StallWatch(2.0, 100.0, progress=moved_at.get)
    busy = watch.waiting("a", 0.0, None)           # deadline 2
    watch.waiting("b", 0.0, None)
    watch.waiting("c", 0.0, None)
    assert watch.stalled(2.0) == {"b", "c"}         # b still for 2.5 s; c: nothing known
    moved_at["a"] = 3.0
    assert watch.stalled(3.4) == {"b", "c"}         # a: watched to 1.5 + 2, then to 3 + 2
    assert watch.stalled(4.9) == {"b", "c"}
    assert watch.stalled(5.0) == {"a", "b", "c"}    # a's engine still since 3 s
    watch.settled(busy)
    assert watch.stalled(5.0) == {"b", "c"}


def test_an_attempt_at_a_worker_whose_scrapes_fail_is_overdue_after_a_few_seconds() -> None:
    """A frozen worker (its socket still accepting) answers neither its requests nor its
    scrapes: it stayed up for the scraper's grace and drew every new request, each waiting
    as long as the freeze, since the deadlines are minutes. Scrapes failing for
    ``silent_after_s`` and an attempt sent since, without its first byte for that long (and
    its estimate), set it aside at once."""
    last_good: dict[str, float] = {}               # the workers whose last scrape failed
    watch = StallWatch(120.0, 300.0, unanswering=lambda: last_good, silent_after_s=5.0)
    before = watch.waiting("a", 0.0, None, "req-0")   # sent while its scrapes answered
    frozen = watch.waiting("a", 2.0, None, "req-1")
    whole = watch.waiting("a", 2.0, 30.0)             # a whole answer expected in 30 s
    later = watch.waiting("a", 4.0, None)
    busy = watch.waiting("b", 2.0, None)
    assert watch.stalled(8.0) == frozenset()          # its scrapes answer: deadlines hold
    last_good.update({"a": 1.0, "c": 1.0})
    assert watch.stalled(5.9) == frozenset()          # silent for less than 5 s
    assert watch.stalled(7.0) == {"a"}                # req-1 waited 5 s: b's scrapes answer
    assert watch.stalled(9.0) == {"a"}                # the later attempt is overdue too
    last_good.clear()                                 # it answers again (SIGCONT) ...
    for ticket in (frozen, later):
        watch.settled(ticket)
    assert watch.stalled(9.0) == frozenset()          # ... its overdue attempts settled
    last_good["a"] = 1.0
    assert watch.stalled(20.0) == frozenset()         # req-0 came before: never by silence
    assert watch.stalled(32.0) == {"a"}               # the whole answer: after its estimate
    for ticket in (before, whole, busy):
        watch.settled(ticket)
    assert watch.stalled(32.0) == frozenset()
    one_slow = StallWatch(120.0, 300.0, unanswering=lambda: {"a": 9.0})
    one_slow.waiting("a", 9.5, None)
    assert one_slow.stalled(13.9) == frozenset()      # one slow scrape of a busy engine
    off = StallWatch(0.0, 300.0, unanswering=lambda: {"a": 0.0})    # the watch off: never
    off.waiting("a", 0.0, None)
    assert off.stalled(100.0) == frozenset()


def test_settled_attempts_do_not_pile_up() -> None:
    watch = StallWatch(1.0, 10.0)
    for n in range(20_000):
        watch.settled(watch.waiting(f"w{n % 3}", n * 1e-4, None))
    stuck = watch.waiting("w1", 2.0, None)
    assert len(watch._deadlines) < 2_000            # compacted as it went
    assert watch.stalled(3.5) == {"w1"}
    watch.settled(stuck)
    assert watch.stalled(3.5) == frozenset()


async def _stalled(router: RouterHandle, worker: str) -> bool:
    return bool((await fleet_entry(router, worker))["stalled"])


@pytest.mark.integration
async def test_a_worker_that_stops_answering_is_set_aside_before_the_timeout(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["stall", "h100-fast"]),
                               ROUTING_ROUND_ROBIN, upstream_timeout_s=60.0,
                               stall_after_s=0.2)
    async with aiohttp.ClientSession() as session:
        # round-robin sends one of these to the worker that never answers (3 tokens, then
        # silence): with no estimate, its deadline is 10 x 3 tokens x 0.1 s = 3 s
        hanging = [asyncio.create_task(short_chat(session, router, 3)) for _ in range(2)]
        await asyncio.sleep(3.5)
        assert sum(task.done() for task in hanging) == 1
        assert await _stalled(router, "stall")
        answers = [await short_chat(session, router, 3) for _ in range(6)]
        assert answers == [(200, "h100-fast")] * 6     # round-robin alone would alternate
        assert router.metric("kvroute_worker_stalls_total", worker="stall") == 1
        # the state, not only the event: an SRE's panel shows it set aside while it lasts
        assert _set_aside(router, "stall") == {"stalled": 1.0, "ejected": 0.0}
        assert _set_aside(router, "h100-fast") == {"stalled": 0.0, "ejected": 0.0}
        for task in hanging:                           # the client gives up: it settles
            task.cancel()
        await asyncio.gather(*hanging, return_exceptions=True)
        for _ in range(50):
            if not await _stalled(router, "stall"):
                break
            await asyncio.sleep(0.05)
        assert not await _stalled(router, "stall")
        assert _set_aside(router, "stall") == {"stalled": 0.0, "ejected": 0.0}


@pytest.mark.integration
async def test_a_frozen_worker_is_set_aside_in_seconds_not_minutes(
        make_router: RouterFactory, tmp_path: Path) -> None:
    """SIGSTOP: the worker's socket still takes connections, nothing answers. Its scrapes
    time out (a scrape grace of 60 s here keeps it healthy to the policy all along), and the
    stall deadline is 120 s: round-robin kept sending it half the requests."""
    with EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=0.1) as frozen, \
            EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                            time_scale=0.1) as fine:
        fleet = load_fleet(url_fleet_file(tmp_path, {"frozen": frozen.url, "fine": fine.url}))
        router = await make_router(fleet, ROUTING_ROUND_ROBIN, upstream_timeout_s=60.0,
                                   slow_grace_s=60.0, scrape_timeout_s=0.5)
        assert frozen.pid is not None
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            async with aiohttp.ClientSession() as session:
                hanging = [asyncio.create_task(short_chat(session, router, 3))
                           for _ in range(4)]
                for _ in range(300):
                    if await _stalled(router, "frozen"):
                        break
                    await asyncio.sleep(0.1)
                assert await _stalled(router, "frozen")
                assert (await fleet_entry(router, "frozen"))["healthy"]   # by its scrapes
                answers = [await short_chat(session, router, 3) for _ in range(4)]
                assert answers == [(200, "fine")] * 4
                assert sum(task.done() for task in hanging) == 2     # the fine one's
                for task in hanging:
                    task.cancel()
                await asyncio.gather(*hanging, return_exceptions=True)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)


def _set_aside(router: RouterHandle, worker: str) -> dict[str, float | None]:
    """``kvroute_worker_set_aside`` of ``worker``, by reason."""
    registry = router.app[METRICS].registry
    return {reason: registry.get_sample_value("kvroute_worker_set_aside", {
        "worker": worker, "gpu": router.app[REGISTRY].info(worker).gpu.name,
        "model": MODEL, "reason": reason}) for reason in ("ejected", "stalled")}
