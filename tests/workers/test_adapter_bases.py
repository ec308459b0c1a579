"""workers/adapter_bases.py: the adapter names loaded on workers of different base models."""

from __future__ import annotations

from workers.adapter_bases import AdapterBases


def test_an_adapter_name_on_two_base_models_is_told_once_per_clash() -> None:
    bases = AdapterBases()
    assert bases.read("llama-0", "llama", ["sql-lora", "chat-lora"]) == []
    assert bases.read("llama-1", "llama", ["sql-lora"]) == []          # the same base: fine
    assert bases.read("mistral-0", "mistral", ["sql-lora"]) == ["sql-lora"]
    assert bases.workers_of("sql-lora") == {"llama-0": "llama", "llama-1": "llama",
                                            "mistral-0": "mistral"}
    assert bases.read("mistral-0", "mistral", ["sql-lora"]) == []      # told already
    assert bases.read("mistral-0", "mistral", []) == []                # unloaded: resolved
    assert bases.workers_of("sql-lora") == {"llama-0": "llama", "llama-1": "llama"}
    assert bases.read("mistral-0", "mistral", ["sql-lora"]) == ["sql-lora"]   # back: told
    assert bases.read("mistral-0", "mistral", []) == []
    assert bases.read("mistral-0", "mistral", ["m-lora"]) == []
    bases.forget("llama-0")
    bases.forget("llama-1")
    assert bases.workers_of("sql-lora") == {} and bases.workers_of("chat-lora") == {}
