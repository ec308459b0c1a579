"""``router.answer_facts``: a large answer's usage and fingerprint, found by key from its end,
are what parsing it whole finds; keys inside strings and values that are the same word are
not taken for them."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from router.answer_facts import (
    NO_FACTS,
    WHOLE_PARSE_MAX_BYTES,
    AnswerFacts,
    answer_facts,
    last_value,
)
from router.proxy_usage import Usage, parse_usage


def whole(answer: dict[str, Any]) -> AnswerFacts:
    """What parsing the answer whole finds."""
    fingerprint = answer.get("system_fingerprint")
    return AnswerFacts(parse_usage(answer.get("usage")), "system_fingerprint" in answer,
                       fingerprint if isinstance(fingerprint, str) else None)


def embeddings(inputs: int, dims: int = 1024) -> dict[str, Any]:
    return {"id": "embd-1", "object": "list", "created": 1, "model": "e5",
            "data": [{"index": i, "object": "embedding",
                      "embedding": [0.001 * (i + j) for j in range(dims)]}
                     for i in range(inputs)],
            "usage": {"prompt_tokens": 7 * inputs, "total_tokens": 7 * inputs,
                      "completion_tokens": 0, "prompt_tokens_details": None}}


def chat_with_logprobs(tokens: int) -> dict[str, Any]:
    """A chat answer as vLLM writes it: its text and logprobs hold the keys' words, the
    fingerprint and the usage come after the choices, prompt_logprobs after the usage."""
    top = [{"token": '"usage":', "logprob": -1.5, "bytes": [34, 117]},
           {"token": "usage", "logprob": -2.0, "bytes": [117]}]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": 'say "usage": {"x": 1}',
                                     "tool_calls": [{"id": "t", "type": "function",
                                                     "function": {"name": "usage",
                                                                  "arguments": '{"usage": 3}'}}]},
                         "logprobs": {"content": [{"token": "usage", "logprob": -0.5,
                                                   "bytes": [117], "top_logprobs": top}
                                                  for _ in range(tokens)]}}],
            "service_tier": None, "system_fingerprint": "fp_vllm_0.11",
            "usage": {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens,
                      "prompt_tokens_details": {"cached_tokens": 8}},
            "prompt_logprobs": [None, {"17": {"logprob": -1.0, "rank": 1,
                                              "decoded_token": "usage"}}],
            "kv_transfer_params": None}


@pytest.mark.parametrize("answer", [embeddings(300), chat_with_logprobs(4000)],
                         ids=["embeddings", "chat-logprobs"])
@pytest.mark.parametrize("indent", [False, True], ids=["compact", "spaced"])
def test_a_large_answer_gives_what_parsing_it_whole_gives(answer: dict[str, Any],
                                                          indent: bool) -> None:
    data = (json.dumps(answer, indent=1).encode() if indent else orjson.dumps(answer))
    assert len(data) > WHOLE_PARSE_MAX_BYTES
    facts = answer_facts(data)
    assert facts == whole(answer)
    assert facts.usage is not None and facts.usage.prompt_tokens > 0


def test_a_small_answer_is_parsed_whole() -> None:
    answer = chat_with_logprobs(3)
    data = orjson.dumps(answer)
    assert len(data) <= WHOLE_PARSE_MAX_BYTES
    assert answer_facts(data) == whole(answer) == AnswerFacts(
        Usage(12, 3, 8), True, "fp_vllm_0.11")


def test_a_large_answer_without_usage_or_fingerprint_has_none() -> None:
    answer = embeddings(300)
    del answer["usage"]
    assert answer_facts(orjson.dumps(answer)) == AnswerFacts(None, False, None)
    answer = chat_with_logprobs(4000)
    answer["system_fingerprint"] = None          # the key, with null: known to have none
    assert answer_facts(orjson.dumps(answer)).has_fingerprint
    assert answer_facts(orjson.dumps(answer)).fingerprint is None


def test_what_is_not_a_json_object_has_no_facts() -> None:
    big_list = orjson.dumps([{"usage": {"prompt_tokens": 1}}] * 40_000)
    assert len(big_list) > WHOLE_PARSE_MAX_BYTES
    assert answer_facts(big_list) == NO_FACTS
    assert answer_facts(b"not json") == NO_FACTS
    assert answer_facts(b"x" * (WHOLE_PARSE_MAX_BYTES + 1)) == NO_FACTS


def test_keys_are_told_from_their_words_in_strings_and_values() -> None:
    usage = (b'"usage"', b"{n")
    assert last_value(b'{"a": "usage", "b": 1}', *usage) == (False, None)
    assert last_value(b'{"a": "say \\"usage\\": 3"}', *usage) == (False, None)
    # an escaped backslash before a real quote: the key is real
    assert last_value(b'{"a": "\\\\", "usage": {"prompt_tokens": 2}}', *usage) == (
        True, {"prompt_tokens": 2})
    assert last_value(b'{"usage" :  null}', *usage) == (True, None)
    assert last_value(b'{"usage": {broken', *usage) == (True, None)
    # a key whose value is not of the kind wanted is passed over for an earlier one
    assert last_value(b'{"usage": {"prompt_tokens": 3}, "x": {"usage": 7}}', *usage) == (
        True, {"prompt_tokens": 3})


def test_prompt_logprobs_holding_the_word_usage_do_not_hide_the_usage() -> None:
    """vLLM writes ``prompt_logprobs`` after the usage: a prompt of the word "usage" many
    times put as many ``"usage"`` values after it, and a search giving up after 16 found no
    usage (no tokens counted, no cost)."""
    answer = chat_with_logprobs(2000)
    answer["prompt_logprobs"] = [None] + [
        {"17": {"logprob": -1.0, "rank": 1, "decoded_token": "usage"}}] * 500
    data = orjson.dumps(answer)
    assert len(data) > WHOLE_PARSE_MAX_BYTES and data.count(b'"usage"') > 500
    assert answer_facts(data) == whole(answer)
