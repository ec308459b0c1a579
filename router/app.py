"""``create_app(settings)``: builds the whole router; ``start_router`` / ``run_router`` serve it.

Nothing lives in module globals: every component is created here, kept in a typed
``web.AppKey`` (``router.keys``) and, when it owns a resource, opened and closed by one
``cleanup_ctx`` generator (state store; client session, scraper and director; policy reloader;
the garbage-collection pause hook; the one-line log of requests the HTTP parser refuses;
the KV-event feed, inert until the fleet names KV-event streams). The workers' keys and TLS
contexts are read here, before anything starts; the fleet file is watched for workers added,
removed or declared anew (``router.fleet_reloader``, applied by ``_apply_fleet``). With
``Settings.api_keys`` a middleware inside the error middleware asks clients for a key
(``router.client_auth``), the tenant keys file watched for changes
(``router.client_keys_reloader``); browsers' cross-origin requests are answered outside both
(``router.cors``). Over HTTPS, ``start_router`` watches the serving certificate's files too
(``router.serving_tls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from policies.admission.section import SECTION_NAME as ADMISSION_SECTION
from policies.engine import check_against_fleet
from policies.errors import RoutingConfigError
from policies.reloader import PolicyReloader
from policies.summary import fleet_warnings
from router.admission.keyed_tenants import unkeyed_budgets
from router.bad_http_log import OneLineBadHttp
from router.client_auth import client_auth_middleware, hide_reason_from_tenants
from router.client_keys_reloader import ClientKeysReloader
from router.collector import LoopCollector
from router.cors import Cors
from router.decision_sinks import open_decision_sinks
from router.decisions import DecisionLog
from router.director import Director
from router.drain import RequestTasks, StopNotice
from router.ejection import WorkerEjection
from router.errors import error_middleware
from router.fleet_reloader import FleetReloader, PreparedFleet
from router.gc_pauses import GcPauses
from router.handlers import add_routes
from router.keys import (
    CLIENT_KEYS,
    DECISIONS,
    DIRECTOR,
    EJECTION,
    FLEET,
    FLEET_RELOADER,
    KV_EVENTS,
    LOOP_STALLS,
    METRICS,
    MODEL_RETIREMENT,
    POLICY,
    PROCESS_SITES,
    REGISTRY,
    REQUEST_TASKS,
    SCRAPER,
    SETTINGS,
    STOP_NOTICE,
    STORE,
    UTILITY,
    WORKER_AUTHORIZATIONS,
    WORKER_TLS,
)
from router.kv_event_feed import KvEventFeed
from router.loop_lag import LoopLag, LoopStalls
from router.metrics import RouterMetrics
from router.model_retirement import ModelRetirement
from router.proxy import Proxy
from router.refusals import RefusalRecorder
from router.request_ids import echo_request_id
from router.response_locator import ResponseLocator
from router.serving_tls import ServingCertificate
from router.settings import Settings
from router.stalls import StallWatch
from router.state.memory_store import MemoryStateStore
from router.state.redis_store import RedisStateStore
from router.state.store import StateStore
from router.utility_requests import FormAdmission, UtilityRequests
from router.version import installed_version
from workers.credentials import worker_authorizations
from workers.fleet import FleetConfig, load_fleet
from workers.registry import WorkerRegistry, fleet_change
from workers.scraper import WorkerScraper
from workers.task_cancel import cancel_and_wait
from workers.tls import worker_tls_contexts
from workers.upstream import Origin, UpstreamClient, host_port, origin_of

log = logging.getLogger(__name__)


FleetHook = Callable[[PreparedFleet], Awaitable[None]]


def create_app(settings: Settings, fleet: FleetConfig | None = None,
               environ: Mapping[str, str] | None = None,
               before_fleet_change: FleetHook | None = None) -> web.Application:
    """Build the router application. Raises on an invalid fleet or routing file, and on a
    worker whose ``api_key_env`` is not set in ``environ`` (default: the process's).
    ``before_fleet_change(prepared)`` is awaited before a reloaded fleet is taken (``kvroute
    up`` starts the emulated workers it adds)."""
    fleet = fleet if fleet is not None else load_fleet(settings.fleet_path)
    authorizations = worker_authorizations((w.info for w in fleet.workers),
                                           os.environ if environ is None else environ)
    tls = worker_tls_contexts(w.info for w in fleet.workers)
    store = _make_store(settings)
    registry = WorkerRegistry([w.info for w in fleet.workers], store.inflight)
    metrics = RouterMetrics(lambda: registry.views(time.monotonic()), settings.tenant_labels)
    metrics.start_worker_counts(w.info for w in fleet.workers)
    kv_events = KvEventFeed(w.info for w in fleet.workers)
    reloader = PolicyReloader.load(settings.routing_path, fleet,
                                   interval_s=settings.reload_interval_s,
                                   on_result=lambda r: metrics.record_reload(r.result, r.rebuilt),
                                   on_swap=kv_events.on_new_engine)
    metrics.record_config_loaded()
    metrics.watch_config(lambda: reloader.in_force_fingerprint, reloader.warning_count)
    metrics.watch_estimates(lambda: reloader.engine)
    metrics.watch_output_lengths(lambda: reloader.engine)
    metrics.watch_state_store(store)
    # another replica's routes, for the workers of this fleet only (one since removed, or not
    # yet added here, would take a place in the prefix index that nothing frees)
    store.follow_routed(lambda worker_id, blocks: reloader.engine.learn_routed(
        worker_id, blocks) if registry.declares(worker_id) else None)
    kv_events.attach(reloader.engine)
    request_tasks = RequestTasks()
    middlewares: list[Middleware] = [request_tasks.middleware]
    cors = Cors(settings.allowed_origins, settings.request_id_header) if (
        settings.allowed_origins) else None
    if cors is not None:
        middlewares.append(cors.middleware)
    middlewares.append(error_middleware)
    client_keys = None

    def warn_unkeyed(*_: object) -> None:
        """Budgets no key of the keys file reaches, at start and after either reloads."""
        if client_keys is None or settings.api_keys_file is None:
            return
        for warning in unkeyed_budgets(reloader.engine.routing.section(ADMISSION_SECTION),
                                       client_keys.keys.tenants):
            log.warning("routing file %s: %s (%s)", settings.routing_path, warning,
                        settings.api_keys_file)

    def reserve_tenant_labels(*_: object) -> None:
        """The tenants the admission section and the keys file name: series of their own."""
        section = reloader.engine.routing.section(ADMISSION_SECTION)
        keyed: list[str] = sorted(client_keys.keys.tenants) if client_keys is not None else []
        # in an order that stays from reload to reload, the admission section's first: past
        # --tenant-labels, the same names keep their places
        metrics.tenants.reserve([*(section.tenants if section is not None else ()), *keyed])

    def keys_reloaded(ok: bool) -> None:
        metrics.record_client_keys_reload(ok)
        if ok:
            warn_unkeyed()
            reserve_tenant_labels()

    if settings.api_keys or settings.api_keys_file is not None:
        client_keys = ClientKeysReloader(settings.api_keys, settings.api_keys_file,
                                         settings.reload_interval_s, on_result=keys_reloaded)
        warn_unkeyed()
        reloader.add_swap_listener(warn_unkeyed)
        if settings.api_keys_file is not None:
            metrics.watch_client_keys()
        middlewares.append(client_auth_middleware(lambda: client_keys.keys,
                                                  metrics.record_unauthorized,
                                                  settings.request_id_header))
    reserve_tenant_labels()
    reloader.add_swap_listener(reserve_tenant_labels)
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=middlewares)
    app.on_response_prepare.append(echo_request_id(settings.request_id_header))
    app.on_response_prepare.append(close_when_stopping)
    if client_keys is not None:
        app.on_response_prepare.append(hide_reason_from_tenants)
    if cors is not None:
        app.on_response_prepare.append(cors.on_response_prepare)
    app[SETTINGS] = settings
    app[WORKER_AUTHORIZATIONS] = authorizations
    app[WORKER_TLS] = tls
    app[FLEET] = fleet
    app[STORE] = store
    app[REGISTRY] = registry
    app[METRICS] = metrics
    app[POLICY] = reloader
    app[DECISIONS] = DecisionLog(settings.decisions_ring_size)
    app[KV_EVENTS] = kv_events
    app[REQUEST_TASKS] = request_tasks
    app[STOP_NOTICE] = StopNotice()
    app[LOOP_STALLS] = LoopStalls()
    if fleet.source == str(settings.fleet_path):      # (not a fleet built in memory)
        fleet_reloader = app[FLEET_RELOADER] = FleetReloader(
            settings.fleet_path, fleet, tls, check=_routing_serves(app),
            environ=os.environ if environ is None else environ, authorizations=authorizations,
            before_apply=before_fleet_change,
            interval_s=settings.reload_interval_s, on_result=metrics.record_fleet_reload)
        reloader.add_swap_listener(lambda _engine: fleet_reloader.retry())
    if client_keys is not None:
        app[CLIENT_KEYS] = client_keys
        app.cleanup_ctx.append(_client_keys_reloader)
    app.cleanup_ctx.append(_state_store)
    app.cleanup_ctx.append(_workers)
    app.cleanup_ctx.append(_policy_reloader)
    app.cleanup_ctx.append(_gc_pauses)
    app.cleanup_ctx.append(_loop_lag)
    app.cleanup_ctx.append(_model_retirement)
    app.cleanup_ctx.append(_bad_http_log)
    app.cleanup_ctx.append(_kv_event_feed)      # (inert until the fleet names a stream)
    add_routes(app)
    return app


def _make_store(settings: Settings) -> StateStore:
    if settings.redis_url:
        return RedisStateStore(settings.redis_url, settings.replica_id,
                               response_ttl_s=settings.response_ttl_s,
                               key_prefix=settings.redis_key_prefix)
    return MemoryStateStore()


async def _client_keys_reloader(app: web.Application) -> AsyncIterator[None]:
    app[CLIENT_KEYS].start()
    yield
    await app[CLIENT_KEYS].stop()


async def _state_store(app: web.Application) -> AsyncIterator[None]:
    await app[STORE].start()
    yield
    await app[STORE].close()


async def _workers(app: web.Application) -> AsyncIterator[None]:
    """The keep-alive connections to workers (the scraper's and the proxy's clients), the
    scraper loop and the director."""
    settings = app[SETTINGS]
    authorizations, tls = app[WORKER_AUTHORIZATIONS], app[WORKER_TLS]
    fleet_reloader = app.get(FLEET_RELOADER)
    metrics = app[METRICS]

    def on_certificate(origin: Origin, not_after: float) -> None:
        """A connection's certificate is that of every https:// worker at its origin (path
        prefixes behind one reverse proxy share the connections, and the certificate)."""
        fleet = fleet_reloader.fleet if fleet_reloader is not None else app[FLEET]
        workers_at = [w.info.id for w in fleet.workers
                      if w.info.url.startswith("https://") and origin_of(w.info.url) == origin]
        for worker_id in workers_at or [host_port(*origin)]:
            metrics.record_certificate(worker_id, not_after)

    # a scrape's connection comes within half its timeout, else its timeout hides the
    # connect timeout, and a host gone is taken for a busy worker (``workers.scraper``)
    scrapes = UpstreamClient(min(settings.connect_timeout_s, settings.scrape_timeout_s / 2),
                             settings.scrape_timeout_s,
                             authorizations=authorizations, tls=tls,
                             on_certificate=on_certificate)
    scraper = WorkerScraper(
        app[REGISTRY], scrapes, interval_s=settings.scrape_interval_s,
        timeout_s=settings.scrape_timeout_s, models_interval_s=settings.models_interval_s,
        fail_threshold=settings.fail_threshold, slow_grace_s=settings.slow_grace_s,
        on_engine_lost=lambda worker_id: _engine_restarted(app, worker_id),
        stalled_since=app[LOOP_STALLS].since)
    app[SCRAPER] = scraper
    upstream = UpstreamClient(settings.connect_timeout_s, settings.upstream_timeout_s,
                              authorizations=authorizations, tls=tls,
                              on_certificate=on_certificate)
    proxy = Proxy(upstream, settings.upstream_timeout_s, send_timeout_s=settings.send_timeout_s)
    reloader = app[POLICY]
    sinks = open_decision_sinks(app[METRICS], os.environ, asyncio.get_running_loop())
    refusals = RefusalRecorder(app[DECISIONS], sinks.refusals)
    responses = ResponseLocator(app[STORE], app[REGISTRY], scrapes, app[METRICS])
    registry = app[REGISTRY]

    def generated_at(worker_id: str) -> float | None:
        snapshot = registry.snapshot(worker_id)
        return snapshot.generated_at if snapshot is not None else None

    stalls = StallWatch(settings.stall_after_s, settings.upstream_timeout_s,
                        on_stall=app[METRICS].record_stall, progress=generated_at,
                        unanswering=registry.unanswering)
    ejection = app[EJECTION] = WorkerEjection(settings.eject_after, settings.eject_for_s,
                                              on_eject=app[METRICS].record_ejection,
                                              stalls=stalls)
    def set_aside(now: float) -> tuple[frozenset[str], frozenset[str]]:
        return ejection.failed_out(now), stalls.stalled(now)

    app[METRICS].watch_set_aside(
        lambda: app[REGISTRY].views(time.monotonic()),
        lambda: set_aside(time.monotonic()))
    app[DIRECTOR] = Director(settings, app[REGISTRY], app[STORE], lambda: reloader.engine,
                             proxy, app[METRICS], app[DECISIONS], responses,
                             sinks=sinks.decisions, outcome_sinks=sinks.outcomes,
                             ejection=ejection,
                             loop_stalls=app[LOOP_STALLS], refusals=refusals)
    admission = app[DIRECTOR].admission
    reloader.add_swap_listener(     # a raised in-flight limit lets the waiting through now
        lambda engine: admission.apply(engine.routing.section(ADMISSION_SECTION)))
    app[UTILITY] = UtilityRequests(
        settings, app[REGISTRY], responses, proxy, app[METRICS], ejection=ejection,
        forms=FormAdmission(admission, lambda: reloader.engine.routing.section(
            ADMISSION_SECTION), app[STORE], app[DIRECTOR].settle_departed,
            fingerprint=lambda: reloader.engine.fingerprint, refusals=refusals),
        aliases=lambda: reloader.engine.aliases)
    await scraper.scrape_once()      # the first request already sees a fleet picture
    task = asyncio.create_task(scraper.run(), name="kvroute-scraper")
    if fleet_reloader is not None:
        async def apply(prepared: PreparedFleet) -> None:
            await _apply_fleet(app, prepared, (scrapes, upstream))

        fleet_reloader.start(apply)
    yield
    if fleet_reloader is not None:
        await fleet_reloader.stop()
    await _stop(task)
    await upstream.close()
    await scrapes.close()
    sinks.close()


def _routing_serves(app: web.Application) -> Callable[[FleetConfig], None]:
    """The check a new fleet must pass: the routing file in force can serve it, as at start
    (raises ``RoutingConfigError`` naming the rule)."""
    def check(fleet: FleetConfig) -> None:
        policy = app[POLICY]
        try:
            check_against_fleet(policy.engine.routing, fleet)
        except RoutingConfigError as exc:
            raise RoutingConfigError(f"the routing file in force ({policy.path}) cannot serve "
                                     f"it: {exc}") from exc
    return check


async def _apply_fleet(app: web.Application, prepared: PreparedFleet,
                       clients: tuple[UpstreamClient, ...]) -> None:
    """Serve a reloaded fleet file's workers: one scrape of each new server (``probe``; the
    upstream clients hold both fleets' keys and TLS contexts meanwhile), the routing file in
    force checked again (one taken during the probe: ``RoutingConfigError``, nothing
    changed), then the keys, the registry (decisions see the new fleet, its new servers
    scraped, from the next request on) and the scraper; what the router knew of removed
    workers and of another server under an id is dropped."""
    registry = app[REGISTRY]
    # against what the router serves (the reloader's change is against the file it took)
    change = fleet_change(registry.infos, prepared.infos)
    for client in clients:         # the workers in force and the new ones, while probing
        client.set_credentials(*prepared.meanwhile())
    new_servers = {*change.added, *change.changed}
    probed = await app[SCRAPER].probe([i for i in prepared.infos if i.id in new_servers])
    try:       # a routing file taken during the probe must serve the new fleet too
        _routing_serves(app)(prepared.fleet)
    except RoutingConfigError:
        for client in clients:
            client.set_credentials(prepared.before_authorizations, prepared.before_tls)
        raise
    origins = {origin_of(info.url) for info in prepared.infos}
    for client in clients:
        client.set_credentials(prepared.authorizations, prepared.tls)
        client.retain_origins(origins)       # a removed worker's connections are closed
    registry.replace(prepared.infos, probed)      # no await from here to the feed
    app[SCRAPER].follow_registry()
    policy = app[POLICY]
    policy.fleet = prepared.fleet
    policy.retry()          # a routing file refused for the fleet before may fit this one
    for worker_id in change.gone:
        policy.engine.forget_worker(worker_id)
        app[METRICS].forget_worker(worker_id)
        app[STORE].forget_worker(worker_id)
    for worker_id in (*change.gone, *change.added):   # an id added again starts afresh
        app[EJECTION].forget(worker_id)
    app[METRICS].start_worker_counts(i for i in prepared.infos if i.id in new_servers)
    for warning in fleet_warnings(policy.engine.routing, prepared.fleet):
        log.warning("routing file %s: %s", policy.path, warning)
    await app[KV_EVENTS].set_workers(prepared.infos, change.gone, policy.engine)


async def _policy_reloader(app: web.Application) -> AsyncIterator[None]:
    app[POLICY].start()
    yield
    await app[POLICY].stop()


async def _gc_pauses(app: web.Application) -> AsyncIterator[None]:
    """``kvroute_gc_pause_seconds``: the garbage collector's pauses while the app runs."""
    pauses = GcPauses(app[METRICS].gc_pause)
    pauses.install()
    yield
    pauses.remove()


