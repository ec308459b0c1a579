"""Clients' API keys: with ``Settings.api_keys``, only clients holding one are served.

As vLLM's ``--api-key``: a request whose path is guarded must carry one of the keys, as
``Authorization: Bearer <key>`` (OpenAI clients) or ``x-api-key: <key>`` (Anthropic
clients); otherwise it is answered 401 (``router.errors.Unauthorized``) before its body is
read, and counted in ``kvroute_requests_total{status="401"}``. Guarded: the OpenAI and
Anthropic APIs (``/v1/…``), vLLM's pooling APIs (``/score``, ``/rerank``, ``/v2/rerank``,
``/pooling``, ``/classify``), SageMaker's ``/invocations`` (open at vLLM, which leaves it to
SageMaker's own authentication; here a tenant's budget applies to it), ``/tokenize`` and
``/detokenize`` (they spend worker time), and ``/debug/…`` (what the router knows of traffic
and workers). Open: ``/health``, ``/ping`` and ``/metrics``, for load balancers and
Prometheus. Keys are compared as SHA-256 digests in
constant time; no key is ever logged or echoed.

Keys may be named by tenant (``load_tenant_keys``, ``kvroute serve --api-keys-file``): a
request holding a tenant's key is that tenant's (``TENANT``, read by the director), whatever
``x-tenant`` it sends, so cost and statistics per tenant cannot be claimed by another client.
A request holding an unnamed key keeps the usual tenant (``x-tenant``, else the key's digest).
A tenant's key is refused on ``/debug/…`` (403, ``router.errors.Forbidden``): those pages
show every tenant's traffic, budgets and decisions, so they are the operator's, read with an
unnamed key (``--api-key``); for the same reason a tenant's answers carry no
``x-kvroute-reason`` (``hide_reason_from_tenants``: it tells what other tenants cached).
The file is read again when it changes (``router.client_keys_reloader``).

```yaml
acme: [sk-acme-1, sk-acme-2]     # tenant: key, or list of keys (two while rotating one)
globex: sk-globex
```
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from aiohttp.typedefs import Middleware

from router.errors import Forbidden, Unauthorized
from router.name_text import is_name_text
from router.request_ids import usable
from router.settings import api_key_problem

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

GUARDED_PREFIXES = ("/v1/", "/v2/", "/score", "/rerank", "/pooling", "/classify", "/tokenize",
                    "/detokenize", "/invocations", "/debug/")
OPERATOR_PREFIX = "/debug"          # every tenant's traffic: not for a tenant's key
TENANT = web.RequestKey("kvroute_tenant", str)     # the tenant a named key belongs to
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _digest(key: str) -> bytes:
    # a header's bytes that are not UTF-8 were kept by aiohttp as escapes
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def presented_key(request: web.Request) -> str | None:
    """The key a request carries: the bearer token, else ``x-api-key``."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


class TenantKeysError(ValueError):
    """A tenant keys file is unreadable or malformed; the message names the entry."""


def load_tenant_keys(path: Path, content: bytes | None = None) -> dict[str, str]:
    """``key -> tenant`` from a YAML mapping of tenant names to a key or a list of keys
    (``content``: the file's bytes, already read)."""
    try:
        text = (content if content is not None else path.read_bytes()).decode("utf-8")
        data: Any = yaml.safe_load(text)
    except OSError as exc:
        raise TenantKeysError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:    # (a traceback at start, a reload never counted)
        raise TenantKeysError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except yaml.YAMLError as exc:        # its message quotes the file: keys too
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise TenantKeysError(f"{path}: invalid YAML{where}") from None
    if not isinstance(data, Mapping) or not data:
        raise TenantKeysError(f"{path}: must map tenant names to a key or a list of keys")
    tenants: dict[str, str] = {}
    for tenant, keys in data.items():
        if isinstance(tenant, bool):      # YAML 1.1 reads yes, no, on, off as booleans
            raise TenantKeysError(f"{path}: tenant {tenant!r}: a name must be printable text; "
                                  "YAML read a boolean (yes, no, on, off): quote the name")
        if not isinstance(tenant, str) or not is_name_text(tenant) or not tenant.strip():
            raise TenantKeysError(f"{path}: tenant {tenant!r}: a name must be printable text")
        listed = [keys] if isinstance(keys, str) else keys
        if (not isinstance(listed, list) or not listed
                or not all(isinstance(k, str) and k.strip() for k in listed)):
            raise TenantKeysError(f"{path}: {tenant}: must be a key or a list of keys "
                                  "(non-empty strings)")
        for number, key in enumerate(listed, 1):     # the key itself is never quoted
            problem = api_key_problem(key)
            if problem is not None:
                raise TenantKeysError(f"{path}: {tenant}: key {number} {problem}")
        for number, key in enumerate(listed, 1):
            if key in tenants:
                if tenants[key] == tenant:
                    raise TenantKeysError(f"{path}: {tenant}: key {number} is listed twice "
                                          "for it")
                raise TenantKeysError(f"{path}: {tenant}: a key of {tenants[key]} too: a "
                                      "key names one tenant")
            tenants[key] = tenant
    _refuse_a_tenant_twice(path, text)      # (the names are known printable now)
    return tenants


