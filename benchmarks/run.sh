#!/usr/bin/env bash
# Measures this machine and writes its kind's results: the raw JSON/CSV, the sweep plot and
# machine.json into benchmarks/results/<cpu-slug>/ (the slug from the CPU model name), that kind's
# page benchmarks/results/<cpu-slug>.md, and then benchmarks/RESULTS.md, the summary across every
# kind's folder present:
#
#     bash benchmarks/run.sh
#
# The single source of truth for those pages. Knobs (environment), defaults sized for a small CPU:
#   CARD=smollm2 LIMIT=1 (prompts per category) MAX_TOKENS=128 REPEATS=2 SWEEP_REPEATS=1 SWEEP_KS=2,4,8
#   THREADS (unset: torch's default; set: OMP_NUM_THREADS for both runs, e.g. 1 on a CPU shared
#   with other jobs, where two threads stall each other at every parallel region)
#   DISTILLED_CARD=smollm2-distilled (empty: skip) on the free-text categories, LIMIT each
#   PAIR_CARD=qwen2.5-coder-1.5b (empty: skip; skipped too when its files are not fetched) on the
#   suite's code prompts, PAIR_MAX_TOKENS=96, PAIR_REPEATS=1, with --vs-transformers; then the
#   whole suite, PAIR_SUITE_LIMIT=1 prompts per category (empty: skip)
#   BATCH=8 (empty: skip) the card at --batch 1 and --batch BATCH over BATCH_LIMIT=3 prompts per
#   category, then every prompt of the suite at --batch BATCH for each k in BATCH_KS=1,4,8 (rows
#   checked against batch-1 greedy), then a soak: SOAK_PROMPTS=200 requests of SOAK_MAX_TOKENS=32
#   through generate --batch
#   PAIR_EXACT_TOKENS (unset: keep the kind's pair-exact.jsonl as it is; about 40 CPU-minutes at 48)
#   verify-exactness of PAIR_CARD over the whole suite at k = 1,2,4,8, at most that many tokens,
#   with --matmuls all (every verify width weight-major: covers any choice a profile makes)
#   README_REPEATS=5: the README's first example (default card) timed greedy vs speculative
#   BF16=1 (empty: skip) the card over the suite and DISTILLED_CARD on free text in bfloat16 (pinned
#   shapes), against the faster of pinned and free-shape greedy
#   PEERS (unset: skip; a comma list of llamacpp, vllm, e.g. PEERS=llamacpp,vllm) the peers on the
#   README's example, each into the kind's <peer>.jsonl: llama.cpp (benchmarks/peers/llamacpp.sh, at
#   LLAMACPP_QUANTS="f32 bf16 native": its QUANTS);
#   vLLM on the CPU (benchmarks/peers/vllm.sh: float32 and bfloat16, greedy and its own speculation,
#   one process each, every start-up 1-2 min on 2 cores), then on the suite, VLLM_SUITE_LIMIT=LIMIT
#   prompts per category (empty: skip; four more start-ups), and PAIR_CARD on the README's example
#   when fetched. A peer that fails or cannot be installed still lets the pages be written, then
#   ends the script non-zero
# Compiled forwards (decoding.compile) against eager ones: benchmarks/compile.sh, run on its own.
# e.g. on a quiet or GPU machine: LIMIT=3 REPEATS=5 SWEEP_REPEATS=3 bash benchmarks/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SPECDEC=${SPECDEC:-.venv/bin/specdec}
PYTHON=${PYTHON:-.venv/bin/python}
CARD=${CARD:-smollm2}
LIMIT=${LIMIT:-1}
MAX_TOKENS=${MAX_TOKENS:-128}
REPEATS=${REPEATS:-2}
SWEEP_REPEATS=${SWEEP_REPEATS:-1}
SWEEP_KS=${SWEEP_KS:-2,4,8}
THREADS=${THREADS:-}
DISTILLED_CARD=${DISTILLED_CARD-smollm2-distilled}
PAIR_CARD=${PAIR_CARD-qwen2.5-coder-1.5b}
PAIR_MAX_TOKENS=${PAIR_MAX_TOKENS:-96}
PAIR_REPEATS=${PAIR_REPEATS:-1}
PAIR_SUITE_LIMIT=${PAIR_SUITE_LIMIT-1}
PAIR_EXACT_TOKENS=${PAIR_EXACT_TOKENS:-}
BATCH=${BATCH-8}
BATCH_LIMIT=${BATCH_LIMIT:-3}
BATCH_KS=${BATCH_KS:-1,4,8}
SOAK_PROMPTS=${SOAK_PROMPTS:-200}
SOAK_MAX_TOKENS=${SOAK_MAX_TOKENS:-32}
README_REPEATS=${README_REPEATS:-5}
PEERS=${PEERS:-}
VLLM_SUITE_LIMIT=${VLLM_SUITE_LIMIT-$LIMIT}
for peer in ${PEERS//,/ }; do  # a misspelt peer stops the script now, not after an hour of runs
  case "$peer" in llamacpp|vllm) ;; *) echo "Error: PEERS: unknown peer '$peer' (llamacpp, vllm)" >&2; exit 2 ;; esac
