"""specdec's side of the vLLM peer (benchmarks/peers/vllm.sh), run with specdec's own Python.

    python benchmarks/peers/vllm_compare.py prompts CARD PROMPTS SPECDEC_GREEDY > prompts.jsonl
    python benchmarks/peers/vllm_compare.py compare PROMPTS_JSONL RUNS.jsonl > annotated.jsonl

prompts: each prompt rendered through the card's chat template with specdec's tokenizer (the ids
specdec feeds its model; vLLM is given these ids, not text, so both see the same tokens), with
specdec's greedy tokens and text for it (SPECDEC_GREEDY: `specdec generate -m greedy --json`).
PROMPTS is a --prompts-file (JSON lines with `id` and `prompt`); empty: the README's example.

compare: adds to every vLLM run (vllm_run.py's lines) whether its tokens equal specdec's greedy
and vLLM's own greedy at the same dtype, where they first differ, and why.
"""

from __future__ import annotations

import json
import sys

README = {"id": "readme", "prompt": "Explain what a hash table is."}


def render(card_name: str, prompts_file: str) -> list[dict]:
    """Each prompt as specdec encodes it: {id, prompt, text (templated), prompt_ids}."""
    import transformers

    from specdec_cli.cards.card import load_card
    from specdec_cli.engine.models import parse_ref

    transformers.logging.set_verbosity_error()
    card = load_card(card_name)
    ref = parse_ref(card.target, card.folder)
    tok = transformers.AutoTokenizer.from_pretrained(ref.source, gguf_file=ref.gguf_file)  # as specdec loads it
    chat = bool(tok.chat_template) if card.chat_template == "auto" else card.chat_template
    items = [json.loads(line) for line in open(prompts_file) if line.strip()] if prompts_file else [README]
    out = []
    for p in items:
        msgs = [{"role": "user", "content": p["prompt"]}]
        text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) if chat else p["prompt"]
        ids = tok(text, add_special_tokens=not chat)["input_ids"]  # the ids specdec's encode() gives
        out.append({"id": str(p["id"]), "prompt": p["prompt"], "text": text, "prompt_ids": ids})
    return out


def prompts(card_name: str, prompts_file: str, greedy_file: str) -> list[dict]:
    greedy = {str(r["id"]): r for r in map(json.loads, open(greedy_file)) if "greedy" in r}
    rows = render(card_name, prompts_file)
    for row in rows:
        g = greedy[row["id"]]
        if g["prompt_tokens"] != len(row["prompt_ids"]):  # the same ids, or the comparison means nothing
            raise SystemExit(f"Error: prompt {row['id']}: specdec encoded {g['prompt_tokens']} tokens, "
                             f"the rendering here {len(row['prompt_ids'])}")
        row["specdec_greedy"] = {"tokens": g["greedy"]["tokens"], "text": g["greedy"]["text"], "dtype": g["dtype"]}
    return rows


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The index of the first token where a and b differ (one ending early counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def why(run: dict, against: str, at: int | None, gap: float | None) -> str | None:
    """A short reason for a difference at token `at` (None where there is none)."""
    if at is None:
        return None
    tie = f"; vLLM's top two log-probabilities there differ by {gap:.3g}" if gap is not None else ""
    if against == "specdec":
        if run["dtype"] != "float32":
            return (f"token {at}: vLLM computes in {run['dtype']}, specdec in float32: the rounding moves the "
                    f"greedy choice where the top two logits are close{tie}")
        return (f"token {at}: both float32, but vLLM's CPU kernels (attention, fused matmuls) sum in another order "
                f"than torch's: a near tie decided the other way{tie}")
    if run["dtype"] != "float32":
        return (f"token {at}: in {run['dtype']} vLLM's verify forward (k+1 positions at once) rounds unlike its "
                "one-token greedy steps, so its speculation is not exact; specdec's pinned shapes make every "
                "forward the same shape, so its speculative text is its greedy text in any dtype")
    return f"token {at}: float32 verify and one-token forwards sum in another order: a near tie decided the other way"


def compare(rows: list[dict], runs: list[dict]) -> list[dict]:
    ref = {r["id"]: r["specdec_greedy"]["tokens"] for r in rows}
    own = {(r["card"], r["dtype"], r["id"]): r for r in runs if r.get("mode") == "greedy" and "tokens_out" in r}
    out = []
    for run in runs:
        if "tokens_out" not in run:  # a batch row: no text of its own
            out.append(run)
            continue
        greedy = own.get((run["card"], run["dtype"], run["id"]))
        theirs = run["tokens_out"]
        at = first_difference(theirs, ref[run["id"]]) if run["id"] in ref else None
        gaps = (greedy or {}).get("top2_gaps") or []
        run = {**run, "equals_specdec_greedy": at is None if run["id"] in ref else None, "differs_from_specdec_at": at,
               "why_not_specdec": why(run, "specdec", at, gaps[at] if at is not None and at < len(gaps) else None)}
        if run["mode"] != "greedy" and greedy:
            mine = first_difference(theirs, greedy["tokens_out"])
            run.update(equals_own_greedy=mine is None, differs_from_own_greedy_at=mine,
                       why_not_own_greedy=why(run, "own", mine, None))
        out.append(run)
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "prompts":
        rows = prompts(argv[1], argv[2], argv[3])
    elif len(argv) == 3 and argv[0] == "compare":
        rows = compare([json.loads(x) for x in open(argv[1]) if x.strip()],
                       [json.loads(x) for x in open(argv[2]) if x.strip()])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
