"""vLLM-shaped API errors: one exception type and its JSON body.

Body (vLLM v0.33): ``{"error": {"message": ..., "type": ..., "param": ..., "code": status}}``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web


class ApiError(Exception):
    """An error answered to the client with vLLM's status code and body."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type,
                          "param": self.param, "code": self.status}}

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=orjson.dumps(self.body()),
                            content_type="application/json")


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


def validation_error(param: str, msg: str, kind: str, value: Any,
                     ctx: dict[str, Any] | None = None) -> ApiError:
    """A request-validation failure, shaped like vLLM's pydantic error (type "Bad Request"):
    its ``input`` summarized as vLLM 0.32 shows it (a container as ``<list of N items>``,
    anything else as text: ``'5'``, ``'None'``)."""
    loc = f"body.{param}" if param else "body"     # vLLM 0.32: one dotted string
    detail: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": _summarized(value)}
    if ctx is not None:
        detail["ctx"] = ctx
    return ApiError(400, f"1 validation error:\n  {detail}", "Bad Request", loc)


def unsupported_media_type() -> ApiError:
    """vLLM's 400 for a body that is not ``application/json`` (a validation error of its own)."""
    return ApiError(400, "1 validation error:\n  Unsupported Media Type: Only 'application/json'"
                    " is allowed", "Bad Request")


def vllm_check(message: str, parameter: str, value: Any = None) -> ApiError:
    """A ``VLLMValidationError`` of vLLM's request models: its words, then
    ``(parameter=..., value=...)`` (no value when there is none)."""
    shown = f", value={value}" if value is not None else ""
    return bad_request(f"{message} (parameter={parameter}{shown})", parameter)


# one pydantic error of a request body: (field path after ``body.``, message, type, the value
# it is about, its ``ctx`` or None)
FieldError = tuple[str, str, str, Any, dict[str, Any] | None]
MAX_REPORTED_ERRORS = 10        # vLLM 0.32 lists at most 10, then counts the rest


def validation_errors(errors: list[FieldError]) -> ApiError:
    """Several pydantic errors (a union none of whose shapes a body fits), as vLLM 0.32
    words them: each with its ``input`` summarized (a container as ``<dict of N items>``,
    anything else as text), the first one's field the ``param``."""
    count = len(errors)
    label = "error" if count == 1 else "errors"
    lines = [f"{count} validation {label}:"]
    for param, msg, kind, value, ctx in errors[:MAX_REPORTED_ERRORS]:
        detail: dict[str, Any] = {"type": kind, "loc": f"body.{param}", "msg": msg,
                                  "input": _summarized(value)}
        if ctx is not None:
            detail["ctx"] = ctx
        lines.append(f"  {detail}")
    if count > MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {count - MAX_REPORTED_ERRORS} more {label}")
    return ApiError(400, "\n".join(lines), "Bad Request", f"body.{errors[0][0]}")


def _summarized(value: Any) -> str:
    """A validation error's ``input`` as vLLM 0.32 shows it."""
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:      # an int past Python's digit limit
        return f"<{type(value).__name__}>"
    return text[:200] + "...[truncated]" if len(text) > 200 else text


def model_not_found(name: str, valid: list[str]) -> ApiError:
    return ApiError(404, f"The model `{name}` does not exist. Valid aliases: {', '.join(valid)}.",
                    "NotFoundError", "model")


def internal_error(message: str) -> ApiError:
    return ApiError(500, message, "InternalServerError")


def engine_busy() -> ApiError:
    """vLLM's 503 for a request past ``--max-num-queued-reqs`` waiting ones."""
    return ApiError(503, "The engine is currently busy and cannot accept new requests. Please "
                    "try again later or on a different instance.", "Service Unavailable")


def prompt_too_long(window: int, count: int) -> ApiError:
    """vLLM's 400 for a prompt past the window: ``count`` tokens, "at least" when it is one
    past (vLLM tokenizes a text no further)."""
    qualifier = "at least " if count == window + 1 else ""
    return bad_request(
        f"This model's maximum context length is {window} tokens. However, your prompt "
        f"contains {qualifier}{count} input tokens, which exceeds this limit even without any "
        "output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={count})", "input_tokens")


def no_room_to_answer(max_tokens: int) -> ApiError:
    """vLLM's sampling parameters' 400 for a ``max_tokens`` below 1 (0 when a prompt fills
    the window)."""
    return bad_request(f"max_tokens must be at least 1, got {max_tokens}. "
                       f"(parameter=max_tokens, value={max_tokens})", "max_tokens")