async def _loop_lag(app: web.Application) -> AsyncIterator[None]:
    """``kvroute_event_loop_lag_seconds``: how late the event loop runs while the app runs."""
    lag = LoopLag(app[METRICS].loop_lag, stalls=app[LOOP_STALLS])
    lag.start()
    yield
    await lag.stop()


async def _model_retirement(app: web.Application) -> AsyncIterator[None]:
    """The series and statistics of model names no worker serves any more (adapters
    unloaded everywhere) are dropped a minute after they went."""
    reloader, metrics = app[POLICY], app[METRICS]

    def forget(model: str) -> None:
        metrics.forget_model(model)
        reloader.engine.forget_model(model)

    retirement = app[MODEL_RETIREMENT] = ModelRetirement(
        metrics.model_names, app[REGISTRY].known_models, forget)
    retirement.start()
    yield
    await retirement.stop()


async def _bad_http_log(app: web.Application) -> AsyncIterator[None]:
    """Requests the HTTP parser refuses: one warning line each, not a traceback."""
    one_line = OneLineBadHttp()
    one_line.install()
    yield
    one_line.remove()


async def _kv_event_feed(app: web.Application) -> AsyncIterator[None]:
    feed = app[KV_EVENTS]
    await feed.start()
    if feed.enabled:
        log.info("following KV events of %d worker(s)", len(feed.sources))
    yield
    await feed.stop()


