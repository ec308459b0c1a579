"""Scorer plugins: per-worker scores in [0, 1] that the picker weighs (prefix, load, KV
usage, estimated time, cost, LoRA affinity); ``normalize`` and ``column`` are shared by
them."""
