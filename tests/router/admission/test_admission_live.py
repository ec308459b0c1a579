"""Admission in a running router, over emulated workers on loopback: the official clients
see a spent budget as their own ``RateLimitError`` (OpenAI's and Anthropic's shapes), a
tokens budget counts what the worker served, the in-flight limit lets waiters on by
priority and holds a stream's slot to its end, a full queue is 503, a waiter whose client
leaves frees its place, a reload changes the limits, two routers share a budget through
Redis, and each refusal is found beside the decisions (``/debug/decisions``, the decision
log), named by the routing file that refused it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from router.keys import STORE
from tests.router.gateway_support import MODEL, REPO_ROOT, RouterFactory, RouterHandle, subset
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration

DEFAULT = (REPO_ROOT / "config/routing.yaml").read_text()


def _routing(admission: str) -> str:
    return DEFAULT + "admission:\n" + "".join(f"  {line}\n" for line in admission.splitlines())


def _openai(router: RouterHandle, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0,
                              default_headers={"x-tenant": tenant})


async def _complete(session: aiohttp.ClientSession, router: RouterHandle, tenant: str,
                    max_tokens: int = 2, stream: bool = False) -> tuple[int, dict[str, str], str]:
    async with session.post(f"{router.url}/v1/completions", headers={"x-tenant": tenant},
                            json={"model": MODEL, "prompt": "Once upon a time",
                                  "max_tokens": max_tokens, "stream": stream}) as response:
        return response.status, dict(response.headers), await response.text()


def _waiting(router: RouterHandle, count: int) -> bool:
    return router.metric("kvroute_admission_waiting") == count


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def test_a_request_refused_after_it_was_counted_says_what_is_left(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """An unknown model's 404 counts against the budget, and its answer said nothing of it;
    what is left is told once the tokens it was charged are refunded (nothing was served)."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), _routing(
        "tenants:\n  acme: {requests_per_minute: 5, tokens_per_minute: 10000}"))
    acme = _openai(router, "acme")
    with pytest.raises(openai.NotFoundError) as refused:
        await acme.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    headers = refused.value.response.headers
    assert headers["x-ratelimit-limit-requests"] == "5"
    assert headers["x-ratelimit-remaining-requests"] == "4"
    with pytest.raises(openai.BadRequestError) as refused:        # too long for any window
        await acme.completions.create(model=MODEL, prompt=[7] * 9000, max_tokens=500)
    headers = refused.value.response.headers
    assert headers["x-ratelimit-remaining-tokens"] == "10000"     # refunded, not 0
    assert headers["x-ratelimit-remaining-requests"] == "3"


