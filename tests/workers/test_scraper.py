"""The fleet scraper: vLLM metric names old and new, garbage, failures, down and up again."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS
from workers.inflight import InflightTracker
from workers.models import LoraActivity, WorkerInfo, WorkerSnapshot
from workers.registry import WorkerRegistry
from workers.scraper import MetricsParseError, WorkerScraper, parse_metrics, parse_models
from workers.upstream import UpstreamClient

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared/reference/vllm-metrics-sample.txt"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

OLD_NAMES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
vllm:num_requests_waiting{model_name="m"} 4.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0
vllm:gpu_prefix_cache_hits_total{model_name="m"} 25.0
vllm:cache_config_info{block_size="32",num_gpu_blocks="1000"} 1.0
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",\
waiting_lora_adapters="x"} 1.7e9
"""

TWO_ENGINES = """\
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 5.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
"""


def test_parse_current_vllm_sample(shared_dir: Path) -> None:
    sample = parse_metrics((shared_dir / "reference/vllm-metrics-sample.txt").read_text())
    assert (sample.running, sample.waiting, sample.kv_usage) == (2, 1, 0.0213)
    assert (sample.block_size, sample.num_gpu_blocks) == (16, 29215)
    assert (sample.prefix_cache_queries, sample.prefix_cache_hits) == (6144.0, 2048.0)
    assert sample.num_preemptions == 0.0
    assert sample.lora_adapters == ()


def test_parse_old_vllm_names_and_lora_info() -> None:
    sample = parse_metrics(OLD_NAMES)
    assert (sample.running, sample.waiting, sample.kv_usage) == (3, 4, 0.5)
    assert (sample.prefix_cache_queries, sample.prefix_cache_hits) == (100.0, 25.0)
    assert (sample.block_size, sample.num_gpu_blocks) == (32, 1000)
    assert sample.lora_adapters == ("chat", "sql", "x")


def test_only_the_newest_lora_info_says_which_adapters_run() -> None:
    """vLLM writes a ``lora_requests_info`` series at each change, its value the time, and
    keeps the old ones: every adapter that ever ran stayed "loaded" for the router, which
    went on sending its requests to a worker that had unloaded it (the worker's 404)."""
    text = OLD_NAMES.split("vllm:lora_requests_info")[0] + (
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="fin",'
        'waiting_lora_adapters=""} 1.7e9\n'
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.8e9\n'
        'vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="sql",'
        'waiting_lora_adapters="chat"} 1.75e9\n'
        'vllm:lora_requests_info{engine="1",max_lora="2",running_lora_adapters="old",'
        'waiting_lora_adapters=""} 1.6e9\n')
    assert parse_metrics(text).lora_adapters == ("chat", "sql")
    # what runs and waits, for the lora-affinity scorer: each engine's newest series, their
    # limits summed (engine "" runs nothing now, engine 1 runs sql with chat waiting)
    assert parse_metrics(text).lora_activity == LoraActivity(
        running=frozenset({"sql"}), waiting=frozenset({"chat"}), max_loras=4)
    assert parse_metrics(TWO_ENGINES).lora_activity is None        # no LoRA reported
    unlimited = OLD_NAMES.replace('max_lora="2",', "")
    assert parse_metrics(unlimited).lora_activity == LoraActivity(
        running=frozenset({"sql", "chat"}), waiting=frozenset({"x"}), max_loras=None)


def test_parse_sums_engines_and_averages_kv_usage() -> None:
    sample = parse_metrics(TWO_ENGINES)
    assert (sample.running, sample.waiting) == (3, 5)
    assert sample.kv_usage == pytest.approx(0.3)
    assert sample.block_size is None and sample.num_gpu_blocks is None


@pytest.mark.parametrize("text", [
    "<html>oops</html>",
    "vllm:num_requests_running{model_name=\"m\" 3.0\n",
    "vllm:num_requests_running{model_name=\"m\"} 1.0\n",
    "",
], ids=["html", "broken labels", "missing gauges", "empty"])
def test_parse_garbage_raises(text: str) -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics(text)


def test_parse_models_reads_lengths_and_adapters() -> None:
    payload = {"object": "list", "data": [
        {"id": MODEL, "max_model_len": 8192, "parent": None},
        {"id": "alias", "max_model_len": 4096, "parent": None},
        {"id": "sql-lora", "max_model_len": None, "parent": MODEL}]}
    models = parse_models(payload, MODEL)
    assert models.served_models == (MODEL, "alias")
    assert models.lora_adapters == ("sql-lora",)
    assert models.max_model_len == 8192
    with pytest.raises(MetricsParseError):
        parse_models({"data": "nope"}, MODEL)


