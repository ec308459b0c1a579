"""Per-worker decision attributes without a per-worker write.

The engine copies the chosen worker's values from the ``CycleState`` attribute table
(``policies.cycle_keys.WORKER_ATTRIBUTES``: key → {worker id: value}) into
``Decision.attributes``. Writing every candidate's value costs O(workers) per key; these
read-only views over data the plugins already hold cost O(1) per decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from policies.base import CycleState
from policies.cycle_keys import WORKER_ATTRIBUTES


class LazyAttribute(Mapping[str, Any]):
    """``{worker id: value(worker id)}`` over the ids in ``members``."""

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


def record_attribute(cycle: CycleState, key: str, values: Mapping[str, Any]) -> None:
    """Make ``values[chosen]`` the decision's ``attributes[key]``."""
    table: dict[str, Mapping[str, Any]] | None = cycle.read(WORKER_ATTRIBUTES)
    if table is None:
        table = {}
        cycle.write(WORKER_ATTRIBUTES, table)
    table[key] = values
