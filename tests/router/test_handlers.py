"""The router's HTTP surface against emulated workers in another process, driven by the
official ``openai`` client: chat, streaming chat, completions, models, errors, debug."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import openai
import orjson
import pytest

from policies.loader import load_routing
from router.handlers import models_payload
from router.keys import METRICS, REGISTRY
from router.loop_lag import LoopStalls
from tests.policies.conftest import make_view
from tests.router.gateway_support import MODEL, REPO_ROOT, RouterFactory, RouterHandle, subset
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
WORKER_IDS = {"h100-fast", "a100-fast"}
MESSAGES = [{"role": "user", "content": "Say hello to the gateway."}]


@pytest.fixture
async def router(emulated_fleet: FleetConfig, make_router: RouterFactory) -> RouterHandle:
    return await make_router(subset(emulated_fleet, sorted(WORKER_IDS)))


def client(router: RouterHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)


def assert_kvroute_headers(headers: object) -> None:
    get = headers.get  # type: ignore[attr-defined]
    assert get("x-kvroute-worker") in WORKER_IDS
    assert get("x-kvroute-profile") == "default"
    assert get("x-kvroute-reason")
    assert get("x-request-id")


async def test_chat_completion(router: RouterHandle) -> None:
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=7)  # type: ignore[arg-type]
    assert_kvroute_headers(raw.headers)
    reply = raw.parse()
    assert reply.object == "chat.completion" and reply.model == MODEL
    assert isinstance(reply.choices[0].message.content, str)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 7
    worker = raw.headers["x-kvroute-worker"]
    gpu = "H100-80GB" if worker == "h100-fast" else "A100-80GB"
    assert router.metric("kvroute_requests_total", model=MODEL, worker=worker, gpu=gpu,
                         profile="default", status="200") == 1.0
    assert router.metric("kvroute_completion_tokens_total", worker=worker, gpu=gpu) == 7.0


async def test_a_large_answers_usage_is_counted_as_a_small_ones(router: RouterHandle) -> None:
    """An answer past the size parsed whole (8 choices of 300 tokens with 20 top logprobs,
    some 3 MB) has its usage read from its end: counted all the same."""
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=300, n=8, logprobs=True, top_logprobs=20,
        extra_body={"ignore_eos": True})  # type: ignore[arg-type]
    assert len(raw.content) > 1_000_000
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.completion_tokens == 2400
    worker = raw.headers["x-kvroute-worker"]
    gpu = "H100-80GB" if worker == "h100-fast" else "A100-80GB"
    assert router.metric("kvroute_completion_tokens_total", worker=worker, gpu=gpu) == 2400.0
    assert router.metric("kvroute_prompt_tokens_total", worker=worker, gpu=gpu) == (
        reply.usage.prompt_tokens)


async def test_streaming_chat_without_usage_strips_the_usage_chunk(
        router: RouterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this test asserts them
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    stream = await client(router).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, stream=True)  # type: ignore[arg-type]
    chunks = [chunk async for chunk in stream]
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and chunks[-1].choices[0].finish_reason == "length"
    # the router still learned the token counts from the chunk it removed
    total = sum(router.metric("kvroute_completion_tokens_total", worker=w, gpu=g)
                for w, g in (("h100-fast", "H100-80GB"), ("a100-fast", "A100-80GB")))
    assert total == 5.0
    ttft = sum(router.metric("kvroute_ttft_seconds_count", worker=w, gpu=g)
               for w, g in (("h100-fast", "H100-80GB"), ("a100-fast", "A100-80GB")))
    assert ttft == 1.0


async def test_streaming_chat_with_usage_keeps_it(router: RouterHandle) -> None:
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True})
    assert_kvroute_headers(raw.headers)
    chunks = [chunk async for chunk in raw.parse()]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6


@pytest.mark.parametrize("prompt", ["Once upon a time", ["first prompt", "second prompt"],
                                    [101, 102, 103, 104]],
                         ids=["string", "list of strings", "token ids"])
async def test_completions(router: RouterHandle, prompt: object) -> None:
    raw = await client(router).completions.with_raw_response.create(
        model=MODEL, prompt=prompt, max_tokens=4)  # type: ignore[arg-type]
    assert_kvroute_headers(raw.headers)
    reply = raw.parse()
    n = len(prompt) if isinstance(prompt, list) and isinstance(prompt[0], str) else 1
    assert len(reply.choices) == n
    assert reply.usage is not None and reply.usage.completion_tokens == 4 * n


async def test_client_request_id_is_kept(router: RouterHandle) -> None:
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=2,  # type: ignore[arg-type]
        extra_headers={"x-request-id": "trace-42"})
    assert raw.headers["x-request-id"] == "trace-42"
    assert raw.parse().id == "chatcmpl-trace-42"       # the worker used it as its request id


async def test_a_body_request_id_names_the_request_as_vllm_does(router: RouterHandle) -> None:
    """vLLM names a chat or completion after its body's ``request_id`` when no
    X-Request-Id came (``chatcmpl-ID``); through kvroute the router's own id replaced it."""
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=2,  # type: ignore[arg-type]
        extra_body={"request_id": "mine-7"})
    assert (raw.headers["x-request-id"], raw.parse().id) == ("mine-7", "chatcmpl-mine-7")
    # spaces at its ends: a header would lose them (the worker would read another id)
    raw = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=2,  # type: ignore[arg-type]
        extra_body={"request_id": " mine "})
    assert raw.headers["x-request-id"].strip() == raw.headers["x-request-id"] != "mine"
    raw = await client(router).completions.with_raw_response.create(
        model=MODEL, prompt="Hi", max_tokens=2, extra_body={"request_id": "mine-8"},
        extra_headers={"x-request-id": "header-8"})      # the header wins, as in vLLM
    assert (raw.headers["x-request-id"], raw.parse().id) == ("header-8", "cmpl-header-8")