@dataclass
class _Worker:
    """An in-process worker whose /metrics answer the test switches."""

    mode: str = "good"
    models_calls: int = 0
    max_model_len: int = 4096
    hits: list[str] = field(default_factory=list)
    text: str | None = None          # the /metrics text, else the shared vLLM sample

    async def metrics(self, request: web.Request) -> web.Response:
        self.hits.append("metrics")
        if self.mode == "garbage":
            return web.Response(text="vllm:num_requests_running{{{ not prometheus\n")
        if self.mode == "error":
            return web.Response(status=500, text="boom")
        if self.mode == "slow":
            await asyncio.sleep(1.0)
        return web.Response(text=self.text if self.text is not None else SAMPLE.read_text())

    async def models(self, request: web.Request) -> web.Response:
        self.models_calls += 1
        if self.mode == "models-broken":
            return web.Response(status=500, text="boom")
        return web.json_response({"data": [{"id": MODEL, "max_model_len": self.max_model_len}]})


@pytest.fixture
async def worker() -> AsyncIterator[tuple[_Worker, str]]:
    state = _Worker()
    app = web.Application()
    app.router.add_get("/metrics", state.metrics)
    app.router.add_get("/v1/models", state.models)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield state, str(server.make_url("")).rstrip("/")
    await server.close()


def _info(url: str) -> WorkerInfo:
    return WorkerInfo(id="w0", url=url, gpu=BUILTIN_GPUS["h100"], models=(MODEL,),
                      model_spec=BUILTIN_MODELS["llama-3-8b"], price_per_hour=3.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def upstream_client() -> AsyncIterator[UpstreamClient]:
    client = UpstreamClient(connect_timeout_s=1.0, read_timeout_s=5.0)
    try:
        yield client
    finally:
        await client.close()


async def test_scraper_marks_down_after_threshold_and_up_on_recovery(
        worker: tuple[_Worker, str]) -> None:
    state, url = worker
    inflight = InflightTracker()
    registry = WorkerRegistry([_info(url)], inflight)
    clock = _Clock()
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=3, clock=clock)
        inflight.on_dispatch("w0", 10, 20)
        await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and snap.healthy and snap.scraped_at == 100.0
        assert (snap.running, snap.waiting, snap.max_model_len, snap.num_gpu_blocks) == (
            2, 1, 4096, 29215)
        assert inflight.get("w0").dispatched_since_scrape == 0

        state.mode = "garbage"
        for step, healthy in ((1, True), (2, True), (3, False)):
            clock.now += 0.2
            await scraper.scrape_once()
            snap = registry.snapshot("w0")
            assert snap is not None
            assert (snap.consecutive_failures, snap.healthy) == (step, healthy)
            assert snap.scraped_at == 100.0          # stale: last good numbers kept
            assert snap.error is not None and "unparsable" in snap.error
        view = registry.views(clock.now)[0]
        assert view.staleness_s == pytest.approx(0.6) and not view.healthy

        state.mode = "good"
        clock.now += 0.2
        await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and snap.healthy and snap.consecutive_failures == 0
        assert snap.error is None and snap.scraped_at == pytest.approx(100.8)
        # /v1/models once per models interval, and again after failed scrapes (the server
        # may be another engine now)
        assert state.models_calls == 2
        clock.now += 0.2
        await scraper.scrape_once()
        assert state.models_calls == 2


async def test_scraper_unreachable_worker_never_healthy() -> None:
    registry = WorkerRegistry([_info("http://127.0.0.1:9")], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=1.0,
                                models_interval_s=5.0, fail_threshold=3)
        await scraper.scrape_once()
    snap = registry.snapshot("w0")
    assert snap is not None and not snap.healthy and snap.consecutive_failures == 1
    assert math.isinf(registry.views(0.0)[0].staleness_s)


async def test_scraper_http_error_counts_as_failure(worker: tuple[_Worker, str]) -> None:
    state, url = worker
    state.mode = "error"
    registry = WorkerRegistry([_info(url)], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=1.0,
                                models_interval_s=5.0, fail_threshold=3)
        await scraper.scrape_once()
    snap = registry.snapshot("w0")
    assert snap is not None and snap.error is not None and "HTTP 500" in snap.error


def test_declared_gauges_without_samples_read_as_zero() -> None:
    text = ("# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_waiting gauge\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n")
    sample = parse_metrics(text)
    assert (sample.running, sample.waiting, sample.kv_usage) == (0, 0, 0.0)


