"""Draft kind `features`: one block drafting from the target's own hidden states (EAGLE-1, or
EAGLE-3's fused layers where its weights name taps; features_draft.py runs it in the loop,
features_block.py is the block and its weights file).

    draft: {kind: features, weights: weights/smollm2-distilled.safetensors}
A weights file fits one target (checked on load), and no serving engine reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specdec_cli.checks import text
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import Field, Kind

if TYPE_CHECKING:
    from specdec_cli.drafts.features_draft import FeatureDraft


def weights_path(card, spec) -> Path:
    """A features draft's weights file; a relative path is relative to the card's folder."""
    path = Path(spec.weights).expanduser()
    return path if path.is_absolute() else card.folder / path


class Features(Kind):
    name = "features"
    target = "transformers"
    fields = (Field("weights", text, required=True),)  # the .safetensors `specdec distill` wrote (relative: to the card)
    why_not = "specdec's own EAGLE-style weights file, which no engine reads"

    @property
    def draft(self) -> type[FeatureDraft]:
        from specdec_cli.drafts.features_draft import FeatureDraft

        return FeatureDraft

    def detail(self, spec) -> str:
        return Path(spec.weights or "").stem

    def before_load(self, spec, card, target) -> None:
        from specdec_cli.drafts import features_block as features

        path = weights_path(card, spec)
        try:
            features.read_header(path)
        except SpecdecError as e:
            raise SpecdecError(f"{card.path}: draft.weights: {path}: {e}") from None

    def build(self, spec, pair, name: str) -> FeatureDraft:
        from specdec_cli.drafts import features_block as features

        path = weights_path(pair.card, spec)
        try:
            block, vocab_ids, meta = features.load(path, pair.target)
        except SpecdecError as e:
            raise SpecdecError(f"{pair.card.path}: draft.weights: {path}: {e}") from None
        return self.draft(pair.target, block, vocab_ids, name=name, meta=meta)
