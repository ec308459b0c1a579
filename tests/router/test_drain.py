"""Stopping the router gracefully: on SIGTERM it stops listening at once (new connections
are refused) and lets the streams in flight finish, up to ``--drain-timeout``; past it they
are cut, and the process still exits 0. With ``serve --processes N`` every process drains.

Real processes: ``kvroute up`` (router and one emulated H100 in real time), and
``kvroute serve --processes 2`` in front of an emulated worker of its own process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml

from tests.router.gateway_support import (
    MODEL,
    REPO_ROOT,
    fleet_data,
    url_fleet_file,
    wait_healthy,
)
from tests.router.test_commands import _children, _stop_with_children
from workers.emulator.process import EmulatorProcess
from workers.ports import free_port

pytestmark = pytest.mark.integration
REAL_TIME = {"time_scale": 1.0}


def stream_body(tokens: int) -> dict[str, object]:
    return {"model": MODEL, "prompt": "Tell me a story.", "max_tokens": tokens,
            "ignore_eos": True, "stream": True}


async def read_stream(url: str, tokens: int, started: asyncio.Event | None = None) -> list[bytes]:
    """The ``data:`` lines of one streamed completion, as far as the router sends them."""
    lines: list[bytes] = []
    async with aiohttp.ClientSession() as http, http.post(
            f"{url}/v1/completions", json=stream_body(tokens)) as resp:
        assert resp.status == 200
        try:
            async for line in resp.content:
                if line.startswith(b"data:"):
                    lines.append(line.strip())
                    if started is not None and len(lines) == 3:
                        started.set()
        except aiohttp.ClientPayloadError:
            pass                 # cut: the connection ended mid-stream
    return lines


def cut_by_the_router(lines: list[bytes]) -> str:
    """The message of the error event that ends a stream the router's drain cut (before
    ``[DONE]``)."""
    assert lines[-1] == b"data: [DONE]", lines[-3:]
    message: str = json.loads(lines[-2].removeprefix(b"data: "))["error"]["message"]
    assert "The router is stopping and cut this stream before its end" in message, message
    return message


async def refused(url: str) -> bool:
    """Whether a new connection is refused (a connection taken just as the listener closed,
    then reset, tells neither: False, for a poll to ask again)."""
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as resp:
            await resp.read()
            return False
    except aiohttp.ClientConnectorError:
        return True
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
        return False


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Poll ``check`` every 0.05 s until it holds (a loaded machine takes its time to act
    on a signal: a fixed sleep failed there)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)


async def health_status(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as resp:
        await resp.read()
        return resp.status


async def stopping(url: str) -> bool:
    """Whether ``/health`` answers 503 ``stopping`` (on a new connection)."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as resp:
        return (resp.status, (await resp.json())["status"]) == (503, "stopping")


