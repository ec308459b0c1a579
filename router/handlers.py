"""HTTP handlers: thin wrappers that hand generation requests to the director.

``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``,
``POST /v1/responses``, ``POST /v1/messages``, vLLM's pooling APIs ``POST /score``,
``/v1/score``, ``/rerank``, ``/v1/rerank``, ``/v2/rerank``, ``/pooling`` and ``/classify``,
SageMaker's ``POST /invocations`` (routed as the API its body is: ``workers.invocations``)
(the director), ``POST /tokenize``, ``POST /detokenize``, ``POST /v1/messages/count_tokens``,
``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations``,
``GET /v1/responses/{id}``, ``POST /v1/responses/{id}/cancel`` (``router.utility_requests``),
``GET /v1/models``, ``GET /v1/models/{model}``, ``GET /health`` (also ``/readiness``: 503
while no worker is healthy, and once the router is stopping; ``GET`` and ``POST /ping``
say the same with no body, as vLLM's), ``GET /liveness`` (200 while the process answers),
``GET /metrics``,
``GET /debug/decisions``, ``GET /debug/fleet``, ``GET /debug/admission``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from policies.admission.section import SECTION_NAME as ADMISSION_SECTION
from policies.rules import model_aliases
from router.decisions import ENTRY_KINDS
from router.errors import InvalidRequest, ModelNotFound
from router.keys import (
    DECISIONS,
    DIRECTOR,
    EJECTION,
    KV_EVENTS,
    METRICS,
    POLICY,
    REGISTRY,
    STOP_NOTICE,
    STORE,
    UTILITY,
)
from router.protocol import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    COUNT_TOKENS_PATH,
    DETOKENIZE_PATH,
    EMBEDDINGS_PATH,
    MESSAGES_PATH,
    POOLING_API_PATHS,
    RESPONSES_PATH,
    TOKENIZE_PATH,
    TRANSCRIPTIONS_PATH,
    TRANSLATIONS_PATH,
)
from router.request_body import expect_later
from workers.invocations import INVOCATIONS_PATH
from workers.models import WorkerView


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status,
                        content_type="application/json")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await request.app[DIRECTOR].handle(request, CHAT_PATH)


async def completions(request: web.Request) -> web.StreamResponse:
    return await request.app[DIRECTOR].handle(request, COMPLETIONS_PATH)


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await request.app[DIRECTOR].handle(request, EMBEDDINGS_PATH)


async def responses(request: web.Request) -> web.StreamResponse:
    return await request.app[DIRECTOR].handle(request, RESPONSES_PATH)


async def messages(request: web.Request) -> web.StreamResponse:
    return await request.app[DIRECTOR].handle(request, MESSAGES_PATH)


def directed(path: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler handing a request on ``path`` to the director (vLLM's pooling APIs)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        return await request.app[DIRECTOR].handle(request, path)

    return handle


async def count_tokens(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle(request, COUNT_TOKENS_PATH)


async def retrieve_response(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle_response(request, request.match_info["id"])


async def cancel_response(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle_response(request, request.match_info["id"],
                                                      "/cancel")


async def tokenize(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle(request, TOKENIZE_PATH)


async def detokenize(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle(request, DETOKENIZE_PATH)


async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle_form(request, TRANSCRIPTIONS_PATH)


async def translations(request: web.Request) -> web.StreamResponse:
    return await request.app[UTILITY].handle_form(request, TRANSLATIONS_PATH)


def models_payload(views: Sequence[WorkerView], created: int,
                   aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The union of the healthy workers' models (and adapters), with ``max_model_len``;
    as vLLM's cards, an adapter's ``parent`` is the base model it runs on and its ``root``
    its path, as a worker's card gave it (a model's ``root``: the model itself, since the
    router does not see the workers' weight paths). With ``aliases`` (a routing rule's
    names, ``policies.rules.model_aliases``), a card for each alias whose target is served,
    its ``root`` and ``parent`` the target's (an adapter's alias reads as an adapter, of the
    same base model)."""
    lengths: dict[str, int] = {}
    parents: dict[str, str | None] = {}
    roots: dict[str, str] = {}
    for view in views:
        if not view.healthy:
            continue
        served = view.served_models or view.info.models
        for model in served:
            lengths[model] = max(lengths.get(model, 0), view.max_model_len)
            parents.setdefault(model, None)
        for adapter in view.lora_adapters:
            lengths[adapter] = max(lengths.get(adapter, 0), view.max_model_len)
            parents.setdefault(adapter, served[0] if served else None)
        for adapter, path in view.lora_paths:
            roots.setdefault(adapter, path)
    for alias, target in (aliases or {}).items():
        if alias not in lengths and target in lengths:
            lengths[alias] = lengths[target]
            parents[alias] = parents[target]        # an adapter's alias: its base model
            roots[alias] = roots.get(target, target)
    return {"object": "list", "data": [
        {"id": model, "object": "model", "created": created, "owned_by": "kvroute",
         "root": roots.get(model, model), "parent": parents[model],
         "max_model_len": length or None}
        for model, length in sorted(lengths.items())]}


