"""Forward one request to one worker and relay its answer, bytes in, bytes out.

Non-streamed answers are read whole and passed on with the worker's status (a binary pooling
answer, vLLM's ``encoding_format: bytes``, with the ``metadata`` header that describes it,
its usage read there). Streams (SSE)
are relayed as they arrive, cut only at event boundaries; the only rewrite is of the final usage
chunk, which the router always asks for and, when the client did not, turns back into what
vLLM sends without it (``router.proxy_usage``: the chunk dropped, its ``system_fingerprint``
moved onto the finish chunks). Each worker's fingerprint is remembered from its answers.

Failure semantics:

* connect error, a dropped connection or a 5xx **before the first byte** reaches the client:
  ``RetryableUpstream`` (the director tries another worker); but a 501 (vLLM's for what its
  engine does not do) is relayed as it came (``NOT_IMPLEMENTED``);
* no response headers (or no next chunk) within the upstream timeout: ``UpstreamTimeout``
  before the first byte; after it, the stream is ended as below;
* the worker breaks mid-stream: the client gets an OpenAI error event, then ``[DONE]`` (on
  the Responses API an ``event: error``, as OpenAI ends a failed stream; on the Messages
  API an Anthropic ``event: error``, as vLLM sends one);
* the worker tells of its own failure in the stream (vLLM's error event,
  ``router.stream_events``): as its first event, with a 5xx, ``RetryableUpstream`` (nothing
  reached the client); later, relayed as it came, the request ending with the status the
  event names (a 5xx counted as the worker's failure);
* a stream that ends with its usage chunk and no ``[DONE]``, or whose last event lacks its
  blank line, is whole (the event relayed as it came, completed);
* the client stops reading: a write to it that cannot go on for ``send_timeout_s`` (the
  kernel's and the transport's buffers full, their backlog not drained: a client reading
  nothing, or far slower than the stream comes) cuts its connection and ends the request as a
  client gone, freeing its slot and its worker (nginx's ``send_timeout``). Only writes that
  could wait are timed: a write the transport's buffer takes whole never waits;
* the client goes away: the upstream response is closed at once, which makes vLLM abort;
  when it goes after the stream's last event reached it (a client that stops reading at
  ``[DONE]``), the answer was whole: the cancellation carries its result
  (``CancelledAfterTheEnd``) so that it is counted as answered, with its usage;
* the router's drain runs out mid-stream (``router.drain.cut_by_drain``): the client gets an
  error event that says so, then ``[DONE]`` (``CancelledMidStream.cut_by_drain``), bounded by
  ``DRAIN_CUT_WRITE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from router.answer_facts import answer_facts
from router.drain import cut_by_drain
from router.errors import Overloaded, UpstreamTimeout, anthropic_error_body, error_body
from router.errors import UpstreamError as UpstreamAnswerError
from router.proxy_usage import Usage, UsageRewrite, parse_usage
from router.settings import DEFAULT_SEND_TIMEOUT_S
from router.stream_events import (
    carries_data,
    event_data,
    named_error_status,
    openai_error_status,
)
from workers.upstream import (
    UpstreamClient,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamDisconnected,
    UpstreamError,
    UpstreamHeadTooLarge,
    UpstreamLocalError,
    UpstreamPayloadError,
    UpstreamResponse,
)

log = logging.getLogger(__name__)

_EVENT_END = b"\n\n"
# the most bytes of one event held while waiting for its end: a worker (or a proxy before it)
# whose stream never ends an event is not buffered whole (vLLM's largest, a completion's
# prompt logprobs, is a few MiB for a long prompt)
MAX_EVENT_BYTES = 64 * 1024 * 1024
# what is read of a worker's 5xx or 3xx body (its message is all the router uses of it): the
# rest is not read, its connection closed; vLLM's JSON errors are far smaller
MAX_ERROR_BODY_BYTES = 64 * 1024
# what chunked transfer encoding adds to a write: the size line and the ending CRLF
_CHUNK_FRAMING = 32

# (``X-Accel-Buffering``: an nginx in front of the router passes each event on at once)
# (the Content-Type is vLLM's own, as Starlette writes a text type)
_STREAM_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8",
                   "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# the worker's header fields that describe its connection to the router or the body's
# framing, which the router's own answer sets anew (RFC 9110 §7.6.1), and those its answer
# sets itself; ``set-cookie`` too, whose several fields the upstream client joins into one;
# and the CORS fields (``access-control-*``, ``vary``): which pages may read an answer is the
# router's ``--allowed-origins`` (``router.cors``), not the worker's (vLLM allows any); and
# those that bind the origin the client reached, the router's (``strict-transport-security``,
# ``alt-svc``: a worker's would have the client's browser or HTTP stack hold the router's
# origin to the worker's TLS or protocol choices)
_NOT_RELAYED = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authenticate", "proxy-authorization", "content-length", "content-type",
    "date", "server", "set-cookie", "vary", "strict-transport-security", "alt-svc"})
_NOT_RELAYED_PREFIX = "access-control-"


def relayed_headers(worker: Mapping[str, str], own: Mapping[str, str]) -> CIMultiDict[str]:
    """The headers of an answer relayed from a worker: the worker's own (a 429's
    ``Retry-After``, vLLM's binary ``metadata``, whatever else it sends), less those of
    ``_NOT_RELAYED``, the CORS fields and those its ``Connection`` names, then the
    router's ``own``, which win over the worker's of the same name."""
    named = worker.get("connection")
    skipped = (_NOT_RELAYED if not named else
               _NOT_RELAYED | {name.strip().lower() for name in named.split(",")})
    headers = CIMultiDict((name, value) for name, value in worker.items()
                          if name.lower() not in skipped
                          and not name.lower().startswith(_NOT_RELAYED_PREFIX))
    headers.update(own)
    return headers


def openai_failure(message: str, events: int) -> bytes:
    """The events that end a chat or completion stream the worker broke (``events``: those
    relayed before, unused here)."""
    return (b"data: " + error_body(message, "upstream_error", "upstream_error")
            + b"\n\ndata: [DONE]\n\n")


def responses_failure(message: str, events: int) -> bytes:
    """The Responses API's: one ``error`` event, as OpenAI ends a stream that failed, numbered
    after the ``events`` relayed (vLLM numbers its events 0, 1, 2, …); no ``[DONE]``, which
    this API never sends."""
    return b"event: error\ndata: " + orjson.dumps({
        "type": "error", "code": "upstream_error", "message": message, "param": None,
        "sequence_number": events}) + b"\n\n"


def anthropic_failure(message: str, events: int) -> bytes:
    """The Messages API's: one ``error`` event, of vLLM's type for a failure mid-stream."""
    return b"event: error\ndata: " + anthropic_error_body(message, "internal_error") + b"\n\n"


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """How a stream ends, which events carry its first token (``first_token_mark`` in them;
    None: any event with data that is no error), the events that end it when the worker
    breaks it, and how an error event the worker sent is told (``error_status`` of an event
    that holds ``error_hint``: the status it stands for, None for any other event)."""

    end_marks: tuple[bytes, ...]
    first_token_mark: bytes | None = None
    failure: Callable[[str, int], bytes] = openai_failure
    error_hint: bytes = b'"error"'
    error_status: Callable[[bytes], int | None] = openai_error_status


# chat and completions: ``data: [DONE]`` ends the stream; every chunk carries tokens
COMPLETION_STREAM = StreamFormat((b"data: [DONE]", b"data:[DONE]"))
# the Responses API: no [DONE]; the response's last event ends it (or an error), and the
# first event with output is a ``….delta`` (``response.created`` and the like come before
# any token)
RESPONSES_STREAM = StreamFormat(
    (b"event: response.completed", b"event: response.incomplete", b"event: response.failed",
     b"event: error"),
    b".delta\ndata: ", responses_failure, b"event: error", named_error_status)
# Anthropic's Messages API: ``message_stop`` ends it (or an error, which vLLM follows with a
# ``[DONE]``); ``message_start`` and ``content_block_start`` come before any token, the first
# ``content_block_delta`` carries one
MESSAGES_STREAM = StreamFormat((b"event: message_stop", b"event: error"),
                               b"event: content_block_delta", anthropic_failure,
                               b"event: error", named_error_status)


# vLLM's binary pooling answers (``encoding_format: bytes``): the raw vectors, described by
# a JSON ``metadata`` header (ids, each vector's place and shape, the usage)
BINARY_TYPE = "application/octet-stream"
METADATA_HEADER = "metadata"


def _usage_of(raw: bytes) -> Usage | None:
    """The usage a JSON object (a binary answer's metadata) carries, None if none."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return parse_usage(parsed.get("usage")) if isinstance(parsed, dict) else None


def _names_missing_model(data: bytes, model: str) -> bool:
    """Whether a worker's 404 body is vLLM's ``NotFoundError`` for ``model``."""
    try:
        error = orjson.loads(data).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return False
    message = error.get("message") if isinstance(error, dict) else None
    return isinstance(message, str) and message.startswith(f"The model `{model}` does not exist")


class RetryableUpstream(Exception):
    """The worker failed before anything reached the client; another worker may serve it."""

    def __init__(self, reason: str, status: int, detail: str, *,
                 broke_off: bool = False, retry_after: str | None = None,
                 engine_error: bool = False) -> None:
        super().__init__(f"{reason}: {detail}")
        self._engine_error = engine_error
        # "connect", "disconnect", "http_5xx", "redirect" or "model_not_found"
        self.reason = reason
        self.status = status          # the worker's status, or 502 when there was none
        self.detail = detail
        self.broke_off = broke_off    # a "disconnect" after the answer's head came
        self.retry_after = retry_after    # a busy worker's Retry-After, as it sent it
        # the message of the worker's JSON error (``answered``), read from its whole body:
        # ``detail`` keeps 2,000 characters of it, which cut a long one's JSON
        self.message: str | None = None

    @property
    def busy(self) -> bool:
        """Whether the worker said it is too busy to take the request, up and able to take
        one later: vLLM's 503 when its queue is full (``--max-num-queued-reqs`` or
        ``--max-num-queued-tokens``: ``BUSY_MESSAGES``), or any 503 with a ``Retry-After``.
        (A proxy's 503 page in front of an engine gone, or vLLM's 503 for a failed request,
        is a failure.)"""
        if self.reason != "http_5xx" or self.status != BUSY_STATUS:
            return False
        if self.retry_after is not None:
            return True
        message = self.message
        if message is None:
            message = _error_message(self.detail.partition(": ")[2])
        return message is not None and message.startswith(BUSY_MESSAGES)

    @classmethod
    def answered(cls, status: int, body: str, retry_after: str | None) -> RetryableUpstream:
        """A worker's 5xx answer (``body``: all of it, which ``detail`` keeps 2,000
        characters of)."""
        failure = cls("http_5xx", status, f"HTTP {status}: {one_line(body, 2000)}",
                      retry_after=retry_after if status == BUSY_STATUS else None,
                      engine_error=status == ENGINE_ERROR_STATUS and _is_vllm_error(body))
        failure.message = _error_message(body)
        return failure

    @property
    def engine_error(self) -> bool:
        """Whether the worker answered with vLLM's 500 for a request its engine failed on
        (its JSON error body, with a ``type``), which may be the request's doing (a schema
        past what the engine reads), rather than failing to answer (no connection, a broken
        answer) or another server's 5xx in front of it (a gateway's 502, a proxy's page)."""
        return self._engine_error

    def client_text(self) -> str:
        """What the client is told: for a 5xx its status and the message of the worker's
        own (JSON) error, else the kind of failure; the details (the worker's body, its
        address, the system's error) are the log's."""
        if self.reason == "http_5xx":
            message = self.message
            if message is None:
                message = _error_message(self.detail.partition(": ")[2])
            said = f"the worker answered HTTP {self.status}" + (
                f": {message}" if message else "")
        else:
            said = _BROKE_OFF if self.broke_off else _CLIENT_TEXT.get(self.reason, self.detail)
        return f"{self.reason}: {said}"


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one line of at most ``limit`` characters, for a log or a client: a
    worker's body with line breaks split a log record in several (one of them could pass for
    a line of the router's own), and control characters are no one's to print."""
    # a character at a time is ~0.1 s a MiB on the event loop (a worker's error page of
    # 8 MiB held every request and stream 1 s): only a head of ``text`` long enough for
    # ``limit`` characters once its runs of blanks are folded is looked at
    window = max(4 * limit, 1024)
    while True:
        head = text[:window]
        printable = "".join(char if char.isprintable() else " " for char in head)
        folded = " ".join(printable.split())
        if len(folded) > limit or len(head) == len(text) or window >= _ONE_LINE_MAX_WINDOW:
            return folded[:limit]
        window *= 4


# the most of a text ``one_line`` reads (a text of blanks past it folds to what came before)
_ONE_LINE_MAX_WINDOW = 1 << 20


async def _read_at_most(upstream: UpstreamResponse, limit: int) -> bytes:
    """The first ``limit`` bytes of the answer's body (or all of a shorter one); the rest is
    not read (closing the answer then closes its connection, not kept: not read to its end)."""
    parts: list[bytes] = []
    size = 0
    async for data in upstream.chunks():
        parts.append(data)
        size += len(data)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


def _error_fields(body: str) -> tuple[dict[str, Any], bool] | None:
    """The object holding a JSON error body's fields and whether it is nested: its
    ``error`` object (vLLM's since v0.10.1, True), else the body itself (flat before,
    False); None for any other body (a proxy's page, a traceback)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error")
    return (error, True) if isinstance(error, dict) else (parsed, False)


def _error_message(body: str) -> str | None:
    """The ``message`` of a JSON error body, vLLM's, on one line; None for any other body."""
    fields = _error_fields(body)
    message = fields[0].get("message") if fields is not None else None
    return one_line(message, 200) if isinstance(message, str) and message.strip() else None


# vLLM's status for a request its engine failed on (an internal error, ``FinishReason.ERROR``)
ENGINE_ERROR_STATUS = 500


def _is_vllm_error(body: str) -> bool:
    """Whether ``body`` is vLLM's JSON error (``{"error": {"message", "type", …}}``, or flat
    with ``"object": "error"`` before v0.10.1), whatever its message (vLLM's 500 may say
    nothing)."""
    fields = _error_fields(body)
    if fields is None:
        return False
    holder, nested = fields
    return "message" in holder and ("type" in holder if nested
                                    else holder.get("object") == "error")


_CLIENT_TEXT = {"connect": "the worker did not take the connection",
                "disconnect": "the worker closed the connection before it answered",
                "redirect": "the worker redirected the request (its URL in the fleet file is "
                            "not where it serves)"}
_BROKE_OFF = "the worker's answer broke off before it was whole"


def _broken_stream_text(exc: BaseException) -> str:
    """What a client is told of how its stream broke (not the router's class names)."""
    if isinstance(exc, UpstreamPayloadError):
        return "its answer ended early or was badly framed"
    if isinstance(exc, UpstreamDisconnected):
        return "its connection closed"
    return "its connection failed"


# the workers' origins whose system_fingerprint is kept (the fleet's, and those that left)
MAX_KEPT_ORIGINS = 4096
# what a request whose client left before its answer is counted as (nginx's 499)
CLIENT_LEFT = 499
# what vLLM answers when its queue is full (``--max-num-queued-reqs``,
# ``--max-num-queued-tokens``), and how its message begins
BUSY_STATUS = 503
BUSY_MESSAGES = ("The engine is currently busy", "The engine has reached its prefill token "
                 "backlog limit")
# vLLM's answer to what its engine does not do (a NotImplementedError): the same on every
# worker of the model, so relayed as it came, not tried elsewhere, nor the worker's failure
NOT_IMPLEMENTED = 501


@dataclass(slots=True)
class ProxyResult:
    response: web.StreamResponse
    status: int                         # as seen by the client (499: the client left)
    usage: Usage | None
    first_byte_at: float | None         # monotonic, None for non-streamed answers
    finished_at: float
    events: int = 0                     # stream events relayed to the client (``data:`` lines)
    # a failed answer (status >= 500) that is the worker's failure (counted toward ejecting
    # it); not a stream cut for the size of one of its events
    worker_failed: bool = True
    # the stream ended with an error event of the worker's own (its status is the event's)
    worker_error_event: bool = False


def cut_at_worker(status: int, result: ProxyResult | None) -> bool:
    """Whether the router closed its connection to the worker while the worker was running
    the request: its client left (``CLIENT_LEFT``), the wait for an answer ran out
    (``UpstreamTimeout``), a stream cut for the size of an event. The worker runs it until
    it notices, its request id with it (``RequestIds.hold_after_release``)."""
    return (status in (CLIENT_LEFT, UpstreamTimeout.status)
            or (result is not None and status >= 500 and not result.worker_failed))


class EventTooLarge(Exception):
    """One event of a stream is longer than ``MAX_EVENT_BYTES``: the answer's size, not the
    worker's failure (not retried, not counted toward ejecting it)."""


# how long a stream whose last event was relayed is read on for the end of its body (the
# connection kept for the next request), its client's answer finished already (in the
# background: ``UpstreamResponse.close_when_whole``)
DRAIN_AFTER_END_S = 1.0

# how long the error event of a stream the router's drain cut may take to reach its client
# (the process is stopping: a client not reading is not waited for)
DRAIN_CUT_WRITE_S = 2.0


class CancelledAfterTheEnd(asyncio.CancelledError):
    """The request was cancelled (its client left) after the stream's last event had been
    written to the client, or the worker's error event (its last word, on which the SDKs
    raise and leave): ``result`` is the whole answer's, status 200, or the error's."""

    def __init__(self, result: ProxyResult) -> None:
        super().__init__()
        self.result = result


class CancelledMidStream(asyncio.CancelledError):
    """The request was cancelled (its client left, or the router's drain ran out:
    ``cut_by_drain`` says why, the client told so by an error event) while its stream was
    relayed: ``events`` of it had been relayed, which the client's budget is charged for."""

    def __init__(self, events: int, cut_by_drain: str | None = None) -> None:
        super().__init__()
        self.events = events
        self.cut_by_drain = cut_by_drain


class Proxy:
    """Talks to workers through one keep-alive ``UpstreamClient``."""

    def __init__(self, client: UpstreamClient, upstream_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S) -> None:
        self._client = client
        self._upstream_timeout_s = upstream_timeout_s
        self._send_timeout_s = send_timeout_s
        self._clock = clock
        # each worker's system_fingerprint (fixed for a server's lifetime), by origin
        self._fingerprints: dict[URL, str | None] = {}
        self._out_of_resources = 0       # connections the router's own limits refused

    async def forward(self, request: web.Request, url: str | URL, body: bytes | None,
                      headers: Mapping[str, str], response_headers: Mapping[str, str],
                      stream: bool, wants_usage: bool,
                      on_first_byte: Callable[[], None],
                      stream_format: StreamFormat = COMPLETION_STREAM,
                      method: str = "POST", adapter: str | None = None,
                      head_timeout_s: float | None = None,
                      keep_waiting: Callable[[], bool] | None = None) -> ProxyResult:
        """Send ``body`` (None: a request without one, e.g. a GET) and relay the answer;
        ``on_first_byte`` is called when the first token is relayed (``stream_format``).
        ``head_timeout_s``: how long the answer's head may take past the upstream timeout
        while ``keep_waiting()`` says so at each timeout's end (a whole answer's head comes
        once all of it is generated; None: the upstream timeout).
        ``adapter``: the LoRA adapter the request names, whose 404 from a worker that no
        longer has it loaded (unloaded since its last ``/v1/models``) is retryable
        (``model_not_found``) instead of relayed."""
        sent_at = self._clock() if keep_waiting is not None else 0.0
        try:
            upstream = await self._client.request(method, url, body, headers, head_timeout_s,
                                                  keep_waiting)
        except UpstreamConnectTimeout as exc:
            raise RetryableUpstream("connect", 502, f"connect timeout to {url}") from exc
        except TimeoutError as exc:
            # (waited on past the timeout: for one more timeout at least)
            waited_s = self._clock() - sent_at if keep_waiting is not None else 0.0
            raise self._timeout_error(
                waited_s if waited_s > 1.5 * self._upstream_timeout_s else None) from exc
        except UpstreamLocalError as exc:      # the router's own limit: not the worker's
            self._out_of_resources += 1
            if self._out_of_resources % 1000 == 1:
                log.warning("no connection to a worker for want of the router's own resources "
                            "(%s; %d time(s) so far): raise its open-file limit", exc,
                            self._out_of_resources)
            raise Overloaded("The router cannot open a connection to a worker now (it is at "
                             "its open-file limit): try again later.",
                             headers={"Retry-After": "1"}) from exc
        except UpstreamHeadTooLarge as exc:    # the answer's size: not retried, not the worker's
            raise UpstreamAnswerError(
                f"The worker's answer has a header too large to relay ({exc}): for vLLM's "
                "binary pooling answers, ask for fewer inputs per request.") from exc
        except (UpstreamDisconnected, UpstreamPayloadError) as exc:
            raise RetryableUpstream("disconnect", 502, f"{url}: {exc}") from exc
        except (UpstreamConnectError, OSError) as exc:
            raise RetryableUpstream("connect", 502, f"{url}: {exc}") from exc
        try:
            if upstream.status >= 500 and upstream.status != NOT_IMPLEMENTED:
                said = (await _read_at_most(upstream, MAX_ERROR_BODY_BYTES)).decode(
                    "utf-8", "replace")
                raise RetryableUpstream.answered(upstream.status, said,
                                                 upstream.headers.get("retry-after"))
            if 300 <= upstream.status < 400 and upstream.status != 304:
                # vLLM never redirects: the fleet file's URL is not where it serves (a proxy
                # sending http to https, a path moved); its Location is no client's business
                await _read_at_most(upstream, MAX_ERROR_BODY_BYTES)
                raise RetryableUpstream("redirect", 502, (
                    f"{url} answered {upstream.status} to "
                    f"{upstream.headers.get('location', '(no Location)')}"))
            if upstream.status == 404 and adapter is not None:
                data = await upstream.read()
                if _names_missing_model(data, adapter):
                    raise RetryableUpstream("model_not_found", 404,
                                            data.decode("utf-8", "replace")[:300])
                return await self._relay_whole(upstream, response_headers, data)
            is_sse = upstream.content_type == "text/event-stream"
            if stream and upstream.status == 200 and is_sse:
                return await self._relay_stream(request, upstream, response_headers,
                                                wants_usage, on_first_byte, stream_format)
            return await self._relay_whole(upstream, response_headers)
        except TimeoutError as exc:
            raise self._timeout_error() from exc
        except (UpstreamError, OSError) as exc:
            raise RetryableUpstream("disconnect", 502, f"{url}: {exc}",
                                    broke_off=True) from exc
        finally:
            upstream.close()     # a finished answer's connection goes back to the pool

    def _timeout_error(self, waited_s: float | None = None) -> UpstreamTimeout:
        """The 504 after the upstream timeout, or after ``waited_s`` (a whole answer waited
        for on past it while its engine generated)."""
        if waited_s is None:
            return UpstreamTimeout(
                f"The worker did not answer within {self._upstream_timeout_s:g} s.")
        return UpstreamTimeout(f"The worker did not answer within {waited_s:.0f} s, its "
                               "engine generating meanwhile.")

    async def _relay_whole(self, upstream: UpstreamResponse,
                           response_headers: Mapping[str, str],
                           data: bytes | None = None) -> ProxyResult:
        """Relay a whole answer (``data``: its body, when already read)."""
        if data is None:
            data = await upstream.read()
        usage = None
        metadata = upstream.headers.get(METADATA_HEADER)
        if metadata is not None and upstream.content_type == BINARY_TYPE:
            # vLLM's binary pooling answer: what the bytes are (and its usage) is in a header
            if upstream.status == 200:
                usage = _usage_of(metadata.encode("latin-1"))
        elif upstream.status == 200 and upstream.content_type != BINARY_TYPE:
            facts = answer_facts(data)
            usage = facts.usage
            if facts.has_fingerprint:
                self._remember_fingerprint(upstream.origin, facts.fingerprint)
        response = web.Response(status=upstream.status, body=data,
                                headers=relayed_headers(upstream.headers, response_headers),
                                content_type=upstream.content_type or "application/json")
        return ProxyResult(response, upstream.status, usage, None, self._clock())

    async def _relay_stream(self, request: web.Request, upstream: UpstreamResponse,
                            response_headers: Mapping[str, str], wants_usage: bool,
                            on_first_byte: Callable[[], None],
                            stream_format: StreamFormat) -> ProxyResult:
        origin = upstream.origin
        rewrite = UsageRewrite(wants_usage, self._fingerprints.get(origin))
        relay = _StreamRelay(request, relayed_headers(upstream.headers, response_headers),
                             rewrite, stream_format, self._send_timeout_s,
                             on_first_token=(self._clock, on_first_byte))
        try:
            return await self._relay_events(upstream, relay)
        finally:
            if rewrite.saw_usage:
                self._remember_fingerprint(origin, rewrite.fingerprint)

    def _remember_fingerprint(self, origin: URL, fingerprint: str | None) -> None:
        fingerprints = self._fingerprints
        if origin not in fingerprints and len(fingerprints) >= MAX_KEPT_ORIGINS:
            del fingerprints[next(iter(fingerprints))]     # the oldest: workers come and go
        fingerprints[origin] = fingerprint

    async def _relay_events(self, upstream: UpstreamResponse,
                            relay: _StreamRelay) -> ProxyResult:
        try:
            return await self._relay_to_the_end(upstream, relay)
        except asyncio.CancelledError as cancelled:
            if not relay.end_written:
                why = cut_by_drain(cancelled)
                if why is None and relay.worker_error is not None:
                    raise CancelledAfterTheEnd(self._left_mid_stream(relay)) from None
                if why is not None and relay.started:     # (its head sent: told in-stream)
                    await _tell_drain_cut(relay, why)
                    raise CancelledMidStream(relay.events, why) from None
                if relay.events:
                    raise CancelledMidStream(relay.events) from None
                raise
            raise CancelledAfterTheEnd(ProxyResult(
                relay.response_or_new(), relay.status, relay.usage, relay.first_byte_at,
                self._clock(), relay.events)) from None

    async def _relay_to_the_end(self, upstream: UpstreamResponse,
                                relay: _StreamRelay) -> ProxyResult:
        chunks = upstream.chunks()
        try:
            async for chunk in chunks:
                if not await relay.feed(chunk):
                    return self._left_mid_stream(relay)
                # a stream whose last event was relayed is whole, however its body ends
                # after it (the final chunk missing, the connection dropped or silent)
                if relay.done:
                    break
            else:
                missing = relay.missing_event_end       # its last event's blank line
                if missing is not None and not await relay.feed(missing):
                    return self._left_mid_stream(relay)
        except EventTooLarge as exc:
            if not relay.started:      # the answer's size: the client's 502, no one retried
                raise UpstreamAnswerError(str(exc)) from None
            await relay.fail(str(exc))
            return ProxyResult(relay.response_or_new(), 502, relay.usage, relay.first_byte_at,
                               self._clock(), relay.events, worker_failed=False)
        except TimeoutError:
            if not relay.started:
                raise
            await relay.fail(f"The worker stopped mid-stream: nothing came for "
                             f"{self._upstream_timeout_s:g} s.")
            return ProxyResult(relay.response_or_new(), 504, relay.usage, relay.first_byte_at,
                               self._clock(), relay.events)
        except (UpstreamError, OSError) as exc:
            if not relay.started:
                raise
            await relay.fail(f"The worker stopped mid-stream: {_broken_stream_text(exc)}.")
            return ProxyResult(relay.response_or_new(), 502, relay.usage, relay.first_byte_at,
                               self._clock(), relay.events)
        if not relay.started:
            raise RetryableUpstream("disconnect", 502, "the worker closed an empty stream")
        if not relay.done and not relay.usage_came:    # (its usage chunk is its last)
            await relay.fail("The worker closed the stream before it finished.")
            return ProxyResult(relay.response_or_new(), 502, relay.usage, relay.first_byte_at,
                               self._clock(), relay.events)
        await chunks.aclose()         # (left at the last event: the rest is read below)
        await relay.finish()          # the client has its whole answer now
        # the body's end is read on in the background for a moment, the connection kept
        # if it comes; a worker silent after its last event is dropped then, not waited on
        upstream.close_when_whole(DRAIN_AFTER_END_S)
        return ProxyResult(relay.response_or_new(), relay.status, relay.usage,
                           relay.first_byte_at, self._clock(), relay.events,
                           worker_error_event=relay.worker_error is not None)

    def _left_mid_stream(self, relay: _StreamRelay) -> ProxyResult:
        """The result of a stream whose client left before its end: ``CLIENT_LEFT``, or,
        once the worker's error event was relayed, that error, the worker's failure (an SDK
        raises on the event and closes the stream: the rest, ``[DONE]``, never reaches it,
        and a worker failing every stream so was set aside only when the client was slower
        than the router's last write)."""
        if relay.worker_error is not None:
            return ProxyResult(relay.response_or_new(), relay.worker_error, relay.usage,
                               relay.first_byte_at, self._clock(), relay.events,
                               worker_error_event=True)
        return ProxyResult(relay.response_or_new(), CLIENT_LEFT, relay.usage,
                           relay.first_byte_at, self._clock(), relay.events)


async def _tell_drain_cut(relay: _StreamRelay, why: str) -> None:
    """End a stream the router's drain cut with an error event saying so (within
    ``DRAIN_CUT_WRITE_S``; a client gone or not reading is left as it is)."""
    # (a second cut while it is written ends the write: the request is cut either way)
    with contextlib.suppress(TimeoutError, ConnectionResetError,
                             aiohttp.ClientConnectionResetError, asyncio.CancelledError):
        async with asyncio.timeout(DRAIN_CUT_WRITE_S):
            await relay.fail(f"The router is stopping and cut this stream before its end "
                             f"({why}): send the request again.")


class _StreamRelay:
    """Cuts upstream bytes at SSE event boundaries and writes them to the client."""

    __slots__ = ("_carried_cr", "_end_lines", "_end_marks", "_error_hint", "_error_status",
                 "_failure", "_first_mark", "_headers", "_on_first", "_pending", "_request",
                 "_response", "_rewrite", "_send_timeout_s", "done", "end_written", "events",
                 "first_byte_at", "worker_error")

    def __init__(self, request: web.Request, headers: Mapping[str, str],
                 rewrite: UsageRewrite, stream_format: StreamFormat,
                 send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
                 on_first_token: tuple[Callable[[], float], Callable[[], None]] | None = None
                 ) -> None:
        """``on_first_token``: (clock, callback): when the event that carries the stream's
        first token is relayed (``stream_format.first_token_mark`` in it; any event with
        data but an error when it has none), ``first_byte_at`` is the clock's and the
        callback is called."""
        self._request = request
        self._first_mark = stream_format.first_token_mark
        self._on_first = on_first_token
        self._send_timeout_s = send_timeout_s
        # an event line starts the bytes or follows a line break: "data: [DONE]" in a token's
        # text is inside a JSON string, where a line break is escaped
        self._end_marks = stream_format.end_marks
        self._end_lines = tuple(b"\n" + mark for mark in stream_format.end_marks)
        self._failure = stream_format.failure
        self._error_hint = stream_format.error_hint
        self._error_status = stream_format.error_status
        self._headers = headers
        self._rewrite = rewrite
        self._pending = bytearray()
        self._carried_cr = False
        self._response: web.StreamResponse | None = None
        self.done = False        # the stream's last event was relayed (or is being written)
        self.end_written = False     # … and its write to the client returned
        self.first_byte_at: float | None = None
        self.events = 0          # ``data:`` lines relayed: about a token each (admission)
        self.worker_error: int | None = None     # the status of the worker's error event

    @property
    def usage(self) -> Usage | None:
        return self._rewrite.usage

    @property
    def usage_came(self) -> bool:
        """Whether the chunk with the answer's usage came (the last before ``[DONE]``)."""
        return self._rewrite.saw_usage

    @property
    def status(self) -> int:
        """The answer's status once its stream ended: the worker's error event's, else 200."""
        return self.worker_error if self.worker_error is not None else 200

    @property
    def started(self) -> bool:
        return self._response is not None

    @property
    def missing_event_end(self) -> bytes | None:
        """At the body's end, what completes an event whose last line ended but whose blank
        line never came (a line ended by a CR is held back as a CR), else None."""
        ended = self._pending.endswith(b"\n")
        if self._carried_cr:     # (the CR held back ends a line: read with what is fed)
            return b"\n" if ended else b"\n\n"
        return b"\n" if ended else None

    def response_or_new(self) -> web.StreamResponse:
        if self._response is not None:
            return self._response
        return web.StreamResponse(status=CLIENT_LEFT)

    async def feed(self, chunk: bytes) -> bool:
        """Relay the complete events in ``chunk``; False when the client has gone.

        What follows the last complete event waits in ``_pending`` for the next chunk, which
        is searched alone (with the byte before it): an event of megabytes that comes in
        many chunks is copied once, not once per chunk. SSE lines may end in CRLF or CR
        (vLLM's end in LF): they are read as LF, a CR ending a chunk kept for the next."""
        if self._carried_cr:
            chunk, self._carried_cr = b"\r" + chunk, False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk, self._carried_cr = chunk[:-1], True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        pending = self._pending
        if not pending:
            cut = chunk.rfind(_EVENT_END)
            if cut < 0:
                self._hold(chunk)
                return True
            out = chunk[:cut + 2]
            if cut + 2 < len(chunk):
                pending += chunk[cut + 2:]
        else:
            searched = len(pending) - 1        # (no event end in it before this chunk)
            pending += chunk
            cut = pending.rfind(_EVENT_END, searched)
            if cut < 0:
                self._hold(b"")
                return True
            out = bytes(pending[:cut + 2])
            del pending[:cut + 2]
        if self.worker_error is None and self._error_hint in out:
            self._read_error(out)
        if self._rewrite.needs_events(out):
            events = self._rewrite.events(out.split(_EVENT_END)[:-1])
            out = b"".join(event + _EVENT_END for event in events)
        if out.startswith(self._end_marks) or any(line in out for line in self._end_lines):
            self.done = True
        if self.first_byte_at is None and self._on_first is not None and self._has_token(out):
            clock, on_first = self._on_first
            self.first_byte_at = clock()
            on_first()
        # likewise a data line
        self.events += out.count(b"\ndata:") + out.startswith(b"data:")
        written = await self._write(out)
        self.end_written = self.done and written
        self._hold(b"")             # what follows the events written: within the bound
        return written

    def _read_error(self, out: bytes) -> None:
        """The status of the first error event the worker sent in ``out``; as the stream's
        first event, with a 5xx, ``RetryableUpstream`` (nothing reached the client)."""
        for position, event in enumerate(out.split(_EVENT_END)[:-1]):
            status = self._error_status(event)
            if status is None:
                continue
            if (status >= 500 and status != NOT_IMPLEMENTED and position == 0
                    and not self.started):
                data = event_data(event) or event
                raise RetryableUpstream("http_5xx", status, f"HTTP {status}: " + one_line(
                    data.decode("utf-8", "replace"), 2000))
            self.worker_error = status
            return

    def _has_token(self, out: bytes) -> bool:
        """Whether the events ``out`` carry a token (a comment, a keep-alive, an error, the
        ``[DONE]`` do not)."""
        mark = self._first_mark
        if mark is not None:
            return mark in out
        if out.startswith(b"data: {") and self._error_hint not in out:     # vLLM's
            return True
        return any(carries_data(event) and self._error_status(event) is None
                   and event_data(event) not in (b"[DONE]", b"")
                   for event in out.split(_EVENT_END)[:-1])

    def _hold(self, chunk: bytes) -> None:
        """Keep ``chunk`` for the event it begins, at most ``MAX_EVENT_BYTES`` of one."""
        self._pending += chunk
        if len(self._pending) > MAX_EVENT_BYTES:
            raise EventTooLarge(f"The worker's stream has an event of more than "
                                f"{MAX_EVENT_BYTES} bytes, which the router does not hold.")

    async def _write(self, data: bytes) -> bool:
        try:
            if self._response is None:
                response = web.StreamResponse(status=200, headers=self._headers)
                response.headers.update(_STREAM_HEADERS)
                await response.prepare(self._request)
                self._response = response
            if data:
                await self._send(self._response.write(data), len(data))
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, TimeoutError):
            return False           # (on a timeout, the client was cut)
        return True

    async def _send(self, sending: Coroutine[Any, Any, None], size: int) -> None:
        """Await ``sending``, a write of ``size`` bytes to the client, when it may wait, for
        as long as the client takes some of what waits for it within each ``send_timeout_s``
        (an event of megabytes read slowly is not cut); past that, the client is cut and
        TimeoutError raised."""
        if not self._may_wait(size):
            await sending
            return
        try:
            async with asyncio.timeout(None) as deadline:      # (ended by the watch)
                progress = _ClientProgress(self._request.transport, deadline,
                                           self._send_timeout_s)
                try:
                    await sending
                finally:
                    progress.stop()
        except TimeoutError:
            self._cut_client()
            raise

    def _may_wait(self, size: int) -> bool:
        """Whether writing ``size`` more bytes may wait for the client: while writing is
        paused (the buffer went past its high-water mark and has not drained below the low
        one since), or when they take the buffer past the high-water mark. A client reading
        along keeps it empty, so a token's write is not timed: a timer costs microseconds."""
        transport = self._request.transport
        if transport is None:        # closed: the write raises at once
            return False
        if self._request.protocol.writing_paused:
            return True
        return (transport.get_write_buffer_size() + size + _CHUNK_FRAMING
                > transport.get_write_buffer_limits()[1])

    def _cut_client(self) -> None:
        """The client read nothing for ``send_timeout_s``: its connection is closed, so the
        request ends as one whose client left (its slot and its worker freed)."""
        log.info("a client (%s) read nothing of its stream for %g s: its connection is "
                 "closed", self._request.remote, self._send_timeout_s)
        transport = self._request.transport
        if transport is not None:
            transport.abort()

    async def fail(self, message: str) -> None:
        held = [event + _EVENT_END for event in self._rewrite.flush()]
        await self._write(b"".join(held) + self._failure(message, self.events + len(held)))
        await self.finish()

    async def finish(self) -> None:
        if self._response is not None:
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError,
                                     TimeoutError):      # (on a timeout, the client was cut)
                await self._send(self._response.write_eof(), 0)


