"""Greedy and speculative decoding (batch size 1), sharing one prefill and one stop rule."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .metrics import Round, Stats


@dataclass
class Result:
    tokens: list[int]  # generated ids, prompt excluded
    stats: Stats
    rounds: list[Round] = field(default_factory=list)  # speculative only


def prefill(lm, cache, prompt: list[int]) -> int:
    """Cache every prompt token but the last (the first round feeds it). Returns forwards made."""
    if len(prompt) < 2:
        return 0
    lm.forward(torch.tensor([prompt[:-1]], device=lm.device), cache, keep=1)  # logits unused
    return 1


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


@torch.inference_mode()
def greedy_decode(target, prompt: list[int], max_tokens: int, eos: frozenset[int]) -> Result:
    """The target alone, one token per forward: the reference speculative decoding must match."""
    start = time.perf_counter()
    cache = target.new_cache()
    stats = Stats(target_forwards=prefill(target, cache, prompt))
    last = torch.tensor([[prompt[-1]]], device=target.device)  # [1, 1]
    out, done = [], False
    while not done:
        last = target.forward(last, cache)[-1].argmax().view(1, 1)  # the target's next token
        new, done = stop([int(last)], len(out), max_tokens, eos)  # int(): the step's one sync
        out += new
        stats.observe(Round(drafted=0, accepted=0, emitted=len(new)))
    stats.wall_s = _elapsed(start, target.device)
    return Result(out, stats)


@torch.inference_mode()
def speculative_decode(target, draft, prompt: list[int], k: int, max_tokens: int,
                       eos: frozenset[int]) -> Result:
    """Draft proposes up to k tokens; the target scores them all in one forward; keep the
    leading run the target agrees with plus the target's own next token (correction or bonus).

    Invariants at the top of every round:
      tokens = prompt + out, and the target cache holds tokens[:-1] (all but the last), so one
      forward over [tokens[-1], proposal] yields the target's choice after every prefix;
      the draft has been told every round's outcome (update), so its state matches `tokens`.
    """
    start, draft_forwards = time.perf_counter(), draft.forwards
    cache = target.new_cache()
    stats = Stats(target_forwards=prefill(target, cache, prompt))
    draft.begin(prompt)
    tokens, out, rounds, done = list(prompt), [], [], False
    while not done:
        room = max_tokens - len(out)
        proposal = draft.propose(tokens, min(k, room - 1))  # [d], d <= k: never draft past the end
        d = proposal.shape[0]
        ids = torch.cat([torch.tensor([tokens[-1]], device=target.device), proposal])[None]  # [1, d+1]
        choice = target.forward(ids, cache).argmax(-1)  # [d+1]: target's token after each prefix
        agreed = (proposal == choice[:d]).int().cumprod(0).sum()  # leading matches = accepted
        n, *choice = torch.cat([agreed.view(1), choice]).tolist()  # the round's one host sync
        cache.crop(n - d)  # drop rejected positions: cache now holds tokens + proposal[:n]
        new, done = stop(choice[: n + 1], len(out), max_tokens, eos)  # accepted + correction/bonus
        tokens += new
        out += new
        draft.update(tokens, n)
        rounds.append(Round(drafted=d, accepted=n, emitted=len(new)))
        stats.observe(rounds[-1])
    stats.draft_forwards = draft.forwards - draft_forwards
    stats.wall_s = _elapsed(start, target.device)
    return Result(out, stats, rounds)
