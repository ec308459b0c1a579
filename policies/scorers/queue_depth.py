"""``queue-depth`` scorer: prefer workers with fewer waiting requests.

The load is ``WorkerView.waiting`` (vLLM's ``num_requests_waiting`` plus the requests the
router dispatched since the last scrape). Normalised by ``policies.scorers.normalize``:
``relative`` (default) scores ``(max - waiting) / (max - min)`` across the candidates (all 1
when equal); ``absolute`` scores ``1 - min(waiting, threshold) / threshold``.
With ``include_running: true`` the load is ``waiting + running``.

```yaml
scorers:
  - type: queue-depth
    weight: 1.0
    params: {mode: relative, threshold: 128, include_running: false}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import add, attrgetter

from policies.base import CycleState, RoutingRequest
from policies.errors import ParamError
from policies.registry import PluginRegistry
from policies.scorers.column import ColumnScorer
from policies.scorers.normalize import Normalization, normalize_column
from workers.models import WorkerView

TYPE_NAME = "queue-depth"


@dataclass(frozen=True, slots=True)
class QueueDepthParams:
    mode: Normalization = "relative"
    threshold: int = 128
    include_running: bool = False

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise ParamError("threshold", "must be > 0")


class QueueDepthScorer(ColumnScorer):
    def __init__(self, name: str, params: QueueDepthParams) -> None:
        self.name = name
        self.params = params

    def score_column(self, request: RoutingRequest, workers: Sequence[WorkerView],
                     cycle: CycleState) -> list[float]:
        """The same scores as a list in view order (no dict; ``policies.profile``)."""
        waiting = map(_waiting, workers)
        loads = list(map(float, map(add, waiting, map(_running, workers))
                         if self.params.include_running else waiting))
        return normalize_column(loads, self.params.mode, float(self.params.threshold))


_waiting = attrgetter("waiting")
_running = attrgetter("running")


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "scorer", QueueDepthParams,
                      lambda params, ctx: QueueDepthScorer(ctx.name, params))
