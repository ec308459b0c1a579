"""The example semantic configuration over a live emulated fleet and the real router."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from router.app import start_router
from router.keys import METRICS, REGISTRY
from router.settings import Settings
from tests.policies.semantic.semantic_support import EXAMPLE_FLEET, EXAMPLE_ROUTING
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = [pytest.mark.semantic, pytest.mark.integration]

PROMPTS = {
    "code": ["Write a TypeScript function that debounces another function.",
             "Write a Python function that removes empty rows from a pandas DataFrame."],
    "math": ["Find all real solutions of x^2 - 5x + 6 = 0.",
             "What is the probability of getting exactly two heads in three coin flips?"],
    "support": ["I need to change the delivery address of order 88412.",
                "how can i get a refund for my last purchase"],
    "chat": ["What are some good habits for a healthy morning routine?",
             "Write a short poem about autumn leaves."],
}
EXPECTED = {"code": ("coder", {"coder-0", "coder-1"}), "math": ("math", {"math-0"}),
            "support": ("support", {"general-0"}),
            "chat": ("general", {"general-0", "general-1"})}
LONG_CODE_PROMPT = ("Refactor this Python module so that every function has type hints and a "
                    "docstring:\n" + "".join(f"def step_{i}(x):\n    return x * {i} + {i}\n"
                                             for i in range(80)))


@pytest.fixture(scope="module")
def semantic_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetConfig]:
    data = yaml.safe_load(EXAMPLE_FLEET.read_text())
    for worker in data["workers"]:
        worker["emulate"] = {**worker["emulate"], "port": free_port(), "time_scale": 0.01,
                             "output_len": {"dist": "fixed", "value": 4}}
    path = tmp_path_factory.mktemp("semantic-fleet") / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    fleet = load_fleet(path)
    with EmulatorFleet(fleet, one_process=True):
        yield fleet


async def wait_for_adapter(registry: object, worker: str, adapter: str) -> None:
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        views = registry.views(time.monotonic())  # type: ignore[attr-defined]
        if any(v.id == worker and adapter in v.lora_adapters for v in views):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{worker} never reported adapter {adapter}")


async def test_classes_reach_their_models_and_replicas_stay_token_aware(
        semantic_fleet: FleetConfig, tmp_path: Path) -> None:
    routing = tmp_path / "semantic.yaml"
    # what is checked is where each class goes: a classification slower than the default
    # timeout_ms on a loaded test machine would answer the default class instead
    text = EXAMPLE_ROUTING.read_text()
    assert "\nsemantic:\n" in text and "timeout_ms" not in text
    routing.write_text(text.replace("\nsemantic:\n", "\nsemantic:\n  timeout_ms: 10000\n", 1))
    settings = Settings(fleet_path=Path(semantic_fleet.source), routing_path=routing, port=0,
                        scrape_interval_s=0.05, models_interval_s=0.1)
    runner, port = await start_router(settings, semantic_fleet)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        await wait_for_adapter(runner.app[REGISTRY], "general-0", "support")
        async with aiohttp.ClientSession() as session:

            async def ask(text: str) -> tuple[str, str, str]:
                body = {"model": "auto", "max_tokens": 4,
                        "messages": [{"role": "user", "content": text}]}
                async with session.post(url, json=body) as response:
                    payload = await response.json()
                    assert response.status == 200, payload
                    return (response.headers["x-kvroute-class"],
                            response.headers["x-kvroute-worker"], payload["model"])

            for label, prompts in PROMPTS.items():
                for text in prompts:
                    got_class, worker, model = await ask(text)
                    assert got_class == label, text
                    assert model == EXPECTED[label][0], text
                    assert worker in EXPECTED[label][1], text
            # within the class the prefix scorer keeps a repeated long prompt where it is cached
            first = await ask(LONG_CODE_PROMPT)
            repeats = [await ask(LONG_CODE_PROMPT) for _ in range(3)]
            # a prompt no worker's context holds is refused, and the answer still says its class
            too_long = {"model": "auto", "max_tokens": 4, "messages": [
                {"role": "user", "content": "Solve for x: 3x + 7 = 22. " * 2000}]}
            async with session.post(url, json=too_long) as response:
                assert response.status == 400
                refused_class = response.headers.get("x-kvroute-class")
            async with session.get(f"http://127.0.0.1:{port}/debug/decisions") as response:
                recorded = (await response.json())["data"]
        # each decision says how its class was found: the default class, confidently or not?
        assert {d["semantic_outcome"] for d in recorded} <= {"classified", "unsure"}
        assert all(0.0 < d["semantic_confidence"] <= 1.0 for d in recorded)
        assert all(d["semantic_predicted"] == d["semantic_class"] for d in recorded
                   if d["semantic_outcome"] == "classified")
        assert first[0] == "code" and first[1] in {"coder-0", "coder-1"}
        assert refused_class in PROMPTS
        assert {r[1] for r in repeats} == {first[1]}
        metrics = runner.app[METRICS].registry
        assert metrics.get_sample_value("kvroute_semantic_class_total", {"class": "code"}) == 6
        assert metrics.get_sample_value("kvroute_semantic_class_total", {"class": "support"}) == 2
        assert (metrics.get_sample_value("kvroute_semantic_classify_seconds_count") or 0) >= 12
    finally:
        await runner.cleanup()
