"""The aiohttp app of one emulated worker: vLLM's HTTP surface plus a fault-control endpoint.

``create_app(config)`` builds the engine, its runner, the metrics registry and (when enabled)
the KV-event publisher, all held in the app; the runner starts and stops with the app. With
``config.api_key`` it checks clients' keys as vLLM started with ``--api-key`` does.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from functools import partial

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from workers.emulator import PID_HEADER
from workers.emulator.config import EmulatorConfig, EmulatorConfigError, parse_faults
from workers.emulator.embeddings import embeddings
from workers.emulator.errors import ApiError, bad_request
from workers.emulator.generation import chat_completions, completions
from workers.emulator.invocations import invocations
from workers.emulator.kv_events import KvEventPublisher
from workers.emulator.lora_api import LOAD_PATH, UNLOAD_PATH, load_lora_adapter, unload_lora_adapter
from workers.emulator.messages_api import count_tokens, create_message
from workers.emulator.metrics import VLLM_VERSION
from workers.emulator.pooling_api import POOLING_PATH, pooling
from workers.emulator.protocol import decode_json, token_list
from workers.emulator.responses_api import cancel_response, create_response, retrieve_response
from workers.emulator.runner import StepLag
from workers.emulator.scoring import RERANK_PATHS, SCORE_PATHS, rerank, score
from workers.emulator.state import WORKER, WorkerState, build_state
from workers.emulator.tokens import Tokenizer, message_text

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPRequestEntityTooLarge as exc:
        return ApiError(413, f"Request body too large: {exc.text}", "Request Entity Too Large"
                        ).response()
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:   # FastAPI's bodies, as vLLM
        return web.Response(body=orjson.dumps({"detail": exc.reason}), status=exc.status,
                            content_type="application/json")
    except web.HTTPException:
        raise
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception:
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return ApiError(500, "Internal server error", "InternalServerError").response()


# vLLM's AuthenticationMiddleware (``--api-key``): these paths need the bearer token
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


def api_key_middleware(api_key: str) -> Middleware:
    """As vLLM with ``--api-key``: a guarded path without ``Authorization: Bearer <key>``
    (any case of ``Bearer``) is answered ``401 {"error": "Unauthorized"}``; ``/health``,
    ``/metrics`` and the other paths stay open, as do ``OPTIONS`` requests."""
    expected = hashlib.sha256(api_key.encode("utf-8")).digest()

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" and request.path.startswith(GUARDED_PREFIXES):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
            if scheme.lower() != "bearer" or not secrets.compare_digest(digest, expected):
                return _json({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return authenticate


def create_app(config: EmulatorConfig, tokenizer: Tokenizer | None = None) -> web.Application:
    middlewares: list[Middleware] = [error_middleware]
    if config.api_key:
        middlewares.append(api_key_middleware(config.api_key))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    tok = tokenizer or Tokenizer()

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        publisher = KvEventPublisher(config.kv_events) if config.kv_events else None
        state = build_state(config, tok, publisher)
        state.created = int(time.time())
        app[WORKER] = state
        state.runner.start()
        yield
        await state.runner.stop()
        if publisher is not None:
            await publisher.close()

    app.cleanup_ctx.append(lifetime)
    # as vLLM: a model's routes are those of what it runs (others are a plain 404 Not Found;
    # an embedding model is no classifier: no /classify)
    if config.model.runner == "pooling":
        app.router.add_post("/v1/embeddings", embeddings)
        app.router.add_post(POOLING_PATH, pooling)
        for path in SCORE_PATHS:
            app.router.add_post(path, score)
        for path in RERANK_PATHS:
            app.router.add_post(path, rerank)
    else:
        app.router.add_post("/v1/chat/completions", chat_completions)
        app.router.add_post("/v1/completions", completions)
        app.router.add_post("/v1/responses", create_response)
        app.router.add_get("/v1/responses/{response_id}", retrieve_response)
        app.router.add_post("/v1/responses/{response_id}/cancel", cancel_response)
        app.router.add_post("/v1/messages", create_message)
        app.router.add_post("/v1/messages/count_tokens", count_tokens)
    if config.dev_mode:                    # vLLM: only with VLLM_SERVER_DEV_MODE=1
        app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    if config.runtime_lora_updating:       # vLLM: only with VLLM_ALLOW_RUNTIME_LORA_UPDATING
        app.router.add_post(LOAD_PATH, load_lora_adapter)
        app.router.add_post(UNLOAD_PATH, unload_lora_adapter)
    app.router.add_post("/invocations", invocations(config.model.runner))
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_get("/health", health)
    app.router.add_route("*", "/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/load", load)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/", metrics)
    app.router.add_get("/kv_event_sources", kv_event_sources)
    app.router.add_get("/emulator/faults", get_faults)
    app.router.add_post("/emulator/faults", set_faults)
    app.router.add_get("/emulator/stats", runner_stats)
    return app


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


async def health(request: web.Request) -> web.Response:
    # the process id tells whoever started this emulator that it answers, not another
    # server that holds the port (``workers.emulator.process``)
    return web.Response(status=200 if request.app[WORKER].runner.healthy else 503,
                        headers={PID_HEADER: str(os.getpid())})


async def version(request: web.Request) -> web.Response:
    return _json({"version": VLLM_VERSION})


async def load(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    return _json({"server_load": w.server_load if w.config.server_load_tracking else 0})


async def metrics(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    if w.faults.metrics_delay_s > 0:
        await asyncio.sleep(w.faults.metrics_delay_s)
    if w.faults.metrics_broken == "error":
        return web.Response(status=500, text="Internal Server Error")
    text = generate_latest(w.metrics.registry)
    if w.faults.metrics_broken == "garbage":
        text = text[: len(text) // 2] + b'\nvllm:num_requests_running{engine="0" 1.0 }}}\n'
    return web.Response(body=text, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _card(name: str, created: int, root: str, parent: str | None,
          max_model_len: int | None) -> dict[str, object]:
    return {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": root,
            "parent": parent, "max_model_len": max_model_len,
            "permission": [{"id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission",
                            "created": created, "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}


async def models(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    created = int(time.time())
    base = w.config.served_model_names[0]
    cards = [_card(n, created, base, None, w.max_model_len) for n in w.config.served_model_names]
    cards += [_card(n, created, path, base, None) for n, path in w.lora_paths.items()]
    return _json({"object": "list", "data": cards})


async def tokenize(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    data = decode_json(await request.read())
    w.resolve_model(_opt_str(data.get("model"), "model"))
    if "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise bad_request("messages: must be a list of message objects", "messages")
        for m in messages:
            if not isinstance(m.get("content"), str | list | None):
                raise bad_request("messages: content must be a string or a list of parts",
                                  "messages")
        normalized = [{"role": str(m.get("role", "user")),
                       "content": message_text(m.get("content"))} for m in messages]
        tools = data.get("tools")
        text = w.tokenizer.render_chat(
            normalized, bool(data.get("add_generation_prompt", True)),
            [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None)
    else:
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise bad_request("prompt: required, a string (or give messages)", "prompt")
        text = prompt
    if len(text) > w.max_model_len * w.tokenizer.max_chars_per_token:
        raise bad_request(f"Prompt of {len(text)} characters is longer than any prompt of "
                          f"{w.max_model_len} tokens", "input_text")
    ids = await asyncio.get_running_loop().run_in_executor(
        None, partial(w.tokenizer.encode_chat, window=w.max_model_len)
        if "messages" in data else w.tokenizer.encode, text)
    strs = [w.tokenizer.piece(t) for t in ids] if data.get("return_token_strs") else None
    return _json({"count": len(ids), "max_model_len": w.max_model_len, "tokens": ids,
                  "token_strs": strs})


async def detokenize(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    data = decode_json(await request.read())
    w.resolve_model(_opt_str(data.get("model"), "model"))
    ids = token_list(data, "tokens")
    bad = next((t for t in ids if not 0 <= t < w.tokenizer.vocab_size), None)
    if bad is not None:
        raise bad_request(f"Token id {bad} is out of vocabulary", "tokens")
    return _json({"prompt": w.tokenizer.decode(ids)})


async def kv_event_sources(request: web.Request) -> web.Response:
    w = request.app[WORKER]
    if w.publisher is None:
        return _json({})
    cfg = w.publisher.config
    return _json({"0": {"enable_kv_cache_events": True, "publisher": "zmq",
                        "endpoint": w.publisher.endpoint, "replay_endpoint": cfg.replay_endpoint,
                        "topic": cfg.topic, "buffer_steps": cfg.buffer_steps}})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's dev-mode ``POST /reset_prefix_cache``: ``{"success": bool}``, false while
    requests hold blocks (its ``reset_running_requests`` is not modelled)."""
    return _json({"success": request.app[WORKER].runner.reset_prefix_cache()})


