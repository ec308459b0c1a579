"""router/client_auth.py: with ``--api-key``, clients without one of the router's keys are
refused 401 in their API's shape (OpenAI, Anthropic), counted, and never served; ``/health``
and ``/metrics`` stay open. Through the official ``openai`` and ``anthropic`` clients, over
the router suite's emulated workers (their own process)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest

from router.client_auth import ClientKeys, TenantKeysError, guarded, load_tenant_keys
from router.keys import METRICS
from router.settings import Settings
from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig
from workers.ports import free_port

KEYS = ("sk-router-one", "sk-router-two")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}


def test_guarded_paths_are_the_apis_tokenizers_and_debug() -> None:
    for path in ("/v1/chat/completions", "/v1/models", "/v1/messages", "/v1/responses/r1",
                 "/v1", "/tokenize", "/detokenize", "/debug/decisions", "/debug/fleet"):
        assert guarded(path), path
    for path in ("/health", "/ping", "/metrics", "/", "/v2x"):
        assert not guarded(path), path


def test_keys_are_matched_exactly_and_never_shown() -> None:
    keys = ClientKeys(KEYS)
    assert keys.lookup("sk-router-two")[0] and not keys.lookup("sk-router-tw")[0]
    assert not keys.lookup("SK-ROUTER-ONE")[0] and not keys.lookup("")[0]
    with pytest.raises(ValueError, match="non-empty"):
        ClientKeys(["sk-a", ""])
    settings = Settings(fleet_path=Path("f"), routing_path=Path("r"), api_keys=KEYS)
    assert "sk-router" not in repr(settings)
    with pytest.raises(ValueError, match="api_keys: every API key must be a non-empty string"):
        Settings(fleet_path=Path("f"), routing_path=Path("r"), api_keys=("",))
    for unsendable in (" ", "sk a", "sk-\u00e9", "sk-a\n"):   # no client can send these
        with pytest.raises(ValueError, match="must be visible ASCII") as refused:
            Settings(fleet_path=Path("f"), routing_path=Path("r"), api_keys=(unsendable,))
        assert "sk" not in str(refused.value)                  # never quoted


@pytest.mark.integration
async def test_a_client_without_a_key_is_refused_in_its_apis_shape(
        emulated_fleet: FleetConfig, make_router: RouterFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=KEYS)
    refused = 0
    async with aiohttp.ClientSession() as http:
        for headers, reason in (({}, "You didn't provide an API key"),
                                ({"Authorization": "Bearer sk-wrong"}, "Incorrect API key"),
                                ({"Authorization": "Basic sk-router-one"}, "didn't provide"),
                                ({"x-api-key": "sk-router-on"}, "Incorrect API key")):
            async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                                 headers=headers) as resp:
                body = await resp.json()
                refused += 1
                assert resp.status == 401 and resp.headers["WWW-Authenticate"] == "Bearer"
                assert resp.headers["x-kvroute-worker"] == "none"
                assert body["error"]["code"] == "invalid_api_key"
                assert body["error"]["type"] == "invalid_request_error"
                assert reason in body["error"]["message"]
        async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                             headers={"x-request-id": "mine-7"}) as resp:
            refused += 1               # a refusal echoes the client's request id, as all do
            assert resp.status == 401 and resp.headers["x-request-id"] == "mine-7"
        async with http.post(f"{router.url}/v1/messages", json=CHAT) as resp:
            refused += 1
            assert resp.status == 401
            assert await resp.json() == {"type": "error", "error": {
                "type": "authentication_error", "message": "You didn't provide an API key. "
                "Send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`)."}}
        for method, path in (("GET", "/v1/models"), ("GET", "/debug/decisions"),
                             ("GET", "/debug/fleet"), ("POST", "/tokenize")):
            async with http.request(method, router.url + path, json={"model": MODEL,
                                                                     "prompt": "a"}) as resp:
                refused += 1
                assert resp.status == 401, path
        for path in ("/health", "/ping", "/metrics"):      # load balancers, Prometheus
            async with http.get(router.url + path) as resp:
                assert resp.status == 200, path
        async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                             headers={"authorization": "bearer sk-router-two"}) as resp:
            assert resp.status == 200 and resp.headers["x-kvroute-worker"] == "h100-fast"
    assert router.metric("kvroute_requests_total", model="(unknown)", worker="", gpu="",
                         profile="none", status="401") == refused
    assert router.metric("kvroute_requests_total", model=MODEL, worker="h100-fast",
                         gpu="H100-80GB", profile="default", status="200") == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "sk-router" not in logged and "sk-wrong" not in logged


@pytest.mark.integration
async def test_the_official_clients_pass_with_a_key_and_fail_without(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=KEYS)
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key=KEYS[0], max_retries=0)
    reply = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert reply.choices[0].message.content
    assert [m.id for m in (await client.models.list()).data] == [MODEL]
    wrong = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="sk-other", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        await wrong.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert raised.value.code == "invalid_api_key"
    claude = anthropic.AsyncAnthropic(base_url=router.url, api_key=KEYS[1], max_retries=0)
    message = await claude.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
    assert message.content[0].type == "text"
    stranger = anthropic.AsyncAnthropic(base_url=router.url, api_key="sk-x", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        await stranger.messages.create(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])


@pytest.mark.integration
async def test_without_keys_nothing_is_asked(emulated_fleet: FleetConfig,
                                             make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast"]))
    async with aiohttp.ClientSession() as http, http.post(
            f"{router.url}/v1/chat/completions", json=CHAT) as resp:
        assert resp.status == 200


def test_a_tenant_keys_file_names_each_key_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("acme: [sk-acme-1, sk-acme-2]\nglobex: sk-globex\n")
    assert load_tenant_keys(path) == {"sk-acme-1": "acme", "sk-acme-2": "acme",
                                      "sk-globex": "globex"}
    keys = ClientKeys(["sk-plain", "sk-globex"], load_tenant_keys(path))
    assert keys.lookup("sk-acme-2") == (True, "acme")
    assert keys.lookup("sk-globex") == (True, "globex")     # named, though also given bare
    assert keys.lookup("sk-plain") == (True, None)
    assert keys.lookup("sk-none") == (False, None)
    for text, reason in (("- sk-a\n", "must map tenant names"),
                         ("acme: []\n", "acme: must be a key or a list of keys"),
                         ("acme: [sk-a, 3]\n", "acme: must be a key or a list of keys"),
                         ("acme: sk-a\nglobex: [sk-b, sk-a]\n", "globex: a key of acme too"),
                         ("42: sk-a\n", "a name must be printable text"),
                         ("acme: [sk-a, sk-a]\n", "acme: key 2 is listed twice for it"),
                         ("yes: sk-a\n", "YAML read a boolean \\(yes, no, on, off\\): quote"),
                         ("acme: [sk-a, 'sk b']\n", "acme: key 2 must be visible ASCII"),
                         ("acme: sk-a\nglobex: sk-g\nacme: sk-b\n",
                          "tenant acme is written twice \\(lines 1 and 3\\)"),
                         ("acme: sk-\u00e9t\u00e9\n", "acme: key 1 must be visible ASCII"),
                         ("acme: [\n", "invalid YAML")):
        path.write_text(text)
        with pytest.raises(TenantKeysError, match=reason):
            load_tenant_keys(path)
    with pytest.raises(TenantKeysError, match="cannot read: No such file"):
        load_tenant_keys(tmp_path / "missing.yaml")


@pytest.mark.integration
async def test_a_named_key_sets_the_tenant_whatever_x_tenant_says(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("acme: [sk-acme-1, sk-acme-2]\nglobex: sk-globex\n")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=("sk-plain",),
                               api_keys_file=keys_file)
    async with aiohttp.ClientSession() as http:
        for key, claimed in (("sk-acme-1", "globex"), ("sk-acme-2", None),
                             ("sk-globex", None), ("sk-plain", "team-x")):
            headers = {"Authorization": f"Bearer {key}"}
            if claimed:
                headers["x-tenant"] = claimed
            async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                                 headers=headers) as resp:
                assert resp.status == 200
        async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                             headers={"Authorization": "Bearer sk-acme-3"}) as resp:
            assert resp.status == 401

    def requests_of(tenant: str) -> int:
        return sum(1 for line in router.app[METRICS].render().decode().splitlines()
                   if line.startswith("kvroute_cost_dollars_total{")
                   and f'tenant="{tenant}"' in line and not line.endswith(" 0.0"))

    assert requests_of("acme") == 1 and requests_of("globex") == 1
    assert requests_of("team-x") == 1            # an unnamed key: x-tenant as before


@pytest.mark.integration
async def test_a_tenants_key_cannot_read_the_operators_debug_pages(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """Any tenant's key read /debug/admission (every tenant's spending and budgets) and
    /debug/decisions (every tenant's requests): they are the operator's."""
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("acme: sk-acme-1\n")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys=("sk-operator",),
                               api_keys_file=keys_file)
    async with aiohttp.ClientSession() as http:
        for path in ("/debug/admission", "/debug/decisions", "/debug/fleet", "/debug"):
            async with http.get(f"{router.url}{path}", headers={
                    "Authorization": "Bearer sk-acme-1", "x-request-id": "r-1"}) as resp:
                body = await resp.json()
                assert resp.status == 403, path
                assert body["error"]["type"] == "permission_error"
                assert "tenant acme" in body["error"]["message"]
                assert "sk-acme" not in body["error"]["message"]
                assert resp.headers["x-request-id"] == "r-1"
                assert "WWW-Authenticate" not in resp.headers
        async with http.get(f"{router.url}/debug/admission",
                            headers={"Authorization": "Bearer sk-operator"}) as resp:
            assert resp.status == 200
        async with http.get(f"{router.url}/debugging",        # not a /debug page: a 404
                            headers={"Authorization": "Bearer sk-acme-1"}) as resp:
            assert resp.status == 404
        async with http.post(f"{router.url}/v1/chat/completions", json=CHAT,
                             headers={"Authorization": "Bearer sk-acme-1"}) as resp:
            assert resp.status == 200                # its API as before


@pytest.mark.integration
async def test_a_tenants_answers_do_not_say_what_other_tenants_cached(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    """The reason (``prefix 0.96 on w3``) told a tenant how much of a guessed prompt another
    tenant had sent before; the operator reads it in /debug/decisions."""
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("acme: sk-acme-1\nglobex: sk-globex\n")
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]),
                               api_keys=("sk-operator",), api_keys_file=keys_file)
    secret = {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": "The vault code is walrus-7. " * 40}]}
    async with aiohttp.ClientSession() as http:
        for key in ("sk-acme-1", "sk-globex", "sk-operator"):
            async with http.post(f"{router.url}/v1/chat/completions", json=secret, headers={
                    "Authorization": f"Bearer {key}", "x-request-id": f"probe-{key}"}) as resp:
                await resp.read()
                assert resp.status == 200
                assert resp.headers["x-kvroute-worker"] in ("h100-fast", "a100-fast")
                if key == "sk-operator":
                    assert "prefix 1.00" in resp.headers["x-kvroute-reason"]
                else:
                    assert "x-kvroute-reason" not in resp.headers
        async with http.post(f"{router.url}/v1/chat/completions", json={**CHAT, "model": "nope"},
                             headers={"Authorization": "Bearer sk-globex"}) as resp:
            assert resp.status == 404 and "x-kvroute-reason" not in resp.headers
        async with http.get(f"{router.url}/debug/decisions?limit=5",
                            headers={"Authorization": "Bearer sk-operator"}) as resp:
            decisions = (await resp.json())["data"]
    globex = next(d for d in decisions if d["request_id"] == "probe-sk-globex")
    assert "prefix 1.00" in globex["reason"]


def test_kvroute_api_key_set_but_empty_stops_the_start() -> None:
    """A secret that rendered to nothing must not start a router open to anyone (in a
    process of its own: were it to start, it is stopped, not left serving)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "serve", "--fleet", str(root / "config/fleet.yaml"),
         "--routing", str(root / "config/routing.yaml"), "--port", str(free_port())],
        cwd=root, env={**os.environ, "KVROUTE_API_KEY": ""}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert err.decode().strip() == (
        "kvroute: KVROUTE_API_KEY is set but empty: give the key, or unset the variable to ask "
        "clients for none")


def test_a_bad_tenant_keys_file_stops_the_start(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main

    keys = tmp_path / "keys.yaml"
    keys.write_text("acme: sk-a\nglobex: sk-a\n")
    root = Path(__file__).resolve().parents[2]
    assert main(["serve", "--fleet", str(root / "config/fleet.yaml"), "--routing",
                 str(root / "config/routing.yaml"), "--api-keys-file", str(keys)]) == 2
    assert "globex: a key of acme too" in capsys.readouterr().err
