"""Per-request orchestration: parse → admit → produce → decide → reserve → proxy → complete.

One uniform, awaited path for every generation, pooling (embeddings, scores, reranking,
pooling, classification), Responses API and Anthropic Messages API request (a response that
continues another goes to the worker holding that one). Producers (tokenizing, hashing,
classifying) run before the decision, in a thread when a producer says its input is long
(``policies.producers.runner``); the decision itself is pure and synchronous. A connect
error or 5xx before the first byte is retried on another worker, excluding the ones already
tried, at most ``Settings.max_retries`` times. Admission (``router.admission``: tenants'
budgets, the in-flight limit) runs right after parsing, and the request holds its ticket
until it is answered; a request it refuses is recorded beside the decisions
(``router.refusals``). Each request's fate is recorded in ``router.ejection``: workers
ejected after failing request after request are shown to the policy as unhealthy, unless
that leaves it no candidate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from policies.admission.section import SECTION_NAME as ADMISSION_SECTION
from policies.base import (
    RUNNER_OF_PATH,
    CycleState,
    Decision,
    RequestOutcome,
    RoutingRequest,
    output_tokens_in_window,
    per_sequence,
)
from policies.engine import PolicyEngine
from policies.filters.context_length import TYPE_NAME as CONTEXT_LENGTH_FILTER
from policies.filters.context_length import (
    ContextLengthFilter,
    ContextLengthFilterParams,
    least_output,
)
from policies.filters.healthy import TYPE_NAME as HEALTHY_FILTER
from policies.latency.estimator import served_cost_usd
from policies.latency.observer import ROUTED_ESTIMATE
from policies.producers.runner import produce
from policies.producers.tokens import AT_LEAST_KEY, ESTIMATED_COUNT_KEY, PAST_CHARS_KEY
from router.admission.controller import Admission, AdmissionTicket
from router.client_auth import TENANT
from router.decision_log import class_confidence, class_outcome, class_predicted
from router.decision_sinks import DecisionSink, OutcomeSink
from router.decisions import (
    DecisionEntry,
    DecisionLog,
    DecisionRecord,
    Outcome,
    reason_code,
)
from router.drain import cut_by_drain
from router.ejection import WorkerEjection
from router.errors import (
    AdmissionRefused,
    ContextLengthExceeded,
    InvalidRequest,
    ModelNotFound,
    NoWorkerAvailable,
    Overloaded,
    RouterError,
    RoutingMisconfigured,
    StoppedBeforeTheAnswer,
    UpstreamError,
    UpstreamTimeout,
    WorkersBusy,
)
from router.forwarded_headers import worker_headers
from router.header_values import header_safe
from router.loop_lag import LoopStalls
from router.metrics import OTHER_API, UNKNOWN_MODEL, RouterMetrics, api_of_path
from router.protocol import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    MESSAGES_PATH,
    POOLING_SERVICES,
    RESPONSES_PATH,
    ParsedRequest,
    parse_request,
    upstream_body,
)
from router.proxy import (
    CLIENT_LEFT,
    COMPLETION_STREAM,
    MESSAGES_STREAM,
    NOT_IMPLEMENTED,
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
from router.request_ids import RequestIds, usable
from router.response_locator import ResponseLocator
from router.settings import Settings
from router.stalls import DEFAULT_MULTIPLE as STALL_MULTIPLE
from router.state.store import StateStore
from router.trace_context import request_trace_id
from workers.lax_values import lax_int
from workers.models import WorkerInfo, WorkerView
from workers.registry import WorkerRegistry, same_server
from workers.upstream import origin_of

log = logging.getLogger(__name__)

PolicySource = Callable[[], PolicyEngine]
# the profile label of a request refused before any profile ran: the worker it was bound to
# (the one holding the response it continues) is down
PINNED_PROFILE = "pinned"
_STREAM_FORMATS = {RESPONSES_PATH: RESPONSES_STREAM, MESSAGES_PATH: MESSAGES_STREAM}


# bodies this large are parsed in a thread (``Director._parse``): a 1 MiB body of small items
# takes tens of milliseconds to parse and check, a thread hop tens of microseconds
PARSE_OFF_LOOP_BYTES = 1 << 20
# the id a request holds at this router (its header's, its body's request_id, or a new one)
CLAIMED_ID = web.RequestKey("kvroute_request_id", str)
# the longest a token is expected to take when the policy gave no estimate (for how long a
# non-streamed answer may take before its worker counts as stalled: ``router.stalls``)
UNESTIMATED_TOKEN_S = 0.1
# a whole answer's head comes once the engine has generated all of it: past the upstream
# timeout it is waited for on while the engine generates, up to this many times its
# estimated time at its longest, and never past WHOLE_ANSWER_MAX_WAIT_S
WHOLE_ANSWER_WAIT_MULTIPLE = 3.0
WHOLE_ANSWER_MAX_WAIT_S = 3600.0
# a worker down for no longer than this since its last good scrape is out for now: a prompt
# only its window holds is answered 503, not the 400 of a prompt too long for the model
RECENTLY_UP_S = 300.0


# (worker URL, path) pairs whose parsed URL is kept (the fleet's, and those that left)
MAX_KEPT_URLS = 16_384


@dataclass(slots=True)
class _Attempt:
    decision: Decision
    worker_gpu: str
    prefill_tokens: int
    decode_tokens: int
    started_at: float
    first_byte_at: float | None = None     # when its first token came (the director's clock)
    stall_ticket: int = -1          # router.stalls: watched until its first byte
    events_relayed: int = 0         # a stream's events that reached a client who then left
    received_at: float = 0.0        # the request's arrival at the router (ParsedRequest's)
    api: str = OTHER_API            # its path's API (the metrics' ``api`` label)
    local: bool = False             # refused by the router's own limits (its open files)
    record: DecisionEntry | None = None     # its decision's entry in /debug/decisions
    number: int = 0                 # 0 for the request's first attempt, then 1, 2, ...

    @property
    def first_token_seen(self) -> bool:
        return self.first_byte_at is not None


class Director:
    """Runs the request path; everything it needs is handed in (no globals)."""

    def __init__(self, settings: Settings, registry: WorkerRegistry, store: StateStore,
                 policy: PolicySource, proxy: Proxy, metrics: RouterMetrics,
                 decisions: DecisionLog, responses: ResponseLocator,
                 clock: Callable[[], float] = time.monotonic,
                 sinks: Sequence[DecisionSink] = (),
                 outcome_sinks: Sequence[OutcomeSink] = (),
                 ejection: WorkerEjection | None = None,
                 loop_stalls: LoopStalls | None = None,
                 refusals: RefusalRecorder | None = None) -> None:
        """``refusals``: where the requests admission refuses are recorded (default: the
        ``decisions`` ring alone)."""
        self._settings = settings
        self._registry = registry
        self._store = store
        self._policy = policy
        self._proxy = proxy
        self._metrics = metrics
        self._decisions = decisions
        self._responses = responses
        self._clock = clock
        self._ids = RequestIds(clock=clock)
        self._header = settings.request_id_header
        self._urls: dict[tuple[str, str], URL] = {}
        # whether a window holds a request, as the context-length filter judges (no margin)
        self._window_check = ContextLengthFilter(CONTEXT_LENGTH_FILTER,
                                                 ContextLengthFilterParams())
        self._sinks = tuple(sinks)      # decision log, prefix ceiling (router.decision_sinks)
        self._outcome_sinks = tuple(outcome_sinks)      # the decision log's outcome lines
        self._sink_failures: dict[DecisionSink | OutcomeSink, int] = {}   # failures, by sink
        self._refusals = refusals if refusals is not None else RefusalRecorder(decisions)
        self._ejection = ejection if ejection is not None else WorkerEjection(0, 1.0)
        # the router's own stalls, which the times measured across them hold
        self._loop_stalls = loop_stalls
        self._misrouted: set[tuple[str | None, str]] = set()    # (rule, path), logged once
        # tenants' budgets (the store's, shared between replicas) and the in-flight limit
        self.admission = Admission(store.usage, metrics, clock, self._model_label)

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        request[CLAIMED_ID] = self._ids.claim(request.headers.get(self._header))
        try:
            return await self._handle(request, path, request[CLAIMED_ID])
        except RouterError as error:
            # a refusal names its request too: what a client quotes when it asks why
            error.headers.setdefault(self._header, request[CLAIMED_ID])
            raise
        finally:
            self._ids.release(request[CLAIMED_ID])

    def _adopt_body_id(self, request: web.Request, parsed: ParsedRequest) -> None:
        """A chat, completion or pooling request (embeddings, scores, ...) without the id
        header is named after its body's ``request_id``, as vLLM names it (``chatcmpl-ID``,
        ``embd-ID``): the id claimed for it gives way to that one (with a suffix when a
        request in flight has it)."""
        routing = parsed.routing
        if (request.headers.get(self._header) is not None or routing.body is None
                or (routing.path not in (CHAT_PATH, COMPLETIONS_PATH)
                    and RUNNER_OF_PATH.get(routing.path) != "pooling")):
            return
        given = routing.body.get("request_id")
        # (a header loses the spaces at its ends: the worker would read another id)
        if not isinstance(given, str) or not usable(given) or given != given.strip():
            return
        claimed = self._ids.claim(given)
        self._ids.release(request[CLAIMED_ID])
        request[CLAIMED_ID] = routing.request_id = claimed

    async def _handle(self, request: web.Request, path: str,
                      request_id: str) -> web.StreamResponse:
        arrival = self._clock()
        api = api_of_path(path)
        try:
            body = await read_body(request, self._settings.body_timeout_s,
                                   self._settings.max_body_bytes)
            parsed = await self._parse(body, path, request_id, request, arrival)
            parsed.received_at = arrival
            if parsed.upstream_path is not None:    # /invocations: the API it is routed as
                api = api_of_path(parsed.routing.path)
            self._adopt_body_id(request, parsed)
        except RouterError as refused:   # a bad body: counted, under no model it could name
            self._metrics.record_request(UNKNOWN_MODEL, "", "", "none", refused.status,
                                         api if refused.read_as is None
                                         else api_of_path(refused.read_as))
            raise
        except asyncio.CancelledError as cancelled:  # the client left while sending it
            if (stopped := self._cancelled(cancelled, UNKNOWN_MODEL, api)) is None:
                raise                                   # (else the drain cut it)
            raise stopped from None
        try:
            self._check_runner(parsed.routing)
        except RouterError as refused:   # a fleet's model asked for what it does not run
            self._metrics.record_request(self._model_label(parsed.routing.model), "", "",
                                         "none", refused.status, api)
            raise
        engine = self._policy()
        try:
            ticket = await self.admission.admit(engine.routing.section(ADMISSION_SECTION),
                                                parsed.routing.tenant, parsed.routing.model,
                                                api)
        except AdmissionRefused as refused:
            self._refused(parsed.routing, engine, refused)
            raise
        except asyncio.CancelledError as cancelled:  # the client left waiting for a slot
            if (stopped := self._cancelled(cancelled, self._model_label(parsed.routing.model),
                                           api)) is None:
                raise
            raise stopped from None
        finished = False
        try:
            return await self._admitted(request, parsed, body, engine, ticket)
        except asyncio.CancelledError as cancelled:
            # counted here when it left before any worker was tried (else by its attempts)
            if (stopped := self._cancelled(cancelled, self._model_label(parsed.routing.model),
                                           api, counted=not parsed.attempts)) is None:
                raise
            raise stopped from None
        except RouterError as refused:     # counted against its budget: say what is left
            if isinstance(refused, AdmissionRefused):   # its tokens' budget, once counted
                self._refused(parsed.routing, engine, refused)
            if ticket.budget is not None:  # once its tokens are refunded (nothing was served)
                self.admission.finish(ticket)
                finished = True
                refused.headers.update(self.admission.rate_limit_headers(ticket))
            raise
        finally:
            if not finished:
                self.admission.finish(ticket)

    def _cancelled(self, cancelled: asyncio.CancelledError, model: str, api: str,
                   counted: bool = True) -> StoppedBeforeTheAnswer | None:
        """A request cancelled before its answer began, counted: None when its client left
        (the caller cancels on with a bare ``raise``: raised from here, the exception would
        hold this frame, which holds it, and the request with them until a full collection),
        else the 503 to answer it with, the router's drain having cut it (its client told,
        not dropped; a stream begun was told in-stream: ``CancelledMidStream``)."""
        stopped = (None if isinstance(cancelled, CancelledMidStream)
                   else _drain_cut_answer(cancelled))
        if counted:
            self._metrics.record_request(model, "", "", "none", CLIENT_LEFT
                                         if stopped is None else stopped.status, api)
        return stopped

    async def _parse(self, body: bytes, path: str, request_id: str, request: web.Request,
                     arrival: float) -> ParsedRequest:
        """``parse_request``, in a thread for a body of ``PARSE_OFF_LOOP_BYTES`` or more: the
        parse and the checks of a body of millions of items take seconds (7 million one-token
        lists: 4.5 s), which on the event loop every other request would wait out."""
        args = (body, path, request_id, request.headers, arrival, request.get(TENANT),
                self._registry.default_model(), self._registry.runners_of,
                self._settings.max_body_values)
        if len(body) < PARSE_OFF_LOOP_BYTES:
            return parse_request(*args)
        return await asyncio.get_running_loop().run_in_executor(None, parse_request, *args)

    def _refused(self, routing: RoutingRequest, engine: PolicyEngine,
                 refused: AdmissionRefused) -> None:
        """Record a request the admission section of ``engine``'s routing file refused."""
        self._refusals.refused(RefusalRecord(
            at=time.time(), request_id=routing.request_id,
            trace_id=request_trace_id(routing.headers), tenant=routing.tenant,
            model=routing.model, path=routing.path, reason=refused.reason,
            status=refused.status, message=refused.message,
            routing_sha256=engine.fingerprint))

    def _model_label(self, model: str) -> str:
        """``model`` as a metric label: a fleet's model, else ``UNKNOWN_MODEL``."""
        return model if model in self._registry.known_models() else UNKNOWN_MODEL

    async def _admitted(self, request: web.Request, parsed: ParsedRequest, body: bytes,
                        engine: PolicyEngine, ticket: AdmissionTicket) -> web.StreamResponse:
        """The request past admission: produce, decide, forward (retrying on failure)."""
        request_id = parsed.routing.request_id
        if ticket.waited_s > 0:       # the policy sees it arrive when it may go on
            parsed.routing.arrival_time = self._clock()
        pinned = await self._response_owner(parsed, request.get(TENANT))
        views = self._views(self._clock(), pinned)
        if engine.producers and await self._produce(engine, parsed.routing, views):
            views = self._views(self._clock(), pinned)   # a producer ran off the loop
        continued = continuation_model(views, parsed.routing.model) if pinned else None
        routing = parsed.routing
        # the answer it may take: vLLM clamps max_tokens to what the prompt leaves of the
        # window, so 10**9 is charged as the largest window's rest, not as a billion tokens
        # (each prompt of a batch is clamped by its own length, and answered on its own, n
        # times: n choices, or best_of sequences of which n are sent)
        self.admission.charge_expected(
            ticket, routing.num_prompt_tokens, routing.sequences * output_tokens_in_window(
                routing.max_tokens if routing.max_tokens is not None
                else routing.predicted_output_tokens or 0, routing.context_prompt_tokens,
                max((view.max_model_len for view in views), default=0)), routing.model)
        tried: dict[str, None] = {}        # the workers tried, in order
        # workers that answered with an error of their engine: counted toward setting them
        # aside once the request is known not to fail so everywhere (_judge_engine_errors)
        engine_errors: list[WorkerInfo] = []
        answered = False
        try:
            response = await self._attempts(request, engine, parsed, body, ticket, views,
                                            pinned, continued, tried, engine_errors)
            answered = True
            return response
        finally:
            self._judge_engine_errors(request_id, tried, engine_errors, answered)

    def _judge_engine_errors(self, request_id: str, tried: Mapping[str, None],
                             engine_errors: Sequence[WorkerInfo], answered: bool) -> None:
        """Count the workers that answered the request with an error of their engine toward
        setting them aside, unless no worker answered it and every one tried, two or more,
        answered so: then the request is taken for the cause (a client's body that vLLM
        fails on with a 500 set healthy workers aside one after another, each retry one
        more). One worker's error alone tells nothing of the request: it counts. A worker
        whose engine is dead says so at its /health, which the scraper reads."""
        if not engine_errors:
            return
        if not answered and len(engine_errors) == len(tried) >= 2:
            log.info("request %s: every worker tried (%s) answered it with an error of its "
                     "engine: taken for the request's doing, counted against none", request_id,
                     ", ".join(tried))
            return
        self._count_engine_errors(list(engine_errors))

    async def _attempts(self, request: web.Request, engine: PolicyEngine, parsed: ParsedRequest,
                        body: bytes, ticket: AdmissionTicket, views: list[WorkerView],
                        pinned: str | None, continued: str | None, tried: dict[str, None],
                        engine_errors: list[WorkerInfo]) -> web.StreamResponse:
        """The request's attempts at workers, one after another while they fail and retries
        are left (``tried``: filled with the workers tried; ``engine_errors``: with those that
        answered with an error of their engine)."""
        request_id = parsed.routing.request_id
        last_failure: RetryableUpstream | None = None
        failed: Decision | None = None     # the decision of the last failed attempt
        # (worker, reason, model): counted once tried again
        retried: tuple[str, str, str] | None = None
        for attempt in range(self._settings.max_retries + 1):
            if tried:
                views = [v for v in self._views(self._clock(), pinned) if v.id not in tried]
            shown = views if pinned is not None else self._ejected_unhealthy(views)
            decision, record = self._decide(engine, parsed.routing, shown, attempt,
                                            fail_open=views if shown is not views else None,
                                            continued=continued, tried=tried)
            if decision.worker_id is None:
                if last_failure is not None:
                    log.info("request %s: no other worker to try", request_id)
                    break
                raise self._no_candidate(decision, parsed.routing,
                                         views if pinned is not None else ())
            held_aside = self._held_only_aside(decision, parsed.routing, views)
            if held_aside is not None:
                raise held_aside
            if retried is not None:
                self._metrics.record_retry(*retried)
                retried = None
            if decision.model != parsed.routing.model:
                self._check_rewritten_runner(decision, parsed.routing)
            # before anything counts it as sent: a body too deep to re-encode is refused here
            sent = upstream_body(parsed, body, decision.model)
            try:
                return await self._attempt(request, engine, parsed, sent, decision, ticket,
                                           record, engine_errors)
            except RetryableUpstream as failure:
                last_failure, failed = failure, decision
                tried[decision.worker_id] = None
                if self._registry.declares(decision.worker_id):
                    retried = (decision.worker_id, failure.reason, decision.model)
                log.info("request %s: %s failed (%s)%s", request_id, decision.worker_id,
                         failure, "" if attempt < self._settings.max_retries
                         else "; no more retries (max_retries)")
        assert last_failure is not None and failed is not None
        headers = self._kvroute_headers(failed, parsed.routing.semantic_class)
        if last_failure.reason == "model_not_found":    # no worker tried has it any more
            known = ", ".join(sorted(self._registry.known_models()))
            raise ModelNotFound(f"The model `{failed.model}` does not exist. Valid aliases: "
                                f"{known}.", param="model", headers=headers)
        # the client learns which workers failed and how, not where they are (the log says)
        last = without_addresses(last_failure.client_text(), map(self._registry.info, tried))
        if last_failure.busy:     # the last worker tried is up but full: a 503, when to ask
            if last_failure.retry_after is not None:
                headers["Retry-After"] = header_safe(last_failure.retry_after)
            headers["x-kvroute-reason"] = header_safe(
                f"workers-busy: busy or failed on {', '.join(tried)}; last: {last}")
            raise WorkersBusy(f"No worker could take the request after {len(tried)} "
                              f"attempt(s): the last one is busy; {last}", headers=headers)
        headers["x-kvroute-reason"] = header_safe(
            f"upstream-error: failed on {', '.join(tried)}; last: {last}")
        raise UpstreamError(f"No worker could serve the request after {len(tried)} attempt(s); "
                            f"last error: {last}", headers=headers)

    def _check_runner(self, routing: RoutingRequest) -> None:
        """A request for a model the fleet runs for something else is the client's mistake
        (vLLM has no such route for it: a bare 404); say so, and which path serves it."""
        runners = self._registry.runners_of(routing.model)
        needed = RUNNER_OF_PATH[routing.path]
        if not runners or needed in runners:
            return
        if needed == "pooling":
            raise InvalidRequest(
                f"The model `{routing.model}` does not serve {POOLING_SERVICES[routing.path]}: "
                "the fleet runs it for generation (runner: generate). Use "
                "/v1/chat/completions or /v1/completions, or declare it with `runner: "
                "pooling` in the fleet file.", param="model")
        raise InvalidRequest(
            f"The model `{routing.model}` serves pooling only (runner: pooling): use "
            "/v1/embeddings, /score, /rerank or /pooling (/classify for a classification "
            "model), as the model supports them.", param="model")

    def _check_rewritten_runner(self, decision: Decision, routing: RoutingRequest) -> None:
        """A rule that sent the request to a model running something else (a semantic rule
        meant for chat matching an embeddings request) is the routing file's mistake: the
        worker would answer a bare 404. Refuse it naming the rule, and count it."""
        needed = RUNNER_OF_PATH[routing.path]
        runners = self._registry.runners_of(decision.model)
        if not runners or needed in runners:
            return
        self._metrics.record_request(decision.model, "", "", decision.profile,
                                     RoutingMisconfigured.status, api_of_path(routing.path))
        if (decision.rule, routing.path) not in self._misrouted:
            self._misrouted.add((decision.rule, routing.path))
            log.error("routing rule %s sends %s requests to %s, which cannot serve them; "
                      "they are answered 500 (scope the rule with when.path)", decision.rule,
                      routing.path, decision.model)
        raise RoutingMisconfigured(
            f"The routing rule `{decision.rule}` sends this {routing.path} request to the model "
            f"`{decision.model}`, which runs {'/'.join(sorted(runners))}, not {needed}: scope "
            "the rule with `when: {path: ...}` (kvroute validate --fleet warns of it).",
            headers=self._kvroute_headers(decision, routing.semantic_class))

    async def _response_owner(self, parsed: ParsedRequest, tenant: str | None) -> str | None:
        """The worker a Responses API request must go to: the one holding the response it
        continues (None: no such constraint, or no worker holds it, and the chosen worker
        answers vLLM's 404). For a request of the tenant key ``tenant``, another tenant's
        response is vLLM's 404, whether continued or named as the ``request_id`` of a new
        one (which would overwrite it on its worker)."""
        if (tenant is not None and parsed.response_id is not None   # (no lookup otherwise:
                and not parsed.response_id_assigned):                # a Redis round trip)
            record = await self._store.response_record(parsed.response_id)
            if record is not None and record.refuses(tenant):
                raise InvalidRequest(f"request_id: '{parsed.response_id}' names another "
                                     "response; choose another id.", param="request_id")
        previous = parsed.previous_response_id
        if previous is None:
            return None
        holder = await self._responses.holder(previous, PINNED_PROFILE, tenant)
        return None if holder is None else holder.id

    def _ejected_unhealthy(self, views: list[WorkerView]) -> list[WorkerView]:
        """``views`` with the ejected workers' marked unhealthy (``views`` itself when none
        of them is ejected)."""
        ejected = self._ejection.ejected(self._clock())
        if not ejected or not any(v.id in ejected for v in views):
            return views
        return [dataclasses.replace(v, healthy=False) if v.id in ejected else v for v in views]

    def _views(self, now: float, pinned: str | None) -> list[WorkerView]:
        views = self._registry.views(now)
        return views if pinned is None else [v for v in views if v.id == pinned]

    async def _produce(self, engine: PolicyEngine, routing: RoutingRequest,
                       views: Sequence[WorkerView]) -> bool:
        """Run the producers; True when one ran in a thread (other requests ran meanwhile,
        so the views are out of date)."""
        engine.name_alias_target(routing)
        offloaded = (await produce(engine.producers, routing, views,
                                   failures=engine.producer_failures)).offloaded > 0
        seconds = routing.attributes.get("semantic_classify_s")   # set by the semantic producer
        if routing.semantic_class is not None or isinstance(seconds, float):
            outcome = routing.attributes.get("semantic_outcome")
            self._metrics.record_semantic(
                routing.semantic_class, seconds if isinstance(seconds, float) else None,
                outcome if isinstance(outcome, str) else None)
        return offloaded

    def _decide(self, engine: PolicyEngine, routing: RoutingRequest,
                views: Sequence[WorkerView], attempt: int,
                fail_open: Sequence[WorkerView] | None = None,
                continued: str | None = None, tried: Iterable[str] = ()
                ) -> tuple[Decision, DecisionEntry]:
        """Decide on ``views``, and when that leaves no candidate, on ``fail_open`` (the views
        with the ejected workers as they are), or, for a request continuing a response
        (``views``: its holder alone), as that continuation (``continuation_decision``, with
        the model ``continued``); the one decision is recorded (its entry in the ring
        returned with it), the workers it passed over for being set aside or ``tried``
        already named so."""
        started = time.perf_counter()
        decision = engine.decide(routing, views)
        opened = False
        if decision.worker_id is None and fail_open is not None:
            decision, opened = engine.decide(routing, fail_open), True
        if fail_open is not None or tried:
            decision = _naming_set_asides(decision, views, fail_open, opened, tried)
        # (a model no worker serves, not rewritten by a rule, is the client's mistake: 404;
        # a rule's target, an adapter not loaded say, is the routing's and falls back; so is
        # a rule's adapter the holder lacks, which the model filter's fallback to the base
        # model's workers kept it for: the holder would answer 404)
        # (a model the client named itself, which its holder no longer serves, is not
        # replaced by another behind its back: _no_candidate says which the holder serves)
        if continued is not None and (
                (decision.worker_id is None and (
                    decision.model != routing.model
                    or (routing.model in self._registry.known_models()
                        and not _lacks_the_named_model(views, routing.model))))
                or (decision.worker_id is not None and decision.model != routing.model
                    and not any(view.serves(decision.model) for view in views))):
            decision = continuation_decision(engine, routing, views, decision, continued)
        seconds = time.perf_counter() - started
        gpu = self._gpu_of(decision.worker_id)
        self._metrics.record_decision(decision, gpu, reason_code(decision),
                                      routing.semantic_class, seconds)
        record = self._decisions.record(DecisionRecord(
            at=time.time(), decision=decision, requested_model=routing.model, path=routing.path,
            attempt=attempt, duration_s=seconds, num_prompt_tokens=routing.num_prompt_tokens,
            semantic_class=routing.semantic_class,
            semantic_confidence=class_confidence(routing),
            semantic_outcome=class_outcome(routing),
            semantic_predicted=class_predicted(routing),
            trace_id=request_trace_id(routing.headers), routing_sha256=engine.fingerprint))
        for sink in self._sinks:
            try:
                sink.on_decision(routing, decision, attempt, seconds, engine.fingerprint)
            except Exception:      # observability never fails a request (a full disk, ...)
                self._sink_failed(sink)
        return decision, record

    def _sink_failed(self, sink: DecisionSink | OutcomeSink) -> None:
        """Log a decision sink's failure: the first, then one in every 1,000."""
        failures = self._sink_failures[sink] = self._sink_failures.get(sink, 0) + 1
        if failures % 1000 == 1:
            log.exception("decision sink %s failed (%d time(s) so far); the request goes on",
                          type(sink).__name__, failures)

    def _gpu_of(self, worker_id: str | None) -> str:
        return self._registry.info(worker_id).gpu.name if worker_id is not None else ""

    def _no_candidate(self, decision: Decision, routing: RoutingRequest,
                      holder: Sequence[WorkerView] = ()) -> RouterError:
        """The error for a request no worker takes (``holder``: the worker holding the
        response it continues, alone, when it continues one)."""
        headers = self._kvroute_headers(decision, routing.semantic_class)
        model, api = decision.model, api_of_path(routing.path)
        if model not in self._registry.known_models():
            known = ", ".join(sorted(self._registry.known_models()))
            self._metrics.record_request(UNKNOWN_MODEL, "", "", decision.profile, 404, api)
            return ModelNotFound(f"The model `{model}` does not exist. Valid aliases: {known}.",
                                 param="model", headers=headers)
        if model == routing.model and _lacks_the_named_model(holder, model):
            view = holder[0]
            served = ", ".join(f"`{name}`" for name in (
                *(view.served_models or view.info.models), *view.lora_adapters))
            self._metrics.record_request(model, "", "", decision.profile, 404, api)
            return ModelNotFound(
                f"The model `{model}` is not served by {view.id}, the worker holding the "
                f"response this request continues (previous_response_id), which serves "
                f"{served}: continue it naming one of those, or start a new response.",
                param="model", headers=headers)
        too_long = [worker for worker, by in decision.filtered_out.items()
                    if by == CONTEXT_LENGTH_FILTER]
        # the request fits no worker of its model: the client must shorten it, unless a
        # worker out for now holds it (then it waits for that worker: 503)
        views = self._registry.views(self._clock()) if too_long else []
        aside = self._set_aside_of(decision, views)
        if too_long and not self._window_check.filter(routing, aside, CycleState()):
            self._metrics.record_request(model, "", "", decision.profile, 400, api)
            # the windows the filter read: each engine's own (/v1/models), else the fleet's
            windows = {view.id: view.max_model_len for view in views}
            return _context_length_error(routing, max(
                windows.get(worker) or self._registry.info(worker).model_spec.max_model_len
                for worker in [*too_long, *(view.id for view in aside)]), headers)
        self._metrics.record_request(model, "", "", decision.profile, 503, api)
        return NoWorkerAvailable(f"No worker available for model `{model}`: {decision.reason}",
                                 headers=headers)

    def _held_only_aside(self, decision: Decision, routing: RoutingRequest,
                         views: Sequence[WorkerView]) -> RouterError | None:
        """The 503 for a prompt whose count is an estimate (``ESTIMATED_COUNT_KEY``), past
        the window of the worker chosen, which a worker out for now holds (``_set_aside_of``):
        the ``context-length`` filter sends such a prompt to the largest window it is given,
        and while the long-window worker restarts that is a short one, whose engine would
        refuse it for good (a 400 no client sends again); it is served once that worker is
        back. None otherwise."""
        if not routing.attributes.get(ESTIMATED_COUNT_KEY) or not any(
                by in (HEALTHY_FILTER, SET_ASIDE) for by in decision.filtered_out.values()):
            return None      # (no worker out for now: the common case, no view looked up)
        needed = routing.certain_context_tokens + min(1, least_output(routing))
        chosen = next((view for view in views if view.id == decision.worker_id), None)
        if chosen is None or chosen.max_model_len <= 0 or needed <= chosen.max_model_len:
            return None
        holding = [view.id for view in self._set_aside_of(decision, views)
                   if needed <= view.max_model_len]
        if not holding:
            return None
        self._metrics.record_request(decision.model, "", "", decision.profile, 503,
                                     api_of_path(routing.path))
        headers = self._kvroute_headers(decision, routing.semantic_class)
        headers["x-kvroute-worker"] = "none"
        return NoWorkerAvailable(
            f"No worker available for model `{decision.model}`: the prompt is longer than "
            f"the window of the workers up (by the router's count), and only "
            f"{', '.join(holding)}, out for now, holds it", headers=headers)

    def _set_aside_of(self, decision: Decision,
                      views: Sequence[WorkerView]) -> list[WorkerView]:
        """Of ``views``, those of the workers of the decision's model out for now: set aside by the
        router (``SET_ASIDE``: ejected or stalled, their scrapes answering), or down
        (``HEALTHY_FILTER``) after a good scrape within ``RECENTLY_UP_S``, their window the
        one their engine said. A request too long for the other workers' windows that one
        of theirs holds is not too long for the model: its workers that take it are out for
        now (vLLM's 400 for a prompt past its window, which no client sends again, was given
        for the window of the workers left while the only long-window one restarted). A
        worker never up, or down for longer, does not hold a prompt back from its 400."""
        aside = {worker: by for worker, by in decision.filtered_out.items()
                 if by in (HEALTHY_FILTER, SET_ASIDE)}
        if not aside:
            return []
        now = self._clock()
        recent: list[WorkerView] = []
        for view in views:
            if view.id not in aside or not view.serves(decision.model):
                continue
            if aside[view.id] == HEALTHY_FILTER:
                snapshot = self._registry.snapshot(view.id)
                if snapshot is None or not now - snapshot.scraped_at <= RECENTLY_UP_S:
                    continue        # (never scraped well: -inf)
            recent.append(view)
        return recent

    def _answer_headers(self, decision: Decision, routing: RoutingRequest,
                        ticket: AdmissionTicket) -> dict[str, str]:
        """The headers the router adds to a worker's answer: its own, and what is left of the
        tenant's budget."""
        headers = self._kvroute_headers(decision, routing.semantic_class)
        if ticket.budget is not None:
            headers.update(self.admission.rate_limit_headers(ticket))
        return headers

    def _kvroute_headers(self, decision: Decision, semantic_class: str | None) -> dict[str, str]:
        headers = {self._header: decision.request_id,
                   "x-kvroute-worker": decision.worker_id or "none",
                   "x-kvroute-profile": decision.profile,
                   "x-kvroute-reason": header_safe(decision.reason)}
        if decision.rule is not None:     # the routing rule that chose its profile or model
            headers["x-kvroute-rule"] = header_safe(decision.rule)
        if semantic_class:
            headers["x-kvroute-class"] = semantic_class
        return headers

    async def _attempt(self, request: web.Request, engine: PolicyEngine, parsed: ParsedRequest,
                       sent: bytes, decision: Decision, ticket: AdmissionTicket,
                       record: DecisionEntry | None = None,
                       engine_errors: list[WorkerInfo] | None = None) -> web.StreamResponse:
        routing = parsed.routing
        assert decision.worker_id is not None
        parsed.attempts += 1
        info = self._registry.info(decision.worker_id)
        prefix = decision.attributes.get("prefix_match_tokens")
        cached = prefix if isinstance(prefix, int) else 0
        attempt = _Attempt(decision, info.gpu.name,
                           prefill_tokens=max(0, routing.num_prompt_tokens - cached),
                           decode_tokens=routing.output_tokens_within(
                               info.model_spec.max_model_len),
                           started_at=self._clock(), received_at=parsed.received_at,
                           api=api_of_path(routing.path), record=record,
                           number=parsed.attempts - 1)
        if parsed.response_id is not None:      # follow-ups to this response go here
            await self._store.remember_response(parsed.response_id, info.id,
                                                request.get(TENANT))
        self._store.on_dispatch(info.id, attempt.prefill_tokens, attempt.decode_tokens)
        engine.on_routed(routing, decision)
        if routing.block_hashes:       # the other replicas' prefix scorers learn it too
            self._store.on_routed_blocks(info.id, routing.block_hashes)
        headers = worker_headers(request.headers, self._settings.request_id_header,
                                 "X-Request-Id", routing.request_id)
        result: ProxyResult | None = None
        status = 502
        longest_s: float | None = None
        try:       # watched until its first byte; settled in _complete, whatever happens
            # a whole answer is watched for its bound (its max_tokens, else 256: a longer one
            # is watched on while its engine generates), and may take to its window's end
            window = info.model_spec.max_model_len
            attempt.stall_ticket = self._ejection.stalls.waiting(
                info.id, attempt.started_at, _expected_first_byte_s(
                    decision, routing.stream, output_tokens_in_window(
                        routing.output_tokens_bound, routing.context_prompt_tokens, window)),
                routing.request_id)
            longest_s = _expected_first_byte_s(decision, routing.stream,
                                               longest_answer_tokens(routing, window))
            result = await self._proxy.forward(
                request, self._url(info.url, parsed.upstream_path or routing.path),
                sent,
                headers, self._answer_headers(decision, routing, ticket), routing.stream,
                parsed.wants_usage, lambda: self._on_first_byte(attempt, engine_errors),
                _STREAM_FORMATS.get(routing.path, COMPLETION_STREAM),
                adapter=self._listed_adapter(info.id, decision.model),
                head_timeout_s=(wait_s := self._whole_answer_wait_s(routing.stream, longest_s)),
                keep_waiting=None if wait_s is None else (
                    lambda: self._ejection.stalls.busy(info.id, self._clock())))
            status = result.status
            self._judge(info, attempt, routing.request_id, result)
            if engine_errors and status < 500:     # (a stream's, at its first token)
                self._count_engine_errors(engine_errors)
            return result.response
        except RetryableUpstream as failure:
            status = failure.status
            if failure.reason == "model_not_found":   # the worker answered: not its failure
                self._ejection.answered(info.id, attempt.started_at)
                self._registry.unload_adapter(info.id, decision.model)
            elif failure.busy:      # a busy worker is up: setting it aside would pile its
                pass                # load onto the others (as a slow scrape does not)
            elif failure.engine_error and engine_errors is not None:
                engine_errors.append(info)      # judged once the request ends
            else:
                self._failed(info)
            raise
        except RouterError as error:
            status = error.status
            if status == UpstreamTimeout.status:      # no answer in time
                log.info("request %s: %s: %s", routing.request_id, info.id, error.message)
                if (routing.stream or longest_s is None or STALL_MULTIPLE * longest_s
                        < self._settings.upstream_timeout_s
                        or not self._ejection.stalls.busy(info.id, self._clock())):
                    self._failed(info)
                # else a whole answer that may be longer than the router waits (its
                # max_tokens, or the window, at the estimated pace, give or take the stall
                # watch's multiple) from an engine that is generating: the router's wait
                # was too short, not the worker's failure
            attempt.local = isinstance(error, Overloaded)    # no connection for want of fds
            error.headers.update(self._kvroute_headers(decision, routing.semantic_class))
            raise
        except CancelledAfterTheEnd as cancelled:     # the client left with the whole answer
            result = cancelled.result
            status = result.status
            self._judge(info, attempt, routing.request_id, result)
            if engine_errors and status < 500:      # served: the errors before were theirs
                self._count_engine_errors(engine_errors)
            raise
        except asyncio.CancelledError as cancelled:
            # the client left, or the router's drain cut it (a 503: an error event ended
            # the stream, or ``_handle`` answers it)
            cut = (cancelled.cut_by_drain if isinstance(cancelled, CancelledMidStream)
                   else cut_by_drain(cancelled))
            status = CLIENT_LEFT if cut is None else StoppedBeforeTheAnswer.status
            if isinstance(cancelled, CancelledMidStream):   # charged what reached the client
                attempt.events_relayed = cancelled.events
            raise
        finally:
            self._complete(engine, routing, attempt, result, status, ticket)

    def _whole_answer_wait_s(self, stream: bool, longest_s: float | None) -> float | None:
        """How long a whole answer's head may be waited for, past the upstream timeout while
        its engine generates (the stall watch's ``busy``): ``WHOLE_ANSWER_WAIT_MULTIPLE``
        times its estimated time at its longest, at most ``WHOLE_ANSWER_MAX_WAIT_S`` (None:
        the upstream timeout, as for a stream's head). The head of an answer of thousands of
        tokens comes minutes after it was sent, and was cut at the upstream timeout with a
        504 that the SDKs sent again, generated again and cut again; a hung engine's is
        still cut at the timeout."""
        if stream or longest_s is None:
            return None
        wait_s = min(WHOLE_ANSWER_WAIT_MULTIPLE * longest_s, WHOLE_ANSWER_MAX_WAIT_S)
        return wait_s if wait_s > self._settings.upstream_timeout_s else None

    def _judge(self, info: WorkerInfo, attempt: _Attempt, request_id: str,
               result: ProxyResult) -> None:
        """What an answer relayed says of its worker: a 5xx (a stream it broke, or ended
        with an error event of its own) counts toward ejecting it, a stream cut for its size
        and a client gone say nothing, any other answer that it answers."""
        status = result.status
        if status == NOT_IMPLEMENTED:      # what its engine does not do: its answer
            self._ejection.answered(info.id, attempt.started_at)
        elif status >= 500 and result.worker_failed:
            log.info("request %s: %s %s after %d event(s) (%d)", request_id, info.id,
                     "ended its stream with an error event of its own"
                     if result.worker_error_event else "broke its stream",
                     result.events, status)
            self._failed(info)
        elif status >= 500:       # the stream cut for its size: no one's failure
            log.info("request %s: its stream from %s was cut after %d event(s): an "
                     "event past the router's bound", request_id, info.id, result.events)
        elif status != CLIENT_LEFT:     # (the client left: says nothing of the worker)
            self._ejection.answered(info.id, attempt.started_at)

    def _url(self, base: str, path: str) -> URL:
        """Parsed once per worker and path (parsing a URL string costs on every request)."""
        url = self._urls.get((base, path))
        if url is None:
            if len(self._urls) >= MAX_KEPT_URLS:      # workers that came and went
                del self._urls[next(iter(self._urls))]     # the oldest
            url = self._urls[(base, path)] = URL(base + path)
        return url

    def _listed_adapter(self, worker_id: str, model: str) -> str | None:
        """``model`` when it is a LoRA adapter the worker's last scrape listed (its 404 for
        it then means the worker unloaded it since: retried elsewhere), else None (a rule's
        adapter sent to a base model's worker that never had it: its 404 is relayed)."""
        snapshot = self._registry.snapshot(worker_id)
        return model if snapshot is not None and model in snapshot.lora_adapters else None

    def _serving(self, info: WorkerInfo) -> bool:
        """Whether the fleet still has the server an attempt went to (not removed since,
        nor another server declared under its id)."""
        return self._registry.declares(info.id) and same_server(
            self._registry.info(info.id), info)

    def _failed(self, info: WorkerInfo) -> None:
        """An attempt at the worker failed: counted toward its ejection while the fleet
        has that server (a removed worker's requests in flight failing later are not, nor
        those of the server its id named before)."""
        if self._serving(info):
            self._ejection.failed(info.id, self._clock())

    def _forget_departed(self, engine: PolicyEngine, worker_id: str) -> None:
        """A request ended at a worker the fleet file removed while it was in flight: what
        its end recorded of the worker goes, as the rest of it went at the removal."""
        engine.forget_worker(worker_id)
        self._ejection.forget(worker_id)
        self._metrics.forget_worker(worker_id)
        self._store.forget_worker(worker_id)

    def _count_engine_errors(self, engine_errors: list[WorkerInfo]) -> None:
        """Another worker answers the request: the engine errors of those tried before it
        were theirs, not the request's (``_judge_engine_errors``), counted now."""
        for info in engine_errors:
            self._failed(info)
        engine_errors.clear()

    def _on_first_byte(self, attempt: _Attempt,
                       engine_errors: list[WorkerInfo] | None = None) -> None:
        if engine_errors:
            self._count_engine_errors(engine_errors)
        now = attempt.first_byte_at = self._clock()
        if attempt.received_at:
            self._metrics.record_client_ttft(attempt.decision.model, attempt.api,
                                             now - attempt.received_at)
        self._ejection.stalls.settled(attempt.stall_ticket)
        assert attempt.decision.worker_id is not None
        self._store.on_first_token(attempt.decision.worker_id, attempt.prefill_tokens)

    def _complete(self, engine: PolicyEngine, routing: RoutingRequest, attempt: _Attempt,
                  result: ProxyResult | None, status: int, ticket: AdmissionTicket) -> None:
        decision = attempt.decision
        worker = decision.worker_id
        assert worker is not None
        self._ejection.stalls.settled(attempt.stall_ticket)
        if cut_at_worker(status, result):     # the worker holds its id until it notices
            self._ids.hold_after_release(routing.request_id)
        self._store.on_complete(worker, 0 if attempt.first_token_seen
                                else attempt.prefill_tokens, attempt.decode_tokens)
        outcome = self._outcome(routing, attempt, result, status)
        relayed = result.events if result is not None else attempt.events_relayed
        self.admission.record_attempt(ticket, attempt.first_token_seen, outcome.prompt_tokens,
                                       outcome.completion_tokens, relayed,
                                       whole_answer=status == 200 and not routing.stream)
        engine.on_completed(routing, outcome)
        if attempt.local:      # the router's own limit refused it: not the worker's answer
            self._metrics.record_request(decision.model, "", "", "none", status, attempt.api)
            fields = _outcome_fields(outcome, status, attempt, result, self._clock())
            fields["answered_by"] = "router"
            self._log_outcome(routing, attempt, fields)
            return
        self._metrics.record_request(decision.model, worker, attempt.worker_gpu,
                                     decision.profile, status, attempt.api)
        if status == 200 and result is not None and attempt.received_at:
            self._metrics.record_client_duration(decision.model, attempt.api,
                                                 result.finished_at - attempt.received_at)
        usage_read = result is not None and result.usage is not None
        billed = _billed_outcome(routing, outcome, usage_read, status, relayed)
        cost = decision.attributes.get("estimated_cost_usd")
        charged: float | None = None
        if isinstance(cost, float) and billed is not None:
            if usage_read or routing.stream:
                # the answer served, not the one expected (10**9 max_tokens priced 8,000
                # tokens), or what of it reached a client that left or a worker that broke
                routed = routing.attributes.get(ROUTED_ESTIMATE)    # (this attempt's worker's)
                charged = served_cost_usd(cost, routed[1] if routed is not None
                                          and routed[0] == worker else None,
                                          billed.completion_tokens)
            else:                   # a whole answer whose usage is unread: as estimated
                charged = cost
        counted = billed if billed is not None else outcome
        self._metrics.record_outcome(counted, attempt.worker_gpu, routing.tenant, charged)
        # its tokens as counted and charged (a stream cut short: what reached its client)
        self._log_outcome(routing, attempt, _outcome_fields(counted, status, attempt, result,
                                                            self._clock()))
        predicted = routing.predicted_output_tokens
        if predicted is not None and status == 200:
            self._metrics.record_output_prediction(
                decision.model, predicted, per_sequence(outcome.completion_tokens, routing))
        self.settle_departed(worker, engine)

    def _log_outcome(self, routing: RoutingRequest, attempt: _Attempt,
                     fields: Outcome) -> None:
        """How the attempt ended, to ``/debug/decisions`` and the outcome sinks."""
        if attempt.record is not None:
            self._decisions.ended(attempt.record, fields)
        for sink in self._outcome_sinks:
            try:
                sink.on_outcome(routing, attempt.decision, attempt.number, fields)
            except Exception:      # observability never fails a request (a full disk, ...)
                self._sink_failed(sink)

    def settle_departed(self, worker_id: str, engine: PolicyEngine | None = None) -> None:
        """A request of this router at ``worker_id`` ended: when the fleet file removed that
        worker meanwhile and it was the last one there (replicas forget their own), what its
        end recorded of the worker goes, as the rest went at the removal (``engine``: the
        policy it was routed by, else the one in force)."""
        if (not self._registry.declares(worker_id)
                and self._store.local_requests(worker_id) == 0):
            self._forget_departed(engine if engine is not None else self._policy(), worker_id)

    def _outcome(self, routing: RoutingRequest, attempt: _Attempt, result: ProxyResult | None,
                 status: int) -> RequestOutcome:
        assert attempt.decision.worker_id is not None
        usage = result.usage if result is not None else None
        ttft = tpot = e2e = None
        if result is None and attempt.first_byte_at is not None:   # its client left after it
            ttft = attempt.first_byte_at - attempt.started_at
        if result is not None:
            e2e = result.finished_at - attempt.started_at
            if result.first_byte_at is not None:
                ttft = result.first_byte_at - attempt.started_at
                # the sequences of a batch or of n choices are generated side by side: the
                # time between tokens is each one's (16 choices read as 16 times faster)
                each = usage.completion_tokens / routing.returned_sequences if usage else 0.0
                if each > 1:
                    tpot = (result.finished_at - result.first_byte_at) / (each - 1)
        if self._loop_stalls is not None and self._loop_stalls.since(attempt.started_at):
            # the router stalled while this request ran (its process stopped, its machine
            # paused): its times hold the stall, not its worker's pace, and the estimators
            # must not learn them (the clients' own histograms keep what they waited)
            ttft = tpot = None
        return RequestOutcome(
            request_id=routing.request_id, worker_id=attempt.decision.worker_id, status=status,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else None,
            ttft_s=ttft, tpot_s=tpot, e2e_s=e2e)


