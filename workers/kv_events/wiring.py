"""Connect a fleet's KV-event streams to the prefix scorers of a policy engine.

``sources_for(workers)`` turns every worker whose fleet entry has ``kv_events:`` into a
``KvEventSource`` (the replay endpoint, when given as ``kv_events_replay`` label, and the
topic as ``kv_events_topic`` label). ``attach(engine, index)`` hands one shared
``ExactPrefixIndex`` to every plugin of the engine that accepts one
(``attach_exact_index``); call it again after a hot reload with the new engine.

```python
index = ExactPrefixIndex()
subscriber = KvEventSubscriber(index, sources_for(info for info in fleet_infos))
await subscriber.start()
attach(policy_engine, index)
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workers.kv_events.exact_index import ExactPrefixIndex
from workers.kv_events.subscriber import KvEventSource
from workers.models import WorkerInfo

REPLAY_LABEL = "kv_events_replay"
TOPIC_LABEL = "kv_events_topic"


def sources_for(workers: Iterable[WorkerInfo]) -> list[KvEventSource]:
    return [KvEventSource(info.id, info.kv_events_endpoint,
                          replay_endpoint=info.labels.get(REPLAY_LABEL),
                          topic=info.labels.get(TOPIC_LABEL, ""))
            for info in workers if info.kv_events_endpoint]


def attach(engine: Any, index: ExactPrefixIndex | None) -> int:
    """Give ``index`` to every plugin with ``attach_exact_index``; returns how many took it."""
    attached = 0
    for _path, _type_name, plugin in engine.plugins():
        hook = getattr(plugin, "attach_exact_index", None)
        if callable(hook):
            hook(index)
            attached += 1
    return attached
