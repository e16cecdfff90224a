"""The prompt-lookup draft (kind `prompt-lookup`, lookup_kind.py): n-gram match against
the prompt and the text so far; no model call.
"""

from __future__ import annotations

import numpy as np
import torch

from specdec_cli.engine.kvcache import to_device
from specdec_cli.loop.protocol import Draft

MAX_PROPOSAL = 64  # cards.MAX_K: the longest continuation a lookup keeps


class PromptLookupDraft(Draft):
    """n-gram lookup: find the latest earlier occurrence of the last n tokens (n = max_ngram
    down to min_ngram) in prompt + output, and propose the tokens that followed it. As a tree
    (propose_tree), what followed every occurrence, merged. Costs no model call; proposes
    nothing when no n-gram matches."""

    free = True  # no model call: a schedule may peek at its proposal at no cost
    fills = True  # nothing matched: the last token, for the cost schedule to verify when cheap
    trees = True

    def __init__(self, device, max_ngram: int = 3, min_ngram: int = 1, name: str = "prompt-lookup"):
        self.device, self.max_ngram, self.min_ngram, self.name = device, max_ngram, min_ngram, name
        self.forwards = 0
        self._last: tuple = (None, 0, [])

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        self._last = (None, 0, [])

    def match(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(n, continuation): the longest n-gram (max_ngram down to min_ngram) ending `tokens`
        that occurred earlier, and up to k tokens that followed its latest occurrence; (0, [])
        when nothing matches. The schedule conditions acceptance on n."""
        key = hash(tuple(tokens))
        if self._last[0] == key:  # asked twice for the same round (schedule, then propose)
            return self._last[1], self._last[2][:k]
        seq = np.asarray(tokens, dtype=np.int64)
        found = (0, [])
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n] earlier n-grams
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n  # the latest match; continuation starts after it
                found = (n, seq[start : start + MAX_PROPOSAL].tolist())
                break
        self._last = (key, *found)
        return found[0], found[1][:k]

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        return self.match(tokens, k)[1] if k else []

    def context_key(self, tokens: list[int], k: int) -> int:
        return self.match(tokens, k)[0]

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return to_device(self.lookup(tokens, k)[:k], self.device)

    def propose_tree(self, tokens: list[int], k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        ids, parents = trie(tokens, k, self.max_ngram, self.min_ngram)
        return to_device(ids, self.device), parents

    def filler(self, tokens: list[int]) -> torch.Tensor:
        """One token to verify when nothing matched (schedule.Scheduled.fills): the last one."""
        return to_device(tokens[-1:], self.device)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        pass


def trie(tokens: list[int], k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], tuple[int, ...]]:
    """(ids, parents): at most k tokens as a tree (loop/tree.py) merging what followed every earlier
    occurrence of the last n tokens, for each n from max_ngram down to min_ngram. A node's score
    sums 10^n over the continuations that pass through it (a longer match outweighs any number of
    shorter ones, then the more frequent continuation, then the latest); the k best nodes are kept (a parent
    scores at least what its children do, so it is kept first) and laid out depth first, the
    better child first: the best path is the first chain."""
    seq = np.asarray(tokens, dtype=np.int64)
    score: dict[tuple, float] = {}
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)
        for start in np.flatnonzero((windows == seq[-n:]).all(axis=1))[::-1] + n:  # the latest first: it wins ties
            follow = tuple(seq[start : start + k].tolist())
            for depth in range(1, len(follow) + 1):
                score[follow[:depth]] = score.get(follow[:depth], 0.0) + 10.0**n
    kept = sorted(score, key=lambda node: (-score[node], len(node)))[:k]  # best first
    ids, parents = [], []

    def visit(node: tuple, slot: int) -> None:
        for child in (c for c in kept if len(c) == len(node) + 1 and c[:-1] == node):
            ids.append(child[-1])
            parents.append(slot)
            visit(child, len(ids))

    visit((), 0)
    return ids, tuple(parents)
