"""A Pair: target + draft loaded once and kept resident, serving requests one after another.

Per-request state (KV caches, draft state) is created at the start of each request, so running
requests interleaved gives the same outputs as running each alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .cards import Card, DraftSpec
from .decoding import Result, greedy_decode, prefill, speculative_decode
from .drafts import AdaptiveK, Draft, ModelDraft, OracleDraft, PromptLookupDraft, SyntheticDraft
from .errors import SpecdecError
from .metrics import speedup
from .models import HFLM, ModelRef, check_vocab, early_exit, load, parse_ref, resolve_device, resolve_dtype
from .sampling import Sampling, sample_decode, speculative_sample
from .toy import ToyLM


@dataclass
class Pair:
    card: Card
    target: object  # a model with the models.py interface
    tokenizer: object
    draft: Draft
    eos: frozenset[int]
    chat: bool  # apply the tokenizer's chat template to prompts
    device: torch.device
    dtype: torch.dtype
    references: dict = field(default_factory=dict)  # prompt ids -> greedy tokens (synthetic drafts)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    # -- requests -------------------------------------------------------------------------
    def encode(self, prompt: str, max_tokens: int) -> list[int]:
        if not prompt.strip():
            raise SpecdecError("prompt is empty")
        ids = self.tokenizer.encode(prompt, chat=self.chat)
        if not ids:
            raise SpecdecError("prompt encodes to no tokens")
        limit = self.target.max_positions
        if limit and len(ids) >= limit:
            raise SpecdecError(f"prompt is {len(ids)} tokens, longer than the target's context window "
                               f"of {limit} tokens (leaving no room to generate)")
        if limit and len(ids) + max_tokens > limit:
            raise SpecdecError(
                f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the target's "
                f"context window of {limit} tokens (use --max-tokens {limit - len(ids)} or less)"
            )
        return ids

    def greedy(self, prompt_ids: list[int], max_tokens: int) -> Result:
        result = greedy_decode(self.target, prompt_ids, max_tokens, self.eos)
        self.references[tuple(prompt_ids)] = result.tokens
        return result

    def spec(self, prompt_ids: list[int], k: int, max_tokens: int, draft: Draft | None = None,
             generator: torch.Generator | None = None, prefix=None) -> Result:
        """Speculative greedy at temperature 0, else speculative sampling (a fresh generator
        seeded from the card unless one is given; `prefix`: see prefill)."""
        if self.sampling.greedy:
            return speculative_decode(self.target, draft or self.draft, prompt_ids, k, max_tokens, self.eos)
        return speculative_sample(self.target, draft or self.draft, prompt_ids, k, max_tokens, self.eos,
                                  self.sampling, generator or self.generator(), prefix)

    # -- sampling (temperature > 0) -------------------------------------------------------
    @property
    def sampling(self) -> Sampling:
        return Sampling(self.card.temperature, self.card.top_k, self.card.top_p)

    def generator(self) -> torch.Generator:
        """A generator on the target's device seeded from the card: each request starts afresh,
        so a request's output does not depend on what ran before it."""
        return torch.Generator(self.device).manual_seed(self.card.seed)

    def sample(self, prompt_ids: list[int], max_tokens: int, generator: torch.Generator | None = None,
               prefix=None) -> Result:
        """Plain sampling from the target alone: the baseline speculative sampling must match."""
        return sample_decode(self.target, prompt_ids, max_tokens, self.eos, self.sampling,
                             generator or self.generator(), prefix)

    @torch.inference_mode()
    def prefill(self, prompt_ids: list[int]):
        """The target's cache holding prompt_ids[:-1]: many sampling draws of one prompt each start
        from a copy of it instead of prefilling again (the prompt is most of a short draw's cost)."""
        cache = self.target.new_cache()
        prefill(self.target, cache, prompt_ids)
        return cache

    def reference(self, prompt_ids: list[int], max_tokens: int) -> list[int]:
        """The target's greedy tokens for a prompt (computed once, then remembered)."""
        ref = self.references.get(tuple(prompt_ids))
        if ref is None or (len(ref) < max_tokens and (not ref or ref[-1] not in self.eos)):
            ref = self.greedy(prompt_ids, max_tokens).tokens
        return ref

    def top2_margin(self, context: list[int]) -> float:
        """The target's top-1 minus top-2 logit for the next token after `context` (full forward)."""
        with torch.inference_mode():
            logits = self.target.forward(torch.tensor([context], device=self.device), self.target.new_cache(), keep=1)[-1]
        top = logits.float().topk(2).values
        return float(top[0] - top[1])


