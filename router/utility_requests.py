"""Requests that take no routing decision.

``POST /tokenize``, ``POST /detokenize`` and ``POST /v1/messages/count_tokens`` (Anthropic's):
vLLM answers them in its API server, from the model's tokenizer, without the engine. No
policy runs, nothing is reserved, nothing is learnt. ``POST /v1/audio/transcriptions`` and
``/v1/audio/translations`` (a speech model's, a form with the audio file) go the same way:
their body is forwarded as it came, its ``model`` field read (``router.form_fields``), and
streamed back when its ``stream`` field is true; being a model's work on a GPU, they pass
the routing file's admission as routed requests do (their tenant's budget: a request, and
the tokens their worker reports; the in-flight limit; a refusal recorded beside the decisions,
``router.refusals``) and count as a request in flight on their worker while it serves them.
A tokenizer request naming a routing rule's alias is sent on naming its target. The request
goes to the healthy worker serving its ``model`` with the fewest requests in
flight (ties taken in turn; workers ejected by ``router.ejection`` last), and on a connect
error or a 5xx to the next one, at most ``Settings.max_retries`` times. ``model`` may be left
out, as vLLM allows, when every worker of the fleet serves one model.

``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``: only the worker that made
the response holds it, so they go there (``router.response_locator``); a response no worker
holds is vLLM's 404, and an owner that is down a 503.

Counted in ``kvroute_requests_total`` under the profile ``utility``. Their answers carry the
headers routed ones do: ``x-kvroute-worker``, ``x-kvroute-profile`` (``utility``),
``x-kvroute-reason`` (why that worker) and the request id (the client's, else a new one).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import quote

import orjson
from aiohttp import web
from yarl import URL

from policies.admission.section import AdmissionSection
from router.admission.controller import Admission, AdmissionTicket
from router.client_auth import TENANT
from router.ejection import WorkerEjection
from router.errors import (
    AdmissionRefused,
    InvalidRequest,
    ModelNotFound,
    NoWorkerAvailable,
    ResponseNotFound,
    RouterError,
    UpstreamError,
    UpstreamTimeout,
)
from router.form_fields import boundary_of, form_fields
from router.forwarded_headers import worker_headers
from router.header_values import header_safe
from router.metrics import RESPONSES_API, UNKNOWN_MODEL, RouterMetrics, api_of_path
from router.protocol import (
    DOT_SEGMENTS,
    RESPONSES_PATH,
    check_model,
    parse_body,
    tenant_of,
)
from router.proxy import (
    CLIENT_LEFT,
    RESPONSES_STREAM,
    CancelledAfterTheEnd,
    CancelledMidStream,
    Proxy,
    ProxyResult,
    RetryableUpstream,
    cut_at_worker,
)
from router.refusals import RefusalRecord, RefusalRecorder
from router.request_body import read_body
from router.request_ids import RequestIds
from router.response_locator import ResponseLocator
from router.settings import Settings
from router.state.store import StateStore
from router.trace_context import request_trace_id
from workers.models import WorkerView
from workers.registry import WorkerRegistry

log = logging.getLogger(__name__)

PROFILE = "utility"


class FormAdmission:
    """What the audio APIs pass through: the router's ``Admission`` under the routing file's
    section in force (``section``; ``fingerprint``, that file's, read with it), the state
    store counting a worker's requests in flight, ``ended(worker)``, told when one ends
    (``Director.settle_departed``: the last request at a worker the fleet removed meanwhile
    clears what was kept of it), and where a refused request is recorded (``refusals``)."""

    __slots__ = ("admission", "ended", "fingerprint", "refusals", "section", "store")

    def __init__(self, admission: Admission, section: Callable[[], AdmissionSection | None],
                 store: StateStore, ended: Callable[[str], None] = lambda worker: None,
                 fingerprint: Callable[[], str | None] = lambda: None,
                 refusals: RefusalRecorder | None = None) -> None:
        self.admission = admission
        self.section = section
        self.store = store
        self.ended = ended
        self.fingerprint = fingerprint
        self.refusals = refusals


class UtilityRequests:
    """Forwards tokenizer requests to a worker of their model; needs no policy."""

    def __init__(self, settings: Settings, registry: WorkerRegistry, responses: ResponseLocator,
                 proxy: Proxy, metrics: RouterMetrics,
                 clock: Callable[[], float] = time.monotonic,
                 ejection: WorkerEjection | None = None,
                 forms: FormAdmission | None = None,
                 aliases: Callable[[], Mapping[str, str]] = dict) -> None:
        """``forms``: the admission the audio APIs pass (None: none, nothing counted);
        ``aliases()``: the routing file's model aliases in force, each with its target
        (``policies.rules.model_aliases``), which the tokenizer requests name as
        ``/v1/models`` lists them."""
        self._settings = settings
        self._registry = registry
        self._responses = responses
        self._proxy = proxy
        self._metrics = metrics
        self._clock = clock
        self._turn = itertools.count()
        self._ids = RequestIds(clock=clock)
        self._ejection = ejection if ejection is not None else WorkerEjection(0, 1.0)
        self._forms = forms
        self._aliases = aliases

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        request_id = self._ids.claim(request.headers.get(self._settings.request_id_header))
        try:
            try:
                body = await read_body(request, self._settings.body_timeout_s,
                                       self._settings.max_body_bytes)
                data = parse_body(body, self._settings.max_body_values)
                raw_model = data.get("model")
                # as vLLM: "" too
                model = None if raw_model in (None, "") else check_model(raw_model)
            except RouterError as refused:    # a bad body: counted, as refused before routing
                self._metrics.record_request(UNKNOWN_MODEL, "", "", "none", refused.status,
                                             api_of_path(path))
                raise
            target = self._aliases().get(model) if model is not None else None
            if target is not None:           # an alias: its target's tokenizer, named so
                model = target
                body = orjson.dumps({**data, "model": target})
            candidates = self._candidates(model, api_of_path(path))
            return await self._forward(request, path, body, model, candidates, request_id)
        except RouterError as error:      # a refusal names its request, as every one does
            error.headers.setdefault(self._settings.request_id_header, request_id)
            raise
        finally:
            self._ids.release(request_id)

    async def handle_form(self, request: web.Request, path: str) -> web.StreamResponse:
        """vLLM's audio APIs: a ``multipart/form-data`` body (the audio and its fields),
        forwarded as it came to a worker of its ``model`` field, streamed when its
        ``stream`` field says so."""
        request_id = self._ids.claim(request.headers.get(self._settings.request_id_header))
        api = api_of_path(path)
        try:
            try:
                boundary = boundary_of(request.headers.get("Content-Type", ""))
                if boundary is None:
                    raise InvalidRequest(f"{path} takes a multipart/form-data body (the audio "
                                         "file and its fields), as vLLM does.", param="file")
                body = await read_body(request, self._settings.body_timeout_s,
                                       self._settings.max_body_bytes)
                fields = form_fields(body, boundary, ("model", "stream"))
                raw_model = fields.get("model")
                model = None if raw_model in (None, "") else check_model(raw_model)
                # the key's tenant, else the client's x-tenant (as a routed request's)
                tenant = request.get(TENANT) or tenant_of(request.headers)
            except RouterError as refused:    # a bad body: counted, as refused before routing
                self._metrics.record_request(UNKNOWN_MODEL, "", "", "none", refused.status,
                                             api)
                raise
            stream = fields.get("stream", "").strip().lower() in ("true", "1")
            candidates = self._candidates(model, api)
            label = model or candidates[0].info.models[0]
            if self._forms is None:
                return await self._forward(
                    request, path, body, model, candidates, request_id,
                    content_type=request.headers["Content-Type"], stream=stream)
            return await self._admitted_form(request, path, body, label, model, tenant,
                                             request_id, stream)
        except RouterError as error:      # a refusal names its request, as every one does
            error.headers.setdefault(self._settings.request_id_header, request_id)
            raise
        finally:
            self._ids.release(request_id)

    async def _admitted_form(self, request: web.Request, path: str, body: bytes, label: str,
                             model: str | None, tenant: str | None, request_id: str,
                             stream: bool) -> web.StreamResponse:
        """An audio form past admission (its tenant's budget, the in-flight limit), then
        forwarded; its slot freed and its tokens settled at its end, as a routed request's."""
        forms = self._forms
        assert forms is not None
        admission, api = forms.admission, api_of_path(path)
        section, fingerprint = forms.section(), forms.fingerprint()   # of one file
        try:
            ticket = await admission.admit(section, tenant, label, api)
        except AdmissionRefused as refused:
            if forms.refusals is not None:
                forms.refusals.refused(RefusalRecord(
                    at=time.time(), request_id=request_id,
                    trace_id=request_trace_id(request.headers), tenant=tenant, model=label,
                    path=path, reason=refused.reason, status=refused.status,
                    message=refused.message, routing_sha256=fingerprint))
            raise
        except asyncio.CancelledError:       # the client left while waiting for a slot
            self._metrics.record_request(label, "", "", "none", CLIENT_LEFT, api)
            raise
        finished = False
        try:
            # the workers are ranked once admitted: a wait for a slot changes their loads
            return await self._forward(
                request, path, body, model, self._candidates(model, api), request_id,
                content_type=request.headers["Content-Type"], stream=stream, ticket=ticket)
        except RouterError as refused:       # counted against its budget: say what is left
            if ticket.budget is not None:
                admission.finish(ticket)
                finished = True
                refused.headers.update(admission.rate_limit_headers(ticket))
            raise
        finally:
            if not finished:
                admission.finish(ticket)

    async def _forward(self, request: web.Request, path: str, body: bytes, model: str | None,
                       candidates: list[WorkerView], request_id: str,
                       content_type: str = "application/json",
                       stream: bool = False,
                       ticket: AdmissionTicket | None = None) -> web.StreamResponse:
        """``ticket``: the admission of an audio form (its worker counts it in flight, its
        budget is told what was served), None for the tokenizer's requests."""
        headers = self._headers(request, request_id)
        headers["Content-Type"] = content_type
        last_failure: RetryableUpstream | None = None
        tried = candidates[:self._settings.max_retries + 1]
        for attempt, view in enumerate(tried):
            reason = (f"{view.id}: fewest requests in flight of {len(candidates)} healthy "
                      f"worker(s) of {model or view.info.models[0]} (no policy for {path})")
            if attempt:
                reason += f", after {attempt} failed attempt(s)"
            response_headers = {"x-kvroute-worker": view.id, "x-kvroute-profile": PROFILE,
                                "x-kvroute-reason": reason,
                                self._settings.request_id_header: request_id}
            if ticket is not None and self._forms is not None:
                response_headers.update(self._forms.admission.rate_limit_headers(ticket))
            sent_at = self._clock()
            try:
                result = await self._counted(ticket, view, self._proxy.forward(
                    request, URL(view.info.url + path), body, headers, response_headers,
                    stream=stream, wants_usage=stream,    # (a stream relayed as it is)
                    on_first_byte=lambda: None), stream)
            except RetryableUpstream as failure:
                last_failure = failure
                if self._registry.declares(view.id):     # (not one removed meanwhile)
                    # an attempt at a worker, as the director counts its failed ones
                    label = model or view.info.models[0]
                    self._metrics.record_request(label, view.id, view.gpu.name, PROFILE,
                                                 failure.status, api_of_path(path))
                    if attempt + 1 < len(tried):              # tried again on the next one
                        self._metrics.record_retry(view.id, failure.reason, label)
                    self._ejection.failed(view.id, self._clock())
                continue
            except UpstreamTimeout:
                self._ids.hold_after_release(request_id)    # (cut_at_worker's 504)
                raise
            except asyncio.CancelledError as cancelled:
                if not isinstance(cancelled, CancelledAfterTheEnd):     # its client left
                    self._ids.hold_after_release(request_id)
                raise
            if cut_at_worker(result.status, result):
                self._ids.hold_after_release(request_id)
            if self._registry.declares(view.id):
                if result.status >= 500 and result.worker_failed:   # a stream it broke
                    self._ejection.failed(view.id, self._clock())
                else:
                    self._ejection.answered(view.id, sent_at)
                self._metrics.record_request(model or view.info.models[0], view.id,
                                             view.gpu.name, PROFILE, result.status,
                                             api_of_path(path))
            return result.response
        assert last_failure is not None
        raise UpstreamError(f"No worker could serve the request; last error: {last_failure}")

    async def _counted(self, ticket: AdmissionTicket | None, view: WorkerView,
                       forwarding: Awaitable[ProxyResult], stream: bool) -> ProxyResult:
        """``forwarding`` awaited as one request in flight on ``view`` (when ``ticket``: an
        audio form), its answer told to the ticket's budget, whatever the end."""
        forms = self._forms
        if ticket is None or forms is None:
            return await forwarding
        forms.store.on_dispatch(view.id, 0, 0)
        result: ProxyResult | None = None
        events = 0           # relayed to a client that left mid-stream
        try:
            result = await forwarding
            return result
        except CancelledAfterTheEnd as cancelled:     # it left with the whole answer
            result = cancelled.result
            raise
        except CancelledMidStream as cancelled:
            events = cancelled.events
            raise
        finally:
            forms.store.on_complete(view.id, 0, 0)
            usage = result.usage if result is not None else None
            forms.admission.record_attempt(
                ticket, events > 0 or (result is not None and result.first_byte_at is not None),
                usage.prompt_tokens if usage is not None else 0,
                usage.completion_tokens if usage is not None else 0,
                result.events if result is not None else events,
                whole_answer=result is not None and result.status == 200 and not stream)
            try:
                forms.ended(view.id)
            except Exception:       # (what it clears is the router's own: never the answer)
                log.exception("clearing departed worker %s failed", view.id)

    async def handle_response(self, request: web.Request, response_id: str,
                              action: str = "") -> web.StreamResponse:
        """``GET /v1/responses/{id}`` (``action`` "") or ``POST …/cancel``, at its owner."""
        request_id = self._ids.claim(request.headers.get(self._settings.request_id_header))
        try:
            return await self._at_owner(request, response_id, action, request_id)
        except RouterError as error:      # a refusal names its request, as every one does
            error.headers.setdefault(self._settings.request_id_header, request_id)
            raise
        finally:
            self._ids.release(request_id)

    async def _at_owner(self, request: web.Request, response_id: str, action: str,
                        request_id: str) -> web.StreamResponse:
        try:
            view = (await self._responses.holder(response_id, PROFILE, request.get(TENANT))
                    if response_id not in DOT_SEGMENTS else None)
            if view is None:
                raise ResponseNotFound(f"Response with id '{response_id}' not found.",
                                       param="response_id")
        except ResponseNotFound:        # counted, as every other answer of a request is
            self._metrics.record_request(UNKNOWN_MODEL, "", "", PROFILE, 404, RESPONSES_API)
            raise
        url = URL(f"{view.info.url}{RESPONSES_PATH}/{quote(response_id, safe='')}{action}")
        if request.query_string:
            url = url.with_query(request.query_string)
        body = (await read_body(request, self._settings.body_timeout_s,
                                self._settings.max_body_bytes)
                if request.method == "POST" else None)
        stream = request.query.get("stream", "").lower() in ("true", "1")
        response_headers = {"x-kvroute-worker": view.id, "x-kvroute-profile": PROFILE,
                            "x-kvroute-reason": header_safe(
                                f"{view.id}: holds response {response_id}"),
                            self._settings.request_id_header: request_id}
        try:
            result = await self._proxy.forward(
                request, url, body, self._headers(request, request_id), response_headers,
                stream=stream,
                wants_usage=True, on_first_byte=lambda: None, stream_format=RESPONSES_STREAM,
                method=request.method)
        except RetryableUpstream as failure:     # (only its holder has it: no retry)
            raise UpstreamError(f"The worker holding response `{response_id}` failed: "
                                f"{failure}") from None
        if self._registry.declares(view.id):
            self._metrics.record_request(view.info.models[0], view.id, view.gpu.name, PROFILE,
                                         result.status, RESPONSES_API)
        return result.response

    def _headers(self, request: web.Request, request_id: str) -> dict[str, str]:
        name = self._settings.request_id_header
        return worker_headers(request.headers, name, name, request_id)

    def _candidates(self, model: str | None, api: str) -> list[WorkerView]:
        """The healthy workers of ``model``, fewest requests in flight first, ties in turn,
        ejected ones last (``api``: the request's, for the metrics of a refusal)."""
        views = self._registry.views(self._clock())
        if model is None:
            if self._registry.default_model() is None:
                models = {name for view in views for name in view.info.models}
                raise InvalidRequest("model: required, the fleet serves several models ("
                                     f"{', '.join(sorted(models))}).", param="model")
            serving = views
        else:
            serving = [view for view in views if view.serves(model)]
        if not serving:
            known = ", ".join(sorted(self._registry.known_models()))
            self._metrics.record_request(UNKNOWN_MODEL, "", "", PROFILE, 404, api)
            raise ModelNotFound(f"The model `{model}` does not exist. Valid aliases: {known}.",
                                param="model")
        healthy = [view for view in serving if view.healthy]
        if not healthy:
            self._metrics.record_request(model or serving[0].info.models[0], "", "", PROFILE,
                                         503, api)
            raise NoWorkerAvailable(f"No healthy worker serves the model `{model}`.")
        turn, count = next(self._turn), len(healthy)
        ejected = self._ejection.ejected(self._clock())
        ranked = sorted(range(count), key=lambda i: (healthy[i].id in ejected,
                                                     healthy[i].inflight_requests,
                                                     (i - turn) % count))
        return [healthy[i] for i in ranked]