async def test_a_spent_budget_is_the_clients_rate_limit_error(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), _routing(
        "tenants:\n  acme: {requests_per_minute: 2}"))
    acme, globex = _openai(router, "acme"), _openai(router, "globex")
    for left in ("1", "0"):           # each answer says what is left of the budget
        raw = await acme.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert raw.headers["x-ratelimit-limit-requests"] == "2"
        assert raw.headers["x-ratelimit-remaining-requests"] == left
    with pytest.raises(openai.RateLimitError) as raised:
        await acme.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raised.value.status_code == 429
    assert raised.value.code == "rate_limit_exceeded"
    assert 55 <= int(raised.value.response.headers["retry-after"]) <= 60
    assert raised.value.response.headers["x-kvroute-worker"] == "none"
    assert raised.value.request_id           # the SDK's, read from x-request-id
    # another tenant is served (without a budget, without the headers), and so are the
    # Messages API's clients until theirs is spent
    raw = await globex.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert "x-ratelimit-limit-requests" not in raw.headers
    claude = anthropic.AsyncAnthropic(base_url=router.url, api_key="unused", max_retries=0,
                                      default_headers={"x-tenant": "acme"})
    with pytest.raises(anthropic.RateLimitError) as refused:
        await claude.messages.create(model=MODEL, max_tokens=2,
                                     messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "rate_limit_error"       # type: ignore[index]
    assert router.metric("kvroute_admission_rejections_total", reason="requests_per_minute",
                         tenant="acme") == 2
    assert router.metric("kvroute_requests_total", model=MODEL, worker="", gpu="",
                         profile="none", status="429") == 2


async def _decisions(session: aiohttp.ClientSession, router: RouterHandle,
                     query: str = "") -> list[dict[str, Any]]:
    async with session.get(f"{router.url}/debug/decisions{query}") as response:
        assert response.status == 200
        data: list[dict[str, Any]] = (await response.json())["data"]
        return data


def _fingerprint(text: str) -> str:
    """How the reload log, kvroute_config_info and the decisions name a routing file."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


async def test_a_refused_request_is_found_by_its_id_beside_the_decisions(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """/debug/decisions?request_id=X said nothing of why X was answered 429: a refusal took
    no decision, and left no entry nor log line. And nothing said which routing file took a
    decision once the file was reloaded."""
    log_path = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("KVROUTE_DECISION_LOG", str(log_path))
    first_file = _routing("tenants:\n  acme: {requests_per_minute: 1}")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), first_file,
                               reload_interval_s=0.05)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2}

    async def complete(session: aiohttp.ClientSession, request_id: str) -> int:
        async with session.post(f"{router.url}/v1/completions", json=body, headers={
                "x-tenant": "acme", "x-request-id": request_id,
                "traceparent": f"00-{trace}-00f067aa0ba902b7-01"}) as response:
            await response.read()
            return response.status

    async with aiohttp.ClientSession() as session:
        assert await complete(session, "served-1") == 200
        assert await complete(session, "refused-1") == 429
        refusals = await _decisions(session, router, "?request_id=refused-1")
        assert len(refusals) == 1
        refusal = refusals[0]
        assert refusal["time"].endswith("Z")
        assert {key: refusal[key] for key in (
            "kind", "request_id", "trace_id", "tenant", "requested_model", "path", "worker",
            "reason_code", "status", "routing_sha256")} == {
            "kind": "refusal", "request_id": "refused-1", "trace_id": trace, "tenant": "acme",
            "requested_model": MODEL, "path": "/v1/completions", "worker": None,
            "reason_code": "requests_per_minute", "status": 429,
            "routing_sha256": _fingerprint(first_file)}
        assert refusal["reason"].startswith("Rate limit reached for tenant `acme`")
        # the trace finds both; a worker finds its decision alone (a refusal has none)
        by_trace = await _decisions(session, router, f"?trace_id={trace}")
        assert [(d["kind"], d["request_id"]) for d in by_trace] == [
            ("refusal", "refused-1"), ("decision", "served-1")]
        by_worker = await _decisions(session, router, "?worker=h100-fast")
        assert [d["request_id"] for d in by_worker] == ["served-1"]
        assert by_worker[0]["routing_sha256"] == _fingerprint(first_file)
        assert router.metric("kvroute_config_info", sha256=_fingerprint(first_file)) == 1

        second_file = _routing("tenants:\n  acme: {requests_per_minute: 2}")
        router.routing_path.write_text(second_file)
        await _until(lambda: router.metric("kvroute_config_reloads_total",
                                           result="success") >= 1, "no reload")
        assert await complete(session, "served-2") == 200
        assert await complete(session, "refused-2") == 429
        # the limit counts each kind apart: the newest refusal and the newest decision
        newest = await _decisions(session, router, "?limit=1")
        assert [(d["request_id"], d["routing_sha256"]) for d in newest] == [
            ("refused-2", _fingerprint(second_file)), ("served-2", _fingerprint(second_file))]
        for _ in range(3):       # a storm of refusals hides no decision from ?limit=
            assert await complete(session, "refused-3") == 429
        newest = await _decisions(session, router, "?limit=2")
        assert [d["request_id"] for d in newest] == [
            "refused-3", "refused-3", "served-2", "served-1"]
        assert [d["request_id"] for d in await _decisions(
            session, router, "?kind=decision&limit=1")] == ["served-2"]
        assert [d["request_id"] for d in await _decisions(
            session, router, f"?kind=refusal&trace_id={trace}")] == [
            "refused-3", "refused-3", "refused-3", "refused-2", "refused-1"]
        async with session.get(f"{router.url}/debug/decisions?kind=decisions") as response:
            assert response.status == 400
            error = (await response.json())["error"]
            assert error["param"] == "kind"
            assert error["message"] == "kind: must be one of decision, refusal."
        assert router.metric("kvroute_config_info", sha256=_fingerprint(first_file)) == 0
        assert router.metric("kvroute_config_info", sha256=_fingerprint(second_file)) == 1
    logged = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(line["request_id"], line["status"]) for line in logged
            if line["kind"] == "outcome"] == [("served-1", 200), ("served-2", 200)]
    lines = [line for line in logged if line["kind"] != "outcome"]
    assert [(line["kind"], line["request_id"], line["routing_sha256"]) for line in lines] == [
        ("decision", "served-1", _fingerprint(first_file)),
        ("refusal", "refused-1", _fingerprint(first_file)),
        ("decision", "served-2", _fingerprint(second_file)),
        ("refusal", "refused-2", _fingerprint(second_file))] + [
        ("refusal", "refused-3", _fingerprint(second_file))] * 3
    assert {key: lines[1][key] for key in ("trace_id", "tenant", "model", "worker",
                                           "reason_code", "status")} == {
        "trace_id": trace, "tenant": "acme", "model": MODEL, "worker": None,
        "reason_code": "requests_per_minute", "status": 429}


async def test_a_tokens_budget_counts_what_the_worker_served(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), _routing(
        "tenants:\n  acme: {tokens_per_minute: 60}"))
    client = _openai(router, "acme")
    answer = await client.completions.create(model=MODEL, prompt="Once upon a time",
                                             max_tokens=20)
    assert answer.usage is not None
    served = answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert router.app[STORE].usage.totals("acme", time.monotonic()) == (1, served)
    streamed = await client.completions.create(model=MODEL, prompt="Once upon a time",
                                               max_tokens=40, stream=True)
    async for _ in streamed:
        pass
    spent = router.app[STORE].usage.totals("acme", time.monotonic())[1]
    assert spent == served + answer.usage.prompt_tokens + 40 > 60     # a stream counts too
    with pytest.raises(openai.RateLimitError) as raised:
        await client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=2)
    assert raised.value.response.headers["x-ratelimit-limit-tokens"] == "60"
    assert f"used {spent}" in str(raised.value)


async def test_waiters_go_on_by_priority_and_a_stream_holds_its_slot_to_the_end(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "max_in_flight: 1\ntenants:\n  gold: {priority: 5}\n  batch: {priority: -1}"))
    finished: list[str] = []
    async with aiohttp.ClientSession() as session:
        async def one(name: str, tenant: str, max_tokens: int = 3, stream: bool = False) -> None:
            status, _, body = await _complete(session, router, tenant, max_tokens, stream)
            assert status == 200, body
            finished.append(name)

        holder = asyncio.create_task(one("holder", "anyone", 40, stream=True))
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 1, "no stream")
        tasks = []
        for name, tenant in [("batch", "batch"), ("plain-1", "x"), ("gold", "gold"),
                             ("plain-2", "y")]:
            tasks.append(asyncio.create_task(one(name, tenant)))
            await _until(partial(_waiting, router, len(tasks)), "not waiting")
        assert finished == []          # the stream still holds the one slot
        await asyncio.gather(holder, *tasks)
    assert finished == ["holder", "gold", "plain-1", "plain-2", "batch"]
    assert router.metric("kvroute_admission_wait_seconds_count") == 5
    assert router.metric("kvroute_admission_in_flight") == 0


async def test_a_tenants_max_in_flight_leaves_the_other_slots_to_the_others(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A tenant's long streams took every slot and a priority-5 tenant waited its timeout
    for one: its ``max_in_flight`` refuses it one more stream (429), and the others pass."""
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "max_in_flight: 3\ntenants:\n  hog: {max_in_flight: 2}\n  vip: {priority: 5}"))
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(_complete(session, router, "hog", 40, stream=True))
                   for _ in range(2)]
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 2, "no streams")
        status, headers, body = await _complete(session, router, "hog")
        assert (status, headers["Retry-After"]) == (429, "1"), body
        assert "limit 2 in flight" in body
        status, _, body = await _complete(session, router, "vip")     # not kept waiting
        assert status == 200, body
        assert [s for s, _, _ in await asyncio.gather(*streams)] == [200, 200]
        assert (await _complete(session, router, "hog"))[0] == 200   # freed as they ended
    assert router.metric("kvroute_admission_rejections_total", reason="tenant_in_flight",
                         tenant="hog") == 1


