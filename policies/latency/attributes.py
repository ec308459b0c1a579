"""Per-worker decision attributes without a per-worker write.

The engine copies the chosen worker's values from the ``CycleState`` attribute table
(``policies.cycle_keys.WORKER_ATTRIBUTES``: key → {worker id: value}) into
``Decision.attributes``. Writing every candidate's value costs O(workers) per key; these
read-only views over data the plugins already hold (``LazyAttribute``, defined beside the
table in ``policies.cycle_keys``, whose ``worker_attributes`` reads them without their
methods) cost O(1) per decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.base import CycleState
from policies.cycle_keys import WORKER_ATTRIBUTES, LazyAttribute

__all__ = ["LazyAttribute", "record_attribute"]


def record_attribute(cycle: CycleState, key: str, values: Mapping[str, Any]) -> None:
    """Make ``values[chosen]`` the decision's ``attributes[key]``."""
    table: dict[str, Mapping[str, Any]] | None = cycle.read(WORKER_ATTRIBUTES)
    if table is None:
        table = {}
        cycle.write(WORKER_ATTRIBUTES, table)
    table[key] = values