def without_addresses(text: str, workers: Iterable[WorkerInfo]) -> str:
    """``text`` with each worker's URL and ``host:port`` replaced by its id."""
    for info in workers:
        host, port = origin_of(info.url)
        text = text.replace(info.url.rstrip("/"), info.id).replace(f"{host}:{port}", info.id)
    return text


def _outcome_fields(outcome: RequestOutcome, status: int, attempt: _Attempt,
                    result: ProxyResult | None, now: float) -> Outcome:
    """How an attempt ended, for ``/debug/decisions``: its status, its times (from its
    sending; ``client_s`` from the request's arrival, admission waits and earlier attempts
    included) and its tokens (its usage: none for an answer without one)."""
    ended = result.finished_at if result is not None else now
    return {"status": status,
            "ttft_s": _rounded(outcome.ttft_s), "tpot_s": _rounded(outcome.tpot_s),
            "e2e_s": _rounded(ended - attempt.started_at),
            "client_s": _rounded(ended - attempt.received_at) if attempt.received_at else None,
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens}


def _rounded(seconds: float | None) -> float | None:
    return round(seconds, 4) if seconds is not None else None


# what a decision's ``filtered_out`` says of a worker the router passed over itself: set
# aside (ejected after failures, or stalled), or already tried by this request
SET_ASIDE = "ejected"
TRIED = "tried"