async def _stop(task: asyncio.Task[None]) -> None:
    await cancel_and_wait(task)


AIOHTTP_DRAIN_SLACK_S = 5.0


class ListenError(OSError):
    """The router cannot listen where it was told (the port taken, an address not this
    host's); the message says where and why, without a traceback."""


def _listen_error(host: str, port: int, exc: OSError) -> ListenError:
    if isinstance(exc, socket.gaierror):
        # its errno is a resolver's code (-2), which os.strerror calls "Unknown error -2"
        why = f"the host does not resolve: {exc.strerror or exc}"
    else:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
    return ListenError(f"cannot listen on {host_port(host, port)}: {why}")


async def _listen(site: web.TCPSite, runner: web.AppRunner, host: str, port: int) -> None:
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise _listen_error(host, port, exc) from exc


async def start_router(settings: Settings, fleet: FleetConfig | None = None,
                       before_fleet_change: FleetHook | None = None
                       ) -> tuple[web.AppRunner, int]:
    """Start serving on ``settings.host:settings.port`` (0: a free port), and on
    ``settings.process_port`` when set, over TLS with ``settings.ssl_certfile`` (loaded again
    when its files change, ``router.serving_tls``); return the shared port. ``TlsFilesError``
    if those files cannot be used, ``ListenError`` if a port cannot be listened on."""
    app = create_app(settings, fleet, before_fleet_change=before_fleet_change)
    tls = None
    if settings.ssl_certfile is not None:
        # renewed files are loaded into this same context while the app runs
        certificate = ServingCertificate(
            settings.ssl_certfile, settings.ssl_keyfile, settings.reload_interval_s,
            on_result=app[METRICS].record_serving_certificate_reload)
        tls = certificate.context
        app.cleanup_ctx.append(certificate.while_serving)
    # the drain's cut is ``RequestTasks.cut_after`` (``run_router``); aiohttp's own timeout,
    # later, only stands behind it (when both fired together aiohttp's wait broke)
    # bodies are never inflated (router.request_body refuses a compressed one): aiohttp did
    # it on the loop, for bodies nothing reads too (what it drains after an answer)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=settings.drain_timeout_s + AIOHTTP_DRAIN_SLACK_S,
                           auto_decompress=False,
                           keepalive_timeout=settings.client_idle_timeout_s)
    app[PROCESS_SITES] = []
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_port=settings.share_port,
                       ssl_context=tls)
    await _listen(site, runner, settings.host, settings.port)
    port = runner.addresses[0][1]
    if settings.process_port is not None:     # this process alone: what Prometheus scrapes
        process_site = web.TCPSite(runner, settings.host, settings.process_port,
                                   ssl_context=tls)
        await _listen(process_site, runner, settings.host, settings.process_port)
        app[PROCESS_SITES].append(process_site)
        log.info("this process also answers on port %d alone (its own /metrics)",
                 settings.process_port)
    return runner, int(port)


