"""The draft protocol and the capabilities a draft declares.

A draft proposes tokens for the target to verify (after transformers' candidate generators).
The loop speaks this protocol and knows no draft class (drafts/ holds them):
    begin(prompt, features)    start a new request (drop all per-request state); `features`: the
                               prefill's hidden states [L-1, T * H], for a draft that reads_features
    propose(tokens, k) -> [d]  up to k token ids continuing `tokens`, on the target's device
    update(tokens, accepted, new, features)  the round is over: `tokens` is the new sequence,
                               the first `accepted` proposed tokens were kept, `new` (a device
                               tensor) holds the tokens just appended, so a draft needs no host
                               copy, and `features` the hidden states [len(new), T * H] of the
                               positions the verify fed for them (reads_features only)
    forwards                   model calls made so far (a counter, never reset by begin)

Everything else a draft may or may not do is declared on its class, never probed for: `Draft`
gives each capability its default, and a draft overrides the ones it has.
    free             proposing costs nothing (no model call, not even a counted one), so a
                     schedule may peek at the proposal of a round it skips (`lookup`)
    runs_model       proposing runs a model: `step_seconds(context)` measures one proposed
                     token, the cost model's c (a draft that runs none costs nothing)
    samples          at temperature > 0 it draws from its own distribution q
                     (`propose_sampled`); otherwise its proposal is deterministic (q one-hot)
    needs_reference  it reads the target's greedy output for the prompt (synthetic): a greedy
                     run of the same prompt must come first
    fills            when it finds nothing to propose it can still offer one token (`filler`),
                     which the cost schedule verifies when a 2-token verify is cheap
    window           its own context window in tokens (None: it has no limit of its own)
    reads_features   the target's hidden states it drafts from, as taps (engine/taps.py; () none):
                     the loop asks the target's forwards for them and hands them over in begin
                     and update (each row of a batch its own)
    trees            it can propose a token tree, `propose_tree(tokens, k) -> (tokens [d],
                     parents)` with d <= k (loop/tree.py: each token's parent slot, the most
                     likely chain first), deterministic at any temperature; the loop asks for
                     one where its forwards can hold trees (KVCache.trees)
    observe_verify(width, seconds, context)  what a verify just cost (at batch 1; the cost
                     schedule learns from it; default: nothing)
    context_key(tokens, k)  a small int the schedule conditions acceptance on (default 0;
                     prompt lookup: the matched n-gram length)

What a card names is a draft *kind* (drafts/*_kind.py): its declaration says which of these classes it
builds, and so what the draft can do.

No torch at import (only for type checking).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class Draft:
    """The protocol, with every optional part at its default (see the module doc)."""

    name: str = "draft"
    forwards: int = 0
    free = False
    runs_model = False
    samples = False
    needs_reference = False
    fills = False
    window: int | None = None
    reads_features: tuple[int, ...] = ()
    trees = False

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        pass

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        raise NotImplementedError

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        pass

    def observe_verify(self, width: int, seconds: float, context: int) -> None:
        """Seconds of the verify just run, `width` wide, after `context` tokens (batch 1)."""

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(tokens [d], q [d, V] or None): a draft that `samples` draws from its warped q; any
        other proposes as at temperature 0 and q is None (one-hot: the loop makes it)."""
        return self.propose(tokens, k), None

    def propose_tree(self, tokens: list[int], k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """(tokens [d], parents [d]): at most k tokens as a tree (only drafts that declare `trees`)."""
        raise NotImplementedError

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token after `context` (only `runs_model` drafts)."""
        return 0.0

    def context_key(self, tokens: list[int], k: int) -> int:
        return 0

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """A `free` draft's proposal as a list, peeked at no cost; [] = nothing to propose."""
        return []

    def filler(self, tokens: list[int]) -> torch.Tensor:
        """One token to verify when nothing was found (only drafts that declare `fills`)."""
        raise NotImplementedError
