#!/usr/bin/env bash
# Eager against compiled forwards (decoding.compile, docs/kernels.md) on this machine: each
# workload runs eager, then with --compile, back to back, each in its own process, into this
# kind's compile.jsonl; then its page and the summary are regenerated:
#
#     bash benchmarks/compile.sh
#
# Knobs (environment): CARD=smollm2 LIMIT=1 (prompts per category) MAX_TOKENS=128 REPEATS=2
#   README_REPEATS=3 (the README's example at the card's own token budget)
#   DISTILLED_CARD=smollm2-distilled (empty: skip) on the free-text categories, LIMIT each
#   THREADS (set: OMP_NUM_THREADS for every run)
# A compiled process first compiles every width 1..k+1 at one KV capacity (about 150 s for
# SmolLM2-135M on 2 cores), untimed: the figures are steady-state decode speed.
set -euo pipefail
cd "$(dirname "$0")/.."

SPECDEC=${SPECDEC:-.venv/bin/specdec}
PYTHON=${PYTHON:-.venv/bin/python}
CARD=${CARD:-smollm2}
LIMIT=${LIMIT:-1}
MAX_TOKENS=${MAX_TOKENS:-128}
REPEATS=${REPEATS:-2}
README_REPEATS=${README_REPEATS:-3}
DISTILLED_CARD=${DISTILLED_CARD-smollm2-distilled}
THREADS=${THREADS:-}
if [ -n "$THREADS" ]; then export OMP_NUM_THREADS="$THREADS"; fi
B=benchmarks/results/$("$PYTHON" benchmarks/report.py --slug)
mkdir -p "$B"
out="$B/compile.jsonl.tmp"
: > "$out"

twice() {  # the same bench eager, then compiled; each row tagged with its workload
  local workload=$1; shift
  for flag in --no-compile --compile; do
    "$SPECDEC" bench "$@" "$flag" --json \
      | "$PYTHON" -c "import json, sys
for line in sys.stdin:
    row = json.loads(line); row['workload'], row['commit'] = sys.argv[1:]; print(json.dumps(row))" \
        "$workload" "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (modified)')" >> "$out"
  done
}

twice "$CARD, built-in suite" --card "$CARD" --limit "$LIMIT" --max-tokens "$MAX_TOKENS" --repeats "$REPEATS"
echo '{"id": "readme", "prompt": "Explain what a hash table is."}' > "$B/readme-prompt.jsonl"
twice "$CARD, README example" --card "$CARD" --prompts-file "$B/readme-prompt.jsonl" --repeats "$README_REPEATS"
if [ -n "$DISTILLED_CARD" ]; then
  "$PYTHON" benchmarks/suite_prompts.py "$LIMIT" conversation,qa,translation,code > "$B/free-text-prompts.jsonl"
  twice "$DISTILLED_CARD, free text" --card "$DISTILLED_CARD" --prompts-file "$B/free-text-prompts.jsonl" \
      --max-tokens "$MAX_TOKENS" --repeats "$REPEATS"
fi
mv "$out" "$B/compile.jsonl"
"$PYTHON" benchmarks/report.py "$B" > "$B.md.tmp"
mv "$B.md.tmp" "$B.md"
"$PYTHON" benchmarks/summary.py benchmarks/results > benchmarks/RESULTS.md.tmp
mv benchmarks/RESULTS.md.tmp benchmarks/RESULTS.md
echo "wrote $B/compile.jsonl, $B.md and benchmarks/RESULTS.md" >&2
