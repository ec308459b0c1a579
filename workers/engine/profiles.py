"""GPU profiles and model architectures: the constants of the timing model.

Numbers come from ``vllm-interface.md`` §5.1–5.3 (datasheets, vidur fits). A fleet file may
define further GPU classes with the same fields; ``GpuProfile.from_mapping`` builds them (after
``workers.fleet`` has checked each numeric value).

```yaml
gpu_classes:
  h200:
    memory_gb: 141
    tflops_bf16: 989.4
    bandwidth_gbps: 4800
    price_per_hour: 4.50
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU class. Efficiencies are the fitted η of the roofline step-time model."""

    name: str
    memory_gb: float                 # total device memory (GB, 1e9 bytes)
    tflops_bf16: float               # dense BF16 tensor TFLOPS
    bandwidth_gbps: float            # memory bandwidth, GB/s
    price_per_hour: float            # dollars per GPU-hour
    eta_gemm: float = 0.75
    eta_mem: float = 0.80
    roofline_k: float = 1.2
    eta_attn_prefill: float = 0.5
    eta_attn_decode: float = 0.7
    allreduce_latency_s: float = 20e-6
    allreduce_bw_gbps: Mapping[int, float] | None = None   # tp degree -> algbw GB/s
    step_overhead_s: float = 1.0e-3
    visible_memory_gb: float | None = None   # memory the driver exposes, if less than memory_gb
    default_max_num_batched_tokens: int = 2048
    default_max_num_seqs: int = 256

    @classmethod
    def from_mapping(cls, name: str, data: Mapping[str, Any],
                     base: GpuProfile | None = None) -> GpuProfile:
        """Build a profile from YAML fields; unknown keys are an error naming the key."""
        known = {f.name for f in fields(cls)} - {"name"}     # the name is the entry's key
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise ValueError(f"gpu class {name!r}: unknown field(s) {', '.join(unknown)}")
        if base is not None:
            return replace(base, name=name, **dict(data))
        return cls(name=name, **dict(data))


H100_80GB = GpuProfile(
    name="H100-80GB", memory_gb=80, tflops_bf16=989.4, bandwidth_gbps=3350,
    price_per_hour=3.00, eta_gemm=0.75, eta_mem=0.80, roofline_k=1.2,
    eta_attn_prefill=0.60, eta_attn_decode=0.70, allreduce_latency_s=15e-6,
    allreduce_bw_gbps={2: 300, 4: 230, 8: 210}, visible_memory_gb=79.6,
    default_max_num_batched_tokens=8192, default_max_num_seqs=1024,
)
A100_80GB = GpuProfile(
    name="A100-80GB", memory_gb=80, tflops_bf16=312, bandwidth_gbps=2039,
    price_per_hour=1.80, eta_gemm=0.73, eta_mem=0.80, roofline_k=1.3,
    eta_attn_prefill=0.50, eta_attn_decode=0.70, allreduce_latency_s=20e-6,
    allreduce_bw_gbps={2: 170, 4: 125, 8: 105}, visible_memory_gb=79.2,
    default_max_num_batched_tokens=2048, default_max_num_seqs=256,
)
L40S_48GB = GpuProfile(
    name="L40S-48GB", memory_gb=48, tflops_bf16=362.05, bandwidth_gbps=864,
    price_per_hour=1.00, eta_gemm=0.65, eta_mem=0.80, roofline_k=1.2,
    eta_attn_prefill=0.50, eta_attn_decode=0.70, allreduce_latency_s=40e-6,
    allreduce_bw_gbps={2: 20, 4: 15, 8: 12}, visible_memory_gb=45.0,
    default_max_num_batched_tokens=2048, default_max_num_seqs=256,
)

BUILTIN_GPUS: Mapping[str, GpuProfile] = {
    "h100": H100_80GB, "H100-80GB": H100_80GB,
    "a100": A100_80GB, "A100-80GB": A100_80GB,
    "l40s": L40S_48GB, "L40S-48GB": L40S_48GB,
}


RUNNERS = ("generate", "pooling")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense transformer (Llama family), enough to cost a forward pass.

    ``runner`` is what vLLM serves it as (its ``--runner``): ``generate`` (chat and
    completions) or ``pooling`` (embeddings; the vector has ``hidden`` dimensions, fewer on
    request, ``dimensions``, only for a ``matryoshka`` model)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_model_len: int = 8192
    dtype_bytes: int = 2
    runner: str = "generate"
    matryoshka: bool = False

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"model {self.name!r}: runner must be one of "
                             f"{', '.join(RUNNERS)}, got {self.runner!r}")
        if not isinstance(self.matryoshka, bool):
            raise ValueError(f"model {self.name!r}: matryoshka must be true or false")

    @property
    def linear_params_per_layer(self) -> int:
        h, d = self.hidden, self.head_dim
        return h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h + 3 * h * self.ffn

    @property
    def total_params(self) -> int:
        return self.layers * self.linear_params_per_layer + 2 * self.vocab * self.hidden

    @classmethod
    def from_mapping(cls, name: str, data: Mapping[str, Any],
                     base: ModelSpec | None = None) -> ModelSpec:
        known = {f.name for f in fields(cls)} - {"name"}     # the name is the entry's key
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise ValueError(f"model {name!r}: unknown field(s) {', '.join(unknown)}")
        if base is not None:
            return replace(base, name=name, **dict(data))
        return cls(name=name, **dict(data))


LLAMA_3_8B = ModelSpec(name="llama-3-8b", layers=32, hidden=4096, heads=32, kv_heads=8,
                       head_dim=128, ffn=14336, vocab=128256, max_model_len=8192)
LLAMA_3_70B = ModelSpec(name="llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8,
                        head_dim=128, ffn=28672, vocab=128256, max_model_len=8192)
# embedding models (vLLM ``--runner pooling``): a decoder (last-token pooling) and an encoder,
# costed as the same stack of layers
QWEN3_EMBEDDING_06B = ModelSpec(name="qwen3-embedding-0.6b", layers=28, hidden=1024, heads=16,
                                kv_heads=8, head_dim=128, ffn=3072, vocab=151669,
                                max_model_len=32768, runner="pooling", matryoshka=True)
ALL_MINILM_L6_V2 = ModelSpec(name="all-minilm-l6-v2", layers=6, hidden=384, heads=12,
                             kv_heads=12, head_dim=32, ffn=1536, vocab=30522, max_model_len=256,
                             runner="pooling")

BUILTIN_MODELS: Mapping[str, ModelSpec] = {
    "llama-3-8b": LLAMA_3_8B,
    "llama-3.1-8b": replace(LLAMA_3_8B, name="llama-3.1-8b", max_model_len=131072),
    "llama-3-70b": LLAMA_3_70B,
    "llama-3.1-70b": replace(LLAMA_3_70B, name="llama-3.1-70b", max_model_len=131072),
    "qwen3-embedding-0.6b": QWEN3_EMBEDDING_06B,
    "all-minilm-l6-v2": ALL_MINILM_L6_V2,
}