def _refuse_a_tenant_twice(path: Path, text: str) -> None:
    """A tenant written twice: YAML keeps the last entry without a word, so adding a second
    ``acme:`` line for a new key shut out every client of the first one."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key_node, _ in node.value:
        name, line = str(key_node.value), key_node.start_mark.line + 1
        if name in first_line:
            raise TenantKeysError(f"{path}: tenant {name} is written twice (lines "
                                  f"{first_line[name]} and {line}): list all its keys on one "
                                  f"entry, e.g. {name}: [key-1, key-2]")
        first_line[name] = line


class ClientKeys:
    """The router's accepted keys, as digests, each with its tenant's name or None."""

    def __init__(self, keys: Sequence[str], tenants: Mapping[str, str] | None = None) -> None:
        named = dict(tenants or {})
        if (not keys and not named) or not all(keys):
            raise ValueError("api_keys: every key must be a non-empty string")
        entries = [(key, None) for key in keys if key not in named]
        self._entries = tuple((_digest(key), tenant)
                              for key, tenant in [*entries, *named.items()])
        self.tenants = frozenset(named.values())      # the tenants some key names

    def lookup(self, key: str) -> tuple[bool, str | None]:
        """Whether ``key`` is accepted, and the tenant it names (None: unnamed)."""
        digest = _digest(key)
        matched, tenant = False, None
        for known, name in self._entries:     # every key compared, whichever matches
            if secrets.compare_digest(digest, known):
                matched, tenant = True, name
        return matched, tenant


def guarded(path: str) -> bool:
    return path.startswith(GUARDED_PREFIXES) or path in ("/v1", "/debug")


def operator_only(path: str) -> bool:
    return path == OPERATOR_PREFIX or path.startswith(OPERATOR_PREFIX + "/")


REASON_HEADER = "x-kvroute-reason"


async def hide_reason_from_tenants(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a tenant's answers carry no ``x-kvroute-reason``. The reason
    tells how much of the prompt was cached where (``prefix 0.96 on w3``), and the caches are
    shared: a tenant guessing another's prompt block by block would read each guess's share
    of it, higher for the right guess than for a wrong one. The operator reads the
    reason in ``/debug/decisions`` by the request's id."""
    if TENANT in request:
        response.headers.popall(REASON_HEADER, None)


def client_auth_middleware(current: Callable[[], ClientKeys], on_refused: Callable[[str], None],
                           request_id_header: str = "x-request-id") -> Middleware:
    """The middleware refusing guarded requests without a key of ``current()`` (placed
    inside ``router.errors.error_middleware``, which renders the 401 in the path's error
    shape, with the client's request id when it sent one, as every refusal has), and
    refusing a tenant's key on the operator's ``/debug/…`` pages (403)."""

    def refusal_headers(request: web.Request, challenge: bool = True) -> dict[str, str]:
        headers = dict(_CHALLENGE) if challenge else {}
        given = request.headers.get(request_id_header)
        if usable(given):
            headers[request_id_header] = given
        return headers

    @web.middleware
    async def client_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "OPTIONS" or not guarded(request.path):
            return await handler(request)
        key = presented_key(request)
        if key is None:
            on_refused(request.path)
            raise Unauthorized("You didn't provide an API key. Send it as "
                               "`Authorization: Bearer <key>` (or `x-api-key: <key>`).",
                               headers=refusal_headers(request))
        accepted, tenant = current().lookup(key)
        if not accepted:
            on_refused(request.path)
            raise Unauthorized("Incorrect API key provided.", headers=refusal_headers(request))
        if tenant is not None:
            if operator_only(request.path):
                raise Forbidden(f"The key of tenant {tenant} cannot read {request.path}: the "
                                "/debug pages show every tenant's traffic and are read with "
                                "the operator's key (--api-key).",
                                headers=refusal_headers(request, challenge=False))
            request[TENANT] = tenant
        return await handler(request)

    return client_auth