def _naming_set_asides(decision: Decision, shown: Sequence[WorkerView],
                       fail_open: Sequence[WorkerView] | None, opened: bool,
                       tried: Iterable[str]) -> Decision:
    """``decision`` with the workers the router set aside named so in ``filtered_out`` (the
    ``healthy`` filter passed them over: shown unhealthy, they are not), those this request
    tried already added, and ``fail_open`` among its attributes when every candidate was set
    aside and it was decided with them."""
    set_aside = ({view.id for view, seen in zip(fail_open, shown, strict=True)
                  if view.healthy and not seen.healthy} if fail_open is not None else set())
    filtered = {worker: SET_ASIDE if worker in set_aside and by == HEALTHY_FILTER else by
                for worker, by in decision.filtered_out.items()}
    filtered.update((worker, TRIED) for worker in tried)
    attributes = {**decision.attributes, "fail_open": True} if opened else decision.attributes
    return dataclasses.replace(decision, filtered_out=filtered, attributes=attributes)


def _billed_outcome(routing: RoutingRequest, outcome: RequestOutcome, usage_read: bool,
                    status: int, relayed: int) -> RequestOutcome | None:
    """What a request is counted and charged for (``kvroute_*_tokens_total``, its cost), as
    its budget is: an answer, by its usage; what of a stream reached its client (a client
    that left, a worker that broke it or ended it with an error), by its usage when read,
    else its prompt as the router counted it and a token for each event relayed; nothing
    for a request whose client got no answer (None)."""
    if usage_read:
        return outcome if status == 200 or relayed else None
    if routing.stream and relayed:
        return dataclasses.replace(outcome, prompt_tokens=routing.num_prompt_tokens,
                                   completion_tokens=relayed)
    return outcome if status == 200 else None


