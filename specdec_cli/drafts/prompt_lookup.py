"""Draft kind `prompt-lookup`: n-gram match against the prompt and the text so far; no model call.

    draft: {kind: prompt-lookup, max_ngram: 3, min_ngram: 1}
Serves on vLLM (ngram), SGLang (NGRAM) and llama.cpp (ngram-simple); transformers' assisted
generation has it as prompt_lookup_num_tokens (matching down to 1-grams only).
"""

from __future__ import annotations

import numpy as np
import torch

from ..checks import integer
from ..errors import SpecdecError
from ..schedule import lookup_prior
from .base import Draft, Field, Kind

MAX_PROPOSAL = 64  # cards.MAX_K: the longest continuation a lookup keeps


class PromptLookupDraft(Draft):
    """n-gram lookup: find the latest earlier occurrence of the last n tokens (n = max_ngram
    down to min_ngram) in prompt + output, and propose the tokens that followed it.
    Costs no model call; proposes nothing when no n-gram matches."""

    free = True  # no model call: a schedule may peek at its proposal at no cost
    fills = True  # nothing matched: the last token, for the cost schedule to verify when cheap

    def __init__(self, device, max_ngram: int = 3, min_ngram: int = 1, name: str = "prompt-lookup"):
        self.device, self.max_ngram, self.min_ngram, self.name = device, max_ngram, min_ngram, name
        self.forwards = 0
        self.pin = torch.device(device).type == "cuda"  # pinned host memory: an async copy, no sync
        self._last: tuple = (None, 0, [])

    def begin(self, prompt: list[int]) -> None:
        self._last = (None, 0, [])

    def match(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(n, continuation): the longest n-gram (max_ngram down to min_ngram) ending `tokens`
        that occurred earlier, and up to k tokens that followed its latest occurrence; (0, [])
        when nothing matches. The schedule conditions acceptance on n."""
        key = hash(tuple(tokens))
        if self._last[0] == key:  # asked twice for the same round (schedule, then propose)
            return self._last[1], self._last[2][:k]
        seq = np.asarray(tokens, dtype=np.int64)
        found = (0, [])
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # [L-n, n] earlier n-grams
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n  # the latest match; continuation starts after it
                found = (n, seq[start : start + MAX_PROPOSAL].tolist())
                break
        self._last = (key, *found)
        return found[0], found[1][:k]

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        return self.match(tokens, k)[1] if k else []

    def context_key(self, tokens: list[int], k: int) -> int:
        return self.match(tokens, k)[0]

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        return self._on_device(self.lookup(tokens, k)[:k])

    def filler(self, tokens: list[int]) -> torch.Tensor:
        """One token to verify when nothing matched (schedule.Scheduled.fills): the last one."""
        return self._on_device(tokens[-1:])

    def _on_device(self, ids: list[int]) -> torch.Tensor:
        proposal = torch.tensor(ids, dtype=torch.long)
        return (proposal.pin_memory() if self.pin else proposal).to(self.device, non_blocking=True)

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        pass


class PromptLookup(Kind):
    name = "prompt-lookup"
    draft = PromptLookupDraft
    fields = (
        Field("max_ngram", integer(1, 16), 3),  # longest n-gram matched (then shorter ones)
        Field("min_ngram", integer(1, 16), 1),
    )
    engines = ("vllm", "sglang", "llama.cpp")

    def check(self, spec, where: str, field: str) -> None:
        if spec.min_ngram > spec.max_ngram:
            raise SpecdecError(f"{where}: {field}.min_ngram: must be <= max_ngram ({spec.max_ngram}), got {spec.min_ngram}")

    def build(self, spec, pair, name: str) -> PromptLookupDraft:
        return PromptLookupDraft(pair.target.device, spec.max_ngram, spec.min_ngram, name=name)

    def prior(self, key: int) -> float:
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
