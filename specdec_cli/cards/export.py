"""`specdec export`: the command that runs a card's target and draft, with speculative decoding,
on a serving engine: vLLM (`vllm serve`), SGLang (`sglang.launch_server`) or llama.cpp
(`llama-server`). Nothing is run here: this writes the command down, from each engine's
documented option names (tests/test_export.py pins the version and page each name was read
from); tests/test_engines.py starts the commands on the engines installed on the machine.

What maps (each draft kind declares its own mapping, or why no engine runs it: drafts/*_kind.py):
    draft kind model          vLLM method draft_model · SGLang STANDALONE · llama.cpp draft-simple
    draft kind prompt-lookup  vLLM method ngram · SGLang NGRAM · llama.cpp ngram-simple
    decoding.k                tokens drafted per round (a fixed number on every engine)
    dtype, trust_remote_code, revision, draft.revision, max_tokens: where the engine has an option
    a GGUF target or draft    vLLM: the transformers folder convert() makes from it (vLLM on a
                              CPU loads no GGUF file) · llama.cpp: the file itself
Kinds no engine has (early-exit, toy, synthetic, features), and models an engine cannot load,
are refused with one line naming the card, the field and the value. Where the engine does
something close but not the same (a schedule it lacks, an n-gram range it cannot express), the
export goes on and says so in a note.

The one thing here that writes files: `python -m specdec_cli.cards.export convert CARD` makes the
folders the vLLM command names for a card's GGUF files (convert(), at the end), once per machine.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specdec_cli.drafts import registry as kinds
from specdec_cli.cards.card import FETCHED, Card
from specdec_cli.checks import check, choice
from specdec_cli.engine.converted import convert, folder, is_converted, ready
from specdec_cli.errors import SpecdecError
from specdec_cli.files import cache_dir

ENGINES = ("vllm", "sglang", "llama.cpp")
QUANT = re.compile(r"[._-](I?Q\d\w*)\.gguf$", re.IGNORECASE)  # a quantised GGUF's name: ...Q4_1.gguf, ...-q4_k_m.gguf


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
    check("command line", "--engine", engine, choice(ENGINES))


def export(card: Card, engine: str) -> Export:
    """The command that serves `card` on `engine`, or a SpecdecError saying what cannot be."""
    check_engine(engine)
    spec = card.draft
    kind = kinds.get(spec.kind)
    if engine not in kind.engines:
        runs = [k.name for k in kinds.kinds() if engine in k.engines]
        raise SpecdecError(f"{card.path}: draft.kind: {engine} has no draft kind {spec.kind!r} "
                           f"({kind.why_not}); it runs draft kinds {', '.join(runs)}")
    notes: list[str] = []
    target = _model(card, "target", card.target, engine, notes)
    speculative = kind.export(engine, spec, card, lambda field, ref: _model(card, field, ref, engine, notes), notes)
    request = {"max_tokens": card.max_tokens, "temperature": card.temperature, "top_k": card.top_k,
               "top_p": card.top_p, "seed": card.seed}
    argv = COMMAND[engine](card, target, speculative, notes)
    if card.quantize != "none":
        notes.append(f"quantize: {card.quantize}: specdec's own int8 layers (each row scaled alone); {engine} runs the "
                     f"target's weights as exported, so its text is the float model's, not the int8 one's")
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
            from specdec_cli.cards.fetch import card_label

            notes.append(f"{field}: {path.name} is not fetched yet: run `specdec fetch {card_label(card)}` "
                         f"before starting the server")
        kind, name = "gguf", str(path)
    else:
        from specdec_cli.engine.models import model_ref  # resolves pkg: files and relative paths, checks GGUF magic

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
        return _converted(card, field, Path(name), notes)
    if engine == "llama.cpp" and (quant := QUANT.search(Path(name).name)):
        notes.append(f"{field}: llama-server computes with the {quant[1].upper()} weights of {Path(name).name} as "
                     "stored (and quantised activations in their dot products); specdec de-quantises them to float32 "
                     "on load, so the two greedy texts can part where two tokens are nearly tied")
    return name


def _converted(card: Card, field: str, gguf: Path, notes: list[str]) -> str:
    """The transformers folder vLLM is given for a GGUF file: vLLM on a CPU has no GGUF kernels
    (on a GPU it loads GGUF only through the vllm-gguf-plugin package), and the folder works on both."""
    from specdec_cli.cards.fetch import card_label

    path = folder(gguf)
    made = "" if ready(gguf) else \
        f"; it is made the first time specdec loads the card, or by: python -m specdec_cli.cards.export convert " \
        f"{card_label(card)}"
    notes.append(f"{field}: vLLM is given {gguf.name} as a transformers folder, de-quantised to float32 as specdec "
                 f"loads it (vLLM on a CPU loads no GGUF file){made}")
    return str(path)


# ---------------------------------------------------------------------------- engines
# Each builder turns the draft kind's speculative settings (Kind.export) into the command.
def _vllm(card: Card, target: str, config: dict, notes: list[str]) -> list[str]:
    argv = ["vllm", "serve", target, "--speculative-config", json.dumps(config)]
    if card.dtype != "auto":
        return argv + _common(card, "--dtype", "--trust-remote-code", "--revision")
    # vLLM's auto serves a float32 checkpoint in bfloat16 on every device, where its speculative
    # text can part from its greedy text (smollm2's README answer, token 44: docs/export.md)
    why = ("vLLM's auto would serve it in bfloat16, where one verify of k+1 positions rounds unlike k+1 "
           "one-token steps and its speculative text can part from its own greedy text (specdec pins the "
           "shapes so that they agree)")
    if is_converted(target):  # de-quantised float32 weights, specdec's own dtype on a CPU
        notes.append(f"dtype: auto: exported as --dtype float32, the converted folder's own: {why}")
        return argv + ["--dtype", "float32"] + _common(card, "--dtype", "--trust-remote-code", "--revision")
    notes.append(f"dtype: auto: left to vLLM: for a float32 checkpoint {why}; on a CPU --dtype float32 kept them "
                 "equal in tests/test_engines.py")
    return argv + _common(card, "--dtype", "--trust-remote-code", "--revision")


def _sglang(card: Card, target: str, options: dict, notes: list[str]) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", target, *_words(options)]
    return argv + _common(card, "--dtype", "--trust-remote-code", "--revision")


def _llama_cpp(card: Card, target: str, options: dict, notes: list[str]) -> list[str]:
    if card.dtype != "auto":
        notes.append(f"dtype: {card.dtype}: llama-server computes with the GGUF's own weight types and has no dtype option")
    argv = ["llama-server", "-m", target, *_words(options), "-n", str(card.max_tokens)]
    if any(QUANT.search(Path(str(name)).name) for name in (target, options.get("-md", ""))):
        notes.append(REPACK)
        argv.append("--no-repack")
    return argv


# llama-server repacks quantised weights into interleaved blocks for its CPU kernels, where a
# several-token verify takes a GEMM and a one-token step a GEMV that sums in another order:
# qwen2.5-coder-1.5b (Q4_K_M), README prompt, 64 tokens: the speculative text leaves the greedy one
# at about token 45 repacked and matches it unrepacked (tests/test_engines.py; docs/export.md).
REPACK = ("--no-repack: llama-server repacks quantised weights for its CPU kernels, which round a several-token "
          "verify unlike a one-token step, so its speculative text can part from its own greedy text; unrepacked "
          "the two agree (drop the option for the repacked kernels, without that exactness)")


def _common(card: Card, dtype: str, trust: str, revision: str) -> list[str]:
    """The card's settings that vLLM and SGLang spell alike; defaults are left out."""
    words = [dtype, card.dtype] if card.dtype != "auto" else []
    words += [trust] if card.trust_remote_code else []
    return words + ([revision, card.revision] if card.revision else [])