async def admission_waiting(url: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    found = re.search(r"^kvroute_admission_waiting (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def waiting_one(url: str) -> bool:
    return await admission_waiting(url) == 1


async def serving_one(url: str) -> bool:
    """Whether the router serves one request (admitted: on its way to its worker)."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    return re.search(r"^kvroute_admission_in_flight 1\.0$", text, re.M) is not None


def log_says(log: Path, text: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return text in log.read_text(errors="replace")
    return check


def listening_sockets(port: int) -> int:
    """How many sockets listen on 127.0.0.1:``port`` (one per ``SO_REUSEPORT`` process)."""
    wanted = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == wanted and row.split()[3] == "0A")


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether ``pid`` has ended (or is a zombie waiting for init) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def start_up(tmp_path: Path, port: int, *extra: str, decision_log: Path | None = None
             ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``kvroute up`` with one emulated H100 (its decision log to ``decision_log``)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data({"h100-0": ("h100", REAL_TIME)},
                                               {"h100-0": free_port()})))
    log = tmp_path / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "up", "--fleet", str(fleet), "--routing",
             str(REPO_ROOT / "config/routing.yaml"), "--port", str(port), *extra],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=out,
            env=None if decision_log is None else {**os.environ,
                                                   "KVROUTE_DECISION_LOG": str(decision_log)})
    return proc, fleet, log


def outcome_statuses(decision_log: Path) -> list[object]:
    """The status of each attempt's outcome line in a decision log."""
    lines = [orjson.loads(line) for line in decision_log.read_bytes().splitlines()]
    return [line.get("status") for line in lines if line.get("kind") == "outcome"]


async def test_sigterm_refuses_new_connections_and_lets_streams_finish(
        tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, fleet, log = start_up(tmp_path, port)
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        started = asyncio.Event()
        stream = asyncio.create_task(read_stream(url, 1000, started))  # about 10 s on an H100
        await asyncio.wait_for(started.wait(), 20)
        os.kill(proc.pid, signal.SIGTERM)
        await until(lambda: refused(url), 5, "new connections refused")   # no longer listening
        assert not stream.done()                                          # ... while it runs
        lines = await asyncio.wait_for(stream, 30)
        assert lines[-1] == b"data: [DONE]" and len(lines) == 1001   # ... but it finished
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        _stop_with_children(proc, fleet)
    assert ("stopping: no new connections; 1 request(s) in flight get up to 60 s to finish"
            in log.read_text())


async def test_a_drain_delay_keeps_serving_while_health_says_stopping(tmp_path: Path) -> None:
    """A load balancer that learns of a leaving backend only from its health checks, and
    does not retry a refused connection, answered its clients errors: the port closed at
    SIGTERM while ``/health`` had said 200 up to then. With ``--drain-delay`` the router goes
    on listening and serving that long while ``/health`` says 503, then drains."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, fleet, log = start_up(tmp_path, port, "--drain-delay", "5")
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        assert await health_status(url) == 200
        signalled = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        await until(lambda: stopping(url), 3, "/health says stopping")
        async with aiohttp.ClientSession() as fresh, fresh.post(   # a new connection: taken
                f"{url}/v1/completions", json=stream_body(5)) as resp:
            assert resp.status == 200                 # and still served
            assert (await resp.read()).rstrip().endswith(b"data: [DONE]")
        assert time.monotonic() - signalled < 4.5
        await until(lambda: refused(url), 15, "new connections refused after the delay")
        assert time.monotonic() - signalled >= 4.9       # listening ended with the delay
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        _stop_with_children(proc, fleet)
    assert "stopping: /health answers 503 while requests are still taken for 5 s" in (
        log.read_text())


async def test_a_request_waiting_for_a_slot_is_answered_503_when_the_drain_begins(
        tmp_path: Path) -> None:
    """Waiting for an in-flight slot, a request waited out the drain and was cut with no
    answer, though it had reached no worker and another router could take it."""
    routing = tmp_path / "routing.yaml"
    routing.write_text((REPO_ROOT / "config/routing.yaml").read_text()
                       + "admission: {max_in_flight: 1, wait_timeout_s: 60}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, fleet, log = start_up(tmp_path, port, "--routing", str(routing))
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        started = asyncio.Event()
        stream = asyncio.create_task(read_stream(url, 200, started))   # holds the one slot
        await asyncio.wait_for(started.wait(), 20)
        async with aiohttp.ClientSession() as http:
            waiting = asyncio.create_task(http.post(f"{url}/v1/completions",
                                                    json=stream_body(5)))
            await until(lambda: waiting_one(url), 10, "a request waits for the slot")
            os.kill(proc.pid, signal.SIGTERM)
            resp = await asyncio.wait_for(waiting, 10)
            error = await resp.json()
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        assert error["error"]["message"].startswith("The router is stopping")
        lines = await asyncio.wait_for(stream, 30)
        assert lines[-1] == b"data: [DONE]"           # the one in flight finished
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        _stop_with_children(proc, fleet)
    assert "; 1 waiting for a slot answered 503" in log.read_text()


async def test_a_stream_longer_than_the_drain_timeout_is_cut(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    decisions = tmp_path / "decisions.jsonl"
    proc, fleet, log = start_up(tmp_path, port, "--drain-timeout", "5", decision_log=decisions)
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        started = asyncio.Event()
        stream = asyncio.create_task(read_stream(url, 4000, started))   # about 40 s
        await asyncio.wait_for(started.wait(), 20)
        signalled = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        lines = await asyncio.wait_for(stream, 30)
        cut_after = time.monotonic() - signalled
        assert await asyncio.to_thread(proc.wait, 30) == 0
        # cut when the drain ends, not when it has run twice over (aiohttp's own two waits)
        assert 4.5 < cut_after < 9.0, cut_after
        assert 3 <= len(lines) < 4000
        # told so by an error event, then [DONE] (the connection was closed with no word)
        assert "(drain timeout)" in cut_by_the_router(lines)
    finally:
        _stop_with_children(proc, fleet)
    text = log.read_text()
    assert "get up to 5 s to finish" in text
    assert "drain timeout: cutting 1 request(s) still in flight" in text
    assert outcome_statuses(decisions) == [503]       # not a client that left (499)


async def test_a_whole_answer_the_drain_cuts_is_answered_503(tmp_path: Path) -> None:
    """A request whose worker had not answered when the drain ran out had its connection
    closed with no answer; it is answered 503 (worth sending again, to another router)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    decisions = tmp_path / "decisions.jsonl"
    proc, fleet, log = start_up(tmp_path, port, "--drain-timeout", "3", decision_log=decisions)
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        body = {**stream_body(4000), "stream": False}               # about 40 s
        async with aiohttp.ClientSession() as http:
            answer = asyncio.create_task(http.post(f"{url}/v1/completions", json=body))
            await until(lambda: serving_one(url), 20, "the request is admitted")
            os.kill(proc.pid, signal.SIGTERM)
            resp = await asyncio.wait_for(answer, 30)
            payload = await resp.json()
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert resp.status == 503, payload
        assert resp.headers["Retry-After"] == "1"
        assert payload["error"]["code"] == "router_stopping", payload
        assert "(drain timeout)" in payload["error"]["message"], payload
    finally:
        _stop_with_children(proc, fleet)
    assert "drain timeout: cutting 1 request(s) still in flight" in log.read_text()
    assert outcome_statuses(decisions) == [503]


async def test_a_second_signal_cuts_the_drain_short(tmp_path: Path) -> None:
    """Pressed again, Ctrl-C (or a second SIGTERM) changed nothing: the drain ran its whole
    timeout, with no word of the second signal."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, fleet, log = start_up(tmp_path, port, "--drain-timeout", "30")
    try:
        wait_healthy(url, proc, timeout_s=30.0)
        started = asyncio.Event()
        stream = asyncio.create_task(read_stream(url, 4000, started))   # about 40 s
        await asyncio.wait_for(started.wait(), 20)
        os.kill(proc.pid, signal.SIGTERM)
        await until(log_says(log, "stopping: no new connections"), 10, "the drain begins")
        signalled = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        lines = await asyncio.wait_for(stream, 30)
        assert time.monotonic() - signalled < 10.0          # the drain would take 30 s
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert "(a second signal)" in cut_by_the_router(lines)
    finally:
        _stop_with_children(proc, fleet)
    assert "a second signal: cutting 1 request(s) still in flight" in log.read_text()


def requests_answered(metrics_text: str) -> float:
    """The sum of kvroute_requests_total in a /metrics page."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
               if line.startswith("kvroute_requests_total{"))


async def test_the_port_of_the_process_alone_is_scraped_through_the_drain(
        tmp_path: Path) -> None:
    """With ``--metrics-port`` that port closed with the shared one at SIGTERM: what the
    requests finishing during the drain counted was never scraped, nor the drain itself.
    It answers until the last request in flight ends, on the connection Prometheus keeps too;
    a request sent there meanwhile is refused as the stopping router's (503, another router
    takes it) and ``/health`` says so."""
    with EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=1.0) as worker:
        port = free_port()
        metrics_port = free_port()
        while metrics_port == port:
            metrics_port = free_port()
        url, own = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
        fleet = url_fleet_file(tmp_path, {"h100-0": worker.url})
        log = tmp_path / "router.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet),
                 "--routing", str(REPO_ROOT / "config/routing.yaml"), "--port", str(port),
                 "--metrics-port", str(metrics_port)],
                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=out)
        try:
            wait_healthy(url, proc, timeout_s=30.0)
            events = [asyncio.Event(), asyncio.Event()]
            short, long = (asyncio.create_task(read_stream(url, n, e))
                           for n, e in zip((20, 1000), events, strict=True))   # 0.2 s, 10 s
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 20)
            # a client's pooled connection to the shared port, idle at the signal; and a
            # request whose body is still coming when it comes
            idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
            idle_writer.write(b"GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n")
            await idle_reader.readuntil(b"}")
            body = orjson.dumps(stream_body(5) | {"stream": False})
            slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
            slow_writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                              + body[:10])
            await slow_writer.drain()
            await asyncio.sleep(0.5)                # its head read: the request has begun
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{own}/metrics") as resp:
                    before = requests_answered(await resp.text())
                os.kill(proc.pid, signal.SIGTERM)
                # closed, where it stayed open and answered each request 503 for the drain
                assert await asyncio.wait_for(idle_reader.read(), 5) == b""
                idle_writer.close()
                slow_writer.write(body[10:])        # it arrived before the stop: served
                head = await asyncio.wait_for(slow_reader.readuntil(b"\r\n"), 10)
                assert head.startswith(b"HTTP/1.1 200"), head
                slow_writer.close()
                assert (await asyncio.wait_for(short, 10))[-1] == b"data: [DONE]"
                await until(lambda: refused(url), 5, "the shared port refuses")
                async with http.get(f"{own}/metrics") as resp:       # drained, still scraped
                    assert resp.status == 200
                    assert requests_answered(await resp.text()) >= before + 1   # (the slow one)
                async with http.get(f"{own}/health") as resp:    # not ready: it is leaving
                    assert (resp.status, (await resp.json())["status"]) == (503, "stopping")
                async with http.post(f"{own}/v1/completions", json=stream_body(5)) as resp:
                    error = await resp.json()
                    assert (resp.status, resp.headers["Retry-After"]) == (503, "1")
                    assert error["error"]["message"].startswith("The router is stopping")
                assert not long.done()
            lines = await asyncio.wait_for(long, 30)
            assert lines[-1] == b"data: [DONE]" and len(lines) == 1001
            assert await asyncio.to_thread(proc.wait, 30) == 0
            await until(lambda: refused(own), 5, "its own port gone with the last request")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def serve_two(tmp_path: Path, worker_url: str, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    fleet = url_fleet_file(tmp_path, {"h100-0": worker_url})
    log = tmp_path / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet),
             "--routing", str(REPO_ROOT / "config/routing.yaml"), "--port", str(port),
             "--processes", "2"],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=out)
    return proc, log


