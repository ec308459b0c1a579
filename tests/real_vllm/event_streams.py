"""Requests to an engine or emulator and the comparison of their answers, shared by the
real-vLLM tests of the Responses and Messages APIs (``event: KIND`` / ``data: {...}``
streams)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.real_vllm.test_emulator_fidelity import paths


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def stream_events(url: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(
            url, json={**body, "stream": True}) as resp:
        text = (await resp.read()).decode()
    events = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        events.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def deltas_merged(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``events`` with each run of one kind of delta event as its first: how many deltas a
    stream has is the engine's to vary (vLLM merges the outputs of a request whose consumer
    lags behind the engine, ``RequestOutputCollector``: a loaded machine sends fewer, larger
    deltas)."""
    merged: list[tuple[str, Any]] = []
    for kind, data in events:
        if not (merged and merged[-1][0] == kind and kind.endswith(("_delta", ".delta"))):
            merged.append((kind, data))
    return merged


async def assert_answers_alike(engine_url: str, emulator_url: str, body: dict[str, Any],
                               event_key_order: bool = False) -> None:
    """The emulator answers ``body`` (whole, then streamed) as the engine does: the same
    status and key paths, top-level and usage keys in order, the same event kinds in order
    (each run of deltas as one: ``deltas_merged``), each event with the engine's key paths
    (and keys in its order, with ``event_key_order``).
    The URLs name the endpoint (``…/v1/responses``)."""
    real_status, real = await post(engine_url, body)
    emulated_status, emulated = await post(emulator_url, body)
    assert (emulated_status, paths(emulated)) == (real_status, paths(real))
    assert list(emulated) == list(real) and list(emulated["usage"]) == list(real["usage"])
    real_events = deltas_merged(await stream_events(engine_url, body))
    emulated_events = deltas_merged(await stream_events(emulator_url, body))
    real_kinds = [kind for kind, _ in real_events]
    emulated_kinds = [kind for kind, _ in emulated_events]
    assert emulated_kinds == real_kinds, (emulated_kinds, real_kinds)
    for (kind, mine), (_, theirs) in zip(emulated_events, real_events, strict=True):
        assert paths(mine) == paths(theirs), kind
        if event_key_order:
            assert list(mine) == list(theirs), kind
