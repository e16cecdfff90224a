"""The decode loop: one loop for plain and speculative decoding, greedy and sampled, over B >= 1 rows.

A *verifier* is the only thing that differs between greedy and sampling (how proposals are
drawn and accepted); a *draft* that proposes nothing turns the loop into plain decoding (one
target step per token); a *schedule* (schedule.py) wraps a draft and picks each round's
proposal length; the *cache* (kvcache.py) holds every row's K/V and pins the forward's shape when
asked. `decode` (one prompt) and `decode_rows` (many, `batch` at a time, continuous batching)
are the one loop; `greedy_decode`, `speculative_decode` and sampling.py's two are it with those
parts filled in.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from specdec_cli.loop.protocol import Draft
from specdec_cli.loop.metrics import Round, Stats
from specdec_cli.loop.tree import Proposal, walk
from specdec_cli.engine.kvcache import prefill, cache_for, capacity_for, to_device  # noqa: F401  (prefill: re-exported)


@dataclass
class Result:
    tokens: list[int]  # generated ids, prompt excluded
    stats: Stats
    rounds: list[Round] = field(default_factory=list)  # speculative only
    logits: list[torch.Tensor] | None = None  # with trace: the target's logits row [V] for each token


def stop(new: list[int], emitted: int, max_tokens: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    """Trim `new` after the first EOS (inclusive) and at max_tokens; say whether we are done."""
    room = max_tokens - emitted
    for i, token in enumerate(new[:room]):
        if token in eos:
            return new[: i + 1], True
    return new[:room], len(new) >= room


def _elapsed(start: float, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


class NoDraft(Draft):
    """Proposes nothing: the loop becomes plain decoding, one target forward per token."""

    name, forwards, free = "none", 0, True

    def __init__(self, device):
        self.empty = torch.empty(0, dtype=torch.long, device=device)  # allocated once: no copy per round

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self.empty

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, None]:
        return self.empty, None


class Greedy:
    """Greedy verification: keep the longest path of proposals that equal the target's argmax
    after their parent (a chain: the leading run); the target's argmax after that path is the
    correction (or, after a full accept, the bonus). Exact token for token: every emitted token
    is the target's own argmax."""

    def propose(self, draft, tokens: list[int], d: int, trees: bool = False) -> Proposal:
        if trees and draft.trees:
            return Proposal.tree(draft, tokens, d)
        return Proposal(draft.propose(tokens, d))

    def verify(self, logits: torch.Tensor, proposal: Proposal) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits [d+1, V] -> (accepted n: 0-dim, emitted [d+1], path [d+1]); emitted[:n+1] are
        the round's tokens (the kept proposals + the target's token), path[:n+1] their slots
        (tree.walk). No host sync."""
        return walk(logits.argmax(-1), proposal)


GREEDY = Greedy()


def fork(draft):
    """A draft for one row of a batch: the wrapper chain copied (a schedule's state too), models shared."""
    twin = copy.copy(draft)
    if hasattr(draft, "draft"):
        twin.draft = fork(draft.draft)
    if hasattr(draft, "schedule"):
        twin.schedule = copy.copy(draft.schedule)
    return twin


@dataclass
class Request:
    """One prompt's state in the loop. Invariant at the top of every round: tokens = prompt +
    out; the cache row holds tokens[:-1] and `last` is tokens[-1] on the target's device; the
    draft has been told every round's outcome (update), so its state matches `tokens`."""

    index: int  # the prompt's place in the input
    prompt: list[int]
    draft: object
    verifier: object
    last: torch.Tensor  # [1]
    start: float = field(default_factory=time.perf_counter)
    out: list[int] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    done: bool = False
    logits: list | None = None  # with trace: one row [V] per emitted token

    def __post_init__(self):
        self.tokens, self.forwards0 = list(self.prompt), self.draft.forwards

    def result(self, device) -> Result:
        self.stats.draft_forwards = self.draft.forwards - self.forwards0
        self.stats.wall_s = _elapsed(self.start, device)  # this request's latency: entry to finish
        return Result(self.out, self.stats, self.rounds, self.logits)


@dataclass
class Verdicts:
    """The round's outcome for its B rows, read back from the device in one host sync.
    accepted  [B]         n_i: the proposals row i keeps
    chosen    [B][d+1]    the verifier's tokens for row i: chosen[i][:n_i + 1] are the round's
                          tokens (the kept proposals + the correction or bonus); the rest is padding
    paths     [B][d+1]    their slots in the verify: paths[i][:n_i + 1] (0, 1, .., n_i on a chain)"""

    accepted: list[int]
    chosen: list[list[int]]
    paths: list[list[int]]

    @classmethod
    def read(cls, verdicts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], d: int) -> Verdicts:
        """verdicts: per row (n 0-dim, emitted [d_i + 1], path [d_i + 1]) on the device -> host lists."""
        pad = [e.new_zeros(d - e.shape[0] + 1) for _, e, _ in verdicts]
        table = torch.stack([torch.cat([n.view(1), e, z, path, z]) for (n, e, path), z in zip(verdicts, pad)])  # [B, 2d+3]
        rows = table.tolist()  # the round's one host sync
        return cls([row[0] for row in rows], [row[1 : d + 2] for row in rows], [row[d + 2 :] for row in rows])


