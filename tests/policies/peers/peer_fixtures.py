"""Builders of worker views and requests for the peer-policy unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.base import Decision, RoutingRequest
from workers.engine.profiles import H100_80GB, LLAMA_3_8B
from workers.models import WorkerInfo, WorkerView

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def make_view(worker_id: str, *, inflight: int = 0, waiting: int = 0, kv_usage: float = 0.0,
              block_size: int = 16, url: str | None = None) -> WorkerView:
    info = WorkerInfo(id=worker_id, url=url or f"http://127.0.0.1:9{worker_id[-1:]}00",
                      gpu=H100_80GB, models=(MODEL,), model_spec=LLAMA_3_8B,
                      price_per_hour=2.0)
    return WorkerView(info=info, running=0, waiting=waiting, kv_usage=kv_usage,
                      block_size=block_size, num_gpu_blocks=1000, max_model_len=8192,
                      inflight_requests=inflight, inflight_tokens=0, healthy=True,
                      staleness_s=0.0)


def make_request(request_id: str = "r", *, tokens: Sequence[int] | None = None,
                 text: str | None = None, at: float = 0.0, session: str | None = None,
                 **extra: Any) -> RoutingRequest:
    messages = [{"role": "user", "content": text}] if text is not None else None
    return RoutingRequest(request_id=request_id, model=MODEL, messages=messages,
                          prompt_token_ids=list(tokens) if tokens is not None else None,
                          num_prompt_tokens=len(tokens) if tokens is not None else 0,
                          arrival_time=at, session=session, **extra)


def routed(request: RoutingRequest, worker_id: str) -> Decision:
    return Decision(request_id=request.request_id, worker_id=worker_id, model=request.model,
                    profile="default", rule=None, reason="test")
