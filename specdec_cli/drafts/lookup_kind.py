"""Draft kind `prompt-lookup`: n-gram match against the prompt and the text so far; no model call
(drafts/prompt_lookup.py).

    draft: {kind: prompt-lookup, max_ngram: 3, min_ngram: 1}
Serves on vLLM (ngram), SGLang (NGRAM) and llama.cpp (ngram-simple); transformers' assisted
generation has it as prompt_lookup_num_tokens (matching down to 1-grams only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_cli.checks import integer
from specdec_cli.errors import SpecdecError
from specdec_cli.drafts.registry import Field, Kind

if TYPE_CHECKING:
    from specdec_cli.drafts import Draft
    from specdec_cli.drafts.lookup_draft import PromptLookupDraft


class PromptLookup(Kind):
    name = "prompt-lookup"
    fields = (
        Field("max_ngram", integer(1, 16), 3),  # longest n-gram matched (then shorter ones)
        Field("min_ngram", integer(1, 16), 1),
    )
    engines = ("vllm", "sglang", "llama.cpp")

    @property
    def draft(self) -> type[PromptLookupDraft]:
        from specdec_cli.drafts.lookup_draft import PromptLookupDraft

        return PromptLookupDraft

    def check(self, spec, where: str, field: str) -> None:
        if spec.min_ngram > spec.max_ngram:
            raise SpecdecError(f"{where}: {field}.min_ngram: must be <= max_ngram ({spec.max_ngram}), got {spec.min_ngram}")

    def build(self, spec, pair, name: str) -> PromptLookupDraft:
        return self.draft(pair.target.device, spec.max_ngram, spec.min_ngram, name=name)

    def prior(self, key: int) -> float:
        from specdec_cli.loop.schedule import lookup_prior

        return lookup_prior(key)  # a longer matched n-gram more likely continues

    def export(self, engine: str, spec, card, model, notes: list[str]) -> dict:
        if engine == "vllm":
            return {"method": "ngram", "num_speculative_tokens": card.k,
                    "prompt_lookup_max": spec.max_ngram, "prompt_lookup_min": spec.min_ngram}
        if engine == "sglang":
            # k proposals in one chain (BFS breadth 1) are k + 1 draft tokens: the root counts
            options = {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": card.k + 1,
                       "--speculative-ngram-min-match-window-size": spec.min_ngram,
                       "--speculative-ngram-max-match-window-size": spec.max_ngram,
                       "--speculative-ngram-min-bfs-breadth": 1, "--speculative-ngram-max-bfs-breadth": 1}
            notes.append("SGLang's NGRAM runs on CUDA only, and matches against a cache that also holds earlier "
                         "requests' tokens (specdec matches this request's prompt and output only)")
            return options
        options = {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": spec.max_ngram,
                   "--spec-ngram-simple-size-m": card.k}
        if spec.min_ngram != spec.max_ngram:
            notes.append(f"draft.min_ngram: llama.cpp's ngram-simple matches exactly {spec.max_ngram} tokens "
                         f"(draft.max_ngram); it does not fall back to shorter n-grams down to {spec.min_ngram}")
        return options

    def check_peer(self, spec, card) -> None:
        if spec.min_ngram != 1:
            raise SpecdecError(f"--vs-transformers: transformers' prompt lookup always matches down to 1-grams; "
                               f"card '{card.name}' sets draft.min_ngram: {spec.min_ngram}")

    def peer(self, spec, pair, draft: Draft, k: int) -> tuple[dict, object]:
        return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": spec.max_ngram}, None