async def test_a_full_queue_is_503_and_a_client_that_leaves_frees_its_place(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "max_in_flight: 1\nmax_waiting: 1\nwait_timeout_s: 1"))
    async with aiohttp.ClientSession() as session:
        # the holder outlasts the steps below and d's wait; b waits long enough for c to
        # find it waiting on a loaded machine
        holder = asyncio.create_task(_complete(session, router, "a", 300))
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 1, "no holder")
        leaving = asyncio.create_task(_complete(session, router, "b"))
        await _until(lambda: router.metric("kvroute_admission_waiting") == 1, "not waiting")
        status, headers, body = await _complete(session, router, "c")
        assert (status, headers["Retry-After"]) == (503, "1") and "overloaded" in body
        leaving.cancel()                  # the client goes away while it waits
        await _until(lambda: router.metric("kvroute_admission_waiting") == 0, "still queued")
        # ... and is counted, as a client that left (it was counted nowhere)
        await _until(lambda: router.metric("kvroute_requests_total", status="499",
                                           profile="none", model=MODEL) == 1, "not counted")
        status, _, body = await _complete(session, router, "d")     # waits 1 s, then 503
        assert status == 503 and "waited 1 s" in body
        assert (await holder)[0] == 200
        assert (await _complete(session, router, "e"))[0] == 200    # it keeps serving
    assert router.metric("kvroute_admission_rejections_total", reason="queue_full",
                         tenant="c") == 1
    assert router.metric("kvroute_admission_rejections_total", reason="wait_timeout",
                         tenant="d") == 1
    assert router.metric("kvroute_admission_in_flight") == 0
    async with aiohttp.ClientSession() as session:      # each refusal is kept, by reason
        refused = [(d["tenant"], d["reason_code"], d["status"], d["worker"])
                   for d in await _decisions(session, router) if d["kind"] == "refusal"]
    assert refused == [("d", "wait_timeout", 503, None), ("c", "queue_full", 503, None)]


