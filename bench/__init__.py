"""Live benchmarks (``kvroute bench``): the router's overhead, routing quality on replayed
traces, and micro-benchmarks of the decision path (``docs/bench.md``)."""
