"""The calibration table of the engine model, measured through ``EngineCore``.

Each row runs an idle engine on a virtual clock: the TTFT of one prompt (the first step's
duration), decode steps at batch 1/32/128 with 1,024-token contexts, and the derived KV
capacity, next to the reference values of ``vllm-interface.md`` §5.4 / §4.5.

    python -m workers.engine.calibration        # prints a Markdown table
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from workers.engine.api import EngineConfig, EngineRequest
from workers.engine.core import EngineCore
from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS

# (model, gpu, tp) -> reference ms: decode B=1, B=32, B=128, prefill 512, 2048, 8192.
REFERENCE_MS: dict[tuple[str, str, int], tuple[float, ...]] = {
    ("llama-3.1-8b", "h100", 1): (6.8, 9.0, 16.0, 16, 49, 205),
    ("llama-3.1-8b", "a100", 1): (10.5, 14.7, 28.9, 41, 146, 649),
    ("llama-3.1-8b", "l40s", 1): (23.1, 31.2, 57.5, 52, 159, 664),
    ("llama-3.1-70b", "h100", 4): (16.8, 19.3, 27.8, 46, 145, 576),
    ("llama-3.1-70b", "h100", 8): (12.0, 13.5, 18.7, 31, 95, 370),
    ("llama-3.1-70b", "a100", 4): (26.0, 31.8, 52.5, 112, 398, 1652),
    ("llama-3.1-70b", "a100", 8): (18.1, 21.5, 33.5, 70, 242, 988),
    ("llama-3.1-70b", "l40s", 4): (58.5, 71.4, 114, 223, 757, 3002),
}
PREFILLS = (512, 2048, 8192)
BATCHES = (1, 32, 128)


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    model: str
    gpu: str
    tp: int
    num_gpu_blocks: int
    decode_ms: tuple[float | None, ...]  # batch 1, 32, 128 at context 1024
    ttft_ms: tuple[float, ...]          # prompts of 512, 2048, 8192 tokens, idle engine
    reference_ms: tuple[float, ...]


def _engine(model: str, gpu: str, tp: int) -> EngineCore:
    return EngineCore(EngineConfig(model=BUILTIN_MODELS[model], gpu=BUILTIN_GPUS[gpu],
                                   tensor_parallel=tp, max_num_batched_tokens=8192,
                                   max_num_seqs=256))


def measure_ttft_ms(model: str, gpu: str, tp: int, prompt_tokens: int) -> float:
    """First-token latency of one prompt on an idle engine, in one step of the budget."""
    engine = _engine(model, gpu, tp)
    engine.add_request(EngineRequest("ttft", list(range(prompt_tokens)), [1, 2]))
    result = engine.step(0.0)
    assert result.outputs and result.outputs[0].first
    return 1e3 * result.duration_s


def measure_decode_ms(model: str, gpu: str, tp: int, batch: int,
                      context: int = 1024) -> float | None:
    """Duration of one decode step of ``batch`` requests whose context is ``context``;
    None when the KV cache cannot hold them all (the engine would preempt)."""
    engine = _engine(model, gpu, tp)
    if batch * (context + 1) > (engine.num_gpu_blocks - 1) * engine.block_size:
        return None
    for i in range(batch):
        engine.add_request(EngineRequest(f"d{i}", [i + 1] * (context - 1), [1] * 500))
    t = 0.0
    while any(r.num_output_tokens == 0 for r in engine.scheduler.running) or (
            engine.scheduler.waiting):
        t += engine.step(t).duration_s
    result = engine.step(t)
    assert result.num_decode_tokens == batch
    return 1e3 * result.duration_s


def calibration_rows() -> list[CalibrationRow]:
    rows = []
    for (model, gpu, tp), reference in REFERENCE_MS.items():
        blocks = EngineCore(EngineConfig(model=BUILTIN_MODELS[model], gpu=BUILTIN_GPUS[gpu],
                                         tensor_parallel=tp)).num_gpu_blocks
        rows.append(CalibrationRow(
            model=model, gpu=gpu, tp=tp, num_gpu_blocks=blocks,
            decode_ms=tuple(measure_decode_ms(model, gpu, tp, b) for b in BATCHES),
            ttft_ms=tuple(measure_ttft_ms(model, gpu, tp, n) for n in PREFILLS),
            reference_ms=reference))
    return rows


def markdown(rows: list[CalibrationRow]) -> str:
    head = ("| model | GPU | TP | KV blocks | decode B=1 | B=32 | B=128 | TTFT 512 | 2048 | 8192 |"
            "\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        cells = [f"{got:.1f} ({ref:g})" if got is not None else f"– ({ref:g})"
                 for got, ref in zip(r.decode_ms + r.ttft_ms, r.reference_ms, strict=True)]
        lines.append(f"| {r.model} | {r.gpu} | {r.tp} | {r.num_gpu_blocks:,} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    print("ms per step, engine (reference table of vllm-interface.md §5.4)")
    print(markdown(calibration_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
