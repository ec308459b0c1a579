"""vLLM's score, rerank and pooling APIs on a real vLLM (CPU) pooling engine, through
kvroute, and the emulator against it.

A third engine, for this module only (``embedding_fleet``: all-MiniLM-L6-v2 with its real
weights, ``conftest.py``), which vLLM scores with as a bi-encoder (the cosine of two
embeddings). Through kvroute each answer is the engine's own for the same body; what
kvroute refuses before any worker is refused as the engine refuses it (the sides' pairing
in its very words). The emulator's answers have the engine's keys in its order, the same
shapes and the same ranking of documents whose overlap with the query decides it, and its
refusals are the engine's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import numpy as np
import pytest

from tests.real_vllm.conftest import EMBEDDER
from tests.real_vllm.event_streams import post
from tests.real_vllm.test_emulator_fidelity import paths
from workers.emulator.process import EmulatorProcess
from workers.fleet import FleetConfig

QUERY = "where is my parcel"
# ranked by their overlap with the query, for the engine and the emulator alike
DOCUMENTS = ["the integral of x squared", "my parcel is late", "where is my parcel now"]
ANSWERED: list[tuple[str, dict[str, Any]]] = [
    ("/score", {"text_1": QUERY, "text_2": DOCUMENTS}),
    ("/v1/score", {"queries": [QUERY, "integrals"], "documents": DOCUMENTS[1:]}),
    ("/score", {"data_1": QUERY, "data_2": DOCUMENTS[0]}),
    ("/rerank", {"query": QUERY, "documents": DOCUMENTS}),
    ("/v1/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": 2}),
    ("/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": True}),     # pydantic's 1
    ("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS[2]}),
    ("/pooling", {"input": [QUERY, "hello"]}),
    # texts past the window, cut as the request asks (the router lets them through)
    ("/score", {"text_1": "word " * 600, "text_2": "b", "truncate_prompt_tokens": -1}),
    ("/rerank", {"query": QUERY, "documents": ["word " * 600, DOCUMENTS[1]],
                 "max_tokens_per_doc": 64}),
    ("/pooling", {"input": "word " * 600, "truncate_prompt_tokens": 32}),
    ("/pooling", {"input": "word " * 600, "truncate_prompt_tokens": "32"}),   # lax, as pydantic
]
# refused by vLLM as it validates, and so by the emulator
REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("/score", {"text_1": "a"}),
    ("/score", {}),
    ("/score", {"text_1": ["a", "b"], "text_2": ["x", "y", "z"]}),
    ("/score", {"text_1": [], "text_2": ["x"]}),
    ("/score", {"text_1": "a", "text_2": []}),
    ("/score", {"text_1": "word " * 600, "text_2": "b"}),
    ("/rerank", {"query": "q"}),
    ("/rerank", {"query": "q", "documents": ["a"], "top_n": -1}),
    ("/rerank", {"query": "q", "documents": ["a"], "top_n": "x"}),
    ("/score", {"text_1": "q", "text_2": [5]}),
    ("/score", {"text_1": None, "text_2": "b"}),
    ("/score", {"text_1": {"x": 1}, "text_2": "b"}),
    ("/rerank", {"query": "q", "documents": []}),
    ("/pooling", {}),
    ("/pooling", {"input": "a", "dimensions": 8}),
    ("/pooling", {"input": "a", "task": "classify"}),
    ("/pooling", {"data": {"x": 1}}),
    ("/classify", {"input": "hi"}),
    # cuts past the window (vLLM's own checks)
    ("/pooling", {"input": "a", "truncate_prompt_tokens": 100_000}),
    ("/rerank", {"query": "q", "documents": ["a"], "max_tokens_per_doc": 100_000}),
    ("/score", {"text_1": "q", "text_2": "a", "max_tokens_per_query": -1}),
]


@pytest.fixture(scope="module")
def emulated() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(gpu="l40s", model="all-minilm-l6-v2", served_model_names=[EMBEDDER],
                         time_scale=0.01) as emulator:
        yield emulator


def same_answer(routed: Any, direct: Any) -> None:
    """The same answer but for its id and time, its numbers within float noise."""
    if isinstance(direct, dict):
        assert isinstance(routed, dict) and list(routed) == list(direct)
        for key, value in direct.items():
            if key not in ("id", "created"):
                same_answer(routed[key], value)
    elif isinstance(direct, list):
        assert isinstance(routed, list) and len(routed) == len(direct)
        for mine, theirs in zip(routed, direct, strict=True):
            same_answer(mine, theirs)
    elif isinstance(direct, float):
        assert routed == pytest.approx(direct, abs=1e-5)
    else:
        assert routed == direct


async def test_the_answers_through_kvroute_are_the_engines_own(
        embedding_fleet: FleetConfig, router_url: str) -> None:
    engine = embedding_fleet.workers[0].info.url
    for path, body in ANSWERED:
        request = {"model": EMBEDDER, **body}
        direct_status, direct = await post(engine + path, request)
        status, routed = await post(router_url + path, request)
        assert (status, direct_status) == (200, 200), (path, routed, direct)
        same_answer(routed, direct)
    status, answer = await post(f"{router_url}/classify", {"model": EMBEDDER, "input": "hi"})
    assert (status, answer) == await post(f"{engine}/classify",
                                          {"model": EMBEDDER, "input": "hi"})


async def test_what_kvroute_refuses_the_engine_refuses_alike(
        embedding_fleet: FleetConfig, router_url: str) -> None:
    """Unpaired sides: the engine's very body. A missing field: a 400 naming the field the
    engine's names (``body.x``: the engine's pydantic location; kvroute's is ``x``)."""
    engine = embedding_fleet.workers[0].info.url
    for body in ({"text_1": ["a", "b"], "text_2": ["x", "y", "z"]},
                 {"text_1": [], "text_2": ["x"]}, {"text_1": "a", "text_2": []}):
        request = {"model": EMBEDDER, **body}
        assert await post(f"{router_url}/score", request) == await post(f"{engine}/score",
                                                                        request)
    for path, body in (("/rerank", {"query": "q"}), ("/rerank", {"documents": ["a"]}),
                       ("/score", {}), ("/pooling", {})):
        request = {"model": EMBEDDER, **body}
        status, mine = await post(router_url + path, request)
        engine_status, theirs = await post(engine + path, request)
        assert (status, engine_status) == (400, 400), (path, mine, theirs)
        assert "body." + mine["error"]["param"] == theirs["error"]["param"], (mine, theirs)


