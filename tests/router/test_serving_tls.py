"""router/serving_tls.py: the router's HTTPS certificate renewed on disk the way Kubernetes
renews a mounted Secret (a ``..data`` symlink swapped, the old folder removed) is served to new
connections without a restart; a pair that cannot be used leaves the one in force serving.

Real TLS on 127.0.0.1: each check opens a connection and reads the certificate presented."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from router.serving_tls import ServingCertificate
from tests.router.gateway_support import ROUTING_ROUND_ROBIN, RouterFactory, url_fleet_file
from tests.workers.tls_support import TlsFiles, make_tls_files
from workers.fleet import load_fleet
from workers.ports import free_port
from workers.tls import TlsFilesError

POLL_S = 0.05


class Secret:
    """A Secret as the kubelet mounts it: ``tls.crt`` and ``tls.key`` are symlinks through
    ``..data``, a symlink to the folder of the current version; an update writes a new
    folder, swaps ``..data`` in one rename and removes the old folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.version = 0
        self.certfile = folder / "tls.crt"
        self.keyfile = folder / "tls.key"

    def publish(self, certificate: bytes, key: bytes | None) -> None:
        self.version += 1
        data = self.folder / "..data"
        old = data.resolve() if data.is_symlink() else None
        new = self.folder / f"..2024_01_01_00_00_{self.version:02d}"
        new.mkdir()
        (new / "tls.crt").write_bytes(certificate)
        if key is not None:
            (new / "tls.key").write_bytes(key)
        os.symlink(new.name, self.folder / "..data_tmp")
        os.replace(self.folder / "..data_tmp", data)
        for name in ("tls.crt", "tls.key"):
            if not (self.folder / name).is_symlink():
                os.symlink(f"..data/{name}", self.folder / name)
        if old is not None:
            shutil.rmtree(old)


def pem(files: TlsFiles) -> tuple[bytes, bytes]:
    return files.certfile.read_bytes(), files.keyfile.read_bytes()


def serial(files: TlsFiles) -> int:
    return x509.load_pem_x509_certificate(files.certfile.read_bytes()).serial_number


def trusting(*issuers: TlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for files in issuers:
        context.load_verify_locations(cafile=str(files.ca_file))
    return context


async def presented(port: int, client: ssl.SSLContext) -> int:
    """The serial number of the certificate a new connection to ``port`` is given."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                              server_hostname="localhost")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def until_presented(port: int, client: ssl.SSLContext, expected: int,
                          within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while (got := await presented(port, client)) != expected:
        assert time.monotonic() < deadline, f"still presenting serial {got}"
        await asyncio.sleep(POLL_S)


@pytest.fixture
def pairs(tmp_path: Path) -> list[TlsFiles]:
    made = []
    for n in range(3):
        (tmp_path / f"pair-{n}").mkdir()
        made.append(make_tls_files(tmp_path / f"pair-{n}"))
    return made


@pytest.fixture
def secret(tmp_path: Path, pairs: list[TlsFiles]) -> Secret:
    (tmp_path / "secret").mkdir()
    mounted = Secret(tmp_path / "secret")
    mounted.publish(*pem(pairs[0]))
    return mounted


@pytest.fixture
async def serving(secret: Secret) -> AsyncIterator[tuple[int, list[bool]]]:
    """An HTTPS server with the certificate and its watch, as ``start_router`` runs them."""
    outcomes: list[bool] = []
    certificate = ServingCertificate(secret.certfile, secret.keyfile, POLL_S,
                                     on_result=outcomes.append)
    app = web.Application()

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/", hello)
    app.cleanup_ctx.append(certificate.while_serving)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=certificate.context).start()
    yield port, outcomes
    await runner.cleanup()


async def until(condition: Callable[[], bool], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time given"
        await asyncio.sleep(POLL_S)


async def test_a_renewed_secret_is_served_to_new_connections_and_a_bad_pair_is_refused(
        serving: tuple[int, list[bool]], secret: Secret, pairs: list[TlsFiles],
        caplog: pytest.LogCaptureFixture) -> None:
    port, outcomes = serving
    first, second, third = pairs
    client = trusting(*pairs)
    assert await presented(port, client) == serial(first)
    reader, earlier = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                    server_hostname="localhost")
    with caplog.at_level(logging.INFO, logger="router.serving_tls"):
        secret.publish(*pem(second))
        await until_presented(port, client, serial(second))
        assert outcomes == [True]
        # a connection opened before keeps its certificate, and is served on
        earlier.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert await reader.readline() == b"HTTP/1.1 200 OK\r\n"
        der = earlier.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert x509.load_der_x509_certificate(der).serial_number == serial(first)
        earlier.close()
        # a certificate with another's key, then one without its key file: both refused
        secret.publish(third.certfile.read_bytes(), second.keyfile.read_bytes())
        await until(lambda: outcomes == [True, False])
        assert await presented(port, client) == serial(second)
        secret.publish(third.certfile.read_bytes(), None)
        await until(lambda: outcomes == [True, False, False])
        assert await presented(port, client) == serial(second)
        secret.publish(*pem(third))                 # the next good pair is taken
        await until_presented(port, client, serial(third))
    assert outcomes == [True, False, False, True]
    refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(refusals) == 2                       # once per change of the files
    assert all(m.startswith("serving certificate refused, the one in force keeps serving: "
                            f"cannot serve TLS with {secret.certfile} and {secret.keyfile}: ")
               for m in refusals)
    assert "key values mismatch" in refusals[0]
    assert refusals[1].endswith(f"{secret.keyfile}: no such file")
    reloads = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(reloads) == 2 and all(m.startswith(
        f"serving certificate reloaded from {secret.certfile} and {secret.keyfile}")
        for m in reloads)


async def test_a_pair_written_in_place_one_file_then_the_other_is_taken_once_whole(
        tmp_path: Path, pairs: list[TlsFiles]) -> None:
    first, second, _ = pairs
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certfile.write_bytes(first.certfile.read_bytes())
    keyfile.write_bytes(first.keyfile.read_bytes())
    outcomes: list[bool] = []
    certificate = ServingCertificate(certfile, keyfile, on_result=outcomes.append)
    assert not certificate.check()                  # nothing changed
    certfile.write_bytes(second.certfile.read_bytes())
    assert not certificate.check()                  # seen; read again at the next poll
    keyfile.write_bytes(second.keyfile.read_bytes())
    assert not certificate.check()                  # changed again: still not settled
    assert certificate.check()                      # the same at two polls running: taken
    assert not certificate.check()
    assert outcomes == [True]
    with pytest.raises(TlsFilesError, match="no such file"):     # at start: nothing to keep
        ServingCertificate(tmp_path / "none.pem", keyfile)


async def test_the_router_serves_a_renewed_certificate(
        tmp_path: Path, secret: Secret, pairs: list[TlsFiles],
        make_router: RouterFactory) -> None:
    fleet = load_fleet(url_fleet_file(tmp_path, {"w0": f"http://127.0.0.1:{free_port()}"}))
    router = await make_router(fleet, ROUTING_ROUND_ROBIN, ssl_certfile=secret.certfile,
                               ssl_keyfile=secret.keyfile, reload_interval_s=POLL_S)
    client = trusting(*pairs)
    assert await presented(router.port, client) == serial(pairs[0])
    secret.publish(*pem(pairs[1]))
    await until_presented(router.port, client, serial(pairs[1]))
    assert router.metric("kvroute_serving_certificate_reloads_total", result="success") == 1
