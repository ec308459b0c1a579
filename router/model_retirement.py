"""Forgetting the model names no worker serves any more.

The router keeps series and statistics per model name: ``kvroute_requests_total``, the
clients' TTFT and duration histograms, the output-length prediction ratio, and the
``output-length`` producer's means. A LoRA adapter is a model name, and a fleet that loads
adapters at run time (one per customer, loaded and unloaded through vLLM's
``/v1/load_lora_adapter``) names new ones for ever: 50 adapters loaded, used and unloaded
left some 43 series each behind, for the life of the process.

``ModelRetirement.sweep`` compares the names the router holds series of (``held``:
``RouterMetrics.model_names``) with what the fleet serves now (``known``:
``WorkerRegistry.known_models``, the declared models and what each worker's last
``/v1/models`` lists); a held name unknown for ``grace_s`` (an adapter reloaded at once, or a
scrape that missed it, keeps its series) is forgotten: its series removed (what the TSDB
scraped stays there) and each plugin with a ``forget_model(name)`` told. Requests for it
later are counted as any unknown model's. It sweeps every ``interval_s`` while the app runs
(``router.app``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from workers.task_cancel import cancel_and_wait

log = logging.getLogger(__name__)

INTERVAL_S = 10.0
GRACE_S = 60.0


class ModelRetirement:
    """Forgets, through ``forget``, each model name the fleet stopped serving ``grace_s``
    ago."""

    __slots__ = ("_absent_since", "_clock", "_forget", "_held", "_known", "_task",
                 "grace_s", "interval_s")

    def __init__(self, held: Callable[[], Iterable[str]], known: Callable[[], Iterable[str]],
                 forget: Callable[[str], None], grace_s: float = GRACE_S,
                 interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._held = held
        self._known = known
        self._forget = forget
        self.grace_s = grace_s
        self.interval_s = interval_s
        self._clock = clock
        self._absent_since: dict[str, float] = {}     # held, unknown since
        self._task: asyncio.Task[None] | None = None

    def sweep(self) -> list[str]:
        """One comparison; returns the names forgotten now."""
        now = self._clock()
        unknown = set(self._held()) - set(self._known())
        absent_since = self._absent_since = {
            name: self._absent_since.get(name, now) for name in unknown}
        forgotten = sorted(name for name, since in absent_since.items()
                           if now - since >= self.grace_s)
        for name in forgotten:
            del absent_since[name]
            try:
                self._forget(name)
            except Exception:
                log.exception("forgetting model %r failed", name)
        if forgotten:
            log.info("no worker serves %s any more: its series and statistics are dropped",
                     ", ".join(forgotten))
        return forgotten

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="model-retirement")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            self.sweep()
            await asyncio.sleep(self.interval_s)
