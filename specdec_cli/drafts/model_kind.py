"""Draft kind `model`: a smaller causal LM sharing the target's tokenizer, with its own KV cache
(drafts/model.py).

    draft: {kind: model, model: HuggingFaceTB/SmolLM2-135M-Instruct}
Fields: model (a model reference, required), revision (the draft's own hub revision), dtype
(auto = the target's) and quantize (int8: engine/quantize.py's int8 layers, CPU only).
Serves on vLLM (draft_model), SGLang (STANDALONE) and llama.cpp (draft-simple).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_cli.checks import DTYPE_NAMES, choice, text
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import Field, Kind

if TYPE_CHECKING:
    from specdec_cli.drafts.model_draft import ModelDraft

QUANTIZE = ("none", "int8")  # as loaded, or int8 linear layers (CPU; engine/quantize.py)


class Model(Kind):
    name = "model"
    target = "transformers"
    fields = (
        Field("model", text, required=True),  # a model reference (models.parse_ref)
        Field("revision", text),  # the draft's hub revision (the card's `revision` is the target's)
        Field("dtype", choice(("auto", *DTYPE_NAMES)), "auto"),  # auto = the target's; the target verifies in its own
        Field("quantize", choice(QUANTIZE), "none"),  # int8 = RowInt8Linear layers (CPU only)
    )
    engines = ("vllm", "sglang", "llama.cpp")

    @property
    def draft(self) -> type[ModelDraft]:
        from specdec_cli.drafts.model_draft import ModelDraft

        return ModelDraft

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
        from specdec_cli.engine.models import model_ref
        from specdec_cli.engine.placement import resolve_device

        if model_ref(card, "draft.model", spec.model).kind == "toy":
            raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
        if spec.quantize == "int8" and resolve_device(card.device).type != "cpu":
            raise SpecdecError(f"{card.path}: draft.quantize: 'int8' runs on the CPU only (fbgemm's int8 layers), "
                               f"but device {card.device!r} is {resolve_device(card.device)}")

    def _load(self, spec, card, dtype) -> tuple:
        """(reference, dtype, revision, quantize) of the draft model, for a target in `dtype`."""
        import torch

        from specdec_cli.engine.models import model_ref
        from specdec_cli.engine.placement import DTYPES

        # The draft's own dtype (the target verifies in its own, so outputs stay exact); int8 layers
        # are quantized from float32 weights and take float32 activations.
        dtype = dtype if spec.dtype == "auto" else DTYPES[spec.dtype]
        dtype = torch.float32 if spec.quantize == "int8" else dtype
        return model_ref(card, "draft.model", spec.model), dtype, spec.revision, spec.quantize

    def loads_first(self, spec, card, dtype) -> tuple | None:
        return self._load(spec, card, dtype) if spec.quantize != "none" else None

    def build(self, spec, pair, name: str) -> ModelDraft:
        from specdec_cli.engine.models import HFLM
        from specdec_cli.engine.tokenizers import check_vocab

        card = pair.card
        model, tok = pair.load_model(*self._load(spec, card, pair.dtype))
        if not isinstance(model, HFLM):
            raise SpecdecError(f"{card.path}: draft.model: must be a transformers model, got {spec.model!r}")
        try:
            shared = check_vocab(pair.tokenizer, tok, card.target, spec.model)
        except SpecdecError as e:
            raise SpecdecError(f"{card.path}: draft.model: {e}") from None
        return self.draft(model, shared, name=name)

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
