"""A Pair: target + draft loaded once from a card and kept resident, serving requests one after
another (whole requests, greedy beside speculative, one at a time or batched: generation.py).

Per-request state (KV caches, draft state) is created at the start of each request, so running
requests interleaved gives the same outputs as running each alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from specdec_cli.cards.card import Card, DraftSpec
from specdec_cli.loop.decoding import Result, greedy_decode, prefill, speculative_decode
from specdec_cli.engine import costs as cost_model
from specdec_cli.engine import dtypes
from specdec_cli.pair.targets import chooses_dtype, forward_policy, load_chosen, source_name  # noqa: F401  (re-exported)
from specdec_cli.engine import kernels
from specdec_cli.drafts import Draft
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import get as draft_kind
from specdec_cli.engine.models import HFLM, ModelRef, load, model_ref
from specdec_cli.engine.placement import resolve_device, resolve_dtype
from specdec_cli.engine.kvcache import pinned_trees
from specdec_cli.loop.sampling import Sampling, sample_decode, speculative_sample
from specdec_cli.loop.schedule import Cost, Heuristic, Scheduled
from specdec_cli.engine.toy_model import ToyLM


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
    greedy_at: dict = field(default_factory=dict)  # (prompt ids, width, max_tokens) -> greedy tokens
    costs: cost_model.CostProfile | None = None  # measured (or read from the cache) on first use
    remeasure: bool = False  # ignore a cached cost profile once
    target_name: str | None = None  # the file or hub id the target was loaded from (the cost profile's key)
    policy: kernels.ForwardPolicy = field(default_factory=lambda: kernels.ForwardPolicy("free", "off"))
    on_convert: object = None  # load_pair's: shown around a model draft's first GGUF load too
    early: dict = field(default_factory=dict)  # load_model's arguments -> a model load_pair loaded before the target
    dtype_choice: dtypes.Choice | None = None  # what dtype: auto measured (engine/dtypes.py); None: not measured

    @property
    def shapes(self) -> str:
        return self.policy.shapes

    def width(self, k: int) -> int | None:
        """The forward width W = k + 1 every decode-phase forward takes under pinned shapes
        (None: free shapes). Greedy and speculative runs compared with each other share it."""
        return k + 1 if self.policy.shapes == "pinned" else None

    @property
    def trees(self) -> bool:
        """Whether speculative runs propose token trees: the card asks, the draft can, and the
        shapes are free or the target's pinned forwards keep trees bitwise (kvcache.pinned_trees:
        sdpa on a CPU; elsewhere the loop keeps chains: docs/trees.md)."""
        return (self.card.tree and self.draft.trees and isinstance(self.target, HFLM)
                and (self.policy.shapes != "pinned" or pinned_trees(self.target)))

    @property
    def tree_note(self) -> str:
        """What the status line says of trees ('' when the card does not ask for them)."""
        if not self.card.tree:
            return ""
        if not self.draft.trees:
            return f" · tree: the {self.draft.name} draft proposes chains"
        if not isinstance(self.target, HFLM):
            return " · tree: chains (trees need a transformers target)"
        return " · tree" if self.trees else " · tree: chains (pinned shapes keep trees bitwise only with sdpa on a CPU, not compiled)"

    def greedy_width(self, k: int) -> int:
        """The width a plain step runs at: W under pinned shapes, else the cheapest the profile
        measured (padded; 1 until a profile says otherwise)."""
        return self.width(k) or self.policy.width(1)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def prepare(self, k: int, draft=None) -> None:
        """Before timing: get the cost profile now if the run needs it: a draft under the cost
        schedule reads it, and a CPU target's verify matmuls take the form it measured faster
        for each width up to k + 1 (kernels.py)."""
        draft = draft or self.draft
        if any(isinstance(d, Scheduled) and isinstance(d.schedule, Cost) for d in draft_chain(draft)):
            self.cost_profile((draft,), k + 1)
        elif isinstance(self.target, HFLM) and self.target.forms is not None:
            self.cost_profile((), k + 1)

    def load_model(self, ref: ModelRef, dtype: torch.dtype, revision: str | None = None, quantize: str = "none"):
        """(model, tokenizer) of another model beside the target (a model draft's): on the
        target's device, under the card's trust_remote_code, its layers quantized as asked; the
        one load_pair loaded before the target where it did (Kind.loads_first)."""
        early = self.early.pop((ref, dtype, revision, quantize), None)
        return early or load_beside(self.card, ref, self.device, dtype, revision, quantize, self.on_convert)

    def cost_profile(self, drafts: tuple = (), widths: int = cost_model.MIN_WIDTHS) -> cost_model.CostProfile:
        """The target's verify cost curve (n = 1..widths) and each draft's cost per proposed
        token on this machine: cached per model/device/dtype/threads/torch, measured once."""
        paying = {d.name: d for d in map(innermost, drafts) if d.runs_model}
        have = self.costs
        if have is None or have.widths < widths or any(name not in have.draft_s for name in paying):
            name = self.target_name or source_name(model_ref(self.card, "target", self.card.target))
            self.costs = cost_model.profile(self.target, name, self.card.revision, paying, widths, self.remeasure)
            self.remeasure = False
        return self.costs

    # -- requests -------------------------------------------------------------------------
    def encode(self, prompt: str, max_tokens: int, drafts: tuple = ()) -> list[int]:
        """The prompt's ids, checked to fit the context window of the target and of every model
        draft that will run it (the card's draft and `drafts`) with max_tokens to generate."""
        if not prompt.strip():
            raise SpecdecError("prompt is empty")
        ids = self.tokenizer.encode(prompt, chat=self.chat)
        if not ids:
            raise SpecdecError("prompt encodes to no tokens")
        check_window(len(ids), max_tokens, "target", self.target.max_positions)
        for draft in (d for d in (self.draft, *drafts) if d is not None):
            inner = draft_chain(draft)[-1]  # the model draft inside any schedule wrapper
            try:
                check_window(len(ids), max_tokens, "draft", context_window(inner))
            except SpecdecError as e:
                raise SpecdecError(f"draft {inner.name}: {e}") from None
        return ids

    def greedy(self, prompt_ids: list[int], max_tokens: int, k: int | None = None, trace: bool = False,
               free: bool = False) -> Result:
        """The target's own greedy decode: the reference for a speculative run at `k` (pinned
        shapes: at the same width k + 1; the card's k when not given). `free`: in free shapes
        whatever the policy (what a user would otherwise run: the honest speed baseline; under
        decoding.compile, compiled at width 1)."""
        width = None if free else self.width(k or self.card.k)
        result = greedy_decode(self.target, prompt_ids, max_tokens, self.eos, width, trace)
        if not free:
            self.references[tuple(prompt_ids)] = result.tokens
            self.greedy_at[tuple(prompt_ids), width, max_tokens] = result.tokens
        return result

    def reference_at(self, prompt_ids: list[int], max_tokens: int, k: int) -> list[int]:
        """Greedy tokens at the width a speculative run at `k` takes (computed once)."""
        key = (tuple(prompt_ids), self.width(k), max_tokens)
        if key not in self.greedy_at:
            self.greedy(prompt_ids, max_tokens, k)
        return self.greedy_at[key]

    def spec(self, prompt_ids: list[int], k: int, max_tokens: int, draft: Draft | None = None,
             generator: torch.Generator | None = None, prefix=None, trace: bool = False,
             trees: bool | None = None) -> Result:
        """Speculative greedy at temperature 0, else speculative sampling (a fresh generator
        seeded from the card unless one is given; `prefix`: see prefill; `trees`: token trees
        or chains, None: as the card says)."""
        trees = self.card.tree if trees is None else trees
        self.prepare(k, draft)  # once: the cost profile (a no-op when it is there)
        if self.sampling.greedy:
            return speculative_decode(self.target, draft or self.draft, prompt_ids, k, max_tokens, self.eos,
                                      self.width(k), trace, trees)
        return speculative_sample(self.target, draft or self.draft, prompt_ids, k, max_tokens, self.eos,
                                  self.sampling, generator or self.generator(), prefix, self.width(k), trees)

    # -- sampling (temperature > 0) -------------------------------------------------------
    @property
    def sampling(self) -> Sampling:
        return Sampling(self.card.temperature, self.card.top_k, self.card.top_p)

    def generator(self) -> torch.Generator:
        """A generator on the target's device seeded from the card: each request starts afresh,
        so a request's output does not depend on what ran before it."""
        return torch.Generator(self.device).manual_seed(self.card.seed)

    def sample(self, prompt_ids: list[int], max_tokens: int, generator: torch.Generator | None = None,
               prefix=None, k: int | None = None) -> Result:
        """Plain sampling from the target alone: the baseline speculative sampling must match."""
        return sample_decode(self.target, prompt_ids, max_tokens, self.eos, self.sampling,
                             generator or self.generator(), prefix, self.width(k or self.card.k))

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


def check_window(prompt_tokens: int, max_tokens: int, whose: str, limit: int | None) -> None:
    """A model sees prompt + max_tokens - 1 positions at most: refuse, before generating, a
    request its context window (`limit`; None = unbounded) cannot hold."""
    if limit and prompt_tokens >= limit:
        raise SpecdecError(f"prompt is {prompt_tokens} tokens, longer than the {whose}'s context window "
                           f"of {limit} tokens (leaving no room to generate)")
    if limit and prompt_tokens + max_tokens > limit:
        raise SpecdecError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds the {whose}'s "
            f"context window of {limit} tokens (use --max-tokens {limit - prompt_tokens} or less)"
        )


def draft_chain(draft) -> list:
    """A draft and the drafts it wraps (adaptive k, a schedule, a simulated cost: each wrapper
    holds the draft it wraps as `.draft`), outermost first."""
    out = [draft]
    while hasattr(out[-1], "draft"):
        out.append(out[-1].draft)
    return out


def context_window(draft) -> int | None:
    """A model draft's context window (None: the draft runs no model of its own that has one,
    e.g. prompt lookup; an early-exit view shares the target's)."""
    return innermost(draft).window


def needs_reference(draft) -> bool:
    """Does the draft read the target's greedy reference (the synthetic draft)? Then a greedy
    run of the same prompt must come first."""
    return any(d.needs_reference for d in draft_chain(draft))


def eos_ids(target, tokenizer) -> frozenset[int]:
    """The ids that end generation: the model's generation config, else the tokenizer's EOS."""
    gen = getattr(getattr(target, "model", None), "generation_config", None)
    ids = getattr(gen, "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    if ids is None:
        return frozenset()
    return frozenset([ids] if isinstance(ids, int) else ids)


def innermost(draft):
    return draft_chain(draft)[-1]


def build_draft(spec: DraftSpec, pair: Pair) -> Draft:
    """The one factory: a DraftSpec and a loaded target -> a draft, wrapped in its schedule."""
    draft = _build(spec, pair)
    if spec.schedule == "fixed":
        return draft
    if spec.schedule == "heuristic":
        return Scheduled(draft, Heuristic())
    prior = draft_kind(spec.kind).prior
    explore = not draft.free  # a skipped model draft learns only from probes
    return Scheduled(draft, Cost(lambda widths: pair.cost_profile((draft,), widths), draft.name, prior, explore,
                                 pinned=pair.shapes == "pinned"))


def _build(spec: DraftSpec, pair: Pair) -> Draft:
    """The draft of the spec's kind (drafts/*_kind.py), on a target of the kind it needs."""
    kind, target, card = draft_kind(spec.kind), pair.target, pair.card
    if kind.target == "toy" and not isinstance(target, ToyLM):
        raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs the toy target, got target '{card.target}'")
    if kind.target == "transformers" and not isinstance(target, HFLM):
        raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs a transformers target, got '{card.target}'")
    return kind.build(spec, pair, replace(spec, schedule="fixed").label())


def check_prompts(pair: Pair, prompts: list, max_tokens: int, drafts: tuple = ()) -> None:
    """Encode every prompt of a batch before decoding any: a bad one (empty, too long for the
    context window of the target or a draft) fails the batch up front, by its id, not after
    the others ran."""
    for prompt in prompts:
        try:
            pair.encode(prompt.text, max_tokens, drafts)
        except SpecdecError as e:
            raise SpecdecError(f"prompt '{prompt.id}': {e}") from None


def check_before_load(card: Card, drafts: tuple[DraftSpec, ...] = ()) -> ModelRef:
    """Everything about a card and its drafts that can be checked without loading a model
    (loads take seconds to minutes): model references resolve, files exist and are what they
    claim, each draft kind fits the target. Returns the target's reference."""
    from specdec_cli.cards.fetch import require_fetched

    require_fetched(card, drafts)  # a model not fetched yet: the command that fetches it, and its size
    target = model_ref(card, "target", card.target)
    for spec in (card.draft, *drafts):
        kind = draft_kind(spec.kind)
        if kind.target == "toy" and target.kind != "toy":
            raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs the toy target, got target '{card.target}'")
        if kind.target == "transformers" and target.kind == "toy":
            raise SpecdecError(f"{card.path}: draft.kind: '{spec.kind}' needs a transformers target, got '{card.target}'")
        kind.before_load(spec, card, target)
    return target


def load_beside(card: Card, ref: ModelRef, device: torch.device, dtype: torch.dtype, revision: str | None,
                quantize: str, on_convert=None):
    """(model, tokenizer) of a model draft (Pair.load_model), its layers quantized as asked."""
    model, tokenizer = load(ref, device, dtype, card.trust_remote_code, revision, on_convert=on_convert)
    if quantize != "none" and isinstance(model, HFLM):
        try:
            model.quantize(quantize, head_weight=False, kernel="fbgemm")  # only its logits read; one-token steps
        except SpecdecError as e:
            raise SpecdecError(f"{card.path}: draft.quantize: {e}") from None
    return model, tokenizer


def load_pair(card: Card, on_compile=None, on_convert=None, on_measure=None) -> Pair:
    """The card's target, tokenizer and draft, loaded; `on_compile`: a context around each compile
    of a decode forward shape (decoding.compile; HFLM.configure), `on_convert`: one around the
    first load of a GGUF file on this machine (models.load), `on_measure`: one around `dtype:
    auto`'s first measurement for this model on this CPU (targets.measure_dtype), for the caller
    to show."""
    target_ref = check_before_load(card)
    device = resolve_device(card.device)
    dtype = resolve_dtype(card.dtype, device)
    early, first = {}, draft_kind(card.draft.kind).loads_first(card.draft, card, dtype)
    if first is not None:  # a quantized draft, before the target: its float weights and the target's never both held
        ref, draft_dtype, revision, layers = first
        early[first] = load_beside(card, ref, device, draft_dtype, revision, layers, on_convert)
    (target, tokenizer, policy), dtype, choice = load_chosen(card, target_ref, device, dtype, on_compile, on_convert,
                                                             on_measure)
    if card.chat_template is True and not tokenizer.has_chat_template():
        raise SpecdecError(f"{card.path}: decoding.chat_template: true, but the target's tokenizer has no chat template")
    chat = tokenizer.has_chat_template() if card.chat_template == "auto" else card.chat_template
    pair = Pair(card, target, tokenizer, None, eos_ids(target, tokenizer), chat, target.device, dtype,
                target_name=source_name(target_ref), policy=policy, on_convert=on_convert, early=early,
                dtype_choice=choice)
    pair.draft = build_draft(card.draft, pair)
    return pair
