"""Bad input gets vLLM's 4xx error body, never a 500, and the worker keeps serving."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.errors import ApiError
from workers.emulator.process import EmulatorProcess
from workers.emulator.protocol import (
    check_logprobs_asked,
    check_token_ids,
    decode_json,
    parse_generation,
)

MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.0, max_model_len=MAX_MODEL_LEN) as proc:
        yield proc


async def post(url: str, data: bytes, content_type: str = "application/json"
               ) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(
            url, data=data, headers={"Content-Type": content_type}) as resp:
        return resp.status, await resp.json(content_type=None)


def assert_error(status: int, body: Any, code: int, err_type: str, param: str | None) -> str:
    assert status == code, body
    assert list(body) == ["error"]
    assert list(body["error"]) == ["message", "type", "param", "code"]
    assert (body["error"]["type"], body["error"]["param"], body["error"]["code"]) == \
        (err_type, param, code)
    return str(body["error"]["message"])


TOOLS = (b'[{"type": "function", "function": {"name": "lookup", "parameters": '
         b'{"type": "object", "properties": {}}}}]')
CHAT_CASES = [
    (b"{not json", "Bad Request", "body.1"),      # FastAPI's json_invalid, at its character
    (b"[1, 2]", "Bad Request", "body"),
    (b'{"model": "' + MODEL.encode() + b'"}', "Bad Request", "body.messages"),
    (b'{"messages": "hello"}', "Bad Request", "body.messages"),
    (b'{"messages": []}', "BadRequestError", None),   # vLLM: "Cannot apply chat template ..."
    (b'{"messages": [1]}', "Bad Request", "body.messages.0"),
    (b'{"messages": [{"content": "x"}]}', "Bad Request", "body.messages.0.role"),
    (b'{"messages": [{"role": "user", "content": 5}]}', "Bad Request", "body.messages.0.content"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}', "Bad Request",
     "body.max_tokens"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "BadRequestError",
     "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": "maybe"}', "Bad Request",
     "body.stream"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream_options": 3}', "Bad Request",
     "body.stream_options"),
    (b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', "BadRequestError", None),
    (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "Bad Request",
     "body.temperature"),
    (b'{"messages": [{"role": "user", "content": "x"}], "model": 7}', "Bad Request", "body.model"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": "x"}', "Bad Request",
     "body.tools"),
    # vLLM's tool-usage checks: "When using `tool_choice`, `tools` must be set." and the rest
    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}',
     "BadRequestError", "tool_choice"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": []}', "BadRequestError",
     "tools"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe", "tools": '
     + TOOLS + b'}', "BadRequestError", "tool_choice"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}, '
     b'"tools": ' + TOOLS + b'}', "BadRequestError", "tool_choice.function"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", '
     b'"function": {}}, "tools": ' + TOOLS + b'}', "BadRequestError", "tool_choice.function.name"),
    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", '
     b'"function": {"name": "other"}}, "tools": ' + TOOLS + b'}', "BadRequestError",
     "tool_choice"),
    # a value nested past Python's recursion limit is named in the message without a repr
    # that would raise (a 500)
    (b'{"messages": [{"role": "user", "content": ' + b"[" * 1000 + b"]" * 1000 + b"}]}",
     "Bad Request", "body.messages.0.content"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": '
     + b"[" * 1000 + b"]" * 1000 + b"}]}]}", "Bad Request", "body.messages.0.content.0.text"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("data", "err_type", "param"), CHAT_CASES)
async def test_bad_chat_bodies(worker: EmulatorProcess, data: bytes, err_type: str,
                               param: str | None) -> None:
    status, body = await post(f"{worker.url}/v1/chat/completions", data)
    assert_error(status, body, 400, err_type, param)


COMPLETION_CASES = [
    # vLLM 0.32: "Either prompt or prompt_embeds must be provided and non-empty." (missing
    # or empty), "You must pass at least one prompt" (an empty list)
    (b'{"max_tokens": 3}', "BadRequestError", "prompt"),
    (b'{"prompt": ""}', "BadRequestError", "prompt"),
    (b'{"prompt": []}', "BadRequestError", None),
    (b'{"prompt": [1, "a"]}', "Bad Request", "body.prompt"),
    (b'{"prompt": [[1], "a"]}', "Bad Request", "body.prompt"),
    (b'{"prompt": {"text": "a"}}', "Bad Request", "body.prompt"),
    (b'{"prompt": [true]}', "Bad Request", "body.prompt"),
    (b'{"prompt": [99999999]}', "BadRequestError", None),
    (b'{"prompt": [-1]}', "BadRequestError", None),
    (b'{"prompt": "a", "stream_options": {"include_usage": true}}', "BadRequestError",
     "stream_options"),          # vLLM: "Stream options can only be defined when `stream=True`."
]


@pytest.mark.integration
@pytest.mark.parametrize(("data", "err_type", "param"), COMPLETION_CASES)
async def test_bad_completion_bodies(worker: EmulatorProcess, data: bytes, err_type: str,
                                     param: str | None) -> None:
    status, body = await post(f"{worker.url}/v1/completions", data)
    assert_error(status, body, 400, err_type, param)


@pytest.mark.integration
async def test_vllm_messages_for_model_and_length(worker: EmulatorProcess) -> None:
    status, body = await post(f"{worker.url}/v1/completions", b'{"model": "foo", "prompt": "a"}')
    assert assert_error(status, body, 404, "NotFoundError", "model") == \
        f"The model `foo` does not exist. Valid aliases: {MODEL}."
    # an empty name is vLLM's own model, as no name is (any falsy name passes its check)
    status, body = await post(f"{worker.url}/v1/completions",
                              b'{"model": "", "prompt": "a", "max_tokens": 1}')
    assert (status, body["model"]) == (200, MODEL)
    too_long = b'{"prompt": [' + b",".join([b"7"] * (MAX_MODEL_LEN + 1)) + b"]}"
    status, body = await post(f"{worker.url}/v1/completions", too_long)
    assert assert_error(status, body, 400, "BadRequestError", "input_tokens") == (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your prompt "
        f"contains at least {MAX_MODEL_LEN + 1} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={MAX_MODEL_LEN + 1})")     # vLLM: one past, "at least"
    longer = b'{"prompt": [' + b",".join([b"7"] * (MAX_MODEL_LEN + 5)) + b"]}"
    status, body = await post(f"{worker.url}/v1/completions", longer)
    assert f"contains {MAX_MODEL_LEN + 5} input tokens" in assert_error(
        status, body, 400, "BadRequestError", "input_tokens")       # token ids: counted whole
    # a batch: every prompt's length is checked before the room left for the answer
    batch = (b'{"prompt": [[' + b",".join([b"7"] * MAX_MODEL_LEN) + b"], ["
             + b",".join([b"7"] * (MAX_MODEL_LEN + 5)) + b"]]}")
    status, body = await post(f"{worker.url}/v1/completions", batch)
    assert f"contains {MAX_MODEL_LEN + 5} input tokens" in assert_error(
        status, body, 400, "BadRequestError", "input_tokens")
    # a text is tokenized one token past the window at most: "at least" that many
    status, body = await post(f"{worker.url}/v1/completions",
                              b'{"prompt": "' + b"word " * (MAX_MODEL_LEN + 100) + b'"}')
    assert assert_error(status, body, 400, "BadRequestError", "input_tokens") == (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your prompt "
        f"contains at least {MAX_MODEL_LEN + 1} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={MAX_MODEL_LEN + 1})")
    # a prompt filling the window leaves max_tokens 0, which vLLM's sampling refuses
    exact = b'{"prompt": [' + b",".join([b"7"] * MAX_MODEL_LEN) + b"]}"
    status, body = await post(f"{worker.url}/v1/completions", exact)
    assert assert_error(status, body, 400, "BadRequestError", "max_tokens") == (
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)")
    status, body = await post(f"{worker.url}/v1/completions", b'{"prompt": "a"}', "text/plain")
    assert_error(status, body, 400, "Bad Request", None)


@pytest.mark.integration
@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 600}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 600}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_completion_tokens": 600}, "max_completion_tokens"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 600}, "max_output_tokens"),
])
async def test_max_tokens_past_the_whole_window_is_refused(
        worker: EmulatorProcess, path: str, body: dict[str, object], field: str) -> None:
    """vLLM clamps an answer that overflows with its prompt, and refuses one longer than the
    window itself, before reading the prompt; the emulator clamped both."""
    raw = json.dumps({**body, "model": MODEL}).encode()
    status, answer = await post(f"{worker.url}{path}", raw)
    assert assert_error(status, answer, 400, "BadRequestError", field) == (
        f"{field}=600 cannot be greater than max_model_len={MAX_MODEL_LEN}. Please request "
        f"fewer output tokens. (parameter={field}, value=600)")


@pytest.mark.integration
async def test_max_tokens_is_clamped_to_the_room_left(worker: EmulatorProcess) -> None:
    prompt = b'{"ignore_eos": true, "max_tokens": 100, "prompt": [' + \
        b",".join([b"7"] * (MAX_MODEL_LEN - 3)) + b"]}"
    status, body = await post(f"{worker.url}/v1/completions", prompt)
    assert status == 200 and body["usage"]["completion_tokens"] == 3


@pytest.mark.integration
async def test_fifty_megabyte_body_then_still_serving(worker: EmulatorProcess) -> None:
    huge = b'{"prompt": "' + b"a" * (50 * 1024 * 1024) + b'"}'
    status, body = await post(f"{worker.url}/v1/completions", huge)
    assert "maximum context length is 512 tokens" in assert_error(
        status, body, 400, "BadRequestError", "input_text")
    huge_chat = b'{"messages": [{"role": "user", "content": "' + b"b" * (5 * 1024 * 1024) + \
        b'"}]}'
    status, body = await post(f"{worker.url}/v1/chat/completions", huge_chat)
    assert_error(status, body, 400, "BadRequestError", "input_text")
    status, body = await post(f"{worker.url}/v1/completions",
                              b'{"prompt": "still here", "max_tokens": 2, "ignore_eos": true}')
    assert status == 200 and body["usage"]["completion_tokens"] == 2
    async with aiohttp.ClientSession() as session, session.get(f"{worker.url}/health") as resp:
        assert resp.status == 200


def test_parse_generation_defaults() -> None:
    chat = parse_generation({"messages": [{"role": "user", "content": "x"}]}, "chat")
    assert (chat.max_tokens, chat.n, chat.stream, chat.include_usage, chat.model) == \
        (None, 1, False, False, None)
    completion = parse_generation({"prompt": [[1, 2], [3]], "stream": True,
                                   "stream_options": {"include_usage": True}}, "completion")
    assert completion.prompts == ((1, 2), (3,)) and completion.max_tokens == 16
    assert completion.include_usage and not completion.continuous_usage
    with pytest.raises(ApiError) as err:
        decode_json(b'"a string"')
    assert err.value.status == 400


@pytest.mark.parametrize(("kind", "fields", "message"), [
    ("completion", {"temperature": -1},
     "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"),
    ("chat", {"top_p": 2}, "top_p must be in (0, 1], got 2.0. (parameter=top_p, value=2.0)"),
    ("chat", {"top_p": 0}, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)"),
    ("chat", {"top_k": -5}, "top_k must be 0 (disable), or at least 1, got -5."),
    ("completion", {"suffix": "x"},
     "suffix is only supported for models with FIM completion rendering"),
    ("completion", {"logprobs": 100}, "Requested sample logprobs of 100, which is greater "
     "than max allowed: 20 (parameter=logprobs, value=100)"),
    ("chat", {"logprobs": True, "top_logprobs": 21}, "Requested sample logprobs of 21, which "
     "is greater than max allowed: 20 (parameter=logprobs, value=21)"),
    ("chat", {"top_logprobs": 3}, "when using `top_logprobs`, `logprobs` must be set to true. "
     "(parameter=top_logprobs)"),
    ("chat", {"max_tokens": 0},
     "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
    ("chat", {"n": 0}, "n must be at least 1, got 0."),
    ("chat", {"temperature": 1000},
     "temperature must be in [0, 2], got 1000.0. (parameter=temperature, value=1000.0)"),
    ("chat", {"presence_penalty": 5}, "presence_penalty must be in [-2, 2], got 5.0."),
    ("completion", {"frequency_penalty": -5}, "frequency_penalty must be in [-2, 2], got -5.0."),
    ("chat", {"repetition_penalty": 0}, "repetition_penalty must be greater than zero, got 0.0."),
    ("completion", {"min_p": 2}, "min_p must be in [0, 1], got 2.0."),
    ("chat", {"n": 2, "temperature": 0}, "n must be 1 when using greedy sampling, got 2."),
    ("chat", {"stop": ""}, "stop cannot contain an empty string."),
    ("completion", {"stop": ["a", ""]}, "stop cannot contain an empty string."),
    ("chat", {"cache_salt": ""},
     "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"),
])
def test_sampling_parameters_vllm_refuses_are_400(kind: str, fields: dict[str, object],
                                                  message: str) -> None:
    """They were served 200."""
    body: dict[str, object] = ({"messages": [{"role": "user", "content": "x"}]} if kind == "chat"
                               else {"prompt": "x"})
    with pytest.raises(ApiError) as refused:
        parse_generation({**body, **fields}, kind)       # type: ignore[arg-type]
    assert (refused.value.status, refused.value.message) == (400, message)
    parse_generation({**body, "temperature": 0, "top_p": 1, "stop": ["\n", "END"]},
                     kind)                                # type: ignore[arg-type]


def test_a_stop_that_is_not_text_is_a_validation_error() -> None:
    with pytest.raises(ApiError) as refused:
        parse_generation({"prompt": "x", "stop": 5}, "completion")
    assert refused.value.status == 400 and "stop" in str(refused.value.param)


@pytest.mark.parametrize(("stop", "errors"), [
    (5, ["{'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid "
         "string', 'input': '5'}",
         "{'type': 'list_type', 'loc': 'body.stop', 'msg': 'Input should be a valid list', "
         "'input': '5'}"]),
    (["a", "e", " ", "o", "i"],
     ["{'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid string', "
      "'input': '<list of 5 items>'}",
      "{'type': 'too_long', 'loc': 'body.stop', 'msg': 'List should have at most 4 items "
      "after validation, not 5', 'input': '<list of 5 items>', 'ctx': {'field_type': 'List', "
      "'max_length': 4, 'actual_length': 5}}"]),
])
def test_a_stop_of_neither_shape_names_both_as_vllm_does(stop: object,
                                                         errors: list[str]) -> None:
    """vLLM's ``stop`` is a text or a list of at most four: its refusal names each branch;
    five stop strings were taken."""
    with pytest.raises(ApiError) as refused:
        parse_generation({"prompt": "x", "stop": stop}, "completion")
    assert refused.value.message.splitlines() == [
        f"{len(errors)} validation errors:", *(f"  {error}" for error in errors)]


# --- found by the sweep against a real vLLM 0.32 (tests/real_vllm/test_emulator_fidelity.py)

@pytest.mark.parametrize(("kind", "fields", "message"), [
    ("chat", {"prompt_logprobs": 1, "stream": True},
     "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)"),
    ("completion", {"prompt_logprobs": -2},
     "`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs, value=-2)"),
    ("chat", {"prompt_logprobs": "x"},
     "`prompt_logprobs` must be an integer. (parameter=prompt_logprobs, value=x)"),
    ("completion", {"logprobs": -2},
     "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-2)"),
    ("chat", {"logprobs": True, "top_logprobs": -2},
     "`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)"),
    ("chat", {"logprobs": True, "top_logprobs": "x"},
     "`top_logprobs` must be an integer. (parameter=top_logprobs, value=x)"),
    ("chat", {"continue_final_message": True, "add_generation_prompt": True},
     "Cannot set both `continue_final_message` and `add_generation_prompt` to True."),
    ("chat", {"continue_final_message": True},
     "continue_final_message and add_generation_prompt are not compatible. Use "
     "continue_final_message when you want the model to continue the final message, and "
     "add_generation_prompt when you want to add a header that will prompt it to start a new "
     "assistant message instead."),
    ("chat", {"messages": []},
     "Cannot apply chat template to an empty conversation. Provide at least one message."),
    ("chat", {"response_format": {"type": "json_schema"}},
     "When response_format type is 'json_schema', the 'json_schema' field must be provided. "
     "(parameter=response_format)"),
    ("completion", {"logit_bias": {"abc": 1}},
     "logit_bias contains key(s) that cannot be converted to integer token IDs: ['abc'] "
     "(parameter=logit_bias, value=['abc'])"),
    ("chat", {"user": 5},
     "1 validation error:\n  {'type': 'string_type', 'loc': 'body.user', 'msg': 'Input should "
     "be a valid string', 'input': '5'}"),
    ("chat", {"seed": 2 ** 64},
     "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input "
     "should be less than or equal to 9223372036854775807', 'input': '18446744073709551616', "
     "'ctx': {'le': 9223372036854775807}}"),
    ("chat", {"max_tokens": 2.5},           # a validation error's input as vLLM 0.32 shows it
     "1 validation error:\n  {'type': 'int_from_float', 'loc': 'body.max_tokens', 'msg': "
     "'Input should be a valid integer, got a number with a fractional part', 'input': '2.5'}"),
    ("chat", {"stream": True, "stream_options": [1]},
     "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body.stream_options', "
     "'msg': 'Input should be a valid dictionary or object to extract fields from', "
     "'input': '<list of 1 items>'}"),
    ("chat", {"stop_token_ids": "x"},
     "1 validation error:\n  {'type': 'list_type', 'loc': 'body.stop_token_ids', 'msg': "
     "'Input should be a valid list', 'input': 'x'}"),
])
def test_what_vllm_refuses_before_generating_is_refused_in_its_words(
        kind: str, fields: dict[str, object], message: str) -> None:
    """Each was served 200, or refused in other words."""
    body: dict[str, object] = ({"messages": [{"role": "user", "content": "x"}]} if kind == "chat"
                               else {"prompt": "x"})
    with pytest.raises(ApiError) as refused:
        parse_generation({**body, **fields}, kind)       # type: ignore[arg-type]
    assert (refused.value.status, refused.value.message) == (400, message)


@pytest.mark.parametrize("fields", [
    {"top_logprobs": 0}, {"continue_final_message": True, "add_generation_prompt": False},
    {"prompt_logprobs": 1}, {"logit_bias": {"5": 1}}, {"seed": -5}, {"user": "u"},
    {"response_format": {"type": "json_object"}},
])
def test_what_vllm_takes_is_taken(fields: dict[str, object]) -> None:
    parse_generation({"messages": [{"role": "user", "content": "x"}], **fields}, "chat")


@pytest.mark.parametrize(("fields", "message"), [
    ({"logit_bias": {"999999": 1}}, "token_id(s) [999999] in logit_bias contain out-of-vocab "
     "token ids. Vocabulary size: 1000 (parameter=logit_bias, value=[999999])"),
    ({"stop_token_ids": [-1]}, "token_id(s) [-1] in stop_token_ids contain out-of-vocab token "
     "ids. Vocabulary size: 1000 (parameter=stop_token_ids, value=[-1])"),
    ({"allowed_token_ids": []},
     "allowed_token_ids is not None and empty! (parameter=allowed_token_ids, value=[])"),
    ({"allowed_token_ids": [5, 999999]}, "allowed_token_ids contains out-of-vocab token id! "
     "(parameter=allowed_token_ids, value=[5, 999999])"),
    ({"logprobs": True, "top_logprobs": -1}, "Requested sample logprobs of 1000, which is "
     "greater than max allowed: 20 (parameter=logprobs, value=1000)"),
    ({"prompt_logprobs": 50}, "Requested prompt logprobs of 50, which is greater than max "
     "allowed: 20 (parameter=prompt_logprobs, value=50)"),
])
def test_token_ids_and_logprobs_are_checked_against_the_vocabulary(
        fields: dict[str, object], message: str) -> None:
    body = parse_generation({"messages": [{"role": "user", "content": "x"}], **fields}, "chat")
    with pytest.raises(ApiError) as refused:
        check_logprobs_asked(body, 1000)
        check_token_ids(body, 1000)
    assert (refused.value.status, refused.value.message) == (400, message)


@pytest.mark.parametrize(("raw", "message", "param"), [
    (b"", "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field required', "
     "'input': 'None'}", "body"),
    (b"null", "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field "
     "required', 'input': 'None'}", "body"),
    (b"{", "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON "
     "decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting property name "
     "enclosed in double quotes'}}", "body.1"),
    (b'{"a": 1} x', "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.9', 'msg': "
     "'JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Extra data'}}",
     "body.9"),
    (b"[]", "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': "
     "'Input should be a valid dictionary or object to extract fields from', 'input': "
     "'<list of 0 items>'}", "body"),
])
def test_bodies_that_are_no_json_object_are_refused_as_fastapi_does(
        raw: bytes, message: str, param: str) -> None:
    with pytest.raises(ApiError) as refused:
        decode_json(raw)
    assert (refused.value.message, refused.value.err_type, refused.value.param) == (
        message, "Bad Request", param)


def test_json_python_reads_is_taken() -> None:
    """vLLM reads bodies with Python's json: a UTF-8 BOM and NaN are taken."""
    assert decode_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert math.isnan(decode_json(b'{"t": NaN}')["t"])