done
BF16=${BF16-1}
if [ -n "$THREADS" ]; then export OMP_NUM_THREADS="$THREADS"; fi
command="${THREADS:+THREADS=$THREADS }DISTILLED_CARD=$DISTILLED_CARD PAIR_CARD=$PAIR_CARD PAIR_MAX_TOKENS=$PAIR_MAX_TOKENS PAIR_REPEATS=$PAIR_REPEATS PAIR_SUITE_LIMIT=$PAIR_SUITE_LIMIT CARD=$CARD LIMIT=$LIMIT MAX_TOKENS=$MAX_TOKENS REPEATS=$REPEATS SWEEP_REPEATS=$SWEEP_REPEATS SWEEP_KS=$SWEEP_KS BATCH=$BATCH BATCH_LIMIT=$BATCH_LIMIT BATCH_KS=$BATCH_KS ${PAIR_EXACT_TOKENS:+PAIR_EXACT_TOKENS=$PAIR_EXACT_TOKENS }SOAK_PROMPTS=$SOAK_PROMPTS SOAK_MAX_TOKENS=$SOAK_MAX_TOKENS README_REPEATS=$README_REPEATS BF16=$BF16 ${PEERS:+PEERS=$PEERS }${VLLM_SUITE_LIMIT:+VLLM_SUITE_LIMIT=$VLLM_SUITE_LIMIT }bash benchmarks/run.sh"
# this machine's kind: every file below goes into its folder; machine.json (the CPU model, vendor,
# cores, torch's BLAS, versions, commit, date and the command) is recorded now, before any run
RESULTS=benchmarks/results
B=$RESULTS/$("$PYTHON" benchmarks/report.py --slug)
mkdir -p "$B"
"$PYTHON" benchmarks/report.py --machine "$command" > "$B/machine.json.tmp"

common=(--card "$CARD" --limit "$LIMIT" --max-tokens "$MAX_TOKENS")
# 0. plan's predictions for the configurations 1 and 2 measure (the card's draft and each synthetic
#    a, every k, every schedule), made first and before any timed run. Its --remeasure measures
#    this machine's cost profile afresh at the widest verify any section needs (the sweep's largest
#    k + 1); every later section reads that one profile from the cache, so plan's predictions,
#    bench's and the schedule's choices all price rounds alike (a section that needed a wider
#    profile would measure a second one, and two measurements minutes apart differ by tens of %)
AGREES=$("$PYTHON" -c "from specdec_cli.cli.requests import AGREE_SWEEP; print(' '.join(f'-d synthetic:agree={a}' for a in AGREE_SWEEP.split(',')))")
CARD_K=$("$PYTHON" -c "from specdec_cli.cards.card import load_card; print(load_card('$CARD').k)")
"$SPECDEC" plan "${common[@]}" -k "$SWEEP_KS,$CARD_K" --remeasure --json > "$B/plan.jsonl.tmp"
# shellcheck disable=SC2086
"$SPECDEC" plan "${common[@]}" -k "$SWEEP_KS" $AGREES --json >> "$B/plan.jsonl.tmp"
# 1. the card's draft vs greedy per category, and transformers' own generate beside ours
"$SPECDEC" bench "${common[@]}" --repeats "$REPEATS" --vs-transformers \
    --json --csv "$B/bench.csv" > "$B/bench.jsonl.tmp"
# 2. the synthetic agreement sweep at several k, the card's draft as the extra row, and the plot
"$SPECDEC" bench "${common[@]}" --repeats "$SWEEP_REPEATS" --agree-sweep --k-sweep "$SWEEP_KS" \
    --plot "$B/agreement-sweep.png" --json --csv "$B/sweep.csv" > "$B/sweep.jsonl.tmp"
# 3. extra cards on the categories they are for: their prompts come from the built-in suite
suite() {  # the first N prompts (all if N is empty) of the given categories, as JSON lines
  "$PYTHON" benchmarks/suite_prompts.py "$1" "$2"
}
rm -f "$B/distilled.jsonl.tmp" "$B/pair.jsonl.tmp" "$B/pair-suite.jsonl.tmp"
if [ -n "$DISTILLED_CARD" ]; then
  suite "$LIMIT" conversation,qa,translation,code > "$B/free-text-prompts.jsonl"
  "$SPECDEC" bench --card "$DISTILLED_CARD" --prompts-file "$B/free-text-prompts.jsonl" --max-tokens "$MAX_TOKENS" \
      --repeats "$REPEATS" --json > "$B/distilled.jsonl.tmp"
