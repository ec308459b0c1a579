"""Build the ``WorkerView`` a policy sees from a snapshot plus in-flight accounting.

One function, shared by the live router and the simulator so that both give policies the
same picture for the same state.
"""

from __future__ import annotations

from workers.inflight import WorkerInflight
from workers.models import WorkerInfo, WorkerSnapshot, WorkerView


def build_view(info: WorkerInfo, snapshot: WorkerSnapshot | None, inflight: WorkerInflight,
               now: float) -> WorkerView:
    """Correct the snapshot with requests dispatched since it was taken.

    Requests the worker cannot have reported yet are counted as waiting: they are queued at
    the worker or about to be. ``now`` is in the same clock as ``snapshot.scraped_at``.
    """
    if snapshot is None:
        return WorkerView(
            info=info, running=0, waiting=inflight.requests, kv_usage=0.0, block_size=16,
            num_gpu_blocks=0, max_model_len=info.model_spec.max_model_len,
            inflight_requests=inflight.requests,
            inflight_tokens=inflight.prefill_tokens + inflight.decode_tokens,
            healthy=False, staleness_s=float("inf"), served_models=info.models,
            inflight_prefill_tokens=inflight.prefill_tokens)
    return WorkerView(
        info=info,
        running=snapshot.running,
        waiting=snapshot.waiting + inflight.dispatched_since_scrape,
        kv_usage=snapshot.kv_usage,
        block_size=snapshot.block_size,
        num_gpu_blocks=snapshot.num_gpu_blocks,
        max_model_len=snapshot.max_model_len or info.model_spec.max_model_len,
        inflight_requests=inflight.requests,
        inflight_tokens=inflight.prefill_tokens + inflight.decode_tokens,
        healthy=snapshot.healthy,
        staleness_s=max(0.0, now - snapshot.scraped_at),
        served_models=snapshot.served_models or info.models,
        lora_adapters=snapshot.lora_adapters,
        inflight_prefill_tokens=inflight.prefill_tokens,
        lora_paths=snapshot.lora_paths,
        lora_activity=snapshot.lora_activity,
    )