def longest_answer_tokens(routing: RoutingRequest, max_model_len: int) -> int:
    """The most tokens a worker with this window may generate for one sequence of the
    request: its ``max_tokens``, else the rest of the window (vLLM's bound when a request
    sets none), clamped to the window."""
    return output_tokens_in_window(
        routing.max_tokens if routing.max_tokens is not None else max_model_len,
        routing.context_prompt_tokens, max_model_len)


def _drain_cut_answer(cancelled: asyncio.CancelledError) -> StoppedBeforeTheAnswer | None:
    """The 503 for a request the router's drain cut before its answer began (the task's
    cancellation taken back, for the answer to be written), else None (its client left)."""
    why = cut_by_drain(cancelled)
    if why is None:
        return None
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return StoppedBeforeTheAnswer(f"The router is stopping and cut this request before it "
                                  f"was answered ({why}): send it again.")


def _expected_first_byte_s(decision: Decision, stream: bool, decode_tokens: int) -> float | None:
    """How long the attempt's first byte should take: a stream's first token (the estimated
    TTFT), a whole answer's arrival (the TTFT and every token); None when unknown."""
    ttft = decision.attributes.get("estimated_ttft_s")
    tpot = decision.attributes.get("estimated_tpot_s")
    if stream:
        return ttft if isinstance(ttft, float) else None
    if isinstance(ttft, float) and isinstance(tpot, float):
        return ttft + decode_tokens * tpot
    return decode_tokens * UNESTIMATED_TOKEN_S