fi
if [ -n "$PAIR_CARD" ] && "$PYTHON" -c "from specdec_cli.cards.card import load_card; from specdec_cli.pair.loading import check_before_load
check_before_load(load_card('$PAIR_CARD'))" 2>/dev/null; then  # its files are fetched
  suite "" code > "$B/code-prompts.jsonl"
  "$SPECDEC" bench --card "$PAIR_CARD" --prompts-file "$B/code-prompts.jsonl" --max-tokens "$PAIR_MAX_TOKENS" \
      --repeats "$PAIR_REPEATS" --vs-transformers --json > "$B/pair.jsonl.tmp"
  if [ -n "$PAIR_SUITE_LIMIT" ]; then
    "$SPECDEC" bench --card "$PAIR_CARD" --limit "$PAIR_SUITE_LIMIT" --max-tokens "$PAIR_MAX_TOKENS" \
        --repeats "$PAIR_REPEATS" --json > "$B/pair-suite.jsonl.tmp"
  fi
  if [ -n "$PAIR_EXACT_TOKENS" ]; then
    "$SPECDEC" verify-exactness --card "$PAIR_CARD" --matmuls all -k 1,2,4,8 -n "$PAIR_EXACT_TOKENS" --json \
      > "$B/pair-exact.jsonl.tmp"
    mv "$B/pair-exact.jsonl.tmp" "$B/pair-exact.jsonl"
  fi
fi
# 4. batching: the same prompts at --batch 1 and --batch BATCH (throughput over the whole run),
#    then the soak: SOAK_PROMPTS requests through generate --batch, peak RSS on every output line
rm -f "$B/batch.jsonl.tmp" "$B/batch-exact.jsonl.tmp" "$B/soak.jsonl.tmp"
if [ -n "$BATCH" ]; then
  for n in 1 "$BATCH"; do
    "$SPECDEC" bench --card "$CARD" --limit "$BATCH_LIMIT" --max-tokens "$MAX_TOKENS" --repeats 1 --batch "$n" \
        --json >> "$B/batch.jsonl.tmp"
  done
  "$SPECDEC" bench --card "$CARD" --max-tokens "$MAX_TOKENS" --repeats 1 --batch "$BATCH" --k-sweep "$BATCH_KS" \
      --json > "$B/batch-exact.jsonl.tmp"
  "$PYTHON" -c "import json, sys; from specdec_cli.cards.prompts import SUITE
for i in range(int(sys.argv[1])):
    p = SUITE[i % len(SUITE)]; print(json.dumps({'id': f'soak-{i}', 'prompt': f'Request {i}. {p.text}'}))" \
      "$SOAK_PROMPTS" > "$B/soak-prompts.jsonl"
  "$SPECDEC" generate --card "$CARD" --prompts-file "$B/soak-prompts.jsonl" --batch "$BATCH" \
      --max-tokens "$SOAK_MAX_TOKENS" --mode spec --json > "$B/soak.jsonl.tmp"
fi
# 5. the README's first example (the default card, its token budget), greedy and speculative back to back
echo '{"id": "readme", "prompt": "Explain what a hash table is."}' > "$B/readme-prompt.jsonl"
"$SPECDEC" bench --prompts-file "$B/readme-prompt.jsonl" --repeats "$README_REPEATS" --json > "$B/readme.jsonl.tmp"
# 6. bfloat16 (pinned shapes: bitwise-exact): the card over the suite and the distilled card on free
#    text, speculative against the faster of pinned and free-shape greedy (BF16= skips)
rm -f "$B/bf16.jsonl.tmp"
if [ -n "$BF16" ]; then
  "$SPECDEC" bench "${common[@]}" --dtype bfloat16 --repeats 1 --json > "$B/bf16.jsonl.tmp"
  if [ -n "$DISTILLED_CARD" ]; then
    "$SPECDEC" bench --card "$DISTILLED_CARD" --prompts-file "$B/free-text-prompts.jsonl" --max-tokens "$MAX_TOKENS" \
        --dtype bfloat16 --repeats 1 --json >> "$B/bf16.jsonl.tmp"
  fi
fi
mv "$B/machine.json.tmp" "$B/machine.json"
mv "$B/bench.jsonl.tmp" "$B/bench.jsonl"
mv "$B/sweep.jsonl.tmp" "$B/sweep.jsonl"
mv "$B/plan.jsonl.tmp" "$B/plan.jsonl"
for f in distilled pair pair-suite batch batch-exact soak readme bf16; do if [ -f "$B/$f.jsonl.tmp" ]; then mv "$B/$f.jsonl.tmp" "$B/$f.jsonl"; else rm -f "$B/$f.jsonl"; fi; done

