"""Draft kind `features`: one block drafting from the target's own hidden states (EAGLE-1, or
EAGLE-3's fused layers where its weights name taps; features_draft.py runs it in the loop,
features_block.py is the block and its weights file).

    draft: {kind: features, weights: weights/smollm2-distilled.safetensors, lookup: 3}
A weights file fits one target (checked on load), and no serving engine reads it. `lookup: n`
(n >= 2; 0, the default: off) copies what followed an earlier occurrence of the last n tokens
(down to 2) ahead of the head's own guesses (features_draft.py).
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


def ngram(v) -> str | None:
    """draft.lookup's checker: 0, or an n-gram length a match is worth copying from (2..16)."""
    if isinstance(v, bool) or not isinstance(v, int) or not (v == 0 or 2 <= v <= 16):
        return "must be 0 (off) or an integer in 2..16"
    return None


class Features(Kind):
    name = "features"
    target = "transformers"
    fields = (Field("weights", text, required=True),  # the .safetensors `specdec distill` wrote (relative: to the card)
              Field("lookup", ngram, 0))  # the longest n-gram copied (down to 2); 0: the head alone
    why_not = "specdec's own EAGLE-style weights file, which no engine reads"

    @property
    def draft(self) -> type[FeatureDraft]:
        from specdec_cli.drafts.features_draft import FeatureDraft

        return FeatureDraft

    def detail(self, spec) -> str:
        stem = Path(spec.weights or "").stem
        return f"{stem}, lookup={spec.lookup}" if spec.lookup else stem

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
        return self.draft(pair.target, block, vocab_ids, name=name, meta=meta, lookup=spec.lookup)
