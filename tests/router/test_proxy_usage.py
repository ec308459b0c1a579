"""``router.proxy_usage``: the usage chunk the router asked for is read, and for a client that
did not ask for it the stream becomes what vLLM sends without ``include_usage``. The events
are vLLM 0.32.0's own (captured from a real engine, ids shortened)."""

from __future__ import annotations

from router.proxy_usage import (
    Usage,
    UsageRewrite,
    carries_finish_reason,
    is_message_delta_with_usage,
    is_usage_chunk,
    parse_usage,
    with_fingerprint,
)

FP = "vllm-0.32.0-3efed959"
HEAD = b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny",'
TOKEN = HEAD + (b'"choices":[{"index":%d,"text":" t","logprobs":null,"finish_reason":null,'
                b'"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}')
FINISH = HEAD + (b'"choices":[{"index":%d,"text":" x","logprobs":null,'
                 b'"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,'
                 b'"token_ids":null}]}')
STAMP = b',"system_fingerprint":"' + FP.encode() + b'"}'
USAGE = HEAD + (b'"choices":[],"usage":{"prompt_tokens":4,"total_tokens":10,'
                b'"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":2}},'
                b'"system_fingerprint":"' + FP.encode() + b'"}')
DONE = b"data: [DONE]"


def stamped(event: bytes) -> bytes:
    return event[:-1] + STAMP


def test_event_kinds() -> None:
    assert is_usage_chunk(USAGE) and not is_usage_chunk(TOKEN % 0)
    assert carries_finish_reason(FINISH % 0)
    assert not carries_finish_reason(TOKEN % 0) and not carries_finish_reason(DONE)


def test_fingerprint_goes_last_once() -> None:
    assert with_fingerprint(FINISH % 0, FP) == stamped(FINISH % 0)
    assert with_fingerprint(stamped(FINISH % 0), "other") == stamped(FINISH % 0)
    assert with_fingerprint(DONE, FP) == DONE


def test_usage_stripped_and_its_fingerprint_moved_to_the_finish_chunk() -> None:
    rewrite = UsageRewrite(wants_usage=False)
    assert rewrite.events([TOKEN % 0, TOKEN % 0]) == [TOKEN % 0, TOKEN % 0]
    assert rewrite.events([FINISH % 0]) == []            # held until the next event
    assert rewrite.holding
    assert rewrite.events([USAGE, DONE]) == [stamped(FINISH % 0), DONE]
    assert rewrite.usage is not None
    assert (rewrite.usage.prompt_tokens, rewrite.usage.completion_tokens,
            rewrite.usage.cached_tokens) == (4, 6, 2)
    assert rewrite.saw_usage and rewrite.fingerprint == FP and not rewrite.holding


def test_two_choices_finishing_together_both_get_the_fingerprint() -> None:
    rewrite = UsageRewrite(wants_usage=False)
    out = rewrite.events([TOKEN % 0, TOKEN % 1, FINISH % 0, FINISH % 1, USAGE, DONE])
    assert out == [TOKEN % 0, TOKEN % 1, stamped(FINISH % 0), stamped(FINISH % 1), DONE]


def test_a_choice_finishing_early_is_released_with_the_workers_known_fingerprint() -> None:
    rewrite = UsageRewrite(wants_usage=False, known_fingerprint=FP)
    assert rewrite.events([FINISH % 0]) == []
    assert rewrite.events([TOKEN % 1]) == [stamped(FINISH % 0), TOKEN % 1]
    assert rewrite.events([FINISH % 1, USAGE, DONE]) == [stamped(FINISH % 1), DONE]


def test_without_a_known_fingerprint_an_early_finish_is_released_unchanged() -> None:
    rewrite = UsageRewrite(wants_usage=False)
    rewrite.events([FINISH % 0])
    assert rewrite.events([TOKEN % 1]) == [FINISH % 0, TOKEN % 1]


def test_usage_kept_when_the_client_asked() -> None:
    rewrite = UsageRewrite(wants_usage=True, known_fingerprint=FP)
    events = [TOKEN % 0, FINISH % 0, USAGE, DONE]
    assert rewrite.events(events) == events
    assert rewrite.usage is not None and rewrite.usage.completion_tokens == 6


def test_usage_without_fingerprint_leaves_finish_chunks_alone() -> None:
    usage = USAGE.replace(b',"system_fingerprint":"' + FP.encode() + b'"', b"")
    rewrite = UsageRewrite(wants_usage=False, known_fingerprint=FP)
    rewrite.events([FINISH % 0])
    assert rewrite.events([usage, DONE]) == [FINISH % 0, DONE]
    assert rewrite.saw_usage and rewrite.fingerprint is None