def _model_cards(request: web.Request) -> dict[str, Any]:
    """The cards of the models served now, and of the routing rules' aliases of them."""
    return models_payload(request.app[REGISTRY].views(time.monotonic()), int(time.time()),
                          model_aliases(request.app[POLICY].engine.routing.rules))


async def list_models(request: web.Request) -> web.Response:
    return _json(_model_cards(request))


async def retrieve_model(request: web.Request) -> web.Response:
    """One card of ``GET /v1/models`` (OpenAI's ``models.retrieve``); vLLM's 404 for a model
    no healthy worker serves."""
    name = request.match_info["model"]
    cards = _model_cards(request)
    for card in cards["data"]:
        if card["id"] == name:
            return _json(card)
    known = ", ".join(card["id"] for card in cards["data"])
    raise ModelNotFound(f"The model `{name}` does not exist. Valid aliases: {known}.",
                        param="model")


async def ping(request: web.Request) -> web.Response:
    """vLLM's ``/ping`` (GET or POST: SageMaker's health check): ``/health``'s status with
    an empty body, as the engine answers it."""
    answer = await health(request)
    return web.Response(status=answer.status)


async def health(request: web.Request) -> web.Response:
    views = request.app[REGISTRY].views(time.monotonic())
    healthy = sum(1 for v in views if v.healthy)
    # stopping: during --drain-delay, or asked on a connection opened before the drain (a
    # load balancer's kept one) or on the port of this process alone
    stopping = request.app[STOP_NOTICE].given
    status = "stopping" if stopping else "ok" if healthy else "no_healthy_worker"
    return _json({"status": status, "healthy_workers": healthy, "workers": len(views),
                  "state_store_degraded": request.app[STORE].degraded},
                 status=200 if healthy and not stopping else 503)


