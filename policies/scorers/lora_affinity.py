"""``lora-affinity`` scorer: send a LoRA adapter's requests where the adapter runs now.

vLLM runs requests of at most ``--max-loras`` adapters at once (1 by default): a request for
another waits, deferred, until one of those has no request left. Scores (llm-d's
``lora-affinity-scorer``):

* 1.0: the adapter is running on the worker;
* 0.8: fewer adapters run there than it may run at once (it can start now);
* 0.6: the adapter is waiting there (it starts when a slot frees);
* 0.0: otherwise (it would wait behind other adapters).

What runs comes from the worker's ``vllm:lora_requests_info`` (``WorkerView.lora_activity``,
its ``max_lora`` label the limit, vLLM's default 1 where it does not say), and from the
requests this router sent since and has not seen finish: a burst of requests for several
adapters within one scrape interval is spread instead of piled on the worker that looked
free. A request for no adapter scores 1.0 everywhere. The adapter is the rule's
``then.adapter``, else the requested model when a worker lists it as an adapter.

```yaml
scorers:
  - type: lora-affinity
    weight: 1.0
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import target_adapter, target_model
from policies.registry import PluginRegistry
from policies.scorers.column import ColumnScorer
from workers.models import WorkerView

TYPE_NAME = "lora-affinity"
RUNNING, CAN_START, WAITING, BEHIND = 1.0, 0.8, 0.6, 0.0
DEFAULT_MAX_LORAS = 1          # vLLM's --max-loras default
ADAPTER_ATTRIBUTE = "lora_adapter"   # the adapter a request was scored for (its attributes)


@dataclass(frozen=True, slots=True)
class LoraAffinityParams:
    pass


class LoraAffinityScorer(ColumnScorer):
    def __init__(self, name: str) -> None:
        self.name = name
        self._sent: dict[str, tuple[str, str]] = {}       # request id -> (worker, adapter)
        self._unfinished: dict[str, dict[str, int]] = {}  # worker -> adapter -> requests

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        adapter = _adapter_of(request, workers, cycle)
        request.attributes[ADAPTER_ATTRIBUTE] = adapter
        if adapter is None:
            return [RUNNING] * len(workers)
        return [self._score(view, adapter) for view in workers]

    def _score(self, view: WorkerView, adapter: str) -> float:
        activity = view.lora_activity
        active = set(activity.running) if activity is not None else set()
        active.update(self._unfinished.get(view.id, ()))
        if adapter in active:
            return RUNNING
        limit = activity.max_loras if activity is not None and activity.max_loras else (
            DEFAULT_MAX_LORAS)
        if len(active) < limit:
            return CAN_START
        if activity is not None and adapter in activity.waiting:
            return WAITING
        return BEHIND

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        self._finish(request.request_id)          # (a retry: the earlier attempt ended)
        adapter = request.attributes.get(ADAPTER_ATTRIBUTE)
        if decision.worker_id is None or not isinstance(adapter, str):
            return
        self._sent[request.request_id] = (decision.worker_id, adapter)
        by_adapter = self._unfinished.setdefault(decision.worker_id, {})
        by_adapter[adapter] = by_adapter.get(adapter, 0) + 1

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        self._finish(request.request_id)

    def forget_worker(self, worker_id: str) -> None:
        """Its engine restarted, or the fleet dropped it: what it ran is gone."""
        self._unfinished.pop(worker_id, None)
        for request_id in [r for r, (worker, _) in self._sent.items() if worker == worker_id]:
            del self._sent[request_id]

    def unfinished(self, worker_id: str) -> dict[str, int]:
        """The adapters of requests sent to ``worker_id`` and not finished, with how many."""
        return dict(self._unfinished.get(worker_id, {}))

    def _finish(self, request_id: str) -> None:
        sent = self._sent.pop(request_id, None)
        if sent is None:
            return
        worker, adapter = sent
        by_adapter = self._unfinished.get(worker)
        if by_adapter is None or adapter not in by_adapter:
            return
        if by_adapter[adapter] > 1:
            by_adapter[adapter] -= 1
            return
        del by_adapter[adapter]
        if not by_adapter:
            del self._unfinished[worker]


def _adapter_of(request: RoutingRequest, workers: Sequence[WorkerView],
                cycle: CycleState) -> str | None:
    """The rule's adapter, else the requested model where a worker lists it as one."""
    adapter = target_adapter(cycle)
    if adapter is not None:
        return adapter
    model = target_model(cycle, request.model)
    for view in workers:
        if model in view.lora_adapters and model not in view.served_models:
            return model
    return None


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", LoraAffinityParams,
                      lambda params, ctx: LoraAffinityScorer(ctx.name))
