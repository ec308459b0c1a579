"""vLLM-shaped API errors: one exception type and its JSON body.

Body (vLLM v0.33): ``{"error": {"message": ..., "type": ..., "param": ..., "code": status}}``.
"""

from __future__ import annotations

import reprlib
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


def validation_error(param: str, msg: str, kind: str, value: Any) -> ApiError:
    """A request-validation failure, shaped like vLLM's pydantic error (type "Bad Request")."""
    try:
        shown = repr(value)
    except RecursionError:          # nested past Python's limit: the first levels only
        shown = reprlib.repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    loc = f"body.{param}" if param else "body"     # vLLM 0.32: one dotted string
    detail = f"{{'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}', 'input': {shown}}}"
    return ApiError(400, f"1 validation error:\n  {detail}", "Bad Request", loc)


def model_not_found(name: str, valid: list[str]) -> ApiError:
    return ApiError(404, f"The model `{name}` does not exist. Valid aliases: {', '.join(valid)}.",
                    "NotFoundError", "model")


def internal_error(message: str) -> ApiError:
    return ApiError(500, message, "InternalServerError")
