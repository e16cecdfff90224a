#!/usr/bin/env bash
# The GPU path in one prepared run (issue 28): install, GPU tests, bfloat16 exactness, timing.
#
#     bash benchmarks/gpu.sh [OUTDIR]          # on the GPU machine (OUTDIR defaults to $OUT)
#     bash benchmarks/gpu.sh --cpu [OUTDIR]    # the same steps on a tiny model here, ~1 minute
#
# From the device tool: run(command="bash benchmarks/gpu.sh", carry=["benchmarks/wheels"],
# timeout_s=540); OUTDIR then gets gpu.jsonl, gpu.md and gpu.log (docs/gpu.md says more).
#
# Steps (each under a time limit, see "Sizing"; a step that fails or runs out of time leaves
# error records for the configurations it did not finish, and the run goes on):
#   setup       GPU: install what the image lacks from benchmarks/wheels (no network there),
#               then record python/torch/transformers/GPU and `pip check`. --cpu: record only.
#   tests       pytest -m gpu on tests/test_gpu_sync.py first (cheap), tests/test_gpu.py last
#               (it gets whatever time the earlier steps left). The sync test runs as it is
#               written: it sets torch.cuda.set_sync_debug_mode("warn") itself and counts the
#               synchronizing calls (one .tolist() per round is allowed), so it is NOT run under
#               "error" mode, which would raise at that one allowed sync. On a CPU both skip.
#   exactness   specdec verify-exactness in bfloat16, every draft that needs no download x k x
#               batch, with --shapes pinned --bitwise (must be identical and bitwise-equal) and
#               --shapes free --bitwise (the contrast: divergences reported, never a failure).
#   timing      specdec bench --agree-sweep --vs-transformers: plain greedy, synthetic drafts at
#               each agreement a and the card's early-exit draft, against transformers' generate
#               and assisted generation on the same GPU.
#   report      benchmarks/gpu_report.py: OUTDIR/gpu.jsonl (one record per configuration, each
#               tagged with its step), OUTDIR/gpu.md (a section to paste into RESULTS.md), and the
#               summary line, printed LAST. Exit 0 when setup worked, every pinned record is
#               identical and bitwise-equal, no GPU test failed and every timing row is there with
#               speculative == greedy (transformers' own outputs may differ from specdec's in
#               bfloat16: gpu.md says so, it fails nothing).
#
# Wheels: the GPU image has torch 2.11 and transformers 5.17 but specdec needs transformers
# >= 5.20, whose own needs the image lacks or has too old: huggingface-hub 2.x (-> httpx2,
# httpcore2, truststore), kernels (-> tomlkit), tokenizers 0.23.3 (the image's 0.23.2 pins
# huggingface-hub < 2); and gguf. The ONE command that prepares them, on any machine with
# network, from the repository root (versions: the ones this repository's tests ran with;
# --no-deps: torch, numpy, safetensors, accelerate, typer, rich, pyyaml, ... are in the image
# already; click, anyio, idna, h11, hf-xet and regex are there too but maybe older than these
# need, so they come along and pip takes them only where the image's are too old; about 27 MB
# in all, transformers alone 14 MB, inside the device tool's 64 MiB with the checkout's ~10 MB):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d benchmarks/wheels transformers==5.25.0 huggingface-hub==2.4.0 tokenizers==0.23.3 httpx2==2.17.0 \
#     httpcore2==2.17.0 truststore==0.10.5 h11==0.16.0 anyio==4.16.0 idna==3.21 click==8.5.1 hf-xet==1.8.0 \
#     kernels==0.19.1 tomlkit==0.15.3 gguf==0.19.0 regex==2026.12.2
#
# On the GPU machine they go in with pip's resolver, offline: pip install --no-index
# --find-links benchmarks/wheels --no-build-isolation -e . (packages the image has at a version
# that fits are kept; anything still missing fails there, by name, in OUTDIR/gpu.log). Tried
# here against a Python 3.12 venv holding the image's versions (transformers 5.17.0,
# huggingface-hub 1.33.0, tokenizers 0.23.2, accelerate 1.15.0, typer 0.15.1, torch as a stub):
# it resolves, and `pip check` then names only the image's own httpcore (h11), not specdec's.
#
# Sizing, GPU: random-llama-1b (1.2B parameters, bfloat16) on one H100. PREDICTED, not measured
# (no GPU was lent while this was written; gpu.log's "exit N in S s" lines of the first run are
# the measurement, and the limits below should be re-cut from them): a 1-token decode step ~20 ms
# (Python and kernel launches, not the GPU, bound a 1B model at batch 1), ~15 s per command to
# import torch + transformers and make the random model.
#   exactness  2 shapes x 2 batches = 4 commands of 3 drafts x 3 k (1, 4, 8), at most 32 tokens;
#              --batch 1 over 2 prompts (2 x (1 greedy + 9 speculative) = 20 decodes), --batch 8
#              over 8 prompts (10 decodes of 8 rows each): 2 x 9 x (2 + 8) = 180 records;
#              ~20 decodes x 32 tokens x ~1.5 forwards a token x 20 ms = ~20 s + 15 s a command
#   timing     4 prompts x 64 tokens x (1 warm-up + 2 timed) x 8 modes (free and pinned greedy,
#              3 synthetic drafts, early-exit, transformers' greedy and assisted): 6 records, ~90 s
#   tests      the sync test (tiny model) ~20 s; test_gpu.py makes the 1B model 5 times, ~100 s
# Time limits, GPU (a step may also use what earlier steps left unused, never more, so the run
# ends within their sum, 450 s = 7.5 min, plus a second of report; the device call's
# timeout_s=540 is slack over that): setup 60 s, sync test 35 s, exactness 4 x 38 s, timing
# 95 s, test_gpu.py 108 s.
# --cpu: tiny-llama (cards/configs/tiny-llama.json) through a temporary card, bfloat16 on the
# CPU with one thread (threads stall each other on a shared CPU), 1 prompt at batch 1 and 2 at
# batch 8, 8 tokens; timing over 2 prompts, 16 tokens, 1 repeat: 2 x 9 x 3 = 54 + 6 + 3 = 63
# records, about a minute.
set -uo pipefail  # not -e: a failed step is recorded and the run goes on
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS

