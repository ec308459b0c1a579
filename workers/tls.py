"""TLS on the router's hops: to workers served over ``https://``, and on a listening socket.

* ``worker_tls_contexts(infos)``: each ``https://`` worker's base URL
  (``workers.upstream.base_url``) mapped to the client context that verifies it: against the
  CA bundle its fleet entry names (``tls_ca_file``), else the system's trusted CAs; the
  certificate must name the host of the worker's URL. Workers at one origin naming one bundle
  (path prefixes behind a reverse proxy) share a context, and so their pooled connections.
  An unreadable bundle is a ``FleetConfigError`` naming the worker and the file.
* ``server_tls_context(certfile, keyfile)``: the context a server (the router, an emulated
  worker) listens with, as vLLM's ``--ssl-certfile`` / ``--ssl-keyfile``; ``TlsFilesError``
  says which file could not be used. ``load_server_pair`` loads a pair into a context already
  made (the router's reloaded certificate, ``router.serving_tls``).
* ``readiness_probe_context(url)``: for a process's own loopback readiness probe only: for
  an ``https://`` URL a context that encrypts without verifying (the caller just started
  that server, with a certificate it may not trust itself), else None.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable
from os import PathLike

from workers.fleet import FleetConfigError
from workers.models import WorkerInfo
from workers.upstream import BaseUrl, Origin, base_url, origin_of


class TlsFilesError(ValueError):
    """A certificate, key or CA file could not be read or used."""


def worker_tls_contexts(infos: Iterable[WorkerInfo]) -> dict[BaseUrl, ssl.SSLContext]:
    contexts: dict[BaseUrl, ssl.SSLContext] = {}
    made: dict[tuple[Origin, str | None], ssl.SSLContext] = {}
    for info in infos:
        if not info.url.startswith("https://"):
            continue
        shared = (origin_of(info.url), info.tls_ca_file)
        if shared not in made:
            made[shared] = _verifying_context(info)
        contexts[base_url(info.url)] = made[shared]
    return contexts


def _verifying_context(info: WorkerInfo) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=info.tls_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise FleetConfigError(f"worker {info.id}: tls_ca_file {info.tls_ca_file!r} "
                               f"cannot be used: {_reason(exc)}") from exc


def server_tls_context(certfile: str | PathLike[str],
                       keyfile: str | PathLike[str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_server_pair(context, certfile, keyfile)
    return context


def load_server_pair(context: ssl.SSLContext, certfile: str | PathLike[str],
                     keyfile: str | PathLike[str] | None = None,
                     shown: tuple[str | PathLike[str], str | PathLike[str] | None] | None = None
                     ) -> None:
    """Load a certificate and its key into ``context``. ``shown``: the names the messages
    give the two files, when those loaded are copies of them."""
    shown_cert, shown_key = (certfile, keyfile) if shown is None else shown
    encrypted: list[bool] = []

    def no_passphrase() -> str:
        """Called only for a key under a passphrase: no prompt on the terminal (a service
        would block on it), a clear refusal instead."""
        encrypted.append(True)
        raise ValueError("encrypted key")

    files = shown_cert if shown_key is None else f"{shown_cert} and {shown_key}"
    for path, name in ((certfile, shown_cert), (keyfile, shown_key)):
        if path is not None and not os.path.isfile(path):
            raise TlsFilesError(f"cannot serve TLS with {files}: {os.fspath(name or path)}: "
                                f"no such file")
    try:
        context.load_cert_chain(certfile, keyfile, password=no_passphrase)
    except (OSError, ssl.SSLError, ValueError) as exc:
        if encrypted:
            reason = ("its private key is encrypted with a passphrase; give the key "
                      "unencrypted (openssl pkey -in KEY -out PLAIN), readable by this user only")
        elif isinstance(exc, ssl.SSLError) and "PEM lib" in str(exc):   # no key read there
            reason = (f"no private key in {os.fspath(shown_cert)} (give it with --ssl-keyfile)"
                      if keyfile is None else "not a PEM certificate and its private key")
        else:
            reason = _reason(exc)
        raise TlsFilesError(f"cannot serve TLS with {files}: {reason}") from exc


def readiness_probe_context(url: str) -> ssl.SSLContext | None:
    if not url.startswith("https://"):
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