async def test_a_reload_changes_the_budgets(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), _routing(
        "tenants:\n  acme: {requests_per_minute: 1}"), reload_interval_s=0.05)
    async with aiohttp.ClientSession() as session:
        assert (await _complete(session, router, "acme"))[0] == 200
        assert (await _complete(session, router, "acme"))[0] == 429
        router.routing_path.write_text(_routing("tenants:\n  acme: {requests_per_minute: 3}"))
        await _until(lambda: router.metric("kvroute_config_reloads_total",
                                           result="success") >= 1, "no reload")
        assert [(await _complete(session, router, "acme"))[0] for _ in range(3)] == [
            200, 200, 429]
        async with session.get(f"{router.url}/debug/admission") as response:
            status = await response.json()
        assert status["object"] == "admission" and status["configured"]
        assert (status["replicas"], status["shared"]) == (1, False)   # this router's alone
        assert status["budgets"][0] == {
            "tenant": "acme", "priority": 0, "requests_per_minute": 3,
            "tokens_per_minute": None, "requests_used": 3,
            "tokens_used": status["budgets"][0]["tokens_used"], "requests_remaining": 0,
            "tokens_remaining": None}
        router.routing_path.write_text(DEFAULT)        # no section: nothing is limited
        await _until(lambda: router.metric("kvroute_config_reloads_total",
                                           result="success") >= 2, "no reload")
        assert (await _complete(session, router, "acme"))[0] == 200
        async with session.get(f"{router.url}/debug/admission") as response:
            assert (await response.json())["configured"] is False


