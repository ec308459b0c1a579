"""Which base model each worker runs each of its LoRA adapters on, and the adapter names
loaded on workers of different base models.

vLLM ties an adapter to the base model of the engine that loaded it. Two workers of
different base models may each load an adapter under the same name (``sql-lora`` for a Llama
and for a Mistral): a request naming it can then be served by either model, and its
``/v1/models`` card (the router's union) names one parent. ``AdapterBases`` keeps, from each
worker's ``/v1/models``, adapter -> worker -> base model, and says which names clash, once
per clash, for the scraper to warn of.
"""

from __future__ import annotations

from collections.abc import Iterable


class AdapterBases:
    """adapter -> {worker: base model}, from the workers' ``/v1/models`` as read."""

    def __init__(self) -> None:
        self._by_adapter: dict[str, dict[str, str]] = {}
        self._by_worker: dict[str, tuple[str, ...]] = {}     # worker -> its adapters
        self._told: set[tuple[str, frozenset[str]]] = set()

    def read(self, worker: str, base: str, adapters: Iterable[str]) -> list[str]:
        """``worker`` runs ``adapters`` on ``base`` now; the adapter names of it that workers
        of another base model have loaded too and that were not told yet, each told once
        for its set of base models (a clash resolved and come back is told again)."""
        listed = tuple(sorted(set(adapters)))
        for gone in set(self._by_worker.get(worker, ())) - set(listed):
            workers = self._by_adapter.get(gone)
            if workers is not None:
                workers.pop(worker, None)
                if not workers:
                    del self._by_adapter[gone]
        self._by_worker[worker] = listed
        if not listed:
            del self._by_worker[worker]
        clashes: list[str] = []
        for adapter in listed:
            workers = self._by_adapter.setdefault(adapter, {})
            workers[worker] = base
            bases = frozenset(workers.values())
            if len(bases) > 1 and (adapter, bases) not in self._told:
                self._told.add((adapter, bases))
                clashes.append(adapter)
        if self._told:           # a clash resolved is told again should it come back
            self._told = {(adapter, bases) for adapter, bases in self._told
                          if len(set(self._by_adapter.get(adapter, {}).values())) > 1}
        return clashes

    def forget(self, worker: str) -> None:
        """``worker`` left the fleet."""
        self.read(worker, "", ())

    def workers_of(self, adapter: str) -> dict[str, str]:
        """The workers that have ``adapter`` loaded, each with its base model."""
        return dict(self._by_adapter.get(adapter, {}))
