"""A lean inference forward pass over a loaded Hugging Face ``BertModel``'s own modules.

The library's ``BertModel.forward`` spends more time building attention masks and output
objects than computing for the short inputs a router classifies (16–128 tokens); this
function runs the same arithmetic (embeddings → N × [self-attention → add & norm → GELU MLP →
add & norm]) directly with ``scaled_dot_product_attention``. It calls the model's modules, so
it works unchanged on a dynamically quantized copy. ``tests/policies/semantic`` checks it
against sentence-transformers' own ``encode``.
"""

from __future__ import annotations

from typing import Any


def bert_last_hidden_state(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """``model``'s last hidden state for a padded batch, (batch, tokens, hidden)."""
    import torch
    from torch.nn import functional

    embeddings = model.embeddings
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    hidden = (embeddings.word_embeddings(input_ids)
              + embeddings.position_embeddings(positions)
              + embeddings.token_type_embeddings(torch.zeros_like(input_ids)))
    hidden = embeddings.LayerNorm(hidden)
    heads = model.config.num_attention_heads
    batch, tokens, width = hidden.shape
    head_dim = width // heads
    # additive mask: 0 where attended, -inf-like where padding
    mask = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(
        hidden.dtype).min
    for layer in model.encoder.layer:
        attention = layer.attention.self

        def split(x: Any) -> Any:
            return x.view(batch, tokens, heads, head_dim).transpose(1, 2)

        context = functional.scaled_dot_product_attention(
            split(attention.query(hidden)), split(attention.key(hidden)),
            split(attention.value(hidden)), attn_mask=mask)
        context = context.transpose(1, 2).reshape(batch, tokens, width)
        output = layer.attention.output
        hidden = output.LayerNorm(output.dense(context) + hidden)
        intermediate = functional.gelu(layer.intermediate.dense(hidden))
        hidden = layer.output.LayerNorm(layer.output.dense(intermediate) + hidden)
    return hidden
