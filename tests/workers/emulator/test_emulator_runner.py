"""EngineRunner with a scripted engine: the emulated clock, delivery, and engine failure."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from workers.emulator.config import parse_emulate
from workers.emulator.metrics import EmulatorMetrics
from workers.emulator.runner import EngineRunner
from workers.engine.api import EngineRequest, EngineStats, RequestOutput, StepResult
from workers.engine.profiles import H100_80GB, LLAMA_3_8B

STEP_S = 0.01


class ScriptedEngine:
    """Emits one token per request per step of ``STEP_S``; records each step's ``now``."""

    def __init__(self, fail: bool = False) -> None:
        self.requests: dict[str, list[int]] = {}
        self.step_times: list[float] = []
        self.fail = fail
        self.stats = EngineStats()

    def add_request(self, request: EngineRequest) -> None:
        self.requests[request.request_id] = list(request.output_token_ids)

    def abort_request(self, request_id: str) -> bool:
        return self.requests.pop(request_id, None) is not None

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self, now: float) -> StepResult:
        if self.fail:
            raise RuntimeError("boom")
        self.step_times.append(now)
        outputs = []
        for rid, remaining in list(self.requests.items()):
            token = remaining.pop(0)
            outputs.append(RequestOutput(rid, (token,), first=False, finished=not remaining,
                                         finish_reason="length" if not remaining else None,
                                         num_cached_tokens=0))
            if not remaining:
                del self.requests[rid]
        return StepResult(duration_s=STEP_S, outputs=tuple(outputs))


class StalledEngine(ScriptedEngine):
    """Holds its requests but can schedule none of them: the runner waits for a wake-up."""

    def step(self, now: float) -> StepResult:
        self.step_times.append(now)
        return StepResult(duration_s=0.0, outputs=())


def make_runner(engine: ScriptedEngine) -> EngineRunner:
    config = parse_emulate({"port": 1, "time_scale": 0}, gpu=H100_80GB, model=LLAMA_3_8B,
                           models=["m"])
    return EngineRunner(engine, 0.0, EmulatorMetrics(config, 100, 8192))


async def test_busy_steps_follow_the_step_durations_exactly() -> None:
    engine = ScriptedEngine()
    runner = make_runner(engine)
    runner.start()
    try:
        queue = runner.submit(EngineRequest("a", (1, 2, 3), (7, 8, 9), arrival_time=runner.now()),
                              max_tokens=3)
        got = [await asyncio.wait_for(queue.get(), 5) for _ in range(3)]
    finally:
        await runner.stop()
    assert [o.new_token_ids for o in got if o is not None] == [(7,), (8,), (9,)]
    assert engine.step_times == pytest.approx([0.0, 0.01, 0.02], abs=1e-12)
    assert runner.now() == pytest.approx(0.03)
    assert runner.num_inflight == 0


async def test_engine_failure_marks_the_worker_unhealthy() -> None:
    runner = make_runner(ScriptedEngine(fail=True))
    runner.start()
    try:
        queue = runner.submit(EngineRequest("a", (1,), (7,)), max_tokens=1)
        assert await asyncio.wait_for(queue.get(), 5) is None
        assert runner.healthy is False
        with pytest.raises(RuntimeError, match="engine is dead"):
            runner.submit(EngineRequest("b", (1,), (7,)), max_tokens=1)
    finally:
        await runner.stop()


async def test_choices_the_engine_drops_leave_nothing_in_the_metrics() -> None:
    """A step that fails, or a request the engine refuses, left the choices of an n > 1
    prompt awaited by the metrics for good."""
    runner = make_runner(ScriptedEngine(fail=True))
    runner.metrics.observe_admitted(2, ["a-0", "a-1"])
    runner.start()
    try:
        queue = runner.submit(EngineRequest("a-0", (1,), (7,)), max_tokens=1)
        runner.submit(EngineRequest("a-1", (1,), (7,)), max_tokens=1, queue=queue)
        assert await asyncio.wait_for(queue.get(), 5) is None
    finally:
        await runner.stop()
    assert not runner.metrics._parents

    class Refusing(ScriptedEngine):
        def add_request(self, request: EngineRequest) -> None:
            raise ValueError("This model's maximum context length is ...")

    runner = make_runner(Refusing())
    runner.metrics.observe_admitted(2, ["b-0", "b-1"])
    for choice in ("b-0", "b-1"):
        with pytest.raises(ValueError):
            runner.submit(EngineRequest(choice, (1,), (7,)), max_tokens=1)
    assert not runner.metrics._parents and runner.num_inflight == 0


async def test_stop_lands_even_as_a_wake_up_arrives() -> None:
    """A request arriving in the same loop iteration as ``stop()`` must not swallow the cancel
    (``asyncio.wait_for`` on 3.11 did: the runner kept stepping and ``stop()`` never returned)."""
    engine = StalledEngine()
    runner = make_runner(engine)
    runner.start()
    runner.submit(EngineRequest("a", (1,), (7,)), max_tokens=1)
    async with asyncio.timeout(5):
        while not engine.step_times:          # the runner now waits for a wake-up
            await asyncio.sleep(0.001)
    runner.submit(EngineRequest("b", (1,), (7,)), max_tokens=1)   # wakes it ...
    stopping = asyncio.create_task(runner.stop())                 # ... as it is stopped
    try:
        done, _ = await asyncio.wait({stopping}, timeout=5)   # asyncio.wait cancels nothing
        assert stopping in done, "stop() did not return: the runner swallowed its cancel"
    finally:
        stopping.cancel()   # a stuck stop(): cancelling it cancels the runner it awaits
        with contextlib.suppress(asyncio.CancelledError):
            await stopping
