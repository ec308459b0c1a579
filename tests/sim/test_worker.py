"""SimWorker: its clock, what it refuses, and the timed outputs it lands."""

from __future__ import annotations

import pytest

from sim.worker import FirstToken, SimWorker
from workers.engine.api import EngineConfig, EngineRequest, RequestStats
from workers.engine.core import EngineCore
from workers.engine.latency import StepTimeModel
from workers.engine.profiles import BUILTIN_MODELS, H100_80GB
from workers.models import WorkerInfo

MODEL = BUILTIN_MODELS["llama-3.1-8b"]


def _worker(num_gpu_blocks: int | None = None) -> SimWorker:
    info = WorkerInfo(id="w", url="http://127.0.0.1:1", gpu=H100_80GB, models=("m",),
                      model_spec=MODEL, price_per_hour=3.0)
    engine = EngineCore(EngineConfig(model=MODEL, gpu=H100_80GB, hash_algo="builtin",
                                     num_gpu_blocks=num_gpu_blocks))
    return SimWorker(info, engine)


def test_fits_names_the_limit() -> None:
    worker = _worker(num_gpu_blocks=64)                      # 1024 tokens of KV
    assert worker.fits(500, 500) is None
    reason = worker.fits(1000, 100)
    assert reason is not None and "exceed" in reason


def test_idle_worker_starts_at_submission_and_lands_timed_outputs() -> None:
    worker = _worker()
    worker.submit(EngineRequest("r", list(range(100)), [1, 2, 3]), now=5.0)
    assert worker.advance_to(5.0) == []                     # nothing starts before 5.0
    landed = worker.advance_to(100.0)
    steps = StepTimeModel(H100_80GB, MODEL)
    prefill = steps.prefill_time(100, 0)
    end = 5.0 + prefill + steps.decode_time(1, 101) + steps.decode_time(1, 102)
    (first_at, first), (done_at, done) = landed
    assert isinstance(first, FirstToken) and first.request_id == "r"
    assert first_at == pytest.approx(5.0 + prefill, rel=1e-12)
    assert isinstance(done, RequestStats) and done_at == pytest.approx(end, rel=1e-12)
    assert worker.busy_s == pytest.approx(end - 5.0, rel=1e-12)
    assert worker.advance_to(200.0) == []


def test_scrape_reports_the_engine_gauges() -> None:
    worker = _worker()
    worker.submit(EngineRequest("r", list(range(40)), [1]), now=0.0)
    snapshot = worker.scrape(0.0)
    assert (snapshot.running, snapshot.waiting) == (0, 1)
    assert snapshot.num_gpu_blocks == worker.engine.num_gpu_blocks
    assert snapshot.block_size == 16 and snapshot.max_model_len == 131072
