"""The director's own bookkeeping of a dispatched request, over real sockets against emulated
workers: the decode tokens it counts in flight are the ones the worker will serve, the usage a
worker reports teaches the policy how long answers are, and ``/metrics`` says how far the
predictions were from the answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from router.keys import REGISTRY
from router.request_ids import HELD_AFTER_CUT_S
from tests.conftest import REPO_ROOT
from tests.router.gateway_support import (
    MODEL,
    FrontedWorker,
    IdsRunningLate,
    PostHandler,
    RouterFactory,
    RouterHandle,
    fleet_data,
    fleet_entry,
    scripted_router,
    subset,
    url_fleet,
)
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration


async def test_in_flight_tokens_count_max_tokens_as_the_window_clamps_them(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["slow"]))     # window 8,192 tokens
    # vLLM refuses a max_tokens past the whole window; this one is clamped to the ~4,190
    # tokens the prompt leaves (counted whole, 12,190 in flight)
    body = {"model": MODEL, "prompt": "word " * 4000, "max_tokens": 8192, "stream": True}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(router.url + "/v1/completions", json=body)
        assert resp.status == 200
        await resp.content.readuntil(b"\n\n")            # streaming: prefill done, decoding
        deadline = time.monotonic() + 5.0
        while True:
            async with session.get(router.url + "/debug/fleet") as fleet_resp:
                [worker] = (await fleet_resp.json())["data"]
            if worker["inflight_requests"] == 1:
                break
            assert time.monotonic() < deadline, "the request never showed as in flight"
            await asyncio.sleep(0.05)
        resp.close()
    assert 0 < worker["inflight_tokens"] <= 8_192


async def _json_stream_asked(request: web.Request, body: bytes) -> bool:
    return bool(orjson.loads(body).get("stream"))


async def test_a_clients_id_sent_again_just_after_it_left_its_stream_is_served(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A client with a fixed ``x-request-id`` leaves a stream (a "stop" pressed) and sends
    the next question at once: its worker still runs the first request a moment, and its id
    with it; the second goes with a suffix, not to the worker's 400 "already running". A
    request that ended whole frees its id at once, and a cut one once the hold is over."""
    chunk = {"id": "c", "object": "text_completion", "model": MODEL,
             "choices": [{"index": 0, "text": "x", "finish_reason": None}]}
    worker = IdsRunningLate(_json_stream_asked, chunk, {**chunk, "usage": {
        "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
    headers = {"x-request-id": "job-42"}
    async with scripted_router(emulated_fleet, make_router, worker.answer) as router, \
            aiohttp.ClientSession() as session:
        for turn in range(3):
            stream = await session.post(router.url + "/v1/completions", headers=headers, json={
                "model": MODEL, "prompt": f"A long story {turn}", "max_tokens": 500,
                "stream": True})
            assert stream.status == 200
            for _ in range(3):
                await stream.content.readuntil(b"\n\n")
            stream.close()
            await asyncio.sleep(0.05)              # the router has seen its client leave
            async with session.post(router.url + "/v1/completions", headers=headers, json={
                    "model": MODEL, "prompt": f"Next {turn}", "max_tokens": 3}) as nxt:
                assert nxt.status == 200, await nxt.text()
                assert nxt.headers["x-request-id"].startswith("job-42-")
            await asyncio.sleep(HELD_AFTER_CUT_S)     # the hold, from when the router saw
            ids = []                                  # the cut (a loaded one a moment late)
            for _ in range(20):
                async with session.post(router.url + "/v1/completions", headers=headers, json={
                        "model": MODEL, "prompt": f"Later {turn}", "max_tokens": 3}) as later:
                    assert later.status == 200
                    ids.append(later.headers["x-request-id"])
                if ids[-1] == "job-42":
                    break
                await asyncio.sleep(0.1)
            assert ids[-1] == "job-42" and len(ids) <= 1 + 1.0 / 0.1, ids
            # an answer that ended whole frees its id at once
            async with session.post(router.url + "/v1/completions", headers=headers, json={
                    "model": MODEL, "prompt": f"Later again {turn}", "max_tokens": 3}) as later:
                assert later.status == 200 and later.headers["x-request-id"] == "job-42"
    assert worker.refused == 0


def one_worker_fleet(tmp_path_factory: pytest.TempPathFactory, worker: str,
                     answer_tokens: int) -> Iterator[FleetConfig]:
    """One emulated H100 ``worker`` whose answers end after ``answer_tokens`` tokens (or
    ``min_tokens``, if more), whatever max_tokens allows; stopped when the fixture ends."""
    path = tmp_path_factory.mktemp(worker) / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_data(
        {worker: ("h100", {"time_scale": 0.01,
                           "output_len": {"dist": "fixed", "value": answer_tokens}})},
        {worker: free_port()})))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        yield fleet


@pytest.fixture(scope="module")
def short_answers_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """One emulated worker whose answers end after 12 tokens, whatever max_tokens allows."""
    yield from one_worker_fleet(tmp_path_factory, "short", 12)


async def test_the_output_length_is_learnt_from_the_usage_workers_report(
        short_answers_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(short_answers_fleet)     # the default profile
    body = {"model": MODEL, "prompt": "Name a prime number.", "max_tokens": 1000}

    async def last_decision(session: aiohttp.ClientSession) -> dict[str, Any]:
        async with session.get(router.url + "/debug/decisions?limit=1") as resp:
            [decision] = (await resp.json())["data"]
        return decision

    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 12
        # nothing has finished yet when the first is routed: max_tokens stands
        assert "predicted_output_tokens" not in (await last_decision(session))["attributes"]
        # 20 finished make the producer's min_samples; one more, in case the last answer
        # reached this client before the router's own bookkeeping of it ran
        for _ in range(20):
            async with session.post(router.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
        async with session.post(router.url + "/v1/completions",
                                json={**body, "max_tokens": 500}) as resp:
            assert resp.status == 200
        attributes = (await last_decision(session))["attributes"]
        ratios = await prediction_ratios(router)
    # each used 12 of its 1,000 tokens: 6 of this one's 500
    assert attributes["predicted_output_tokens"] == 6
    # that one generated 12 of the 6 predicted: a ratio of 2.0, in the bucket le=2 and not
    # in le=1.25; the capped-at-1,000 ones the producer predicted for (12 of 12) are all 1.0
    exact = ratios["1.25"]
    assert ratios["2.0"] == exact + 1 == ratios["count"]
    assert ratios["sum"] == pytest.approx(exact * 1.0 + 2.0)


@pytest.fixture(scope="module")
def chosen_lengths_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    """One emulated worker whose answers end as soon as ``min_tokens`` allows."""
    yield from one_worker_fleet(tmp_path_factory, "chosen", 1)


async def test_a_conversation_is_expected_to_answer_as_long_as_its_last_turn(
        chosen_lengths_fleet: FleetConfig, make_router: RouterFactory) -> None:
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "producers:\n  - type: output-length\n    params: {min_samples: 4}\n")
    router = await make_router(chosen_lengths_fleet, routing)
    answered = 0

    async with aiohttp.ClientSession() as session:
        async def turn(messages: list[dict[str, str]], length: int) -> tuple[str, int, Any]:
            """One turn that generates at least ``length`` tokens of its 1,000 (the emulated
            engine stops as soon as it may): its answer, the tokens it generated and the
            decision's attributes, once the router has booked it as finished."""
            nonlocal answered
            body = {"model": MODEL, "messages": messages, "max_tokens": 1000,
                    "min_tokens": length}
            async with session.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                reply = await resp.json()
            generated = reply["usage"]["completion_tokens"]
            assert length <= generated <= length + 1
            async with session.get(router.url + "/debug/decisions?limit=1") as resp:
                [decision] = (await resp.json())["data"]
            answered += 1
            deadline = time.monotonic() + 5.0
            while router.metric("kvroute_requests_total", model=MODEL, worker="chosen",
                                gpu="H100-80GB", profile="default", status="200") < answered:
                assert time.monotonic() < deadline, "the answer was never booked"
                await asyncio.sleep(0.02)
            return reply["choices"][0]["message"]["content"], generated, decision["attributes"]

        async def conversation(number: int, length: int) -> tuple[int, Any]:
            """Two turns of ``length`` tokens each: the first's answer length and the
            second's decision attributes."""
            question = [{"role": "user", "content": f"Conversation {number}: tell me about "
                         + "the sea, the mountains and the rivers between them. " * 12}]
            answer, generated, _ = await turn(question, length)
            _, _, attributes = await turn(
                [*question, {"role": "assistant", "content": answer},
                 {"role": "user", "content": "And what happened next?"}], length)
            return generated, attributes

        for number, length in enumerate((3, 200, 3, 200, 3)):
            await conversation(number, length)
        # five second turns judged: each was exactly as long as its first
        long_first, long_follow_up = await conversation(5, 200)
        short_first, short_follow_up = await conversation(6, 3)
    assert long_follow_up["predicted_output_tokens"] == long_first >= 200
    assert short_follow_up["predicted_output_tokens"] == short_first <= 4
    # /metrics says why: seven second turns judged, the previous turn the nearer
    assert router.metric("kvroute_output_length_judged_requests_total", model=MODEL) == 7
    errors = {way: router.metric("kvroute_output_length_error", model=MODEL, prediction=way)
              for way in ("previous_turn", "typical")}
    assert errors["previous_turn"] < 0.1 < errors["typical"]


async def prediction_ratios(router: RouterHandle) -> dict[str, float]:
    """``kvroute_output_tokens_predicted_ratio`` of the model (count, sum and the cumulative
    buckets le=1.25 and le=2), once it holds an observation above 1.25 (the router records
    an answer just after the client has it)."""
    name = "kvroute_output_tokens_predicted_ratio"
    deadline = time.monotonic() + 5.0
    while True:
        values = {"count": router.metric(f"{name}_count", model=MODEL),
                  "sum": router.metric(f"{name}_sum", model=MODEL),
                  **{le: router.metric(f"{name}_bucket", model=MODEL, le=le)
                     for le in ("1.25", "2.0")}}
        if values["count"] > values["1.25"]:
            return values
        assert time.monotonic() < deadline, "the predicted answer was never recorded"
        await asyncio.sleep(0.02)


async def test_a_request_naming_no_model_is_served_by_a_fleet_of_one_model(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """As vLLM serves its own model to a request without ``model``: through a fleet whose
    workers all serve one model, the request goes to it (routed like any other)."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    async with aiohttp.ClientSession() as session, session.post(
            router.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["model"] == MODEL
        assert resp.headers["x-kvroute-worker"] == "h100-fast"


async def test_what_the_client_waited_counts_the_wait_for_a_slot(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """kvroute_ttft_seconds times one attempt at a worker, from its dispatch: a request that
    waited for an in-flight slot (or retried) waited longer than any attempt showed. The
    client's own wait is counted from the request's arrival."""
    routing = (REPO_ROOT / "config/routing.yaml").read_text() + "admission: {max_in_flight: 1}\n"
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), routing)
    body = {"model": MODEL, "prompt": "Tell me a story.", "max_tokens": 2000, "stream": True}

    async def stream(session: aiohttp.ClientSession) -> None:
        async with session.post(router.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(stream(session), stream(session))    # the second waits its turn
        async with session.post(router.url + "/v1/completions",
                                json={**body, "stream": False}) as resp:
            assert resp.status == 200
            await resp.read()
    client_ttft = {s: router.metric(f"kvroute_client_ttft_seconds_{s}", model=MODEL)
                   for s in ("count", "sum")}
    attempt_ttft = router.metric("kvroute_ttft_seconds_sum", worker="h100-fast",
                                 gpu="H100-80GB")
    durations = router.metric("kvroute_client_duration_seconds_count", model=MODEL)
    waited = router.metric("kvroute_admission_wait_seconds_sum")
    assert client_ttft["count"] == 2 and durations == 3        # streams only; every answer
    assert waited > 0.1                                         # one stream waited ...
    assert client_ttft["sum"] >= waited + 0.8 * attempt_ttft   # ... and its client saw it


async def test_a_large_body_is_parsed_off_the_event_loop(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A body of 7 million one-token lists was parsed and checked on the event loop: 3.8 s
    without an answer to anyone. From ``PARSE_OFF_LOOP_BYTES`` a body is parsed in a thread;
    a small one stays on the loop (a thread hop would cost more than its parse)."""
    import threading

    from router import director

    parsed_in: list[int] = []
    real_parse = director.parse_request

    def recording_parse(*args: Any) -> Any:
        parsed_in.append(threading.get_ident())
        return real_parse(*args)

    monkeypatch.setattr(director, "parse_request", recording_parse)
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    lists = (director.PARSE_OFF_LOOP_BYTES // 4) + 1         # "[7]," each
    # one of its prompts too long for the window: refused as parsed, none of them served
    large = b'{"model": "%s", "max_tokens": 1, "prompt": [[%s],%s]}' % (
        MODEL.encode(), b",".join([b"7"] * 9000), b",".join([b"[7]"] * lists))
    small = {"model": MODEL, "max_tokens": 1, "prompt": [[7], [8]]}
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/completions", data=large,
                                headers={"Content-Type": "application/json"}) as resp:
            body = await resp.json()
            assert resp.status == 400
            assert "contains 9000 input tokens" in body["error"]["message"]
        async with session.post(router.url + "/v1/completions", json=small) as resp:
            assert resp.status == 200
    loop_thread = threading.get_ident()       # the router serves on the test's loop
    assert len(parsed_in) == 2
    assert parsed_in[0] != loop_thread and parsed_in[1] == loop_thread


async def test_n_choices_are_timed_per_token_of_each_choice(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The choices of one request are generated side by side: 8 choices of 12 tokens read as
    a time per token 8 times too short (96 tokens over the time of 12), and taught the
    online correction that the worker was 8 times faster than it was."""
    from router.loop_lag import LoopStalls

    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this one must have its time per token
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    router = await make_router(subset(emulated_fleet, ["slow"]))

    async def tpot_of(choices: int) -> tuple[float, float]:
        """The time per token recorded for a stream of ``choices`` choices of 12 tokens, and
        that stream's time from its first token to its end (the router's) over 11 gaps."""
        labels = {"worker": "slow", "gpu": "L40S-48GB"}
        total = router.metric("kvroute_tpot_seconds_sum", **labels)
        count = router.metric("kvroute_tpot_seconds_count", **labels)
        async with aiohttp.ClientSession() as session, session.post(
                f"{router.url}/v1/chat/completions", json={
                    "model": MODEL, "max_tokens": 12, "n": choices, "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}) as resp:
            assert resp.status == 200
            await resp.read()
            request_id = resp.headers["x-request-id"]
        await _booked(router, "kvroute_tpot_seconds_count", count + 1, **labels)
        assert router.metric("kvroute_tpot_seconds_count", **labels) == count + 1
        async with aiohttp.ClientSession() as session, session.get(
                router.url + "/debug/decisions?request_id=" + request_id) as resp:
            [decision] = (await resp.json())["data"]
        outcome = decision["outcome"]
        return (router.metric("kvroute_tpot_seconds_sum", **labels) - total,
                (outcome["e2e_s"] - outcome["ttft_s"]) / (12 - 1))

    # each stream's own time over each choice's gaps (its times rounded to 0.1 ms), not
    # over all its tokens' (8 x 12: 8 times too short); the two streams' paces are not
    # compared, a loaded machine's emulator slowed one of them 3 times over
    for choices in (1, 8):
        tpot, per_gap = await tpot_of(choices)
        assert tpot == pytest.approx(per_gap, abs=1e-4), (choices, tpot, per_gap)


async def test_the_tools_a_chat_offers_are_counted_in_its_prompt(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The template writes the tools into the prompt: an agent offering many was routed as
    its messages alone (thousands of tokens fewer than its worker prefilled)."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "Look something up in the catalogue. " * 10,
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
        for i in range(8)]
    counted = []
    async with aiohttp.ClientSession() as session:
        for offered in (None, tools):
            body: dict[str, Any] = {"model": MODEL, "max_tokens": 2,
                                    "messages": [{"role": "user", "content": "Find a book."}]}
            if offered:
                body["tools"] = offered
            async with session.post(f"{router.url}/v1/chat/completions", json=body) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
            async with session.get(f"{router.url}/debug/decisions?limit=1") as resp:
                [decision] = (await resp.json())["data"]
            assert decision["num_prompt_tokens"] == answer["usage"]["prompt_tokens"]
            counted.append(decision["num_prompt_tokens"])
    assert counted[1] > counted[0] + 500


def test_a_whole_answer_without_max_tokens_may_run_to_the_end_of_the_window() -> None:
    """The longest answer a timeout is weighed against (not the worker's failure when it
    may take longer than the router waits): without max_tokens, the window's rest, as vLLM
    generates without one."""
    from policies.base import RoutingRequest
    from router.director import longest_answer_tokens

    def routing(max_tokens: int | None) -> RoutingRequest:
        return RoutingRequest(request_id="r", model="m", max_tokens=max_tokens,
                              num_prompt_tokens=100)

    assert longest_answer_tokens(routing(None), 8192) == 8092
    assert longest_answer_tokens(routing(10**9), 8192) == 8092
    assert longest_answer_tokens(routing(50), 8192) == 50


class GeneratingWorker(FrontedWorker):
    """A ``FrontedWorker`` whose ``/metrics`` says its engine generates (with
    ``generating``): a request running, its ``vllm:generation_tokens_total`` rising at each
    read; else a request running and the counter still (a hung engine)."""

    def __init__(self, backend: str, on_post: PostHandler, generating: bool) -> None:
        super().__init__(backend, on_post)
        self.generating = generating
        self.tokens = 0

    async def _poll(self, request: web.Request) -> web.Response:
        answer = await super()._poll(request)
        if request.path != "/metrics" or not isinstance(answer.body, bytes):
            return answer
        self.tokens += 100 if self.generating else 0
        lines = [line for line in answer.body.decode().splitlines()
                 if not line.startswith(("vllm:generation_tokens_total",
                                         "vllm:num_requests_running"))]
        labels = f'{{engine="0",model_name="{MODEL}"}}'
        lines += [f"vllm:generation_tokens_total{labels} {self.tokens}.0",
                  f"vllm:num_requests_running{labels} 1.0"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


@pytest.mark.parametrize("generating", [True, False], ids=["busy-engine", "hung-engine"])
async def test_a_timeout_a_long_whole_answer_explains_is_not_the_workers_failure(
        emulated_fleet: FleetConfig, make_router: RouterFactory, generating: bool) -> None:
    """A whole answer of 1,500 tokens on an L40S outlasting a 20 s upstream timeout counted
    toward ejecting its worker while its engine generated: the router's wait, not the
    worker's failure. A short one that times out still counts, and so does a long one at an
    engine that generates nothing (a hung one). (A long one is waited for three times its
    estimate first: ``test_a_whole_answer_longer_than_the_upstream_timeout_is_served``.)"""
    released = asyncio.Event()

    async def silent(request: web.Request) -> web.StreamResponse:
        await request.read()
        await released.wait()
        return web.json_response({})

    default = (REPO_ROOT / "config/routing.yaml").read_text()
    backend = subset(emulated_fleet, ["h100-fast"]).workers[0].info.url
    async with GeneratingWorker(backend, silent, generating) as worker, \
            aiohttp.ClientSession() as session:
        router = await make_router(url_fleet({"w": worker.url}), default,
                                   upstream_timeout_s=0.5, eject_after=1)
        deadline = asyncio.get_running_loop().time() + 10.0
        while worker.tokens < 300 and generating:       # its engine seen generating
            assert asyncio.get_running_loop().time() < deadline, "never scraped"
            await asyncio.sleep(0.05)
        url = router.url + "/v1/completions"
        # generating: waited for on past the timeout, up to 3 x its estimate (150 tokens:
        # seconds); hung: cut at the timeout, however long it may be (4,000 tokens: its
        # wait would be minutes)
        long_answer = {"model": MODEL, "prompt": "Tell me everything",
                       "max_tokens": 150 if generating else 4000}
        sent = asyncio.get_running_loop().time()
        async with session.post(url, json=long_answer) as resp:
            assert resp.status == 504
        if not generating:
            assert asyncio.get_running_loop().time() - sent < 10.0
        assert ((await fleet_entry(router, "w"))["ejected_for_s"] == 0) == generating
        if generating:
            short_answer = {**long_answer, "max_tokens": 2}
            async with session.post(url, json=short_answer) as resp:
                assert resp.status == 504
            assert (await fleet_entry(router, "w"))["ejected_for_s"] > 0
        released.set()


async def test_a_whole_answer_longer_than_the_upstream_timeout_is_served(
        make_router: RouterFactory) -> None:
    """A whole answer's head comes once it is all generated: one of 400 tokens (about 3 s)
    was cut at a 1 s upstream timeout with a 504, which the SDKs send again (generated again,
    cut again). It is waited for three times its estimate at its longest."""
    from workers.emulator.process import EmulatorProcess

    with EmulatorProcess(gpu="h100", time_scale=1.0, served_model_names=[MODEL]) as worker:
        router = await make_router(url_fleet({"w": worker.url}),
                                   (REPO_ROOT / "config/routing.yaml").read_text(),
                                   upstream_timeout_s=1.0)
        async with aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/completions",
                json={"model": MODEL, "prompt": "Tell me everything", "max_tokens": 400,
                      "ignore_eos": True}) as resp:
            answer = await resp.json()
        assert resp.status == 200, answer
        assert answer["usage"]["completion_tokens"] == 400
        # a stream's head still comes within the upstream timeout (its first token)
        async with aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/completions",
                json={"model": MODEL, "prompt": "Tell me everything", "max_tokens": 400,
                      "ignore_eos": True, "stream": True}) as resp:
            assert resp.status == 200
            await resp.read()


async def test_a_served_answer_is_charged_its_own_length_not_the_one_expected(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """kvroute_cost_dollars_total took the decision's estimate: the same 40-token answer was
    charged hundreds of times more for a max_tokens of 10**6 than for one of 40."""
    async def forty_tokens(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.json_response({
            "id": "cmpl-1", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": "word " * 40, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}})

    default = (REPO_ROOT / "config/routing.yaml").read_text()
    async with scripted_router(emulated_fleet, make_router, forty_tokens, "w",
                               routing=default) as router, aiohttp.ClientSession() as session:
        charged = []           # (the first caches the prompt: it is charged its prefill)
        for max_tokens in (40, 40, 10**6, 40):
            before = router.metric("kvroute_cost_dollars_total", worker="w")
            async with session.post(router.url + "/v1/completions", json={
                    "model": MODEL, "prompt": "Say forty words", "max_tokens": max_tokens,
                    "temperature": 0}) as resp:
                assert resp.status == 200
            charged.append(router.metric("kvroute_cost_dollars_total", worker="w") - before)
    # (the rate of a token follows the batch each decision expected: within a few times)
    assert all(cost > 0 for cost in charged)
    assert charged[2] < 3 * min(charged[1], charged[3])       # it was 390 times


async def test_a_stream_without_usage_is_charged_what_it_relayed(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A stream whose usage the router cannot read (a server that ignores
    ``include_usage``) was charged the decision's estimate, its whole ``max_tokens``: a
    token for each event relayed now, as admission counts it."""
    async def forty_events(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(40):
            await response.write(b'data: {"id":"c","object":"text_completion","choices":'
                                 b'[{"index":0,"text":"word ","finish_reason":null}]}\n\n')
        await response.write(b"data: [DONE]\n\n")
        return response

    default = (REPO_ROOT / "config/routing.yaml").read_text()
    async with scripted_router(emulated_fleet, make_router, forty_events, "w",
                               routing=default) as router, aiohttp.ClientSession() as session:
        charged = []
        for max_tokens in (40, 40, 10**6, 40):
            before = router.metric("kvroute_cost_dollars_total", worker="w")
            async with session.post(router.url + "/v1/completions", json={
                    "model": MODEL, "prompt": "Say forty words", "max_tokens": max_tokens,
                    "temperature": 0, "stream": True}) as resp:
                assert resp.status == 200 and (await resp.read()).endswith(b"[DONE]\n\n")
            charged.append(router.metric("kvroute_cost_dollars_total", worker="w") - before)
    assert all(cost > 0 for cost in charged)
    assert charged[2] < 3 * min(charged[1], charged[3])


@pytest.mark.parametrize("ending", ["client-left", "worker-failed"])
async def test_what_of_a_stream_reached_its_client_is_counted_and_charged(
        emulated_fleet: FleetConfig, make_router: RouterFactory, ending: str) -> None:
    """A stream its client left, or its worker ended with an error, after tokens had reached
    the client counted no tokens and cost nothing, while its tenant's budget was charged
    for them (a client could read a whole answer and leave before its end, for nothing).
    Both are counted and charged as the budget is: the prompt and a token for each event."""
    # the client leaves once it has all that the "stall" worker ever sends (its role chunk
    # and 3 tokens, then silence): from a worker streaming on, the events the router relayed
    # before it saw its client gone were counted too (7 or 14 for 5 read, on a loaded
    # machine), which no client leaving at once can bound
    worker = "stall" if ending == "client-left" else "erring"
    router = await make_router(subset(emulated_fleet, [worker]))
    body = {"model": MODEL, "max_tokens": 40, "stream": True,
            "messages": [{"role": "user", "content": "Tell me a story about a lighthouse."}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/chat/completions", json=body,
                                headers={"x-tenant": "acme"}) as resp:
            assert resp.status == 200
            events = 0
            async for line in resp.content:
                events += line.startswith(b"data: ")
                if ending == "client-left" and events == 4:
                    break                                       # the client leaves
        deadline = asyncio.get_running_loop().time() + 5.0
        while not router.metric("kvroute_requests_total", worker=worker):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
    status = "499" if ending == "client-left" else "500"
    assert router.metric("kvroute_requests_total", worker=worker, status=status) == 1
    completion = router.metric("kvroute_completion_tokens_total", worker=worker)
    assert 4 <= completion <= (6 if ending == "client-left" else 5)    # (role, tokens, error)
    assert router.metric("kvroute_prompt_tokens_total", worker=worker) > 10
    assert router.metric("kvroute_cost_dollars_total", worker=worker, tenant="acme") > 0
    # the outcome the decision log and /debug/decisions show counts the same (it said 0)
    async with aiohttp.ClientSession() as session, session.get(
            router.url + "/debug/decisions") as resp:
        (shown,) = (await resp.json())["data"]
    assert (shown["outcome"]["prompt_tokens"], shown["outcome"]["completion_tokens"]) == (
        router.metric("kvroute_prompt_tokens_total", worker=worker), completion)


async def _booked(router: RouterHandle, sample: str, count: float, **labels: str) -> None:
    """Until ``sample`` reaches ``count`` (the router books an answer just after its client
    has it)."""
    deadline = asyncio.get_running_loop().time() + 5.0
    while router.metric(sample, **labels) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{sample} never reached {count}"
        await asyncio.sleep(0.02)


async def test_the_time_per_output_token_is_the_stream_s_time_over_its_gaps(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of 5 tokens has 4 gaps between them: its time from the first token to the
    last over 5 read every worker as 20 % faster than it was (kvroute_tpot_seconds, the
    decision log, and so what the online correction learnt)."""
    from router.loop_lag import LoopStalls

    # a loop stalled 0.5 s (a loaded machine) drops a request's times, by design
    # (test_loop_lag.py): this one must have its time per token
    monkeypatch.setattr(LoopStalls, "since", lambda self, start: False)
    tokens = 5
    chunk = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
             "choices": [{"index": 0, "text": "word ", "finish_reason": None}]}
    usage = {"id": "cmpl-1", "object": "text_completion", "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                       "total_tokens": 5 + tokens}}

    async def paced(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for token in range(tokens):
            if token:
                await asyncio.sleep(0.05)     # the gaps: a stream long enough to measure
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: " + orjson.dumps(usage) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    async with scripted_router(emulated_fleet, make_router, paced) as router, \
            aiohttp.ClientSession() as session:
        async with session.post(router.url + "/v1/completions", json={
                "model": MODEL, "prompt": "Say five words", "max_tokens": tokens,
                "stream": True}) as resp:
            assert resp.status == 200 and (await resp.read()).endswith(b"[DONE]\n\n")
            request_id = resp.headers["x-request-id"]
        await _booked(router, "kvroute_tpot_seconds_count", 1, worker="w")
        async with session.get(router.url + "/debug/decisions?request_id="
                               + request_id) as resp:
            [decision] = (await resp.json())["data"]
    outcome = decision["outcome"]
    # the router's own times of the first token and of the end (rounded to 0.1 ms)
    streamed_s = outcome["e2e_s"] - outcome["ttft_s"]
    assert streamed_s > 0.01                  # (long enough to tell 4 gaps from 5)
    tpot = router.metric("kvroute_tpot_seconds_sum", worker="w")
    assert tpot == pytest.approx(streamed_s / (tokens - 1), abs=1e-4)
    assert outcome["tpot_s"] == pytest.approx(streamed_s / (tokens - 1), abs=1e-4)


ROUTING_PREFIX_ROUND_ROBIN = """\
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    scorers: [{type: prefix, weight: 1.0}]
    picker: {type: round-robin}
default_profile: default
"""


async def test_the_prefill_in_flight_at_the_worker_holding_the_prefix_is_the_uncached_part(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The router booked a prompt's whole prefill in flight at the worker that holds most of
    it: that worker looked busier than it is, against affinity in a burst."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        await request.read()
        arrived.set()
        await release.wait()
        return web.json_response({
            "id": "cmpl-1", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 500, "completion_tokens": 1, "total_tokens": 501}})

    prompt = " ".join(f"word{i}" for i in range(400))
    async with scripted_router(emulated_fleet, make_router, held,
                               routing=ROUTING_PREFIX_ROUND_ROBIN) as router, \
            aiohttp.ClientSession() as session:
        async def in_flight_prefill() -> tuple[int, int]:
            """One request of ``prompt``: the prefill booked at "w" while the worker holds
            it, and the prompt tokens its decision expected "w" to have cached."""
            arrived.clear()
            release.clear()
            sent = asyncio.create_task(session.post(router.url + "/v1/completions", json={
                "model": MODEL, "prompt": prompt, "max_tokens": 1}))
            await asyncio.wait_for(arrived.wait(), 10.0)
            [view] = router.app[REGISTRY].views(time.monotonic())
            release.set()
            async with await sent as resp:
                assert resp.status == 200
                request_id = resp.headers["x-request-id"]
            async with session.get(router.url + "/debug/decisions?request_id="
                                   + request_id) as resp:
                [decision] = (await resp.json())["data"]
            return view.inflight_prefill_tokens, decision["attributes"]["prefix_match_tokens"]

        whole, nothing_cached = await in_flight_prefill()
        uncached, cached = await in_flight_prefill()
    assert nothing_cached == 0 and whole >= 400
    assert 0 < cached < whole
    assert uncached == whole - cached
