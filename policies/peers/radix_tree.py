"""SGLang's approximate radix tree, one per worker, over token ids (or characters).

SGLang's router keeps a radix tree of the prompts it has sent to each worker
(``sgl-model-gateway/src/tree.rs``; peer-routers.md §2.2.1) and asks it for the longest prefix a
worker has seen. This is the same structure for one worker: a compressed radix tree whose
edges are runs of units, with a last-access time per node, a size counted in stored units,
and eviction of least-recently-used leaves until the tree fits ``max_size``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence


class _Node:
    __slots__ = ("children", "key", "last_access", "parent")

    def __init__(self, key: tuple[int, ...], parent: _Node | None, now: float) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.last_access = now


def _common_length(label: tuple[int, ...], units: tuple[int, ...], start: int) -> int:
    """Length of the common prefix of ``label`` and ``units[start:]`` (slice compares in C)."""
    limit = min(len(label), len(units) - start)
    if units[start:start + limit] == label[:limit]:
        return limit
    low, high = 0, limit          # label[:low] matches, label[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if units[start:start + middle] == label[:middle]:
            low = middle
        else:
            high = middle
    return low


class ApproxRadixTree:
    """The prompts routed to one worker. ``size`` is the number of units stored."""

    __slots__ = ("_root", "size")

    def __init__(self) -> None:
        self._root = _Node((), None, 0.0)
        self.size = 0

    def match_length(self, units: Sequence[int], now: float) -> int:
        """Longest prefix of ``units`` in the tree; touches the nodes on the matched path."""
        key = units if isinstance(units, tuple) else tuple(units)
        node, position = self._root, 0
        while position < len(key):
            child = node.children.get(key[position])
            if child is None:
                break
            matched = _common_length(child.key, key, position)
            child.last_access = now
            position += matched
            if matched < len(child.key):
                break
            node = child
        return position

    def insert(self, units: Sequence[int], now: float) -> None:
        key = units if isinstance(units, tuple) else tuple(units)
        node, position = self._root, 0
        node.last_access = now
        while position < len(key):
            child = node.children.get(key[position])
            if child is None:
                node.children[key[position]] = _Node(key[position:], node, now)
                self.size += len(key) - position
                return
            matched = _common_length(child.key, key, position)
            if matched < len(child.key):
                child = self._split(child, matched, now)
            child.last_access = now
            node, position = child, position + matched

    @staticmethod
    def _split(child: _Node, at: int, now: float) -> _Node:
        """Cut ``child``'s edge after ``at`` units; return the new upper node."""
        parent = child.parent
        assert parent is not None
        upper = _Node(child.key[:at], parent, now)
        parent.children[upper.key[0]] = upper
        child.key = child.key[at:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    def evict_to(self, max_size: int) -> int:
        """Remove least-recently-used leaves until ``size <= max_size``; return units removed."""
        if self.size <= max_size:
            return 0
        order = itertools.count()
        heap = [(leaf.last_access, next(order), leaf) for leaf in self._leaves()]
        heapq.heapify(heap)
        removed = 0
        while self.size > max_size and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self.size -= len(leaf.key)
            removed += len(leaf.key)
            if parent is not self._root and not parent.children:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return removed

    def _leaves(self) -> list[_Node]:
        leaves, stack = [], list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                leaves.append(node)
        return leaves
