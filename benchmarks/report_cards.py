"""The other cards' sections: the distilled draft on free text (distilled.jsonl) and the real
two-model pair on code (pair.jsonl), over the whole suite (pair-suite.jsonl) and its exactness
there (pair-exact.jsonl), each with what it measured for the closing note.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from report_common import Folder, bench_rows, column_table, f, overall_row, rounding_note, table

from specdec_cli.eval import columns as c

PAIR_CARD_NAME = "qwen2.5-coder-1.5b"


def weights_metadata(card_draft: str) -> dict:
    """What `specdec distill` recorded in the shipped weights (command, prompts, time, held-out α)."""
    try:
        from safetensors import safe_open

        path = Path(__file__).resolve().parent.parent / "cards" / "weights" / f"{card_draft}.safetensors"
        with safe_open(str(path), "pt") as weights:
            return weights.metadata() or {}
    except Exception:  # no safetensors, no file: the section just says less
        return {}


def distilled_section(folder: Folder) -> list[str]:
    spec = bench_rows(folder.rows("distilled"), "category", "all")
    if not spec:
        return []
    meta = weights_metadata(spec[0]["card"])
    made = ""
    if meta:
        threads = f"{meta['threads']} threads, " if "threads" in meta else ""
        cpu = f"on {meta['cpu']}" if "cpu" in meta else "the weights do not name the CPU"
        data = (f" ({float(meta['data_seconds']) / 60:.1f} min making data in that run; it reuses batches already in "
                f"the cache)") if "data_seconds" in meta else ""
        made = (f" The draft was made by `{meta.get('command')}` ({threads}{cpu}): prompts "
                f"from {meta.get('prompts_source')} ({meta.get('prompts')} used; none from the benchmark suite), "
                f"{int(meta.get('tokens', 0)):,} tokens of the target's own greedy answers{data}, the weights of training step {meta.get('steps')} "
                f"({float(meta.get('train_seconds', 0)) / 60:.1f} min of training); held-out teacher-forced "
                f"acceptance by draft position {', '.join(f'{a:.2f}' for a in json.loads(meta.get('alpha', '[]')))} "
                f"({meta.get('heldout')} held-out prompts).")
    return ["", f"## `{spec[0]['card']}`: a distilled features draft on free text", "",
            f"Draft `{spec[0]['draft']}`, k = {spec[0]['k']}, on the suite's conversation, qa, translation and code "
            f"prompts (the first `LIMIT` of each).{made}", "", column_table(c.CATEGORY_TABLE, spec)]


def distilled_closing(folder: Folder) -> list[str]:
    d = overall_row(folder.rows("distilled"))
    if not d:
        return []
    return [f"- `{d['card']}` on free text: {f(d['speedup'], '.2f', 'x')}, draft cost c = {f(d['draft_cost'])} target "
            f"steps, acceptance {f(d['accept_rate'] and 100 * d['accept_rate'], '.1f', ' %')}."]


PAIR_TABLE = (c.PROMPT, c.TOKENS, c.DRAFTED_PER_ROUND, c.ACCEPT_RATE, c.TOKENS_PER_ROUND,
              replace(c.GREEDY_TOKENS_PER_S, spec=".2f"), replace(c.TOKENS_PER_S, spec=".2f"),  # a slow pair: 2 places
              c.SPEEDUP, c.PREDICTED_SPEEDUP, c.IDENTICAL)


def pair_peak_gb(rows: list[dict]) -> float:
    """The process's peak resident memory with the pair loaded."""
    return max((r.get("peak_rss_mb") or 0 for r in rows), default=0) / 1024


