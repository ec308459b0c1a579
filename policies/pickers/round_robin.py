"""``round-robin`` picker: take the candidates in turn, ignoring scores.

Candidates are ordered by worker id; the pick is the first id after the previously picked
one (wrapping around), so the rotation stays fair when the candidate set changes between
requests. State is per picker instance and survives a configuration reload.

```yaml
picker: {type: round-robin}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import CandidateScore, CycleState, RoutingRequest
from policies.registry import PluginRegistry

TYPE_NAME = "round-robin"


@dataclass(frozen=True, slots=True)
class RoundRobinParams:
    pass


class RoundRobinPicker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.last_worker_id: str | None = None

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        ordered = sorted(candidates, key=lambda c: c.worker_id)
        last = self.last_worker_id
        chosen = next((c for c in ordered if last is None or c.worker_id > last), ordered[0])
        self.last_worker_id = chosen.worker_id
        return chosen

    def inherit_state(self, previous: object) -> None:
        if isinstance(previous, RoundRobinPicker):
            self.last_worker_id = previous.last_worker_id


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "picker", RoundRobinParams,
                      lambda params, ctx: RoundRobinPicker(ctx.name))
