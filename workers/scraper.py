"""Polls every worker's ``/metrics`` (and, less often, ``/v1/models``) into snapshots.

Reads vLLM's metric names old and new (``kv_cache_usage_perc`` / ``gpu_cache_usage_perc``,
``prefix_cache_*`` / ``gpu_prefix_cache_*``), ``cache_config_info`` for ``block_size`` and
``num_gpu_blocks``, and ``lora_requests_info`` for adapters. A failed or unparsable scrape
keeps the last good numbers (their staleness grows) and counts a failure; after
``fail_threshold`` consecutive failures the worker is marked down, and the next good scrape
brings it back. A scrape that times out means a busy worker, not a dead one: it stays up
until its last good scrape is ``slow_grace_s`` old; one whose connection never came (a busy
server's kernel still takes connections: its host or address is gone) counts as a failure.
Nothing a worker sends can crash the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from workers.adapter_bases import AdapterBases
from workers.exposition import ExpositionError, parse_sample_line
from workers.models import LoraActivity, WorkerInfo, WorkerSnapshot
from workers.registry import WorkerRegistry, same_server
from workers.upstream import (
    UpstreamClient,
    UpstreamConnectTimeout,
    UpstreamError,
    UpstreamLocalError,
)

log = logging.getLogger(__name__)

# Lines we parse; every other line of the exposition is skipped before parsing (cheaper).
_WANTED = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_", "vllm:gpu_prefix_cache_",
    "vllm:num_preemptions", "vllm:cache_config_info", "vllm:lora_requests_info",
    "vllm:generation_tokens_total",
)
_KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def _declared(text: str, name: str) -> bool:
    return f"# TYPE {name} " in text


class MetricsParseError(ValueError):
    """The body is not a usable vLLM metrics exposition."""


class ScrapeStatusError(MetricsParseError):
    """The worker answered a poll with a status other than 200."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(f"GET {url}: HTTP {status}")
        self.status = status


@dataclass(frozen=True, slots=True)
class MetricsSample:
    running: int
    waiting: int
    kv_usage: float
    block_size: int | None
    num_gpu_blocks: int | None
    prefix_cache_queries: float
    prefix_cache_hits: float
    num_preemptions: float
    lora_adapters: tuple[str, ...]
    generation_tokens: float = 0.0
    lora_activity: LoraActivity | None = None


@dataclass(frozen=True, slots=True)
class ModelsSample:
    served_models: tuple[str, ...]
    lora_adapters: tuple[str, ...]
    max_model_len: int
    lora_paths: tuple[tuple[str, str], ...] = ()    # (adapter, its card's root: its path)


def _metric_name(sample_name: str) -> str:
    return sample_name[:-6] if sample_name.endswith("_total") else sample_name


def _as_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_metrics(text: str) -> MetricsSample:
    """Parse the vLLM gauges and counters the router uses (summed over engines)."""
    totals: dict[str, float] = {}
    kv_values: list[float] = []
    block_size: int | None = None
    num_blocks: int | None = None
    # vllm:lora_requests_info: a series per update (its value the update's unix time), the
    # old ones kept; the newest of each engine says which adapters are running and waiting
    newest_lora: dict[str, tuple[float, Mapping[str, str]]] = {}
    try:
        samples = [parse_sample_line(line) for line in text.splitlines()
                   if line.startswith(_WANTED)]
        for sample in samples:
            name = _metric_name(sample.name)
            if name.endswith("_created") or math.isnan(sample.value):
                continue
            if name in _KV_NAMES:
                kv_values.append(sample.value)
            elif name == "vllm:cache_config_info":
                labels = sample.labels()
                block_size = block_size or _as_int(labels.get("block_size"))
                blocks = _as_int(labels.get("num_gpu_blocks"))
                if blocks is not None:
                    num_blocks = (num_blocks or 0) + blocks
            elif name == "vllm:lora_requests_info":
                labels = sample.labels()
                engine = labels.get("engine", "")
                if engine not in newest_lora or sample.value >= newest_lora[engine][0]:
                    newest_lora[engine] = (sample.value, labels)
            else:
                key = name.replace("vllm:gpu_prefix_cache_", "vllm:prefix_cache_")
                totals[key] = totals.get(key, 0.0) + sample.value
    except ExpositionError as exc:
        raise MetricsParseError(f"unparsable metrics: {exc}") from exc
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        if name not in totals and _declared(text, name):
            totals[name] = 0.0          # declared, no sample yet: nothing has run
    if not kv_values and any(_declared(text, n) for n in _KV_NAMES):
        kv_values.append(0.0)
    if ("vllm:num_requests_running" not in totals or "vllm:num_requests_waiting" not in totals
            or not kv_values):
        raise MetricsParseError("no vLLM load metrics (num_requests_running, "
                                "num_requests_waiting, kv_cache_usage_perc) in /metrics")
    lora = _lora_activity([labels for _, labels in newest_lora.values()])
    return MetricsSample(
        running=int(totals["vllm:num_requests_running"]),
        waiting=int(totals["vllm:num_requests_waiting"]),
        kv_usage=min(1.0, max(0.0, sum(kv_values) / len(kv_values))),
        block_size=block_size, num_gpu_blocks=num_blocks,
        prefix_cache_queries=totals.get("vllm:prefix_cache_queries", 0.0),
        prefix_cache_hits=totals.get("vllm:prefix_cache_hits", 0.0),
        num_preemptions=totals.get("vllm:num_preemptions", 0.0),
        lora_adapters=tuple(sorted(lora.running | lora.waiting)) if lora is not None else (),
        generation_tokens=totals.get("vllm:generation_tokens", 0.0),
        lora_activity=lora)