def _words(options: dict) -> list[str]:
    return [str(word) for pair in options.items() for word in pair]


COMMAND = {"vllm": _vllm, "sglang": _sglang, "llama.cpp": _llama_cpp}
DYNAMIC = {  # each engine's own documented way of varying the draft length, if any
    "vllm": "vLLM's Dynamic Speculative Decoding (num_speculative_tokens_per_batch_size) varies it by batch size, "
            "not by acceptance.",
    "sglang": "SGLang's --speculative-adaptive varies it by acceptance, documented for --speculative-algorithm EAGLE "
              "with topk 1 only.",
    "llama.cpp": "llama-server drafts up to this maximum; for a draft model --spec-draft-p-min ends a draft early "
                 "when the draft is unsure.",
}


# ---------------------------------------------------------------------------- GGUF files as folders
# vLLM on a CPU has no GGUF kernels (its GGUF support is CUDA code, in the vllm-gguf-plugin package),
# so its command names the transformers folder engine/converted.py makes from the GGUF file, the one
# specdec itself loads in its place.
def gguf_files(card: Card) -> list[Path]:
    """The card's target and `model` draft that are GGUF files; an error names a missing one."""
    from specdec_cli.engine.models import model_ref

    refs = [("target", card.target)] + ([("draft.model", card.draft.model)] if card.draft.kind == "model" else [])
    parsed = [model_ref(card, name, ref) for name, ref in refs]
    return [Path(p.source) / p.gguf_file for p in parsed if p.kind == "gguf"]


def main(argv: list[str]) -> int:
    """python -m specdec_cli.cards.export convert CARD: prints each folder, converting once."""
    from specdec_cli.cards.card import load_card

    if len(argv) != 2 or argv[0] != "convert":
        print("usage: python -m specdec_cli.cards.export convert CARD", file=sys.stderr)
        return 2
    try:
        files = gguf_files(load_card(argv[1]))
        if not files:
            raise SpecdecError(f"{argv[1]}: no GGUF target or draft to convert")
        for gguf in files:
            if not ready(gguf):
                print(f"converting {gguf.name} into {folder(gguf)} (once)", file=sys.stderr)
            print(convert(gguf))
    except SpecdecError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