def _context_length_error(routing: RoutingRequest, max_model_len: int,
                          headers: dict[str, str]) -> ContextLengthExceeded:
    """vLLM's answer to a prompt that no worker's context window holds, in its words and
    order.

    The ``context-length`` filter leaves nothing only when the prompt itself does not fit;
    a prompt that fits with a too-large ``max_tokens`` is forwarded (clamped, or refused by
    the engine itself when ``max_tokens`` is past its whole window). vLLM refuses such a
    ``max_tokens`` before it reads the prompt; then the first prompt too long: it tokenizes a
    text one token past its window at most, so a text too long is "at least"
    ``max_model_len + 1`` tokens; prompts of token ids are counted whole. A prompt that
    fills the window leaves no room for an answer: its sampling refuses ``max_tokens`` 0.
    A text longer than the window times the model's longest token (known from its own
    tokenizer) is refused by its characters, untokenized."""
    asked = _asked_max_tokens(routing)
    if asked is not None and asked[1] > max_model_len:
        field, value = asked
        return ContextLengthExceeded(
            f"{field}={value} cannot be greater than max_model_len={max_model_len}. Please "
            f"request fewer output tokens. (parameter={field}, value={value})",
            param=field, headers=headers)
    past_chars = routing.attributes.get(PAST_CHARS_KEY)
    if past_chars is not None:      # the model's own tokenizer's bound, as vLLM words it
        chars, per_token = past_chars
        return ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {chars} characters (more than {max_model_len * per_token} "
            f"characters, which is the upper bound for {max_model_len} input tokens). Please "
            f"reduce the length of the input prompt. (parameter=input_text, value={chars})",
            param="input_text", headers=headers)
    # a batch's longest prompt (each is served alone), less a chat's media (an estimate)
    tokens = routing.certain_context_tokens
    if (tokens == max_model_len and least_output(routing)
            and not routing.attributes.get(AT_LEAST_KEY)):
        return ContextLengthExceeded(
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
            param="max_tokens", headers=headers)
    count = _first_too_long_ids(routing.prompt, max_model_len)
    if count is None:       # a text (or a chat): read one token past the window
        count = max_model_len + 1
    qualifier = "at least " if count == max_model_len + 1 else ""
    message = (f"This model's maximum context length is {max_model_len} tokens. However, your "
               f"prompt contains {qualifier}{count} input tokens, which exceeds this limit "
               "even without any output tokens. Please reduce the length of the input prompt. "
               f"(parameter=input_tokens, value={count})")
    return ContextLengthExceeded(message, param="input_tokens", headers=headers)