async def test_a_body_request_id_in_flight_is_suffixed(emulated_fleet: FleetConfig,
                                                       make_router: RouterFactory) -> None:
    """A second request under a body id in flight gets a suffix, not the worker's 400 (the
    slow worker keeps the first one running for seconds)."""
    router = await make_router(subset(emulated_fleet, ["slow"]))
    stream = await client(router).completions.create(
        model=MODEL, prompt="Hi", max_tokens=500, stream=True, extra_body={"request_id": "twice"})
    first = await stream.__anext__()
    second = await client(router).completions.create(
        model=MODEL, prompt="Hi", max_tokens=2, extra_body={"request_id": "twice"})
    await stream.close()
    assert first.id == "cmpl-twice" and second.id.startswith("cmpl-twice-")


async def test_values_vllm_takes_laxly_are_served(router: RouterHandle) -> None:
    """vLLM takes "2" as max_tokens and "yes" as a stream (pydantic's lax mode); kvroute
    refused both with a 400 the engine would not have given."""
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": "2", "ignore_eos": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 2
        async with session.post(router.url + "/v1/chat/completions",
                                json={**body, "stream": "yes"}) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = [line async for line in resp.content if line.startswith(b"data: ")]
            assert events[-1].strip() == b"data: [DONE]"


async def test_streaming_completion(router: RouterHandle) -> None:
    stream = await client(router).completions.create(model=MODEL, prompt="Hi", max_tokens=3,
                                                     stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks and all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_models_lists_healthy_workers_models(router: RouterHandle) -> None:
    models = await client(router).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].model_extra == {"max_model_len": 8192, "root": MODEL, "parent": None}


async def test_one_model_is_retrieved_by_its_id_slashes_and_all(router: RouterHandle) -> None:
    """``models.retrieve`` answered 404 "no such endpoint"."""
    card = await client(router).models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    assert card.model_extra == {"max_model_len": 8192, "root": MODEL, "parent": None}
    with pytest.raises(openai.NotFoundError) as info:
        await client(router).models.retrieve("no-such/model")
    assert info.value.body == {
        "message": f"The model `no-such/model` does not exist. Valid aliases: {MODEL}.",
        "type": "NotFoundError", "param": "model", "code": 404}


async def test_a_refusal_carries_its_request_id_given_or_generated(
        router: RouterHandle) -> None:
    body = orjson.dumps({"model": "no-such-model", "messages": MESSAGES})
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/chat/completions", data=body,
                                headers={"x-request-id": "ask-why-7"}) as resp:
            assert resp.status == 404
            assert resp.headers["x-request-id"] == "ask-why-7"
        async with session.post(router.url + "/v1/chat/completions", data=body) as resp:
            assert resp.status == 404
            generated = resp.headers["x-request-id"]
        async with session.post(router.url + "/v1/chat/completions", data=body) as resp:
            assert resp.headers["x-request-id"] not in ("", generated)


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/models", 200), ("POST", "/v1/foo", 404), ("GET", "/v1/chat/completions", 405),
    ("GET", "/health", 200)])
async def test_every_answer_echoes_the_clients_request_id(
        router: RouterHandle, method: str, path: str, status: int) -> None:
    """Answers no decision gave an id (the model list, an unknown path, a wrong method) did
    not echo the client's."""
    async with aiohttp.ClientSession() as session:
        async with session.request(method, router.url + path,
                                   headers={"x-request-id": "trace-9"}) as resp:
            assert resp.status == status
            assert resp.headers["x-request-id"] == "trace-9"
        async with session.request(method, router.url + path) as resp:
            assert "x-request-id" not in resp.headers      # none given, none made up


