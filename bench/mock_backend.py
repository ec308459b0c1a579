"""A fast mock OpenAI/vLLM worker for the overhead race: answers at once, from bytes made once.

Owns the ``--backend mock`` worker of ``kvroute bench overhead``: an HTTP/1.1 keep-alive
server on a raw ``asyncio.Protocol`` under uvloop, one process per worker::

    python -m bench.mock_backend --port P --model NAME --output-tokens N

It does no per-request work beyond framing: every answer is encoded at start-up, so one
process serves tens of thousands of requests a second and the router in front of it, not the
worker, is the bottleneck (the method of shared/reference/overhead-anchors.md). It answers

* ``POST /v1/chat/completions`` and ``/v1/completions``: a fixed body of about 330 bytes with
  ``usage``; with ``"stream": true`` in the request body, ``N`` ``data:`` chunk events in the
  chunked transfer coding, one write per chunk, the last carrying ``finish_reason`` and
  ``usage``, then ``data: [DONE]``. A request that asks for
  ``"stream_options": {"include_usage": true}`` (kvroute always does) gets the usage as vLLM
  sends it instead: in a chunk of its own with empty ``choices``, after the ``N`` chunks;
* ``GET /health``, ``/v1/models`` (the served name and ``max_model_len``), ``/metrics`` (the
  vLLM gauges and counters the router's scraper reads, all idle), and the information
  endpoints sglang-router probes (``/get_model_info``, ``/model_info``, ``/get_server_info``,
  ``/server_info``);
* 404 for any other path, 405 for another method on a known one.

Requests are framed by ``Content-Length``; they may arrive split over reads or several in
one (pipelined). A body sent in the chunked transfer coding is refused (501, connection
closed). Whether a request streams is read from its body's bytes (``"stream": true``), not by
parsing its JSON. Token counts are fixed: every answer has the same usage.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, cast

import orjson

CREATED: Final = 1_700_000_000
PROMPT_TOKENS: Final = 256           # the usage every answer reports (about the 1,069 B body)
NUM_GPU_BLOCKS: Final = 32_768
BLOCK_SIZE: Final = 16
MAX_HEAD: Final = 64 * 1024
MAX_BODY: Final = 64 * 1024 * 1024
TOKEN_TEXT: Final = " tok"

_STREAM = re.compile(rb'"stream"\s*:\s*true')
_INCLUDE_USAGE = re.compile(rb'"include_usage"\s*:\s*true')
_HEAD_END: Final = b"\r\n\r\n"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK: Final = b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class MockConfig:
    model: str = "bench-model"
    output_tokens: int = 16
    max_model_len: int = 131_072
    tokenizer_path: str | None = None      # what the info endpoints report (sglang-router)


@dataclass(frozen=True, slots=True)
class Stream:
    """A streamed answer's writes: the head, then one chunk frame per event."""

    plain: tuple[bytes, ...]               # the last token chunk carries the usage
    with_usage: tuple[bytes, ...]          # the usage in a chunk of its own (include_usage)


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation endpoint's answers."""

    whole: bytes
    stream: Stream


@dataclass(frozen=True, slots=True)
class Answers:
    """Every answer the server sends, as bytes on the wire."""

    generation: dict[bytes, Generation]    # POST paths
    gets: dict[bytes, bytes]               # GET paths
    not_found: bytes
    not_allowed: bytes
    bad_request: bytes
    not_implemented: bytes


@dataclass(frozen=True, slots=True)
class Head:
    """What the server reads of a request's head."""

    method: bytes
    path: bytes
    length: int
    close: bool                # the client asked to close after this answer
    expects_continue: bool
    chunked: bool


