"""OpenAI request parsing: what is accepted, and the exact error for each bad body."""

from __future__ import annotations

import json
import sys

import orjson
import pytest

from router.errors import InvalidRequest
from router.protocol import (
    CHAT_PATH,
    CLASSIFY_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    MESSAGES_PATH,
    POOLING_PATH,
    RESPONSES_PATH,
    ParsedRequest,
    check_model,
    parse_request,
    tenant_of,
    upstream_body,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CHAT: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def parse(body: bytes | dict[str, object], path: str = CHAT_PATH,
          headers: dict[str, str] | None = None) -> ParsedRequest:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return parse_request(raw, path, "req-1", headers or {}, 12.5)


def test_chat_request_fields() -> None:
    parsed = parse({**CHAT, "max_tokens": 7, "stream": True, "user": "u1",
                    "stream_options": {"include_usage": True}})
    r = parsed.routing
    assert (r.request_id, r.model, r.path, r.max_tokens, r.stream, r.session,
            r.arrival_time) == ("req-1", MODEL, CHAT_PATH, 7, True, "u1", 12.5)
    assert r.messages == [{"role": "user", "content": "hi"}]
    assert parsed.wants_usage is True


def test_the_policy_reads_the_body_as_sent() -> None:
    """A session plugin reading ``session_params.session_id`` had only the fields parsed for
    it (``user``): the body is the policy's to read."""
    body = {**CHAT, "session_params": {"session_id": "s-1"}}
    assert parse(body).routing.body == body
    raw = orjson.dumps(body) + b"  \n"         # and knows its size as received
    assert parse(raw).routing.body_bytes == len(raw)


def test_max_completion_tokens_preferred() -> None:
    r = parse({**CHAT, "max_completion_tokens": 5, "max_tokens": 9}).routing
    assert r.max_tokens == 5


def test_the_max_tokens_vllm_does_not_take_is_not_judged() -> None:
    """vLLM takes max_completion_tokens over max_tokens whatever the other says: a 0 beside
    a good max_completion_tokens was refused. Each must still be an integer."""
    assert parse({**CHAT, "max_completion_tokens": 3, "max_tokens": 0}).routing.max_tokens == 3
    with pytest.raises(InvalidRequest, match="max_completion_tokens: must be at least 1"):
        parse({**CHAT, "max_completion_tokens": 0, "max_tokens": 5})
    with pytest.raises(InvalidRequest, match="max_tokens: must be an integer"):
        parse({**CHAT, "max_completion_tokens": 3, "max_tokens": "many"})


def test_an_echoed_completion_may_ask_for_no_tokens() -> None:
    """``echo`` with ``max_tokens: 0`` asks for the prompt's logprobs alone, which vLLM
    serves (generating one token); without ``echo`` it is refused, as vLLM refuses it."""
    for echo in (True, "true"):
        parsed = parse({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 0,
                        "echo": echo, "logprobs": 1}, COMPLETIONS_PATH)
        assert parsed.routing.max_tokens == 1
    for body in ({"model": MODEL, "prompt": "x", "max_tokens": 0},
                 {"model": MODEL, "prompt": "x", "max_tokens": 0, "echo": False},
                 {**CHAT, "max_tokens": 0, "echo": True}):
        with pytest.raises(InvalidRequest, match="max_tokens: must be at least 1, got 0"):
            parse(body, COMPLETIONS_PATH if "prompt" in body else CHAT_PATH)


def test_a_body_after_a_byte_order_mark_is_read() -> None:
    """Some Windows clients begin their UTF-8 body with a byte order mark, which vLLM's
    parser skips; it was refused as invalid JSON."""
    parsed = parse(b"\xef\xbb\xbf" + json.dumps(CHAT).encode())
    assert parsed.routing.model == MODEL and parsed.routing.messages == CHAT["messages"]


def test_a_completion_without_max_tokens_is_routed_as_vllms_16_tokens() -> None:
    assert parse({"model": MODEL, "prompt": "x"}, COMPLETIONS_PATH).routing.max_tokens == 16
    assert parse({"model": MODEL, "prompt": "x", "max_tokens": 300},
                 COMPLETIONS_PATH).routing.max_tokens == 300
    assert parse(CHAT).routing.max_tokens is None           # chat: up to the window


def test_a_completions_max_completion_tokens_is_no_field_of_its() -> None:
    """vLLM's completion request has no ``max_completion_tokens`` (an extra field, ignored):
    the router routed such a request as that many tokens, and refused one it could not read,
    which the engine serves as its 16."""
    for extra in (5, "many", -3):
        body = {"model": MODEL, "prompt": "x", "max_completion_tokens": extra}
        assert parse(body, COMPLETIONS_PATH).routing.max_tokens == 16
    body = {"model": MODEL, "prompt": "x", "max_completion_tokens": 5, "max_tokens": 9}
    assert parse(body, COMPLETIONS_PATH).routing.max_tokens == 9


@pytest.mark.parametrize("prompt", ["hello", ["a", "b"], [1, 2, 3], [[1, 2], [3]]],
                         ids=["string", "list of strings", "token ids", "lists of token ids"])
def test_completion_prompts_accepted(prompt: object) -> None:
    r = parse({"model": MODEL, "prompt": prompt}, COMPLETIONS_PATH).routing
    assert r.prompt == prompt and r.messages is None


@pytest.mark.parametrize("embeds", ["AAAA", ["AAAA", "BBBB"]], ids=["one", "a batch"])
def test_a_completion_of_prompt_embeds_alone_is_routed(embeds: object) -> None:
    """vLLM's ``--enable-prompt-embeds`` takes ``prompt_embeds`` without ``prompt``: the
    router answered it 400, ``Missing required parameter: 'prompt'``."""
    r = parse({"model": MODEL, "prompt_embeds": embeds}, COMPLETIONS_PATH).routing
    assert r.prompt is None and r.messages is None
    with pytest.raises(InvalidRequest, match="Missing required parameter: 'prompt'"):
        parse({"model": MODEL, "prompt_embeds": ""}, COMPLETIONS_PATH)


@pytest.mark.parametrize(("body", "path", "message", "param"), [
    (b"", CHAT_PATH, "Request body is empty; expected a JSON object.", None),
    (b"{not json", CHAT_PATH, "Request body is not valid JSON", None),
    (b"\xff\xfe{}", CHAT_PATH, "Request body is not valid UTF-8.", None),
    (b"[1, 2]", CHAT_PATH, "Request body must be a JSON object.", None),
    ({"messages": []}, CHAT_PATH, "You must provide a model parameter", "model"),
    ({"model": 3, "messages": []}, CHAT_PATH, "You must provide a model parameter", "model"),
    ({**CHAT, "model": "m" * 1025}, CHAT_PATH,
     "model: must be at most 1024 characters, got 1025.", "model"),
    ({**CHAT, "model": "m\tx"}, CHAT_PATH, "model: must be printable text.", "model"),
    ({"model": MODEL}, CHAT_PATH, "Missing required parameter: 'messages'.", "messages"),
    ({"model": MODEL, "messages": "hi"}, CHAT_PATH, "messages: must be a non-empty array.",
     "messages"),
    ({"model": MODEL, "messages": [{"content": "x"}]}, CHAT_PATH,
     "messages[0].role: required, a string.", "messages[0].role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, CHAT_PATH,
     "messages[0].content: must be a string or an array.", "messages[0].content"),
    ({**CHAT, "max_tokens": -5}, CHAT_PATH, "max_tokens: must be at least 1, got -5.",
     "max_tokens"),
    ({**CHAT, "max_tokens": "ten"}, CHAT_PATH, "max_tokens: must be an integer.", "max_tokens"),
    ({**CHAT, "max_tokens": [10]}, CHAT_PATH, "max_tokens: must be an integer.", "max_tokens"),
    ({**CHAT, "stream": "maybe"}, CHAT_PATH, "stream: must be a boolean.", "stream"),
    ({**CHAT, "stream_options": {"include_usage": 2}}, CHAT_PATH,
     "stream_options.include_usage: must be a boolean.", "stream_options.include_usage"),
    ({**CHAT, "stream_options": {"include_usage": True}}, CHAT_PATH,
     "Stream options can only be defined when `stream=True`.", "stream_options"),
    ({**CHAT, "stream": False, "stream_options": {"include_usage": False}}, CHAT_PATH,
     "Stream options can only be defined when `stream=True`.", "stream_options"),
    ({"model": MODEL}, COMPLETIONS_PATH, "Missing required parameter: 'prompt'.", "prompt"),
    ({"model": MODEL, "prompt": [1, "a"]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
    ({"model": MODEL, "prompt": []}, COMPLETIONS_PATH, "prompt: must be a string", "prompt"),
    ({"model": MODEL, "prompt": [[1], []]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
    ({"model": MODEL, "prompt": [[1], [True]]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
    ({"model": MODEL, "prompt": [[1], ["a"]]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
    ({"model": MODEL, "prompt": [[1], 2]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
    ({"model": MODEL, "prompt": [True]}, COMPLETIONS_PATH, "prompt: must be a string",
     "prompt"),
], ids=["empty", "malformed", "non-utf8", "array body", "no model", "model not string",
        "model too long", "model not printable",
        "no messages", "messages not list", "message without role", "bad content",
        "negative max_tokens", "max_tokens text", "max_tokens list", "stream not bool",
        "include_usage not bool", "stream_options without stream",
        "stream_options with stream false", "no prompt", "mixed prompt", "empty prompt",
        "an empty list of ids", "a bool in a list of ids", "a text in a list of ids",
        "ids beside a list", "a bool for an id"])
def test_invalid_bodies(body: bytes | dict[str, object], path: str, message: str,
                        param: str | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body, path)
    assert info.value.message.startswith(message)
    assert info.value.param == param
    assert info.value.status == 400


def test_a_request_without_a_model_is_for_the_fleets_one_model() -> None:
    raw = orjson.dumps({"messages": [{"role": "user", "content": "hi"}]})
    parsed = parse_request(raw, CHAT_PATH, "req-1", {}, 0.0, default_model=MODEL)
    assert parsed.routing.model == MODEL
    with pytest.raises(InvalidRequest, match="You must provide a model parameter"):
        parse_request(raw, CHAT_PATH, "req-1", {}, 0.0)        # several models: say which
    # named, but empty: vLLM's _is_model_supported takes any falsy name for its own model
    empty = orjson.dumps({"model": "", "messages": [{"role": "user", "content": "hi"}]})
    assert parse_request(empty, CHAT_PATH, "req-1", {}, 0.0, default_model=MODEL).routing.model \
        == MODEL
    with pytest.raises(InvalidRequest, match="You must provide a model parameter"):
        parse_request(empty, CHAT_PATH, "req-1", {}, 0.0)      # several models: say which


def test_empty_stream_options_without_a_stream_pass_as_vllm_lets_them() -> None:
    assert parse({**CHAT, "stream_options": {}}).routing.stream is False


def test_a_model_name_of_the_longest_length_is_accepted() -> None:
    assert parse({**CHAT, "model": "m" * 1024}).routing.model == "m" * 1024


def test_tenant_from_header_or_hashed_key() -> None:
    assert tenant_of({"x-tenant": "acme"}) == "acme"
    hashed = tenant_of({"authorization": "Bearer sk-secret"})
    assert hashed is not None and hashed.startswith("key-") and "secret" not in hashed
    assert hashed == tenant_of({"authorization": "Bearer sk-secret"})
    assert tenant_of({}) is None


def test_upstream_body_untouched_when_nothing_changes() -> None:
    raw = orjson.dumps(CHAT)
    assert upstream_body(parse(raw), raw, MODEL) is raw


def test_upstream_body_asks_for_usage_and_rewrites_model() -> None:
    raw = orjson.dumps({**CHAT, "stream": True})
    body = orjson.loads(upstream_body(parse(raw), raw, "other-model"))
    assert body["model"] == "other-model"
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == CHAT["messages"]


def test_a_re_encoded_body_keeps_integers_past_64_bits_whole() -> None:
    """orjson reads an integer past 64 bits as a float: a stream's body, re-encoded to ask
    for usage, sent the worker 1.2345678901234568e+29 for a JSON schema's const of
    123456789012345678901234567890 (the engine's answer followed the changed schema)."""
    big = 123456789012345678901234567890
    schema = {"type": "object", "properties": {"n": {"const": big}}}
    for raw in (json.dumps({**CHAT, "stream": True, "response_format": {
                    "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
                           ).encode(),
                b"\xef\xbb\xbf" + json.dumps({**CHAT, "stream": True, "seed": big}).encode()):
        sent = upstream_body(parse(raw), raw, "other-model")
        assert str(big).encode() in sent and b"e+29" not in sent
        body = json.loads(sent)
        assert body["model"] == "other-model"
        assert body["stream_options"] == {"include_usage": True}
    # past -2**63 in 19 digits: a float to orjson too
    raw = json.dumps({**CHAT, "stream": True, "seed": -9999999999999999999}).encode()
    assert b'"seed": -9999999999999999999' in upstream_body(parse(raw), raw, MODEL)


def test_a_long_integer_in_a_body_too_deep_to_re_encode_is_a_400() -> None:
    """Read again with Python's parser for its long integer, a body nested past its
    recursion limit ended in a 500 (RecursionError), where one without it is a 400."""
    nested = b'{"a": ' * 1000 + b"1" + b"}" * 1000
    raw = (b'{"model": "' + MODEL.encode() + b'", "stream": true, "seed": '
           b'12345678901234567890123, "messages": [{"role": "user", "content": "hi"}], '
           b'"x": ' + nested + b"}")
    with pytest.raises(InvalidRequest, match="nested too deeply to forward"):
        upstream_body(parse(raw), raw, MODEL)


def test_upstream_body_keeps_continuous_usage_off_when_the_client_did_not_ask_for_usage() -> None:
    raw = orjson.dumps({**CHAT, "stream": True,
                        "stream_options": {"include_usage": False,
                                           "continuous_usage_stats": True}})
    body = orjson.loads(upstream_body(parse(raw), raw, MODEL))
    assert body["stream_options"] == {"include_usage": True}


def test_upstream_body_keeps_client_usage_request() -> None:
    raw = orjson.dumps({**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert upstream_body(parse(raw), raw, MODEL) is raw


def test_an_escaped_lone_surrogate_is_valid_json_and_kept() -> None:
    """RFC 8259 allows it and vLLM's parser (Python's json) takes it; orjson does not."""
    raw = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    parsed = parse_request(raw, CHAT_PATH, "req-1", {}, 0.0)
    assert parsed.routing.messages == [{"role": "user", "content": "a\ud800b"}]
    # the body sent on is rewritten (usage asked for): the surrogate is escaped again
    sent = upstream_body(parsed, raw, "other-model")
    assert json.loads(sent)["messages"][0]["content"] == "a\ud800b"
    assert json.loads(sent)["model"] == "other-model"


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "Infinity", "1e400", "-1e400",
                                    "9" * 400 + ".0"])
def test_numbers_json_has_not_are_refused_not_sent_on_as_null(number: str) -> None:
    """Python's json (the fallback) takes them; re-encoded by orjson for the worker they
    became null, so a stream ran with the default top_p where the client sent -Infinity."""
    raw = ('{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}], '
           f'"top_p": {number}}}').encode()
    with pytest.raises(InvalidRequest, match=r"Request body is not valid JSON: .+ is not a "
                       r"JSON number \(JSON has no NaN or Infinity"):
        parse_request(raw, CHAT_PATH, "req-1", {}, 0.0)


@pytest.mark.parametrize(("written", "taken"), [("5.0", 5), ("1" + "0" * 30, int(1e30))])
def test_a_whole_number_written_as_a_float_is_a_max_tokens(written: str, taken: int) -> None:
    """vLLM's request model takes 5.0 for an integer; orjson reads an integer past 64 bits
    as a float. Both were refused as "must be an integer"."""
    raw = ('{"model": "m", "messages": [{"role": "user", "content": "hi"}], '
           f'"max_tokens": {written}}}').encode()
    assert parse_request(raw, CHAT_PATH, "req-1", {}, 0.0).routing.max_tokens == taken
    with pytest.raises(InvalidRequest, match="max_tokens: must be an integer"):
        parse_request(raw.replace(written.encode(), b"5.5"), CHAT_PATH, "req-1", {}, 0.0)


def test_values_vllm_takes_laxly_are_taken_so() -> None:
    """vLLM's request models are pydantic's, lax: "10" and true are integers, "yes" is true.
    The router refused them with a 400 the engine would not have given."""
    routing = parse({**CHAT, "max_tokens": "10", "stream": "yes",
                     "stream_options": {"include_usage": "1"}}).routing
    assert (routing.max_tokens, routing.stream) == (10, True)
    assert parse({**CHAT, "stream": "on", "stream_options": {"include_usage": 1}}).wants_usage
    assert parse({**CHAT, "max_completion_tokens": True}).routing.max_tokens == 1
    assert parse({**CHAT, "max_tokens": " 1_000 "}).routing.max_tokens == 1000
    # stream_options are refused without a stream by the body's own value, as vLLM judges
    # it: the text "false" is no missing stream there (vLLM serves it, unstreamed)
    assert not parse({**CHAT, "stream": "false",
                      "stream_options": {"include_usage": True}}).routing.stream
    with pytest.raises(InvalidRequest, match="max_tokens: must be an integer"):
        parse({**CHAT, "max_tokens": "9" * 5000})      # a 400, not a crash


@pytest.mark.parametrize("options", [{"continuous_usage_stats": "x"},
                                     {"include_usage": 2}])
def test_stream_options_of_the_wrong_type_are_refused(options: dict[str, object]) -> None:
    """``continuous_usage_stats`` is taken off the worker's body (usage is asked for), so the
    worker never saw the mistake: the answer was a 200."""
    raw = orjson.dumps({**CHAT, "stream": True, "stream_options": options})
    [name] = options
    with pytest.raises(InvalidRequest, match=f"stream_options.{name}: must be a boolean"):
        parse(raw)


def test_stream_options_of_null_are_their_defaults() -> None:
    raw = orjson.dumps({**CHAT, "stream": True, "stream_options": {
        "include_usage": None, "continuous_usage_stats": None}})
    assert not parse(raw).wants_usage


def test_what_no_json_parser_takes_is_still_refused() -> None:
    with pytest.raises(InvalidRequest, match="Request body is not valid JSON"):
        parse(b'{"model": "m", "messages": [}')


def test_json_nested_deeper_than_both_parsers_go_is_refused_not_raised() -> None:
    """orjson stops at 1,024 levels and Python's json, the fallback, at the recursion limit:
    the client is told its body is not valid JSON (a RecursionError would be a 500)."""
    raw = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(InvalidRequest, match="not valid JSON: depth limit exceeded"):
        parse(raw)


@pytest.mark.parametrize("depth", [300, 5_000])
def test_a_body_too_deep_to_encode_again_is_refused_when_it_must_be(depth: int) -> None:
    """orjson parses 1,024 levels but writes 254; Python's json writes up to its recursion
    limit. A stream must be re-encoded (usage asked for): past both, a clear 400."""
    raw = (b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}], '
           b'"x": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000 + b"}")
    parsed = parse_request(raw, CHAT_PATH, "req-1", {}, 0.0)
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(depth)
        if depth > 1000 + 100:        # Python's json still writes it
            assert json.loads(upstream_body(parsed, raw, "m"))["stream_options"] == {
                "include_usage": True}
        else:
            with pytest.raises(InvalidRequest, match="nested too deeply to forward"):
                upstream_body(parsed, raw, "m")
    finally:
        sys.setrecursionlimit(limit)
    # a body sent as it came is never re-encoded, however deep
    plain = raw.replace(b'"stream": true', b'"stream": false')
    assert upstream_body(parse_request(plain, CHAT_PATH, "r", {}, 0.0), plain, "m") is plain


def test_a_model_with_a_lone_surrogate_is_refused_by_name() -> None:
    raw = b'{"model": "m\\ud800", "messages": [{"role": "user", "content": "hi"}]}'
    with pytest.raises(InvalidRequest, match="model: must be printable text"):
        parse(raw)


@pytest.mark.parametrize("tenant", ["t" * 257, "a\u2028b", "a\x85b", "tab\tx"],
                         ids=["over 256", "line separator", "next line", "tab"])
def test_a_tenant_that_is_not_short_printable_text_is_refused(tenant: str) -> None:
    """8 kB of x-tenant made a 16 kB decision-log line; a line separator in it cut the log's
    records for readers splitting on Unicode line breaks."""
    with pytest.raises(InvalidRequest, match="x-tenant: must be printable text") as info:
        parse(CHAT, headers={"x-tenant": tenant})
    assert info.value.param == "x-tenant"
    assert parse(CHAT, headers={"x-tenant": "t" * 256}).routing.tenant == "t" * 256


def test_tenant_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    received = b"t\xc3\xa9nant\xff".decode("utf-8", "surrogateescape")   # as aiohttp has it
    assert parse(CHAT, headers={"x-tenant": received}).routing.tenant == "t\u00e9nant\ufffd"
    key = "Bearer k\xff".encode("latin-1").decode("utf-8", "surrogateescape")
    assert str(parse(CHAT, headers={"authorization": key}).routing.tenant).startswith("key-")


@pytest.mark.parametrize(("body", "messages", "prompt"), [
    ({"input": "hello"}, None, "hello"),
    ({"input": ["a", "b"]}, None, ["a", "b"]),
    ({"input": [1, 2, 3]}, None, [1, 2, 3]),
    ({"input": [[1, 2], [3]]}, None, [[1, 2], [3]]),
    ({"input": [{"role": "user", "content": "hi"}]}, [{"role": "user", "content": "hi"}], None),
    ({"messages": [{"role": "user", "content": "hi"}]}, [{"role": "user", "content": "hi"}],
     None),
    ({"input": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]},
     [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None),
])
def test_embeddings_inputs_are_routed_as_one_prefill(body: dict[str, object],
                                                     messages: object, prompt: object) -> None:
    parsed = parse({"model": MODEL, "stream": True, "max_tokens": 99, **body}, EMBEDDINGS_PATH)
    r = parsed.routing
    assert (r.path, r.messages, r.prompt) == (EMBEDDINGS_PATH, messages, prompt)
    assert (r.max_tokens, r.stream, parsed.wants_usage) == (1, False, False)
    raw = orjson.dumps({"model": MODEL, **body})
    assert upstream_body(parse(raw, EMBEDDINGS_PATH), raw, MODEL) is raw


@pytest.mark.parametrize(("body", "param"), [
    ({}, "input"),
    ({"input": None}, "input"),
    ({"input": []}, "input"),
    ({"input": {"text": "x"}}, "input"),
    ({"input": [1, "a"]}, "input"),
    ({"messages": "hi"}, "messages"),
    ({"input": [{"content": "no role"}]}, "input[0].role"),
])
def test_embeddings_inputs_refused_by_name(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": MODEL, **body}, EMBEDDINGS_PATH)
    assert info.value.param == param


@pytest.mark.parametrize("path", [POOLING_PATH, CLASSIFY_PATH])
@pytest.mark.parametrize(("body", "messages", "prompt"), [
    ({"input": "hello"}, None, "hello"),
    ({"input": ["a", "b"]}, None, ["a", "b"]),
    ({"input": [[1, 2], [3]]}, None, [[1, 2], [3]]),
    ({"messages": [{"role": "user", "content": "hi"}]},
     [{"role": "user", "content": "hi"}], None),
], ids=["text", "texts", "token-id lists", "chat"])
def test_pooling_and_classify_inputs_are_routed_as_embeddings_are(
        path: str, body: dict[str, object], messages: object, prompt: object) -> None:
    raw = orjson.dumps({"model": MODEL, "stream": True, **body})
    parsed = parse(raw, path)
    r = parsed.routing
    assert (r.path, r.messages, r.prompt) == (path, messages, prompt)
    assert (r.max_tokens, r.stream, parsed.wants_usage) == (1, False, False)
    assert upstream_body(parsed, raw, MODEL) is raw       # forwarded as the client sent it


def test_a_pooling_plugins_data_is_routed_with_nothing_counted() -> None:
    r = parse({"model": MODEL, "data": {"image": "x.tiff"}}, POOLING_PATH).routing
    assert (r.messages, r.prompt, r.max_tokens) == (None, None, 1)
    with pytest.raises(InvalidRequest) as info:      # only on /pooling
        parse({"model": MODEL, "data": {"image": "x.tiff"}}, CLASSIFY_PATH)
    assert (info.value.param, info.value.message) == ("input",
                                                      "Missing required parameter: 'input'.")


@pytest.mark.parametrize(("path", "body", "param", "message"), [
    (POOLING_PATH, {}, "input", "Missing required parameter: 'input' (or 'messages', or an IO "
                                "processor plugin's 'data')."),
    (POOLING_PATH, {"input": 5}, "input", "input: must be a string, an array of strings, an "
                                          "array of token ids, an array of arrays of token "
                                          "ids, or chat messages."),
    (CLASSIFY_PATH, {"input": None}, "input", "Missing required parameter: 'input'."),
    (CLASSIFY_PATH, {"messages": "hi"}, "messages", "messages: must be a string, an array of "
                                                    "strings, an array of token ids, an array "
                                                    "of arrays of token ids, or chat messages."),
])
def test_pooling_and_classify_inputs_refused_by_name(path: str, body: dict[str, object],
                                                     param: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": MODEL, **body}, path)
    assert (info.value.status, info.value.param, info.value.message) == (400, param, message)


def test_a_responses_request_is_routed_as_its_chat_turn_and_gets_an_id() -> None:
    body = {"model": MODEL, "instructions": "Be brief.", "max_output_tokens": 9,
            "stream": True, "previous_response_id": "resp_prev",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                      {"type": "function_call_output", "call_id": "c", "output": "42"}]}
    raw = orjson.dumps(body)
    parsed = parse(raw, RESPONSES_PATH)
    r = parsed.routing
    assert r.messages == [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "hi"}]
    assert (r.max_tokens, r.stream, parsed.wants_usage) == (9, True, True)
    assert parsed.previous_response_id == "resp_prev"
    assert parsed.response_id is not None and parsed.response_id.startswith("resp_")
    assert parsed.response_id_assigned
    sent = orjson.loads(upstream_body(parsed, raw, MODEL))
    assert sent == {**body, "request_id": parsed.response_id}     # the rest as it came
    mine = orjson.dumps({"model": MODEL, "input": "hi", "request_id": "resp_mine"})
    kept = parse(mine, RESPONSES_PATH)
    assert (kept.response_id, kept.response_id_assigned) == ("resp_mine", False)
    assert kept.routing.messages == [{"role": "user", "content": "hi"}]
    assert upstream_body(kept, mine, MODEL) is mine


def test_a_responses_turns_images_stand_in_their_place() -> None:
    """An ``input_image`` added nothing: another image with the same text was the same
    prompt, a cached prefix."""
    from policies.producers.media import media_mark

    body = {"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is "}, {"type": "input_image", "image_url": "u"},
        {"type": "input_text", "text": "?"}]}]}
    messages = parse(orjson.dumps(body), RESPONSES_PATH).routing.messages
    assert messages == [{"role": "user", "content": f"what is {media_mark('image', 'u')}?"}]


@pytest.mark.parametrize("store", [False, None])
def test_a_response_the_worker_will_not_keep_gets_no_id_to_record(store: bool | None) -> None:
    raw = orjson.dumps({"model": MODEL, "input": "hi", "store": store,
                        "previous_response_id": "resp_prev"})
    parsed = parse(raw, RESPONSES_PATH)
    assert (parsed.response_id, parsed.response_id_assigned) == (None, False)
    assert parsed.previous_response_id == "resp_prev"     # still served where it lives
    assert upstream_body(parsed, raw, MODEL) is raw       # forwarded as it came
    mine = parse(orjson.dumps({"model": MODEL, "input": "hi", "store": store,
                               "request_id": "resp_mine"}), RESPONSES_PATH)
    assert mine.response_id is None
    kept = parse(orjson.dumps({"model": MODEL, "input": "hi", "store": True}), RESPONSES_PATH)
    assert kept.response_id is not None and kept.response_id_assigned


@pytest.mark.parametrize(("body", "param"), [
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": 3}, "input"),
    ({"input": "x", "instructions": 1}, "instructions"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "previous_response_id": ""}, "previous_response_id"),
    ({"input": "x", "request_id": "a\nb"}, "request_id"),
    ({"input": "x", "stream": "maybe"}, "stream"),
])
def test_responses_fields_refused_by_name(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": MODEL, **body}, RESPONSES_PATH)
    assert info.value.param == param


def test_a_messages_api_request_is_routed_as_its_chat_turn() -> None:
    body = {"model": MODEL, "max_tokens": 7, "stream": True,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                      {"type": "image", "source": {}}]},
                         {"role": "assistant", "content": "hello"},
                         {"role": "user", "content": "more"}]}
    raw = orjson.dumps(body)
    parsed = parse(raw, MESSAGES_PATH)
    assert parsed.routing.messages == [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": [
                                           {"type": "text", "text": "hi"},
                                           {"type": "image", "source": {}}]},
                                       {"role": "assistant", "content": "hello"},
                                       {"role": "user", "content": "more"}]
    assert (parsed.routing.max_tokens, parsed.routing.stream, parsed.wants_usage) == (
        7, True, True)
    assert upstream_body(parsed, raw, MODEL) is raw      # vLLM streams its usage itself
    rewritten = orjson.loads(upstream_body(parsed, raw, "other"))
    assert rewritten == {**body, "model": "other"}


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 5}, "messages"),
    ({"max_tokens": 5, "messages": []}, "messages"),
    ({"max_tokens": 5, "messages": [{"content": "x"}]}, "messages[0]"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"max_tokens": 5, "system": 3, "messages": [{"role": "user", "content": "x"}]}, "system"),
    ({"max_tokens": 5, "stream": "maybe", "messages": [{"role": "user", "content": "x"}]},
     "stream"),
])
def test_messages_api_fields_refused_by_name(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": MODEL, **body}, MESSAGES_PATH)
    assert info.value.param == param


def test_an_anthropic_api_key_names_the_tenant() -> None:
    tenant = tenant_of({"x-api-key": "sk-ant-secret"})
    assert tenant is not None and tenant.startswith("key-") and "secret" not in tenant
    assert tenant_of({"authorization": "Bearer sk-ant-secret"}) == tenant


def test_choices_count_the_sequences_a_request_generates_per_prompt() -> None:
    """``n`` choices, or ``best_of`` sequences (the best ``n`` sent) when more; a value the
    worker will refuse counts as 1 (its 400 is the worker's), a huge one is capped."""
    completion = {"model": MODEL, "prompt": "a"}
    for body, choices in (({}, 1), ({"n": 3}, 3), ({"n": 2, "best_of": 5}, 5),
                          ({"n": 4, "best_of": 2}, 4), ({"n": True}, 1), ({"n": "8"}, 8),
                          ({"n": 0}, 1), ({"n": -3}, 1), ({"n": 2.0}, 2), ({"n": "x"}, 1),
                          ({"n": 10**12}, 1024)):
        routing = parse({**completion, **body}, COMPLETIONS_PATH).routing
        assert (routing.choices, routing.sequences) == (choices, choices), body
        assert routing.returned_choices == (2 if body.get("best_of") == 5 else choices)
        routing.prompt_count = 2                 # a batch of two (the tokens producer's)
        assert routing.sequences == 2 * choices
    assert parse({**CHAT, "n": 4}).routing.sequences == 4
    assert parse({"model": MODEL, "input": "a", "n": 4}, RESPONSES_PATH).routing.choices == 1


@pytest.mark.parametrize("tenant", ["شرکت\u200cما", "\U0001f468\u200d\U0001f469\u200d\U0001f467"],
                         ids=["zwnj", "zwj-emoji"])
def test_a_tenant_written_with_joiners_is_a_tenant(tenant: str) -> None:
    """A Persian name (ZWNJ) or an emoji family (ZWJ) was refused with 400, while a routing
    file's budget could name it: a budget no request could reach."""
    assert parse(CHAT, headers={"x-tenant": tenant}).routing.tenant == tenant
    with pytest.raises(InvalidRequest, match="x-tenant"):
        parse(CHAT, headers={"x-tenant": "ab\u202ecod"})        # shown as another name
    assert check_model("\U0001f916\u200d") == "\U0001f916\u200d"      # a model name too
