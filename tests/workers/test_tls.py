"""workers/tls.py: contexts verifying https:// workers, a server's context, and their errors."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tests.workers.tls_support import make_tls_files
from workers.fleet import FleetConfigError, parse_fleet
from workers.models import WorkerInfo
from workers.tls import TlsFilesError, server_tls_context, worker_tls_contexts

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def infos(*workers: dict[str, object]) -> list[WorkerInfo]:
    fleet = parse_fleet({"models": {MODEL: {"arch": "llama-3.1-8b"}},
                         "workers": [{"gpu": "h100", "models": [MODEL], **w} for w in workers]})
    return [w.info for w in fleet.workers]


def test_https_workers_get_a_verifying_context_at_their_base_url(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    contexts = worker_tls_contexts(infos(
        {"id": "own-ca", "url": "https://10.0.0.7:8443", "tls_ca_file": str(files.ca_file)},
        {"id": "system", "url": "https://vllm.example.com"},
        {"id": "plain", "url": "http://10.0.0.9:8000"}))
    assert set(contexts) == {"https://10.0.0.7:8443", "https://vllm.example.com:443"}
    for context in contexts.values():
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(contexts["https://10.0.0.7:8443"].get_ca_certs()) == 1      # its CA alone


def test_an_unusable_ca_bundle_names_the_worker_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(FleetConfigError, match=rf"worker w0: tls_ca_file '{missing}' cannot be "
                                               "used: No such file or directory"):
        worker_tls_contexts(infos({"id": "w0", "url": "https://10.0.0.7:8443",
                                   "tls_ca_file": str(missing)}))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(FleetConfigError, match="worker w0: tls_ca_file"):
        worker_tls_contexts(infos({"id": "w0", "url": "https://10.0.0.7:8443",
                                   "tls_ca_file": str(garbage)}))


def test_a_server_context_from_separate_or_combined_files(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    for context in (server_tls_context(files.certfile, files.keyfile),
                    server_tls_context(str(files.combined))):
        assert isinstance(context, ssl.SSLContext)
    with pytest.raises(TlsFilesError, match=r"cannot serve TLS with .*missing\.pem: no such file"):
        server_tls_context(tmp_path / "missing.pem")
    with pytest.raises(TlsFilesError, match=r"no private key in .*cert\.pem \(give it with "
                       r"--ssl-keyfile\)"):
        server_tls_context(files.certfile)          # no key in it
    with pytest.raises(TlsFilesError, match="not a PEM certificate and its private key"):
        server_tls_context(files.certfile, files.ca_file)     # a certificate, not its key


def test_a_readiness_probe_encrypts_https_without_verifying_and_leaves_http_alone() -> None:
    from workers.tls import readiness_probe_context

    assert readiness_probe_context("http://127.0.0.1:8101") is None
    context = readiness_probe_context("https://127.0.0.1:8443")
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)
