"""Emulated vLLM workers: vLLM's HTTP API, metrics and KV events over the engine model."""

# an emulator's /health answer names its process, so that whoever started it can tell it
# from another server holding the same port (``workers.emulator.process``)
PID_HEADER = "x-kvroute-emulator-pid"
# set by the process that starts an emulator as its child (``workers.emulator.process``):
# when that process is gone (SIGKILL, the OOM killer) the emulator stops too, leaving its
# ports free; it had stayed, and the next ``kvroute up`` failed with "address already in use"
PARENT_PID_ENV = "KVROUTE_EMULATOR_PARENT_PID"