def response(status: str, content_type: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 response with ``Content-Length``."""
    return (f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


def chunk_frame(payload: bytes) -> bytes:
    """``payload`` as one chunk of the chunked transfer coding."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _usage(config: MockConfig) -> dict[str, int]:
    return {"prompt_tokens": PROMPT_TOKENS,
            "total_tokens": PROMPT_TOKENS + config.output_tokens,
            "completion_tokens": config.output_tokens}


def _whole_body(config: MockConfig, chat: bool) -> bytes:
    text = TOKEN_TEXT * config.output_tokens
    choice: dict[str, object] = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
         "finish_reason": "length"} if chat else
        {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
    return orjson.dumps({"id": "chatcmpl-mock" if chat else "cmpl-mock",
                         "object": "chat.completion" if chat else "text_completion",
                         "created": CREATED, "model": config.model, "choices": [choice],
                         "usage": _usage(config)})


def _token_event(config: MockConfig, chat: bool, index: int, usage: bool) -> bytes:
    last = index == config.output_tokens - 1
    delta: dict[str, str] = {"role": "assistant"} if index == 0 else {}
    delta["content"] = TOKEN_TEXT
    choice: dict[str, object] = (
        {"index": 0, "delta": delta, "logprobs": None} if chat
        else {"index": 0, "text": TOKEN_TEXT, "logprobs": None})
    choice["finish_reason"] = "length" if last else None
    event: dict[str, object] = {"id": "chatcmpl-mock" if chat else "cmpl-mock",
                                "object": "chat.completion.chunk" if chat
                                else "text_completion",
                                "created": CREATED, "model": config.model, "choices": [choice]}
    if last and usage:
        event["usage"] = _usage(config)
    return sse(event)


def _usage_event(config: MockConfig, chat: bool) -> bytes:
    return sse({"id": "chatcmpl-mock" if chat else "cmpl-mock",
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": CREATED, "model": config.model, "choices": [],
                "usage": _usage(config)})


def _stream(config: MockConfig, chat: bool) -> Stream:
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
    end = chunk_frame(b"data: [DONE]\n\n") + _LAST_CHUNK
    plain = [chunk_frame(_token_event(config, chat, i, usage=True))
             for i in range(config.output_tokens)]
    tokens = [chunk_frame(_token_event(config, chat, i, usage=False))
              for i in range(config.output_tokens)]
    return Stream(plain=(head, *plain, end),
                  with_usage=(head, *tokens, chunk_frame(_usage_event(config, chat)), end))


def metrics_text(model: str) -> str:
    """A vLLM ``/metrics`` exposition of an idle engine: what the router's scraper reads."""
    labels = f'engine="0",model_name="{_label(model)}"'
    lines: list[str] = []
    for name, kind, help_text in (
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution "
             "batches."),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be "
             "processed."),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
            ("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of "
             "number of queried tokens."),
            ("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number "
             "of cached tokens."),
            ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from "
             "the engine.")):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} 0.0"]
    lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
              "# TYPE vllm:cache_config_info gauge",
              f'vllm:cache_config_info{{block_size="{BLOCK_SIZE}",enable_prefix_caching="True",'
              f'engine="0",num_gpu_blocks="{NUM_GPU_BLOCKS}"}} 1.0']
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _json(payload: object) -> bytes:
    return response("200 OK", "application/json", orjson.dumps(payload))


def _info_gets(config: MockConfig) -> dict[bytes, bytes]:
    tokenizer = config.tokenizer_path or config.model
    model_info = _json({"model_path": tokenizer, "tokenizer_path": tokenizer,
                        "is_generation": True, "served_model_name": config.model})
    server_info = _json({"model_path": tokenizer, "tokenizer_path": tokenizer,
                         "served_model_name": config.model,
                         "context_length": config.max_model_len,
                         "max_total_num_tokens": NUM_GPU_BLOCKS * BLOCK_SIZE})
    return {b"/get_model_info": model_info, b"/model_info": model_info,
            b"/get_server_info": server_info, b"/server_info": server_info}


def build_answers(config: MockConfig) -> Answers:
    """Encode every answer once."""
    models = _json({"object": "list", "data": [{
        "id": config.model, "object": "model", "created": CREATED, "owned_by": "vllm",
        "root": config.model, "parent": None, "max_model_len": config.max_model_len}]})
    gets = {b"/health": response("200 OK", "application/json", b""),
            b"/v1/models": models,
            b"/metrics": response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                                  metrics_text(config.model).encode()),
            **_info_gets(config)}
    generation = {
        b"/v1/chat/completions": Generation(response("200 OK", "application/json",
                                                     _whole_body(config, chat=True)),
                                            _stream(config, chat=True)),
        b"/v1/completions": Generation(response("200 OK", "application/json",
                                                _whole_body(config, chat=False)),
                                       _stream(config, chat=False))}
    return Answers(
        generation=generation, gets=gets,
        not_found=response("404 Not Found", "application/json", b'{"detail":"Not Found"}'),
        not_allowed=response("405 Method Not Allowed", "application/json",
                             b'{"detail":"Method Not Allowed"}'),
        bad_request=response("400 Bad Request", "application/json",
                             b'{"detail":"Bad Request"}'),
        not_implemented=response("501 Not Implemented", "application/json",
                                 b'{"detail":"chunked request bodies are not supported"}'))


