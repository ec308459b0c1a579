"""The garbage collector's pauses of the router process, as ``kvroute_gc_pause_seconds``.

The router serves every connection from one event loop, and while CPython's collector runs
nothing else does: a young collection walks the objects made since the last one, a full one
every tracked container still alive. ``GcPauses`` hooks ``gc.callbacks`` to time each
collection, from its start to its end, and records the time in a histogram labelled by
generation (``0``, ``1``, ``2``), so an operator sees how long and how often the loop stood
still for it. It is installed while the app runs (``router.app``) and removed at shutdown.

A collection can start in any thread that allocates (an offloaded tokenizer's too), but two
never overlap, and the hook is the histogram's only writer.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from router.loop_metrics import HistogramCell, LoopHistogram

GENERATIONS = ("0", "1", "2")


class GcPauses:
    """Times every garbage collection into ``histogram`` (labelled ``generation``)."""

    __slots__ = ("_cells", "_started")

    def __init__(self, histogram: LoopHistogram) -> None:
        self._cells: tuple[HistogramCell, ...] = tuple(histogram.labels(g) for g in GENERATIONS)
        self._started = 0.0

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def remove(self) -> None:
        while self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._cells[info["generation"]].observe(time.perf_counter() - self._started)