MODE=gpu
OUTDIR=
for arg in "$@"; do
  case $arg in
    --cpu) MODE=cpu ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu.sh: unknown option $arg (use --cpu or --help)" >&2; exit 2 ;;
    *) OUTDIR=$arg ;;
  esac
done
OUTDIR=${OUTDIR:-${OUT:-}}
if [ -z "$OUTDIR" ]; then echo "gpu.sh: give an output folder (or set OUT)" >&2; exit 2; fi
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d)
trap 'if [ -n "${GPU_SH_KEEP:-}" ]; then echo "gpu.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi' EXIT
LOG=$OUTDIR/gpu.log
: >"$LOG"

# >>> configurations (tests/test_gpu_script.py evaluates this block to count the records)
SHAPES=(pinned free)
BATCHES=(1 8)
KS=1,4,8
AGREES=0.5,0.9,1.0  # the synthetic drafts timed; the card's early-exit draft is timed beside them
GPU_TESTS=(tests/test_gpu_sync.py tests/test_gpu.py)  # the first runs first, the rest last
if [ "$MODE" = gpu ]; then
  CARD=random-llama-1b DEVICE=cuda EARLY_EXIT=4  # the card's draft: its first 4 of 16 layers
  PROMPTS=(2 8)  # prompts checked at each of BATCHES
  EXACT_TOKENS=32 BENCH_PROMPTS=4 BENCH_TOKENS=64 BENCH_REPEATS=2
  LIMIT_SETUP=60 LIMIT_SYNC=35 LIMIT_EXACT=38 LIMIT_BENCH=95 LIMIT_TESTS=108  # seconds; EXACT: each command
else
  CARD=$WORK/tiny.yaml DEVICE=cpu EARLY_EXIT=2  # tiny-llama has 4 layers
  PROMPTS=(1 2)
  EXACT_TOKENS=8 BENCH_PROMPTS=2 BENCH_TOKENS=16 BENCH_REPEATS=1
  LIMIT_SETUP=30 LIMIT_SYNC=30 LIMIT_EXACT=30 LIMIT_BENCH=45 LIMIT_TESTS=30
