"""A body that stops arriving mid-way is answered 408 after ``body_timeout_s``, on the routed
and the utility endpoints, and the router goes on serving."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.router.gateway_support import RouterFactory, url_fleet

pytestmark = pytest.mark.integration


async def _stalled_upload(port: int, path: str) -> tuple[str, dict[str, object]]:
    """Headers announcing 1,000 bytes, then 9 of them and silence: the status line and body
    of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
    finally:
        writer.close()
    return head.split(b"\r\n")[0].decode(), json.loads(body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_a_stalled_upload_is_answered_408(make_router: RouterFactory, path: str) -> None:
    router = await make_router(url_fleet({"w0": "http://127.0.0.1:9"}), body_timeout_s=0.5)
    started = asyncio.get_running_loop().time()
    status, body = await _stalled_upload(router.port, path)
    assert status == "HTTP/1.1 408 Request Timeout"
    assert body["error"] == {"message": "Request body not received within 0.5 s.",
                             "type": "invalid_request_error", "param": None,
                             "code": "request_timeout"}
    assert asyncio.get_running_loop().time() - started < 5


def test_the_limit_must_be_positive_and_finite() -> None:
    from pathlib import Path

    from router.settings import Settings
    for bad, message in ((0.0, "body_timeout_s: must be positive"),
                         (float("nan"), "body_timeout_s: must be a finite number of seconds")):
        with pytest.raises(ValueError, match=message):
            Settings(fleet_path=Path("f"), routing_path=Path("r"), body_timeout_s=bad)