def _adapters(labels: Mapping[str, str], key: str) -> frozenset[str]:
    return frozenset(adapter for adapter in labels.get(key, "").split(",") if adapter)


def _lora_activity(engines: list[Mapping[str, str]]) -> LoraActivity | None:
    """The adapters running and waiting over a worker's engines, and how many may run at
    once (the engines' ``max_lora`` summed; None when one does not say)."""
    if not engines:
        return None
    limits = [_as_int(labels.get("max_lora")) for labels in engines]
    return LoraActivity(
        running=frozenset().union(*(_adapters(e, "running_lora_adapters") for e in engines)),
        waiting=frozenset().union(*(_adapters(e, "waiting_lora_adapters") for e in engines)),
        max_loras=None if any(n is None for n in limits) else sum(
            n for n in limits if n is not None))


def parse_models(payload: Any, default_model: str) -> ModelsSample:
    """Read served names, adapters and ``max_model_len`` from a ``/v1/models`` body."""
    cards = payload.get("data") if isinstance(payload, Mapping) else None
    if not isinstance(cards, list):
        raise MetricsParseError("/v1/models: no data list")
    served: list[str] = []
    adapters: list[str] = []
    paths: list[tuple[str, str]] = []
    lengths: dict[str, int] = {}
    for card in cards:
        if not isinstance(card, Mapping) or not isinstance(card.get("id"), str):
            continue
        if card.get("parent"):
            adapters.append(card["id"])
            if isinstance(card.get("root"), str):      # vLLM: the adapter's path
                paths.append((card["id"], card["root"]))
            continue
        served.append(card["id"])
        length = card.get("max_model_len")
        if isinstance(length, int) and not isinstance(length, bool):
            lengths[card["id"]] = length
    max_len = lengths.get(default_model) or max(lengths.values(), default=0)
    return ModelsSample(tuple(served), tuple(adapters), max_len, tuple(paths))


