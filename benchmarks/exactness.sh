#!/usr/bin/env bash
# Exactness in bfloat16 (and float16): verify-exactness --bitwise with pinned shapes, and the same
# run in free shapes beside it (the contrast), for each card, at --batch 1 and --batch BATCH:
#
#     bash benchmarks/exactness.sh
#
# Writes exactness.jsonl (one verify-exactness record per line, tagged with card, dtype, batch and
# the shapes asked for) into this machine kind's folder, benchmarks/results/<cpu-slug>/ (with a
# machine.json when the folder has none yet); report.py turns it into that kind's page's exactness
# section (python benchmarks/report.py DIR > DIR.md, or the next bash benchmarks/run.sh).
# Knobs (environment), sized for a 2-core CPU (about 40 min at the defaults):
#   CARDS="smollm2 smollm2-distilled smollm2-early-exit"  SUITE_CARD (default: the first) runs the
#   whole suite, the others LIMIT prompts per category; DTYPES="bfloat16"; KS=1,2,4,8; TOKENS=64; BATCH=8;
#   FREE=1 (0: skip the free-shape contrast); LIMIT=1; APPEND=1 adds to the records there (those of a
#   run cut short, else exactness.jsonl), with CARDS naming the cards still to do. A draft that cannot batch (features) runs --batch 1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
SPECDEC=${SPECDEC:-.venv/bin/specdec}
PYTHON=${PYTHON:-.venv/bin/python}
CARDS=${CARDS:-smollm2 smollm2-distilled smollm2-early-exit}
DTYPES=${DTYPES:-bfloat16}
KS=${KS:-1,2,4,8}
TOKENS=${TOKENS:-64}
BATCH=${BATCH:-8}
FREE=${FREE:-1}
LIMIT=${LIMIT:-1}
B=benchmarks/results/$("$PYTHON" benchmarks/report.py --slug)  # this machine's kind
mkdir -p "$B"
command="CARDS=\"$CARDS\" DTYPES=\"$DTYPES\" KS=$KS TOKENS=$TOKENS BATCH=$BATCH FREE=$FREE LIMIT=$LIMIT bash benchmarks/exactness.sh"
[ -f "$B/machine.json" ] || "$PYTHON" benchmarks/report.py --machine "$command" > "$B/machine.json"
out="$B/exactness.jsonl.tmp"
if [ -z "${APPEND:-}" ]; then : > "$out"
elif [ ! -f "$out" ] && [ -f "$B/exactness.jsonl" ]; then cp "$B/exactness.jsonl" "$out"  # APPEND=1: add to the records
fi
"$PYTHON" benchmarks/suite_prompts.py "$LIMIT" > "$B/exactness-prompts.jsonl"
SUITE_CARD=${SUITE_CARD:-${CARDS%% *}}
for card in $CARDS; do
  prompts=()  # SUITE_CARD (the first card): the whole built-in suite; the others: LIMIT per category
  [ "$card" = "$SUITE_CARD" ] || prompts=(--prompts-file "$B/exactness-prompts.jsonl")
  batches=$("$PYTHON" -c "from specdec_cli.cards.card import load_card; from specdec_cli.drafts.registry import get
print(int(get(load_card('$card').draft.kind).draft.batches))")  # 0: a draft that decodes one row at a time
  for dtype in $DTYPES; do
    for shapes in pinned $([ "$FREE" = 1 ] && echo free); do
      for batch in 1 "$BATCH"; do
        [ "$shapes" = free ] && [ "$batch" != 1 ] && continue  # the contrast at batch 1 is enough
        [ "$batch" != 1 ] && [ "$batches" = 0 ] && continue
        tag="{\"card\": \"$card\", \"dtype\": \"$dtype\", \"batch\": $batch, \"threads\": \"${OMP_NUM_THREADS:-default}\"}"
        set +e
        "$SPECDEC" verify-exactness -c "$card" "${prompts[@]}" --dtype "$dtype" --shapes "$shapes" --bitwise \
            --batch "$batch" -k "$KS" -n "$TOKENS" --json 2> >(tail -1 >&2) \
          | "$PYTHON" -c "import json, sys; tag = json.loads(sys.argv[1])
for line in sys.stdin:
    r = json.loads(line); [r.pop(k, None) for k in ('spec_tokens', 'greedy_tokens')]; print(json.dumps({**tag, **r}))" "$tag" \
          >> "$out"
        rc=${PIPESTATUS[0]}
        set -e
        if [ "$rc" -gt 1 ]; then  # 1 = a divergence: the result, recorded; anything else is a failure
          echo "exactness.sh: $card $dtype $shapes --batch $batch: exit $rc" >&2
          exit "$rc"
        fi
      done
    done
  done
done
mv "$out" "$B/exactness.jsonl"
echo "wrote $B/exactness.jsonl" >&2
