"""llama.cpp beside specdec (llamacpp.jsonl, benchmarks/peers/llamacpp.sh) on the README's
prompt, against specdec's own run of that prompt (readme.jsonl).
"""

from __future__ import annotations

from report_common import Folder, column_table, f
from report_machine import UNKNOWN
from report_peers import made_by, other_cpus, ours_for, ratio, same_text, specdec_prompts, specdec_speed

from specdec_cli.eval.columns import Column


def llamacpp_runs(rows: list[dict]) -> list[dict]:
    """benchmarks/peers/llamacpp_parse.py's records (one per llama.cpp run)."""
    return [r for r in rows if r.get("decoder") == "llama.cpp" and "tokens" in r]


def beside(run: dict, ours: dict | None, own_greedy: dict | None) -> dict:
    """One llama.cpp run with what it is compared to: specdec's row for that card and prompt
    (`ours`) and llama.cpp's own greedy run at the same quantisation."""
    return {**run, "ours": ours, "own_greedy": own_greedy, "specdec_tokens_per_s": specdec_speed(run["mode"], ours)}


def over_specdec(r: dict) -> float | None:
    return ratio(r["tokens_per_s_with_prefill"], r["specdec_tokens_per_s"])


# A row here is beside(...)'s.
LLAMACPP_TABLE = (
    Column("card", lambda r: r["card"], numeric=False),
    Column("mode", lambda r: r["mode"], numeric=False),
    Column("quant", lambda r: r["quant"], numeric=False),
    Column("tokens", lambda r: r["tokens"]),
    Column("llama.cpp tok/s", lambda r: r["tokens_per_s"], ".1f"),
    Column("with prefill", lambda r: r["tokens_per_s_with_prefill"], ".1f"),
    Column("accept rate", lambda r: r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"),
    Column("specdec tok/s", lambda r: r["specdec_tokens_per_s"], ".1f"),
    Column("specdec dtype", lambda r: r["ours"] and r["ours"].get("dtype"), numeric=False),
    Column("llama.cpp/specdec", over_specdec, ".2f", "x"),
    Column("same text", lambda r: None if r["mode"] == "greedy"
           else same_text(r.get("text"), r["own_greedy"] and r["own_greedy"].get("text"))),
    Column("= specdec greedy", lambda r: same_text(r.get("text"), r["ours"].get("text"))
           if r["mode"] == "greedy" and r["ours"] else None),
)


def llamacpp_section(folder: Folder) -> list[str]:
    runs = llamacpp_runs(folder.rows("llamacpp"))
    if not runs:
        return []
    ours = specdec_prompts(folder)
    greedy = {(r["card"], r["quant"], r["id"]): r for r in runs if r["mode"] == "greedy"}
    rows = [beside(r, ours_for(r, ours), greedy.get((r["card"], r["quant"], r["id"]))) for r in runs]
    first = runs[0]
    return ["", "## llama.cpp beside specdec", "",
            f"`benchmarks/peers/llamacpp.sh` (`llamacpp.jsonl`; {made_by(folder, 'llamacpp')}): llama.cpp {first.get('llamacpp', UNKNOWN)} "
            f"on the README's prompt, chat-templated as specdec feeds it, at most {first.get('max_tokens', '–')} tokens, "
            f"{first.get('threads', '–')} threads, greedy (`--temp 0 --top-k 1`): `llama-completion` (greedy), "
            "`llama-lookup` (prompt lookup) or `llama-speculative` (a draft model) at k = "
            f"{first.get('k') or next((r['k'] for r in runs if r.get('k')), '–')}, each at F32 and BF16 (specdec de-quantises "
            "on load and computes in the dtype its card chose: `specdec dtype`; a row at that precision is like for like) "
            "and at the file's own quantisation. One run each. llama.cpp's "
            "`tok/s` is decode only; specdec's includes the prefill, so the ratio is llama.cpp's `with prefill` over "
            "specdec's (`readme.jsonl`: greedy for greedy, the card's speculative run for the others; – where specdec "
            "did not run that card on this prompt). `same text`: a speculative run's text against llama.cpp's own greedy "
            "at that quantisation; `= specdec greedy`: llama.cpp's greedy text against specdec's (not compared where "
            "`readme.jsonl` carries no text)."
            + other_cpus(folder, runs), "",
            column_table(LLAMACPP_TABLE, rows)]


def llamacpp_closing(folder: Folder) -> list[str]:
    ours = specdec_prompts(folder)
    lines = []
    for r in llamacpp_runs(folder.rows("llamacpp")):
        s = ours_for(r, ours)
        if s and r["quant"] in ("F32", "BF16"):
            lines.append(f"- llama.cpp {r['quant']} {r['mode']} on the README example: "
                         f"{f(r['tokens_per_s_with_prefill'], '.1f')} tok/s with the prefill against specdec's "
                         f"{f(specdec_speed(r['mode'], s), '.1f')} ({'greedy' if r['mode'] == 'greedy' else s['draft']}, "
                         f"{s.get('dtype', '–')}).")
    return lines