def round_(cache, live: list[Request], k: int, max_tokens: int, eos: frozenset[int], lengths=None,
           timed: bool = False, trees: bool = False) -> None:
    """One round for every live row: draft, ONE verify forward [B, d+1], per-row accept and
    rollback. The round's only host sync is Verdicts.read; tokens fed back to the target and
    the drafts stay on the device. `trees`: drafts that can propose token trees do (tree.py)."""
    # 1. each row's budget: k, never past max_tokens (under the cost schedule, one d for the batch)
    caps = [min(k, max_tokens - len(r.out) - 1) for r in live]
    if lengths is not None:
        lengths.decide(live, caps)
    # 2. proposals, padded into one rectangle [B, d+1]: the last token, then the proposal
    drafts = [r.verifier.propose(r.draft, r.tokens, cap, trees) for r, cap in zip(live, caps)]
    d = max(p.d for p in drafts)
    ids = torch.stack([torch.cat([r.last, p.tokens, r.last.new_zeros(d - p.d)]) for r, p in zip(live, drafts)])
    # 3. one verify forward (with the hidden states when the draft drafts from them)
    features = live[0].draft.reads_features
    clock = time.perf_counter()
    out = cache.forward(ids, features=features, trees=[p.parents for p in drafts] if trees else None)
    logits, hidden = out if features else (out, None)  # [B, d+1, V], [B, d+1, T * H] or None
    # 4. accept: each row's verifier on the device, then the one host sync
    verdicts = [r.verifier.verify(logits[i, : p.d + 1], p) for i, (r, p) in enumerate(zip(live, drafts))]
    read = Verdicts.read(verdicts, d)
    if timed:  # a draft that learns what verifies cost (the cost schedule), at batch 1
        live[0].draft.observe_verify(cache.fed, time.perf_counter() - clock, len(live[0].tokens))  # as fed: pinned, padded
    # 5. commit: each row's new tokens, its draft told, its cache row rolled back to the path it kept
    for i, (r, p, (_, emitted, path)) in enumerate(zip(live, drafts, verdicts)):
        n = read.accepted[i]
        new, r.done = stop(read.chosen[i][: n + 1], len(r.out), max_tokens, eos)  # accepted + correction/bonus
        kept = path[: len(new)]  # their slots in the verify, still on the device
        if r.logits is not None:
            r.logits += list(logits[i, kept].float().cpu())
        fresh = emitted[: len(new)]  # `new`, still on the device
        r.last = fresh[-1:]
        r.tokens += new
        r.out += new
        r.draft.update(r.tokens, n, fresh, None if hidden is None else hidden[i, kept])
        r.rounds.append(Round(drafted=p.d, accepted=n, emitted=len(new), depth=p.depth))
        r.stats.observe(r.rounds[-1])
    cache.keep([n + 1 for n in read.accepted], read.paths)  # row i holds tokens + its kept path (+ the last token fed)