async def test_run_loops_per_worker_so_a_slow_worker_delays_only_itself(
        worker: tuple[_Worker, str]) -> None:
    state, url = worker
    slow = web.Application()

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="")
    slow.router.add_get("/metrics", hang)
    server = TestServer(slow, host="127.0.0.1")
    await server.start_server()
    fast_info = _info(url)
    slow_info = dataclasses.replace(_info(str(server.make_url("")).rstrip("/")), id="slow")
    registry = WorkerRegistry([fast_info, slow_info], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.05, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=3)
        task = asyncio.create_task(scraper.run())
        await asyncio.sleep(0.5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await server.close()
    assert state.hits.count("metrics") >= 5        # not held back by the hanging worker
    assert registry.snapshot("slow") is None       # its first scrape has not even ended


async def test_slow_worker_stays_up_for_the_grace_period(worker: tuple[_Worker, str]) -> None:
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    clock = _Clock()
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=0.1,
                                models_interval_s=5.0, fail_threshold=3, slow_grace_s=10.0,
                                clock=clock)
        await scraper.scrape_once()
        state.mode = "slow"
        for at, healthy in ((101.0, True), (103.0, True), (105.0, True), (109.9, True),
                            (110.0, False)):
            clock.now = at
            await scraper.scrape_once()
            snap = registry.snapshot("w0")
            assert snap is not None and snap.healthy is healthy, at
            assert snap.error == "timed out" and snap.scraped_at == 100.0



@pytest.mark.parametrize("router_stalled", [False, True])
async def test_a_host_whose_connections_never_come_is_down_after_the_threshold(
        worker: tuple[_Worker, str], router_stalled: bool) -> None:
    """A scrape timing out means a busy worker, kept up for the grace period; one whose
    connection never came (its host gone, attempts unanswered: a busy server's kernel still
    takes connections) was taken for busy too, and a dead host stayed in rotation 10 s. But
    while the router's own loop stood still a connection that came times out all the same:
    that says nothing of the worker."""
    _, url = worker
    gone = socket.socket()          # a listener whose accept queue is full: connection
    gone.bind(("127.0.0.1", 0))     # attempts go unanswered, as to a host that is gone
    gone.listen(0)
    port = gone.getsockname()[1]
    queued = socket.create_connection(("127.0.0.1", port))
    seen = WorkerRegistry([_info(url)], InflightTracker())
    registry = WorkerRegistry([_info(f"http://127.0.0.1:{port}")], InflightTracker())
    clock = _Clock()
    client = UpstreamClient(connect_timeout_s=0.05, read_timeout_s=5.0)
    try:
        await WorkerScraper(seen, client, interval_s=0.2, timeout_s=0.2, models_interval_s=5.0,
                            fail_threshold=3, clock=clock).scrape_once()
        good = seen.snapshot("w0")
        assert good is not None and good.healthy
        registry.update(good, fresh=True)        # the worker as last scraped, then gone
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=0.2,
                                models_interval_s=5.0, fail_threshold=3, slow_grace_s=10.0,
                                clock=clock, stalled_since=lambda since: router_stalled)
        healthy = []
        for at in (100.2, 100.4, 100.6):
            clock.now = at
            await scraper.scrape_once()
            snap = registry.snapshot("w0")
            assert snap is not None and "no connection to" in snap.error, snap.error
            healthy.append(snap.healthy)
    finally:
        await client.close()
        queued.close()
        gone.close()
    # down at the third failure, not after 10 s (unless the router stalled)
    assert healthy == [True, True, router_stalled]


