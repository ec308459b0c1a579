"""Constants of the embedding model, importable without importing the model's libraries."""

from __future__ import annotations

MODEL_WINDOW_TOKENS = 256     # the model's own max_seq_length
EMBEDDING_DIM = 384
SPECIAL_TOKENS = 2            # [CLS] and [SEP] around every text
