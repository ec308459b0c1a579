"""An emulated worker serving HTTPS (vLLM's ``--ssl-certfile`` / ``--ssl-keyfile``): its
OpenAI API answers over TLS with the given certificate, and a plain-HTTP client gets none."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import aiohttp
import pytest

from tests.workers.emulator.emulator_fixtures import MODEL
from tests.workers.tls_support import make_tls_files
from workers.emulator.cli import add_arguments, build_configs
from workers.emulator.config import EmulatorConfigError
from workers.emulator.process import EmulatorProcess


@pytest.mark.integration
async def test_the_worker_answers_over_tls(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    trusting = ssl.create_default_context(cafile=str(files.ca_file))
    with EmulatorProcess(served_model_names=[MODEL], time_scale=0.01,
                         extra_args=["--ssl-certfile", str(files.certfile),
                                     "--ssl-keyfile", str(files.keyfile)]) as worker:
        assert worker.url.startswith("https://127.0.0.1:")
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{worker.url}/v1/completions", ssl=trusting, json={
                    "model": MODEL, "prompt": "Hi", "max_tokens": 2}) as resp:
                assert resp.status == 200
                assert (await resp.json())["usage"]["completion_tokens"] == 2
            with pytest.raises(aiohttp.ClientError):
                async with http.get(worker.url.replace("https", "http") + "/health") as resp:
                    await resp.read()


def test_a_key_without_a_certificate_is_refused() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(EmulatorConfigError, match=r"emulate\.ssl_keyfile: needs ssl_certfile"):
        build_configs(parser.parse_args(["--port", "9006", "--ssl-keyfile", "k.pem"]))
