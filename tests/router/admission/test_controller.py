"""Admission applied to requests (a fake clock, the gate and the usage for real): budgets
refuse with OpenAI's 429 and its headers, tokens are charged as the router counts them and
settled with what the workers served, the shared budget of unlisted tenants, a budget
spent by others while a request waited, and every refusal counted."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from policies.admission.section import OTHER_TENANTS_KEY, AdmissionSection, TenantBudget
from router.admission.controller import Admission
from router.admission.usage import TenantUsage
from router.errors import AdmissionRefused, Overloaded, RequestRateLimited, TokenRateLimited
from router.metrics import RouterMetrics

MODEL = "m"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _admission() -> tuple[Admission, RouterMetrics, Clock]:
    metrics, clock = RouterMetrics(), Clock()
    return Admission(TenantUsage(), metrics, clock), metrics, clock


def _rejections(metrics: RouterMetrics, reason: str, tenant: str) -> float:
    value = metrics.registry.get_sample_value("kvroute_admission_rejections_total",
                                              {"reason": reason, "tenant": tenant})
    return value or 0.0


async def test_without_a_section_everything_passes_and_is_counted_in_flight() -> None:
    admission, metrics, _ = _admission()
    tickets = [await admission.admit(None, "acme", MODEL) for _ in range(50)]
    assert metrics.registry.get_sample_value("kvroute_admission_in_flight") == 50
    for ticket in tickets:
        admission.charge_expected(ticket, 100, 0)
        admission.finish(ticket)
    assert metrics.registry.get_sample_value("kvroute_admission_in_flight") == 0
    assert len(admission.usage) == 0           # nothing limited, nothing counted


async def test_requests_per_minute_refuses_with_retry_after() -> None:
    admission, metrics, clock = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(requests_per_minute=3)})
    for _ in range(3):
        admission.finish(await admission.admit(section, "acme", MODEL))
        clock.now += 10
    with pytest.raises(RequestRateLimited) as raised:
        await admission.admit(section, "acme", MODEL, "rerank")
    error = raised.value
    assert (error.status, error.reason) == (429, "requests_per_minute")   # as counted
    body = orjson.loads(error.body())["error"]
    assert (body["type"], body["code"]) == ("requests", "rate_limit_exceeded")
    assert "tenant `acme`" in body["message"] and "limit 3, used 3" in body["message"]
    # the first request (at 1000) leaves the window at 1060, 30 s after now (1030)
    assert error.headers["Retry-After"] == "30"
    assert error.headers["x-ratelimit-limit-requests"] == "3"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert _rejections(metrics, "requests_per_minute", "acme") == 1
    assert metrics.registry.get_sample_value(
        "kvroute_requests_total", {"model": MODEL, "worker": "", "gpu": "", "profile": "none",
                                   "status": "429", "api": "rerank"}) == 1    # its path's API
    clock.now += 30
    admission.finish(await admission.admit(section, "acme", MODEL))   # back under it
    # another tenant is not held back by acme's budget
    admission.finish(await admission.admit(section, "globex", MODEL))


async def test_tokens_are_charged_then_settled_with_what_was_served() -> None:
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(tokens_per_minute=1000)})
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 600, 0)           # the router's own count of the prompt
    assert admission.usage.totals("acme", clock.now) == (1, 600)
    admission.record_attempt(ticket, True, 590, 300)   # the worker's prompt and completion
    admission.finish(ticket)
    assert admission.usage.totals("acme", clock.now) == (1, 890)
    ticket = await admission.admit(section, "acme", MODEL)    # 890 < 1000: still admitted
    admission.charge_expected(ticket, 200, 0)
    admission.record_attempt(ticket, False, 0, 0)
    admission.finish(ticket)                       # no worker answered: refunded
    assert admission.usage.totals("acme", clock.now) == (2, 890)
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 50, 0)
    admission.record_attempt(ticket, True, 0, 0)   # a stream its client left, no usage
    admission.finish(ticket)                       # keeps its prompt's charge
    assert admission.usage.totals("acme", clock.now) == (3, 940)
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 10, 40)
    admission.record_attempt(ticket, False, 0, 0, whole_answer=True)   # 200, no usage in it
    admission.finish(ticket)                       # (a background response): keeps it all
    assert admission.usage.totals("acme", clock.now) == (4, 990)
    ticket = await admission.admit(section, "acme", MODEL)
    admission.record_attempt(ticket, True, 100, 400)   # served past the budget: a debt
    admission.finish(ticket)
    with pytest.raises(TokenRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    body = orjson.loads(raised.value.body())["error"]
    assert body["type"] == "tokens" and "used 1490" in body["message"]
    assert raised.value.reason == "tokens_per_minute"
    assert raised.value.headers["x-ratelimit-remaining-tokens"] == "0"
    assert raised.value.headers["Retry-After"] == "60"


async def test_requests_at_once_see_each_others_expected_answers() -> None:
    """Twenty requests of max_tokens 200 at once on a budget of 300 tokens: each charges
    its prompt and the answer it may take when routed, so the third is refused (charged at
    their end, all twenty passed); each then settles to what was served."""
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"globex": TenantBudget(tokens_per_minute=300)})
    admitted = []
    refused = 0
    for _ in range(20):
        try:
            ticket = await admission.admit(section, "globex", MODEL)
        except TokenRateLimited:
            refused += 1
            continue
        admission.charge_expected(ticket, 6, 200)
        admitted.append(ticket)
    assert (len(admitted), refused) == (2, 18)
    assert admission.usage.totals("globex", clock.now) == (2, 412)
    admission.record_attempt(admitted[0], True, 6, 150)    # answered shorter than allowed
    admission.finish(admitted[0])
    admission.record_attempt(admitted[1], True, 0, 0)      # a stream its client left
    admission.finish(admitted[1])                          # keeps the prompt only
    assert admission.usage.totals("globex", clock.now) == (2, 162)


async def test_requests_admitted_together_are_checked_again_as_their_prompts_are_charged(
        ) -> None:
    """Twenty long prompts admitted at once (each tokenized in a thread before its charge)
    all passed a budget none of them had charged yet: 87,647 tokens on 20,000. Checked
    again at the charge, the one crossing the limit goes and the rest are refused, their
    requests refunded."""
    admission, metrics, clock = _admission()
    section = AdmissionSection(tenants={"big": TenantBudget(requests_per_minute=100,
                                                            tokens_per_minute=20_000)})
    tickets = [await admission.admit(section, "big", MODEL) for _ in range(20)]
    charged, refused = [], 0
    for ticket in tickets:          # the producers done, one after the other on the loop
        try:
            admission.charge_expected(ticket, 4_000, 5, MODEL)
        except TokenRateLimited as exc:
            refused += 1
            assert exc.headers["x-ratelimit-remaining-tokens"] == "0"
            admission.finish(ticket)
            continue
        charged.append(ticket)
    assert (len(charged), refused) == (5, 15)
    assert admission.usage.totals("big", clock.now) == (5, 5 * 4_005)
    assert _rejections(metrics, "tokens_per_minute", "big") == 15
    assert admission.gate.in_flight == 5


async def test_unlisted_tenants_share_one_budget() -> None:
    admission, metrics, _ = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget()},
                               other_tenants=TenantBudget(requests_per_minute=2))
    admission.finish(await admission.admit(section, "globex", MODEL))
    admission.finish(await admission.admit(section, None, MODEL))
    with pytest.raises(RequestRateLimited) as raised:
        await admission.admit(section, "initech", MODEL)
    assert "tenants without a budget of their own" in raised.value.message
    assert admission.usage.totals(OTHER_TENANTS_KEY, 1000.0) == (2, 0)
    assert _rejections(metrics, "requests_per_minute", "initech") == 1
    for _ in range(5):                         # acme is listed, without a limit
        admission.finish(await admission.admit(section, "acme", MODEL))


async def test_a_budget_spent_while_a_request_waited_refuses_it_and_frees_the_slot() -> None:
    admission, _, _ = _admission()
    section = AdmissionSection(max_in_flight=1,
                               tenants={"acme": TenantBudget(requests_per_minute=2)})
    first = await admission.admit(section, "acme", MODEL)
    waiting = asyncio.create_task(admission.admit(section, "acme", MODEL))
    await asyncio.sleep(0.01)
    admission.usage.remote = {"acme": (5, 0)}      # another replica spent it meanwhile
    admission.finish(first)
    with pytest.raises(RequestRateLimited):
        await waiting
    assert (admission.gate.in_flight, admission.gate.waiting) == (0, 0)


async def test_a_budgets_waiting_requests_count_as_spent(
        ) -> None:
    """A tenant with three requests left filled the queue with forty, each refused only when
    its turn came, and others were turned away for a full queue: the fourth is refused at
    once now, and another tenant still finds room to wait."""
    admission, _, _ = _admission()
    section = AdmissionSection(max_in_flight=1, max_waiting=5, tenants={
        "acme": TenantBudget(requests_per_minute=4), "globex": TenantBudget(priority=0)})
    holder = await admission.admit(section, "globex", MODEL)          # holds the one slot
    admission.usage.add("acme", 1000.0, requests=1)                   # three left
    waiters = [asyncio.create_task(admission.admit(section, "acme", MODEL)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert admission.gate.waiting == 3
    for _ in range(10):
        with pytest.raises(RequestRateLimited) as refused:
            await admission.admit(section, "acme", MODEL)
        assert refused.value.headers["x-ratelimit-remaining-requests"] == "0"
        # the waiting three are spent within moments, and leave a minute on (it said 1)
        assert refused.value.headers["Retry-After"] == "60"
    other = asyncio.create_task(admission.admit(section, "globex", MODEL))
    await asyncio.sleep(0.01)
    assert admission.gate.waiting == 4                  # room for it: the queue is not full
    admission.finish(holder)
    for task in waiters:
        admission.finish(await task)
    admission.finish(await other)
    assert admission.usage.totals("acme", 1000.0)[0] == 4
    assert (admission.gate.in_flight, admission.gate.waiting) == (0, 0)


async def test_the_queue_full_and_a_wait_too_long_are_503_with_retry_after() -> None:
    admission, metrics, _ = _admission()
    section = AdmissionSection(max_in_flight=1, max_waiting=1, wait_timeout_s=0.05)
    first = await admission.admit(section, "acme", MODEL)
    waiting = asyncio.create_task(admission.admit(section, "acme", MODEL))
    await asyncio.sleep(0)
    with pytest.raises(Overloaded) as full:
        await admission.admit(section, "acme", MODEL)
    with pytest.raises(Overloaded) as late:
        await waiting
    for error in (full.value, late.value):
        assert error.status == 503 and error.headers["Retry-After"] == "1"
        assert orjson.loads(error.body())["error"]["code"] == "overloaded"
    assert "2 more are waiting" not in full.value.message and "1 more" in full.value.message
    assert "waited 0.05 s" in late.value.message
    assert (full.value.reason, late.value.reason) == ("queue_full", "wait_timeout")
    assert _rejections(metrics, "queue_full", "acme") == 1
    assert _rejections(metrics, "wait_timeout", "acme") == 1
    admission.finish(first)
    assert admission.gate.in_flight == 0


async def test_a_request_that_would_wait_while_the_router_stops_is_refused_as_draining(
        ) -> None:
    """The refusal names its reason as the metric does, for the decisions' record of it."""
    admission, metrics, _ = _admission()
    section = AdmissionSection(max_in_flight=1, max_waiting=4, wait_timeout_s=5.0)
    first = await admission.admit(section, "acme", MODEL)
    admission.gate.close()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit(section, "acme", MODEL)
    assert isinstance(refused.value, Overloaded)
    assert (refused.value.status, refused.value.reason) == (503, "draining")
    assert _rejections(metrics, "draining", "acme") == 1
    admission.finish(first)


