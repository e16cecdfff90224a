"""Draft kind `early-exit`: the target's own first `layers` layers and its LM head as the draft.

    draft: {kind: early-exit, layers: 12}
A model draft (ModelDraft) over an early-exit view of the target (models.early_exit): no second
model to load, the target's tokenizer by construction. No serving engine runs it; transformers
has it as assistant_early_exit.
"""

from __future__ import annotations

from ..checks import integer
from ..errors import SpecdecError
from ..models import early_exit
from .base import Field, Kind
from .model import ModelDraft


class EarlyExit(Kind):
    name = "early-exit"
    draft = ModelDraft
    target = "transformers"
    fields = (Field("layers", integer(1, 1000), required=True),)  # how many target layers the draft runs
    why_not = "a draft made of the target's own first layers"

    def detail(self, spec) -> str:
        return f"layers={spec.layers}"

    def build(self, spec, pair, name: str) -> ModelDraft:
        try:
            view = early_exit(pair.target, spec.layers)
        except SpecdecError as e:
            raise SpecdecError(f"{pair.card.path}: draft.layers: {e}") from None
        return ModelDraft(view, pair.target.vocab_size, name=name)

    def check_peer(self, spec, card) -> None:
        pass

    def peer(self, spec, pair, draft: ModelDraft, k: int) -> tuple[dict, object]:
        return {"assistant_early_exit": spec.layers}, pair.target.model  # the target at reduced depth
