"""A pure model of one vLLM V1 engine, stepped by a caller that owns the clock.

``core`` (``EngineCore``) drives ``scheduler`` over the KV cache (``kv_cache_manager``,
``block_pool``, ``kv_cache_utils``, ``block_hash``); ``latency`` times each step from the GPU
and model constants of ``profiles`` (``calibration``, ``capacity``); ``api`` is the contract
the emulator and the simulator use.
"""