async def test_the_emulators_answers_have_the_engines_shapes_and_ranking(
        embedding_fleet: FleetConfig, emulated: EmulatorProcess) -> None:
    engine = embedding_fleet.workers[0].info.url
    for path, body in ANSWERED:
        request = {"model": EMBEDDER, **body}
        real_status, real = await post(engine + path, request)
        status, mine = await post(emulated.url + path, request)
        assert (status, paths(mine)) == (real_status, paths(real)), path
        assert list(mine) == list(real) and list(mine["usage"]) == list(real["usage"]), path
        assert mine["id"].split("-")[0] == real["id"].split("-")[0], path
        for ours, theirs in zip(mine.get("data", mine.get("results")),
                                real.get("data", real.get("results")), strict=True):
            assert list(ours) == list(theirs), path
            assert type(ours.get("data")) is type(theirs.get("data")), path
            if "data" in ours:
                assert len(ours["data"]) == len(theirs["data"]) == 384
    for path in ("/score", "/rerank"):
        body = ({"text_1": QUERY, "text_2": DOCUMENTS} if path == "/score"
                else {"query": QUERY, "documents": DOCUMENTS})
        _, real = await post(engine + path, {"model": EMBEDDER, **body})
        _, mine = await post(emulated.url + path, {"model": EMBEDDER, **body})
        assert ranking(mine) == ranking(real) == [2, 1, 0], (mine, real)


