"""`specdec export`: the command that runs a card's target and draft, with speculative decoding,
on a serving engine: vLLM (`vllm serve`), SGLang (`sglang.launch_server`) or llama.cpp
(`llama-server`). Nothing is run or checked against an installed engine: this writes the
command down, from each engine's documented option names (tests/test_export.py pins the
version and page each name was read from).

What maps:
    draft kind model          vLLM method draft_model · SGLang STANDALONE · llama.cpp draft-simple
    draft kind prompt-lookup  vLLM method ngram · SGLang NGRAM · llama.cpp ngram-simple
    decoding.k                tokens drafted per round (a fixed number on every engine)
    dtype, trust_remote_code, revision, draft.revision, max_tokens: where the engine has an option
Kinds no engine has (early-exit, toy, synthetic), and models an engine cannot load, are refused
with one line naming the card, the field and the value. Where the engine does something close
but not the same (a schedule it lacks, an n-gram range it cannot express), the export goes on
and says so in a note.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .cards import FETCHED, Card, _choice, check
from .errors import SpecdecError
from .files import cache_dir

ENGINES = ("vllm", "sglang", "llama.cpp")
KINDS = ("model", "prompt-lookup")  # the draft kinds every engine above can run
WHY_NOT = {"early-exit": "a draft made of the target's own first layers",
           "toy": "specdec's built-in test draft",
           "synthetic": "a benchmark draft that copies the target's own output",
           "features": "specdec's own EAGLE-style weights file, which no engine reads"}


@dataclass
class Export:
    card: str
    engine: str
    argv: list[str]  # the command, one word per item
    speculative: dict  # the speculative settings alone, named as the engine names them
    request: dict  # settings a client sends with each request (the servers take them per request)
    notes: list[str] = field(default_factory=list)  # where the engine differs from specdec

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def as_dict(self) -> dict:
        return {"card": self.card, "engine": self.engine, "command": self.command, "argv": self.argv,
                "speculative": self.speculative, "request": self.request, "notes": self.notes}


def check_engine(engine: str) -> None:
    check("command line", "--engine", engine, _choice(ENGINES))


def export(card: Card, engine: str) -> Export:
    """The command that serves `card` on `engine`, or a SpecdecError saying what cannot be."""
    check_engine(engine)
    spec = card.draft
    if spec.kind not in KINDS:
        raise SpecdecError(f"{card.path}: draft.kind: {engine} has no draft kind {spec.kind!r} "
                           f"({WHY_NOT.get(spec.kind, 'specdec only')}); it runs draft kinds {', '.join(KINDS)}")
    notes: list[str] = []
    target = _model(card, "target", card.target, engine, notes)
    draft = _model(card, "draft.model", spec.model, engine, notes) if spec.kind == "model" else None
    request = {"max_tokens": card.max_tokens, "temperature": card.temperature, "top_k": card.top_k,
               "top_p": card.top_p, "seed": card.seed}
    argv, speculative = BUILD[engine](card, target, draft, notes)
    if spec.schedule != "fixed":
        notes.append(f"draft.schedule: {spec.schedule}: {engine} drafts a fixed number of tokens each round; exported "
                     f"decoding.k = {card.k}. {DYNAMIC[engine]}")
    return Export(card.name, engine, argv, speculative, request, notes)


# ---------------------------------------------------------------------------- model references
def _model(card: Card, field: str, ref: str, engine: str, notes: list[str]) -> str:
    """The path or hub id the engine loads for a card's model reference; refuses what it cannot."""
    if ref.startswith(FETCHED):  # `specdec fetch` puts it here; the command may come before the fetch
        path = cache_dir("models") / ref[len(FETCHED):]
        if not path.is_file():
            from .fetch import card_label

            notes.append(f"{field}: {path.name} is not fetched yet: run `specdec fetch {card_label(card)}` "
                         f"before starting the server")
        kind, name = "gguf", str(path)
    else:
        from .pair import model_ref  # resolves pkg: files and relative paths, checks GGUF magic

        parsed = model_ref(card, field, ref)
        kind = parsed.kind
        name = str(Path(parsed.source) / parsed.gguf_file) if kind == "gguf" else parsed.source
    if kind == "toy":
        raise SpecdecError(f"{card.path}: {field}: {engine} cannot load {ref!r}: it is specdec's built-in toy model")
    if kind == "random":
        raise SpecdecError(f"{card.path}: {field}: {engine} cannot load {ref!r}: a random-weight model built inside specdec")
    if engine == "llama.cpp" and kind != "gguf":
        raise SpecdecError(f"{card.path}: {field}: llama.cpp loads GGUF files, got the transformers checkpoint {ref!r} "
                           f"(convert it with llama.cpp's convert_hf_to_gguf.py and point the card at the .gguf)")
    if engine == "vllm" and kind == "gguf":
        notes.append(f"{field}: vLLM loads GGUF through the vllm-gguf-plugin package and recommends "
                     f"--tokenizer <the base model's hub id> over converting the GGUF's tokenizer")
    return name


