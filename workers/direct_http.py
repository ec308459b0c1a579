"""Blocking HTTP GETs that go straight to their host, whatever ``HTTP_PROXY`` says.

``urllib.request.urlopen`` sends through the proxy the ``*_PROXY`` variables name. The
router's own traffic to workers never does (``workers.upstream``), so a probe that did would
test another path than the one served: under ``HTTP_PROXY`` with no ``NO_PROXY``, readiness
probes of just-started loopback servers went to the proxy and never saw them healthy. Used
for readiness probes (emulators, launched vLLM servers) and for Prometheus' API.

* ``direct_urlopen(url, timeout, context)``: as ``urlopen``, with no proxy; ``context``
  verifies (or, for a readiness probe, only encrypts) ``https://``.
* ``probe_error(exc)``: a probe's failure in a few words, for a timeout's message.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from http.client import HTTPResponse
from typing import cast


def direct_urlopen(url: str | urllib.request.Request, timeout: float,
                   context: ssl.SSLContext | None = None) -> HTTPResponse:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    return cast(HTTPResponse, opener.open(url, timeout=timeout))


def probe_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__