@torch.inference_mode()
def decode_rows(target, draft, prompts: list[list[int]], k: int, max_tokens: int, eos: frozenset[int],
                batch: int = 1, verifier: Callable[[], object] = lambda: GREEDY, card_name: str = "the target",
                lengths=None, width: int | None = None, prefix=None, trace: bool = False,
                trees: bool = False) -> Iterator[tuple[int, Result]]:
    """Decode many prompts, `batch` rows at a time: yields (prompt index, Result) as rows
    finish; a waiting prompt takes a finished row's place at once (continuous batching).
    At batch > 1 `draft` is forked per row; `verifier()` makes each row's verifier; `lengths`
    (cost schedule) chooses each round's d for the batch. `width` W pins every forward to
    [batch, W] (None: free shapes); `prefix`: a cache holding the prompt's prefill, copied
    (many sampling draws of one prompt); `trace` keeps each emitted token's logits row;
    `trees`: a draft that can propose token trees does, where the cache can hold them (KVCache.trees)."""
    width = width if width is None else max(width, k + 1)
    capacity = capacity_for(target, max(map(len, prompts), default=1) + max_tokens + (width or 0))
    features = draft.reads_features  # the taps the draft drafts from (() none): each row gets its own
    cache = cache_for(target, card_name, batch, width, capacity)
    cache.warm(range(1, k + 2))  # decoding.compile: new shapes compile now, before any request's clock starts
    timed = batch == 1 and not getattr(target, "replayed", False)  # a replay's forwards cost nothing
    waiting, live = deque(enumerate(prompts)), []
    while waiting or live:
        while waiting and len(live) < batch:
            index, prompt = waiting.popleft()
            r = Request(index, prompt, fork(draft) if batch > 1 else draft, verifier(),
                        to_device([prompt[-1]], target.device), logits=[] if trace else None)
            if features:
                r.stats.target_forwards, prompt_features = cache.add(prompt, prefix, features)
                r.draft.begin(prompt, prompt_features)
            else:
                r.stats.target_forwards = cache.add(prompt, prefix)
                r.draft.begin(prompt)
            live.append(r)
        round_(cache, live, k, max_tokens, eos, lengths, timed, trees and cache.trees)
        for r in live:
            if r.done:
                yield r.index, r.result(target.device)
        stay = [i for i, r in enumerate(live) if not r.done]
        if len(stay) < len(live):
            cache.select(stay)
            live = [live[i] for i in stay]


def decode(target, draft, prompt: list[int], k: int, max_tokens: int, eos: frozenset[int],
           verifier=GREEDY, prefix=None, width: int | None = None, trace: bool = False, trees: bool = False) -> Result:
    """One prompt through the loop. Each round the draft proposes d <= k tokens (a chain, or with
    `trees` a token tree); the target scores them all in one forward; the verifier keeps the
    longest agreeing path plus one token of the target's (correction or bonus). With a draft
    that proposes nothing this is plain decoding."""
    return next(decode_rows(target, draft, [prompt], k, max_tokens, eos, 1, lambda: verifier,
                            width=width, prefix=prefix, trace=trace, trees=trees))[1]


def greedy_decode(target, prompt: list[int], max_tokens: int, eos: frozenset[int], width: int | None = None,
                  trace: bool = False) -> Result:
    """The target alone, one token per forward: the reference speculative decoding must match
    (pinned: at the same width W as the speculative run)."""
    result = decode(target, NoDraft(target.device), prompt, 0, max_tokens, eos, width=width, trace=trace)
    return Result(result.tokens, result.stats, [], result.logits)  # plain decoding has no rounds worth listing


def speculative_decode(target, draft, prompt: list[int], k: int, max_tokens: int, eos: frozenset[int],
                       width: int | None = None, trace: bool = False, trees: bool = False) -> Result:
    """Greedy speculative decoding: output identical to greedy_decode, token for token."""
    return decode(target, draft, prompt, k, max_tokens, eos, width=width, trace=trace, trees=trees)
