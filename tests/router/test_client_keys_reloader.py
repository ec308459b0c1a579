"""router/client_keys_reloader.py: a tenant's key added or retired in the keys file takes
effect without a restart; a broken file leaves the keys in force."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import aiohttp
import pytest

from router.client_auth import TenantKeysError
from router.client_keys_reloader import ClientKeysReloader
from router.keys import METRICS
from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}


def rewrite(path: Path, text: str) -> None:
    """Write ``text`` and move the modification time on (a rewrite within one clock tick
    would otherwise look unchanged when the size is the same)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def settled(reloader: ClientKeysReloader) -> bool:
    """One poll sees the change and waits for the file to hold still; the next reads it."""
    assert not reloader.check()
    return reloader.check()


def test_a_changed_file_replaces_its_keys_and_a_broken_one_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme-1\n")
    outcomes: list[bool] = []
    reloader = ClientKeysReloader(["sk-bare"], path, on_result=outcomes.append)
    assert reloader.keys.lookup("sk-acme-1") == (True, "acme")
    assert not reloader.check()                           # nothing changed
    rewrite(path, "acme: [sk-acme-2]\nglobex: sk-globex\n")
    assert settled(reloader)
    assert reloader.keys.lookup("sk-acme-1") == (False, None)     # retired
    assert reloader.keys.lookup("sk-acme-2") == (True, "acme")
    assert reloader.keys.lookup("sk-bare") == (True, None)        # --api-key stays
    with caplog.at_level(logging.ERROR, logger="router.client_keys_reloader"):
        rewrite(path, "acme: [sk-acme-2\n")
        assert not settled(reloader)
        path.unlink()
        assert not settled(reloader)
    assert reloader.keys.lookup("sk-acme-2") == (True, "acme")    # the keys in force stay
    assert outcomes == [True, False, False]        # (the router's reload metrics read these)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "invalid YAML" in messages[0]
    assert "cannot read" in messages[1]
    assert all("sk-" not in m for m in messages)
    with pytest.raises(TenantKeysError):                          # at start: no keys to keep
        ClientKeysReloader([], path)
    assert not ClientKeysReloader(["sk-bare"], None).check()


def test_the_keys_taken_are_those_of_the_read_that_settled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file was hashed, then read again to be parsed: a write between the two (here a
    save cut short, still valid YAML) was taken without ever reading the same at two polls,
    and a tenant's key was lost until the next save."""
    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme\n")
    reloader = ClientKeysReloader([], path)
    rewrite(path, "acme: sk-acme\nglobex: sk-globex\n")
    assert not reloader.check()                           # new: read once, waiting
    read_bytes, cut = Path.read_bytes, [False]

    def read_then_cut(self: Path) -> bytes:
        content = read_bytes(self)
        if self == path and not cut[0]:     # a save begins just after this read
            cut[0] = True
            path.write_text("acme: sk-acme\n")
        return content

    monkeypatch.setattr(Path, "read_bytes", read_then_cut)
    assert reloader.check()                               # the same at two polls: taken
    assert cut[0]
    assert reloader.keys.lookup("sk-globex") == (True, "globex")


