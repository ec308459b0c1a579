"""workers/fleet.py: fleet entries, errors naming the field, and where KV events are read."""

from __future__ import annotations

from typing import Any

import pytest

from workers.fleet import FleetConfigError, parse_fleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def one_worker(**entry: Any) -> dict[str, Any]:
    return {"models": {MODEL: {"arch": "llama-3.1-8b"}},
            "workers": [{"id": "w0", "gpu": "h100", "models": [MODEL], **entry}]}


def test_a_url_worker_keeps_its_stream_and_labels() -> None:
    fleet = parse_fleet(one_worker(url="http://10.0.0.7:8000/", kv_events="tcp://10.0.0.7:5557",
                                   labels={"pool": "premium", "kv_events_topic": "kv"}))
    info = fleet.workers[0].info
    assert info.url == "http://10.0.0.7:8000"
    assert info.kv_events_endpoint == "tcp://10.0.0.7:5557"
    assert dict(info.labels) == {"pool": "premium", "kv_events_topic": "kv"}


def test_an_emulated_publisher_is_followed_at_its_own_endpoints() -> None:
    fleet = parse_fleet(one_worker(emulate={
        "port": 8101, "kv_events": "tcp://*:5557", "kv_events_replay": "tcp://*:5558",
        "kv_events_topic": "kv"}))
    info = fleet.workers[0].info
    assert info.kv_events_endpoint == "tcp://127.0.0.1:5557"
    assert dict(info.labels) == {"kv_events_replay": "tcp://127.0.0.1:5558",
                                 "kv_events_topic": "kv"}


def test_the_entry_wins_over_the_emulator_and_off_means_none() -> None:
    fleet = parse_fleet(one_worker(emulate={"port": 8101, "kv_events": "tcp://*:5557"},
                                   kv_events="tcp://127.0.0.2:6000",
                                   labels={"kv_events_topic": "mine"}))
    assert fleet.workers[0].info.kv_events_endpoint == "tcp://127.0.0.2:6000"
    quiet = parse_fleet(one_worker(emulate={"port": 8101, "kv_events": "off"}))
    assert quiet.workers[0].info.kv_events_endpoint is None
    assert dict(quiet.workers[0].info.labels) == {}


@pytest.mark.parametrize(("entry", "message"), [
    ({}, r"workers\[0\]: exactly one of url: or emulate: is required"),
    ({"url": "http://a", "emulate": {"port": 1}}, "exactly one of url: or emulate:"),
    ({"emulate": {"port": "x"}}, r"workers\[0\]\.emulate\.port: required, an integer"),
    ({"url": "http://a", "colour": "red"}, r"workers\[0\]: unknown key\(s\): colour"),
])
def test_bad_entries_name_the_field(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(FleetConfigError, match=message):
        parse_fleet(one_worker(**entry))


def test_api_key_env_names_a_variable_never_a_key() -> None:
    info = parse_fleet(one_worker(url="http://10.0.0.7:8000",
                                  api_key_env="VLLM_API_KEY")).workers[0].info
    assert info.api_key_env == "VLLM_API_KEY"
    assert parse_fleet(one_worker(url="http://10.0.0.7:8000")).workers[0].info.api_key_env is None
    for bad in ("sk-abc123", "", "1KEY", 42):
        with pytest.raises(FleetConfigError, match=r"workers\[0\]\.api_key_env: must be the "
                                                   "name of an environment variable"):
            parse_fleet(one_worker(url="http://10.0.0.7:8000", api_key_env=bad))


def test_a_worker_url_is_http_or_https_with_a_host() -> None:
    for bad in ("10.0.0.7:8000", "ftp://10.0.0.7", "http://", "localhost"):
        with pytest.raises(FleetConfigError, match=r"workers\[0\]\.url: must look like "
                                                   "http://HOST:PORT or https://HOST:PORT"):
            parse_fleet(one_worker(url=bad))
    info = parse_fleet(one_worker(url="https://10.0.0.7:8443",
                                  tls_ca_file="/etc/kvroute/ca.pem")).workers[0].info
    assert (info.url, info.tls_ca_file) == ("https://10.0.0.7:8443", "/etc/kvroute/ca.pem")
    with pytest.raises(FleetConfigError, match=r"tls_ca_file: a CA bundle's path, for a worker "
                                               "served over https://"):
        parse_fleet(one_worker(url="http://10.0.0.7:8000", tls_ca_file="/etc/ca.pem"))


def test_an_emulated_worker_serving_tls_is_reached_over_https() -> None:
    info = parse_fleet(one_worker(emulate={"port": 8443, "ssl_certfile": "c.pem"},
                                  tls_ca_file="ca.pem")).workers[0].info
    assert info.url == "https://127.0.0.1:8443"


def test_batch_limits_come_from_the_entry_else_its_emulate_or_launch_block() -> None:
    def limits(**entry: Any) -> tuple[int | None, int | None]:
        info = parse_fleet(one_worker(**entry)).workers[0].info
        return info.max_num_seqs, info.max_num_batched_tokens

    assert limits(url="http://10.0.0.7:8000") == (None, None)      # the GPU's defaults
    assert limits(url="http://10.0.0.7:8000", max_num_seqs=64) == (64, None)
    assert limits(emulate={"port": 8101, "max_num_seqs": 8,
                           "max_num_batched_tokens": 1024}) == (8, 1024)
    assert limits(url="http://10.0.0.7:8000",
                  launch={"model": "/m", "max_num_batched_tokens": 4096}) == (None, 4096)
    assert limits(emulate={"port": 8101, "max_num_seqs": 8}, max_num_seqs=16) == (16, None)
    with pytest.raises(FleetConfigError, match=r"workers\[0\]\.emulate\.max_num_seqs: must be "
                                               r"a positive integer, got 0"):
        parse_fleet(one_worker(emulate={"port": 8101, "max_num_seqs": 0}))
    with pytest.raises(FleetConfigError, match=r"workers\[0\]\.max_num_batched_tokens: must "
                                               r"be a positive integer, got '4k'"):
        parse_fleet(one_worker(url="http://10.0.0.7:8000", max_num_batched_tokens="4k"))