async def both_listening(port: int) -> None:
    for _ in range(300):                   # the second process is listening too
        if listening_sockets(port) == 2:
            break
        await asyncio.sleep(0.1)
    assert listening_sockets(port) == 2


async def test_every_router_process_drains(tmp_path: Path) -> None:
    """Streams of two lengths, so that one process ends its drain first: its parent then
    sent the children SIGTERM again, which a child took for a second signal and cut its
    longer streams."""
    with EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=1.0) as worker:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, log = serve_two(tmp_path, worker.url, port)
        try:
            wait_healthy(url, proc, timeout_s=30.0)
            await both_listening(port)
            children = _children(proc.pid)
            lengths = [60, 60, 60, 400, 400, 400, 400, 400]
            events = [asyncio.Event() for _ in lengths]
            streams = [asyncio.create_task(read_stream(url, n, e))
                       for n, e in zip(lengths, events, strict=True)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 30)
            os.kill(proc.pid, signal.SIGTERM)
            await until(lambda: asyncio.to_thread(lambda: listening_sockets(port) == 0), 10,
                        "neither process listens any more")
            results = await asyncio.wait_for(asyncio.gather(*streams), 60)
            assert all(lines[-1] == b"data: [DONE]" and len(lines) == n + 1
                       for lines, n in zip(results, lengths, strict=True))
            assert await asyncio.to_thread(proc.wait, 30) == 0
            assert children
            for pid in children:              # the replica and multiprocessing's tracker
                assert await asyncio.to_thread(gone, pid), Path(f"/proc/{pid}/cmdline").read_bytes()
            # each process counts the streams it holds itself: together, the six
            counts = [int(m) for m in re.findall(
                r"stopping: no new connections; (\d+) request\(s\) in flight", log.read_text())]
            assert len(counts) == 2 and sum(counts) == len(lengths), counts
            assert "a second signal" not in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_a_second_signal_to_the_parent_cuts_every_processs_drain(
        tmp_path: Path) -> None:
    with EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=1.0) as worker:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, log = serve_two(tmp_path, worker.url, port)
        try:
            wait_healthy(url, proc, timeout_s=30.0)
            await both_listening(port)
            # twelve: both processes hold some (all on one: one chance in 2,048)
            events = [asyncio.Event() for _ in range(12)]
            streams = [asyncio.create_task(read_stream(url, 4000, e)) for e in events]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 30)
            os.kill(proc.pid, signal.SIGTERM)
            await until(lambda: asyncio.to_thread(
                lambda: log.read_text().count("stopping: no new connections") == 2), 10,
                "both processes drain")
            signalled = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            results = await asyncio.wait_for(asyncio.gather(*streams), 30)
            assert time.monotonic() - signalled < 10.0          # the drain would take 60 s
            assert all("(a second signal)" in cut_by_the_router(lines) for lines in results)
            assert await asyncio.to_thread(proc.wait, 30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert log.read_text().count("a second signal: cutting") == 2, log.read_text()[-2000:]


async def test_a_replica_counts_only_its_own_requests_in_flight(tmp_path: Path,
                                                                redis_url: str) -> None:
    """Replicas sharing a Redis see each other's requests in flight (for routing); stopping
    one drains, and says it drains, only the requests it holds itself."""
    with EmulatorProcess(gpu="h100", model="llama-3-8b", served_model_names=[MODEL],
                         time_scale=1.0) as worker:
        fleet = url_fleet_file(tmp_path, {"h100-0": worker.url})
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []
        urls: list[str] = []
        try:
            for name in ("a", "b"):
                port = free_port()
                urls.append(f"http://127.0.0.1:{port}")
                logs.append(tmp_path / f"router-{name}.log")
                with logs[-1].open("wb") as out:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet),
                         "--routing", str(REPO_ROOT / "config/routing.yaml"), "--port",
                         str(port), "--redis-url", redis_url, "--replica-id", f"router-{name}"],
                        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=out))
            for url, proc in zip(urls, procs, strict=True):
                wait_healthy(url, proc, timeout_s=30.0)
            events = [asyncio.Event() for _ in range(2)]
            streams = [asyncio.create_task(read_stream(urls[0], 600, e)) for e in events]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 30)
            await asyncio.sleep(2.0)         # the replicas' counts meet through Redis
            os.kill(procs[1].pid, signal.SIGTERM)          # the replica holding none
            assert await asyncio.to_thread(procs[1].wait, 30) == 0
            os.kill(procs[0].pid, signal.SIGTERM)
            results = await asyncio.wait_for(asyncio.gather(*streams), 60)
            assert all(lines[-1] == b"data: [DONE]" for lines in results)
            assert await asyncio.to_thread(procs[0].wait, 30) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert "stopping: no new connections; 0 request(s) in flight" in logs[1].read_text()
    assert "stopping: no new connections; 2 request(s) in flight" in logs[0].read_text()