@pytest.mark.integration
@pytest.mark.parametrize("data", [
    b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
    b'{"messages": ' + b"[" * 3000 + b"]" * 3000 + b"}",
])
async def test_a_body_not_read_gets_fastapis_detail(worker: EmulatorProcess,
                                                    data: bytes) -> None:
    """Not UTF-8, or nested past Python's limit (a 500 before): FastAPI's plain detail."""
    assert await post(f"{worker.url}/v1/chat/completions", data) == (
        400, {"detail": "There was an error parsing the body"})


@pytest.mark.integration
@pytest.mark.parametrize("content_type", ["text/plain", ""])
async def test_a_body_not_json_is_worded_as_vllm_words_it(worker: EmulatorProcess,
                                                          content_type: str) -> None:
    status, body = await post(f"{worker.url}/v1/chat/completions", b"{}", content_type)
    assert assert_error(status, body, 400, "Bad Request", None) == (
        "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")


@pytest.mark.integration
@pytest.mark.parametrize(("messages", "add_generation_prompt", "echoed"), [
    ([{"role": "user", "content": "hi"}], True, ""),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once"}], True,
     "Once"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                    "text": "b"}]}], False,
     "a\nb"),
])
async def test_a_chat_echo_is_the_last_message_of_the_answers_role(
        worker: EmulatorProcess, messages: list[dict[str, Any]], add_generation_prompt: bool,
        echoed: str) -> None:
    """The emulator echoed the whole templated prompt (special tokens and all)."""
    status, body = await post(f"{worker.url}/v1/chat/completions", json.dumps({
        "messages": messages, "echo": True, "max_tokens": 2, "ignore_eos": True,
        "add_generation_prompt": add_generation_prompt}).encode())
    assert status == 200
    content = body["choices"][0]["message"]["content"]
    assert content.startswith(echoed) and len(content) > len(echoed)
    assert "<|" not in content


@pytest.mark.parametrize("raw", [
    b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
    b'{"prompt": ["ok", "a\\udfffb"]}',
])
def test_a_lone_surrogate_is_refused_as_vllms_tokenizer_refuses_it(raw: bytes) -> None:
    """Python's JSON reader (the fallback for what orjson refuses: a BOM, NaN) takes an
    escaped lone surrogate, and the emulator then served it; vLLM's tokenizer refuses it."""
    with pytest.raises(ApiError) as refused:
        decode_json(raw)
    assert (refused.value.status, refused.value.message) == (
        400, "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, "
             "InputSequence]]")
    assert decode_json(b'{"prompt": "a\\ud83d\\ude00b"}') == {"prompt": "a\U0001f600b"}
