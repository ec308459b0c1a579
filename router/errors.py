"""The router's one error hierarchy, mapped to HTTP status and the OpenAI error body.

```
RouterError                      (abstract: status, type, code)
├── InvalidRequest         400   malformed JSON, wrong types, missing fields, non-UTF-8
│   ├── ContextLengthExceeded 400 the prompt (+ max_tokens) fits no serving worker's window
│   └── EngineBadRequest      400 what vLLM refuses in its own words (a score's unpaired inputs)
├── Unauthorized           401   no API key, or not one of the router's (``--api-key``)
├── Forbidden              403   a tenant's key on a path for the operator's (``/debug/…``)
├── ModelNotFound          404   no worker of the fleet serves the requested model
├── RouteNotFound          404   unknown path
├── MethodNotAllowed       405
├── RequestTimeout         408   the body did not arrive within ``Settings.body_timeout_s``
├── RequestTooLarge        413   body over ``Settings.max_body_bytes``
├── UnsupportedEncoding    415   a compressed body (``Content-Encoding``), never inflated
├── AdmissionRefused             refused by the admission section before routing (``reason``)
│   ├── RateLimited        429   the tenant's budget is spent (``admission.tenants``)
│   │   ├── RequestRateLimited     requests per minute
│   │   ├── TokenRateLimited       tokens per minute
│   │   └── ConcurrencyLimited     requests at once (its ``max_in_flight``)
│   └── InFlightRefused    503   (an ``Overloaded``) the in-flight limit's queue is full, the
│                                wait too long, or the router is stopping
├── RoutingMisconfigured   500   a routing rule sent the request to a model that cannot serve it
├── UpstreamError          502   the chosen workers failed before answering
├── NoWorkerAvailable      503   the policy found no candidate (none healthy, none fits)
├── Overloaded             503   the router cannot take the request now (its open files)
└── UpstreamTimeout        504   the worker did not answer in time
```

``error_middleware`` is the only place that turns exceptions into responses; everything else
raises. The body follows OpenAI: ``{"error": {"message", "type", "param", "code"}}``. An
unknown model, a request longer than the context window and a score request whose sides
cannot be paired are answered in vLLM's own words and shape (``type: "NotFoundError"`` /
``"BadRequestError"``, the status as ``code``), as a worker would have answered them. On
Anthropic's Messages API (``/v1/messages…``) the same errors take Anthropic's shape, as
vLLM renders them there: ``{"type": "error", "error": {"type", "message"}}`` (vLLM's own
error type for the vLLM-shaped ones, Anthropic's for the router's own).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RouterError(Exception):
    """Base class: carries the HTTP status, the OpenAI error type and a short code."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "internal_error"
    code: ClassVar[str] = "internal_error"
    # answered as a vLLM worker would: the body's ``code`` is the HTTP status, and ``code``
    # above stays the short rejection reason of the router's own headers and metrics
    vllm_shaped: ClassVar[bool] = False

    def __init__(self, message: str, *, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})
        # the API path a body was read as when refused, where not the one it came on
        # (SageMaker's ``/invocations``: its body's API, counted under that API)
        self.read_as: str | None = None

    def body(self) -> bytes:
        return error_body(self.message, self.type,
                          self.status if self.vllm_shaped else self.code, self.param)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class InvalidRequest(RouterError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContextLengthExceeded(InvalidRequest):
    """vLLM's body: ``{"message": "This model's maximum context length is N tokens. ...",
    "type": "BadRequestError", "param": "input_tokens", "code": 400}``."""

    type = "BadRequestError"
    code = "context_length_exceeded"
    vllm_shaped = True


class EngineBadRequest(InvalidRequest):
    """A body vLLM's serving code refuses, refused by the router in the engine's words and
    shape: ``{"message": ..., "type": "BadRequestError", "param": null, "code": 400}`` (a
    score request whose two sides cannot be paired)."""

    type = "BadRequestError"
    vllm_shaped = True


class Unauthorized(RouterError):
    """OpenAI's answer to a missing or wrong key: ``type: "invalid_request_error"``,
    ``code: "invalid_api_key"`` (Anthropic's ``authentication_error`` on the Messages API)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(RouterError):
    """OpenAI's answer to a key that may not do this: ``type: "permission_error"``
    (Anthropic's ``permission_error`` on the Messages API)."""

    status = 403
    type = "permission_error"
    code = "permission_denied"


class ModelNotFound(RouterError):
    """vLLM's body: ``{"message": "The model `x` does not exist. Valid aliases: ...",
    "type": "NotFoundError", "param": "model", "code": 404}``."""

    status = 404
    type = "NotFoundError"
    code = "model_not_found"
    vllm_shaped = True


class ResponseNotFound(RouterError):
    """vLLM's body: ``{"message": "Response with id 'x' not found.", "type":
    "invalid_request_error", "param": "response_id", "code": 404}``."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"
    vllm_shaped = True


class RouteNotFound(RouterError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(RouterError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTimeout(RouterError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class RequestTooLarge(RouterError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedEncoding(RouterError):
    """A compressed request body (``Content-Encoding``): vLLM's server does not decode one
    either, and inflating it on the event loop let a 2 MB body stall the router for seconds."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_encoding"


class AdmissionRefused(RouterError):
    """A request the routing file's admission section refused before routing; ``reason`` is
    the refusal's ``reason`` label of ``kvroute_admission_rejections_total``
    (``requests_per_minute``, ``tokens_per_minute``, ``queue_full``, ``wait_timeout``,
    ``draining``)."""

    def __init__(self, message: str, *, reason: str, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message, param=param, headers=headers)
        self.reason = reason


class RateLimited(AdmissionRefused):
    """OpenAI's answer to a spent rate limit: status 429, ``code: "rate_limit_exceeded"``,
    ``type`` the limit's unit (Anthropic's ``rate_limit_error`` on the Messages API); the
    headers carry ``Retry-After``."""

    status = 429
    type = "requests"
    code = "rate_limit_exceeded"


class RequestRateLimited(RateLimited):
    type = "requests"


class TokenRateLimited(RateLimited):
    type = "tokens"


class ConcurrencyLimited(RateLimited):
    """The tenant's budget has ``max_in_flight`` requests in flight already."""

    type = "requests"


class RoutingMisconfigured(RouterError):
    status = 500
    type = "internal_error"
    code = "routing_misconfigured"


class UpstreamError(RouterError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class AskAgainSoon(RouterError):
    """A 503 worth sending again soon: ``Retry-After: 1`` unless the headers say more."""

    status = 503
    type = "service_unavailable"
    RETRY_AFTER_S: ClassVar[int] = 1

    def __init__(self, message: str, *, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message, param=param, headers=headers)
        self.headers.setdefault("Retry-After", str(self.RETRY_AFTER_S))


class NoWorkerAvailable(AskAgainSoon):
    """No healthy worker can take the request. A worker is back within a scrape or two once
    it answers: worth asking again soon."""

    code = "no_worker_available"


class Overloaded(RouterError):
    """The router cannot take the request now (Anthropic's ``overloaded_error`` on the
    Messages API); the headers carry ``Retry-After``."""

    status = 503
    type = "service_unavailable"
    code = "overloaded"


class InFlightRefused(Overloaded, AdmissionRefused):
    """The router holds as many requests as ``admission`` lets it: its queue is full, the
    wait was too long, or the router is stopping (``reason``)."""


class WorkersBusy(AskAgainSoon):
    """The last worker tried answered that it is too busy to take the request (vLLM's 503
    when its queue is full): the client waits as it said (its ``Retry-After`` in the
    headers) and sends it again."""

    code = "workers_busy"


class StoppedBeforeTheAnswer(AskAgainSoon):
    """The router stopped (its drain ran out, or a second signal) before the request was
    answered: worth sending again, to another router."""

    code = "router_stopping"


class UpstreamTimeout(RouterError):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


ANTHROPIC_PATH_PREFIX = "/v1/messages"
# Anthropic's error types by status, for the router's own errors
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error",
                    404: "not_found_error", 405: "invalid_request_error",
                    413: "request_too_large", 415: "invalid_request_error",
                    429: "rate_limit_error", 502: "api_error",
                    503: "overloaded_error", 504: "api_error"}


def anthropic_error_body(message: str, type_: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


def anthropic_body(exc: RouterError) -> bytes:
    """``exc`` as the Messages API answers it: vLLM's type for what a worker would have said
    (an unknown model, an over-long prompt), else Anthropic's type for the status."""
    type_ = exc.type if exc.vllm_shaped else _ANTHROPIC_TYPES.get(exc.status, "api_error")
    return anthropic_error_body(exc.message, type_)


def error_body(message: str, type_: str, code: str | int | None,
               param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param,
                                   "code": code}})


def error_response(exc: RouterError, anthropic: bool = False) -> web.Response:
    """The error as a response (``anthropic``: in the Messages API's shape); errors raised
    before any routing decision say so."""
    headers = exc.headers
    if "x-kvroute-worker" not in headers:
        headers = {**headers, "x-kvroute-worker": "none", "x-kvroute-profile": "none",
                   "x-kvroute-reason": f"rejected before routing: {exc.code}"}
    return web.Response(status=exc.status, body=anthropic_body(exc) if anthropic else exc.body(),
                        content_type="application/json", headers=headers)


def _from_http_exception(exc: web.HTTPException) -> RouterError:
    if exc.status == 413:
        return RequestTooLarge(f"Request body too large: {exc.text or 'limit exceeded'}")
    if exc.status == 405:       # with the methods the path takes, as HTTP asks
        allow = exc.headers.get("Allow")
        return MethodNotAllowed(f"Method not allowed: {exc.reason}",
                                headers={"Allow": allow} if allow else None)
    if exc.status == 404:
        return RouteNotFound("Not found: no such endpoint")
    return InvalidRequest(exc.text or exc.reason)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render every error as an OpenAI error body (Anthropic's on the Messages API); never let
    an exception become a crash."""
    try:
        return await handler(request)
    except RouterError as exc:
        return error_response(exc, _is_anthropic(request))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(_from_http_exception(exc), _is_anthropic(request))
    except RequestPayloadError as exc:   # a body aiohttp cannot read (a broken chunk)
        return error_response(InvalidRequest(f"Cannot read the request body: "
                                             f"{payload_error_reason(exc)}"),
                              _is_anthropic(request))
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(RouterError("Internal router error"), _is_anthropic(request))


def payload_error_reason(exc: BaseException) -> str:
    """The parser's reason behind an unreadable request body, on one line."""
    cause = exc.__cause__
    reason = cause.message if isinstance(cause, HttpProcessingError) else str(exc)
    return " ".join(str(reason).split())


def _is_anthropic(request: web.Request) -> bool:
    return request.path.startswith(ANTHROPIC_PATH_PREFIX)
