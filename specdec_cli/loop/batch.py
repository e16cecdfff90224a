"""Batched decoding (--batch N): many requests through the one loop (decoding.decode_rows) at
once, the target verifying every row in ONE forward, each row keeping its own accepted count.

What is batch-specific lives here: under the cost schedule the round's d is chosen for the
whole batch (`Lengths`: a [B, d+1] verify costs what it costs whichever row asked for d, so d
must pay for the batch); the cost of a [rows, n] verify and its matmul form are measured here
(`rectangle_seconds`); and a pair's prompts run through the loop together (`run`). Whole
batched requests, timed, are in generation.py (`generate_many`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Iterator

import torch

from specdec_cli.loop.decoding import GREEDY, NoDraft, Result, decode_rows
from specdec_cli.engine.kvcache import cache_for, capacity_for
from specdec_cli.loop.schedule import Cost, Probes, Scheduled, batch_length

MAX_BATCH = 256


# ---------------------------------------------------------------------------- one d per round
class Lengths:
    """The cost schedule's choice for a batch: each round, d = schedule.batch_length over the
    rows' expected acceptance (each row's own Cost table: it goes on learning from its own
    rounds), with the [rows, d+1] verify cost measured at this batch size (costs.CostProfile.
    batch). Every row's draft is then told d (Scheduled.decide; a row may still propose fewer: a lookup
    that matched nothing). A model draft is probed as at batch 1 (schedule.Probes): the
    length that would pay if every row's draft were right; a probe paid for itself when it
    gave more tokens than plain batched steps would for its price."""

    def __init__(self, profile, batch: int, draft_label: str, explore: bool, pinned: bool = False):
        self.profile, self.batch, self.label, self.explore = profile, batch, draft_label, explore
        self.pinned = pinned  # pinned shapes: every round is [batch, k+1] wide whatever d
        self.probes = Probes()
        self.probe = None  # (rows, price in batch steps) of the last round, if it was a probe

    def decide(self, rows: list, caps: list[int]) -> None:
        if self.probe is not None:  # the probe's outcome: its rows' last rounds
            probed_rows, price = self.probe
            tokens = sum(r.rounds[-1].accepted + 1 for r in probed_rows)
            self.probes.outcome(tokens >= len(probed_rows) * price)
            self.probe = None
        if any(not r.rounds for r in rows):  # a request just entered: it gets its opening probe
            self.probes = Probes()
        curve, step = self.profile.batch(len(rows), self.batch)
        widest = max(caps, default=0) + 1
        v, c = (lambda n: curve[min(widest if self.pinned else n, len(curve)) - 1]), self.profile.c(self.label) / step
        outlooks = [r.draft.outlook(r.tokens, cap) for r, cap in zip(rows, caps)]
        d = batch_length(outlooks, c, v)
        if self.explore and self.probes.due(d):
            d = batch_length([[1.0] * len(a) for a in outlooks], c, v)
            drafted = sum(min(d, len(a)) for a in outlooks)
            self.probe = (list(rows), drafted * c + v(d + 1)) if d else None  # in batch steps
        for r in rows:
            r.draft.decide(d)


FORMS = ("linear", "weight_major", "packed")  # F.linear, W @ xᵀ, oneDNN's prepacked weights (kernels.py)


@torch.inference_mode()
def rectangle_seconds(target, rows: int, widths: int, context: list[int],
                      repeats: int = 3) -> tuple[list[float], list[int], list[int]]:
    """Seconds of one [rows, n] verify (n = 1..widths) after `context` in every row, through
    KVCache as the loop runs it: the median of `repeats` tries after a warm-up (as
    costs.forward_seconds). With the target's switch (kernels.py) each rectangle is timed in
    every form it can take, as one of two worlds (one copy of the weights: costs.choose_forms):
    the plain weights, each speculative rectangle (n >= 2) in F.linear or W @ xᵀ, whichever is
    faster, the batched greedy step (n = 1) in F.linear; or, where oneDNN's prepacked weights beat
    that across the rectangles (geometric mean of the ratios under 0.97), every one prepacked
    (batch_costs then frees the plain weights). Under matmuls all every n >= 2 is W @ xᵀ, and once
    the weights are prepacked every n is, untimed. Returns (seconds per n, the n that take W @ xᵀ,
    the n that take the prepacked weights: every n or none)."""
    from specdec_cli.engine.costs import _sync, packed_world, times_packed

    switch = getattr(target, "forms", None)
    every = range(1, widths + 1)
    if switch is None or switch.mode == "off":
        forms = {n: ("linear",) for n in every}
    elif switch.whole:
        forms = {n: ("packed",) for n in every}
    elif switch.mode == "all":
        forms = {n: ("linear",) if n == 1 else ("weight_major",) for n in every}
    else:
        packs = ("packed",) if times_packed(target) else ()
        forms = {n: ("linear", *packs) if n == 1 else FORMS[:2] + packs for n in every}
    cache = cache_for(target, rows=rows, capacity=capacity_for(target, len(context) + widths))  # compiled: fixed
    cache.warm(every)  # decoding.compile: each [rows, n] compiles before it is timed
    for _ in range(rows):
        cache.add(context)
    times = {(n, form): [] for n in forms for form in forms[n]}
    for _ in range(repeats + 1):
        for n, form in times:
            with switch.trying(rows, n, form) if switch is not None else contextlib.nullcontext():
                ids = torch.tensor([context[-n:]] * rows, device=target.device)
                _sync(target.device)
                start = time.perf_counter()
                cache.forward(ids).argmax(-1).tolist()
                times[n, form].append(time.perf_counter() - start)
                cache.keep([0] * rows)
    seconds = {key: statistics.median(t[1:]) for key, t in times.items()}
    plain = {n: min((f for f in forms[n] if f != "packed"), key=lambda f: seconds[n, f], default="packed") for n in every}
    if all(f == "packed" for f in plain.values()) or ("packed" in forms[1] and packed_world(seconds, plain)):
        return [seconds[n, "packed"] for n in every], [], list(every)
    if switch is not None:
        switch.unpack()  # copies made while timing, not chosen
    return [seconds[n, plain[n]] for n in every], [n for n in every if plain[n] == "weight_major"], []


def batch_costs(pair, drafts: tuple, k: int, batch: int):
    """The cost profile with a [batch, n] verify's cost measured (cached), and each rectangle's
    matmul form switched on: before any batched pass, greedy or speculative, so both take the
    same forms (pinned shapes compare them bitwise). None where rows share no forward (batch 1,
    a target that is not a transformers model)."""
    from specdec_cli.engine.costs import probe_ids, with_batch
    from specdec_cli.engine.models import HFLM

    if batch <= 1 or not isinstance(pair.target, HFLM):
        return None
    profile = pair.cost_profile(drafts, k + 1)
    context = probe_ids(pair.target, profile.contexts[0])
    with_batch(profile, batch, lambda widths: rectangle_seconds(pair.target, batch, widths, context))
    switch = pair.target.forms
    if switch is not None:  # each full batch's rectangle takes the form measured fastest for it...
        if profile.batch_packed.get(str(batch)):  # ...or every forward the prepacked weights, and
            switch.pack_all()  # its partial batches too (rectangle_seconds: all or none)
        switch.use_rectangles({(batch, n) for n in profile.batch_weight_major.get(str(batch), [])})
    return profile


def lengths_for(pair, draft, k: int, batch: int) -> Lengths | None:
    """A batch-wide length choice when the draft is under the cost schedule and rows share a
    verify (an HF target at batch > 1); None otherwise (each row's schedule decides alone)."""
    if not isinstance(draft, Scheduled) or not isinstance(draft.schedule, Cost):
        return None
    profile = batch_costs(pair, (draft,), k, batch)
    if profile is None:
        return None
    return Lengths(profile, batch, draft.schedule.draft_label, draft.schedule.explore, draft.schedule.pinned)


def in_order(finished: Iterator[tuple[int, object]]) -> Iterator[tuple[int, object]]:
    """(index, item) in any order -> in index order, each as soon as all earlier ones are out."""
    held, following = {}, 0
    for index, item in finished:
        held[index] = item
        while following in held:
            yield following, held.pop(following)
            following += 1


# ---------------------------------------------------------------------------- with a pair
def run(pair, prompts: list[list[int]], k: int, max_tokens: int, batch: int, draft=None,
        width: int | None = None, trace: bool = False) -> Iterator[tuple[int, Result]]:
    """The pair's target over many prompts in input order: speculative with `draft` (plain
    decoding with draft None), greedy or sampled as the card says; `width`: pinned shapes' W."""
    from specdec_cli.loop.sampling import Sampler

    if pair.policy.switch is not None:  # the matmul forms first, whichever pass comes first
        batch_costs(pair, (), max(k, (width or 1) - 1, pair.card.k), batch)
    lengths = lengths_for(pair, draft, k, batch) if draft is not None else None
    draft = draft if draft is not None else NoDraft(pair.device)
    verifier = (lambda: GREEDY) if pair.sampling.greedy else (lambda: Sampler(pair.sampling, pair.generator()))
    return in_order(decode_rows(pair.target, draft, prompts, k, max_tokens, pair.eos, batch, verifier,
                                f"card {pair.card.name}", lengths, width, trace=trace, trees=pair.card.tree))