@pytest.mark.parametrize("section", [None, AdmissionSection(max_in_flight=8)])
async def test_a_request_arriving_once_the_router_stops_is_refused_with_slots_free(
        section: AdmissionSection | None) -> None:
    """Once the drain begins only what was in flight finishes: a request that still reaches
    the router (on a keep-alive connection, or on the port of its process alone, which
    stays open through the drain) had reached no worker and goes to another router."""
    admission, metrics, _ = _admission()
    admission.gate.close()
    with pytest.raises(AdmissionRefused) as refused:
        await admission.admit(section, "acme", MODEL)
    assert (refused.value.status, refused.value.reason) == (503, "draining")
    assert refused.value.headers == {"Retry-After": "1"}
    assert _rejections(metrics, "draining", "acme") == 1
    assert admission.gate.in_flight == 0


async def test_a_request_the_router_was_reading_at_the_stop_is_admitted() -> None:
    """Admission comes once the body is read: a request sent before the signal (its body
    still arriving, or parsed in a thread) was refused as one arriving after it."""
    admission, _, _ = _admission()
    admission.gate.close(let_in={asyncio.current_task()})
    ticket = await admission.admit(None, "acme", MODEL)
    assert admission.gate.in_flight == 1
    admission.finish(ticket)


async def test_an_answer_says_what_is_left_of_its_budget() -> None:
    admission, _, _ = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(requests_per_minute=5,
                                                             tokens_per_minute=1000),
                                        "globex": TenantBudget(requests_per_minute=5)})
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 300, 0)
    assert admission.rate_limit_headers(ticket) == {
        "x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "4",
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "700"}
    admission.record_attempt(ticket, True, 300, 1700)
    admission.finish(ticket)
    ticket = await admission.admit(section, "globex", MODEL)
    assert admission.rate_limit_headers(ticket) == {
        "x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "4"}
    unlimited = await admission.admit(section, "initech", MODEL)
    assert unlimited.budget is None and admission.rate_limit_headers(unlimited) == {}


async def test_status_shows_each_budgets_spending_and_what_is_left() -> None:
    admission, _, _ = _admission()
    assert admission.status(None) == {"configured": False, "in_flight": 0, "waiting": 0}
    section = AdmissionSection(max_in_flight=4, tenants={
        "acme": TenantBudget(requests_per_minute=5, tokens_per_minute=1000, priority=2),
        "gold": TenantBudget(priority=9)}, other_tenants=TenantBudget(requests_per_minute=3))
    held = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(held, 250, 0)
    admission.finish(await admission.admit(section, "globex", MODEL))
    admission.usage.remote = {"acme": (1, 100)}          # another replica's spending
    status = admission.status(section)
    assert (status["configured"], status["in_flight"], status["max_in_flight"]) == (True, 1, 4)
    assert status["budgets"] == [
        {"tenant": "acme", "priority": 2, "requests_per_minute": 5, "tokens_per_minute": 1000,
         "requests_used": 2, "tokens_used": 350, "requests_remaining": 3,
         "tokens_remaining": 650},
        {"tenant": "gold", "priority": 9, "requests_per_minute": None,
         "tokens_per_minute": None},
        {"tenant": None, "priority": 0, "requests_per_minute": 3, "tokens_per_minute": None,
         "requests_used": 1, "tokens_used": 0, "requests_remaining": 2,
         "tokens_remaining": None}]


async def test_a_long_requests_settlement_leaves_the_window_with_its_charge() -> None:
    """A stream charged 3,043 tokens at its start and ending 20 s later having served 43:
    the refund was counted at its end, so for the 20 s between the charge leaving the window
    and the refund leaving it, spending read -3,000 and the budget 203,000 of 200,000."""
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(tokens_per_minute=200_000)})
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 43, 3000)
    clock.now += 20
    admission.record_attempt(ticket, True, 43, 0)
    admission.finish(ticket)
    seen = []
    for _ in range(90):
        clock.now += 1
        seen.append(admission.usage.totals("acme", clock.now)[1])
    assert min(seen) == 0 and max(seen) == 43 and seen[-1] == 0


