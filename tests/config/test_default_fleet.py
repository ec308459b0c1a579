"""The default fleet (``config/fleet.yaml``) as ``make run`` starts it, on free ports: the
README's client examples work against it, the Responses API conversation included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pytest
import yaml

from tests.router.gateway_support import wait_healthy
from workers.fleet import load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _on_free_ports(tmp_path: Path) -> Path:
    """config/fleet.yaml with every emulated worker on a free port, all else as shipped."""
    data = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    for worker in data["workers"]:
        worker["emulate"]["port"] = free_port()
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_default_fleet_keeps_responses_as_vllm_with_its_store() -> None:
    fleet = load_fleet(ROOT / "config" / "fleet.yaml")
    assert [spec.emulate and spec.emulate.get("responses_store") for spec in fleet.workers] == [
        True] * len(fleet.workers)


def test_the_readme_examples_run_against_the_default_fleet(tmp_path: Path) -> None:
    fleet, port = _on_free_ports(tmp_path), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "up", "--fleet", str(fleet), "--routing",
         str(ROOT / "config" / "routing.yaml"), "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=30.0)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hello!"}], max_tokens=32)
        assert reply.choices[0].message.content
        streamed = "".join(
            chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                model=MODEL, stream=True, max_tokens=16,
                messages=[{"role": "user", "content": "Tell me a story."}]) if chunk.choices)
        assert streamed

        first = client.responses.with_raw_response.create(model=MODEL, input="Hi!")
        then = client.responses.with_raw_response.create(
            model=MODEL, input="And then?", previous_response_id=first.parse().id)
        assert then.parse().output_text
        assert then.headers["x-kvroute-worker"] == first.headers["x-kvroute-worker"]
        assert client.responses.retrieve(then.parse().id).id == then.parse().id

        message = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}",
                                      api_key="unused").messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
        assert message.content and message.stop_reason in ("end_turn", "max_tokens")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
