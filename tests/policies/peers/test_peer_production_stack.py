from __future__ import annotations

import random
import re

import pytest

from policies.base import CycleState
from policies.errors import ParamError
from policies.peers.production_stack import (
    HashTrie,
    PrefixParams,
    ProductionStackPrefixScorer,
    ProductionStackSessionScorer,
    SessionParams,
)
from tests.policies.peers.peer_fixtures import make_request, make_view, routed


def test_hash_trie_matches_whole_chunks_among_available_endpoints() -> None:
    trie = HashTrie(chunk_size=4)
    trie.insert("aaaabbbbcc", "x")
    trie.insert("aaaacccc", "y")
    assert trie.longest_prefix_match("aaaabbbbdd", {"x", "y"}) == (8, {"x"})
    assert trie.longest_prefix_match("aaaazzzz", {"x", "y"}) == (4, {"x", "y"})
    assert trie.longest_prefix_match("aaaabbbb", {"y"}) == (4, {"y"})
    assert trie.longest_prefix_match("zzzz", {"x", "y"}) == (0, {"x", "y"})


def test_prefix_scorer_sticks_to_the_holder_and_inserts_on_routing() -> None:
    scorer = ProductionStackPrefixScorer(PrefixParams(chunk_size=4), random.Random(0))
    views = [make_view("w0"), make_view("w1"), make_view("w2")]
    first = make_request("1", text="system prompt! question one")
    scorer.on_routed(first, routed(first, "w2"))
    again = make_request("2", text="system prompt! question two")
    for _ in range(5):
        assert scorer.score(again, views, CycleState()) == {"w0": 0.0, "w1": 0.0, "w2": 1.0}


def test_min_match_length_falls_back_to_lowest_qps() -> None:
    scorer = ProductionStackPrefixScorer(PrefixParams(chunk_size=4, prefix_min_match_length=8))
    views = [make_view("w0"), make_view("w1")]
    for i in range(3):
        r = make_request(f"busy{i}", text=f"zzzz{i}", at=float(i))
        scorer.on_routed(r, routed(r, "w0"))
    short = make_request("s", text="zzzzq", at=5.0)     # 4-char match < 8
    assert scorer.choose(short, views) == "w1"


def test_session_hash_is_stable_and_no_key_goes_to_lowest_qps() -> None:
    scorer = ProductionStackSessionScorer()
    views = [make_view("w0"), make_view("w1"), make_view("w2")]
    picks = {scorer.choose(make_request(session="user-42"), views) for _ in range(5)}
    assert len(picks) == 1
    spread = {scorer.choose(make_request(session=f"user-{i}"), views) for i in range(200)}
    assert spread == {"w0", "w1", "w2"}
    for worker in ("w0", "w1"):
        r = make_request(worker, at=1.0)
        scorer.on_routed(r, routed(r, worker))
    assert scorer.choose(make_request(at=2.0), views) == "w2"


def test_the_session_key_names_the_header_and_the_user_field_stands_in() -> None:
    """A fleet migrating from production-stack's ``--session-key X-User-ID``: the key was
    fixed to ``x-session-id``, so its sessions went by QPS, spread over every worker."""
    from multidict import CIMultiDict

    scorer = ProductionStackSessionScorer(SessionParams(session_key="X-User-ID"))
    views = [make_view("w0"), make_view("w1"), make_view("w2")]
    by_header = {scorer.choose(make_request(f"r{i}", at=float(i), headers=CIMultiDict(
        {"x-user-id": "alice"})), views) for i in range(6)}
    by_user = {scorer.choose(make_request(f"u{i}", at=float(i), user="alice"), views)
               for i in range(6)}
    assert len(by_header) == 1 and by_header == by_user
    ignored = make_request(session="bob", headers={"x-session-id": "bob"})
    assert scorer.session_of(ignored) is None      # another key: not this scorer's
    assert ProductionStackSessionScorer().session_of(ignored) == "bob"
    with pytest.raises(ParamError, match="header name"):
        SessionParams(session_key="not a header")


def test_a_list_of_session_keys_reads_headers_and_body_fields_in_order() -> None:
    """The keys other routers read (vllm-router's X-User-ID, its body
    ``session_params.session_id``, production-stack's body field named as its header) went
    by QPS, spread over every worker, with one header the only key kvroute read."""
    from multidict import CIMultiDict

    scorer = ProductionStackSessionScorer(SessionParams(session_key=(
        "X-Session-ID", "X-User-ID", "body.session_params.session_id", "body.user_id")))
    views = [make_view("w0"), make_view("w1"), make_view("w2")]

    def session(headers: dict[str, str] | None = None,
                body: dict[str, object] | None = None) -> str | None:
        return scorer.session_of(make_request(headers=CIMultiDict(headers or {}), body=body))

    assert session({"x-user-id": "alice"}) == "alice"
    assert session({"X-Session-ID": "s1", "X-User-ID": "alice"}) == "s1"       # first wins
    assert session(body={"session_params": {"session_id": "s2"}, "user_id": 7}) == "s2"
    assert session(body={"user_id": 7}) == "7"                  # an integer id, as its digits
    assert session(body={"session_params": "s3", "user_id": ""}) is None   # not an object; empty
    assert session(body={"user_id": True}) is None
    assert session() is None and scorer.session_of(make_request(user="bob")) is None
    picks = {scorer.choose(make_request(f"r{i}", at=float(i), body={
        "session_params": {"session_id": "chat-9"}}), views) for i in range(6)}
    assert len(picks) == 1                                        # sticky, not by QPS


