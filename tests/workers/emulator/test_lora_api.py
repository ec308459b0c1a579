"""Runtime LoRA updating in the emulator (``workers/emulator/lora_api.py``), as vLLM serves it
with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``: an adapter loaded is served and listed, one
unloaded is vLLM's 404; the refusals in vLLM's words; without the setting, no such paths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL, emulator
from workers.emulator.process import EmulatorProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker() -> Iterator[EmulatorProcess]:
    with emulator(time_scale=0.01, runtime_lora_updating=True,
                  output_len={"dist": "fixed", "value": 2}) as proc:
        yield proc


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


async def models(url: str) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url + "/v1/models") as resp:
        return {card["id"]: card for card in (await resp.json())["data"]}


async def chat(url: str, model: str) -> int:
    status, _ = await post(url + "/v1/chat/completions", {
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    return status


async def test_an_adapter_loaded_is_served_and_one_unloaded_is_not(
        worker: EmulatorProcess) -> None:
    url = worker.url
    assert await chat(url, "fin") == 404
    assert await post(url + "/v1/load_lora_adapter",
                      {"lora_name": "fin", "lora_path": "/adapters/fin"}) == (
        200, "Success: LoRA adapter 'fin' added successfully.")
    cards = await models(url)
    assert (cards["fin"]["root"], cards["fin"]["parent"]) == ("/adapters/fin", MODEL)
    assert await chat(url, "fin") == 200
    assert await post(url + "/v1/unload_lora_adapter", {"lora_name": "fin"}) == (
        200, "Success: LoRA adapter 'fin' removed successfully.")
    assert "fin" not in await models(url)
    assert await chat(url, "fin") == 404


@pytest.mark.parametrize(("path", "body", "status", "message", "kind"), [
    ("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": ""}, 400,
     "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput"),
    ("/v1/unload_lora_adapter", {"lora_name": "", "lora_int_id": 0}, 400,
     "either 'lora_name' and 'lora_int_id' needs to be provided.", "InvalidUserInput"),
    ("/v1/unload_lora_adapter", {"lora_name": "never"}, 404,
     "The lora adapter 'never' cannot be found.", "NotFoundError"),
])
async def test_refusals_in_vllms_words(worker: EmulatorProcess, path: str,
                                       body: dict[str, Any], status: int, message: str,
                                       kind: str) -> None:
    got, answer = await post(worker.url + path, body)
    assert (got, answer["error"]["message"], answer["error"]["type"]) == (status, message, kind)


async def test_a_missing_field_is_pydantics_400(worker: EmulatorProcess) -> None:
    status, answer = await post(worker.url + "/v1/load_lora_adapter", {"lora_name": "x"})
    assert status == 400 and answer["error"]["message"].startswith("1 validation error")
    assert "Field required" in answer["error"]["message"]
    assert "body.lora_path" in answer["error"]["message"]


async def test_an_adapter_loaded_twice_is_refused_unless_in_place(
        worker: EmulatorProcess) -> None:
    load = worker.url + "/v1/load_lora_adapter"
    assert (await post(load, {"lora_name": "twice", "lora_path": "/a"}))[0] == 200
    status, answer = await post(load, {"lora_name": "twice", "lora_path": "/b"})
    assert (status, answer["error"]["message"]) == (
        400, "The lora adapter 'twice' has already been loaded.")
    assert (await post(load, {"lora_name": "twice", "lora_path": "/b",
                              "load_inplace": True}))[0] == 200
    assert (await models(worker.url))["twice"]["root"] == "/b"


async def test_without_runtime_updating_the_paths_are_not_found() -> None:
    with emulator(time_scale=0.01) as proc:
        status, _ = await post(proc.url + "/v1/load_lora_adapter",
                               {"lora_name": "x", "lora_path": "/x"})
    assert status == 404
