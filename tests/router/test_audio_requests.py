"""vLLM's audio APIs through the router: a form with the audio file, forwarded as it came to
a worker of its model (a scripted speech worker in front of an emulated one's metrics),
whole or streamed, with the OpenAI SDK as the client, through the routing file's admission
(tenants' budgets, the in-flight limit) and counted in flight on their worker."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from email import policy
from email.parser import BytesParser

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from tests.router.gateway_support import (
    MODEL,
    ROUTING_ROUND_ROBIN,
    IdsRunningLate,
    RouterFactory,
    fleet_entry,
    scripted_router,
)
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration

AUDIO = b"RIFF" + bytes(range(256)) * 400     # 100 kB that a text scan must not read as fields


class SpeechWorker:
    """Answers each form as vLLM's speech-to-text API does, remembering what it was sent."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, bytes]] = []   # (path, content type, body)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append((request.path, request.headers["Content-Type"], body))
        form = await _form(request, body)
        text = "hello from " + request.path.rsplit("/", 1)[1]
        if form.get("stream") != "true":
            return web.json_response({"text": text, "usage": {"type": "duration",
                                                              "seconds": 3}})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in text.split():
            chunk = {"id": "trsc-1", "object": "transcription.chunk", "model": form["model"],
                     "choices": [{"delta": {"content": word + " "}}]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response


async def _form(request: web.Request, body: bytes) -> dict[str, str]:
    """The form's text fields, read by the standard library's MIME parser."""
    message = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + request.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and part.get_filename() is None:
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            fields[name] = payload.decode()
    return fields


async def test_a_transcription_from_the_openai_sdk_reaches_a_worker_of_its_model(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The audio APIs were a 404 of the router's: not forwarded at all."""
    speech = SpeechWorker()
    async with scripted_router(emulated_fleet, make_router, speech.answer, "asr") as router:
        client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="k", max_retries=0)
        raw = await client.audio.transcriptions.with_raw_response.create(
            model=MODEL, file=("speech.wav", AUDIO, "audio/wav"), language="en")
        assert raw.headers["x-kvroute-worker"] == "asr"
        assert raw.headers["x-kvroute-profile"] == "utility"
        assert raw.parse().text == "hello from transcriptions"
        form = aiohttp.FormData()        # (the SDK's translations call is deprecated)
        form.add_field("file", AUDIO, filename="speech.wav", content_type="audio/wav")
        form.add_field("model", MODEL)
        async with aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/audio/translations", data=form) as resp:
            assert (await resp.json())["text"] == "hello from translations"
    [(path, content_type, body), (other_path, _, _)] = speech.received
    assert (path, other_path) == ("/v1/audio/transcriptions", "/v1/audio/translations")
    assert content_type.startswith("multipart/form-data; boundary=") and AUDIO in body
    assert router.metric("kvroute_requests_total", worker="asr", api="transcriptions",
                         status="200") == 1
    assert router.metric("kvroute_requests_total", worker="asr", api="translations",
                         status="200") == 1


async def test_a_streamed_transcription_is_relayed_as_it_comes_and_bad_forms_refused(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    speech = SpeechWorker()
    async with scripted_router(emulated_fleet, make_router, speech.answer, "asr") as router:
        url = router.url + "/v1/audio/transcriptions"
        async with aiohttp.ClientSession() as session:
            form = aiohttp.FormData()
            form.add_field("file", AUDIO, filename="speech.wav", content_type="audio/wav")
            form.add_field("model", MODEL)
            form.add_field("stream", "true")
            async with session.post(url, data=form) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
                events = (await resp.read()).split(b"\n\n")
            assert events[-2:] == [b"data: [DONE]", b""]
            assert [orjson.loads(e[6:])["choices"][0]["delta"]["content"]
                    for e in events[:-2]] == ["hello ", "from ", "transcriptions "]
            async with session.post(url, json={"model": MODEL, "file": "x"}) as resp:
                assert resp.status == 400
                assert "multipart/form-data" in (await resp.json())["error"]["message"]
            form = aiohttp.FormData()
            form.add_field("file", AUDIO, filename="speech.wav", content_type="audio/wav")
            form.add_field("model", "no-such-model")
            async with session.post(url, data=form) as resp:
                assert resp.status == 404
    assert len(speech.received) == 1


async def test_a_transcription_stream_the_worker_breaks_counts_toward_ejecting_it(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """A broken stream was taken as an answer, clearing the worker's failures."""
    async def breaks(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices": [{"delta": {"content": "hel"}}]}\n\n')
        assert request.transport is not None
        request.transport.abort()
        return response

    async with scripted_router(emulated_fleet, make_router, breaks, "asr", eject_after=1) as router:
        form = aiohttp.FormData()
        form.add_field("file", AUDIO, filename="speech.wav", content_type="audio/wav")
        form.add_field("model", MODEL)
        form.add_field("stream", "true")
        async with aiohttp.ClientSession() as session, session.post(
                router.url + "/v1/audio/transcriptions", data=form) as resp:
            body = await resp.read()
        assert b"upstream_error" in body            # the stream's end says it broke
        assert (await fleet_entry(router, "asr"))["ejected_for_s"] > 0



def _transcription_form(stream: bool = False) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("file", AUDIO, filename="speech.wav", content_type="audio/wav")
    form.add_field("model", MODEL)
    if stream:
        form.add_field("stream", "true")
    return form


async def test_transcriptions_spend_their_tenants_budget_and_an_in_flight_slot(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The audio APIs went past admission: a tenant out of requests went on transcribing, an
    in-flight limit let every form through at once, and the worker serving one counted
    nothing in flight (the next was ranked as if it were idle)."""
    release = asyncio.Event()
    arrived: list[str] = []

    async def held(request: web.Request) -> web.StreamResponse:
        arrived.append(request.headers.get("x-tenant", ""))
        await request.read()
        await release.wait()
        return web.json_response({"text": "hi", "usage": {"type": "duration", "seconds": 1}})

    routing = ROUTING_ROUND_ROBIN + (
        "admission:\n  max_in_flight: 1\n  tenants:\n"
        "    acme: {requests_per_minute: 2}\n")
    async with scripted_router(emulated_fleet, make_router, held, "asr",
                               routing=routing) as router, aiohttp.ClientSession() as session:
        url = router.url + "/v1/audio/transcriptions"

        async def transcribe(tenant: str) -> tuple[int, dict[str, str]]:
            async with session.post(url, data=_transcription_form(),
                                    headers={"x-tenant": tenant}) as resp:
                await resp.read()
                return resp.status, dict(resp.headers)

        first = asyncio.create_task(transcribe("acme"))
        await _until(lambda: len(arrived) == 1)
        entry = await fleet_entry(router, "asr")
        assert entry["inflight_requests"] == 1           # counted on its worker
        second = asyncio.create_task(transcribe("acme"))
        await _until(lambda: router.metric("kvroute_admission_waiting") == 1)
        assert len(arrived) == 1                         # it waits for the slot
        release.set()
        (status, headers), (other, other_headers) = await first, await second
        assert (status, other) == (200, 200)
        assert headers["x-ratelimit-limit-requests"] == "2"
        # what was left once each was counted
        assert headers["x-ratelimit-remaining-requests"] == "1"
        assert other_headers["x-ratelimit-remaining-requests"] == "0"
        status, headers = await transcribe("acme")       # its budget is spent
        assert status == 429 and int(headers["Retry-After"]) > 0
        assert len(arrived) == 2
        request_id = next(v for k, v in headers.items() if k.lower() == "x-request-id")
        async with session.get(router.url + "/debug/decisions?request_id="
                               + request_id) as resp:
            refused = (await resp.json())["data"]        # found by its id, as routed ones
        assert [(d["kind"], d["path"], d["tenant"], d["reason_code"], d["status"],
                 d["worker"], d["routing_sha256"]) for d in refused] == [
            ("refusal", "/v1/audio/transcriptions", "acme", "requests_per_minute", 429, None,
             hashlib.sha256(routing.encode()).hexdigest()[:12])]
        assert (await fleet_entry(router, "asr"))["inflight_requests"] == 0
        assert router.metric("kvroute_admission_in_flight") == 0
        assert router.metric("kvroute_admission_rejections_total", tenant="acme",
                             reason="requests_per_minute") == 1


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline
        await asyncio.sleep(0.01)


async def _form_stream_asked(request: web.Request, body: bytes) -> bool:
    return (await _form(request, body)).get("stream") == "true"


async def test_a_transcriptions_id_sent_again_just_after_its_client_left_is_served(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """As a routed request's: the id of a stream cut while its worker ran it stays taken a
    moment, so the same id sent again at once goes with a suffix, not to the worker's 400."""
    speech = IdsRunningLate(
        _form_stream_asked,
        {"id": "trsc-1", "object": "transcription.chunk", "model": MODEL,
         "choices": [{"delta": {"content": "word "}}]},
        {"text": "hi", "usage": {"type": "duration", "seconds": 1}})
    headers = {"x-request-id": "dictation-1"}
    async with scripted_router(emulated_fleet, make_router, speech.answer, "asr") as router, \
            aiohttp.ClientSession() as session:
        url = router.url + "/v1/audio/transcriptions"
        for _ in range(3):
            stream = await session.post(url, data=_transcription_form(stream=True),
                                        headers=headers)
            assert stream.status == 200
            for _ in range(3):
                await stream.content.readuntil(b"\n\n")
            stream.close()
            await asyncio.sleep(0.05)
            async with session.post(url, data=_transcription_form(), headers=headers) as nxt:
                assert nxt.status == 200, await nxt.text()
                assert nxt.headers["x-request-id"].startswith("dictation-1-")
    assert speech.refused == 0