@pytest.mark.parametrize(("key", "message"), [
    ("body.user", "a body field is given in a list: [body.user]"),
    ("a b", "must be a header name, or a list of header names and body.FIELD paths"),
    ((), "must name at least one header or body.FIELD"),
    (("X-User-ID", "body."), "must be a header name or body.FIELD"),
    (("body.a..b",), "must be a header name or body.FIELD"),
])
def test_session_keys_that_name_nothing_are_refused(key: str | tuple[str, ...],
                                                    message: str) -> None:
    with pytest.raises(ParamError, match=re.escape(message)):
        SessionParams(session_key=key)


def test_a_session_id_with_bytes_that_are_not_utf8_hashes_too() -> None:
    scorer = ProductionStackSessionScorer()
    views = [make_view("w0"), make_view("w1"), make_view("w2")]
    odd = b"user-\xff".decode("utf-8", "surrogateescape")     # as aiohttp has the header
    picks = {scorer.choose(make_request(session=odd), views) for _ in range(3)}
    assert len(picks) == 1 and picks <= {"w0", "w1", "w2"}


def test_token_only_prompts_are_chunked_in_quarter_chunks_of_tokens() -> None:
    trie = HashTrie(chunk_size=8)              # 2 tokens per chunk
    trie.insert([1, 2, 3, 4, 5], "x")
    assert trie.longest_prefix_match([1, 2, 3, 4, 9], {"x", "y"}) == (16, {"x"})
    scorer = ProductionStackPrefixScorer(PrefixParams(chunk_size=8), random.Random(0))
    first = make_request("1", tokens=[1, 2, 3, 4])
    scorer.on_routed(first, routed(first, "w1"))
    views = [make_view("w0"), make_view("w1")]
    assert scorer.choose(make_request("2", tokens=[1, 2, 3, 4, 7, 7]), views) == "w1"


def test_the_qps_windows_hold_one_window_of_arrivals_when_nothing_reads_them() -> None:
    """Arrivals left a window only when its QPS was read: with every request in a session
    (or every prefix matched) none was, and each routed request stayed for ever (100,000
    requests: 100,000 floats)."""
    session = ProductionStackSessionScorer(SessionParams(qps_window_secs=10.0))
    prefix = ProductionStackPrefixScorer(PrefixParams(chunk_size=4, qps_window_secs=10.0))
    for n in range(3000):          # 100 per second for 30 s: three windows
        request = make_request(str(n), at=n * 0.01, session=f"user-{n % 7}",
                               text="same prompt")
        session.on_routed(request, routed(request, "w0"))
        prefix.on_routed(request, routed(request, "w0"))
    for scorer in (session, prefix):
        assert 999 <= len(scorer._qps._times["w0"]) <= 1000      # one window's arrivals


def test_a_bounded_trie_drops_its_least_recently_used_leaves() -> None:
    """Unbounded as upstream by default; with ``max_nodes`` the trie stays within it, a
    prefix in use is kept and one unused since goes."""
    trie = HashTrie(chunk_size=4, max_nodes=20)
    trie.insert("keepkeepkeep", "x")
    trie.insert("gonegonegone", "y")
    for n in range(200):
        trie.insert(f"{n:04d}{n:04d}", "z")
        assert trie.longest_prefix_match("keepkeepkeep", {"x", "y", "z"}) == (12, {"x"})
        assert trie.nodes <= 20
    assert trie.longest_prefix_match("gonegonegone", {"x", "y", "z"})[0] == 0
    unbounded = HashTrie(chunk_size=4)
    for n in range(200):
        unbounded.insert(f"{n:04d}{n:04d}", "z")
    assert unbounded.nodes == 400
    with pytest.raises(ParamError):
        PrefixParams(max_nodes=-1)


@pytest.mark.parametrize("bounds", [(0, 20), (20, 0, 20), (50, 20)],
                         ids=["bounded-by-a-reload", "unbounded-and-back", "tightened"])
def test_a_reload_that_changes_the_bound_keeps_the_trie_whole(bounds: tuple[int, ...]) -> None:
    """A trie grown unbounded, bounded by a reload, broke on its next insert (no node was in
    its order of use: an empty-dict error, or a node with children evicted)."""
    scorer = ProductionStackPrefixScorer(PrefixParams(chunk_size=4, max_nodes=bounds[0]))
    views = [make_view("w0")]
    for n in range(40):
        request = make_request(str(n), text=f"{n:04d}{n:04d}{n:04d}")
        scorer.on_routed(request, routed(request, "w0"))
    for bound in bounds[1:]:
        reloaded = ProductionStackPrefixScorer(PrefixParams(chunk_size=4, max_nodes=bound))
        reloaded.inherit_state(scorer)
        scorer = reloaded
    assert scorer.trie.nodes <= bounds[-1]
    for n in range(40, 80):
        request = make_request(str(n), text=f"{n:04d}{n:04d}{n:04d}")
        scorer.on_routed(request, routed(request, "w0"))
        assert scorer.trie.nodes <= bounds[-1]
    assert scorer.score(make_request("x", text="007900790079"), views, CycleState()) == {
        "w0": 1.0}
