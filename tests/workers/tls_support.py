"""Certificates for the TLS tests: a throwaway CA (``trustme``) and a server certificate for
127.0.0.1 and localhost, written as PEM files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca_file: Path            # the CA that issued the certificate
    certfile: Path           # the server certificate and its chain
    keyfile: Path
    combined: Path           # the key and the certificate chain in one file


def make_tls_files(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    ca = trustme.CA()
    cert = ca.issue_cert(*hosts)
    files = TlsFiles(folder / "ca.pem", folder / "cert.pem", folder / "key.pem",
                     folder / "combined.pem")
    ca.cert_pem.write_to_path(str(files.ca_file))
    cert.private_key_pem.write_to_path(str(files.keyfile))
    files.certfile.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_and_cert_chain_pem.write_to_path(str(files.combined))
    return files
