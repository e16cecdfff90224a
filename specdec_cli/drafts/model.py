"""Draft kind `model`: a smaller causal LM sharing the target's tokenizer, with its own KV cache.

    draft: {kind: model, model: HuggingFaceTB/SmolLM2-135M-Instruct}
Fields: model (a model reference, required), revision (the draft's own hub revision), dtype
(auto = the target's) and quantize (int8: dynamically quantized nn.Linear layers, CPU only).
Serves on vLLM (draft_model), SGLang (STANDALONE) and llama.cpp (draft-simple).
"""

from __future__ import annotations

import torch

from ..checks import choice, text
from ..errors import SpecdecError
from ..models import DTYPES, HFLM, model_ref, quantize_int8, resolve_device
from ..rows import to_device
from ..tokenizers import check_vocab
from .base import Draft, Field, Kind

QUANTIZE = ("none", "int8")  # as loaded, or int8 nn.Linear layers (CPU)


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

    def __init__(self, lm, shared_vocab: int, name: str = "model"):
        self.lm, self.shared_vocab, self.name = lm, shared_vocab, name
        self.forwards = 0

    @property
    def window(self) -> int | None:
        return self.lm.max_positions  # an early-exit view's is the target's

    def begin(self, prompt: list[int]) -> None:
        self.cache, self.cached, self.base, self.k = self.lm.new_cache(), 0, 0, 0
        self.pending = to_device(prompt, self.lm.device)  # [S]: once per request, without a host sync

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._propose(tokens, k, None, None)[0]

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As propose, but each token is drawn from the draft's warped distribution q over the
        shared vocabulary; returns (tokens [d], q [d, shared_vocab])."""
        return self._propose(tokens, k, warp, generator)

    def _propose(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        from ..sampling import sample

        self.base, self.k = len(tokens), k
        if k == 0:
            return self.pending[:0], None
        ids = self.pending[None]  # [1, S] the uncached tail
        out, qs = [], []
        for _ in range(k):
            logits = self.lm.forward(ids, self.cache, keep=1)[-1, : self.shared_vocab]  # [V]
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

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        if self.k == 0:  # nothing proposed: the draft is simply further behind
            self.pending = torch.cat([self.pending, _on(new, tokens, self.base, self.lm.device)])
            return
        # Proposals 1..accepted are now part of `tokens`; the rest of the cache is stale.
        keep = min(self.cached, self.base + min(accepted, self.k - 1))
        self.cache.crop(keep - self.cached)  # crop(0) still trims sliding-window layers
        self.cached = keep
        fresh = _on(new, tokens, self.base, self.lm.device)  # tokens[base:]
        self.pending = fresh[keep - self.base:]  # tokens[keep:], keep >= base

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token (one 1-token forward after `context`)."""
        from ..costs import forward_seconds

        return forward_seconds([(self.lm, 1)], context)[0]


def _on(new: torch.Tensor | None, tokens: list[int], base: int, device) -> torch.Tensor:
    """tokens[base:] as a device tensor: the loop's `new` when given, else copied from the host."""
    if new is not None and new.shape[0] == len(tokens) - base:
        return new
    return to_device(tokens[base:], device)


class Model(Kind):
    name = "model"
    draft = ModelDraft
    target = "transformers"
    fields = (
        Field("model", text, required=True),  # a model reference (models.parse_ref)
        Field("revision", text),  # the draft's hub revision (the card's `revision` is the target's)
        Field("dtype", choice(("auto", *DTYPES)), "auto"),  # auto = the target's; the target verifies in its own
        Field("quantize", choice(QUANTIZE), "none"),  # int8 = dynamically quantized nn.Linear layers (CPU only)
    )
    engines = ("vllm", "sglang", "llama.cpp")

    def check(self, spec, where: str, field: str) -> None:
        if spec.quantize == "int8" and spec.dtype not in ("auto", "float32"):
            raise SpecdecError(f"{where}: {field}.dtype: must be auto or float32 with {field}.quantize: int8 "
                               f"(int8 layers are quantized from float32), got {spec.dtype!r}")

    def detail(self, spec) -> str:
        model = f"{spec.model}@{spec.revision}" if spec.revision else spec.model
        # a cheapened draft is another draft: its own name, its own measured c
        return model + "".join(f", {x}" for x in (spec.dtype, spec.quantize) if x not in ("auto", "none"))

    def models(self, spec) -> tuple[tuple[str, str], ...]:
        return (("model", spec.model),)

    def before_load(self, spec, card, target) -> None:
        if model_ref(card, "draft.model", spec.model).kind == "toy":
            raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
        if spec.quantize == "int8" and resolve_device(card.device).type != "cpu":
            raise SpecdecError(f"{card.path}: draft.quantize: 'int8' runs on the CPU only (dynamic int8 layers), "
                               f"but device {card.device!r} is {resolve_device(card.device)}")

    def build(self, spec, pair, name: str) -> ModelDraft:
        card = pair.card
        ref = model_ref(card, "draft.model", spec.model)
        # The draft's own dtype (the target verifies in its own, so outputs stay exact); int8 layers
        # are quantized from float32 weights and take float32 activations.
        dtype = pair.dtype if spec.dtype == "auto" else DTYPES[spec.dtype]
        dtype = torch.float32 if spec.quantize == "int8" else dtype
        model, tok = pair.load_model(ref, dtype, spec.revision)
        if not isinstance(model, HFLM):
            raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
        try:
            shared = check_vocab(pair.tokenizer, tok, card.target, spec.model)
        except SpecdecError as e:
            raise SpecdecError(f"{card.path}: draft.model: {e}") from None
        if spec.quantize == "int8":
            try:
                quantize_int8(model)
            except SpecdecError as e:
                raise SpecdecError(f"{card.path}: draft.quantize: {e}") from None
        return ModelDraft(model, shared, name=name)

    def export(self, engine: str, spec, card, model, notes: list[str]) -> dict:
        draft = model("draft.model", spec.model)
        if engine == "vllm":
            config = {"method": "draft_model", "model": draft, "num_speculative_tokens": card.k}
            if spec.revision:
                config["revision"] = spec.revision
            return config
        if engine == "sglang":
            # --speculative-num-draft-tokens counts the last emitted token as the root of the draft
            # tree, so k proposals in one chain (topk 1) are k + 1 (SGLang's own rule for topk 1).
            options = {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": draft,
                       "--speculative-num-steps": card.k, "--speculative-eagle-topk": 1,
                       "--speculative-num-draft-tokens": card.k + 1}
            if spec.revision:
                options["--speculative-draft-model-revision"] = spec.revision
            return options
        # llama-server ignores -md unless --spec-type names a draft implementation
        return {"--spec-type": "draft-simple", "-md": draft, "--spec-draft-n-max": card.k}

    def check_peer(self, spec, card) -> None:
        pass

    def peer(self, spec, pair, draft: ModelDraft, k: int) -> tuple[dict, object]:
        return {"assistant_model": draft.lm.model}, draft.lm.model
