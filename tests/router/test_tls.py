"""TLS on both of the router's sides: clients reach it over HTTPS (``--ssl-certfile``), and it
reaches workers served over ``https://`` (here emulated workers with vLLM's
``--ssl-certfile``), verifying them against the CA their fleet entry names (``tls_ca_file``).
A worker whose certificate does not verify is marked down with the reason, never used.

The fleet: one emulated worker serving TLS, in its own process; certificates from a throwaway
CA (``tests/workers/tls_support.py``)."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from router.cli import main
from router.keys import REGISTRY
from tests.router.gateway_support import MODEL, ROUTING_ROUND_ROBIN, RouterFactory
from tests.workers.tls_support import TlsFiles, make_tls_files
from workers.emulator.process import EmulatorFleet
from workers.fleet import FleetConfig, load_fleet
from workers.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_fleet(tmp_path_factory: pytest.TempPathFactory,
              tls_files: TlsFiles) -> Iterator[FleetConfig]:
    path: Path = tmp_path_factory.mktemp("tls-fleet") / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192}},
        "workers": [{"id": "tls-0", "gpu": "h100", "models": [MODEL],
                     "tls_ca_file": str(tls_files.ca_file),
                     "emulate": {"port": free_port(), "time_scale": 0.01,
                                 "ssl_certfile": str(tls_files.certfile),
                                 "ssl_keyfile": str(tls_files.keyfile)}}]}))
    loaded = load_fleet(path)
    with EmulatorFleet(loaded, one_process=True):
        yield loaded


async def test_https_on_both_sides(tls_fleet: FleetConfig, tls_files: TlsFiles,
                                   make_router: RouterFactory) -> None:
    assert tls_fleet.workers[0].info.url.startswith("https://127.0.0.1:")
    router = await make_router(tls_fleet, ROUTING_ROUND_ROBIN,
                               ssl_certfile=tls_files.combined)
    snapshot = router.app[REGISTRY].snapshot("tls-0")
    assert snapshot is not None and snapshot.healthy           # scraped over TLS
    assert snapshot.served_models == (MODEL,)
    certificate = x509.load_pem_x509_certificate(tls_files.certfile.read_bytes())
    assert router.metric("kvroute_worker_tls_cert_expiry_timestamp_seconds", worker="tls-0") \
        == certificate.not_valid_after_utc.timestamp()
    base = f"https://127.0.0.1:{router.port}/v1"
    client = openai.AsyncOpenAI(
        base_url=base, api_key="unused", max_retries=0,
        http_client=openai.DefaultAsyncHttpx2Client(
            verify=ssl.create_default_context(cafile=str(tls_files.ca_file))))
    reply = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True)
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    assert len([p for p in pieces if p]) == 4
    await client.close()
    # a client that does not trust the router's certificate gets no answer
    doubting = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        await doubting.models.list()
    await doubting.close()
    async with aiohttp.ClientSession() as plain:     # nor one speaking plain HTTP to it
        with pytest.raises(aiohttp.ClientError):
            async with plain.get(f"http://127.0.0.1:{router.port}/health") as resp:
                await resp.read()


async def test_a_worker_whose_certificate_does_not_verify_is_down_with_the_reason(
        tls_fleet: FleetConfig, make_router: RouterFactory) -> None:
    untrusted = dataclasses.replace(tls_fleet, workers=tuple(
        dataclasses.replace(w, info=dataclasses.replace(w.info, tls_ca_file=None))
        for w in tls_fleet.workers))                 # the system's CAs do not know ours
    router = await make_router(untrusted, ROUTING_ROUND_ROBIN)
    snapshot = router.app[REGISTRY].snapshot("tls-0")
    assert snapshot is not None and not snapshot.healthy
    assert snapshot.error is not None and "certificate verify failed" in snapshot.error
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.InternalServerError) as raised:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert raised.value.status_code == 503
    await client.close()
    # a certificate that was not trusted is not reported
    assert router.metric("kvroute_worker_tls_cert_expiry_timestamp_seconds",
                         worker="tls-0") == 0.0


def test_unusable_certificate_files_stop_the_start(tls_fleet: FleetConfig, tmp_path: Path,
                                                   tls_files: TlsFiles,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    routing = tmp_path / "routing.yaml"
    routing.write_text(ROUTING_ROUND_ROBIN)
    common = ["serve", "--fleet", tls_fleet.source, "--routing", str(routing),
              "--port", str(free_port())]
    assert main([*common, "--ssl-certfile", str(tmp_path / "none.pem")]) == 2
    assert f"{tmp_path / 'none.pem'}: no such file" in capsys.readouterr().err
    assert main([*common, "--ssl-certfile", str(tls_files.certfile),
                 "--ssl-keyfile", str(tmp_path / "no-key.pem")]) == 2
    assert f"{tmp_path / 'no-key.pem'}: no such file" in capsys.readouterr().err   # which one
    assert main([*common, "--ssl-certfile", str(tls_files.certfile)]) == 2
    assert (f"no private key in {tls_files.certfile} (give it with --ssl-keyfile)"
            in capsys.readouterr().err)
    assert main([*common, "--ssl-keyfile", str(tls_files.keyfile)]) == 2
    assert "ssl_keyfile: needs ssl_certfile" in capsys.readouterr().err
    # a key under a passphrase: refused at once, never a prompt a service would block on
    encrypted = tmp_path / "encrypted-key.pem"
    key = serialization.load_pem_private_key(tls_files.keyfile.read_bytes(), password=None)
    encrypted.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    assert main([*common, "--ssl-certfile", str(tls_files.certfile),
                 "--ssl-keyfile", str(encrypted)]) == 2
    assert (f"cannot serve TLS with {tls_files.certfile} and {encrypted}: its private key is "
            "encrypted with a passphrase") in capsys.readouterr().err
    broken = tmp_path / "fleet.yaml"
    data = yaml.safe_load(Path(tls_fleet.source).read_text())
    data["workers"][0]["tls_ca_file"] = str(tmp_path / "no-ca.pem")
    broken.write_text(yaml.safe_dump(data))
    assert main(["serve", "--fleet", str(broken), "--routing", str(routing),
                 "--port", str(free_port())]) == 2
    assert "worker tls-0: tls_ca_file" in capsys.readouterr().err
