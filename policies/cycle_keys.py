"""The ``CycleState`` keys the engine sets, and how plugins hand explanations back.

Set by the engine before any plugin runs:

* ``TARGET_MODEL``: the model after rule rewrites (also ``request.model`` as plugins see it).
* ``TARGET_ADAPTER``: the LoRA adapter a rule chose, or None.
* ``RULE``: the name of the matched rule, or None.

Plugins explain themselves through two helpers, which the engine folds into the
``Decision``:

* ``record_worker_attribute(cycle, key, worker_id, value)``: a per-worker number (e.g.
  ``estimated_ttft_s``); the chosen worker's value lands in ``Decision.attributes[key]``.
* ``set_reason(cycle, text, decided_by)``: replaces the engine's generated reason (e.g. a
  picker that chose by SLO: ``"cheapest within SLO: est ttft 0.21s, cost $0.00040"``) and the
  short ``decided_by`` word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from policies.base import CycleState

TARGET_MODEL = "target_model"
TARGET_ADAPTER = "target_adapter"
RULE = "rule"
WORKER_ATTRIBUTES = "decision.worker_attributes"   # key -> {worker_id: value}
REASON = "decision.reason"                         # (text, decided_by)
# the worker a picker weighed the chosen one against, when not the next one by total (the
# other of power-of-two's pair): the reason compares the chosen worker with it
RUNNER_UP = "decision.runner_up"


def record_worker_attribute(cycle: CycleState, key: str, worker_id: str, value: Any) -> None:
    table: dict[str, dict[str, Any]] | None = cycle.read(WORKER_ATTRIBUTES)
    if table is None:
        table = {}
        cycle.write(WORKER_ATTRIBUTES, table)
    table.setdefault(key, {})[worker_id] = value


class LazyAttribute(Mapping[str, Any]):
    """``{worker id: value(worker id)}`` over the ids in ``members``: a per-worker attribute
    recorded without a per-worker write (``policies.latency.attributes``)."""

    __slots__ = ("_members", "_value")

    def __init__(self, members: Mapping[str, Any], value: Callable[[str], Any]) -> None:
        self._members = members
        self._value = value

    def __getitem__(self, worker_id: str) -> Any:
        if worker_id not in self._members:
            raise KeyError(worker_id)
        return self._value(worker_id)

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def worker_attributes(cycle: CycleState, worker_id: str) -> dict[str, Any]:
    """``{key: values[worker_id]}`` for each recorded attribute that has the worker (a
    ``LazyAttribute`` read without its ``in`` and ``[]`` methods: one is read per key and
    decision)."""
    table: Mapping[str, Mapping[str, Any]] = cycle.read(WORKER_ATTRIBUTES) or {}
    chosen: dict[str, Any] = {}
    for key, values in table.items():
        if type(values) is LazyAttribute:
            if worker_id in values._members:
                chosen[key] = values._value(worker_id)
        elif worker_id in values:
            chosen[key] = values[worker_id]
    return chosen


def set_reason(cycle: CycleState, text: str, decided_by: str) -> None:
    cycle.write(REASON, (text, decided_by))


def target_model(cycle: CycleState, default: str) -> str:
    model: str | None = cycle.read(TARGET_MODEL)
    return model if model is not None else default


def target_adapter(cycle: CycleState) -> str | None:
    adapter: str | None = cycle.read(TARGET_ADAPTER)
    return adapter
