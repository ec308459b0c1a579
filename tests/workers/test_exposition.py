"""Sample lines of the text exposition format read as ``prometheus_client`` reads them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workers.exposition import ExpositionError, parse_sample_line

LINES = [
    'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0',
    "vllm:num_requests_waiting 4",
    'vllm:kv_cache_usage_perc{model_name="m"} 0.25 1712345678000',
    'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",'
    'waiting_lora_adapters=""} 1.7e+09',
    'vllm:cache_config_info{block_size="16",note="say \\"hi\\" {to} a\\\\b\\nnext"} 1.0',
    'vllm:x{a="1", b = "2" ,} +Inf',
    'vllm:y{} -1.5e-3',
    "vllm:z NaN",
]


def reference(line: str) -> tuple[str, dict[str, str], float]:
    (family,) = text_string_to_metric_families(line + "\n")
    (sample,) = family.samples
    return sample.name, dict(sample.labels), sample.value


@pytest.mark.parametrize("line", LINES)
def test_lines_read_as_the_reference_parser_reads_them(line: str) -> None:
    sample = parse_sample_line(line)
    name, labels, value = reference(line)
    assert (sample.name, sample.labels()) == (name, labels)
    assert sample.value == value or (math.isnan(value) and math.isnan(sample.value))


def test_every_line_of_the_vllm_sample(shared_dir: Path) -> None:
    text = (shared_dir / "reference/vllm-metrics-sample.txt").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(lines) > 300
    for line in lines:
        sample = parse_sample_line(line)
        name, labels, value = reference(line)
        assert (sample.name, sample.labels(), sample.value) == (name, labels, value)


@pytest.mark.parametrize("line", [
    'vllm:a{model="m" 3.0',             # no closing brace
    'vllm:a{model="m} 3.0',             # unterminated quote
    "vllm:a",                           # no value
    "vllm:a{} three",                   # not a number
    "vllm:a 1 2 3",                     # too many fields
    "<html>{}</html> 1",                # not a metric name
])
def test_malformed_lines_raise(line: str) -> None:
    with pytest.raises(ExpositionError):
        parse_sample_line(line)


def test_malformed_labels_raise_when_read() -> None:
    sample = parse_sample_line('vllm:a{model="m",oops} 1')
    with pytest.raises(ExpositionError, match="bad labels"):
        sample.labels()