# the body field vLLM names in its max_tokens refusal, by path (a Messages request is turned
# into a chat request's max_completion_tokens)
_MAX_TOKENS_FIELDS = {COMPLETIONS_PATH: ("max_tokens",),
                      CHAT_PATH: ("max_completion_tokens", "max_tokens"),
                      MESSAGES_PATH: ("max_tokens",), RESPONSES_PATH: ("max_output_tokens",)}


def _asked_max_tokens(routing: RoutingRequest) -> tuple[str, int] | None:
    """(the field vLLM names, the value) of the answer's length the client asked for."""
    body = routing.body
    if body is None:
        return None
    for field in _MAX_TOKENS_FIELDS.get(routing.path, ()):
        value = lax_int(body.get(field))
        if value is not None:
            if routing.path == MESSAGES_PATH:
                field = "max_completion_tokens"
            return field, value
    return None


def _first_too_long_ids(prompt: object, max_model_len: int) -> int | None:
    """The length of the first prompt of token ids past the window, in the batch's order;
    None for a text prompt (or when none is)."""
    if not isinstance(prompt, list) or not prompt:
        return None
    if isinstance(prompt[0], int):
        return len(prompt) if len(prompt) > max_model_len else None
    for ids in prompt:
        if not isinstance(ids, list) or (ids and not isinstance(ids[0], int)):
            return None                 # texts
        if len(ids) > max_model_len:
            return len(ids)
    return None