def pair_section(folder: Folder) -> list[str]:
    rows = folder.rows("pair")
    spec = bench_rows(rows, "prompt", "all")
    if not spec:
        return []
    peers = [r for r in rows if r["row"] == "transformers" and r["scope"] == "all"]
    first = spec[0]
    lines = ["", f"## `{first['card']}`: a real two-model pair (Qwen2.5-Coder 0.5B drafting for 1.5B)", "",
             f"Draft `{first['draft']}`, k = {first['k']}, {first['device']} {first['dtype']} target, on the suite's "
             f"code prompts, at most {first['max_tokens']} new tokens, median of {first['repeats']}. Per prompt, "
             f"then overall (`c` = the draft's measured cost per token in target steps: {f(first['draft_cost'])}). "
             f"Peak resident memory of the process with the pair loaded: **{pair_peak_gb(rows):.1f} GB**.", "",
             column_table(PAIR_TABLE, spec)]
    if peers:
        lines += ["", "Against transformers' assisted generation (`assistant_model` = the same draft weights, fixed k)."
                  + rounding_note(peers), "", column_table(c.PEER_TABLE, peers)]
    return lines


def pair_closing(folder: Folder) -> list[str]:
    rows = folder.rows("pair")
    p = overall_row(rows)
    if not p:
        return []
    hf = next((r for r in rows if r["row"] == "transformers" and r["scope"] == "all" and r["mode"] == "assisted"), None)
    return [f"- `{p['card']}` on code: {f(p['speedup'], '.2f', 'x')}"
            + (f"; vs transformers' assisted generation {f(hf['ratio'], '.2f', 'x')}" if hf else "")
            + f"; peak RSS {pair_peak_gb(rows):.1f} GB."]


def pair_suite_section(folder: Folder) -> list[str]:
    spec = bench_rows(folder.rows("pair-suite"), "category", "all")
    if not spec:
        return []
    first = spec[0]
    return ["", "### The pair over the whole suite", "",
            f"The same card on the first `PAIR_SUITE_LIMIT` prompts of every category of the built-in suite "
            f"(`pair-suite.jsonl`), at most {first['max_tokens']} new tokens, median of {first['repeats']}.",
            "", column_table(c.CATEGORY_TABLE, spec)]


def pair_suite_closing(folder: Folder) -> list[str]:
    overall = overall_row(folder.rows("pair-suite"))
    if not overall:
        return []
    return [f"- `{overall['card']}` over the whole suite ({overall['prompts']} prompts): "
            f"{f(overall['speedup'], '.2f', 'x')}, identical: {'yes' if overall['identical'] else 'NO'}."]


def pair_exact_counts(rows: list[dict]) -> dict[int, tuple[int, int]]:
    """verify-exactness lines: k -> (identical, checked)."""
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        if "k" in r and "identical" in r:
            same, n = out.get(r["k"], (0, 0))
            out[r["k"]] = (same + bool(r["identical"]), n + 1)
    return dict(sorted(out.items()))


def pair_exact_section(folder: Folder) -> list[str]:
    rows = folder.rows("pair-exact")
    counts = pair_exact_counts(rows)
    if not counts:
        return []
    ks = sorted(counts)
    longest = max(len(r["greedy_tokens"]) for r in rows if "greedy_tokens" in r)
    tokens = sum(len(r["greedy_tokens"]) for r in rows if r.get("k") == ks[0])
    prompts = len({r["id"] for r in rows if "id" in r})
    body = [[str(k), f"{same}/{n}"] for k, (same, n) in counts.items()]
    return ["", "### Exactness of the pair over the whole suite", "",
            f"`SPECDEC_WEIGHT_MAJOR=all specdec verify-exactness -c {PAIR_CARD_NAME} -k {','.join(map(str, ks))} "
            f"-n {longest} --json` (`pair-exact.jsonl`; about 40 CPU-minutes, so `run.sh` keeps the file it "
            f"finds unless `PAIR_EXACT_TOKENS` is set): all {prompts} built-in prompts, {tokens} greedy tokens per k, each "
            "speculative decode compared token for token with the target's greedy decode. `all` makes every verify "
            "width take the weight-major matmul (kernels.py) whatever the cost profile would choose; a width's output "
            "depends only on its own form, so this covers every choice.", "",
            table(["k", "identical"], body)]


def pair_exact_closing(folder: Folder) -> list[str]:
    counts = pair_exact_counts(folder.rows("pair-exact"))
    if not counts:
        return []
    same, n = sum(x[0] for x in counts.values()), sum(x[1] for x in counts.values())
    return [f"- `{PAIR_CARD_NAME}` exactness over the suite at k = {', '.join(map(str, counts))}: **{same}/{n}** identical."]
