"""Emulated vLLM workers: vLLM's HTTP API, metrics and KV events over the engine model."""