# 7. PEERS: each peer beside specdec on the README's example (section 5's prompt, the default card
#    and its token budget), into the kind's <peer>.jsonl (kept as it is when PEERS does not name it):
#    llama.cpp (PAIR_CARD too when fetched; the first run builds it: benchmarks/peers/llamacpp.sh
#    says how, and its knobs); vLLM (the first run installs it into its own venv: benchmarks/peers/vllm.sh)
#    at README_REPEATS, then on the suite's first VLLM_SUITE_LIMIT prompts per category at MAX_TOKENS
#    and REPEATS (beside bench.jsonl's), then PAIR_CARD on the README's example: each a vllm.sh run of
#    its own, so a failing one stops the next but keeps the lines of those before it
peers_failed="" peers_rc=0  # a failure here still lets the page below be written, then ends the script with it
failed() { peers_failed+=" $1 (exit $2)"; if [ "$peers_rc" = 0 ]; then peers_rc=$2; fi; }
if [ -n "$PEERS" ]; then
  readme_card=$("$PYTHON" -c "from specdec_cli.cli.options import DEFAULT_CARD; print(DEFAULT_CARD)")
  readme_tokens=$("$PYTHON" -c "from specdec_cli.cards.card import load_card; print(load_card('$readme_card').max_tokens)")
fi
vllm_part() {  # NAME CARD REPEATS PROMPTS TOKENS: one vllm.sh run into $B/vllm-NAME.jsonl.tmp, none if it fails
  CARD=$2 PAIR_CARD="" REPEATS=$3 bash benchmarks/peers/vllm.sh --prompts-file "$4" --max-tokens "$5" \
      "$B/vllm-$1.jsonl.tmp" || { local rc=$?; rm -f "$B/vllm-$1.jsonl.tmp"; return "$rc"; }
}
vllm_peer() {  # the vLLM runs above into $B/vllm.jsonl (those done before a failure); non-zero if one failed
  local rc=0 parts=() part
  rm -f "$B"/vllm-*.jsonl.tmp
  vllm_part readme "$readme_card" "$README_REPEATS" "$B/readme-prompt.jsonl" "$readme_tokens" || rc=$?
  if [ "$rc" = 0 ] && [ -n "$VLLM_SUITE_LIMIT" ]; then
    "$PYTHON" benchmarks/suite_prompts.py "$VLLM_SUITE_LIMIT" > "$B/vllm-suite-prompts.jsonl"  # every category
    vllm_part suite "$CARD" "$REPEATS" "$B/vllm-suite-prompts.jsonl" "$MAX_TOKENS" || rc=$?
  fi
  if [ "$rc" = 0 ] && [ -n "$PAIR_CARD" ]; then  # vllm.sh skips a card whose files are not fetched
    vllm_part pair "$PAIR_CARD" "$README_REPEATS" "$B/readme-prompt.jsonl" "$readme_tokens" || rc=$?
  fi
  for part in readme suite pair; do if [ -f "$B/vllm-$part.jsonl.tmp" ]; then parts+=("$B/vllm-$part.jsonl.tmp"); fi; done
  if [ ${#parts[@]} -gt 0 ]; then cat "${parts[@]}" > "$B/vllm.jsonl"; fi
  rm -f "$B"/vllm-*.jsonl.tmp
  return "$rc"
}
for peer in ${PEERS//,/ }; do
  case "$peer" in
    llamacpp) CARD=$readme_card PAIR_CARD=$PAIR_CARD QUANTS=${LLAMACPP_QUANTS:-f32 bf16 native} \
                bash benchmarks/peers/llamacpp.sh --prompts-file "$B/readme-prompt.jsonl" \
                  --max-tokens "$readme_tokens" "$B/llamacpp.jsonl" || failed llamacpp $? ;;
    vllm) vllm_peer || failed vllm $? ;;
  esac
done
# 8. this kind's page from its folder, then the summary from every kind's folder
"$PYTHON" benchmarks/report.py "$B" > "$B.md.tmp"
mv "$B.md.tmp" "$B.md"
"$PYTHON" benchmarks/summary.py "$RESULTS" > benchmarks/RESULTS.md.tmp
mv benchmarks/RESULTS.md.tmp benchmarks/RESULTS.md
echo "wrote $B/, $B.md and benchmarks/RESULTS.md" >&2
if [ -n "$peers_failed" ]; then
  echo "run.sh: PEERS failed:$peers_failed; a peer's $B/<peer>.jsonl is from an earlier run where that run wrote nothing" >&2
  exit "$peers_rc"
fi
