"""Exactness checks: speculative == greedy for many prompts x k x drafts, and why not if not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import yaml

from .cards import draft_spec
from .drafts import Draft
from .errors import SpecdecError
from .pair import Pair
from .prompts import Prompt


@dataclass
class Check:
    id: str
    k: int
    draft: str
    prompt_tokens: int
    spec_tokens: list[int]
    greedy_tokens: list[int]
    first_divergence: dict | None

    @property
    def identical(self) -> bool:
        return self.spec_tokens == self.greedy_tokens

    def as_dict(self) -> dict:
        return {"id": self.id, "k": self.k, "draft": self.draft, "prompt_tokens": self.prompt_tokens,
                "spec_tokens": self.spec_tokens, "greedy_tokens": self.greedy_tokens,
                "identical": self.identical, "first_divergence": self.first_divergence}


def parse_draft_option(text: str):
    """`KIND[:key=value,...]`, e.g. `early-exit:layers=12`, `toy:agree=0.5,seed=3`."""
    kind, _, rest = text.partition(":")
    raw = {"kind": kind.strip()}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise SpecdecError(f"--draft {text!r}: expected key=value after ':', got {item!r}")
        raw[key.strip()] = yaml.safe_load(value) if value.strip() else value
    return draft_spec(f"--draft {text!r}", raw, field="draft")


def first_divergence(pair: Pair, prompt_ids: list[int], greedy: list[int], spec: list[int]) -> dict | None:
    """Where the two outputs part, both tokens there, and how close the target's call was."""
    if greedy == spec:
        return None
    i = next((j for j, (g, s) in enumerate(zip(greedy, spec)) if g != s), min(len(greedy), len(spec)))
    g, s = (greedy[i] if i < len(greedy) else None), (spec[i] if i < len(spec) else None)
    piece = pair.tokenizer.piece
    return {"index": i, "greedy_token": g, "spec_token": s,
            "greedy_text": piece(g) if g is not None else None, "spec_text": piece(s) if s is not None else None,
            "margin": pair.top2_margin(prompt_ids + greedy[:i])}


def verify(pair: Pair, prompts: list[Prompt], ks: list[int], drafts: list[Draft], max_tokens: int) -> Iterator[Check]:
    """Greedy once per prompt, then every draft at every k against it."""
    for prompt in prompts:
        ids = pair.encode(prompt.text, max_tokens)
        greedy = pair.greedy(ids, max_tokens).tokens
        for draft in drafts:
            for k in ks:
                spec = pair.spec(ids, k, max_tokens, draft).tokens
                yield Check(prompt.id, k, draft.name, len(ids), spec, greedy,
                            first_divergence(pair, ids, greedy, spec))