async def test_unknown_model_is_404(router: RouterHandle) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await client(router).chat.completions.create(model="gpt-nope", messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.status_code == 404
    # what a vLLM worker answers (and the emulator, which mirrors it)
    assert info.value.body == {"message": "The model `gpt-nope` does not exist. Valid aliases: "
                                          f"{MODEL}.",
                               "type": "NotFoundError", "param": "model", "code": 404}
    assert info.value.response.headers["x-kvroute-worker"] == "none"


async def test_an_answer_names_the_routing_rule_that_chose_its_model(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A rule sending a tenant's requests to an adapter no worker has loaded: the worker's 404
    "The model `sql-lora` does not exist" reached a client that asked for another model, and
    nothing but /debug/decisions said a rule had chosen it. x-kvroute-rule names it."""
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "rules:\n  - {name: sql, when: {tenant: analysts}, then: {adapter: sql-lora}}\n")
    router = await make_router(subset(emulated_fleet, sorted(WORKER_IDS)), routing)
    analyst = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0,
                                 default_headers={"x-tenant": "analysts"})
    with pytest.raises(openai.NotFoundError) as info:     # the worker's own 404, relayed
        await analyst.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.body["message"].startswith("The model `sql-lora` does not exist")
    assert info.value.response.headers["x-kvroute-rule"] == "sql"
    served = await client(router).chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
    assert "x-kvroute-rule" not in served.headers          # no rule matched: none named


async def test_names_clients_choose_do_not_grow_the_metrics(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Every distinct tenant or unknown model name would be a series kept for the life of
    the process: the first tenants get one, the rest count as (other); unknown models share
    one."""
    router = await make_router(subset(emulated_fleet, sorted(WORKER_IDS)), tenant_labels=3)
    requests = 12
    async with aiohttp.ClientSession() as session:
        for n in range(requests):
            async with session.post(router.url + "/v1/chat/completions", json={
                    "model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                    headers={"x-tenant": f"tenant-{n}"}) as resp:
                assert resp.status == 200
            async with session.post(router.url + "/v1/chat/completions", json={
                    "model": f"invented-{n}", "messages": MESSAGES}) as resp:
                assert resp.status == 404
        async with session.get(router.url + "/metrics") as resp:
            text = await resp.text()
    cost_series = [line for line in text.splitlines()
                   if line.startswith("kvroute_cost_dollars_total{")]
    tenants = {line.split('tenant="')[1].split('"')[0] for line in cost_series}
    assert tenants == {"tenant-0", "tenant-1", "tenant-2", "(other)"}
    assert "invented-" not in text
    assert router.metric("kvroute_requests_total", model="(unknown)", worker="", gpu="",
                         profile="default", status="404") == requests
    assert router.metric("kvroute_label_values_folded_total", label="tenant") == requests - 3
    spent = sum(float(line.rsplit(" ", 1)[1]) for line in cost_series)
    other = sum(float(line.rsplit(" ", 1)[1]) for line in cost_series if "(other)" in line)
    assert 0 < other < spent      # nothing lost: the folded tenants' cost is still counted


async def test_the_tenants_the_operator_names_keep_their_own_series(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The first tenants seen took every label: a client naming tenants of its own before the
    admission section's came had their cost counted as (other)."""
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "admission:\n  tenants:\n    acme: {priority: 1}\n")
    router = await make_router(subset(emulated_fleet, sorted(WORKER_IDS)), routing,
                               tenant_labels=2, reload_interval_s=0.05)
    async with aiohttp.ClientSession() as session:
        for tenant in ("squat-0", "squat-1", "squat-2", "acme"):
            async with session.post(router.url + "/v1/chat/completions", json={
                    "model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                    headers={"x-tenant": tenant}) as resp:
                assert resp.status == 200
    assert router.metric("kvroute_cost_dollars_total", tenant="acme") > 0
    assert router.metric("kvroute_cost_dollars_total", tenant="(other)") > 0     # squat-1's
    # a reloaded file naming another tenant gives it a place too; acme keeps its series
    router.routing_path.write_text(routing.replace("acme:", "beta:"))
    for _ in range(200):
        if router.metric("kvroute_config_reloads_total", result="success") >= 1:
            break
        await asyncio.sleep(0.05)
    tenants = router.app[METRICS].tenants
    assert [tenants.label(t, count=False) for t in ("beta", "acme", "squat-1")] == [
        "beta", "acme", "(other)"]


async def test_one_request_id_sent_at_once_by_several_requests(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """Each request in flight gets its own id (the first keeps the client's: a worker keying
    its requests by id alone refuses a second), and the id is the client's again once they
    are done. The slow worker keeps the six running together (on a fast one, under load, one
    could end before the next arrived and hand its id on)."""
    router = await make_router(subset(emulated_fleet, ["slow"]))
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 64}
    headers = {"x-request-id": "retry-storm"}

    async def send(session: aiohttp.ClientSession) -> tuple[int, str]:
        async with session.post(router.url + "/v1/chat/completions", json=body,
                                headers=headers) as resp:
            await resp.read()
            return resp.status, resp.headers["x-request-id"]

    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(send(session) for _ in range(6)))
        assert [status for status, _ in answers] == [200] * 6
        echoed = [request_id for _, request_id in answers]
        assert len(set(echoed)) == 6 and all(e.startswith("retry-storm") for e in echoed)
        assert "retry-storm" in echoed
        assert await send(session) == (200, "retry-storm")
        async with session.get(router.url + "/debug/decisions?limit=7") as resp:
            logged = {d["request_id"] for d in (await resp.json())["data"]}
    assert logged == set(echoed)


async def test_a_lone_surrogate_is_routed_and_the_worker_answers(
        router: RouterHandle, emulated_fleet: FleetConfig) -> None:
    """Valid JSON (an escaped lone surrogate) that vLLM's parser takes is not refused by the
    router: it is routed, and the client gets what the worker answers the same body."""
    body = (b'{"model": "' + MODEL.encode() + b'", "max_tokens": 2, '
            b'"messages": [{"role": "user", "content": "hello \\ud800 there"}]}')
    assert json.loads(body)["messages"][0]["content"] == "hello \ud800 there"
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/chat/completions", data=body,
                                headers=headers) as resp:
            worker = resp.headers["x-kvroute-worker"]
            routed = (resp.status, (await resp.json()).get("error"))
        url = next(w.info.url for w in emulated_fleet.workers if w.info.id == worker)
        async with session.post(url + "/v1/chat/completions", data=body,
                                headers=headers) as resp:
            direct = (resp.status, (await resp.json()).get("error"))
    assert routed == direct


async def test_header_bytes_that_are_not_utf8_are_served(router: RouterHandle) -> None:
    """A request id and an API key with bytes that are not UTF-8 (HTTP allows them): served;
    the id, which the answer echoes and the logs keep, is replaced by a generated one."""
    body = orjson.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": 2})
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvroute\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                 b"x-request-id: id-\xff\xfe\r\nAuthorization: Bearer k\xff\r\n"
                 b"Connection: close\r\n\r\n%s" % (len(body), body))
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    head = answer.partition(b"\r\n\r\n")[0]
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK", answer[:300]
    [echoed] = [line for line in lines if line.lower().startswith(b"x-request-id:")]
    assert b"\xff" not in echoed and echoed.split(b": ", 1)[1]


async def test_negative_max_tokens_is_400(router: RouterHandle) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).chat.completions.create(model=MODEL, messages=MESSAGES,  # type: ignore[arg-type]
                                                     max_tokens=-3)
    assert info.value.body == {"message": "max_tokens: must be at least 1, got -3.",
                               "type": "invalid_request_error", "param": "max_tokens",
                               "code": "invalid_request"}


async def test_request_longer_than_the_context_window_is_400(router: RouterHandle) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt=[7] * 8300, max_tokens=4)
    assert info.value.body == {
        "message": "This model's maximum context length is 8192 tokens. However, your prompt "
                   "contains 8300 input tokens, which exceeds this limit even without any output "
                   "tokens. Please reduce the length of the input prompt. (parameter="
                   "input_tokens, value=8300)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}
    # a text: vLLM tokenizes one token past the window at most, and says so
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt="word " * 8300,
                                                max_tokens=4)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"] == (
        "This model's maximum context length is 8192 tokens. However, your prompt contains "
        "at least 8193 input tokens, which exceeds this limit even without any output tokens. "
        "Please reduce the length of the input prompt. (parameter=input_tokens, value=8193)")
    # the prompt fits and max_tokens does not: served, max_tokens clamped, as vLLM does
    reply = await client(router).completions.create(model=MODEL, prompt=[7] * 8000,
                                                    max_tokens=500)
    assert reply.usage is not None and reply.usage.prompt_tokens == 8000
    assert 1 <= reply.usage.completion_tokens <= 192
    # token ids one past the window: "at least", as vLLM words its tokenizing bound
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt=[7] * 8193, max_tokens=4)
    assert isinstance(info.value.body, dict)
    assert "contains at least 8193 input tokens" in info.value.body["message"]
    # a max_tokens past the window is refused before the prompt is read, as vLLM does (by
    # the engine: the router's count, cl100k with no tokenizer of the model configured, is
    # an estimate of the engine's; token ids are counted exactly, by the router)
    for prompt, refused_by_router in (("word " * 8300, False), ([7] * 8300, True)):
        with pytest.raises(openai.BadRequestError) as info:
            await client(router).completions.create(model=MODEL, prompt=prompt,
                                                    max_tokens=9000)
        assert (info.value.response.headers["x-kvroute-worker"] == "none") is refused_by_router
        assert info.value.body == {
            "message": "max_tokens=9000 cannot be greater than max_model_len=8192. Please "
                       "request fewer output tokens. (parameter=max_tokens, value=9000)",
            "type": "BadRequestError", "param": "max_tokens", "code": 400}
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "word " * 8300}],
            max_completion_tokens=9000)
    assert info.value.body == {
        "message": "max_completion_tokens=9000 cannot be greater than max_model_len=8192. "
                   "Please request fewer output tokens. (parameter=max_completion_tokens, "
                   "value=9000)",
        "type": "BadRequestError", "param": "max_completion_tokens", "code": 400}
    # a max_tokens past the whole window: the engine's own 400, forwarded
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt=[7] * 10, max_tokens=9000)
    assert info.value.response.headers["x-kvroute-worker"] != "none"
    assert info.value.body == {
        "message": "max_tokens=9000 cannot be greater than max_model_len=8192. Please request "
                   "fewer output tokens. (parameter=max_tokens, value=9000)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}
    # a text too long for the window by its length alone (a token holds at most 128
    # characters) is refused without tokenizing it: its count is a lower bound
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt="a" * (8192 * 128 + 1),
                                                max_tokens=4)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith(
        "This model's maximum context length is 8192 tokens. However, your prompt contains "
        "at least 8193 input tokens")