class _ClientProgress:
    """Ends a write (its ``deadline``, a timeout with none of its own) once its client has
    taken none of its bytes for ``timeout_s``: each quarter of it the transport's buffer is
    read, and a buffer smaller than at the reading before is the client taking some (nginx's
    ``send_timeout``, which times the gap between two of the client's reads, not the whole
    write). The watch alone ends it, at one of its readings: a deadline of its own, moved
    from a timer, raced it (moved while it expired)."""

    __slots__ = ("_buffered", "_deadline", "_last_taken", "_loop", "_tick", "_timeout_s",
                 "_transport")

    def __init__(self, transport: asyncio.WriteTransport | None, deadline: asyncio.Timeout,
                 timeout_s: float) -> None:
        self._transport = transport
        self._deadline = deadline
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._buffered = self._buffer_size()
        self._last_taken = self._loop.time()
        self._tick = self._loop.call_later(timeout_s / 4, self._check)

    def _buffer_size(self) -> int:
        transport = self._transport
        if transport is None or transport.is_closing():
            return 0
        # (no isinstance check: uvloop's transports derive from none of asyncio's classes)
        return transport.get_write_buffer_size()

    def _check(self) -> None:
        now, buffered = self._loop.time(), self._buffer_size()
        if buffered < self._buffered:
            self._last_taken = now
        self._buffered = buffered
        if now - self._last_taken >= self._timeout_s:
            self._deadline.reschedule(now)      # silent for the timeout: the write ends now
            return
        self._tick = self._loop.call_later(self._timeout_s / 4, self._check)

    def stop(self) -> None:
        self._tick.cancel()
