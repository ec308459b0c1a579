"""Fleet workers become event sources; the engine's prefix scorers get the exact index."""

from __future__ import annotations

from types import MappingProxyType

from policies.engine import PolicyEngine
from policies.loader import parse_routing_text
from policies.scorers.prefix import PrefixScorer
from workers.engine.profiles import H100_80GB, LLAMA_3_8B
from workers.fleet import FleetConfig, WorkerSpec
from workers.kv_events.exact_index import ExactPrefixIndex
from workers.kv_events.wiring import attach, sources_for
from workers.models import WorkerInfo

ROUTING = """
profiles:
  default:
    scorers: [{type: prefix, weight: 1.0}]
    picker: {type: max-score}
default_profile: default
"""


def info(worker_id: str, endpoint: str | None, **labels: str) -> WorkerInfo:
    return WorkerInfo(id=worker_id, url="http://127.0.0.1:1", gpu=H100_80GB, models=("m",),
                      model_spec=LLAMA_3_8B, price_per_hour=3.0,
                      labels=MappingProxyType(labels), kv_events_endpoint=endpoint)


def test_only_workers_with_an_endpoint_become_sources() -> None:
    sources = sources_for([info("a", "tcp://127.0.0.1:5557", kv_events_replay="tcp://x:5558",
                                kv_events_topic="kv"), info("b", None)])
    assert [(s.worker_id, s.endpoint, s.replay_endpoint, s.topic) for s in sources] == [
        ("a", "tcp://127.0.0.1:5557", "tcp://x:5558", "kv")]


def test_attach_reaches_every_prefix_scorer() -> None:
    fleet = FleetConfig(gpu_classes=MappingProxyType({}), models=MappingProxyType({}),
                        workers=(WorkerSpec(info("a", None)),))
    engine = PolicyEngine.build(parse_routing_text(ROUTING), fleet)
    index = ExactPrefixIndex()
    assert attach(engine, index) == 1
    scorers = [p for _, _, p in engine.plugins() if isinstance(p, PrefixScorer)]
    assert scorers[0].exact is index
