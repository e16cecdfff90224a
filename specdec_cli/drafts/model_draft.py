"""The draft that runs a causal LM of its own, with its own KV cache: a smaller model sharing the
target's tokenizer (kind `model`, model_kind.py) or an early-exit view of the target (kind
`early-exit`, early_exit_kind.py).
"""

from __future__ import annotations

import torch

from specdec_cli.engine.kvcache import to_device
from specdec_cli.loop.protocol import Draft
from specdec_cli.loop.tree import comb


class ModelDraft(Draft):
    """A causal LM that proposes its own greedy tokens, with its own KV cache.

    Cache invariant: `self.cached` positions of `tokens` are in the draft cache and `pending`
    holds tokens[cached:] on the device. A proposal of k feeds `pending`, then k-1 of its own
    tokens (the k-th is never fed). Tokens never come back from the host: the loop hands the
    round's new tokens over as a device tensor, so drafting costs no host-to-device copy and
    no sync (the LM head runs on the last position only: keep=1).
    """

    runs_model = True  # step_seconds: one 1-token forward of its model
    samples = True  # propose_sampled draws from its own warped distribution
    trees = True  # propose_tree: its greedy chain and, where it is unsure, its next choices beside it
    SIBLINGS = 3  # tokens ranked per depth for a tree: the chain's and 2 others

    def __init__(self, lm, shared_vocab: int, name: str = "model"):
        self.lm, self.shared_vocab, self.name = lm, shared_vocab, name
        self.forwards = 0
        self.chain: torch.Tensor | None = None  # a tree round's drafted chain (update keeps its agreed prefix)

    @property
    def window(self) -> int | None:
        return self.lm.max_positions  # an early-exit view's is the target's

    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        self.cache, self.cached, self.base, self.k = self.lm.new_cache(), 0, 0, 0
        self.pending = to_device(prompt, self.lm.device)  # [S]: once per request, without a host sync

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._propose(tokens, k, None, None)[0]

    def propose_tree(self, tokens: list[int], k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """Its greedy chain of k and, at each depth, its next likeliest tokens as leaves beside
        it: the k nodes of highest cumulative draft probability (loop/tree.comb, as the features
        head; no extra forward: the siblings' logits are the chain's). Where the draft is sure,
        the tree is the chain; where its second choice is likely, that branch replaces the
        chain's unlikely tail."""
        logits = []
        chain = self._propose(tokens, k, None, None, logits)[0]
        if not chain.shape[0]:
            return chain, ()
        self.chain = chain
        ids = torch.arange(self.shared_vocab, device=chain.device)
        return comb(chain, torch.stack(logits).float().log_softmax(-1), k, ids, self.SIBLINGS)

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As propose, but each token is drawn from the draft's warped distribution q over the
        shared vocabulary; returns (tokens [d], q [d, shared_vocab])."""
        return self._propose(tokens, k, warp, generator)

    def _propose(self, tokens: list[int], k: int, warp, generator,
                 logits_out: list | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        from specdec_cli.loop.sampling import sample

        self.base, self.k, self.chain = len(tokens), k, None
        if k == 0:
            return self.pending[:0], None
        ids = self.pending[None]  # [1, S] the uncached tail
        out, qs = [], []
        for _ in range(k):
            logits = self.lm.forward(ids, self.cache, keep=1)[-1, : self.shared_vocab]  # [V]
            if logits_out is not None:
                logits_out.append(logits)
            if warp is None:
                token = logits.argmax().view(1)  # greedy; stays on device: no host sync while drafting
            else:
                qs.append(warp(logits))  # [V]: the draft's distribution q
                token = sample(qs[-1], generator).view(1)
            out.append(token)
            ids = token[None]  # [1, 1]
        self.forwards += k
        self.cached = len(tokens) + k - 1
        return torch.cat(out), (torch.stack(qs) if qs else None)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        if self.k == 0:  # nothing proposed: the draft is simply further behind
            self.pending = torch.cat([self.pending, _on(new, tokens, self.base, self.lm.device)])
            return
        # Proposals 1..accepted are now part of `tokens`; the rest of the cache is stale. After a
        # tree, the kept path leaves the drafted chain where it took a sibling.
        agreed = accepted if self.chain is None else _agreed(self.chain, tokens[self.base:self.base + accepted])
        keep = min(self.cached, self.base + min(agreed, self.k - 1))
        self.cache.crop(keep - self.cached)  # crop(0) still trims sliding-window layers
        self.cached = keep
        fresh = _on(new, tokens, self.base, self.lm.device)  # tokens[base:]
        self.pending = fresh[keep - self.base:]  # tokens[keep:], keep >= base

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token (one 1-token forward after `context`)."""
        from specdec_cli.engine.costs import forward_seconds

        return forward_seconds([(self.lm, 1)], context)[0]


def _agreed(chain: torch.Tensor, kept: list[int]) -> int:
    """How many of the round's kept tokens are the drafted chain's, from its start."""
    drafted = chain[: len(kept)].tolist()
    return next((i for i, (a, b) in enumerate(zip(drafted, kept)) if a != b), len(drafted))


def _on(new: torch.Tensor | None, tokens: list[int], base: int, device) -> torch.Tensor:
    """tokens[base:] as a device tensor: the loop's `new` when given, else copied from the host."""
    if new is not None and new.shape[0] == len(tokens) - base:
        return new
    return to_device(tokens[base:], device)
