"""Step-time model: how long one forward pass of a mixed batch takes on a GPU profile.

The roofline of ``vllm-interface.md`` §5.3 (``timing-model-reference.py`` is its executable
reference): linear layers blend compute and weight streaming with exponent ``k``; norms and
activations are memory bound; prefill attention costs FLOPs, decode attention costs KV bytes;
tensor parallelism adds two all-reduces per layer; the lm_head runs once per sequence; a
fixed ``step_overhead_s`` covers scheduling, sampling and launches. Constants per GPU live
in ``GpuProfile``; the model's shapes in ``ModelSpec``.
"""

from __future__ import annotations

from workers.engine.profiles import GpuProfile, ModelSpec

_SHARD_FULL_BW_BYTES = 400e6     # weight shards at least this large stream at eta_mem
_DECODE_ATTN_FLOOR_S = 5e-6      # per layer, when the batch has decodes


class StepTimeModel:
    """Seconds per engine step for one (GPU, model, TP) triple; constants folded at init."""

    def __init__(self, gpu: GpuProfile, model: ModelSpec, tensor_parallel: int = 1) -> None:
        if tensor_parallel < 1:
            raise ValueError(f"tensor_parallel must be >= 1, got {tensor_parallel}")
        tp = tensor_parallel
        flops = gpu.tflops_bf16 * 1e12
        bandwidth = gpu.bandwidth_gbps * 1e9
        params = model.linear_params_per_layer / tp
        weight_bytes = model.dtype_bytes * params
        eta_mem = gpu.eta_mem
        if weight_bytes < _SHARD_FULL_BW_BYTES:
            eta_mem *= min(1.0, 0.55 + 0.45 * weight_bytes / _SHARD_FULL_BW_BYTES)
        self.layers = model.layers
        self.k = gpu.roofline_k
        self.linear_compute_per_token = 2 * params / (gpu.eta_gemm * flops)
        self.linear_memory = weight_bytes / (eta_mem * bandwidth)
        self.elementwise_per_token = (
            2 * (12 * model.hidden + 3 * model.ffn / tp) / (0.8 * bandwidth))
        self.prefill_attn_per_unit = (
            4 * (model.heads / tp) * model.head_dim / (gpu.eta_attn_prefill * flops))
        self.decode_attn_per_token = (
            2 * (model.kv_heads / tp) * model.head_dim * model.dtype_bytes
            / (gpu.eta_attn_decode * bandwidth))
        self.allreduce_latency = 0.0
        self.allreduce_per_token = 0.0
        if tp > 1:
            algbw = (gpu.allreduce_bw_gbps or {}).get(tp)
            if algbw is None:
                raise ValueError(f"{gpu.name}: no all-reduce bandwidth for tensor_parallel={tp}")
            self.allreduce_latency = 2 * gpu.allreduce_latency_s
            self.allreduce_per_token = 2 * model.hidden * 2 / (algbw * 1e9)
        vocab_hidden = model.vocab * model.hidden / tp
        self.head_compute_per_seq = 2 * vocab_hidden / (gpu.eta_gemm * flops)
        self.head_memory = 2 * vocab_hidden / (gpu.eta_mem * bandwidth)
        self.overhead = gpu.step_overhead_s
        self.decode_time_per_context_token = self.layers * self.decode_attn_per_token

    def step_time(self, num_tokens: int, num_seqs: int, prefill_attn_units: float = 0.0,
                  num_decodes: int = 0, decode_context_tokens: int = 0) -> float:
        """Seconds for one step; 0.0 for an empty batch.

        ``prefill_attn_units`` = Σ over prefill chunks of ``n·p + n²/2`` (n new tokens over p
        already computed); ``decode_context_tokens`` = Σ over decodes of the context read.
        """
        if num_tokens <= 0:
            return 0.0
        return (self.fixed_time(num_tokens, num_seqs, prefill_attn_units, num_decodes)
                + self.decode_time_per_context_token * decode_context_tokens)

    def fixed_time(self, num_tokens: int, num_seqs: int, prefill_attn_units: float = 0.0,
                   num_decodes: int = 0) -> float:
        """``step_time`` without its decode-context term, which is linear: a run of decode
        steps of one batch adds ``decode_time_per_context_token × context`` to this."""
        k = self.k
        t_c = self.linear_compute_per_token * num_tokens
        t_m = self.linear_memory
        layer: float = (t_c ** k + t_m ** k) ** (1.0 / k)
        layer += self.elementwise_per_token * num_tokens
        layer += self.prefill_attn_per_unit * prefill_attn_units
        if num_decodes:
            layer += _DECODE_ATTN_FLOOR_S
        if self.allreduce_latency:
            layer += self.allreduce_latency + self.allreduce_per_token * num_tokens
        head = max(self.head_compute_per_seq * num_seqs, self.head_memory)
        return self.layers * layer + head + self.overhead

    def prefill_time(self, num_new_tokens: int, num_cached_tokens: int = 0) -> float:
        """One step computing a single prompt chunk."""
        n, p = num_new_tokens, num_cached_tokens
        return self.step_time(n, 1, n * p + n * n / 2)

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        """One step of ``batch_size`` decodes, each reading ``context_tokens`` of KV."""
        return self.step_time(batch_size, batch_size, 0.0, batch_size,
                              batch_size * context_tokens)