async def runner_stats(request: web.Request) -> web.Response:
    """Step-lag statistics of the engine runner (``?reset=1`` starts a new window)."""
    runner = request.app[WORKER].runner
    lag = runner.lag
    recent = sorted(lag.recent)
    body = {"steps": lag.steps, "inflight": runner.num_inflight,
            "lag_mean_s": lag.total_s / lag.steps if lag.steps else 0.0,
            "lag_p50_s": recent[len(recent) // 2] if recent else 0.0,
            "lag_p99_s": recent[min(len(recent) - 1, int(len(recent) * 0.99))] if recent else 0.0,
            "lag_max_s": lag.max_s, "emulated_time_s": runner.now()}
    if request.query.get("reset") == "1":
        runner.lag = StepLag()
    return _json(body)


async def get_faults(request: web.Request) -> web.Response:
    return _json(asdict(request.app[WORKER].faults))


async def set_faults(request: web.Request) -> web.Response:
    """Change fault knobs while serving: a partial ``faults:`` mapping (JSON)."""
    w: WorkerState = request.app[WORKER]
    data = decode_json(await request.read())
    listening = sorted(k for k in (data if isinstance(data, dict) else ())
                       if str(k).startswith("refuse_"))
    if listening:       # they act on the listening socket, set up at start only
        raise bad_request(f"faults: {', '.join(listening)} can only be set at start (the "
                          "emulate: block or its flags), not while serving", "faults")
    try:
        w.faults = parse_faults(data, "faults", base=w.faults)
    except EmulatorConfigError as exc:
        raise bad_request(str(exc), "faults") from None
    return _json(asdict(w.faults))


def _opt_str(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise bad_request(f"{name}: must be a string", name)
    return value