async def test_each_prompt_of_a_batch_must_fit_the_window_not_their_sum(
        router: RouterHandle) -> None:
    """Two prompts of 5,000 tokens were refused as "10000 input tokens" against a window of
    8,192: vLLM serves each prompt of a batch on its own."""
    reply = await client(router).completions.create(model=MODEL, prompt=[[7] * 5000, [8] * 5000],
                                                    max_tokens=4)
    assert reply.usage is not None and reply.usage.prompt_tokens == 10_000
    assert sorted(choice.index for choice in reply.choices) == [0, 1]
    texts = ["word " * 3000, "other " * 3000, "third " * 3000]
    reply = await client(router).completions.create(model=MODEL, prompt=texts, max_tokens=4)
    assert reply.usage is not None and reply.usage.prompt_tokens > 8192
    with pytest.raises(openai.BadRequestError) as info:      # one prompt too long: refused
        await client(router).completions.create(model=MODEL, prompt=[[7] * 10, [7] * 8300],
                                                max_tokens=4)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith(
        "This model's maximum context length is 8192 tokens. However, your prompt contains "
        "8300 input tokens")


async def test_a_prompt_filling_the_window_gets_vllms_words(router: RouterHandle) -> None:
    """It was told its 8,192 tokens "exceed" the window of 8,192; vLLM clamps max_tokens to
    the room left, 0, which its sampling parameters refuse."""
    with pytest.raises(openai.BadRequestError) as info:
        await client(router).completions.create(model=MODEL, prompt=[7] * 8192, max_tokens=4)
    assert info.value.response.headers["x-kvroute-worker"] == "none"
    assert info.value.body == {
        "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}


async def test_the_window_quoted_is_the_engines_own(make_router: RouterFactory,
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    """The fleet file says 8,192 and the engine serves 2,048: the filter read the engine's
    window, and the 400 quoted the fleet file's ("8192 tokens. However, your prompt
    contains 2382"), contradicting itself."""
    import yaml

    from tests.router.gateway_support import FAST, fleet_data
    from workers.emulator.process import EmulatorFleet
    from workers.fleet import load_fleet
    from workers.ports import free_port

    path = tmp_path_factory.mktemp("short") / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_data({"short": ("h100", {**FAST,
                                                                  "max_model_len": 2048})},
                                              {"short": free_port()})))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        router = await make_router(fleet)
        for _ in range(100):          # the engine's window, from its /v1/models
            if router.app[REGISTRY].views(0.0)[0].max_model_len == 2048:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(openai.BadRequestError) as info:
            await client(router).completions.create(model=MODEL, prompt=[7] * 3000,
                                                    max_tokens=4)
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"].startswith(
        "This model's maximum context length is 2048 tokens. However, your prompt contains "
        "3000 input tokens")


