"""Response bodies and SSE chunks with vLLM v0.33's exact keys, key order and nulls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """What every body and chunk of one response shares."""

    id: str
    created: int
    model: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None      # set only with enable_prompt_tokens_details

    def full(self) -> dict[str, Any]:
        """The non-streaming form: every field present, nulls included."""
        return {"prompt_tokens": self.prompt_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "completion_tokens": self.completion_tokens,
                "prompt_tokens_details": None if self.cached_tokens is None
                else {"cached_tokens": self.cached_tokens},
                "completion_tokens_details": None}

    def compact(self) -> dict[str, Any]:
        """The streaming form: null fields dropped."""
        body: dict[str, Any] = {"prompt_tokens": self.prompt_tokens,
                                "total_tokens": self.prompt_tokens + self.completion_tokens,
                                "completion_tokens": self.completion_tokens}
        if self.cached_tokens is not None:
            body["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return body


@dataclass(frozen=True, slots=True)
class Choice:
    index: int
    text: str
    finish_reason: str
    logprobs: dict[str, Any] | None = None      # when asked (``workers.emulator.logprobs``)


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def chat_body(h: ResponseHeader, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
    return {
        "id": h.id, "object": "chat.completion", "created": h.created, "model": h.model,
        "choices": [{"index": c.index,
                     "message": {"role": "assistant", "content": c.text, "refusal": None,
                                 "annotations": None, "audio": None, "function_call": None,
                                 "reasoning": None},
                     "logprobs": c.logprobs, "finish_reason": c.finish_reason,
                     "stop_reason": None,
                     "token_ids": None, "routed_experts": None, "weight_versions": None}
                    for c in choices],
        "service_tier": None, "system_fingerprint": h.fingerprint, "usage": usage.full(),
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


def completion_body(h: ResponseHeader, choices: Sequence[Choice], usage: Usage) -> dict[str, Any]:
    return {
        "id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
        "choices": [{"index": c.index, "text": c.text, "logprobs": c.logprobs,
                     "finish_reason": c.finish_reason, "stop_reason": None, "token_ids": None,
                     "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None,
                     "weight_versions": None} for c in choices],
        "service_tier": None, "system_fingerprint": h.fingerprint, "usage": usage.full(),
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


def chat_role_chunk(h: ResponseHeader, index: int) -> dict[str, Any]:
    return {"id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
            "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                         "logprobs": None, "finish_reason": None}],
            "prompt_token_ids": None, "prompt_text": None}


def chat_content_chunk(h: ResponseHeader, index: int, text: str, finish_reason: str | None,
                       logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "delta": {"content": text},
                              "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = None
        choice["token_ids"] = None
        choice["weight_versions"] = None
    else:
        choice["token_ids"] = None
    return {"id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
            "choices": [choice], "kv_transfer_params": None}


def completion_chunk(h: ResponseHeader, index: int, text: str, finish_reason: str | None,
                     logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
            "choices": [{"index": index, "text": text, "logprobs": logprobs,
                         "finish_reason": finish_reason, "stop_reason": None,
                         "prompt_token_ids": None, "token_ids": None, "weight_versions": None}],
            "kv_transfer_params": None}


def usage_chunk(h: ResponseHeader, chat: bool, usage: Usage) -> dict[str, Any]:
    return {"id": h.id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": h.created, "model": h.model, "choices": [],
            "system_fingerprint": h.fingerprint, "usage": usage.compact()}


def error_chunk(message: str, err_type: str, code: int) -> bytes:
    return sse({"error": {"message": message, "type": err_type, "param": None, "code": code}})
