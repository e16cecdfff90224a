"""The features draft (kind `features`, features_kind.py): one block drafting from the target's
own hidden states (EAGLE-1; from several of them fused, EAGLE-3's input). The block, its cache and its weights file are features_block.py (shared
with `specdec distill`, which trains them); here is the draft that runs them in the loop (see
features_block.py's doc for the notation).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from specdec_cli.drafts.features_block import BlockCache, FeatureBlock
from specdec_cli.drafts.lookup_draft import PromptLookupDraft
from specdec_cli.engine.kvcache import to_device
from specdec_cli.engine.trees import chain
from specdec_cli.loop.protocol import Draft
from specdec_cli.loop.tree import graft, settle


class Head:
    """The target's LM head over the draft vocabulary. The full vocabulary uses the target's
    own weight (shared); a reduced one is an N-row slice (a view when the ids are a prefix
    0..N-1, else a gathered N x H copy made once: the cost of a smaller head)."""

    def __init__(self, lm, vocab_ids: torch.Tensor):
        out = lm.model.get_output_embeddings()
        n = vocab_ids.shape[0]
        self.prefix = bool((vocab_ids == torch.arange(n, device=vocab_ids.device)).all())
        self.weight = out.weight[:n] if self.prefix else out.weight[vocab_ids]
        bias = getattr(out, "bias", None)
        self.bias = None if bias is None else (bias[:n] if self.prefix else bias[vocab_ids])
        self.ids = vocab_ids

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight, self.bias)


class FeatureDraft(Draft):
    """Drafts with a FeatureBlock from the target's own hidden states (see the module doc).

    State, at the top of each round (tokens = t_0..t_{L-1}):
      cache.length true pairs (f_j, t_{j+1}) are cached; `pending` holds the features of the
      pairs after them, up to j = L-2 (the target has computed f_0..f_{L-2}), and
      `pending_tokens` their tokens t_{j+1}. A proposal feeds them, so the draft never asks the
      target for anything: the loop hands it the features its forwards computed (begin: the
      prefill's; update: the verify's), as the draft declares `reads_features`.

    With `lookup` = n >= 2 a round first looks the last n tokens (down to 2) up in the prompt and
    output: where they occurred before, what followed them is the proposal (a tree: that chain
    first, the head's own tree grafted on where it has room), else the head drafts alone. On
    text that repeats itself a copy beats the head's guesses (docs/trees.md, measured).
    """

    runs_model = True  # step_seconds: one block call and the head
    samples = True  # propose_sampled draws from its own warped distribution
    trees = True  # propose_tree: a tree grown by cumulative draft probability (EAGLE-2)
    BEAM = 4  # a tree's nodes expanded per depth, and children ranked per expanded node

    def __init__(self, lm, block: FeatureBlock, vocab_ids: torch.Tensor, name: str = "features", meta: dict | None = None,
                 lookup: int = 0):
        self.lm, self.block, self.name, self.meta = lm, block, name, meta or {}
        self.ngrams = PromptLookupDraft(lm.device, lookup, 2) if lookup else None  # draft.lookup's n-gram match
        self.reads_features = tuple(block.cfg.taps)  # the loop asks the target's forwards for these
        self.embed = lm.model.get_input_embeddings()  # the target's own module: shared
        self.head = Head(lm, vocab_ids)
        self.forwards = 0
        self.remembered: tuple | None = None  # (prompt, its features): repeated draws of one prompt

    @property
    def window(self) -> int | None:
        return self.lm.max_positions  # the target's: the draft reads its features

    # -- protocol ---------------------------------------------------------------------------
    def begin(self, prompt: list[int], features: torch.Tensor | None = None) -> None:
        w = self.head.weight
        self.cache = BlockCache(self.block.cfg, w.device, w.dtype, capacity=max(256, 2 * len(prompt)))
        self.pending, self.pending_tokens = [], []
        if len(prompt) < 2:  # no prefill forward, no feature yet: the first round drafts nothing
            return
        self.pending = [self._prompt_features(prompt, features)]
        self.pending_tokens = [torch.tensor(prompt[1:], device=w.device)]

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        copied = self._copied(tokens, k)
        if copied:
            self._feed()  # the true pairs still go into the block's cache
            return to_device(copied, self.head.weight.device)
        return self._propose(tokens, k, None, None)[0]

    def context_key(self, tokens: list[int], k: int) -> int:
        """The matched n-gram's length when a round copies it (0: the head drafts): the cost
        schedule learns the two kinds of round apart."""
        return self.ngrams.context_key(tokens, k) if self.ngrams else 0

    def propose_tree(self, tokens: list[int], k: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """A token tree of at most k nodes grown as EAGLE-2 does: at each depth the BEAM likeliest
        children of every expanded node are candidates, scored by cumulative draft log-probability;
        the BEAM best new ones are expanded in one block call (FeatureBlock.branch), while any can
        still rank among the k best; the k best candidates are kept (loop/tree.settle). With a
        lookup match its copy is the first chain and the grown tree is grafted on (loop/tree.graft)."""
        h = self._feed()
        copied = self._copied(tokens, k)
        if k == 0 or h is None or len(copied) == k:  # nothing to draft from, or the copy fills the tree
            return to_device(copied, self.head.weight.device), chain(len(copied))
        nodes, frontier, logp = [], [-1], self.head(h).float().log_softmax(-1)  # logp [m, N]: the frontier's children
        past_k, past_v = self.cache.k[:, :, :0], self.cache.v[:, :, :0]  # the frontier's ancestors' pairs [m, heads, a, d]
        for depth in range(1, k + 1):
            top = logp.topk(min(self.BEAM, logp.shape[-1]), -1)  # [m, width]
            width = top.indices.shape[1]
            base = torch.tensor([nodes[f][0] if f >= 0 else 0.0 for f in frontier])[:, None]
            scores = (base + top.values.cpu()).flatten()  # cumulative log-probability of each candidate
            rows = top.indices.flatten()
            first = len(nodes)
            nodes += [(score, frontier[c // width], token, depth)
                      for c, (score, token) in enumerate(zip(scores.tolist(), self.head.ids[rows].tolist()))]
            floor = sorted((n[0] for n in nodes), reverse=True)[k - 1] if len(nodes) >= k else float("-inf")
            pick = [c for c in scores.topk(min(self.BEAM, scores.numel())).indices.tolist() if scores[c] > floor]
            if depth == k or not pick:  # a child scores at most its parent: none of theirs would be kept
                break
            parent = torch.tensor([c // width for c in pick], device=h.device)
            h, k_new, v_new = self.block.branch(h[parent], self.embed(self.head.ids[rows[pick]]), self.cache,
                                                past_k[parent], past_v[parent])
            past_k, past_v = torch.cat([past_k[parent], k_new], dim=2), torch.cat([past_v[parent], v_new], dim=2)
            frontier, logp = [first + c for c in pick], self.head(h).float().log_softmax(-1)
        self.forwards += depth
        ids, parents = settle(nodes, k)
        if copied:
            ids, parents = graft(copied, ids, parents, k)
        return to_device(ids, self.head.weight.device), parents

    def propose_sampled(self, tokens: list[int], k: int, warp, generator):
        """Tokens drawn from the draft's warped distribution q; q [d, V] over the target's
        vocabulary (zero outside the draft vocabulary)."""
        copied = self._copied(tokens, k)
        if copied:  # deterministic: q is one-hot (the loop makes it)
            self._feed()
            return to_device(copied, self.head.weight.device), None
        proposal, q, _ = self._propose(tokens, k, warp, generator)
        if q is None or self.head.prefix:
            return proposal, q  # a prefix vocabulary: the loop pads q with zeros beyond it
        return proposal, q.new_zeros(q.shape[0], self.block.cfg.target_vocab).index_copy_(1, self.head.ids, q)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None,
               features: torch.Tensor | None = None) -> None:
        m = new.shape[0] if new is not None else accepted + 1  # tokens just appended
        if features is None or features.shape[0] < m:  # a caller that did not hand them over: recompute all
            self._restart(tokens)
            return
        self.pending.append(features[:m])  # f of [last token, accepted proposals]
        self.pending_tokens.append(new if new is not None else torch.tensor(tokens[-m:], device=features.device))

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token after `context` (block + head), on a scratch
        cache: the figure the cost model weighs against a target step."""
        w = self.head.weight
        with torch.inference_mode():
            cache = BlockCache(self.block.cfg, w.device, w.dtype, capacity=len(context) + 64)
            n = max(1, len(context) - 1)
            feats = torch.zeros(n, self.block.cfg.hidden, device=w.device, dtype=w.dtype)
            toks = torch.tensor(context[1:] or context, device=w.device)[:n]
            h = self.block.step(feats, self.embed(toks), cache)[-1:]
            cache.length = n
            token = toks[-1:]
            times = []
            for _ in range(3):
                _sync(w.device)
                start = time.perf_counter()
                for i in range(8):
                    h, token = self._next(h, token, cache)
                    cache.length += 1
                _sync(w.device)
                times.append((time.perf_counter() - start) / 8)
                cache.length = n
        return min(times)

    # -- internals -------------------------------------------------------------------------
    def _copied(self, tokens: list[int], k: int) -> list[int]:
        """What followed the latest earlier occurrence of the last n tokens (n = lookup..2), up
        to k; [] without lookup or a match (PromptLookupDraft keeps the round's match)."""
        return self.ngrams.lookup(tokens, k) if self.ngrams else []

    def _feed(self) -> torch.Tensor | None:
        """The true pairs not yet cached, fed and kept: the block's output at the last [1, H]
        (None: there are none, so nothing to draft from)."""
        if not self.pending:
            return None
        feats, toks = torch.cat(self.pending), torch.cat(self.pending_tokens)
        self.pending, self.pending_tokens = [], []
        h = self.block.step(self.block.lift(feats.to(self.head.weight.dtype)), self.embed(toks), self.cache)[-1:]
        self.cache.length += feats.shape[0]  # only true pairs stay
        return h

    def _propose(self, tokens: list[int], k: int, warp, generator):
        w = self.head.weight
        h = self._feed() if k else None
        if h is None:
            return torch.empty(0, dtype=torch.long, device=w.device), None, []
        top = self.cache.length
        out, qs, rows = [], [], []
        for i in range(k):
            logits = self.head(h)[0]  # [N]
            rows.append(logits)
            if warp is None:
                row = logits.argmax()
            else:
                qs.append(warp(logits))
                row = torch.multinomial(qs[-1], 1, generator=generator)[0]
            token = self.head.ids[row].view(1)  # draft row -> target id, on the device
            out.append(token)
            if i < k - 1:  # the k-th proposal is never fed
                h = self.block.step(h, self.embed(token), self.cache)
                self.cache.length += 1
        self.cache.length = top  # drop the speculative pairs: next round feeds true features
        self.forwards += k
        return torch.cat(out), (torch.stack(qs) if qs else None), rows

    def _next(self, h, token, cache):
        """One drafted token (for timing): head, argmax, then the block on (h, token)."""
        token = self.head.ids[self.head(h)[0].argmax()].view(1)
        return self.block.step(h, self.embed(token), cache), token

    def _prompt_features(self, prompt: list[int], features: torch.Tensor | None) -> torch.Tensor:
        """f_0..f_{L-2}: from the prefill that just ran (the usual case, handed over by the loop),
        from the last request with this prompt (many sampling draws from one prefix cache, no
        prefill), or a scratch forward."""
        if features is not None and features.shape[0] == len(prompt) - 1:
            feats = features
        elif self.remembered is not None and self.remembered[0] == tuple(prompt):
            feats = self.remembered[1]
        else:
            feats = self._scratch(prompt[:-1])
        self.remembered = (tuple(prompt), feats)
        return feats

    def _scratch(self, ids: list[int]) -> torch.Tensor:
        """The target's features of `ids` from a forward of its own: [len(ids), T * H]."""
        return self.lm.forward(torch.tensor([ids], device=self.lm.device), self.lm.new_cache(), keep=1,
                               features=self.reads_features)[1]

    def _restart(self, tokens: list[int]) -> None:
        """Recompute the features of tokens[:-1] with a scratch target forward; re-feed all."""
        self.begin([])
        self.pending = [self._scratch(tokens[:-1])]
        self.pending_tokens = [torch.tensor(tokens[1:], device=self.lm.device)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
