"""One vLLM configuration timed on every prompt (benchmarks/peers/vllm.sh step 4), run with the
vLLM environment's Python (never specdec's): one process per configuration, so each start-up is
timed alone and nothing of one engine lingers into the next.

    python benchmarks/peers/vllm_run.py --model DIR --prompts prompts.jsonl --mode greedy|ngram|draft-model
        [--speculative-config JSON] [--dtype float32] [--max-tokens N] [--repeats R] [--enforce-eager]
        [--field key=value ...] --out RUNS.jsonl

prompts.jsonl: vllm_compare.py's lines (`id`, `prompt_ids`). Appends to --out one JSON line per
prompt (batch 1) and, with several prompts, one `batch` line (every prompt in one generate call);
not stdout, which vLLM's own logging writes to.

Figures, and how they compare with specdec's:
  - startup_s: LLM(...) from the call until it returns, ready to serve (loading, torch.compile
    unless --enforce-eager, the KV cache); untimed in specdec's figures, which start loaded.
  - wall_s: the median over --repeats of one generate() call on one prompt, prefill included,
    after one untimed warm-up call; tokens_per_s = tokens / wall_s, as specdec's tokens_per_s.
  - drafts, drafted, accepted: vLLM's own counters (LLM.get_metrics(): vllm:spec_decode_num_drafts,
    _num_draft_tokens, _num_accepted_tokens) over the first repeat. accept_rate = accepted /
    drafted (specdec's accept_rate); tokens_per_round = 1 + accepted / drafts, vLLM's "mean
    acceptance length", which counts the bonus token (specdec's tokens_per_round does too).
  - top2_gaps (greedy only): per generated token, vLLM's top-1 minus top-2 log-probability, from
    one more untimed run: how close a tie was where a text differs from specdec's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "drafted",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}


def counters(llm) -> dict:
    """vLLM's speculation counters now (zero without speculation), summed over engines."""
    out = dict.fromkeys(COUNTERS.values(), 0)
    for m in llm.get_metrics():
        if m.name in COUNTERS:
            out[COUNTERS[m.name]] += m.value
    return out


def timed(llm, prompts: list, params) -> tuple[list, float]:
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return outs, time.perf_counter() - start


def top2_gaps(logprobs) -> list[float | None]:
    """Per generated token: top-1 minus top-2 log-probability (None where fewer than two came)."""
    gaps = []
    for step in logprobs or []:
        ranked = sorted((lp.logprob for lp in step.values()), reverse=True)
        gaps.append(ranked[0] - ranked[1] if len(ranked) > 1 else None)
    return gaps


def run(args, fields: dict) -> list[dict]:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    rows = [json.loads(line) for line in open(args.prompts) if line.strip()]
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    start = time.perf_counter()
    llm = LLM(model=args.model, tokenizer=args.model, dtype=args.dtype, seed=0, max_model_len=args.ctx,
              enforce_eager=args.enforce_eager, speculative_config=spec, disable_log_stats=False)
    startup_s = time.perf_counter() - start
    greedy = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)  # stops at EOS, as specdec does
    prompts = [TokensPrompt(prompt_token_ids=r["prompt_ids"]) for r in rows]  # specdec's ids, not text
    timed(llm, prompts[:1], SamplingParams(temperature=0.0, max_tokens=8))  # warm-up, untimed
    common = {"decoder": "vllm", "vllm": vllm.__version__, "mode": args.mode, "dtype": args.dtype,
              "max_tokens": args.max_tokens, "enforce_eager": args.enforce_eager, "startup_s": startup_s,
              "k": spec and spec.get("num_speculative_tokens"), "speculative_config": spec, **fields}
    out = []
    for r, prompt in zip(rows, prompts):
        before = counters(llm)
        walls, first = [], None
        for _ in range(args.repeats):
            outs, wall = timed(llm, [prompt], greedy)
            walls.append(wall)
            if first is None:
                first, after = outs[0].outputs[0], counters(llm)
        c = {k: after[k] - before[k] for k in after}
        wall = statistics.median(walls)
        row = {**common, "scope": "prompt", "id": r["id"], "prompt_tokens": len(r["prompt_ids"]),
               "tokens": len(first.token_ids), "wall_s": wall, "tokens_per_s": len(first.token_ids) / wall,
               "repeats": args.repeats, **c,
               "accept_rate": c["accepted"] / c["drafted"] if c["drafted"] else None,
               "tokens_per_round": 1 + c["accepted"] / c["drafts"] if c["drafts"] else None,
               "text": first.text, "tokens_out": list(first.token_ids)}
        if args.mode == "greedy":
            outs, _ = timed(llm, [prompt], SamplingParams(temperature=0.0, max_tokens=args.max_tokens, logprobs=2))
            row["top2_gaps"] = top2_gaps(outs[0].outputs[0].logprobs)
        out.append(row)
    if len(prompts) > 1:  # every prompt at once: vLLM's continuous batching, throughput
        before = counters(llm)
        outs, wall = timed(llm, prompts, greedy)
        c = {k: v - before[k] for k, v in counters(llm).items()}
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        out.append({**common, "scope": "batch", "id": f"all {len(prompts)}", "prompts": len(prompts), "tokens": tokens,
                    "wall_s": wall, "tokens_per_s": tokens / wall, **c,
                    "accept_rate": c["accepted"] / c["drafted"] if c["drafted"] else None,
                    "tokens_per_round": 1 + c["accepted"] / c["drafts"] if c["drafts"] else None})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="One vLLM configuration timed on every prompt.")
    ap.add_argument("--model", required=True, help="a transformers folder (vllm_convert.py makes one from GGUF)")
    ap.add_argument("--prompts", required=True, help="vllm_compare.py prompts' output")
    ap.add_argument("--mode", required=True, help="greedy, ngram or draft-model (a label; the config decides)")
    ap.add_argument("--speculative-config", help="vLLM's speculative_config, JSON (none: plain greedy)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096, help="max_model_len")
    ap.add_argument("--enforce-eager", action="store_true", help="skip torch.compile (faster start, slower steps)")
    ap.add_argument("--field", action="append", default=[], help="key=value, added to every line")
    ap.add_argument("--out", required=True, help="JSON lines are appended here")
    args = ap.parse_args()
    fields = dict(f.split("=", 1) for f in args.field)
    rows = run(args, fields)
    with open(args.out, "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return 0


# Workaround 3: the __main__ guard. vLLM's CPU platform starts its engine core in a worker
# process with the `spawn` start method, which imports this file again in the child; without the
# guard the child would build another LLM, which spawns again (vLLM stops it with "An attempt has
# been made to start a new process before the current process has finished its bootstrapping").
if __name__ == "__main__":
    sys.exit(main())