async def test_an_engine_that_restarted_is_reported_lost(
        worker: tuple[_Worker, str]) -> None:
    """What the router knew of its cache must go when its engine restarted (a restarted
    engine was taken for the cache of the one before it), and only then: a worker that was
    unreachable for a while and comes back with its counters keeps what is known."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    lost: list[str] = []
    original = SAMPLE.read_text()
    restarted = "\n".join(line for line in original.splitlines()
                          if not line.startswith("vllm:prefix_cache_"))
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=2,
                                on_engine_lost=lost.append)
        await scraper.scrape_once()
        state.mode = "error"                 # down ...
        for _ in range(3):
            await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and not snap.healthy
        state.mode = "good"                  # ... and back, the same engine: kept
        await scraper.scrape_once()
        assert lost == []
        state.text = restarted               # a restart within the failure threshold
        await scraper.scrape_once()
        assert lost == ["w0"]
        state.text = original                # counting again
        await scraper.scrape_once()
        state.mode = "error"                 # down, then back as a new engine
        for _ in range(3):
            await scraper.scrape_once()
        assert lost == ["w0"]
        state.mode, state.text = "good", restarted
        await scraper.scrape_once()
        assert lost == ["w0", "w0"]
        await scraper.scrape_once()          # the same new engine: once
        assert lost == ["w0", "w0"]


async def test_a_restarted_engines_window_is_read_at_once(
        worker: tuple[_Worker, str]) -> None:
    """A worker restarted with a smaller window kept its former one in the router for up to
    the models interval: requests that fit the old one got the new engine's 400."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    original = SAMPLE.read_text()
    restarted = "\n".join(line for line in original.splitlines()
                          if not line.startswith("vllm:prefix_cache_"))
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=60.0, fail_threshold=2)
        await scraper.scrape_once()
        state.text, state.max_model_len = restarted, 1024     # back between two scrapes
        await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and snap.max_model_len == 1024
        state.text, state.max_model_len = original, 2048      # down, then back, once more
        state.mode = "error"
        await scraper.scrape_once()
        state.mode = "good"
        await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and snap.max_model_len == 2048


async def warnings_over_three_model_reads(infos: list[WorkerInfo],
                                         caplog: pytest.LogCaptureFixture,
                                         about: str) -> list[str]:
    """The scraper's warnings saying ``about`` over three scrapes of ``infos``, each reading
    their ``/v1/models`` again."""
    registry = WorkerRegistry(infos, InflightTracker())
    clock = _Clock()
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=1.0, fail_threshold=3, clock=clock)
        with caplog.at_level("WARNING", logger="workers.scraper"):
            for _ in range(3):
                await scraper.scrape_once()
                clock.now += 2.0                 # /v1/models read again each time
    return [r.getMessage() for r in caplog.records if about in r.getMessage()]


async def test_a_worker_serving_other_names_than_the_fleet_files_is_logged_once(
        worker: tuple[_Worker, str], caplog: pytest.LogCaptureFixture) -> None:
    """It was taken silently: healthy, sent the other name's traffic, and a request for the
    fleet file's name got a 503 saying only 'filtered out by model'."""
    import dataclasses

    state, url = worker
    misnamed = dataclasses.replace(_info(url), models=("tiny-chat",))
    warnings = await warnings_over_three_model_reads([misnamed], caplog,
                                                     "fleet file's models")
    assert warnings == [f"worker w0 serves {MODEL}, none of the fleet file's models for it "
                        f"(tiny-chat): requests for those will not go there; requests for "
                        f"{MODEL} will. Give the fleet file the names it serves, or start it "
                        "with --served-model-name"]
    assert state.models_calls == 3


async def test_follow_registry_starts_and_stops_loops_as_the_fleet_changes(
        worker: tuple[_Worker, str]) -> None:
    """A reloaded fleet file: a new worker is scraped at once, a removed one no more."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.05, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=3)
        task = asyncio.create_task(scraper.run())
        try:
            await asyncio.sleep(0.2)
            assert registry.snapshot("w0") is not None
            w0_loop = scraper._loops["w0"][1]
            relabelled = dataclasses.replace(_info(url), labels={"zone": "b"})
            registry.replace([relabelled])        # the same server: its loop goes on
            scraper.follow_registry()
            assert scraper._loops["w0"][1] is w0_loop and not w0_loop.done()
            second = dataclasses.replace(_info(url), id="w1")
            registry.replace([second])
            scraper.follow_registry()
            await asyncio.sleep(0)
            assert w0_loop.done()
            await asyncio.sleep(0.2)
            snapshot = registry.snapshot("w1")
            assert snapshot is not None and snapshot.healthy
            hits = len(state.hits)
            await asyncio.sleep(0.2)
            # one worker scraped every 50 ms: about 4 more (fewer on a loaded machine), not 8
            assert 1 <= len(state.hits) - hits <= 6          # (the removed one stopped)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert scraper._loops == {}


async def test_probe_snapshots_new_servers_without_storing_them(
        worker: tuple[_Worker, str]) -> None:
    """A reloaded fleet's new servers, scraped once before the registry takes them."""
    _, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=60.0, timeout_s=2.0,
                                models_interval_s=60.0, fail_threshold=3)
        new = dataclasses.replace(_info(url), id="new")
        gone = dataclasses.replace(_info("http://127.0.0.1:1"), id="down")
        probed = await scraper.probe([new, gone])
    assert set(probed) == {"new"} and probed["new"].healthy
    assert probed["new"].max_model_len == 4096          # its own /v1/models, read
    assert registry.snapshot("new") is None             # not stored: the caller's to take
    registry.replace([_info(url), new], probed)
    assert [v.healthy for v in registry.views(probed["new"].scraped_at)] == [False, True]


