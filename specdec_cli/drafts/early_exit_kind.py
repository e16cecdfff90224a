"""Draft kind `early-exit`: the target's own first `layers` layers and its LM head as the draft.

    draft: {kind: early-exit, layers: 12}
A model draft (ModelDraft) over an early-exit view of the target (models.early_exit): no second
model to load, the target's tokenizer by construction. No serving engine runs it; transformers
has it as assistant_early_exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_cli.checks import integer
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import Field, Kind

if TYPE_CHECKING:
    from specdec_cli.drafts.model_draft import ModelDraft


class EarlyExit(Kind):
    name = "early-exit"
    target = "transformers"
    fields = (Field("layers", integer(1, 1000), required=True),)  # how many target layers the draft runs
    why_not = "a draft made of the target's own first layers"

    @property
    def draft(self) -> type[ModelDraft]:
        from specdec_cli.drafts.model_draft import ModelDraft

        return ModelDraft

    def detail(self, spec) -> str:
        return f"layers={spec.layers}"

    def build(self, spec, pair, name: str) -> ModelDraft:
        from specdec_cli.engine.models import early_exit

        try:
            view = early_exit(pair.target, spec.layers)
        except SpecdecError as e:
            raise SpecdecError(f"{pair.card.path}: draft.layers: {e}") from None
        return self.draft(view, pair.target.vocab_size, name=name)

    def check_peer(self, spec, card) -> None:
        pass

    def peer(self, spec, pair, draft: ModelDraft, k: int) -> tuple[dict, object]:
        return {"assistant_early_exit": spec.layers}, pair.target.model  # the target at reduced depth