def _lacks_the_named_model(holder: Sequence[WorkerView], model: str) -> bool:
    """True when ``holder`` (a continued response's worker, alone) is up and serves no
    longer ``model`` (an adapter it unloaded, or a model it never served): vLLM answers
    404 to the name there, and another model answering for it would be no answer to it."""
    return bool(holder) and holder[0].healthy and not holder[0].serves(model)


def continuation_model(holder: Sequence[WorkerView], requested: str) -> str | None:
    """The model a request continuing a response is sent to its holder with, when the
    routing's own choice leaves that worker out: the requested model if the holder serves it,
    else the first model its fleet entry lists; None when the holder is not among the
    views."""
    if not holder:
        return None
    view = holder[0]
    return requested if view.serves(requested) else view.info.models[0]


def continuation_decision(engine: PolicyEngine, routing: RoutingRequest,
                          holder: Sequence[WorkerView], refused: Decision,
                          model: str) -> Decision:
    """The decision for a request continuing a response that only its holder can continue,
    when the routing's own decision (``refused``) left the holder out: a rule sent it to a
    model, adapter or pool the holder does not have (a semantic class that changed between
    turns). The rules are set aside and the holder decided on with ``model``; its reason
    says so. A continuation the holder cannot take either (too long for its window) keeps
    this decision's refusal."""
    target = routing if model == routing.model else dataclasses.replace(routing, model=model)
    decision = engine.decide(target, holder, follow_rules=False)
    if decision.worker_id is None:
        return decision
    rule = f"rule {refused.rule}" if refused.rule is not None else "the routing"
    return dataclasses.replace(decision, reason=(
        f"continues a response only {decision.worker_id} holds, which {rule} left out "
        f"(target {refused.model}): {decision.reason}"))
