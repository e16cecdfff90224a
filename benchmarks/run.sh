#!/usr/bin/env bash
# Regenerates benchmarks/RESULTS.md, the sweep plot and the raw JSON/CSV beside them:
#
#     bash benchmarks/run.sh
#
# The single source of truth for RESULTS.md. Knobs (environment), defaults sized for a small CPU:
#   CARD=smollm2 LIMIT=1 (prompts per category) MAX_TOKENS=128 REPEATS=2 SWEEP_REPEATS=1 SWEEP_KS=2,4,8
#   THREADS (unset: torch's default; set: OMP_NUM_THREADS for both runs, e.g. 1 on a CPU shared
#   with other jobs, where two threads stall each other at every parallel region)
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
B=benchmarks
if [ -n "$THREADS" ]; then export OMP_NUM_THREADS="$THREADS"; fi

common=(--card "$CARD" --limit "$LIMIT" --max-tokens "$MAX_TOKENS")
# 1. the card's draft vs greedy per category, and transformers' own generate beside ours
"$SPECDEC" bench "${common[@]}" --repeats "$REPEATS" --vs-transformers \
    --json --csv "$B/bench.csv" > "$B/bench.jsonl.tmp"
# 2. the synthetic agreement sweep at several k, the card's draft as the extra row, and the plot
"$SPECDEC" bench "${common[@]}" --repeats "$SWEEP_REPEATS" --agree-sweep --k-sweep "$SWEEP_KS" \
    --plot "$B/agreement-sweep.png" --json --csv "$B/sweep.csv" > "$B/sweep.jsonl.tmp"
mv "$B/bench.jsonl.tmp" "$B/bench.jsonl"
mv "$B/sweep.jsonl.tmp" "$B/sweep.jsonl"

command="${THREADS:+THREADS=$THREADS }CARD=$CARD LIMIT=$LIMIT MAX_TOKENS=$MAX_TOKENS REPEATS=$REPEATS SWEEP_REPEATS=$SWEEP_REPEATS SWEEP_KS=$SWEEP_KS bash benchmarks/run.sh"
"$PYTHON" "$B/report.py" "$B/bench.jsonl" "$B/sweep.jsonl" "$B/agreement-sweep.png" "$command" > "$B/RESULTS.md.tmp"
mv "$B/RESULTS.md.tmp" "$B/RESULTS.md"
echo "wrote $B/RESULTS.md" >&2
