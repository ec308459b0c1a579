"""Router state shared by the request path: the ``StateStore`` protocol and its stores."""

from router.state.memory_store import MemoryStateStore
from router.state.redis_store import RedisStateStore
from router.state.store import StateStore

__all__ = ["MemoryStateStore", "RedisStateStore", "StateStore"]