async def test_a_stream_left_before_its_usage_is_charged_the_events_it_relayed() -> None:
    """A client closing a stream just before its usage chunk paid only for its prompt: six
    595-token streams cost 43 tokens each of a 2,000-token budget."""
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"globex": TenantBudget(tokens_per_minute=2000)})
    ticket = await admission.admit(section, "globex", MODEL)
    admission.charge_expected(ticket, 43, 600)
    admission.record_attempt(ticket, True, 0, 0, events_relayed=596)   # role chunk + 595
    admission.finish(ticket)
    assert admission.usage.totals("globex", clock.now) == (1, 43 + 596)
    ticket = await admission.admit(section, "globex", MODEL)
    admission.charge_expected(ticket, 43, 600)
    admission.record_attempt(ticket, True, 0, 0, events_relayed=5000)
    admission.finish(ticket)                           # at most what it was charged
    assert admission.usage.totals("globex", clock.now) == (2, 43 + 596 + 643)


async def test_a_refusal_names_both_limits_of_a_budget_that_has_both() -> None:
    admission, _, _ = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(requests_per_minute=1,
                                                             tokens_per_minute=1000)})
    ticket = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(ticket, 100, 0)
    with pytest.raises(RequestRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    headers = raised.value.headers
    assert {k: v for k, v in headers.items() if k.startswith("x-ratelimit")} == {
        "x-ratelimit-limit-requests": "1", "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-requests": f"{headers['Retry-After']}s"}


async def test_a_budget_its_answers_in_flight_fill_says_retry_in_a_second() -> None:
    """The answers of requests in flight are charged ahead at their max_tokens and settle to
    what they served as they end: a budget they fill has room again then, not a minute on
    (a client honouring Retry-After slept the minute). A budget that stays spent once every
    answer settles still says when its spending leaves."""
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(tokens_per_minute=500)})
    long_answer = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(long_answer, 43, 460)          # 503 of 500, 460 ahead
    clock.now += 0.1
    with pytest.raises(TokenRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    assert raised.value.headers["Retry-After"] == "1"
    assert raised.value.headers["x-ratelimit-reset-tokens"] == "1s"
    admission.record_attempt(long_answer, True, 43, 157)     # it served 200 in all
    admission.finish(long_answer)
    admission.finish(await admission.admit(section, "acme", MODEL))     # room at once
    holder = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(holder, 300, 100)     # 200 + 300 spent, 100 more ahead
    with pytest.raises(TokenRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    assert raised.value.headers["Retry-After"] == "60"       # the spending leaves at 1060


async def test_an_answer_reserved_over_a_minute_ago_is_no_room_to_come() -> None:
    """A request running for over a minute: its charge has left the window, so its end
    frees nothing, and a budget others filled since says when their spending leaves."""
    admission, _, clock = _admission()
    section = AdmissionSection(tenants={"acme": TenantBudget(tokens_per_minute=1000)})
    long_answer = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(long_answer, 10, 800)
    clock.now += 70
    prompt = await admission.admit(section, "acme", MODEL)
    admission.charge_expected(prompt, 1000, 0)
    with pytest.raises(TokenRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    assert raised.value.headers["Retry-After"] == "60"
    admission.record_attempt(long_answer, True, 10, 790)
    admission.finish(long_answer)
    with pytest.raises(TokenRateLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    assert raised.value.headers["Retry-After"] == "60"


async def test_a_budgets_max_in_flight_refuses_one_more_and_frees_as_they_end() -> None:
    """One tenant's slow streams took every slot of the in-flight limit, and a request of a
    higher priority waited its whole timeout: a budget's ``max_in_flight`` caps its requests
    at once (in flight or waiting), the next refused 429 at once; the others go on."""
    from router.errors import ConcurrencyLimited

    admission, metrics, _ = _admission()
    section = AdmissionSection(max_in_flight=3, wait_timeout_s=0.2, tenants={
        "acme": TenantBudget(max_in_flight=2), "vip": TenantBudget(priority=5)},
        other_tenants=TenantBudget(max_in_flight=1))
    acme = [await admission.admit(section, "acme", MODEL) for _ in range(2)]
    with pytest.raises(ConcurrencyLimited) as raised:
        await admission.admit(section, "acme", MODEL)
    error = raised.value
    assert (error.status, error.reason, error.headers["Retry-After"]) == (
        429, "tenant_in_flight", "1")
    body = orjson.loads(error.body())["error"]
    assert (body["type"], body["code"]) == ("requests", "rate_limit_exceeded")
    assert body["message"] == ("Too many requests at once for tenant `acme`: limit 2 in "
                               "flight. Please try again in 1s.")
    assert _rejections(metrics, "tenant_in_flight", "acme") == 1
    # the unlisted tenants share theirs
    other = await admission.admit(section, "globex", MODEL)
    with pytest.raises(ConcurrencyLimited, match="tenants without a budget of their own"):
        await admission.admit(section, None, MODEL)
    status = admission.status(section)
    assert [(b["tenant"], b.get("in_flight")) for b in status["budgets"]] == [
        ("acme", 2), ("vip", None), (None, 1)]
    # a request refused further on (its wait for a slot timed out) frees its count
    admission.finish(other)
    vip = await admission.admit(section, "vip", MODEL)             # the third slot
    with pytest.raises(Overloaded):
        await admission.admit(section, "globex", MODEL)            # waits 0.2 s: 503
    assert admission.status(section)["budgets"][2]["in_flight"] == 0
    admission.finish(acme[0])
    admission.finish(await admission.admit(section, "acme", MODEL))   # room again
    for ticket in (acme[1], vip):
        admission.finish(ticket)
    assert [b.get("in_flight") for b in admission.status(section)["budgets"]] == [0, None, 0]
