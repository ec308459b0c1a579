"""Fixtures for the policy tests: hand-made worker views and requests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from workers.engine.profiles import H100_80GB, LLAMA_3_8B
from workers.models import WorkerInfo, WorkerView

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

ViewFactory = Callable[..., WorkerView]


def make_view(worker_id: str, *, models: tuple[str, ...] = (MODEL,),
              labels: Mapping[str, str] | None = None, gpu: Any = H100_80GB,
              **fields: Any) -> WorkerView:
    info = WorkerInfo(id=worker_id, url=f"http://127.0.0.1:1/{worker_id}", gpu=gpu,
                      models=models, model_spec=LLAMA_3_8B, price_per_hour=gpu.price_per_hour,
                      labels=MappingProxyType(dict(labels or {})))
    values: dict[str, Any] = dict(
        running=0, waiting=0, kv_usage=0.0, block_size=16, num_gpu_blocks=1000,
        max_model_len=8192, inflight_requests=0, inflight_tokens=0, healthy=True,
        staleness_s=0.0, served_models=models)
    values.update(fields)
    return WorkerView(info=info, **values)


@pytest.fixture
def view() -> ViewFactory:
    return make_view
