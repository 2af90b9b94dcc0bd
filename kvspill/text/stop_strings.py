"""An Aho-Corasick automaton over a request's stop strings (pure Python, no torch).

Fed the generated text one character at a time, it knows after each character (in amortized
O(1), whatever the number and length of the stop strings):
- the longest stop string that ends here (`match`), and
- the longest suffix of all text so far that is a prefix of some stop string (`depth`): what a
  stream must hold back because a stop string may still complete.
Checking every stop string against a window of text after every token, as before, was
O(stops x length^2) per token: a 3.8 MB stop list made one request take 486 s and slowed every
other stream on the engine thread.

Invariant: a node is an int; node 0 is the root (nothing matched).
"""

from __future__ import annotations

from collections import deque


class StopAutomaton:
    def __init__(self, stop: tuple[str, ...]) -> None:
        self._children: list[dict[str, int]] = [{}]
        self._depth: list[int] = [0]
        self._fail: list[int] = [0]
        # The longest stop string that is a suffix of the node's text ("": none).
        self._match: list[str] = [""]
        for s in stop:
            self._insert(s)
        self._link()

    def _insert(self, s: str) -> None:
        node = 0
        for ch in s:
            nxt = self._children[node].get(ch)
            if nxt is None:
                nxt = len(self._children)
                self._children[node][ch] = nxt
                self._children.append({})
                self._depth.append(self._depth[node] + 1)
                self._fail.append(0)
                self._match.append("")
            node = nxt
        self._match[node] = s

    def _link(self) -> None:
        """Failure links breadth first; a node's match is its own or its failure node's (shorter)."""
        queue = deque(self._children[0].values())
        while queue:
            node = queue.popleft()
            for ch, child in self._children[node].items():
                fail = self._fail[node]
                while fail and ch not in self._children[fail]:
                    fail = self._fail[fail]
                target = self._children[fail].get(ch, 0)
                self._fail[child] = target if target != child else 0
                if not self._match[child]:
                    self._match[child] = self._match[self._fail[child]]
                queue.append(child)

    def next(self, node: int, ch: str) -> int:
        while node and ch not in self._children[node]:
            node = self._fail[node]
        return self._children[node].get(ch, 0)

    def depth(self, node: int) -> int:
        return self._depth[node]

    def match(self, node: int) -> str:
        """The longest stop string ending at `node` ("" when none does)."""
        return self._match[node]