async def test_a_reload_raising_the_in_flight_limit_lets_the_waiting_through_at_once(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """No new request comes to carry the new limit: the reload itself hands the slots."""
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "max_in_flight: 1\nmax_waiting: 10\nwait_timeout_s: 30"), reload_interval_s=0.05)
    async with aiohttp.ClientSession() as session:
        holder = asyncio.create_task(_complete(session, router, "a", 400, stream=True))
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 1, "no holder")
        waiters = [asyncio.create_task(_complete(session, router, f"w{i}")) for i in range(3)]
        await _until(partial(_waiting, router, 3), "not waiting")
        router.routing_path.write_text(_routing(
            "max_in_flight: 4\nmax_waiting: 10\nwait_timeout_s: 30"))
        await _until(lambda: router.metric("kvroute_admission_waiting") == 0,
                     "the reload let none through")
        assert not holder.done()               # the stream still holds its slot
        assert [(await w)[0] for w in waiters] == [200, 200, 200]
        holder.cancel()


async def test_two_routers_share_a_budget_through_redis(
        emulated_fleet: FleetConfig, make_router: RouterFactory, redis_url: str) -> None:
    routing = _routing("tenants:\n  acme: {requests_per_minute: 3}")
    fleet = subset(emulated_fleet, ["h100-fast"])
    one = await make_router(fleet, routing, redis_url=redis_url, replica_id="one")
    two = await make_router(fleet, routing, redis_url=redis_url, replica_id="two")
    async with aiohttp.ClientSession() as session:
        assert (await _complete(session, one, "acme"))[0] == 200
        assert (await _complete(session, one, "acme"))[0] == 200
        await _until(lambda: two.app[STORE].usage.totals("acme", time.monotonic())[0] == 2,
                     "the other router's requests were not seen")
        assert (await _complete(session, two, "acme"))[0] == 200
        await _until(lambda: one.app[STORE].usage.totals("acme", time.monotonic())[0] == 3,
                     "the other router's requests were not seen")
        status, headers, body = await _complete(session, one, "acme")
        assert status == 429 and "used 3" in body
        # most of its spending came through the other router, a moment ago: it leaves in a
        # minute (Retry-After read 1, the others' totals taken to fade evenly)
        assert int(headers["Retry-After"]) >= 50
        async with session.get(f"{one.url}/debug/admission") as response:
            shared = await response.json()
        assert (shared["replicas"], shared["shared"]) == (2, True)     # both routers' spending


async def test_a_stream_its_client_leaves_keeps_its_prompts_charge(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "tenants:\n  acme: {tokens_per_minute: 100000}"))
    usage = router.app[STORE].usage
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router.url}/v1/completions", headers={"x-tenant": "acme"},
                                json={"model": MODEL, "prompt": "Once upon a time",
                                      "max_tokens": 500, "stream": True}) as response:
            assert response.status == 200
            await response.content.readline()          # the first event, then leave
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 0, "still held")
        charged = usage.totals("acme", time.monotonic())[1]
        assert charged > 0                 # the prompt, as the router counted it
        # a whole answer is charged what its worker reported
        status, _, body = await _complete(session, router, "acme", 3)
        assert status == 200
        served = json.loads(body)["usage"]["total_tokens"]
        assert usage.totals("acme", time.monotonic())[1] == charged + served


async def test_a_stream_left_midway_is_charged_each_event_that_reached_its_client(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """It was charged its prompt alone: reading all but the end of a long answer, then
    closing the connection, spent nothing of a tokens budget for the answer."""
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(   # ~40 events a s
        "tenants:\n  acme: {tokens_per_minute: 100000}"))
    usage = router.app[STORE].usage
    prompt = "Once upon a time"
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{router.url}/v1/completions", headers={"x-tenant": "acme"},
                                json={"model": MODEL, "prompt": prompt, "max_tokens": 1000,
                                      "ignore_eos": True, "stream": True}) as response:
            assert response.status == 200
            read = 0
            while read < 40:
                line = await response.content.readline()
                read += line.startswith(b"data: {")
        await _until(lambda: router.metric("kvroute_admission_in_flight") == 0, "still held")
    charged = usage.totals("acme", time.monotonic())[1]
    assert 40 + 4 <= charged < 500     # the prompt's few tokens, the events read, not all


