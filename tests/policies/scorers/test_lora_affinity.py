"""policies/scorers/lora_affinity.py."""

from __future__ import annotations

from collections.abc import Callable

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.cycle_keys import TARGET_ADAPTER
from policies.scorers.lora_affinity import LoraAffinityScorer
from workers.models import LoraActivity, WorkerView

ViewFactory = Callable[..., WorkerView]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def activity(running: tuple[str, ...] = (), waiting: tuple[str, ...] = (),
             max_loras: int | None = 1) -> LoraActivity:
    return LoraActivity(frozenset(running), frozenset(waiting), max_loras)


def for_adapter(request_id: str, adapter: str) -> tuple[RoutingRequest, CycleState]:
    cycle = CycleState()
    cycle.write(TARGET_ADAPTER, adapter)
    return RoutingRequest(request_id, MODEL), cycle


def routed(request: RoutingRequest, worker: str) -> Decision:
    return Decision(request.request_id, worker, MODEL, "default", None, "test")


def test_running_then_room_then_waiting_then_behind(view: ViewFactory) -> None:
    views = [view("runs", lora_activity=activity(running=("sql",))),
             view("room", lora_activity=activity(running=("chat",), max_loras=2)),
             view("waits", lora_activity=activity(running=("chat",), waiting=("sql",))),
             view("behind", lora_activity=activity(running=("chat",))),
             view("idle", lora_activity=activity()),
             view("unreported")]                   # vLLM's default limit: 1, none running
    request, cycle = for_adapter("r", "sql")
    assert LoraAffinityScorer("lora").score(request, views, cycle) == {
        "runs": 1.0, "room": 0.8, "waits": 0.6, "behind": 0.0, "idle": 0.8,
        "unreported": 0.8}


def test_requests_sent_since_the_scrape_count_as_running(view: ViewFactory) -> None:
    """Within one scrape interval every worker looked idle: a burst for two adapters went
    where the scores said, both adapters on one worker, where vLLM runs one at a time."""
    scorer = LoraAffinityScorer("lora")
    views = [view("w0", lora_activity=activity()), view("w1", lora_activity=activity())]
    first, cycle = for_adapter("sql-1", "sql")
    assert scorer.score(first, views, cycle) == {"w0": 0.8, "w1": 0.8}
    scorer.on_routed(first, routed(first, "w0"))
    second, cycle = for_adapter("chat-1", "chat")
    assert scorer.score(second, views, cycle) == {"w0": 0.0, "w1": 0.8}
    scorer.on_routed(second, routed(second, "w1"))
    third, cycle = for_adapter("sql-2", "sql")
    assert scorer.score(third, views, cycle) == {"w0": 1.0, "w1": 0.0}
    scorer.on_completed(first, RequestOutcome("sql-1", "w0", 200))
    assert scorer.unfinished("w0") == {} and scorer.unfinished("w1") == {"chat": 1}
    again, cycle = for_adapter("sql-3", "sql")
    assert scorer.score(again, views, cycle) == {"w0": 0.8, "w1": 0.0}


def test_a_retry_moves_the_request_and_a_restart_forgets_it(view: ViewFactory) -> None:
    scorer = LoraAffinityScorer("lora")
    views = [view("w0", lora_activity=activity()), view("w1", lora_activity=activity())]
    request, cycle = for_adapter("r", "sql")
    scorer.score(request, views, cycle)
    scorer.on_routed(request, routed(request, "w0"))
    scorer.on_routed(request, routed(request, "w1"))      # w0 failed it: tried on w1
    assert scorer.unfinished("w0") == {} and scorer.unfinished("w1") == {"sql": 1}
    scorer.forget_worker("w1")
    assert scorer.unfinished("w1") == {}
    scorer.on_completed(request, RequestOutcome("r", "w1", 200))     # nothing left to free
    assert scorer.unfinished("w1") == {}


def test_the_requested_model_is_the_adapter_when_a_worker_lists_it_as_one(
        view: ViewFactory) -> None:
    views = [view("w0", lora_adapters=("sql",), lora_activity=activity(running=("chat",))),
             view("w1", lora_adapters=("sql",), lora_activity=activity(running=("sql",)))]
    scorer = LoraAffinityScorer("lora")
    assert scorer.score(RoutingRequest("r", "sql"), views, CycleState()) == {
        "w0": 0.0, "w1": 1.0}
    base = RoutingRequest("b", MODEL)                       # no adapter: no preference
    assert scorer.score(base, views, CycleState()) == {"w0": 1.0, "w1": 1.0}
    scorer.on_routed(base, routed(base, "w0"))
    assert scorer.unfinished("w0") == {}
