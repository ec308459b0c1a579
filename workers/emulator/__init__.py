"""Emulated vLLM workers: vLLM's HTTP API, metrics and KV events over the engine model."""

# an emulator's /health answer names its process, so that whoever started it can tell it
# from another server holding the same port (``workers.emulator.process``)
PID_HEADER = "x-kvroute-emulator-pid"