# ---------------------------------------------------------------------------- engines
# Each builder returns (argv, speculative settings). k proposals per round everywhere.
def _vllm(card: Card, target: str, draft: str | None, notes: list[str]) -> tuple[list[str], dict]:
    spec = card.draft
    if draft is not None:
        config = {"method": "draft_model", "model": draft, "num_speculative_tokens": card.k}
        if getattr(spec, "revision", None):
            config["revision"] = spec.revision
    else:
        config = {"method": "ngram", "num_speculative_tokens": card.k,
                  "prompt_lookup_max": spec.max_ngram, "prompt_lookup_min": spec.min_ngram}
    argv = ["vllm", "serve", target, "--speculative-config", json.dumps(config)]
    return argv + _common(card, "--dtype", "--trust-remote-code", "--revision"), config


def _sglang(card: Card, target: str, draft: str | None, notes: list[str]) -> tuple[list[str], dict]:
    spec = card.draft
    # --speculative-num-draft-tokens counts the last emitted token as the root of the draft
    # tree, so k proposals in one chain (topk / BFS breadth 1) are k + 1 (SGLang's own rule
    # for topk 1: num_steps + 1).
    if draft is not None:
        options = {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": draft,
                   "--speculative-num-steps": card.k, "--speculative-eagle-topk": 1,
                   "--speculative-num-draft-tokens": card.k + 1}
        if getattr(spec, "revision", None):
            options["--speculative-draft-model-revision"] = spec.revision
    else:
        options = {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": card.k + 1,
                   "--speculative-ngram-min-match-window-size": spec.min_ngram,
                   "--speculative-ngram-max-match-window-size": spec.max_ngram,
                   "--speculative-ngram-min-bfs-breadth": 1, "--speculative-ngram-max-bfs-breadth": 1}
        notes.append("SGLang's NGRAM runs on CUDA only, and matches against a cache that also holds earlier "
                     "requests' tokens (specdec matches this request's prompt and output only)")
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", target, *_words(options)]
    return argv + _common(card, "--dtype", "--trust-remote-code", "--revision"), options


def _llama_cpp(card: Card, target: str, draft: str | None, notes: list[str]) -> tuple[list[str], dict]:
    spec = card.draft
    if draft is not None:
        # llama-server ignores -md unless --spec-type names a draft implementation
        options = {"--spec-type": "draft-simple", "-md": draft, "--spec-draft-n-max": card.k}
    else:
        options = {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": spec.max_ngram,
                   "--spec-ngram-simple-size-m": card.k}
        if spec.min_ngram != spec.max_ngram:
            notes.append(f"draft.min_ngram: llama.cpp's ngram-simple matches exactly {spec.max_ngram} tokens "
                         f"(draft.max_ngram); it does not fall back to shorter n-grams down to {spec.min_ngram}")
    if card.dtype != "auto":
        notes.append(f"dtype: {card.dtype}: llama-server computes with the GGUF's own weight types and has no dtype option")
    return ["llama-server", "-m", target, *_words(options), "-n", str(card.max_tokens)], options


def _common(card: Card, dtype: str, trust: str, revision: str) -> list[str]:
    """The card's settings that vLLM and SGLang spell alike; defaults are left out."""
    words = [dtype, card.dtype] if card.dtype != "auto" else []
    words += [trust] if card.trust_remote_code else []
    return words + ([revision, card.revision] if card.revision else [])


def _words(options: dict) -> list[str]:
    return [str(word) for pair in options.items() for word in pair]


BUILD = {"vllm": _vllm, "sglang": _sglang, "llama.cpp": _llama_cpp}
DYNAMIC = {  # each engine's own documented way of varying the draft length, if any
    "vllm": "vLLM's Dynamic Speculative Decoding (num_speculative_tokens_per_batch_size) varies it by batch size, "
            "not by acceptance.",
    "sglang": "SGLang's --speculative-adaptive varies it by acceptance, documented for --speculative-algorithm EAGLE "
              "with topk 1 only.",
    "llama.cpp": "llama-server drafts up to this maximum; for a draft model --spec-draft-p-min ends a draft early "
                 "when the draft is unsure.",
}
