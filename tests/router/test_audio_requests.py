"""vLLM's audio APIs through the router: a form with the audio file, forwarded as it came to
a worker of its model (a scripted speech worker in front of an emulated one's metrics),
whole or streamed, with the OpenAI SDK as the client."""

from __future__ import annotations

from email import policy
from email.parser import BytesParser

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from tests.router.gateway_support import (
    MODEL,
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
                assert resp.headers["Content-Type"] == "text/event-stream"
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

