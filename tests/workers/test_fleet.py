"""workers/fleet.py: fleet entries, errors naming the field, and where KV events are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.fleet import FleetConfigError, load_fleet, parse_fleet

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
    ({"emulate": {}}, r"workers\[0\]\.emulate\.port: required, an integer"),
    ({"url": "http://a", "colour": "red"}, r"workers\[0\]: unknown key\(s\): colour"),
    # values of a wrong type that crashed the parser (a TypeError or ValueError, no refusal:
    # a live reload logged a traceback, counted no failure and kept the alert quiet)
    ({"url": "http://a", "gpu": ["h100"]},
     r"workers\[0\]\.gpu: must be a GPU class name, one of .*, got \['h100'\]"),
    ({"url": "http://a", "gpu": {"name": "h100"}}, r"workers\[0\]\.gpu: must be a GPU class"),
    ({"url": "http://[::1:8000"}, r"workers\[0\]\.url: must look like http://HOST:PORT .*"
                                  r"got 'http://\[::1:8000'"),
    ({"url": "http://[myhost]:8000"}, r"workers\[0\]\.url: must look like"),
    ({"emulate": {"port": 8101, "host": ["localhost"]}},
     r"workers\[0\]\.emulate\.host: must be an address or a host name, got \['localhost'\]"),
    ({"emulate": {"port": 8101, "host": ""}}, r"workers\[0\]\.emulate\.host: must be"),
    # model: beside models: was ignored
    ({"url": "http://a", "model": "other"}, r"workers\[0\]: give models: or model:, not both"),
    # label values a rule can never match: a list, a mapping, null; a boolean
    ({"url": "http://a", "labels": {"pool": ["premium", "standard"]}},
     r"workers\[0\]\.labels\.pool: must be a string, got \['premium', 'standard'\]"),
    ({"url": "http://a", "labels": {"pool": None}},
     r"workers\[0\]\.labels\.pool: must be a string, got null"),
    ({"url": "http://a", "labels": {"spot": True}},
     r"workers\[0\]\.labels\.spot: must be a string, got the boolean true \(YAML reads"),
])
def test_bad_entries_name_the_field(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(FleetConfigError, match=message):
        parse_fleet(one_worker(**entry))


def test_a_worker_without_a_gpu_or_an_empty_file_is_named_as_such() -> None:
    """They read 'unknown GPU class None' and 'top level must be a mapping'."""
    fleet = one_worker(url="http://a")
    del fleet["workers"][0]["gpu"]
    assert refusal(fleet) == (
        "<memory>: workers[0].gpu: required, one of A100-80GB, H100-80GB, L40S-48GB, a100, h100, "
        "l40s (or a class declared under gpu_classes: with memory_gb, tflops_bf16, "
        "bandwidth_gbps, price_per_hour)")
    with pytest.raises(FleetConfigError, match=r"f\.yaml: the file is empty"):
        parse_fleet(None, source="f.yaml")


def test_api_key_env_names_a_variable_never_a_key() -> None:
    info = parse_fleet(one_worker(url="http://10.0.0.7:8000",
                                  api_key_env="VLLM_API_KEY")).workers[0].info
    assert info.api_key_env == "VLLM_API_KEY"
    assert parse_fleet(one_worker(url="http://10.0.0.7:8000")).workers[0].info.api_key_env is None
    for bad in ("sk-abc123", "", "1KEY", 42):
        with pytest.raises(FleetConfigError, match=r"workers\[0\]\.api_key_env: must be the "
                                                   "name of an environment variable"):
            parse_fleet(one_worker(url="http://10.0.0.7:8000", api_key_env=bad))


def test_an_emulated_worker_on_an_ipv6_address_is_reached_in_brackets() -> None:
    """``emulate: {host: "::1"}`` was refused as a bad url (``http://::1:8101``), which the
    entry does not have."""
    fleet = parse_fleet(one_worker(emulate={"port": 8101, "host": "::1"}))
    assert fleet.workers[0].info.url == "http://[::1]:8101"


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


def test_a_user_and_password_in_a_worker_url_are_refused_without_echoing_them() -> None:
    """They were accepted, never sent, and printed in logs and /debug/fleet."""
    with pytest.raises(FleetConfigError) as raised:
        parse_fleet(one_worker(url="http://op:s3cr3t@127.0.0.1:8000/v"))
    message = str(raised.value)
    assert r"workers[0].url: a user or password in the URL" in message
    assert "api_key_env" in message and "127.0.0.1:8000/v" in message
    assert "s3cr3t" not in message and "op:" not in message
    with pytest.raises(FleetConfigError, match="api_key_env"):
        parse_fleet(one_worker(url="https://token@10.0.0.7:8443"))


@pytest.mark.parametrize("bad", ["http://10.0.0.7:8000?x=1", "http://10.0.0.7:8000/v1?x=1",
                                 "http://10.0.0.7:8000#f", "http://10.0.0.7:8000/?",
                                 "http://10.0.0.7:8000/a b", "http://10.0.0.7:8000/a\tb"])
def test_a_query_a_fragment_or_whitespace_in_a_worker_url_is_refused(bad: str) -> None:
    with pytest.raises(FleetConfigError, match=r"workers\[0\]\.url: must not (carry a query|"
                                               r"contain whitespace)"):
        parse_fleet(one_worker(url=bad))
    assert parse_fleet(one_worker(url="http://gw:8080/a/")).workers[0].info.url == \
        "http://gw:8080/a"                          # a reverse proxy's path prefix is kept


@pytest.mark.parametrize(("first", "second"), [
    ("http://10.0.0.7", "http://10.0.0.7:80/"), ("HTTP://Worker.Local:8000", "http://worker.local:8000/"),
    ("https://10.0.0.7/", "https://10.0.0.7:443"), ("http://[::1]:8000", "http://[::1]:8000/")])
def test_one_server_written_two_ways_is_refused_as_two_workers(first: str, second: str) -> None:
    data = one_worker(url=first)
    data["workers"].append({"id": "w1", "gpu": "a100", "models": [MODEL], "url": second})
    with pytest.raises(FleetConfigError, match=r"workers\[1\]\.url: .* is already the URL of "
                                               "worker 'w0'"):
        parse_fleet(data)


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


@pytest.mark.parametrize(("second", "message"), [
    ({"url": "http://10.0.0.7:8000/"},
     r"workers\[1\]\.url: http://10.0.0.7:8000 is already the URL of worker 'w0'; each "
     r"worker needs its own"),
    ({"emulate": {"port": 8101}},
     r"workers\[1\]\.emulate\.port: http://127.0.0.1:8101 is already the URL of worker 'w0'"),
])
def test_two_workers_at_one_address_are_refused(second: dict[str, Any], message: str) -> None:
    first = {"url": "http://10.0.0.7:8000"} if "url" in second else {"emulate": {"port": 8101}}
    data = one_worker(**first)
    data["workers"].append({"id": "w1", "gpu": "a100", "models": [MODEL], **second})
    with pytest.raises(FleetConfigError, match=message):
        parse_fleet(data)
    data["workers"][1] = {"id": "w1", "gpu": "a100", "models": [MODEL],
                          **({"url": "http://10.0.0.8:8000"} if "url" in second
                             else {"emulate": {"port": 8102}})}
    assert [w.info.id for w in parse_fleet(data).workers] == ["w0", "w1"]


H200 = {"memory_gb": 141, "tflops_bf16": 989.4, "bandwidth_gbps": 4800, "price_per_hour": 4.5}


def with_gpu(**fields_: Any) -> dict[str, Any]:
    data = one_worker(emulate={"port": 8101})
    data["gpu_classes"] = {"h200": {**H200, **fields_}}
    data["workers"][0]["gpu"] = "h200"
    return data


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(FleetConfigError) as err:
        parse_fleet(data)
    return str(err.value)


@pytest.mark.parametrize(("fields_", "message"), [
    ({"price_per_hour": "cheap"}, ".price_per_hour: must be a number >= 0, got 'cheap'"),
    ({"price_per_hour": [1]}, ".price_per_hour: must be a number >= 0, got [1]"),
    ({"price_per_hour": -3}, ".price_per_hour: must be a number >= 0, got -3"),
    ({"price_per_hour": float("nan")}, ".price_per_hour: must be a number >= 0, got nan"),
    ({"memory_gb": 0}, ".memory_gb: must be a positive number, got 0"),
    ({"tflops_bf16": float("inf")}, ".tflops_bf16: must be a positive number, got inf"),
    ({"bandwidth_gbps": "fast"}, ".bandwidth_gbps: must be a positive number, got 'fast'"),
    ({"bandwidth_gbps": True}, ".bandwidth_gbps: must be a positive number, got True"),
    ({"eta_gemm": 1.5}, ".eta_gemm: must be a number in (0, 1], got 1.5"),
    ({"eta_attn_decode": 0}, ".eta_attn_decode: must be a number in (0, 1], got 0"),
    ({"roofline_k": -1.2}, ".roofline_k: must be a positive number, got -1.2"),
    ({"step_overhead_s": -0.001}, ".step_overhead_s: must be a number >= 0, got -0.001"),
    ({"visible_memory_gb": 0}, ".visible_memory_gb: must be a positive number, got 0"),
    ({"default_max_num_seqs": 2.5}, ".default_max_num_seqs: must be a positive integer, got 2.5"),
    ({"default_max_num_batched_tokens": False},
     ".default_max_num_batched_tokens: must be a positive integer, got False"),
    ({"allreduce_bw_gbps": {2: 0}}, ".allreduce_bw_gbps.2: must be a positive number, got 0"),
    ({"allreduce_bw_gbps": {3: 100}},
     ".allreduce_bw_gbps: 3 is not a tensor-parallel size (1, 2, 4 or 8)"),
    ({"allreduce_bw_gbps": [300]}, ".allreduce_bw_gbps: must map tensor-parallel sizes to GB/s, "
                                   "such as {2: 300, 4: 230, 8: 210}, got [300]"),
    ({"price_per_hour": None}, ".price_per_hour: must be a number >= 0, got None"),
    ({"name": "h200x"}, ": gpu class 'h200': unknown field(s) name"),
])
def test_bad_gpu_class_numbers_name_the_key(fields_: dict[str, Any], message: str) -> None:
    assert refusal(with_gpu(**fields_)) == f"<memory>: gpu_classes.h200{message}"


def test_an_unknown_gpu_class_or_model_says_how_to_declare_it() -> None:
    """They named the built-in ones alone, and gpu_classes: and a model's shape fields are
    what a fleet of other GPUs or models needs."""
    data = one_worker(url="http://10.0.0.7:8000", gpu="a10g")
    assert refusal(data) == (
        "<memory>: workers[0].gpu: unknown GPU class 'a10g' (known: A100-80GB, H100-80GB, "
        "L40S-48GB, a100, h100, l40s; or one declared under gpu_classes: with memory_gb, "
        "tflops_bf16, bandwidth_gbps, price_per_hour)")
    data = one_worker(url="http://10.0.0.7:8000", models=["Qwen/Qwen2.5-7B-Instruct"])
    assert refusal(data) == (
        "<memory>: workers[0].models: 'Qwen/Qwen2.5-7B-Instruct' is not declared under models: "
        "(give it an arch: one of all-minilm-l6-v2, llama-3-70b, llama-3-8b, llama-3.1-70b, "
        "llama-3.1-8b, qwen3-embedding-0.6b; or its shape: layers, hidden, heads, kv_heads, "
        "head_dim, ffn, vocab)")


def test_a_gpu_class_and_a_model_not_built_in_load_with_what_their_errors_name() -> None:
    from workers.fleet import _GPU_REQUIRED, _MODEL_REQUIRED

    a10g = {"memory_gb": 24, "tflops_bf16": 125, "bandwidth_gbps": 600, "price_per_hour": 1.0}
    qwen = {"layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4, "head_dim": 128,
            "ffn": 18944, "vocab": 152064}
    assert (set(a10g), set(qwen)) == (set(_GPU_REQUIRED), set(_MODEL_REQUIRED))
    info = parse_fleet({
        "gpu_classes": {"a10g": a10g},
        "models": {"Qwen/Qwen2.5-7B-Instruct": {**qwen, "max_model_len": 32768}},
        "workers": [{"id": "w0", "gpu": "a10g", "models": ["Qwen/Qwen2.5-7B-Instruct"],
                     "url": "http://10.0.0.7:8000"}]}).workers[0].info
    assert (info.gpu.name, info.gpu.memory_gb, info.price_per_hour) == ("a10g", 24, 1.0)
    assert info.gpu.default_max_num_seqs == 256          # the fields' defaults
    spec = info.model_spec
    assert (spec.name, spec.layers, spec.kv_heads, spec.max_model_len, spec.runner) == (
        "Qwen/Qwen2.5-7B-Instruct", 28, 4, 32768, "generate")


def test_a_new_gpu_class_needs_its_numbers_and_a_free_gpu_is_fine() -> None:
    data = with_gpu()
    del data["gpu_classes"]["h200"]["price_per_hour"]
    assert refusal(data) == ("<memory>: gpu_classes.h200.price_per_hour: required for a GPU "
                             "class that is not built in (a number >= 0)")
    free = parse_fleet(with_gpu(price_per_hour=0, visible_memory_gb=None)).workers[0].info
    assert (free.price_per_hour, free.gpu.visible_memory_gb) == (0.0, None)
    h100 = parse_fleet({**one_worker(emulate={"port": 8101}),
                        "gpu_classes": {"h100": {"price_per_hour": 2}}})
    assert h100.workers[0].info.gpu.price_per_hour == 2     # a built-in class: override one


@pytest.mark.parametrize(("fields_", "message"), [
    ({"arch": "llama-3.1-8b", "max_model_len": -5},
     "max_model_len: must be a positive integer, got -5"),
    ({"arch": "llama-3.1-8b", "max_model_len": 8192.0},
     "max_model_len: must be a positive integer, got 8192.0"),
    ({"arch": "llama-3.1-8b", "layers": "32"}, "layers: must be a positive integer, got '32'"),
    ({"arch": "llama-3.1-8b", "dtype_bytes": True},
     "dtype_bytes: must be a positive integer, got True"),
    ({"layers": 32}, "hidden: required without arch: (a positive integer)"),
])
def test_bad_model_numbers_name_the_key(fields_: dict[str, Any], message: str) -> None:
    data = one_worker(emulate={"port": 8101})
    data["models"][MODEL] = fields_
    assert refusal(data) == f"<memory>: models.{MODEL}.{message}"


def test_a_model_entry_is_a_mapping() -> None:
    data = one_worker(emulate={"port": 8101})
    data["models"][MODEL] = "llama-3.1-8b"
    assert refusal(data) == (f"<memory>: models.{MODEL}: must be a mapping such as "
                             "{arch: llama-3-8b}")


@pytest.mark.parametrize(("entry", "message"), [
    ({"tensor_parallel": "two"}, "tensor_parallel: must be 1, 2, 4 or 8, got 'two'"),
    ({"tensor_parallel": 3}, "tensor_parallel: must be 1, 2, 4 or 8, got 3"),
    ({"tensor_parallel": 2.0}, "tensor_parallel: must be 1, 2, 4 or 8, got 2.0"),
    ({"tensor_parallel": True}, "tensor_parallel: must be 1, 2, 4 or 8, got True"),
    ({"price_per_hour": "cheap"}, "price_per_hour: must be a number >= 0, got 'cheap'"),
    ({"price_per_hour": [1]}, "price_per_hour: must be a number >= 0, got [1]"),
    ({"price_per_hour": -3}, "price_per_hour: must be a number >= 0, got -3"),
    ({"price_per_hour": float("nan")}, "price_per_hour: must be a number >= 0, got nan"),
    ({"max_num_seqs": 1.5}, "max_num_seqs: must be a positive integer, got 1.5"),
    ({"max_num_batched_tokens": True},
     "max_num_batched_tokens: must be a positive integer, got True"),
])
def test_bad_worker_numbers_name_the_key(entry: dict[str, Any], message: str) -> None:
    assert refusal(one_worker(emulate={"port": 8101}, **entry)) == \
        f"<memory>: workers[0].{message}"


@pytest.mark.parametrize(("entry", "message"), [
    ({"emulate": {"port": 99999}},
     "emulate.port: must be an integer within [1, 65535], got 99999"),
    ({"emulate": {"port": 0}}, "emulate.port: must be an integer within [1, 65535], got 0"),
    ({"emulate": {"port": True}},
     "emulate.port: must be an integer within [1, 65535], got True"),
    ({"emulate": {"port": "x"}}, "emulate.port: must be an integer within [1, 65535], got 'x'"),
    ({"emulate": {"host": "127.0.0.1"}},
     "emulate.port: required, an integer within [1, 65535]"),
    ({"url": "http://10.0.0.7:99999"},
     "url: its port must be an integer within [1, 65535], got 'http://10.0.0.7:99999'"),
    ({"url": "http://10.0.0.7:0"},
     "url: its port must be an integer within [1, 65535], got 'http://10.0.0.7:0'"),
    ({"url": "http://10.0.0.7:http"},
     "url: its port must be an integer within [1, 65535], got 'http://10.0.0.7:http'"),
])
def test_ports_are_within_1_to_65535(entry: dict[str, Any], message: str) -> None:
    assert refusal(one_worker(**entry)) == f"<memory>: workers[0].{message}"
    assert parse_fleet(one_worker(emulate={"port": 65535})).workers[0].info.url == \
        "http://127.0.0.1:65535"


@pytest.mark.parametrize(("emulate", "message"), [
    ({"time_scale": -1}, "time_scale: must be >= 0 (got -1)"),
    ({"num_gpu_blocks": -5}, "num_gpu_blocks: must be >= 2 (got -5)"),
    ({"max_model_len": -5}, "max_model_len: must be >= 2 (got -5)"),
    ({"faults": {"error_rate": 1.5}}, "faults.error_rate: must be within [0, 1] (got 1.5)"),
    ({"colour": "red"}, ": unknown key(s): colour"),
])
def test_the_emulate_block_is_read_as_kvroute_up_will(emulate: dict[str, Any],
                                                       message: str) -> None:
    sep = "" if message.startswith(":") else "."
    assert refusal(one_worker(emulate={"port": 8101, **emulate})) == \
        f"<memory>: workers[0].emulate{sep}{message}"


def test_tensor_parallel_needs_the_gpu_class_all_reduce_bandwidth() -> None:
    data = with_gpu()
    data["workers"][0]["tensor_parallel"] = 2
    assert refusal(data) == (
        "<memory>: workers[0].tensor_parallel: GPU class 'h200' has no all-reduce bandwidth "
        "for 2 GPUs (give gpu_classes.h200.allreduce_bw_gbps: {2: GB/s})")
    data["gpu_classes"]["h200"]["allreduce_bw_gbps"] = {2: 400}
    info = parse_fleet(data).workers[0].info
    assert (info.tensor_parallel, info.price_per_hour) == (2, 9.0)


def test_every_numeric_profile_field_has_a_rule() -> None:
    from dataclasses import fields

    from workers.engine.profiles import GpuProfile, ModelSpec
    from workers.fleet import GPU_FIELD_RULES, MODEL_FIELD_RULES

    special = {"name", "allreduce_bw_gbps", "runner", "matryoshka"}
    assert {f.name for f in fields(GpuProfile)} - special == set(GPU_FIELD_RULES)
    assert {f.name for f in fields(ModelSpec)} - special == set(MODEL_FIELD_RULES)


def test_a_fleet_file_names_itself_and_validate_prints_one_line(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    from workers.fleet import load_fleet

    path = tmp_path / "fleet.yaml"
    path.write_text("gpu_classes:\n  h200: {memory_gb: 141, tflops_bf16: 989.4, "
                    "bandwidth_gbps: 4800, price_per_hour: .nan}\n"
                    "workers:\n  - {id: w, gpu: h200, models: [llama-3-8b], "
                    "emulate: {port: 8101}}\n")
    message = (f"{path}: gpu_classes.h200.price_per_hour: must be a number >= 0, got nan "
               "(line 2)")        # the field's line, in a file
    with pytest.raises(FleetConfigError) as err:
        load_fleet(path)
    assert str(err.value) == message
    assert main(["validate", "config/routing.yaml", "--fleet", str(path)]) != 0
    err_lines = capsys.readouterr().err.splitlines()
    assert len(err_lines) == 1 and err_lines[0].endswith(message)


def test_a_fleet_file_with_a_key_written_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"models:\n  {MODEL}: {{arch: llama-3-8b}}\nworkers:\n"
                    f"  - {{id: a, gpu: h100, models: [{MODEL}], emulate: {{port: 9001}}}}\n"
                    f"  - {{id: b, gpu: a100, gpu: l40s, models: [{MODEL}], "
                    f"emulate: {{port: 9002}}}}\n")
    with pytest.raises(FleetConfigError, match=(
            r"fleet\.yaml: invalid YAML: line 5, column 24: duplicate key 'gpu' \(first at "
            r"line 5; a repeated key would silently replace it\)$")):
        load_fleet(path)


def test_a_built_in_gpu_given_another_memory_size_uses_it() -> None:
    """``l40s: {memory_gb: 16}`` was accepted and changed nothing: the built-in visible
    memory (45 GiB) still sized the KV cache."""
    from workers.engine.capacity import visible_memory_bytes

    def l40s(fields_: dict[str, Any]) -> Any:
        return parse_fleet({"gpu_classes": {"l40s": fields_},
                            "models": {MODEL: {"arch": "llama-3.1-8b"}},
                            "workers": [{"id": "w", "gpu": "l40s", "models": [MODEL],
                                         "url": "http://127.0.0.1:1"}]}).workers[0].info.gpu

    assert visible_memory_bytes(l40s({"memory_gb": 16})) == 16e9
    both = l40s({"memory_gb": 16, "visible_memory_gb": 14})
    assert visible_memory_bytes(both) == 14 * 2**30
    assert visible_memory_bytes(l40s({"price_per_hour": 1.0})) == 45 * 2**30


def _fleet_reference() -> str:
    """docs/operations.md's "The fleet file" section."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    return text.split("\n## The fleet file\n", 1)[1].split("\n## ", 1)[0]


def test_the_documented_fleet_of_a_gpu_and_a_model_not_built_in_loads() -> None:
    import re

    import yaml

    from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS

    blocks = re.findall(r"```yaml\n(.*?)```", _fleet_reference(), re.DOTALL)
    fleet = parse_fleet(yaml.safe_load(blocks[0]))
    infos = [spec.info for spec in fleet.workers]
    assert {info.gpu.name for info in infos} - set(BUILTIN_GPUS) == {"l4"}
    assert {info.model_spec.name for info in infos} - set(BUILTIN_MODELS) == {
        "Qwen/Qwen2.5-7B-Instruct"}


def test_the_fleet_reference_names_every_key_the_file_takes() -> None:
    from dataclasses import fields

    from workers.engine.profiles import BUILTIN_MODELS, GpuProfile, ModelSpec
    from workers.fleet import _WORKER_KEYS

    section = _fleet_reference()
    keys = (set(_WORKER_KEYS) | {"arch", *BUILTIN_MODELS}
            | {f.name for f in fields(GpuProfile)} | {f.name for f in fields(ModelSpec)})
    missing = sorted(key for key in keys - {"name"} if f"`{key}`" not in section)
    assert not missing, f"keys the fleet reference does not name: {missing}"


def test_a_file_that_is_not_utf8_is_named_as_such(tmp_path: Path) -> None:
    """It raised UnicodeDecodeError: a traceback from kvroute validate --fleet and at start."""
    path = tmp_path / "fleet.yaml"
    path.write_bytes(b"# r\xe9gion\nworkers: []\n")
    with pytest.raises(FleetConfigError, match=r"fleet\.yaml: not UTF-8 text"):
        load_fleet(path)