async def test_a_prompt_only_a_down_worker_holds_is_503_not_too_long(
        make_router: RouterFactory) -> None:
    """While the model's only long-window worker was down, a prompt it serves was answered
    vLLM's 400 for the window of the worker left (2,048): no client sends a 400 again, and
    some cut their prompt to the window it names. The model's window holds it: 503. A
    worker never up (its window only the fleet file's) holds no prompt back from its 400."""
    from tests.router.gateway_support import url_fleet
    from workers.emulator.process import EmulatorProcess
    from workers.ports import free_port

    async def seen(router: RouterHandle, wanted: dict[str, tuple[bool, int]]) -> None:
        for _ in range(300):
            windows = {view.id: (view.healthy, view.max_model_len)
                       for view in router.app[REGISTRY].views(time.monotonic())}
            if all(windows[worker] == state for worker, state in wanted.items()):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{windows} never became {wanted}")

    with EmulatorProcess(gpu="h100", time_scale=0.0, served_model_names=[MODEL],
                         emulate={"max_model_len": 2048}) as short:
        long = EmulatorProcess(gpu="h100", time_scale=0.0, served_model_names=[MODEL]).start()
        try:
            router = await make_router(url_fleet({"short": short.url, "long": long.url}))
            await seen(router, {"short": (True, 2048), "long": (True, 8192)})
        finally:
            long.stop()                                                   # "long" goes down
        await seen(router, {"short": (True, 2048), "long": (False, 8192)})
        with pytest.raises(openai.InternalServerError) as info:
            await client(router).completions.create(model=MODEL, prompt=[7] * 3000,
                                                    max_tokens=4)
        assert info.value.status_code == 503
        assert info.value.response.headers["Retry-After"] == "1"
        assert isinstance(info.value.body, dict)
        assert info.value.body["code"] == "no_worker_available", info.value.body
        # a text, whose count is the router's estimate (no tokenizer of the model): the
        # largest window up was the short one's, whose engine refused it for good
        with pytest.raises(openai.InternalServerError) as info:
            await client(router).completions.create(model=MODEL, prompt="word " * 3000,
                                                    max_tokens=4)
        assert info.value.status_code == 503
        assert info.value.response.headers["x-kvroute-worker"] == "none"
        assert isinstance(info.value.body, dict)
        assert "only long, out for now, holds it" in info.value.body["message"]
        # past every window of the model, up or down: the client's to shorten
        with pytest.raises(openai.BadRequestError) as too_long:
            await client(router).completions.create(model=MODEL, prompt=[7] * 9000,
                                                    max_tokens=4)
        assert isinstance(too_long.value.body, dict)
        assert too_long.value.body["message"].startswith(
            "This model's maximum context length is 8192 tokens. However, your prompt "
            "contains 9000 input tokens"), too_long.value.body
        # a worker never up: its window is only the fleet file's, and it may never come
        never = await make_router(url_fleet({"short": short.url,
                                             "never": f"http://127.0.0.1:{free_port()}"}))
        await seen(never, {"short": (True, 2048), "never": (False, 8192)})
        with pytest.raises(openai.BadRequestError) as refused:
            await client(never).completions.create(model=MODEL, prompt=[7] * 3000,
                                                   max_tokens=4)
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["message"].startswith(
            "This model's maximum context length is 2048 tokens."), refused.value.body


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/v1/chat/completions", b"{\"model\": ", 400, "Request body is not valid JSON"),
    ("/v1/chat/completions", b"\xc3\x28\xa0\xa1", 400, "Request body is not valid UTF-8."),
    ("/v1/chat/completions", b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000
     + b"}", 400, "Request body is not valid JSON: depth limit exceeded"),
    ("/v1/chat/completions", b'{"model": "' + MODEL.encode() + b'", "stream": true, '
     b'"messages": [{"role": "user", "content": "hi"}], "x": ' + b'{"a": ' * 1000 + b"1"
     + b"}" * 1000 + b"}", 400, "Request body is nested too deeply to forward"),
    ("/v1/chat/completions", orjson.dumps({"model": MODEL}), 400,
     "Missing required parameter: 'messages'."),
    ("/v1/chat/completions", orjson.dumps({"model": MODEL, "messages": MESSAGES,
                                           "stream": "maybe"}), 400, "stream: must be a boolean."),
    ("/v1/completions", orjson.dumps({"model": MODEL, "prompt": {"a": 1}}), 400,
     "prompt: must be a string"),
    ("/v1/chat/completions", b"x" * (50 * 1024 * 1024), 413, "Request body too large"),
    # 8 MiB of empty objects: 2.8 million objects, 200 MB of the router's memory parsed
    ("/v1/completions", b'{"model": "' + MODEL.encode() + b'", "prompt": "hi", "x": ['
     + b"{}," * ((8 << 20) // 3) + b"{}]}", 413, "Request body too large: it holds more than "
     "the router's limit of 2,000,000 JSON values"),
    ("/v1/audio/speech", b"{}", 404, "Not found: no such endpoint"),
], ids=["malformed json", "non-utf8", "nested 100,000 deep", "too deep to re-encode",
        "missing messages", "wrong type",
        "bad prompt", "50 MB body", "8 MiB of tiny items", "unknown path"])
