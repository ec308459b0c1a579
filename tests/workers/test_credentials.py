"""workers/credentials.py: workers' API keys read from the variables the fleet file names."""

from __future__ import annotations

import pytest

from workers.credentials import MissingApiKey, worker_api_key, worker_authorizations
from workers.fleet import FleetConfigError, parse_fleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def fleet(*workers: dict[str, object]) -> list[object]:
    parsed = parse_fleet({"models": {MODEL: {"arch": "llama-3.1-8b"}},
                          "workers": [{"gpu": "h100", "models": [MODEL], **w}
                                      for w in workers]})
    return [w.info for w in parsed.workers]


def test_each_keyed_worker_gets_its_own_bearer_at_its_base_url() -> None:
    infos = fleet({"id": "a", "url": "http://10.0.0.7:8000", "api_key_env": "KEY_A"},
                  {"id": "b", "url": "http://10.0.0.8", "api_key_env": "KEY_B"},
                  {"id": "open", "url": "http://10.0.0.9:8000"})
    environ = {"KEY_A": "sk-a", "KEY_B": "sk-b"}
    assert worker_authorizations(infos, environ) == {
        "http://10.0.0.7:8000": "Bearer sk-a", "http://10.0.0.8:80": "Bearer sk-b"}
    assert worker_api_key(infos[0], environ) == "sk-a"       # type: ignore[arg-type]
    assert worker_api_key(infos[2], environ) is None          # type: ignore[arg-type]


def test_unset_or_empty_variables_are_named_with_their_workers() -> None:
    infos = fleet({"id": "a", "url": "http://10.0.0.7:8000", "api_key_env": "KEY_A"},
                  {"id": "b", "url": "http://10.0.0.8:8000", "api_key_env": "KEY_B"},
                  {"id": "c", "url": "http://10.0.0.9:8000", "api_key_env": "KEY_A"})
    with pytest.raises(MissingApiKey) as raised:
        worker_authorizations(infos, {"KEY_B": ""})
    message = str(raised.value)
    assert "a, b, c" in message and "KEY_A, KEY_B" in message and "not set" in message
    assert isinstance(raised.value, FleetConfigError)       # the CLI's one-line error
    with pytest.raises(MissingApiKey, match="KEY_A"):
        worker_api_key(infos[0], {})                         # type: ignore[arg-type]


def test_no_key_is_needed_when_no_worker_names_one() -> None:
    infos = fleet({"id": "a", "url": "http://10.0.0.7:8000"})
    assert worker_authorizations(infos, {}) == {}