def eos_ids(target, tokenizer) -> frozenset[int]:
    """The ids that end generation: the model's generation config, else the tokenizer's EOS."""
    gen = getattr(getattr(target, "model", None), "generation_config", None)
    ids = getattr(gen, "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    if ids is None:
        return frozenset()
    return frozenset([ids] if isinstance(ids, int) else ids)


def build_draft(spec: DraftSpec, pair: Pair) -> Draft:
    """The one factory: a DraftSpec and a loaded target -> a draft."""
    draft = _build(spec, pair)
    return AdaptiveK(draft) if spec.adaptive else draft


def _build(spec: DraftSpec, pair: Pair) -> Draft:
    target, card = pair.target, pair.card
    label = replace(spec, adaptive=False).label()
    if spec.kind == "prompt-lookup":
        return PromptLookupDraft(target.device, spec.max_ngram, spec.min_ngram, name=label)
    if spec.kind == "toy":
        if not isinstance(target, ToyLM):
            raise SpecdecError(f"{card.path}: draft.kind: 'toy' needs the toy target, got target '{card.target}'")
        return OracleDraft(target.greedy_next, target.vocab_size, spec.agree, spec.seed, target.device, label)
    if spec.kind == "synthetic":
        return SyntheticDraft(pair.references, target.vocab_size, spec.agree, spec.seed, target.device, label)
    if not isinstance(target, HFLM):
        raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs a transformers target, got '{card.target}'")
    if spec.kind == "early-exit":
        try:
            view = early_exit(target, spec.layers)
        except SpecdecError as e:
            raise SpecdecError(f"{card.path}: draft.layers: {e}") from None
        return ModelDraft(view, target.vocab_size, name=label)
    ref = model_ref(card, "draft.model", spec.model)
    model, tok = load(ref, pair.device, pair.dtype, card.trust_remote_code, None)
    if not isinstance(model, HFLM):
        raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
    try:
        shared = check_vocab(pair.tokenizer, tok, card.target, spec.model)
    except SpecdecError as e:
        raise SpecdecError(f"{card.path}: draft.model: {e}") from None
    return ModelDraft(model, shared, name=label)


def check_prompts(pair: Pair, prompts: list, max_tokens: int) -> None:
    """Encode every prompt of a batch before decoding any: a bad one (empty, too long for the
    context window) fails the batch up front, by its id, not after the others ran."""
    for prompt in prompts:
        try:
            pair.encode(prompt.text, max_tokens)
        except SpecdecError as e:
            raise SpecdecError(f"prompt '{prompt.id}': {e}") from None


def model_ref(card: Card, field: str, ref: str) -> ModelRef:
    """Resolve a card's model reference; an error names the card, the field and the value."""
    try:
        return parse_ref(ref, card.folder)
    except SpecdecError as e:
        raise SpecdecError(f"{card.path}: {field}: {e}") from None


def check_before_load(card: Card, drafts: tuple[DraftSpec, ...] = ()) -> ModelRef:
    """Everything about a card and its drafts that can be checked without loading a model
    (loads take seconds to minutes): model references resolve, files exist and are what they
    claim, each draft kind fits the target. Returns the target's reference."""
    target = model_ref(card, "target", card.target)
    for spec in (card.draft, *drafts):
        if spec.kind == "toy" and target.kind != "toy":
            raise SpecdecError(f"{card.path}: draft.kind: 'toy' needs the toy target, got target '{card.target}'")
        if spec.kind in ("model", "early-exit") and target.kind == "toy":
            raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs a transformers target, got '{card.target}'")
        if spec.kind == "model" and model_ref(card, "draft.model", spec.model).kind == "toy":
            raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
    return target


def load_pair(card: Card) -> Pair:
    target_ref = check_before_load(card)
    device = resolve_device(card.device)
    dtype = resolve_dtype(card.dtype, device)
    target, tokenizer = load(target_ref, device, dtype, card.trust_remote_code, card.revision)
    if card.chat_template is True and not tokenizer.has_chat_template():
        raise SpecdecError(f"{card.path}: decoding.chat_template: true, but the target's tokenizer has no chat template")
    chat = tokenizer.has_chat_template() if card.chat_template == "auto" else card.chat_template
    pair = Pair(card, target, tokenizer, None, eos_ids(target, tokenizer), chat, target.device, dtype)
    pair.draft = build_draft(card.draft, pair)
    return pair


# ---------------------------------------------------------------------------- whole requests
@dataclass
class Generation:
    prompt: str
    prompt_ids: list[int]
    k: int
    greedy: Result | None  # the target alone: greedy, or plain sampling when `sampled`
    spec: Result | None
    sampled: bool = False  # temperature > 0: both runs are exact in distribution, not per token

    @property
    def identical(self) -> bool | None:
        return self.greedy.tokens == self.spec.tokens if self.greedy and self.spec else None

    @property
    def diverged(self) -> bool:
        """Greedy outputs that differ: a bug. Two samples that differ are not."""
        return self.identical is False and not self.sampled

    @property
    def speedup(self) -> float | None:
        return speedup(self.greedy.stats, self.spec.stats) if self.greedy and self.spec else None


def generate(pair: Pair, prompt: str, mode: str, k: int, max_tokens: int) -> Generation:
    """Run one prompt greedy and/or speculative (greedy first: synthetic drafts need it).
    At temperature > 0 the target-alone run is plain sampling; both runs use the card's seed."""
    ids = pair.encode(prompt, max_tokens)
    sampled = not pair.sampling.greedy
    alone = pair.sample if sampled else pair.greedy
    greedy = alone(ids, max_tokens) if mode in ("greedy", "both") else None
    if mode != "greedy" and pair.draft.name.startswith("synthetic"):
        pair.reference(ids, max_tokens)
    spec = pair.spec(ids, k, max_tokens) if mode in ("spec", "both") else None
    return Generation(prompt, ids, k, greedy, spec, sampled)