async def test_bad_requests_get_openai_errors(router: RouterHandle, path: str, body: bytes,
                                              status: int, message: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            router.url + path, data=body,
            headers={"Content-Type": "application/json", "x-request-id": "bad-1"}) as resp:
        assert resp.status == status
        error = (await resp.json())["error"]
        assert error["message"].startswith(message)
        assert set(error) == {"message", "type", "param", "code"}
        # a request the router took names itself in its refusal, a body over the size limit
        # too (an unknown path is refused without one)
        if status in (400, 413):
            assert resp.headers["x-request-id"] == "bad-1"
    # the router keeps serving
    reply = await client(router).chat.completions.create(model=MODEL, messages=MESSAGES,  # type: ignore[arg-type]
                                                         max_tokens=2)
    assert reply.usage is not None and reply.usage.completion_tokens == 2


async def test_a_body_too_deep_to_re_encode_is_refused_before_any_worker_counts_it(
        router: RouterHandle) -> None:
    """The stream's body must be re-encoded (usage asked for) and cannot be: refused before
    the attempt, so no worker's request series, in-flight count or decision guard sees it."""
    body = (b'{"model": "' + MODEL.encode() + b'", "stream": true, "messages": [{"role": '
            b'"user", "content": "hi"}], "x": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000 + b"}")
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/chat/completions", data=body,
            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 400
    counted = [sample for family in router.app[METRICS].registry.collect()
               if family.name == "kvroute_requests" for sample in family.samples
               if sample.name == "kvroute_requests_total" and sample.labels["worker"]]
    assert counted == []


async def test_a_bad_body_is_counted_under_no_model(router: RouterHandle) -> None:
    """Bad bodies were answered 400 and counted nowhere: a client sending them was invisible
    on the dashboards, though an unknown model's 404 was counted."""
    from router.metrics import UNKNOWN_MODEL

    labels = {"model": UNKNOWN_MODEL, "worker": "", "gpu": "", "profile": "none",
              "status": "400"}
    before = router.metric("kvroute_requests_total", **labels)
    async with aiohttp.ClientSession() as session:
        for body in (b"{", orjson.dumps({"model": MODEL, "messages": MESSAGES,
                                         "max_tokens": -1})):
            async with session.post(router.url + "/v1/chat/completions", data=body,
                                    headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 400
    assert router.metric("kvroute_requests_total", **labels) == before + 2
    too_large = {**labels, "status": "413"}      # a body over the size limit: counted too
    before = router.metric("kvroute_requests_total", **too_large)
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/chat/completions", data=b"x" * (50 * 1024 * 1024),
            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
    assert router.metric("kvroute_requests_total", **too_large) == before + 1


async def test_the_decisions_of_one_request_are_found_by_its_id(router: RouterHandle) -> None:
    """``?request_id=`` was ignored (the newest decisions answered, whichever they were);
    an unknown parameter is refused now."""
    went: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        for request_id in ("find-me", "other-1", "other-2"):
            async with session.post(router.url + "/v1/chat/completions", json={
                    "model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                    headers={"X-Request-Id": request_id}) as resp:
                assert resp.status == 200
                went[request_id] = resp.headers["x-kvroute-worker"]
        worker = went["find-me"]
        async with session.get(router.url + "/debug/decisions?request_id=find-me") as resp:
            [found] = (await resp.json())["data"]
        assert found["request_id"] == "find-me" and found["worker"] == worker
        # how it ended, beside why it went there (nothing told how long a request took)
        ended = found["outcome"]
        assert ended["status"] == 200 and ended["completion_tokens"] == 2
        assert 0 < ended["e2e_s"] <= ended["client_s"] and ended["prompt_tokens"] > 0
        async with session.get(router.url + f"/debug/decisions?worker={worker}&limit=1") as resp:
            [newest] = (await resp.json())["data"]
        assert newest["worker"] == worker
        async with session.get(router.url + "/debug/decisions?request_id=gone") as resp:
            assert (await resp.json())["data"] == []
        async with session.get(router.url + "/debug/decisions?requestid=find-me") as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "requestid"


async def test_health_metrics_and_debug_endpoints(router: RouterHandle) -> None:
    await client(router).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        async with session.get(router.url + "/health") as resp:
            assert resp.status == 200
            assert await resp.json() == {"status": "ok", "healthy_workers": 2, "workers": 2,
                                         "state_store_degraded": False}
        for method in ("GET", "POST"):        # vLLM's /ping (SageMaker's): no body
            async with session.request(method, router.url + "/ping") as resp:
                assert resp.status == 200 and await resp.read() == b""
        async with session.get(router.url + "/metrics") as resp:
            text = await resp.text()
            for name in ("kvroute_requests_total", "kvroute_decision_duration_seconds_bucket",
                         "kvroute_decisions_total", "kvroute_worker_up",
                         "kvroute_worker_kv_usage", "kvroute_worker_requests",
                         "kvroute_estimate_compared_requests_total"):
                assert f"\n{name}{{" in text, name
        async with session.get(router.url + "/debug/decisions?limit=1") as resp:
            [decision] = (await resp.json())["data"]
            assert decision["worker"] in WORKER_IDS and decision["profile"] == "default"
            assert {c["worker"] for c in decision["candidates"]} == WORKER_IDS
            default = load_routing(REPO_ROOT / "config/routing.yaml").profiles["default"]
            scorer_names = {scorer.name for scorer in default.scorers}
            assert all(set(c["scores"]) == scorer_names for c in decision["candidates"])
            assert decision["reason"] and decision["reason_code"]
        for bad in ("x", "%C2%B2", "-1", "1.5"):      # "²" is a digit to str.isdigit
            async with session.get(router.url + f"/debug/decisions?limit={bad}") as resp:
                assert resp.status == 400, bad
                assert (await resp.json())["error"]["param"] == "limit"
        async with session.get(router.url + "/debug/decisions") as resp:
            kept = len((await resp.json())["data"])
        for many, expected in (("9" * 5000, kept), ("0" * 5000 + "1", 1)):   # int() refuses
            async with session.get(router.url + f"/debug/decisions?limit={many}") as resp:
                assert resp.status == 200        # ... past 4,300 digits
                assert len((await resp.json())["data"]) == expected
        async with session.get(router.url + "/debug/fleet") as resp:
            fleet = (await resp.json())["data"]
            assert {w["id"] for w in fleet} == WORKER_IDS
            assert all(w["healthy"] and w["num_gpu_blocks"] > 0 and w["max_model_len"] == 8192
                       for w in fleet)


def test_an_adapters_card_names_its_base_model_as_parent() -> None:
    views = [make_view("w0", lora_adapters=("sql-lora", "x"), max_model_len=4096,
                       lora_paths=(("sql-lora", "/adapters/sql"),)),
             make_view("w1", max_model_len=8192),
             make_view("w2", models=("other",), lora_adapters=("x",), healthy=False)]
    cards = {card["id"]: card for card in models_payload(views, 7)["data"]}
    assert sorted(cards) == [MODEL, "sql-lora", "x"]      # an unhealthy worker's are not listed
    assert (cards[MODEL]["root"], cards[MODEL]["parent"], cards[MODEL]["max_model_len"]) == (
        MODEL, None, 8192)
    assert (cards["sql-lora"]["root"], cards["sql-lora"]["parent"],
            cards["sql-lora"]["max_model_len"]) == ("/adapters/sql", MODEL, 4096)
    assert cards["x"]["root"] == "x"          # no path known: its name


def test_an_alias_is_listed_as_its_target_when_that_is_served() -> None:
    views = [make_view("w0", max_model_len=4096), make_view("w1", models=("down",),
                                                            healthy=False)]
    cards = {card["id"]: card for card in models_payload(
        views, 7, {"gpt-4o-mini": MODEL, "gone": "down", MODEL: "down"})["data"]}
    assert sorted(cards) == ["gpt-4o-mini", MODEL]      # nothing serves "down"; no duplicate
    assert (cards["gpt-4o-mini"]["root"], cards["gpt-4o-mini"]["parent"],
            cards["gpt-4o-mini"]["max_model_len"]) == (MODEL, None, 4096)


def test_an_adapters_alias_reads_as_that_adapter() -> None:
    """An alias of an adapter had ``parent: null``: a client telling adapters apart by their
    parent took it for a base model."""
    views = [make_view("w0", lora_adapters=("sql-lora",), max_model_len=4096,
                       lora_paths=(("sql-lora", "/adapters/sql"),))]
    cards = {card["id"]: card for card in models_payload(views, 7, {"sql": "sql-lora"})["data"]}
    assert (cards["sql"]["root"], cards["sql"]["parent"]) == ("/adapters/sql", MODEL)
    assert (cards["sql"]["root"], cards["sql"]["parent"]) == (
        cards["sql-lora"]["root"], cards["sql-lora"]["parent"])


async def test_a_rules_alias_is_listed_retrieved_and_served(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """An alias (a rule sending a public name to a served model) was served but missing from
    ``/v1/models``, and ``models.retrieve`` said 404 for a name chat accepted."""
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + f"rules:\n  - {{when: {{model: gpt-4o-mini}}, then: {{model: {MODEL}}}}}\n")
    router = await make_router(subset(emulated_fleet, sorted(WORKER_IDS)), routing)
    openai_client = client(router)
    assert {m.id for m in (await openai_client.models.list()).data} == {MODEL, "gpt-4o-mini"}
    card = await openai_client.models.retrieve("gpt-4o-mini")
    assert (card.id, card.root) == ("gpt-4o-mini", MODEL)       # type: ignore[attr-defined]
    reply = await openai_client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES,
                                                        max_tokens=3)
    assert reply.choices[0].message.content


async def test_a_session_named_in_the_body_keeps_its_worker(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vllm-router's clients name their session in the body (``session_params.session_id``):
    kvroute read headers and ``user`` only, and spread such a session by load."""
    routing = ("profiles:\n  default:\n    filters: [{type: model}, {type: healthy}]\n"
               "    scorers: [{type: production-stack-session, params: {session_key: "
               "[X-User-ID, body.session_params.session_id]}}]\n"
               "    picker: {type: max-score}\ndefault_profile: default\n")
    router = await make_router(subset(emulated_fleet, sorted(WORKER_IDS)), routing)
    workers: dict[str, set[str]] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(8):
            name = f"chat-{i % 2}"
            body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2,
                    "session_params": {"session_id": name}}
            async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                workers.setdefault(name, set()).add(resp.headers["x-kvroute-worker"])
    assert all(len(chosen) == 1 for chosen in workers.values()), workers


async def test_an_echoed_completion_of_no_tokens_scores_the_prompt(router: RouterHandle) -> None:
    """``echo`` with ``max_tokens: 0``: the prompt's own logprobs and nothing generated, as
    vLLM serves it (evaluation tools score prompts so); the router refused it with a 400."""
    prompt = "Once upon a time"
    reply = await client(router).completions.create(model=MODEL, prompt=prompt, max_tokens=0,
                                                    echo=True, logprobs=1)
    [choice] = reply.choices
    assert choice.text == prompt and choice.finish_reason == "length"
    assert choice.logprobs is not None and choice.logprobs.token_logprobs is not None
    assert choice.logprobs.token_logprobs[0] is None
    assert "".join(choice.logprobs.tokens or []) == prompt
    assert reply.usage is not None and reply.usage.completion_tokens == 1
    stream = await client(router).completions.create(model=MODEL, prompt=prompt, max_tokens=0,
                                                     echo=True, stream=True)
    texts = [chunk.choices[0].text async for chunk in stream if chunk.choices]
    assert "".join(texts) == prompt
    with pytest.raises(openai.BadRequestError):         # no echo: nothing to answer
        await client(router).completions.create(model=MODEL, prompt=prompt, max_tokens=0)
