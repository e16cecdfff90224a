"""Batching: `--batch N` against `--batch 1` (batch.jsonl), the soak through `generate --batch N`
(soak.jsonl) and every prompt of the suite at `--batch N` (batch-exact.jsonl), each with what it
measured for the closing note.
"""

from __future__ import annotations

from dataclasses import replace

from report_common import Folder, bench_rows, column_table, f

from specdec_cli.eval import columns as c
from specdec_cli.eval.columns import Column

SPEC_OVER_GREEDY = replace(c.SPEEDUP, header="spec/greedy")


def batch_overall(rows: list[dict]) -> dict[int, dict]:
    """batch size -> the overall bench row of that run; empty unless batch 1 and a larger one ran."""
    runs = {r.get("batch", 1): r for r in bench_rows(rows, "all")}
    return runs if 1 in runs and len(runs) >= 2 else {}


def soak_growth(soak: list[dict]) -> tuple[float, float, int] | None:
    """(peak RSS after the first quarter of the soak's lines, after the last, lines): a leak grows it."""
    lines = [r for r in soak if "peak_rss_mb" in r and "summary" not in r]
    if len(lines) < 4:
        return None
    return lines[len(lines) // 4 - 1]["peak_rss_mb"], lines[-1]["peak_rss_mb"], len(lines)


def batch_table(one: dict) -> tuple[Column, ...]:
    """A row here is one batch size's overall row; `one` is batch 1's."""
    return (Column("batch", lambda r: r["batch"]), c.PROMPTS, c.TOKENS, c.GREEDY_TOKENS_PER_S, c.TOKENS_PER_S,
            SPEC_OVER_GREEDY,
            Column("greedy vs batch 1", lambda r: r["greedy_tokens_per_s"] / one["greedy_tokens_per_s"], ".2f", "x"),
            Column("spec vs batch 1", lambda r: r["tokens_per_s"] / one["tokens_per_s"], ".2f", "x"),
            c.TOKENS_PER_ROUND, Column("peak RSS", lambda r: (r.get("peak_rss_mb") or 0) / 1024, ".2f", " GB"),
            c.IDENTICAL)


def batch_section(folder: Folder) -> list[str]:
    runs, soak = batch_overall(folder.rows("batch")), folder.rows("soak")
    if not runs:
        return []
    one, n = runs[1], max(runs)
    lines = ["", f"## Batching: `--batch {n}` against `--batch 1`", "",
             f"Card `{one['card']}` ({one['draft']}, k = {one['k']}), the first `BATCH_LIMIT` prompts of each category "
             f"({one['prompts']} prompts), at most {one['max_tokens']} new tokens, one timed pass per mode after a "
             "warm-up. Throughput is tokens over the whole pass's wall time (continuous batching over the prompts). "
             "Each speculative verify `[rows, n >= 2]` takes the matmul form the cost profile measured fastest for it "
             "(`kernels.py`: F.linear, W @ xᵀ or oneDNN's prepacked weights); the batched greedy step `[rows, 1]` is "
             "torch's F.linear, like every greedy step. "
             "`identical`: every row equals that prompt's batch-1 greedy decode.", "",
             column_table(batch_table(one), [{**r, "batch": size} for size, r in sorted(runs.items())])]
    growth = soak_growth(soak)
    if growth:
        first, last, count = growth
        lines += ["", f"Soak: {count} requests (the suite's prompts, numbered) of at most "
                  f"{max(len(r['spec']['tokens']) for r in soak if 'spec' in r)} tokens through `generate --batch {n} "
                  f"--mode spec`: peak RSS {first:.0f} MB after the first quarter of the output lines, {last:.0f} MB "
                  f"after the last ({last - first:+.0f} MB)."]
    return lines


def batch_closing(folder: Folder) -> list[str]:
    runs = batch_overall(folder.rows("batch"))
    if not runs:
        return []
    one, n = runs[1], max(runs)
    many = runs[n]
    lines = [f"- `--batch {n}` throughput vs `--batch 1`: greedy "
             f"**{f(many['greedy_tokens_per_s'] / one['greedy_tokens_per_s'], '.2f', 'x')}**, speculative "
             f"**{f(many['tokens_per_s'] / one['tokens_per_s'], '.2f', 'x')}**; speculative vs greedy at "
             f"batch {n}: **{f(many['speedup'], '.2f', 'x')}**; every row identical to batch-1 greedy: "
             f"{'yes' if many['identical'] else '**no**'}; peak RSS {(many.get('peak_rss_mb') or 0) / 1024:.2f} GB."]
    growth = soak_growth(folder.rows("soak"))
    if growth:
        lines.append(f"- Soak, {growth[2]} requests at batch {n}: peak RSS {growth[0]:.0f} → {growth[1]:.0f} MB.")
    return lines


def batch_exact_runs(rows: list[dict]) -> list[tuple[dict, int, int]]:
    """Per k: (the overall row, rows identical to batch-1 greedy, rows)."""
    out = []
    for total in sorted(bench_rows(rows, "all"), key=lambda r: r["k"]):
        prompts = [r for r in bench_rows(rows, "prompt") if r["k"] == total["k"]]
        out.append((total, sum(bool(r["identical"]) for r in prompts), len(prompts)))
    return out


BATCH_EXACT_TABLE = (c.K, c.PROMPTS, c.TOKENS, c.GREEDY_TOKENS_PER_S, c.TOKENS_PER_S, SPEC_OVER_GREEDY,
                     c.TOKENS_PER_ROUND, Column("identical", lambda r: f"{r['rows_identical']}/{r['rows']}"))


def batch_exact_section(folder: Folder) -> list[str]:
    runs = batch_exact_runs(folder.rows("batch-exact"))
    if not runs:
        return []
    first = runs[0][0]
    return ["", f"### Every prompt of the suite at `--batch {first['batch']}`, k = {', '.join(str(r['k']) for r, _, _ in runs)}", "",
            f"Card `{first['card']}` ({first['draft']}), all {first['prompts']} built-in prompts, at most {first['max_tokens']} "
            "new tokens, one timed pass per k beside one batched greedy pass; every row compared with that prompt's "
            "batch-1 greedy decode (`identical`: rows equal / rows).", "",
            column_table(BATCH_EXACT_TABLE, [{**r, "rows_identical": same, "rows": n} for r, same, n in runs])]


def batch_exact_closing(folder: Folder) -> list[str]:
    runs = batch_exact_runs(folder.rows("batch-exact"))
    if not runs:
        return []
    same, n = sum(x[1] for x in runs), sum(x[2] for x in runs)
    ks = ", ".join(str(r["k"]) for r, _, _ in runs)
    return [f"- Batch {runs[0][0]['batch']} over the whole suite at k = {ks}: **{same}/{n}** rows identical to batch-1 greedy; "
            f"speculative vs greedy at that batch {', '.join(f(r['speedup'], '.2f', 'x') for r, _, _ in runs)}."]
