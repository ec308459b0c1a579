"""The fast mock worker over a real socket on 127.0.0.1, and a short race through it."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.backends import MockBackends, chat_body
from bench.mock_backend import MockConfig, MockProtocol, build_answers, parse_head
from bench.overhead import OverheadConfig, run_overhead
from bench.targets import MODEL
from workers.scraper import parse_metrics, parse_models

pytestmark = pytest.mark.integration

Response = tuple[int, dict[str, str], bytes]


@pytest.fixture(scope="module")
def mock() -> Iterator[MockBackends]:
    with MockBackends(count=1, output_tokens=16, cpus=None) as backends:
        yield backends


@pytest.fixture
def conn(mock: MockBackends) -> Iterator[socket.socket]:
    port = int(mock.urls[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # each send a segment
        yield sock


def request(method: str, path: str, body: bytes = b"", *extra: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *extra]
    if method == "POST":
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Reader:
    """Reads HTTP/1.1 responses off one connection, framed as the server framed them."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = sock.makefile("rb")

    def response(self) -> Response:
        status = int(self._file.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := self._file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            return status, headers, self._chunks()
        return status, headers, self._file.read(int(headers["content-length"]))

    def _chunks(self) -> bytes:
        body = b""
        while (size := int(self._file.readline().strip(), 16)) > 0:
            body += self._file.read(size)
            assert self._file.read(2) == b"\r\n"
        assert self._file.read(2) == b"\r\n"
        return body

    def at_eof(self) -> bool:
        return self._file.read(1) == b""


def exchange(sock: socket.socket, *parts: bytes, pause_s: float = 0.0) -> Response:
    for part in parts:
        sock.sendall(part)
        time.sleep(pause_s)
    return Reader(sock).response()


def events(body: bytes) -> list[bytes]:
    return [event.removeprefix(b"data: ") for event in body.split(b"\n\n") if event]


def test_whole_chat_answer_has_usage(conn: socket.socket) -> None:
    status, headers, body = exchange(conn, request(
        "POST", "/v1/chat/completions", orjson.dumps(chat_body())))
    answer = orjson.loads(body)
    assert (status, headers["content-type"]) == (200, "application/json")
    assert 300 <= len(body) <= 360
    assert answer["object"] == "chat.completion" and answer["model"] == MODEL
    assert answer["choices"][0]["message"]["content"] == " tok" * 16
    assert answer["usage"]["completion_tokens"] == 16


def test_whole_completion_answer(conn: socket.socket) -> None:
    status, _, body = exchange(conn, request("POST", "/v1/completions?x=1",
                                             b'{"prompt": "hi", "stream": false}'))
    answer = orjson.loads(body)
    assert status == 200 and answer["object"] == "text_completion"
    assert answer["choices"][0]["text"] == " tok" * 16 and answer["usage"]["total_tokens"] > 16


def test_streamed_chat_sends_every_chunk_then_done(conn: socket.socket) -> None:
    status, headers, body = exchange(conn, request(
        "POST", "/v1/chat/completions", orjson.dumps(chat_body(stream=True))))
    chunks = events(body)
    assert (status, headers["content-type"]) == (200, "text/event-stream")
    assert len(chunks) == 17 and chunks[-1] == b"[DONE]"
    tokens = [orjson.loads(chunk) for chunk in chunks[:-1]]
    assert tokens[0]["choices"][0]["delta"] == {"role": "assistant", "content": " tok"}
    assert [t["choices"][0]["finish_reason"] for t in tokens] == [None] * 15 + ["length"]
    assert "usage" in tokens[-1] and not any("usage" in t for t in tokens[:-1])


def test_a_stream_asking_for_usage_gets_it_in_a_chunk_of_its_own(conn: socket.socket) -> None:
    body = b'{"prompt": "hi", "stream": true, "stream_options": {"include_usage": true}}'
    _, _, answer = exchange(conn, request("POST", "/v1/completions", body))
    chunks = events(answer)
    assert len(chunks) == 18 and chunks[-1] == b"[DONE]"
    usage = orjson.loads(chunks[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 16
    last_token = orjson.loads(chunks[-3])
    assert last_token["object"] == "text_completion" and "usage" not in last_token
    assert last_token["choices"][0]["finish_reason"] == "length"


def test_two_requests_on_one_connection_and_two_in_one_write(conn: socket.socket) -> None:
    plain = request("POST", "/v1/chat/completions", orjson.dumps(chat_body()))
    streamed = request("POST", "/v1/chat/completions", orjson.dumps(chat_body(stream=True)))
    reader = Reader(conn)
    for one in (plain, streamed):
        conn.sendall(one)
        assert reader.response()[0] == 200
    conn.sendall(streamed + request("GET", "/health") + plain)      # pipelined
    answers = [reader.response() for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert events(answers[0][2])[-1] == b"[DONE]" and answers[1][2] == b""
    assert orjson.loads(answers[2][2])["object"] == "chat.completion"


def test_a_request_split_across_writes(conn: socket.socket) -> None:
    whole = request("POST", "/v1/chat/completions", orjson.dumps(chat_body(stream=True)))
    head_end = whole.index(b"\r\n\r\n")
    parts = (whole[:7], whole[7:head_end + 2], whole[head_end + 2:head_end + 40],
             whole[head_end + 40:])
    status, _, body = exchange(conn, *parts, pause_s=0.02)
    assert status == 200 and len(events(body)) == 17


def test_get_endpoints(conn: socket.socket) -> None:
    reader = Reader(conn)

    def get(path: str) -> Response:
        conn.sendall(request("GET", path))
        return reader.response()

    assert get("/health")[0] == 200
    status, _, body = get("/v1/models")
    assert status == 200
    assert parse_models(orjson.loads(body), MODEL).served_models == (MODEL,)
    assert parse_models(orjson.loads(body), MODEL).max_model_len == 131_072
    status, headers, body = get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    sample = parse_metrics(body.decode())
    assert (sample.running, sample.waiting, sample.kv_usage) == (0, 0, 0.0)
    assert (sample.block_size, sample.num_gpu_blocks) == (16, 32_768)
    assert orjson.loads(get("/get_model_info")[2])["model_path"] == MODEL
    assert get("/")[0] == 404 and get("/v1/embeddings")[0] == 404
    assert get("/v1/chat/completions")[0] == 405


def test_connection_close_is_honoured(conn: socket.socket) -> None:
    conn.sendall(request("GET", "/health", b"", "Connection: close"))
    reader = Reader(conn)
    assert reader.response()[0] == 200 and reader.at_eof()


def test_a_chunked_request_body_is_refused(conn: socket.socket) -> None:
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"2\r\n{}\r\n0\r\n\r\n")
    reader = Reader(conn)
    assert reader.response()[0] == 501 and reader.at_eof()


def test_expect_continue_gets_100_before_the_body(conn: socket.socket) -> None:
    body = orjson.dumps(chat_body())
    whole = request("POST", "/v1/chat/completions", body, "Expect: 100-continue")
    conn.sendall(whole[:-len(body)])
    assert conn.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert exchange(conn, body)[0] == 200


@pytest.mark.parametrize(("head", "expected"), [
    (b"GET /health HTTP/1.1\r\nHost: x", (b"GET", b"/health", 0, False)),
    (b"POST /v1/completions HTTP/1.1\r\ncontent-LENGTH:  12 \r\nConnection: Close",
     (b"POST", b"/v1/completions", 12, True)),
    (b"GET /metrics?name=x HTTP/1.0", (b"GET", b"/metrics", 0, True)),
    (b"GET / HTTP/1.0\r\nConnection: keep-alive", (b"GET", b"/", 0, False)),
])
def test_parse_head(head: bytes, expected: tuple[bytes, bytes, int, bool]) -> None:
    parsed = parse_head(head)
    assert parsed is not None
    assert (parsed.method, parsed.path, parsed.length, parsed.close) == expected


@pytest.mark.parametrize("head", [b"GET /", b"GET / HTTP/2", b"GET / HTTP/1.1\r\nno colon",
                                  b"POST / HTTP/1.1\r\nContent-Length: -1"])
def test_malformed_heads(head: bytes) -> None:
    assert parse_head(head) is None


class FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def test_requests_fed_a_byte_at_a_time_get_the_same_answers() -> None:
    answers = build_answers(MockConfig())
    chat = answers.generation[b"/v1/chat/completions"]
    protocol, transport = MockProtocol(answers), FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    pipelined = (request("POST", "/v1/chat/completions", orjson.dumps(chat_body()))
                 + request("GET", "/health")
                 + request("POST", "/v1/chat/completions", orjson.dumps(chat_body(stream=True))))
    for i in range(len(pipelined)):
        protocol.data_received(pipelined[i:i + 1])
    assert transport.written == (chat.whole + answers.gets[b"/health"]
                                 + b"".join(chat.stream.plain))
    assert not transport.closed


def test_answers_follow_the_output_tokens() -> None:
    stream = build_answers(MockConfig(output_tokens=3)).generation[b"/v1/chat/completions"].stream
    assert len(stream.plain) == 1 + 3 + 1 and len(stream.with_usage) == 1 + 3 + 1 + 1


def test_stopping_the_backends_ends_their_processes_at_once() -> None:
    backends = MockBackends(count=2, cpus=None).start()
    pids = backends.pids
    assert len(set(pids)) == 2 and len(set(backends.urls)) == 2
    port = int(backends.urls[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as idle:
        assert exchange(idle, request("GET", "/health"))[0] == 200     # kept alive
        started = time.monotonic()
        backends.stop()
        assert time.monotonic() - started < 2.0     # SIGTERM, not the kill after the grace
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_short_race_of_kvroute_rr_through_the_mock(tmp_path: Path) -> None:
    config = OverheadConfig(targets=("kvroute-rr",), duration_s=1.0, warmup_s=0.3,
                            pinned=False, backend="mock")
    [result] = run_overhead(config, lambda message: None)
    assert result.skipped is None and result.non_stream and result.stream
    for phase in (result.non_stream, result.stream):
        assert phase.load.errors == 0 and phase.load.completed > 0
        assert phase.router_cpu_us_per_request is not None
        assert phase.router_cpu_us_per_request > 0
    assert result.stream.load.mean_events == 17.0          # 16 token chunks + [DONE]