async def liveness(request: web.Request) -> web.Response:
    """200 while the process answers, whatever its workers' state: a liveness probe that
    does not restart the router during an outage of its workers (``/health``, also
    ``/readiness``, says 503 then)."""
    return _json({"status": "alive"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[METRICS].render(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


# what /debug/decisions can be narrowed to: the decisions whose field is the value given
DECISION_FILTERS = ("request_id", "trace_id", "worker")
# its parameters beside the filters: how many of each kind, and which kind alone
DECISION_PARAMETERS = ("limit", "kind", *DECISION_FILTERS)


async def debug_decisions(request: web.Request) -> web.Response:
    """The decisions and refusals kept, newest first: ``limit`` of each kind, one kind alone
    (``kind``: ``decision`` or ``refusal``), those of one request, trace or worker
    (``request_id``, ``trace_id``, ``worker``); an unknown parameter is refused (it was
    ignored, and the newest were answered for a request the ring no longer held)."""
    for name in request.query:
        if name not in DECISION_PARAMETERS:
            raise InvalidRequest(f"{name}: not a parameter of /debug/decisions "
                                 f"({', '.join(DECISION_PARAMETERS)}).", param=name)
    raw = request.query.get("limit")
    limit = None
    if raw is not None:
        if not (raw.isascii() and raw.isdigit()):     # not "²", which isdigit() takes
            raise InvalidRequest("limit: must be a non-negative integer.", param="limit")
        # past 18 digits (int() refuses past 4,300) it asks for more than any ring holds
        digits = raw.lstrip("0") or "0"
        limit = int(digits) if len(digits) <= 18 else None
    kind = request.query.get("kind")
    if kind is not None and kind not in ENTRY_KINDS:
        raise InvalidRequest(f"kind: must be one of {', '.join(ENTRY_KINDS)}.", param="kind")
    wanted = [(name, request.query[name]) for name in DECISION_FILTERS if name in request.query]

    def kept(entry: dict[str, Any]) -> bool:
        return all(entry.get(name) == value for name, value in wanted)

    return _json({"object": "list", "data": request.app[DECISIONS].render(
        limit, kind, kept if wanted else None)})


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


async def debug_fleet(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    kv_events = request.app[KV_EVENTS].status()
    ejection = request.app[EJECTION]
    now = time.monotonic()
    stalled = ejection.stalls.stalled(now)
    workers = []
    for view in registry.views(now):
        snap = registry.snapshot(view.id)
        workers.append({
            "id": view.id, "url": view.info.url, "gpu": view.gpu.name,
            "models": list(view.served_models), "lora_adapters": list(view.lora_adapters),
            "price_per_hour": view.price_per_hour, "labels": dict(view.labels),
            "healthy": view.healthy, "staleness_s": _finite(view.staleness_s),
            "running": view.running, "waiting": view.waiting, "kv_usage": view.kv_usage,
            "block_size": view.block_size, "num_gpu_blocks": view.num_gpu_blocks,
            "max_model_len": view.max_model_len, "inflight_requests": view.inflight_requests,
            "inflight_tokens": view.inflight_tokens,
            "consecutive_failures": snap.consecutive_failures if snap else 0,
            "ejected_for_s": _finite(ejection.ejected_for(view.id, now)),
            "stalled": view.id in stalled,
            "last_error": snap.error if snap else None,
            "prefix_cache_queries": snap.prefix_cache_queries if snap else 0.0,
            "prefix_cache_hits": snap.prefix_cache_hits if snap else 0.0,
            "kv_events": kv_events.get(view.id),
        })
    return _json({"object": "list", "data": workers})


async def debug_admission(request: web.Request) -> web.Response:
    """The budgets' spending, and whose it counts: every replica sharing the store, or this
    one alone (``shared``: false while Redis is away or without it)."""
    section = request.app[POLICY].engine.routing.section(ADMISSION_SECTION)
    store = request.app[STORE]
    return _json({"object": "admission", **request.app[DIRECTOR].admission.status(section),
                  "replicas": store.replicas,
                  "shared": store.replicas > 1 and not store.degraded})


async def debug_routing(request: web.Request) -> web.Response:
    """The routing file and the config in force: its SHA-256 (whose first 12 hex digits
    ``kvroute_config_info`` shows), since when, its summary and warnings, whether the file
    on disk is still it, and why the last edit was refused (until the file is good again)."""
    return _json({"object": "routing", **request.app[POLICY].status()})


def add_routes(app: web.Application) -> None:
    # a client expecting 100-continue is told to send its body when it is read
    # (``router.request_body``): after its key was checked, and not for one over the limit
    posts = {CHAT_PATH: chat_completions, COMPLETIONS_PATH: completions,
             EMBEDDINGS_PATH: embeddings, RESPONSES_PATH: responses,
             RESPONSES_PATH + "/{id}/cancel": cancel_response, MESSAGES_PATH: messages,
             COUNT_TOKENS_PATH: count_tokens, TOKENIZE_PATH: tokenize,
             DETOKENIZE_PATH: detokenize, TRANSCRIPTIONS_PATH: transcriptions,
             TRANSLATIONS_PATH: translations,
             INVOCATIONS_PATH: directed(INVOCATIONS_PATH),
             **{path: directed(path) for path in POOLING_API_PATHS}}
    for path, handler in posts.items():
        app.router.add_post(path, handler, expect_handler=expect_later)
    # no HEAD: forwarded, the worker's Content-Length without a body held the attempt for
    # the whole upstream timeout (and vLLM answers HEAD there 405 anyway)
    app.router.add_get(RESPONSES_PATH + "/{id}", retrieve_response, allow_head=False)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model:.+}", retrieve_model)     # ids hold slashes
    app.router.add_get("/health", health)
    app.router.add_get("/readiness", health)
    app.router.add_get("/liveness", liveness)
    app.router.add_get("/ping", ping, allow_head=False)
    app.router.add_post("/ping", ping)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/debug/decisions", debug_decisions)
    app.router.add_get("/debug/fleet", debug_fleet)
    app.router.add_get("/debug/admission", debug_admission)
    app.router.add_get("/debug/routing", debug_routing)
