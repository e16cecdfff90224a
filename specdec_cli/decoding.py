"""The decode loop: one loop for plain and speculative decoding, greedy and sampled.

A *verifier* is the only thing that differs between greedy and sampling (how proposals are
drawn and accepted); a *draft* that proposes nothing turns the loop into plain decoding (one
target step per token); a *schedule* (schedule.py) wraps a draft and picks each round's
proposal length. `greedy_decode`, `speculative_decode` (here) and `sample_decode`,
`speculative_sample` (sampling.py) are this loop with those parts filled in.
"""

from __future__ import annotations

import copy
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


def start_cache(target, prompt: list[int], prefix=None) -> tuple[object, int]:
    """A cache holding prompt[:-1], and the forwards that took: a copy of `prefix` (this prompt's
    prefill, made once by a caller drawing many samples of it) or a fresh prefill."""
    if prefix is not None:
        return copy.deepcopy(prefix), 0
    cache = target.new_cache()
    return cache, prefill(target, cache, prompt)


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


class NoDraft:
    """Proposes nothing: the loop becomes plain decoding, one target forward per token."""

    name, forwards, free = "none", 0, True

    def __init__(self, device):
        self.empty = torch.empty(0, dtype=torch.long, device=device)  # allocated once: no copy per round

    def begin(self, prompt: list[int]) -> None:
        pass

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self.empty

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        pass


class Greedy:
    """Greedy verification: accept the leading run of proposals equal to the target's argmax;
    the target's argmax right after that run is the correction (or, after a full accept, the
    bonus). Exact token for token: every emitted token is the target's own argmax."""

    def propose(self, draft, tokens: list[int], d: int) -> tuple[torch.Tensor, None]:
        return draft.propose(tokens, d), None

    def verify(self, logits: torch.Tensor, proposal: torch.Tensor, q) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [d+1, V], proposal [d] -> (accepted n: 0-dim, emitted [d+1]); rows 0..n of
        `emitted` are the round's tokens (proposal[:n] + the target's token). No host sync."""
        choice = logits.argmax(-1)  # [d+1]: the target's token after each prefix
        n = (proposal == choice[: proposal.shape[0]]).int().cumprod(0).sum()  # leading matches
        return n, choice  # choice[:n] == proposal[:n], choice[n] = correction/bonus


GREEDY = Greedy()


@torch.inference_mode()
def decode(target, draft, prompt: list[int], k: int, max_tokens: int, eos: frozenset[int],
           verifier=GREEDY, prefix=None) -> Result:
    """Each round the draft proposes d <= k tokens; the target scores them all in one forward;
    the verifier keeps a leading run of them plus one token of the target's (correction or
    bonus). With a draft that proposes nothing this is plain decoding.

    Invariants at the top of every round:
      tokens = prompt + out; the target cache holds tokens[:-1] (all but the last), and `last`
      is tokens[-1] on the target's device, so one forward over [last, proposal] yields the
      target's distribution after every prefix;
      the draft has been told every round's outcome (update), so its state matches `tokens`.
    The round's only host sync is one `.tolist()` (accepted count + tokens); tokens fed back
    to the target and the draft stay on the device. A draft that learns what verifies cost
    (the cost schedule) is told each round's verify time, width and context.
    """
    start, draft_forwards = time.perf_counter(), draft.forwards
    cache, forwards = start_cache(target, prompt, prefix)
    stats = Stats(target_forwards=forwards)
    draft.begin(prompt)
    last = torch.tensor([prompt[-1]], device=target.device)  # [1]: once per request
    timed = None if getattr(target, "replayed", False) else getattr(draft, "observe_verify", None)
    tokens, out, rounds, done = list(prompt), [], [], False
    while not done:
        room = max_tokens - len(out)
        proposal, q = verifier.propose(draft, tokens, min(k, room - 1))  # [d]: never draft past the end
        d, clock = proposal.shape[0], time.perf_counter()
        logits = target.forward(torch.cat([last, proposal])[None], cache)  # [d+1, V]
        n, emitted = verifier.verify(logits, proposal, q)  # on the device
        n, *chosen = torch.cat([n.view(1), emitted]).tolist()  # the round's one host sync
        if timed:
            timed(d + 1, time.perf_counter() - clock, len(tokens))
        cache.crop(n - d)  # drop rejected positions: cache now holds tokens + proposal[:n]
        new, done = stop(chosen[: n + 1], len(out), max_tokens, eos)  # accepted + correction/bonus
        fresh = emitted[: len(new)]  # `new`, still on the device
        last = fresh[-1:]
        tokens += new
        out += new
        draft.update(tokens, n, fresh)
        rounds.append(Round(drafted=d, accepted=n, emitted=len(new)))
        stats.observe(rounds[-1])
    stats.draft_forwards = draft.forwards - draft_forwards
    stats.wall_s = _elapsed(start, target.device)
    return Result(out, stats, rounds)


def greedy_decode(target, prompt: list[int], max_tokens: int, eos: frozenset[int]) -> Result:
    """The target alone, one token per forward: the reference speculative decoding must match."""
    result = decode(target, NoDraft(target.device), prompt, 0, max_tokens, eos)
    return Result(result.tokens, result.stats)  # plain decoding has no rounds worth listing


def speculative_decode(target, draft, prompt: list[int], k: int, max_tokens: int,
                       eos: frozenset[int]) -> Result:
    """Greedy speculative decoding: output identical to greedy_decode, token for token."""
    return decode(target, draft, prompt, k, max_tokens, eos)