def parse_head(head: bytes) -> Head | None:
    """The request line and the fields the server reads; None when malformed."""
    line_end = head.find(b"\r\n")
    request_line = head if line_end < 0 else head[:line_end]
    parts = request_line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return None
    method, target, version = parts
    length, connection, expect, chunked = 0, b"", False, False
    if line_end >= 0:
        for line in head[line_end + 2:].split(b"\r\n"):
            name, colon, value = line.partition(b":")
            if not colon:
                return None
            name = name.strip().lower()
            if name == b"content-length":
                if not value.strip().isdigit():
                    return None
                length = int(value)
            elif name == b"connection":
                connection = value.strip().lower()
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"expect":
                expect = value.strip().lower() == b"100-continue"
    close = connection == b"close" or (version == b"HTTP/1.0" and connection != b"keep-alive")
    return Head(method, target.partition(b"?")[0], length, close, expect, chunked)


class MockProtocol(asyncio.Protocol):
    """One client connection: requests in, precomputed answers out."""

    __slots__ = ("_answers", "_continued", "_need", "_pending", "_transport")

    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._transport: asyncio.Transport | None = None
        self._pending = bytearray()     # bytes of a request not complete yet
        self._need = 0                  # how many bytes it needs in all, when known
        self._continued = False         # 100 Continue sent for the pending request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)   # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return
            data = bytes(self._pending)
            self._pending.clear()
        self._need = 0
        consumed = self._serve(data)
        if 0 <= consumed < len(data):
            self._pending += data[consumed:]

    def _serve(self, data: bytes) -> int:
        """Answer every complete request in ``data``; how many bytes they took (-1: the
        connection was closed)."""
        position = 0
        while position < len(data):
            end = data.find(_HEAD_END, position)
            if end < 0:
                return self._too_long(data, position, MAX_HEAD)
            head = parse_head(data[position:end])
            if head is None or head.chunked or head.length > MAX_BODY:
                return self._refuse(head)
            body_end = end + 4 + head.length
            if body_end > len(data):
                self._need = body_end - position
                self._ask_for_body(head)
                return position
            self._continued = False
            self._answer(head, data[end + 4:body_end])
            position = body_end
            if head.close:
                self._close()
                return -1
        return position

    def _too_long(self, data: bytes, position: int, limit: int) -> int:
        if len(data) - position > limit:
            return self._refuse(None)
        return position

    def _ask_for_body(self, head: Head) -> None:
        if head.expects_continue and not self._continued and self._transport is not None:
            self._continued = True
            self._transport.write(_CONTINUE)

    def _refuse(self, head: Head | None) -> int:
        transport = self._transport
        if transport is not None:
            transport.write(self._answers.not_implemented if head is not None and head.chunked
                            else self._answers.bad_request)
        self._close()
        return -1

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _answer(self, head: Head, body: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        answers = self._answers
        if head.method == b"POST":
            generation = answers.generation.get(head.path)
            if generation is None:
                transport.write(answers.not_allowed if head.path in answers.gets
                                else answers.not_found)
            elif _STREAM.search(body) is None:
                transport.write(generation.whole)
            else:
                stream = generation.stream
                for write in (stream.with_usage if _INCLUDE_USAGE.search(body) is not None
                              else stream.plain):
                    transport.write(write)
            return
        found = answers.gets.get(head.path) if head.method == b"GET" else None
        if found is not None:
            transport.write(found)
        elif head.path in answers.gets or head.path in answers.generation:
            transport.write(answers.not_allowed)
        else:
            transport.write(answers.not_found)


async def serve(host: str, port: int, config: MockConfig,
                ready: Callable[[int], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT; ``ready(port)`` once listening."""
    loop = asyncio.get_running_loop()
    answers = build_answers(config)
    server = await loop.create_server(lambda: MockProtocol(answers), host, port, backlog=1024)
    stopped = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    try:
        await stopped.wait()
    finally:
        server.close()      # not waiting for the clients' keep-alive connections to close


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.mock_backend",
                                     description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0: any free port")
    defaults = MockConfig()
    parser.add_argument("--model", default=defaults.model, help="served model name")
    parser.add_argument("--output-tokens", type=int, default=defaults.output_tokens,
                        help="tokens per answer: chunks per stream (default %(default)s)")
    parser.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument("--tokenizer-path", default=None,
                        help="model_path / tokenizer_path of the info endpoints "
                             "(default: the model name)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.output_tokens < 1:
        print("--output-tokens: must be >= 1", file=sys.stderr)
        return 2
    config = MockConfig(args.model, args.output_tokens, args.max_model_len, args.tokenizer_path)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    def ready(port: int) -> None:
        print(f"listening on http://{args.host}:{port}", flush=True)

    asyncio.run(serve(args.host, args.port, config, ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