def ranking(answer: dict[str, Any]) -> list[int]:
    """The documents' indexes, the best first."""
    if "results" in answer:
        return [result["index"] for result in answer["results"]]
    scores = [item["score"] for item in answer["data"]]
    return sorted(range(len(scores)), key=scores.__getitem__, reverse=True)


async def binary(url: str, body: dict[str, Any]) -> tuple[int, str, bytes, dict[str, Any]]:
    """A binary pooling answer: status, content type, bytes and metadata (without id and
    time)."""
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        metadata = json.loads(resp.headers.get("metadata", "{}"))
        return (resp.status, resp.content_type, await resp.read(),
                {key: value for key, value in metadata.items() if key not in ("id", "created")})


async def test_a_binary_pooling_answer_through_kvroute_and_from_the_emulator(
        embedding_fleet: FleetConfig, router_url: str, emulated: EmulatorProcess) -> None:
    """``encoding_format: bytes``: the engine's bytes and metadata header through kvroute;
    the emulator's header has the engine's keys and vector places, its bytes the engine's
    length."""
    engine = embedding_fleet.workers[0].info.url
    request = {"model": EMBEDDER, "input": [QUERY, "hello"], "encoding_format": "bytes"}
    status, kind, raw, metadata = await binary(f"{engine}/pooling", request)
    assert (status, kind) == (200, "application/octet-stream") and metadata["usage"]
    routed = await binary(f"{router_url}/pooling", request)
    assert routed[:2] == (status, kind) and routed[3] == metadata
    assert np.frombuffer(routed[2], dtype="=f4") == pytest.approx(
        np.frombuffer(raw, dtype="=f4"), abs=1e-5)
    mine = await binary(f"{emulated.url}/pooling", request)
    assert mine[:2] == (status, kind) and len(mine[2]) == len(raw)
    assert paths(mine[3]) == paths(metadata) and mine[3]["data"] == metadata["data"]


@pytest.mark.parametrize(("path", "body"), REFUSED,
                         ids=[f"{path} {sorted(body)}" for path, body in REFUSED])
async def test_the_emulator_refuses_what_the_engine_refuses_in_its_words(
        embedding_fleet: FleetConfig, emulated: EmulatorProcess, path: str,
        body: dict[str, Any]) -> None:
    request = {"model": EMBEDDER, **body}
    engine = embedding_fleet.workers[0].info.url
    assert (unordered_tasks_of(await post(emulated.url + path, request))
            == unordered_tasks_of(await post(engine + path, request)))


def unordered_tasks(answer: Any) -> Any:
    """An answer with its list of supported tasks in one order: vLLM lists them from a set,
    in an order that changes from one start of the engine to the next."""
    if not isinstance(answer, dict) or "error" not in answer:
        return answer
    message = answer["error"]["message"].replace("['token_embed', 'embed']",
                                                 "['embed', 'token_embed']")
    return {"error": {**answer["error"], "message": message}}


def unordered_tasks_of(reply: tuple[int, Any]) -> tuple[int, Any]:
    return reply[0], unordered_tasks(reply[1])


async def test_multimodal_content_is_refused_alike_but_for_the_architectures_name(
        embedding_fleet: FleetConfig, emulated: EmulatorProcess) -> None:
    request = {"model": EMBEDDER, "query": "q",
               "documents": [{"content": [{"type": "text", "text": "hi"}]}]}
    engine = embedding_fleet.workers[0].info.url
    status, real = await post(f"{engine}/rerank", request)
    emulated_status, mine = await post(f"{emulated.url}/rerank", request)
    assert (emulated_status, mine["error"]["type"], mine["error"]["param"]) == (
        status, real["error"]["type"], real["error"]["param"])
    assert real["error"]["message"] == "MultiModalParam is not supported for BertModel"
    assert mine["error"]["message"].startswith("MultiModalParam is not supported for ")