fi
DRAFTS=("early-exit:layers=$EARLY_EXIT" prompt-lookup synthetic:agree=0.7)  # every kind with no download
DTYPE=bfloat16
# <<< configurations

if [ "$MODE" = cpu ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}  # scripts/install.sh's venv
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  cat >"$CARD" <<EOF
# gpu.sh --cpu: tiny-llama with random weights, the card's early-exit draft as random-llama-1b's
description: tiny Llama (random weights) for benchmarks/gpu.sh --cpu
target: random:$ROOT/cards/configs/tiny-llama.json
draft:
  kind: early-exit
  layers: $EARLY_EXIT
  schedule: cost
decoding:
  k: 4
  max_tokens: 16
device: cpu
dtype: $DTYPE
EOF
else
  PY=${PYTHON:-python3}
fi
# specdec from this checkout even if the editable install below did not happen (cards/ is found
# beside the package then); nothing may reach for the network.
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# The prompts (bytes are tokens for random: models): repetitive ones first, so prompt lookup
# has something to find.
cat >"$WORK/prompts.jsonl" <<'EOF'
{"id": "p1", "prompt": "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown"}
{"id": "p2", "prompt": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"}
{"id": "p3", "prompt": "Explain what a hash table is, and when a sorted array is the better choice."}
{"id": "p4", "prompt": "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i * i)\nfor i in range("}
{"id": "p5", "prompt": "Translate to French: The cat sleeps on the warm windowsill every afternoon."}
{"id": "p6", "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,"}
{"id": "p7", "prompt": "Q: What is the capital of France?\nA: Paris.\nQ: What is the capital of Italy?\nA:"}
{"id": "p8", "prompt": "Write a short story about a lighthouse keeper who finds a message in a bottle."}
EOF

GRANTED=0  # seconds granted so far: a step may use what earlier ones left
run_step() {  # run_step NAME SECONDS CMD...: stdout -> WORK/NAME.out, stderr -> the log, "rc took limit" -> WORK/NAME.meta
  local name=$1 share=$2 t0=$SECONDS limit rc
  shift 2
  GRANTED=$((GRANTED + share))
  limit=$((START + GRANTED - SECONDS))
  if [ "$limit" -lt 5 ]; then limit=5; fi
  echo "== $name (limit ${limit}s): $*" >>"$LOG"
  timeout -k 3 "$limit" "$@" >"$WORK/$name.out" 2>>"$LOG"
  rc=$?
  echo "$rc $((SECONDS - t0)) $limit" >"$WORK/$name.meta"
  echo "gpu.sh: $name exit $rc in $((SECONDS - t0))s (limit ${limit}s)" >&2
  return "$rc"
}
skip_step() {  # skip_step NAME WHY: the step's configurations become error records saying why
  echo "skipped: $2" >"$WORK/$1.skip"
  echo "gpu.sh: $1 skipped ($2)" >&2
}
WHY_SKIP=  # set when setup failed: every later step is skipped

# ---- setup
if [ "$MODE" = gpu ] && ! nvidia-smi -L >/dev/null 2>&1; then  # before pip touches this Python
  echo "gpu.sh: no NVIDIA GPU here (nvidia-smi -L found none): nothing installed; use --cpu"
  exit 2
fi
if [ "$MODE" = gpu ]; then
  if ls benchmarks/wheels/*.whl >/dev/null 2>&1; then
    run_step install "$((LIMIT_SETUP - 20))" "$PY" -m pip install -q --no-index --find-links benchmarks/wheels \
      --no-build-isolation --no-compile --disable-pip-version-check -e .
  else
    echo "gpu.sh: no benchmarks/wheels/*.whl (carry it: see the header); trying the image as it is" >&2
    run_step install "$((LIMIT_SETUP - 20))" "$PY" -m pip install -q --no-index --no-build-isolation \
      --no-compile --disable-pip-version-check -e .
  fi
else
  skip_step install "--cpu: the venv has everything"
fi
run_step probe 15 "$PY" - "$DEVICE" <<'EOF'
import json, platform, sys
info = {"python": platform.python_version(), "executable": sys.executable}
try:
    from importlib.metadata import version
    import torch, transformers, gguf  # noqa: F401
    import specdec_cli.cli  # noqa: F401  (imports as the steps will)
    info.update(torch=torch.__version__, transformers=version("transformers"), gguf=version("gguf"),
                cuda=torch.cuda.is_available())
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), cuda_version=torch.version.cuda)
    info["ok"] = sys.argv[1] != "cuda" or torch.cuda.is_available()
    if not info["ok"]:
        info["error"] = "no CUDA device (run with --cpu on a machine without one)"
except Exception as e:  # a missing or too old package: the install step's log says why
    info.update(ok=False, error=f"{type(e).__name__}: {e}")
print(json.dumps(info))
EOF
run_step pipcheck 5 "$PY" -m pip check --disable-pip-version-check
SETUP_OK=$("$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1])).get("ok", False)))' "$WORK/probe.out" 2>/dev/null || echo 0)
if [ "$SETUP_OK" != 1 ]; then WHY_SKIP="setup failed (see gpu.log)"; fi

test_step() {  # test_step FILE SECONDS
  local name
  name=pytest-$(basename "$1" .py)
  if [ -n "$WHY_SKIP" ]; then skip_step "$name" "$WHY_SKIP"; return; fi
  run_step "$name" "$2" "$PY" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$WORK/$name.xml" "$1"
}

# ---- tests (the sync test first)
test_step "${GPU_TESTS[0]}" "$LIMIT_SYNC"

# ---- exactness
for shapes in "${SHAPES[@]}"; do
  for i in "${!BATCHES[@]}"; do
    batch=${BATCHES[$i]} name=exact-$shapes-b${BATCHES[$i]}
    if [ -n "$WHY_SKIP" ]; then skip_step "$name" "$WHY_SKIP"; continue; fi
    head -n "${PROMPTS[$i]}" "$WORK/prompts.jsonl" >"$WORK/$name-prompts.jsonl"
    draft_args=()
    for d in "${DRAFTS[@]}"; do draft_args+=(-d "$d"); done
    run_step "$name" "$LIMIT_EXACT" "$PY" -m specdec_cli verify-exactness -c "$CARD" --device "$DEVICE" \
      --dtype "$DTYPE" --shapes "$shapes" --bitwise --batch "$batch" -k "$KS" "${draft_args[@]}" \
      --prompts-file "$WORK/$name-prompts.jsonl" --max-tokens "$EXACT_TOKENS" --json
  done
done

# ---- timing
if [ -n "$WHY_SKIP" ]; then
  skip_step bench "$WHY_SKIP"
else
  head -n "$BENCH_PROMPTS" "$WORK/prompts.jsonl" >"$WORK/bench-prompts.jsonl"
  run_step bench "$LIMIT_BENCH" "$PY" -m specdec_cli bench -c "$CARD" --device "$DEVICE" --dtype "$DTYPE" \
    --agree-sweep "$AGREES" --vs-transformers --prompts-file "$WORK/bench-prompts.jsonl" \
    --max-tokens "$BENCH_TOKENS" --repeats "$BENCH_REPEATS" --json
fi

# ---- the other GPU tests, last: they get whatever time is left
for t in "${GPU_TESTS[@]:1}"; do test_step "$t" "$LIMIT_TESTS"; done

# ---- report: records, markdown, summary line (last)
command="bash benchmarks/gpu.sh"
if [ "$MODE" = cpu ]; then command+=" --cpu"; fi
summary=$("$PY" benchmarks/gpu_report.py --work "$WORK" --out "$OUTDIR" --mode "$MODE" --command "$command" \
  --card "$CARD" --dtype "$DTYPE" --shapes "${SHAPES[*]}" --batches "${BATCHES[*]}" --prompts "${PROMPTS[*]}" \
  --ks "$KS" --drafts "${DRAFTS[*]}" --agrees "$AGREES" --tests "${GPU_TESTS[*]}" \
  --exact-tokens "$EXACT_TOKENS" --bench-prompts "$BENCH_PROMPTS" --bench-tokens "$BENCH_TOKENS" \
  --bench-repeats "$BENCH_REPEATS" --seconds "$((SECONDS - START))" 2>>"$LOG")
rc=$?
if [ -z "$summary" ]; then summary="gpu.sh: report failed (see $LOG); $((SECONDS - START))s"; rc=1; fi
echo "$summary"
exit "$rc"
