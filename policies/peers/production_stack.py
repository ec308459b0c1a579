"""vLLM production-stack's ``prefixaware`` and ``session`` routing logics.

Source (``src/vllm_router/routers/routing_logic.py`` and ``prefix/hashtrie.py``;
peer-routers.md §2.1):

* ``prefixaware``: a ``HashTrie`` over ``chunk_size`` (128) *character* chunks of the prompt,
  each chunk hashed on its own (not chained) and one trie level per chunk; every node keeps the
  endpoints whose prompts passed through it. Longest match is restricted to the available
  endpoints (the match stops at the first chunk none of them holds), then ``random.choice``
  among the endpoints at the deepest node (all available ones when nothing matched), then the
  prompt is inserted under the chosen endpoint. A match shorter than
  ``prefix_min_match_length`` (default 0) goes to the endpoint with the lowest router-side QPS
  instead (and is still inserted). Chat prompt = message contents joined by ``\\n``. No
  eviction, as upstream (its memory grows with every distinct prompt: production-stack
  #687), unless ``max_nodes`` is set: then, past that many nodes, the least recently used
  leaves go (inserts and matches use a node), one for each node added. A prompt
  given only as token ids (the simulator's) is chunked in ``chunk_size / 4`` tokens (about
  the same text length) instead of characters.
* ``session``: consistent hashing of the session key over the workers (upstream:
  ``uhashring`` over the endpoint URLs, no bounded load); no key → lowest router-side QPS.
  The key is the request header ``session_key`` names (upstream's ``--session-key``;
  default ``x-session-id``), else the body's ``user`` field. ``session_key`` may instead be
  a list, tried in order, of header names and ``body.PATH`` fields of the JSON body (dotted
  into its objects): the keys other routers read, such as vllm-router's ``[X-Session-ID,
  X-User-ID, body.session_params.session_id, body.user]`` or production-stack's header then
  body field of one name.

Router-side QPS is routed requests per ``qps_window_secs`` (the request-stats window, 60 s)
on request arrival times (each endpoint keeps the arrivals of one window). Both are one-hot
scorers::

    scorers: [{type: production-stack-prefix, weight: 1, params: {chunk_size: 128}}]
    picker: {type: max-score}
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import CycleState, Decision, RequestOutcome, RoutingRequest
from policies.errors import ParamError
from policies.peers.prompt import prompt_text
from policies.registry import PluginRegistry
from workers.models import WorkerView

AVERAGE_CHARACTERS_PER_TOKEN = 4
PREFIX_TYPE = "production-stack-prefix"
SESSION_TYPE = "production-stack-session"


@dataclass(frozen=True, slots=True)
class PrefixParams:
    chunk_size: int = 128
    prefix_min_match_length: int = 0
    qps_window_secs: float = 60.0
    max_nodes: int = 0          # the trie's bound (0: none, as upstream)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ParamError("chunk_size", "must be > 0")
        if self.max_nodes < 0:
            raise ParamError("max_nodes", "must be >= 0 (0: no bound)")
        if self.qps_window_secs <= 0:
            raise ParamError("qps_window_secs", "must be > 0")


DEFAULT_SESSION_KEY = "x-session-id"
BODY_KEY_PREFIX = "body."


@dataclass(frozen=True, slots=True)
class SessionParams:
    vnodes: int = 160
    qps_window_secs: float = 60.0
    # the header naming a request's session (else the body's ``user``); or a list, tried in
    # order, of header names and ``body.PATH`` fields of the JSON body
    session_key: str | tuple[str, ...] = DEFAULT_SESSION_KEY

    def __post_init__(self) -> None:
        if self.vnodes <= 0:
            raise ParamError("vnodes", "must be > 0")
        if isinstance(self.session_key, str):
            if self.session_key.startswith(BODY_KEY_PREFIX):
                raise ParamError("session_key", f"a body field is given in a list: "
                                 f"[{self.session_key}] (a lone name is a header's, with the "
                                 "body's user after it)")
            if not _is_header_name(self.session_key):
                raise ParamError("session_key", "must be a header name, or a list of header "
                                 "names and body.FIELD paths")
        elif not self.session_key:
            raise ParamError("session_key", "must name at least one header or body.FIELD")
        else:
            for i, key in enumerate(self.session_key):
                if not (_body_path(key) if key.startswith(BODY_KEY_PREFIX)
                        else _is_header_name(key)):
                    raise ParamError(f"session_key[{i}]", "must be a header name or "
                                     "body.FIELD (dotted into the body's objects, e.g. "
                                     "body.session_params.session_id)")
        if self.qps_window_secs <= 0:
            raise ParamError("qps_window_secs", "must be > 0")


def _is_header_name(key: str) -> bool:
    return bool(key) and key.isascii() and not any(c in key for c in " \t\r\n:")


def _body_path(key: str) -> tuple[str, ...]:
    """The fields of a ``body.a.b`` key (empty for anything else)."""
    if not key.startswith(BODY_KEY_PREFIX):
        return ()
    fields = tuple(key[len(BODY_KEY_PREFIX):].split("."))
    return fields if all(fields) else ()


def _body_value(body: Mapping[str, Any] | None, fields: tuple[str, ...]) -> str | None:
    """The text at ``fields`` in the JSON body (an integer as its digits), else None."""
    value: object = body
    for name in fields:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


class _TrieNode:
    __slots__ = ("children", "chunk_hash", "endpoints", "parent")

    def __init__(self, parent: _TrieNode | None = None, chunk_hash: int = 0) -> None:
        self.children: dict[int, _TrieNode] = {}
        self.endpoints: set[str] = set()
        self.parent = parent             # (None for the root)
        self.chunk_hash = chunk_hash     # its key in its parent's children


class HashTrie:
    """production-stack's chunk-hash trie: no eviction, as upstream, unless ``max_nodes``
    (> 0) bounds it; then the least recently used leaves go past it.

    Bounded, the nodes are kept in order of use (an insert or a match uses the nodes it
    passes), each path's nodes marked used deepest first: a node is then always more
    recently used than each node below it, so the least recently used node is a leaf, and
    one eviction is one dictionary operation."""

    def __init__(self, chunk_size: int = 128, max_nodes: int = 0) -> None:
        self.chunk_size = chunk_size
        self.max_nodes = max_nodes
        self.nodes = 0            # below the root
        self._root = _TrieNode()
        self._by_use: OrderedDict[_TrieNode, None] = OrderedDict()   # least recent first

    def _chunk_hashes(self, text: str | Sequence[int]) -> list[int]:
        if isinstance(text, str):
            size = self.chunk_size
            return [hash(text[i:i + size]) for i in range(0, len(text), size)]
        size = max(1, self.chunk_size // AVERAGE_CHARACTERS_PER_TOKEN)
        return [hash(tuple(text[i:i + size])) for i in range(0, len(text), size)]

    def insert(self, text: str | Sequence[int], endpoint: str) -> None:
        node = self._root
        node.endpoints.add(endpoint)
        path = []
        for chunk_hash in self._chunk_hashes(text):
            child = node.children.get(chunk_hash)
            if child is None:
                child = node.children[chunk_hash] = _TrieNode(node, chunk_hash)
                self.nodes += 1
            node = child
            node.endpoints.add(endpoint)
            path.append(node)
        if self.max_nodes:
            self._used(path)
            self._evict()

    def set_bound(self, max_nodes: int) -> None:
        """Bound the trie anew (a reload): from none, every node is ordered children first
        (as if used in that order), then the least recently used go past the bound."""
        if max_nodes and not self.max_nodes:
            self._by_use = OrderedDict((node, None) for node in self._children_first())
        elif not max_nodes:
            self._by_use = OrderedDict()
        self.max_nodes = max_nodes
        if max_nodes:
            self._evict()

    def _evict(self) -> None:
        by_use = self._by_use
        while self.nodes > self.max_nodes:
            leaf, _ = by_use.popitem(last=False)
            assert leaf.parent is not None and not leaf.children
            del leaf.parent.children[leaf.chunk_hash]
            self.nodes -= 1

    def _children_first(self) -> list[_TrieNode]:
        """Every node below the root, each after all the nodes below it."""
        order: list[_TrieNode] = []
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(node.children.values())
        order.reverse()           # (pre-order reversed: every node after its descendants)
        return order

    def longest_prefix_match(self, text: str | Sequence[int],
                             available: set[str]) -> tuple[int, set[str]]:
        node, match_length, selected = self._root, 0, set(available)
        path = []
        for chunk_hash in self._chunk_hashes(text):
            child = node.children.get(chunk_hash)
            if child is None:
                break
            common = child.endpoints & selected
            if not common:
                break
            match_length += self.chunk_size
            selected, node = common, child
            path.append(node)
        if self.max_nodes:
            self._used(path)
        return match_length, selected

    def _used(self, path: list[_TrieNode]) -> None:
        """Mark the nodes of one root-down path used now, deepest first."""
        by_use = self._by_use
        for node in reversed(path):
            by_use[node] = None
            by_use.move_to_end(node)


class _QpsWindow:
    """Requests routed to each endpoint within the last ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._times: dict[str, deque[float]] = {}

    def record(self, endpoint: str, now: float) -> None:
        times = self._times.get(endpoint)
        if times is None:
            times = self._times[endpoint] = deque()
        times.append(now)
        self._expire(times, now)      # (read or not, a window holds one window's arrivals)

    def qps(self, endpoint: str, now: float) -> float:
        times = self._times.get(endpoint)
        if not times:
            return 0.0
        self._expire(times, now)
        return len(times) / self._window

    def _expire(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self._window:
            times.popleft()

    def lowest(self, workers: Sequence[WorkerView], now: float) -> str:
        return min(workers, key=lambda view: self.qps(view.id, now)).id


def _routing_key(request: RoutingRequest) -> str | Sequence[int]:
    """The prompt text; a token-id prompt (no text at all) as its token ids."""
    text = prompt_text(request, "\n")
    if text or request.prompt_token_ids is None:
        return text
    return request.prompt_token_ids


def _one_hot(workers: Sequence[WorkerView], choice: str | None) -> dict[str, float]:
    return {view.id: 1.0 if view.id == choice else 0.0 for view in workers}


class ProductionStackPrefixScorer:
    def __init__(self, params: PrefixParams | None = None, rng: random.Random | None = None,
                 name: str = PREFIX_TYPE) -> None:
        params = params or PrefixParams()
        self.name = name
        self.prefix_min_match_length = params.prefix_min_match_length
        self.max_nodes = params.max_nodes
        self.trie = HashTrie(params.chunk_size, params.max_nodes)
        self._qps = _QpsWindow(params.qps_window_secs)
        self._random = rng or random.Random(0)

    def choose(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> str | None:
        if not workers:
            return None
        match_length, holders = self.trie.longest_prefix_match(_routing_key(request),
                                                               {w.id for w in workers})
        if match_length < self.prefix_min_match_length:
            return self._qps.lowest(workers, request.arrival_time)
        return self._random.choice(sorted(holders))

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return _one_hot(workers, self.choose(request, workers))

    def inherit_state(self, previous: object) -> None:
        """On a routing reload, keep the trie (same chunk size) and the QPS windows."""
        if not isinstance(previous, ProductionStackPrefixScorer):
            return
        if previous.trie.chunk_size == self.trie.chunk_size:
            self.trie = previous.trie
            self.trie.set_bound(self.max_nodes)      # (a reload may change the bound)
        self._qps = previous._qps

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        if decision.worker_id is None:
            return
        self.trie.insert(_routing_key(request), decision.worker_id)
        self._qps.record(decision.worker_id, request.arrival_time)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        """Router-side QPS counts arrivals only."""


def _ring_point(key: str) -> int:
    # surrogatepass: a session id with bytes that are not UTF-8 (or a lone surrogate) hashes too
    return int.from_bytes(hashlib.md5(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")


class ProductionStackSessionScorer:
    def __init__(self, params: SessionParams | None = None,
                 name: str = SESSION_TYPE) -> None:
        params = params or SessionParams()
        self.name = name
        self.vnodes = params.vnodes
        self.session_key = params.session_key
        # a list's keys: (header name, ()) or ("", body fields)
        self._keys = () if isinstance(params.session_key, str) else tuple(
            ("", _body_path(key)) if _body_path(key) else (key, ())
            for key in params.session_key)
        self._qps = _QpsWindow(params.qps_window_secs)
        self._rings: dict[tuple[str, ...], tuple[list[int], list[str]]] = {}

    def session_of(self, request: RoutingRequest) -> str | None:
        """The request's session: its ``session_key`` header, else its ``user`` (with the
        default key, ``request.session``, which is that, or a simulated request's own); with
        a list of keys, the first of them the request gives."""
        if not self._keys:
            if self.session_key == DEFAULT_SESSION_KEY:
                return request.session
            return request.headers.get(str(self.session_key)) or request.user
        for header, fields in self._keys:
            found = (request.headers.get(header) if header
                     else _body_value(request.body, fields))
            if found:
                return found
        return None

    def _ring(self, workers: Sequence[WorkerView]) -> tuple[list[int], list[str]]:
        key = tuple(sorted(view.id for view in workers))
        ring = self._rings.get(key)
        if ring is None:
            points = sorted((_ring_point(f"{worker}-{i}"), worker)
                            for worker in key for i in range(self.vnodes))
            ring = self._rings[key] = ([p for p, _ in points], [w for _, w in points])
        return ring

    def choose(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> str | None:
        if not workers:
            return None
        session = self.session_of(request)
        if not session:
            return self._qps.lowest(workers, request.arrival_time)
        points, owners = self._ring(workers)
        index = bisect.bisect(points, _ring_point(session)) % len(points)
        return owners[index]

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return _one_hot(workers, self.choose(request, workers))

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        if decision.worker_id is not None:
            self._qps.record(decision.worker_id, request.arrival_time)

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        """Router-side QPS counts arrivals only."""


def register(registry: PluginRegistry) -> None:
    registry.register(PREFIX_TYPE, "scorer", PrefixParams,
                      lambda params, ctx: ProductionStackPrefixScorer(params, ctx.rng(), ctx.name))
    registry.register(SESSION_TYPE, "scorer", SessionParams,
                      lambda params, ctx: ProductionStackSessionScorer(params, ctx.name))