async def test_a_failed_read_of_models_after_a_failed_scrape_keeps_the_last(
        worker: tuple[_Worker, str]) -> None:
    """Read again after a failed scrape, a /v1/models that failed too left the worker with
    no window and no adapters (its last answer dropped) until a read succeeded."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=60.0, fail_threshold=3)
        await scraper.scrape_once()
        state.mode = "error"
        await scraper.scrape_once()
        state.mode = "models-broken"                    # /metrics back, /v1/models failing
        await scraper.scrape_once()
        snap = registry.snapshot("w0")
        assert snap is not None and snap.healthy and snap.max_model_len == 4096
        assert state.models_calls == 2                  # read again, in vain



async def test_a_snapshot_says_when_its_engine_last_generated(
        worker: tuple[_Worker, str]) -> None:
    """``generated_at``: when a scrape last saw ``vllm:generation_tokens_total`` move (the
    stall watch tells a busy engine from a hung one by it); unknown at the first scrape."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    clock = _Clock()
    original = SAMPLE.read_text()
    assert 'vllm:generation_tokens_total{engine="0"' in original
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=3, clock=clock)

        async def scraped(text: str) -> WorkerSnapshot:
            state.text = text
            clock.now += 1.0
            await scraper.scrape_once()
            snapshot = registry.snapshot("w0")
            assert snapshot is not None
            return snapshot

        first = await scraped(original)
        assert first.generation_tokens == 612.0 and first.generated_at is None
        assert (await scraped(original)).generated_at is None          # still
        moved = original.replace(" 612.0", " 700.0")
        assert (await scraped(moved)).generated_at == 103.0
        assert (await scraped(moved)).generated_at == 103.0            # still since
        running = f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}}'
        idle = moved.replace(" 700.0", " 800.0").replace(f"{running} 2.0", f"{running} 0.0")
        assert f"{running} 0.0" in idle
        assert (await scraped(idle)).generated_at == 103.0     # risen, nothing running now
        restarted = original.replace(" 612.0", " 5.0")                  # counting anew
        assert (await scraped(restarted)).generated_at == 103.0         # a fall: no token
        state.mode = "error"                                            # a failed scrape
        assert (await scraped(moved)).generated_at == 103.0
        state.mode = "good"
        assert (await scraped(moved)).generated_at == 108.0             # 5 -> 700


async def test_the_first_good_scrape_after_failed_ones_says_nothing_moved(
        worker: tuple[_Worker, str]) -> None:
    """After a first scrape that failed (its placeholder counts 0 tokens), the first good
    one read as the engine generating: a hung engine got 120 s more."""
    state, url = worker
    registry = WorkerRegistry([_info(url)], InflightTracker())
    async with upstream_client() as client:
        scraper = WorkerScraper(registry, client, interval_s=0.2, timeout_s=2.0,
                                models_interval_s=5.0, fail_threshold=3)
        state.mode = "error"
        await scraper.scrape_once()
        state.mode = "good"
        await scraper.scrape_once()
        snapshot = registry.snapshot("w0")
        assert snapshot is not None and snapshot.healthy and snapshot.generated_at is None


async def test_an_adapter_name_loaded_on_two_base_models_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """Two workers of different base models each loading an adapter under one name: a
    request naming it went to either, answered by either model, with no word of it."""
    import dataclasses

    from workers.emulator.process import EmulatorProcess

    adapters = {"lora_adapters": {"sql-lora": "/adapters/sql-lora"}}
    with EmulatorProcess(gpu="h100", time_scale=0.0, served_model_names=["llama"],
                         emulate=adapters) as llama, \
            EmulatorProcess(gpu="h100", time_scale=0.0, served_model_names=["mistral"],
                            emulate=adapters) as mistral:
        infos = [dataclasses.replace(_info(llama.url), id="llama-0", models=("llama",)),
                 dataclasses.replace(_info(mistral.url), id="mistral-0", models=("mistral",))]
        warnings = await warnings_over_three_model_reads(infos, caplog, "LoRA adapter")
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        "LoRA adapter sql-lora is loaded on workers of different base models (llama on "
        "llama-0; mistral on mistral-0)"), warnings