async def test_long_prompts_sent_at_once_do_not_all_pass_a_tokens_budget(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Each was tokenized in a thread after its admission, so all passed a budget none had
    charged yet (twenty prompts of 4,000 tokens on 20,000: every one served)."""
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]), _routing(
        "tenants:\n  big: {tokens_per_minute: 10000}"))
    usage = router.app[STORE].usage

    async def one(session: aiohttp.ClientSession, i: int) -> int:
        # ~3,600 tokens, 17,600 characters: tokenized in a thread (from 16,384)
        prompt = f"{i} " + "the quick brown fox jumps over the lazy dog " * 400
        async with session.post(f"{router.url}/v1/completions", headers={"x-tenant": "big"},
                                json={"model": MODEL, "prompt": prompt,
                                      "max_tokens": 2}) as response:
            await response.read()
            return response.status

    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(one(session, i) for i in range(8)))
    assert sorted(statuses) == [200] * 3 + [429] * 5     # the third crosses 10,000
    requests, tokens = usage.totals("big", time.monotonic())
    assert requests == 3 and 10_000 < tokens < 12_000
    async with aiohttp.ClientSession() as session:      # refused once counted, or at once
        refused = [(d["tenant"], d["reason_code"], d["status"])
                   for d in await _decisions(session, router) if d["kind"] == "refusal"]
    assert refused == [("big", "tokens_per_minute", 429)] * 5


async def test_a_max_tokens_past_what_the_prompt_leaves_is_charged_as_the_window(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM serves at most what the prompt leaves of the window (8,192 here): a stream asking
    for 10**9 tokens was charged 10**9 while it ran, and the tenant's next request refused.
    (vLLM refuses a max_tokens past the whole window: one of the window itself, after a prompt
    of about 4,000 tokens, is clamped to the rest.)"""
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing(
        "tenants:\n  acme: {tokens_per_minute: 100000}"))
    usage = router.app[STORE].usage
    async with aiohttp.ClientSession() as session, session.post(
            f"{router.url}/v1/completions", headers={"x-tenant": "acme"},
            json={"model": MODEL, "prompt": "word " * 4000, "max_tokens": 8192,
                  "stream": True}) as response:
        assert response.status == 200
        await response.content.readline()          # in flight, its charge made
        assert 8192 <= usage.totals("acme", time.monotonic())[1] < 8192 + 100
        status, _, body = await _complete(session, router, "acme")
        assert status == 200, body


async def test_n_choices_are_charged_as_the_sequences_they_generate(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """``n`` choices (``best_of`` sequences) each take up to ``max_tokens``: a request for
    128 choices was charged one answer while it ran, and ten of them spent six times a
    tenant's tokens budget."""
    cases = ((1, {}), (8, {"n": 8}), (6, {"n": 2, "best_of": 6}))
    router = await make_router(subset(emulated_fleet, ["slow"]), _routing("tenants:\n" + "".join(
        f"  t{i}: {{tokens_per_minute: 100000}}\n" for i in range(len(cases)))))
    usage = router.app[STORE].usage
    async with aiohttp.ClientSession() as session:
        for i, (choices, body) in enumerate(cases):
            async with session.post(
                    f"{router.url}/v1/completions", headers={"x-tenant": f"t{i}"},
                    json={"model": MODEL, "prompt": "Once upon a time", "max_tokens": 500,
                          "stream": True, **body}) as response:
                assert response.status == 200
                await response.content.readline()     # in flight, its charge made
                charged = usage.totals(f"t{i}", time.monotonic())[1]
                assert choices * 500 <= charged < choices * 500 + 20, (body, charged)