def test_held_chunk_flushed_when_the_stream_breaks() -> None:
    rewrite = UsageRewrite(wants_usage=False, known_fingerprint=FP)
    rewrite.events([FINISH % 0])
    assert rewrite.flush() == [stamped(FINISH % 0)]
    assert rewrite.flush() == []


def test_needs_events_only_for_usage_finish_or_held() -> None:
    rewrite = UsageRewrite(wants_usage=False)
    assert not rewrite.needs_events(TOKEN % 0 + b"\n\n")
    assert rewrite.needs_events(FINISH % 0 + b"\n\n")
    assert rewrite.needs_events(USAGE + b"\n\n")
    rewrite.events([FINISH % 0])
    assert rewrite.needs_events(DONE + b"\n\n")
    assert not UsageRewrite(wants_usage=True).needs_events(FINISH % 0 + b"\n\n")


def test_the_responses_apis_usage_is_read_from_its_last_event_and_nothing_changes() -> None:
    created = (b'event: response.created\ndata: {"response":{"id":"resp_1","usage":null},'
               b'"sequence_number":0,"type":"response.created"}')
    delta = (b'event: response.output_text.delta\ndata: {"delta":"hi","sequence_number":1,'
             b'"type":"response.output_text.delta"}')
    completed = (b'event: response.completed\ndata: {"response":{"id":"resp_1","usage":'
                 b'{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},'
                 b'"output_tokens":3,"total_tokens":15}},"sequence_number":2,'
                 b'"type":"response.completed"}')
    rewrite = UsageRewrite(wants_usage=True)
    assert rewrite.events([created, delta, completed]) == [created, delta, completed]
    assert rewrite.usage == Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=8)


def test_parse_usage_takes_both_shapes() -> None:
    assert parse_usage({"prompt_tokens": 5, "completion_tokens": 2}) == Usage(5, 2, None)
    assert parse_usage({"input_tokens": 5, "output_tokens": 2,
                        "input_tokens_details": {"cached_tokens": 4}}) == Usage(5, 2, 4)
    assert parse_usage(None) is None


# the Messages API's events (vLLM 0.32.0, captured from a real engine)
MESSAGE_START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"c",'
                 b'"type":"message","role":"assistant","content":[],"model":"tiny",'
                 b'"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":6,'
                 b'"output_tokens":0}}}')
MESSAGE_DELTA = (b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
                 b'"max_tokens","stop_sequence":null},"usage":{"input_tokens":6,'
                 b'"output_tokens":3}}')


def test_the_messages_api_usage_is_read_from_message_delta_and_relayed_untouched() -> None:
    assert is_message_delta_with_usage(MESSAGE_DELTA)
    assert not is_message_delta_with_usage(MESSAGE_START)
    rewrite = UsageRewrite(wants_usage=True)
    events = [MESSAGE_START, b'event: content_block_delta\ndata: {"type":"content_block_delta"}',
              MESSAGE_DELTA, b'event: message_stop\ndata: {"type":"message_stop"}']
    assert rewrite.events(events) == events
    assert rewrite.usage == Usage(prompt_tokens=6, completion_tokens=3)


def test_messages_api_input_tokens_leave_out_the_cache() -> None:
    usage = parse_usage({"input_tokens": 4, "output_tokens": 9, "cache_read_input_tokens": 32,
                         "cache_creation_input_tokens": 2})
    assert usage == Usage(prompt_tokens=38, completion_tokens=9, cached_tokens=32)
    assert parse_usage({"input_tokens": 4, "output_tokens": 9}) == Usage(4, 9)


def test_counts_that_are_not_counts_are_no_usage() -> None:
    """A worker's ``"abc"`` raised out of the proxy on a 200 answer; a negative count refunded
    a tenant's budget."""
    assert parse_usage({"prompt_tokens": 12, "completion_tokens": 3}) == Usage(12, 3, None)
    assert parse_usage({"prompt_tokens": 12}) == Usage(12, 0, None)
    for bad in ("abc", "1e3", [1], -5_000_000, 10**300, 1.5, True):
        assert parse_usage({"prompt_tokens": bad, "total_tokens": 3}) is None
        assert parse_usage({"input_tokens": 4, "output_tokens": bad}) is None
        assert parse_usage({"input_tokens": 4, "cache_read_input_tokens": bad}) is None
    assert parse_usage({"input_tokens": 4, "cache_read_input_tokens": None}) == Usage(4, 0, None)