def test_a_file_that_is_not_utf8_is_refused_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Saved in Latin-1 (a tenant's accented name), it escaped the reloader as a
    UnicodeDecodeError: a crash in the log, no refusal counted, so
    kvroute_client_keys_last_reload_successful stayed 1 and ClientKeysRefused never fired;
    at start, a traceback and status 1 instead of 2 and the reason."""
    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme-1\n")
    outcomes: list[bool] = []
    reloader = ClientKeysReloader([], path, on_result=outcomes.append)
    with caplog.at_level(logging.ERROR):
        before = path.stat().st_mtime_ns
        path.write_bytes(b"acme: sk-acme-1\nsoci\xe9t\xe9: sk-societe\n")
        os.utime(path, ns=(before + 10**9, before + 10**9))
        assert not settled(reloader)
    assert outcomes == [False]
    assert "not UTF-8 text" in caplog.text and "sk-" not in caplog.text
    assert reloader.keys.lookup("sk-acme-1") == (True, "acme")    # the keys in force stay
    with pytest.raises(TenantKeysError, match="not UTF-8 text"):  # at start: the reason
        ClientKeysReloader([], path)
    rewrite(path, "acme: sk-acme-2\n")
    assert settled(reloader)
    assert outcomes == [False, True]


def test_a_file_whose_reading_fails_unforeseen_is_refused_and_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import router.client_keys_reloader as client_keys_reloader

    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme-1\n")
    outcomes: list[bool] = []
    reloader = ClientKeysReloader([], path, on_result=outcomes.append)

    def unforeseen(_: Path, content: bytes | None = None) -> dict[str, str]:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(client_keys_reloader, "load_tenant_keys", unforeseen)
    with caplog.at_level(logging.ERROR):
        rewrite(path, "acme: sk-acme-2\n")
        assert not settled(reloader)
    assert outcomes == [False]
    assert "refused, the keys in force stay: reading it failed (RecursionError)" in caplog.text
    assert reloader.keys.lookup("sk-acme-1") == (True, "acme")


def test_a_file_written_in_steps_is_applied_once_it_holds_still(tmp_path: Path) -> None:
    """Written in two steps a poll apart, its later tenants were refused 401 between them;
    a file only touched changes nothing."""
    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme\n")
    outcomes: list[bool] = []
    reloader = ClientKeysReloader([], path, on_result=outcomes.append)
    rewrite(path, "acme: sk-acme\nglobex: sk-globex\n")        # the first step
    assert not reloader.check()
    rewrite(path, "acme: sk-acme\nglobex: sk-globex\nbatch: sk-batch\n")     # the second
    assert not reloader.check()                    # new again: it waits for a still file
    assert reloader.keys.lookup("sk-acme") == (True, "acme")     # the keys in force serve
    assert reloader.check()
    assert reloader.keys.lookup("sk-batch") == (True, "batch")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert not reloader.check() and not reloader.check()
    assert outcomes == [True]


@pytest.mark.integration
async def test_a_key_added_and_retired_while_the_router_runs(
        emulated_fleet: FleetConfig, make_router: RouterFactory, tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    rewrite(path, "acme: sk-acme-1\n")
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), api_keys_file=path,
                               reload_interval_s=0.05, tenant_labels=2)
    tenants = router.app[METRICS].tenants
    assert tenants.label("squat", count=False) == "squat"     # the one place left

    async def status(key: str) -> int:
        async with aiohttp.ClientSession() as http, http.post(
                f"{router.url}/v1/chat/completions", json=CHAT,
                headers={"Authorization": f"Bearer {key}"}) as resp:
            await resp.read()
            return resp.status

    assert (await status("sk-acme-1"), await status("sk-acme-2")) == (200, 401)
    rewrite(path, "acme: sk-acme-2\nglobex: sk-globex\n")
    for _ in range(100):                  # the watcher polls every 0.05 s
        if await status("sk-acme-2") == 200:
            break
        await asyncio.sleep(0.05)
    assert (await status("sk-acme-1"), await status("sk-acme-2")) == (401, 200)
    # a tenant the reloaded file names has a series of its own, the places taken or not
    assert tenants.label("globex", count=False) == "globex"
    assert tenants.label("other", count=False) == "(other)"


def test_an_operator_key_listed_for_a_tenant_is_warned_of(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Listed for a tenant too, the operator's key became that tenant's and was refused on
    /debug, with no word in the log, at start or at a reload."""
    path = tmp_path / "keys.yaml"
    path.write_text("acme: sk-acme\n")
    caplog.set_level(logging.WARNING)
    reloader = ClientKeysReloader(("sk-op",), path, 1.0)
    assert not caplog.records
    rewrite(path, "acme: sk-acme\nops: sk-op\n")
    assert settled(reloader)
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("key 1 of --api-key is listed for tenant ops in ")
    assert "sk-op" not in warning
    assert reloader.keys.lookup("sk-op") == (True, "ops")
