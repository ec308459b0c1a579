"""The client's header fields a worker is sent with its request.

A request goes on with the client's end-to-end fields (its ``User-Agent``, the SDK's own,
vLLM's ``X-data-parallel-rank``, whatever a sidecar before the engine reads), less:

* those of the client's connection and the body's framing, which the router's hop sets
  anew (RFC 9110 §7.6.1: ``Connection`` and the fields it names, ``Keep-Alive``,
  ``Transfer-Encoding``, ``TE``, ``Trailer``, ``Upgrade``, the ``Proxy-`` fields), and
  ``Host``, ``Content-Length``, ``Content-Type``, ``Content-Encoding``, ``Expect``;
* ``Accept-Encoding``: the router reads the worker's answer (its usage, its events), which a
  compressed answer would hide;
* those the router writes itself or turns into its own: the credentials
  (``Authorization``, ``x-api-key``; ``router.protocol.upstream_authorization`` and the
  fleet's keys decide what a worker gets), the request id, the trace context
  (``router.trace_context``), ``x-tenant`` (the router's budget key);
* ``Cookie``: the client's session with its application, no worker's business;
* the CORS fields (``Origin``, ``Access-Control-Request-*``): the router answers for which
  pages may read it (``router.cors``); a worker seeing ``Origin`` would add its own
  allowing fields (vLLM allows any origin);
* what a client may say of where it is (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``): a
  worker trusts them from a proxy on its host (uvicorn from 127.0.0.1), and the client could
  write any address there.

A field sent several times is sent once, its values joined with commas.
``worker_headers`` adds the router's own: the request's JSON type, its id, the trace
context and the credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from router.protocol import upstream_authorization
from router.trace_context import trace_headers

NOT_FORWARDED = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authorization", "transfer-encoding",
    "te", "trailer", "upgrade", "host", "content-length", "content-type", "content-encoding",
    "expect", "accept-encoding", "authorization", "x-api-key", "traceparent", "tracestate",
    "x-tenant", "cookie", "x-request-id", "origin", "forwarded", "x-real-ip"})
NOT_FORWARDED_PREFIXES = ("proxy-", "access-control-request-", "x-forwarded-")


@lru_cache(maxsize=8)
def _not_forwarded(request_id_header: str) -> frozenset[str]:
    return NOT_FORWARDED | {request_id_header.lower()}


def forwarded_headers(client: Mapping[str, str], request_id_header: str) -> dict[str, str]:
    """The client's fields (``client``: its request's headers, any case) a worker gets;
    the router adds its own after them."""
    skipped = _not_forwarded(request_id_header)
    getall = getattr(client, "getall", None)     # every Connection field, not the first
    named = (", ".join(getall("connection", ())) if getall is not None
             else client.get("connection") or client.get("Connection"))
    if named:
        skipped = skipped | {name.strip().lower() for name in named.split(",")}
    forwarded: dict[str, str] = {}
    names: dict[str, str] = {}          # lower-case name -> the name as first sent
    for name, value in client.items():
        lower = name.lower()
        if lower in skipped or lower.startswith(NOT_FORWARDED_PREFIXES):
            continue
        first = names.setdefault(lower, name)
        forwarded[first] = f"{forwarded[first]}, {value}" if first in forwarded else value
    return forwarded


def worker_headers(client: Mapping[str, str], request_id_header: str, id_field: str,
                   request_id: str) -> dict[str, str]:
    """Every header field a worker is sent with a request whose client sent ``client``: the
    client's own (``forwarded_headers``), then the router's: ``Content-Type``, the request
    id under ``id_field``, the trace context (the engine's spans join the trace) and the
    ``Authorization`` the client's key gives (a worker's own key replaces it further on)."""
    headers = {**forwarded_headers(client, request_id_header),
               "Content-Type": "application/json", id_field: request_id,
               **trace_headers(client)}
    authorization = upstream_authorization(client)
    if authorization:
        headers["Authorization"] = authorization
    return headers

