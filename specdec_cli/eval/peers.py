"""transformers' own `generate` as bench's peer (`bench --vs-transformers`): greedy, and assisted
generation with the card's draft at a fixed k, on the pair's loaded target, timed and counted
the way bench times and counts ours.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from specdec_cli.cards.card import Card
from specdec_cli.engine.costs import _sync
from specdec_cli.drafts import Draft
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import get as draft_kind
from specdec_cli.engine.kernels import WeightMajor
from specdec_cli.engine.models import HFLM
from specdec_cli.pair.loading import Pair
from specdec_cli.loop.schedule import Scheduled


@dataclass
class Peer:
    """The card's draft as transformers' assisted generation runs it (fixed k), beside ours (the card's schedule)."""

    draft: Draft  # ours: the card's draft under the card's schedule (transformers': fixed k)
    k: int
    label: str
    kwargs: dict  # for generate()
    assistant: object  # the model whose generation_config carries the fixed-k settings (or None)


def check_peer(card: Card) -> None:
    """Whether transformers can run this card's pair (checked before loading anything): the
    draft's kind says whether transformers has it (drafts/*_kind.py)."""
    if card.target == "toy":
        raise SpecdecError(f"--vs-transformers: needs a transformers target; card '{card.name}' has target 'toy'")
    draft_kind(card.draft.kind).check_peer(card.draft, card)


def transformers_peer(pair: Pair, k: int) -> Peer:
    """How transformers runs the card's draft. Fixed k: `num_assistant_tokens`, schedule
    `constant` and confidence threshold 0 go on the assistant's generation config, because
    generate() ignores them as arguments (transformers #40739)."""
    check_peer(pair.card)
    spec, card = pair.card.draft, pair.card
    if not isinstance(pair.target, HFLM):
        raise SpecdecError(f"--vs-transformers: needs a transformers target; card '{card.name}' has target '{card.target}'")
    ours = pair.draft  # with the card's schedule: what a specdec user runs
    inner = ours.draft if isinstance(ours, Scheduled) else ours
    kwargs, assistant = draft_kind(spec.kind).peer(spec, pair, inner, k)
    return Peer(ours, k, spec.label(), kwargs, assistant)


@contextmanager
def _fixed_k(model, k: int):
    if model is None:
        yield
        return
    config = model.generation_config
    saved = {n: getattr(config, n, None) for n in
             ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = k, "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@torch.inference_mode()
def hf_generate(pair: Pair, ids: list[int], max_tokens: int, peer: Peer | None = None) -> tuple[list[int], float, int]:
    """transformers' generate: greedy, or assisted with the peer's draft. Returns the new
    tokens, the wall time and the target's full-depth forwards (verify steps + prefill)."""
    model = pair.target.model
    base = getattr(model, model.base_model_prefix, model)
    full = getattr(base.config, "num_hidden_layers", None)
    calls = [0]

    def count(*_):  # early exit runs the same module at reduced depth: count full-depth calls
        calls[0] += getattr(base.config, "num_hidden_layers", None) == full

    x = torch.tensor([ids], device=pair.device)
    pad = model.generation_config.pad_token_id
    kwargs = dict(attention_mask=torch.ones_like(x), max_new_tokens=max_tokens, do_sample=False, num_beams=1,
                  pad_token_id=pad if pad is not None else min(pair.eos, default=0))
    handle = model.register_forward_hook(count)
    switch = pair.target.forms or WeightMajor()
    try:  # transformers as it comes: F.linear at every width (the prepacked weights stay where they are the only copy)
        with switch.plain(), _fixed_k(peer.assistant if peer else None, peer.k if peer else 0):
            _sync(pair.device)
            start = time.perf_counter()
            out = model.generate(x, **kwargs, **(peer.kwargs if peer else {}))
            _sync(pair.device)
            wall = time.perf_counter() - start
    finally:
        handle.remove()
    return out[0, len(ids):].tolist(), wall, calls[0]
