"""Admission: whether a request may go on, before anything is spent routing it.

``Admission.admit`` applies the routing file's ``admission:`` section in force
(``policies.admission.section``) to one request:

1. its tenant's budget (the listed tenant's own, else the shared ``other_tenants`` one): a
   budget whose requests or tokens over the last minute reached its limit refuses the
   request, 429 with ``Retry-After`` (``RequestRateLimited`` / ``TokenRateLimited``);
2. the in-flight limit: over ``max_in_flight`` the request waits its turn by the budget's
   ``priority`` (``router.admission.gate``); a full queue or a wait over ``wait_timeout_s``
   is answered 503 with ``Retry-After`` (``InFlightRefused``);
3. once through, the budget is checked again (others spent it while this one waited) and
   charged one request.

A budget's ``max_in_flight`` is checked first: with that many of its requests in flight or
waiting here, one more is refused 429 (``ConcurrencyLimited``), whatever is left per minute.

The request's tokens are charged before it is served: its prompt as the router counted it
and the answer it may take, its ``max_tokens`` or else the predicted length
(``charge_expected``, after the producers), then settled at the end to what the worker
reported (``record_attempt``, ``finish``): a budget counts the tokens served (a stream whose
client left before its usage keeps its prompt's charge), and requests running at once see
each other's expected spending. An
answer carries what is left of its budget (``rate_limit_headers``, OpenAI's headers). Every
request holds its ``AdmissionTicket`` until ``finish``, which frees its slot. Budgets are
counted in a ``TenantUsage`` the state store shares between replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policies.admission.section import OTHER_TENANTS_KEY, AdmissionSection, TenantBudget
from router.admission.gate import ConcurrencyGate, GateClosed, GateFull, GateTimeout
from router.admission.usage import TenantUsage, UsageWindow
from router.errors import (
    ConcurrencyLimited,
    InFlightRefused,
    RateLimited,
    RequestRateLimited,
    TokenRateLimited,
)
from router.metrics import OTHER_API, RouterMetrics

# Retry-After of a 503 for a full queue or a timed-out wait: long enough for a slot to free
OVERLOADED_RETRY_AFTER_S = 1
# Retry-After of a tokens budget that the answers of its requests in flight fill, and that
# would have room were they refunded: they settle to what they served as they end
RESERVED_RETRY_AFTER_S = 1
# Retry-After of a request over its budget's max_in_flight: a request of it ends soon
TENANT_IN_FLIGHT_RETRY_AFTER_S = 1
TENANT_IN_FLIGHT = "tenant_in_flight"     # the refusal's reason (metrics, decision log)
# the 503 of a request that reaches a stopping router: it had reached no worker
STOPPING = ("The router is stopping and this request had not reached a worker yet: send it "
            "again (another router takes it).")


@dataclass(slots=True)
class AdmissionTicket:
    """One admitted request: the budget it spends (None: unlimited) and what it charged."""

    usage_key: str | None
    waited_s: float = 0.0        # time spent waiting for an in-flight slot
    budget: TenantBudget | None = None     # the budget it spends, when limited
    tokens_charged: int = 0      # charged so far: the prompt and the answer expected, ...
    prompt_charged: int = 0      # ... of which the prompt
    tokens_served: int = 0       # prompt + completion the workers reported (their usage)
    usage_reported: bool = False  # some attempt's answer carried its usage
    answered: bool = False        # some worker began answering (its first byte came)
    charged_at: float = 0.0       # when the expected tokens were charged
    admitted_at: float = 0.0      # when its request was charged
    tenant: str | None = None     # as the client named it (for a refusal's metrics)
    api: str = OTHER_API          # its path's API (for a refusal's metrics)
    events_relayed: int = 0       # stream events sent to the client (about a token each)
    whole_answer: bool = False    # a worker answered it whole (not streamed)
    in_flight_key: str | None = None   # the budget whose max_in_flight counts it


class Admission:
    """Applies the admission section in force; holds the gate and the budgets' usage."""

    __slots__ = ("_answers_reserved", "_clock", "_metrics", "_model_label", "_tenant_in_flight",
                 "_waiting", "gate", "usage")

    def __init__(self, usage: TenantUsage, metrics: RouterMetrics,
                 clock: Callable[[], float] = time.monotonic,
                 model_label: Callable[[str], str] = str) -> None:
        """``model_label``: a request's model as the metrics may label it (read only for a
        refused request)."""
        self.usage = usage
        self.gate = ConcurrencyGate()
        self._metrics = metrics
        self._clock = clock
        self._model_label = model_label
        self._waiting: dict[str, int] = {}    # budget -> its requests waiting for a slot
        # budget -> its requests in flight or waiting here (those with a max_in_flight)
        self._tenant_in_flight: dict[str, int] = {}
        # budget -> the answer tokens its requests in flight here were charged ahead, in the
        # seconds they were charged (those charged over a minute ago have left the budget)
        self._answers_reserved: dict[str, UsageWindow] = {}
        metrics.watch_admission(lambda: self.gate.in_flight, lambda: self.gate.waiting)

    async def admit(self, section: AdmissionSection | None, tenant: str | None,
                    model: str, api: str = OTHER_API) -> AdmissionTicket:
        """Let the request on, or raise ``RateLimited`` / ``InFlightRefused`` (``api``: its
        path's, ``router.metrics.api_of_path``, for the metrics of a refusal)."""
        if self.gate.closed and asyncio.current_task() not in self.gate.let_in:
            # arrived once the drain began (on a connection still open, or on the port of
            # this process alone): only what was there before finishes
            raise self._overloaded("draining", tenant, model, api, STOPPING)
        if section is None:
            await self.gate.enter(0, 0, 1.0)      # counted in flight; no limit
            return AdmissionTicket(None, api=api)
        self._metrics.admission_tenant_seen(tenant)
        key = section.budget_key(tenant)
        budget = section.budget(key)
        in_flight_key = None
        if budget.max_in_flight is not None:
            in_flight_key = section.counted_as(key)
            self._take_tenant_slot(in_flight_key, budget.max_in_flight, tenant, model, api)
        try:
            ticket = await self._admit(section, key, budget, tenant, model, api)
        except BaseException:
            self._free_tenant_slot(in_flight_key)
            raise
        ticket.in_flight_key = in_flight_key
        return ticket

    async def _admit(self, section: AdmissionSection, key: str | None, budget: TenantBudget,
                     tenant: str | None, model: str, api: str) -> AdmissionTicket:
        usage_key = section.counted_as(key) if budget.limited else None
        if usage_key is not None:
            # its requests already waiting count as spent: a budget with three requests left
            # filled the queue with forty, each refused when its turn came (429), and other
            # tenants were turned away for a full queue meanwhile (503)
            self._check(budget, usage_key, tenant, model, api,
                        waiting=self._waiting.get(usage_key, 0))
            self._waiting[usage_key] = self._waiting.get(usage_key, 0) + 1
        try:
            waited = await self.gate.enter(section.max_in_flight, section.max_waiting,
                                           section.wait_timeout_s, budget.priority)
        except GateClosed:
            raise self._overloaded("draining", tenant, model, api, STOPPING) from None
        except GateFull:
            raise self._overloaded(
                "queue_full", tenant, model, api,
                f"The router is serving as many requests as it may ({section.max_in_flight}) "
                f"and {section.max_waiting} more are waiting: try again later.") from None
        except GateTimeout:
            raise self._overloaded(
                "wait_timeout", tenant, model, api,
                f"The request waited {section.wait_timeout_s:g} s for one of the router's "
                f"{section.max_in_flight} in-flight slots: try again later.") from None
        finally:
            if usage_key is not None:
                left = self._waiting[usage_key] - 1
                if left:
                    self._waiting[usage_key] = left
                else:
                    del self._waiting[usage_key]
        admitted_at = self._clock()
        if usage_key is not None:
            if waited > 0:
                try:
                    self._check(budget, usage_key, tenant, model, api)
                except RateLimited:
                    self.gate.leave()
                    raise
            self.usage.add(usage_key, admitted_at, requests=1)
        if section.max_in_flight > 0:
            self._metrics.admission_wait.observe(waited)
        return AdmissionTicket(usage_key, waited, budget if usage_key is not None else None,
                               admitted_at=admitted_at, tenant=tenant, api=api)

    def apply(self, section: AdmissionSection | None) -> None:
        """The section of a routing file just reloaded: its in-flight limit takes effect at
        once for the requests already waiting."""
        self.gate.set_limit(section.max_in_flight if section is not None else 0)

    def charge_expected(self, ticket: AdmissionTicket, prompt_tokens: int,
                        answer_tokens: int, model: str = "") -> None:
        """Charge, before the request is served, its prompt as the router counted it and the
        answer it may take (its ``max_tokens``, else the predicted length): requests running
        at once then see each other's spending, instead of each passing a budget whose
        answers are charged only as they end. ``finish`` settles to what was served.

        A tokens budget others' charges spent while this request was counted (its prompt
        tokenized, in a thread, for a long one) refuses it now, ``TokenRateLimited``, its
        request refunded: checking at admission alone let twenty long prompts sent at once
        all pass a budget none of them had charged yet. The check and the charge are one
        step of the event loop, so only the request whose charge crosses the limit goes."""
        key = ticket.usage_key
        if key is None:
            return
        budget = ticket.budget
        if budget is not None and budget.tokens_per_minute is not None:
            try:
                self._check(budget, key, ticket.tenant, model, ticket.api, units=("tokens",))
            except RateLimited:
                self.usage.settle(key, self._clock(), ticket.admitted_at, 0, requests=-1)
                raise
        expected = max(0, prompt_tokens) + max(0, answer_tokens)
        if expected > 0:
            ticket.charged_at = self._clock()
            self.usage.add(key, ticket.charged_at, tokens=expected)
            ticket.tokens_charged += expected
            ticket.prompt_charged += max(0, prompt_tokens)
            if answer_tokens > 0:
                reserved = self._answers_reserved.get(key)
                if reserved is None:
                    reserved = self._answers_reserved[key] = UsageWindow()
                reserved.add(ticket.charged_at, tokens=answer_tokens)

    def rate_limit_headers(self, ticket: AdmissionTicket) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-limit-*`` and ``x-ratelimit-remaining-*`` of the budget the
        request spends, this request counted (none for an unlimited one)."""
        budget = ticket.budget
        if ticket.usage_key is None or budget is None:
            return {}
        requests, tokens = self.usage.totals(ticket.usage_key, self._clock())
        headers = {}
        for unit, limit, used in (("requests", budget.requests_per_minute, requests),
                                  ("tokens", budget.tokens_per_minute, tokens)):
            if limit is not None:
                headers[f"x-ratelimit-limit-{unit}"] = str(limit)
                headers[f"x-ratelimit-remaining-{unit}"] = str(max(0, limit - used))
        return headers

    def record_attempt(self, ticket: AdmissionTicket, first_byte: bool, prompt_tokens: int,
                       completion_tokens: int, events_relayed: int = 0,
                       whole_answer: bool = False) -> None:
        """One attempt ended: whether its worker began answering (``whole_answer``: it
        answered 200 whole, not streamed), the usage it reported (0 and 0: none) and the
        stream events it relayed to the client."""
        ticket.answered = ticket.answered or first_byte or whole_answer
        ticket.whole_answer = ticket.whole_answer or whole_answer
        ticket.events_relayed += events_relayed
        if prompt_tokens or completion_tokens:
            ticket.tokens_served += prompt_tokens + completion_tokens
            ticket.usage_reported = True

    def finish(self, ticket: AdmissionTicket) -> None:
        """The request is over: settle its tokens with what the workers served, free its
        slots. Without a reported usage, a whole answer keeps what it was charged (a worker
        answering at once what it generates later: a Responses API ``background`` request);
        an answer that began (a stream its client left before its usage chunk) is charged its
        prompt and a token per event relayed to the client, at most what it was charged; a
        request no worker answered is refunded."""
        self.gate.leave()
        self._free_tenant_slot(ticket.in_flight_key)
        ticket.in_flight_key = None
        if ticket.usage_key is None:
            return
        reserved = self._answers_reserved.get(ticket.usage_key)
        if reserved is not None and ticket.tokens_charged > ticket.prompt_charged:
            now = self._clock()
            reserved.add_at(now, ticket.charged_at,
                            -(ticket.tokens_charged - ticket.prompt_charged))
            if reserved.totals(now)[1] <= 0:
                del self._answers_reserved[ticket.usage_key]
        served = ticket.tokens_served
        if not ticket.usage_reported and ticket.whole_answer:
            served = ticket.tokens_charged
        elif not ticket.usage_reported and ticket.answered:
            served = ticket.prompt_charged + ticket.events_relayed
            if ticket.tokens_charged > ticket.prompt_charged:
                served = min(served, ticket.tokens_charged)
        if served != ticket.tokens_charged:
            self.usage.settle(ticket.usage_key, self._clock(), ticket.charged_at,
                              served - ticket.tokens_charged)

    def status(self, section: AdmissionSection | None) -> dict[str, Any]:
        """``GET /debug/admission``: the section in force, the slots, and each limited
        budget's spending over the last minute (every replica's) and what is left of it."""
        gate = self.gate
        status: dict[str, Any] = {"configured": section is not None,
                                  "in_flight": gate.in_flight, "waiting": gate.waiting}
        if section is None:
            return status
        now = self._clock()
        budgets = []
        for key, budget in [*section.tenants.items(), (None, section.other_tenants)]:
            entry: dict[str, Any] = {"tenant": key, "priority": budget.priority,
                                     "requests_per_minute": budget.requests_per_minute,
                                     "tokens_per_minute": budget.tokens_per_minute}
            if budget.max_in_flight is not None:
                entry.update(max_in_flight=budget.max_in_flight, in_flight=self._tenant_in_flight
                             .get(section.counted_as(key), 0))
            if budget.limited:
                requests, tokens = self.usage.totals(section.counted_as(key), now)
                entry.update(requests_used=requests, tokens_used=tokens)
                for unit, limit, used in (("requests", budget.requests_per_minute, requests),
                                          ("tokens", budget.tokens_per_minute, tokens)):
                    entry[f"{unit}_remaining"] = (None if limit is None
                                                  else max(0, limit - used))
            budgets.append(entry)
        status.update(max_in_flight=section.max_in_flight, max_waiting=section.max_waiting,
                      wait_timeout_s=section.wait_timeout_s, budgets=budgets)
        return status

    def _take_tenant_slot(self, counted: str, limit: int, tenant: str | None, model: str,
                          api: str) -> None:
        """Count one more request of the budget ``counted`` here, or refuse it 429 when
        ``limit`` are already in flight or waiting."""
        held = self._tenant_in_flight.get(counted, 0)
        if held < limit:
            self._tenant_in_flight[counted] = held + 1
            return
        self._metrics.record_admission_rejection(TENANT_IN_FLIGHT, tenant,
                                                 self._model_label(model),
                                                 ConcurrencyLimited.status, api)
        whose = ("tenants without a budget of their own" if counted == OTHER_TENANTS_KEY
                 else f"tenant `{counted}`")
        raise ConcurrencyLimited(
            f"Too many requests at once for {whose}: limit {limit} in flight. Please try "
            f"again in {TENANT_IN_FLIGHT_RETRY_AFTER_S}s.", reason=TENANT_IN_FLIGHT,
            headers={"Retry-After": str(TENANT_IN_FLIGHT_RETRY_AFTER_S)})

    def _free_tenant_slot(self, counted: str | None) -> None:
        if counted is None:
            return
        left = self._tenant_in_flight[counted] - 1
        if left:
            self._tenant_in_flight[counted] = left
        else:
            del self._tenant_in_flight[counted]

    def _overloaded(self, reason: str, tenant: str | None, model: str, api: str,
                    message: str) -> InFlightRefused:
        """The 503 of a request the in-flight limit turned away, counted."""
        self._metrics.record_admission_rejection(reason, tenant, self._model_label(model),
                                                 InFlightRefused.status, api)
        return InFlightRefused(message, reason=reason,
                               headers={"Retry-After": str(OVERLOADED_RETRY_AFTER_S)})

    def _check(self, budget: TenantBudget, usage_key: str, tenant: str | None,
               model: str, api: str, units: tuple[str, ...] = ("requests", "tokens"),
               waiting: int = 0) -> None:
        """Raise ``RateLimited`` when the budget's ``units`` are spent (``waiting``: its
        requests waiting for a slot, counted as spent)."""
        now = self._clock()
        requests, tokens = self.usage.totals(usage_key, now)
        requests += waiting
        over_requests = (budget.requests_per_minute is not None and "requests" in units
                         and requests >= budget.requests_per_minute)
        over_tokens = (budget.tokens_per_minute is not None and "tokens" in units
                       and tokens >= budget.tokens_per_minute)
        if not over_requests and not over_tokens:
            return
        # the requests waiting are charged within moments and leave the window a minute on:
        # room comes when what is counted now leaves below the limit less them
        limit_now = (None if budget.requests_per_minute is None
                     else max(0, budget.requests_per_minute - waiting))
        wait = self.usage.seconds_until(usage_key, now, limit_now, budget.tokens_per_minute)
        reserved = self._answers_reserved.get(usage_key)
        if (not over_requests and budget.tokens_per_minute is not None
                and reserved is not None
                and tokens - reserved.totals(now)[1] < budget.tokens_per_minute):
            # answers charged ahead at their max_tokens fill it: room comes as they end and
            # settle to what they served, not a minute on (a client honouring Retry-After
            # slept that minute)
            wait = min(wait, RESERVED_RETRY_AFTER_S)
        whose = ("tenants without a budget of their own" if usage_key == OTHER_TENANTS_KEY
                 else f"tenant `{usage_key}`")
        error: type[RateLimited]
        if over_requests:
            limit, used, unit, error = (budget.requests_per_minute, requests, "requests",
                                        RequestRateLimited)
        else:
            limit, used, unit, error = (budget.tokens_per_minute, tokens, "tokens",
                                        TokenRateLimited)
        assert limit is not None
        reason = f"{unit}_per_minute"
        self._metrics.record_admission_rejection(reason, tenant, self._model_label(model),
                                                 error.status, api)
        headers = {"Retry-After": str(wait)}
        for each_unit, each_limit, each_used in (
                ("requests", budget.requests_per_minute, requests),
                ("tokens", budget.tokens_per_minute, tokens)):
            if each_limit is not None:     # both of a budget that has both (as OpenAI sends)
                headers[f"x-ratelimit-limit-{each_unit}"] = str(each_limit)
                headers[f"x-ratelimit-remaining-{each_unit}"] = str(max(0, each_limit
                                                                        - each_used))
        headers[f"x-ratelimit-reset-{unit}"] = f"{wait}s"
        raise error(
            f"Rate limit reached for {whose} on {unit} per minute: limit {limit}, used "
            f"{used}. Please try again in {wait}s.", reason=reason, headers=headers)