def check_port_free(host: str, port: int) -> None:
    """``ListenError`` when a process listens on ``host:port`` already. The processes of
    ``serve --processes N`` share their port by ``SO_REUSEPORT``, which would let them join
    another router's port as well; bound without it, this probe fails on any listener."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise _listen_error(host, port, exc) from exc


def _log_drain(app: web.Application, timeout_s: float) -> None:
    """This process's requests only: the registry's in-flight counts are the fleet's, every
    replica's together when they share a state store. Those waiting for an in-flight slot
    are answered 503 at once (they had reached no worker; another router takes them): they
    waited out the drain and were cut with no answer."""
    turned_away = app[DIRECTOR].admission.gate.close(let_in=app[REQUEST_TASKS].tasks())
    log.info("stopping: no new connections; %d request(s) in flight get up to %g s to finish%s",
             len(app[REQUEST_TASKS]) - turned_away, timeout_s,
             f"; {turned_away} waiting for a slot answered 503" if turned_away else "")


async def _drain_while_scraped(runner: web.AppRunner, drain_timeout_s: float) -> None:
    """With a port of this process alone (``--metrics-port``): stop listening on the shared
    port and close its connections (an idle one now, a busy one once it has answered,
    ``close_when_stopping``: a client's pool reconnects to another router), and
    wait until the requests in flight end (or are cut, at ``drain_timeout_s``) while the
    process's own port, and the connection Prometheus keeps there, still answer: the drain
    is scraped, and what its requests add to the counters. (aiohttp's ``pre_shutdown``
    would close every connection, and leaves one it finds idle unanswered until the drain
    ends.) Without such a port ``runner.cleanup()`` closes every port at once."""
    kept = runner.app[PROCESS_SITES]
    own_port = runner.app[SETTINGS].process_port
    if not kept or runner.server is None:
        return
    for site in runner.sites:
        if site not in kept:
            await site.stop()
    busy = runner.app[REQUEST_TASKS].connections()     # (closed as they answer)
    for connection in runner.server.connections:
        if connection not in busy and _local_port(connection.transport) != own_port:
            connection.force_close()
    try:
        async with asyncio.timeout(drain_timeout_s):
            await runner.app[REQUEST_TASKS].idle()
    except TimeoutError:                # what began after the cut, cut too
        runner.app[REQUEST_TASKS].cut()


def _local_port(transport: asyncio.BaseTransport | None) -> int | None:
    address = transport.get_extra_info("sockname") if transport is not None else None
    return address[1] if isinstance(address, tuple) and len(address) >= 2 else None


async def close_when_stopping(request: web.Request, response: web.StreamResponse) -> None:
    """Once the drain began, an answer on a connection of the shared port closes it (the
    port of this process alone, which Prometheus keeps a connection to, stays open; during
    ``--drain-delay`` the router still serves as before)."""
    app = request.app
    if app[DIRECTOR].admission.gate.closed and _local_port(request.transport) != app[
            SETTINGS].process_port:
        response.force_close()


def _engine_restarted(app: web.Application, worker_id: str) -> None:
    """A worker's engine restarted with an empty cache: the KV-event block set and the
    policy's routing history of what it held are dropped, so that no request goes there
    for a prefix it lost; and its failures, which were the former engine's, and the
    ejection they caused (a rolling restart's refused connections left it ejected, healthy,
    for the rest of the cooldown). Its stall watch stays: requests sent to the new engine
    may be among them."""
    app[KV_EVENTS].forget(worker_id)
    app[POLICY].engine.forget_worker(worker_id)
    if EJECTION in app:
        app[EJECTION].engine_restarted(worker_id)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_router(settings: Settings, fleet: FleetConfig | None = None,
               on_ready: Callable[[int], None] | None = None,
               on_stop: Callable[[], None] | None = None,
               stop_when: Callable[[], str | None] | None = None,
               before_fleet_change: FleetHook | None = None,
               cut_signals: Sequence[signal.Signals] = STOP_SIGNALS,
               on_cut: Callable[[], None] | None = None) -> str | None:
    """Serve until SIGINT/SIGTERM/SIGHUP, on uvloop; ``on_ready(port)`` once accepting requests,
    ``on_stop()`` when the signal comes, before the requests in flight are drained
    (``Settings.drain_timeout_s``). ``stop_when()``, asked every second, stops it as a signal
    would when it gives a reason (a process of ``--processes`` whose parent or child died);
    returns that reason, None after a signal. One of ``cut_signals`` during the drain (a
    second Ctrl-C) cuts what is in flight at once, then ``on_cut()``; a cut signal that is no
    stop signal (a ``--processes`` child's SIGUSR1, from its parent) stops it and cuts.

    Everything built at start-up (modules, tokenizer tables, the policy, the app) is moved
    out of the garbage collector's reach (``gc.freeze``): a full collection would otherwise
    walk those objects again every few thousand requests. From then on the collections run
    from the event loop, between callbacks (``Settings.gc_interval_s``, ``router.collector``)."""
    import uvloop

    async def main() -> None:
        runner, port = await start_router(settings, fleet, before_fleet_change)
        gc.collect()
        gc.freeze()
        collector = LoopCollector(settings.gc_interval_s) if settings.gc_interval_s else None
        if collector is not None:
            collector.start()
        log.info("kvroute %s listening on %s://%s", installed_version(), settings.scheme,
                 host_port(settings.host, port))
        if on_ready is not None:
            on_ready(port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGHUP (a closed terminal) too: by default it would end the process at once, with
        # no drain, leaving `kvroute up`'s emulators and `serve --processes`' children behind
        cut_now = [False]

        hurry = asyncio.Event()          # a second signal: no delay, no drain

        def cut_requests() -> None:
            if not stop.is_set():        # (a cut signal that is no stop signal, first)
                cut_now[0] = True
                stop.set()
                return
            hurry.set()
            runner.app[REQUEST_TASKS].cut("a second signal")
            if on_cut is not None:
                on_cut()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        for sig in cut_signals:
            if sig not in STOP_SIGNALS:
                loop.add_signal_handler(sig, cut_requests)
        watch = (asyncio.create_task(_watch(stop_when, stop, reasons))
                 if stop_when is not None else None)
        try:
            await stop.wait()
            # a second signal (Ctrl-C pressed again) cuts the drain short: what is still in
            # flight is cut now, as the drain timeout would
            for sig in cut_signals:
                loop.add_signal_handler(sig, cut_requests)
            if cut_now[0]:
                loop.call_soon(cut_requests)
            if watch is not None:
                watch.cancel()
            if on_stop is not None:
                on_stop()
            runner.app[STOP_NOTICE].given = True
            if settings.drain_delay_s > 0 and not cut_now[0]:
                log.info("stopping: /health answers 503 while requests are still taken for "
                         "%g s (--drain-delay)", settings.drain_delay_s)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(settings.drain_delay_s):
                        await hurry.wait()
            _log_drain(runner.app, settings.drain_timeout_s)
        finally:
            # aiohttp alone would let a stream run for twice the drain (``router.drain``)
            cut = runner.app[REQUEST_TASKS].cut_after(settings.drain_timeout_s)
            try:
                await _drain_while_scraped(runner, settings.drain_timeout_s)
                await runner.cleanup()
            finally:
                cut.cancel()
            if collector is not None:
                await collector.stop()

    reasons: list[str] = []
    uvloop.run(main())
    return reasons[0] if reasons else None


async def _watch(stop_when: Callable[[], str | None], stop: asyncio.Event,
                 reasons: list[str]) -> None:
    """Ask ``stop_when`` every second; on a reason, log it, keep it and stop."""
    while True:
        await asyncio.sleep(1.0)
        reason = stop_when()
        if reason is not None:
            log.error("stopping: %s", reason)
            reasons.append(reason)
            stop.set()
            return