class WorkerScraper:
    """One polling loop over all workers of a registry."""

    def __init__(self, registry: WorkerRegistry, client: UpstreamClient, *,
                 interval_s: float, timeout_s: float, models_interval_s: float,
                 fail_threshold: int, slow_grace_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_engine_lost: Callable[[str], None] | None = None,
                 stalled_since: Callable[[float], bool] | None = None) -> None:
        """``on_engine_lost(worker id)``: the worker's prefix-cache counters went back since
        its last good scrape (its engine restarted, whether or not it was marked down
        meanwhile): what was known of its cache is gone. A worker that was only unreachable
        for a while comes back with its counters where they were, and keeps what is known.
        ``stalled_since(t)``: whether this process stalled since ``t`` (on ``clock``): a
        connection that came while the loop stood still timed out all the same, and says
        nothing of the worker (``router.loop_lag``)."""
        self._registry = registry
        self._stalled_since = stalled_since
        self._on_engine_lost = on_engine_lost
        self._client = client
        self._interval = interval_s
        self._timeout_s = timeout_s        # for a whole GET, connect to last byte
        self._models_interval = models_interval_s
        self._local_failures = 0           # scrapes the router's own limits refused
        self._fail_threshold = fail_threshold
        self._slow_grace = slow_grace_s
        self._clock = clock
        self._models: dict[str, tuple[float, ModelsSample]] = {}
        self._refused: set[str] = set()      # workers whose refusal was logged
        self._misnamed: dict[str, tuple[str, ...]] = {}   # worker -> served names, as logged
        self._adapter_bases = AdapterBases()       # for the adapter names two base models use
        self._loops: dict[str, tuple[WorkerInfo, asyncio.Task[None]]] = {}   # while running
        self._running = False

    async def run(self) -> None:
        """Scrape forever (until cancelled): one loop per worker, so a slow worker delays
        only its own snapshots."""
        self._running = True
        try:
            self.follow_registry()
            await asyncio.get_running_loop().create_future()     # until cancelled
        finally:
            self._running = False
            loops = [task for _info, task in self._loops.values()]
            self._loops.clear()
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    def follow_registry(self) -> None:
        """Scrape the registry's workers as they are now (after a reloaded fleet file): a
        loop starts for each new worker or another server under an id, scraping it at once,
        and the loop of each removed one or former server stops (a scrape it has under way
        is dropped); a worker of the same server (relabelled, or declared as before) keeps
        its loop. No-op unless ``run`` is running."""
        if not self._running:
            return
        current = {info.id: info for info in self._registry.infos}
        for worker_id, (info, task) in list(self._loops.items()):
            now = current.get(worker_id)
            if now is None or not same_server(info, now):
                task.cancel()
                del self._loops[worker_id]
                self._models.pop(worker_id, None)
                self._refused.discard(worker_id)
                self._misnamed.pop(worker_id, None)
                self._adapter_bases.forget(worker_id)
        for worker_id, info in current.items():
            if worker_id not in self._loops:
                self._loops[worker_id] = (info, asyncio.get_running_loop().create_task(
                    self._loop(info), name=f"kvroute-scrape:{worker_id}"))

    async def _loop(self, info: WorkerInfo) -> None:
        while True:
            started = self._clock()
            await self._scrape(info)
            await asyncio.sleep(max(0.0, self._interval - (self._clock() - started)))

    async def scrape_once(self) -> None:
        await asyncio.gather(*(self._scrape(info) for info in self._registry.infos))

    async def _scrape(self, info: WorkerInfo) -> None:
        now = self._clock()
        try:
            text = await self._get_text(f"{info.url}/metrics")
            sample = parse_metrics(text)
            models = await self._models_of(info, now)
        except UpstreamLocalError as exc:      # the router's own limit: the worker is as it was
            self._local_failures += 1
            if self._local_failures % 1000 == 1:
                log.warning("worker %s: not scraped for want of the router's own resources "
                            "(%s; %d time(s) so far); its last snapshot stands", info.id, exc,
                            self._local_failures)
            return
        except UpstreamConnectTimeout as exc:     # no connection: gone, not busy
            self._record_failure(info, now, _describe(exc), slow=(
                self._stalled_since is not None and self._stalled_since(now)))
            return
        except TimeoutError:
            self._record_failure(info, now, "timed out", slow=True)
            return
        except (UpstreamError, OSError, MetricsParseError, orjson.JSONDecodeError,
                UnicodeDecodeError) as exc:
            self._record_failure(info, now, _describe(exc), slow=False)
            return
        prev = self._registry.snapshot(info.id)
        if prev is not None and not prev.healthy:
            log.info("worker %s: scrape succeeded again; healthy", info.id)
        # its last good scrape's counters (a failed scrape keeps them): lower, a new engine
        if prev is not None and sample.prefix_cache_queries < prev.prefix_cache_queries:
            log.warning("worker %s: its prefix-cache counters went back (%g < %g): its engine "
                        "restarted, with an empty cache", info.id,
                        sample.prefix_cache_queries, prev.prefix_cache_queries)
            if self._on_engine_lost is not None:
                self._on_engine_lost(info.id)
            cached = self._models.get(info.id)
            if cached is not None and cached[0] != now:    # (not read in this scrape)
                self._read_models_again(info.id)           # its window and adapters, now
                models = await self._models_of(info, now)
        self._registry.update(self._snapshot(info, now, sample, models, prev), fresh=True)

    async def probe(self, infos: Sequence[WorkerInfo]) -> dict[str, WorkerSnapshot]:
        """One scrape of each of these workers, at once, not stored: the snapshots of those
        that answered. A reloaded fleet's new servers are probed before the registry takes
        them (with these snapshots), so one replacing another serves from the reload on:
        taken unscraped, it was unhealthy until its loop's first scrape, and a fleet whose
        every worker was replaced answered 503 meanwhile."""
        async def once(info: WorkerInfo) -> WorkerSnapshot | None:
            now = self._clock()
            try:
                sample = parse_metrics(await self._get_text(f"{info.url}/metrics"))
            except (TimeoutError, UpstreamError, OSError, MetricsParseError,
                    UnicodeDecodeError):
                return None      # its loop's first scrape says what is wrong
            models: ModelsSample | None = None      # as a scrape: the fleet file's meanwhile
            # not through the models cache: it may hold another server's, by id
            with contextlib.suppress(TimeoutError, UpstreamError, OSError, MetricsParseError,
                                     orjson.JSONDecodeError):
                models = parse_models(orjson.loads(await self._get_bytes(
                    f"{info.url}/v1/models")), info.models[0])
            return self._snapshot(info, now, sample, models, None)

        found = await asyncio.gather(*(once(info) for info in infos))
        return {snapshot.worker_id: snapshot for snapshot in found if snapshot is not None}

    def _snapshot(self, info: WorkerInfo, now: float, sample: MetricsSample,
                  models: ModelsSample | None, prev: WorkerSnapshot | None) -> WorkerSnapshot:
        # the adapters registered (/v1/models: loaded at start, at run time or on demand);
        # vLLM's lora_requests_info only when those cannot be read: its newest series may
        # name an adapter unloaded since, while the engine has been idle
        adapters = set(models.lora_adapters if models is not None else sample.lora_adapters)
        adapters -= self._registry.unloaded_adapters(info.id)   # (a cached read lists them)
        return WorkerSnapshot(
            worker_id=info.id, healthy=True, scraped_at=now, running=sample.running,
            waiting=sample.waiting, kv_usage=sample.kv_usage,
            block_size=sample.block_size or (prev.block_size if prev else 16),
            num_gpu_blocks=sample.num_gpu_blocks or (prev.num_gpu_blocks if prev else 0),
            max_model_len=models.max_model_len if models else 0,
            served_models=models.served_models if models else (),
            lora_adapters=tuple(sorted(adapters)),
            lora_paths=models.lora_paths if models else (),
            lora_activity=sample.lora_activity,
            prefix_cache_queries=sample.prefix_cache_queries,
            prefix_cache_hits=sample.prefix_cache_hits,
            num_preemptions=sample.num_preemptions,
            generation_tokens=sample.generation_tokens,
            # generating now: requests running, the counter risen since a good scrape (not
            # the first, nor a restarted engine's fall; an engine that takes each request's
            # first token and hangs runs nothing between them)
            generated_at=(now if prev is not None and math.isfinite(prev.scraped_at)
                          and sample.running > 0
                          and sample.generation_tokens > prev.generation_tokens
                          else prev.generated_at if prev is not None else None))

    def _record_failure(self, info: WorkerInfo, now: float, error: str, slow: bool) -> None:
        """Count a failed scrape. A worker that answers too slowly is busy, not gone: it
        stays up (its numbers growing stale) for ``slow_grace_s`` after its last good scrape;
        one that refuses or answers garbage goes down after ``fail_threshold`` failures."""
        # a server that failed a scrape may come back as another engine (a restart with a
        # smaller window)
        self._read_models_again(info.id)
        prev = self._registry.snapshot(info.id)
        if prev is None:
            snap = WorkerSnapshot(worker_id=info.id, healthy=False, scraped_at=-math.inf,
                                  consecutive_failures=1, error=error)
        else:
            failures = prev.consecutive_failures + 1
            if slow:
                still_up = now - prev.scraped_at < self._slow_grace
            else:
                still_up = failures < self._fail_threshold
            snap = replace(prev, healthy=prev.healthy and still_up,
                           consecutive_failures=failures, error=error)
        if snap.healthy != (prev.healthy if prev else False) or prev is None:
            log.warning("worker %s: scrape failed (%s); healthy=%s", info.id, error,
                        snap.healthy)
        self._registry.update(snap, fresh=False)

    def _read_models_again(self, worker_id: str) -> None:
        """What ``/v1/models`` said is read again at the worker's next ``_models_of``; kept
        meanwhile, for when that read fails."""
        cached = self._models.get(worker_id)
        if cached is not None:
            self._models[worker_id] = (-math.inf, cached[1])

    async def _models_of(self, info: WorkerInfo, now: float) -> ModelsSample | None:
        cached = self._models.get(info.id)
        stale = bool(self._registry.unloaded_adapters(info.id))
        if cached is not None and now - cached[0] < self._models_interval and not stale:
            return cached[1]
        try:
            body = await self._get_bytes(f"{info.url}/v1/models")
            sample = parse_models(orjson.loads(body), info.models[0])
        except (TimeoutError, UpstreamError, OSError, MetricsParseError,
                orjson.JSONDecodeError) as exc:
            if isinstance(exc, ScrapeStatusError) and exc.status in (401, 403):
                self._warn_refused(info, exc.status)
            log.debug("worker %s: /v1/models failed: %s", info.id, _describe(exc))
            return cached[1] if cached else None
        self._models[info.id] = (now, sample)
        self._registry.models_read(info.id)
        self._check_names(info, sample.served_models)
        self._check_adapter_bases(info, sample)
        return sample

    def _check_adapter_bases(self, info: WorkerInfo, sample: ModelsSample) -> None:
        """Once per clash: an adapter name loaded on workers of different base models (the
        requests naming it are served by either model)."""
        base = sample.served_models[0] if sample.served_models else info.models[0]
        for adapter in self._adapter_bases.read(info.id, base, sample.lora_adapters):
            by_base: dict[str, list[str]] = {}
            for worker, on in sorted(self._adapter_bases.workers_of(adapter).items()):
                by_base.setdefault(on, []).append(worker)
            log.warning(
                "LoRA adapter %s is loaded on workers of different base models (%s): a "
                "request naming it may be served by any of them; give each base model's "
                "adapter a name of its own (a routing rule naming the base model with it, "
                "then: {model: ..., adapter: ...}, keeps to that model's workers)", adapter,
                "; ".join(f"{on} on {', '.join(workers)}" for on, workers in by_base.items()))

    def _check_names(self, info: WorkerInfo, served: tuple[str, ...]) -> None:
        """Once per change: a worker serving none of the fleet file's names for it (its
        ``--served-model-name`` differs) takes no request for them, and the router's 503
        says only that every worker was filtered out by model."""
        if not served or set(served) & set(info.models):
            self._misnamed.pop(info.id, None)
            return
        if self._misnamed.get(info.id) == served:
            return
        self._misnamed[info.id] = served
        log.warning("worker %s serves %s, none of the fleet file's models for it (%s): "
                    "requests for those will not go there; requests for %s will. Give the "
                    "fleet file the names it serves, or start it with --served-model-name",
                    info.id, ", ".join(served), ", ".join(info.models), ", ".join(served))

    def _warn_refused(self, info: WorkerInfo, status: int) -> None:
        """Once per worker: a worker started with ``--api-key`` refuses the router's
        ``/v1/models`` polls (and every request) unless the fleet file gives its key."""
        if info.id in self._refused:
            return
        self._refused.add(info.id)
        how = ("its key (api_key_env) is not the one it was started with"
               if info.api_key_env else "give its key with api_key_env in the fleet file")
        log.warning("worker %s: /v1/models answered HTTP %d: the worker asks for an API key; "
                    "%s. Until then the router goes by the fleet file's models and "
                    "max_model_len, and sees only the LoRA adapters /metrics reports as "
                    "running.", info.id, status, how)

    async def _get_bytes(self, url: str) -> bytes:
        async with asyncio.timeout(self._timeout_s):
            response = await self._client.get(url)
            try:
                if response.status != 200:
                    raise ScrapeStatusError(url, response.status)
                return await response.read()
            finally:
                response.close()

    async def _get_text(self, url: str) -> str:
        return (await self._get_bytes(url)).decode("utf-8")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 200 else text[:197] + "..."

