"""An emulated worker started with an API key asks for it as vLLM's ``--api-key`` does:
``/v1`` paths without ``Authorization: Bearer <key>`` get ``401 {"error": "Unauthorized"}``;
``/health``, ``/metrics``, ``/tokenize`` and ``/load`` stay open. The key comes from
``--api-key`` alone, or from the variable a fleet worker's ``api_key_env`` names."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.workers.emulator.emulator_fixtures import MODEL
from workers.credentials import MissingApiKey
from workers.emulator.cli import add_arguments, build_configs
from workers.emulator.config import fleet_worker_configs
from workers.emulator.process import EmulatorProcess
from workers.fleet import parse_fleet

KEY = "sk-emulated-worker"
PROMPT = {"model": MODEL, "prompt": "Hello", "max_tokens": 2}


@pytest.fixture(scope="module")
def keyed_worker() -> Iterator[EmulatorProcess]:
    with EmulatorProcess(served_model_names=[MODEL], time_scale=0.01,
                         extra_args=["--api-key", KEY]) as proc:
        yield proc


async def status_of(method: str, url: str, headers: dict[str, str],
                    json: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(
            method, url, headers=headers, json=json) as resp:
        body = await resp.json() if resp.content_type == "application/json" else None
        return resp.status, body


@pytest.mark.integration
async def test_v1_paths_need_the_bearer_key(keyed_worker: EmulatorProcess) -> None:
    url = keyed_worker.url
    for headers in ({}, {"Authorization": "Bearer sk-other"}, {"Authorization": f"Basic {KEY}"},
                    {"x-api-key": KEY}, {"Authorization": KEY}):
        assert await status_of("GET", f"{url}/v1/models", headers) == \
            (401, {"error": "Unauthorized"}), headers
        assert (await status_of("POST", f"{url}/v1/completions", headers, PROMPT))[0] == 401
    for scheme in ("Bearer", "bearer"):
        status, body = await status_of("GET", f"{url}/v1/models",
                                       {"Authorization": f"{scheme} {KEY}"})
        assert status == 200 and body["data"][0]["id"] == MODEL
    status, body = await status_of("POST", f"{url}/v1/completions",
                                   {"Authorization": f"Bearer {KEY}"}, PROMPT)
    assert status == 200 and body["usage"]["completion_tokens"] == 2


@pytest.mark.integration
async def test_health_metrics_and_tokenizer_stay_open(keyed_worker: EmulatorProcess) -> None:
    url = keyed_worker.url
    for method, path, body in (("GET", "/health", None), ("GET", "/metrics", None),
                               ("GET", "/load", None),
                               ("POST", "/tokenize", {"model": MODEL, "prompt": "a b"})):
        assert (await status_of(method, url + path, {}, body))[0] == 200, path


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_the_key_comes_from_the_flag_or_the_fleet_workers_variable(tmp_path: Path) -> None:
    (one,) = build_configs(parse("--port", "9003", "--api-key", KEY))
    assert one.api_key == KEY and KEY not in repr(one)
    with pytest.raises(ValueError, match="--api-key: must not be empty"):
        build_configs(parse("--port", "9003", "--api-key", ""))
    data = {"models": {MODEL: {"arch": "llama-3-8b"}},
            "workers": [{"id": "keyed", "gpu": "h100", "models": [MODEL],
                         "emulate": {"port": 9004}, "api_key_env": "EMULATED_KEY"},
                        {"id": "open", "gpu": "h100", "models": [MODEL],
                         "emulate": {"port": 9005}}]}
    fleet = parse_fleet(data)
    keyed, open_ = fleet_worker_configs(fleet, environ={"EMULATED_KEY": KEY})
    assert (keyed.api_key, open_.api_key) == (KEY, None)
    with pytest.raises(MissingApiKey, match="keyed: api_key_env names EMULATED_KEY"):
        fleet_worker_configs(fleet, environ={})
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="--api-key cannot be combined with --fleet"):
        build_configs(parse("--fleet", str(path), "--api-key", KEY))
