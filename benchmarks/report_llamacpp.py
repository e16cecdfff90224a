"""llama.cpp beside specdec (llamacpp.jsonl, benchmarks/peers/llamacpp.sh) on the README's
prompt, against specdec's own run of that prompt (readme.jsonl).
"""

from __future__ import annotations

from report_common import Folder, bench_rows, column_table, f
from report_machine import UNKNOWN

from specdec_cli.eval.columns import Column


def llamacpp_runs(rows: list[dict]) -> list[dict]:
    """benchmarks/peers/llamacpp_parse.py's records (one per llama.cpp run)."""
    return [r for r in rows if r.get("decoder") == "llama.cpp" and "tokens" in r]


def specdec_readme(readme: list[dict]) -> dict[tuple[str, str], dict]:
    """(card, prompt id) -> specdec's bench row for that prompt, from readme.jsonl."""
    return {(r["card"], r["name"]): r for r in bench_rows(readme, "prompt")}


def specdec_speed(run: dict, ours: dict | None) -> float | None:
    """specdec's tok/s (prefill included) beside a llama.cpp run: greedy for greedy, else the card's speculative run."""
    return ours and (ours["greedy_tokens_per_s"] if run["mode"] == "greedy" else ours["tokens_per_s"])


def same_text(a: str | None, b: str | None) -> str:
    return "not compared" if a is None or b is None else ("yes" if a == b else "**no**")


def beside(run: dict, ours: dict | None, own_greedy: dict | None) -> dict:
    """One llama.cpp run with what it is compared to: specdec's row for that card and prompt
    (`ours`) and llama.cpp's own greedy run at the same quantisation."""
    return {**run, "ours": ours, "own_greedy": own_greedy, "specdec_tokens_per_s": specdec_speed(run, ours)}


def over_specdec(r: dict) -> float | None:
    theirs = r["specdec_tokens_per_s"]
    return r["tokens_per_s_with_prefill"] / theirs if theirs and r["tokens_per_s_with_prefill"] else None


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
    ours = specdec_readme(folder.rows("readme"))
    greedy = {(r["card"], r["quant"], r["id"]): r for r in runs if r["mode"] == "greedy"}
    rows = [beside(r, ours.get((r["card"], r["id"])), greedy.get((r["card"], r["quant"], r["id"]))) for r in runs]
    cpus = sorted({r["cpu"] for r in runs if r.get("cpu")} - {folder.machine.get("cpu")})
    first = runs[0]
    made = ("this run's command sets `PEERS=llamacpp`" if "PEERS=llamacpp" in folder.command else
            "the command above does not set `PEERS=llamacpp`, so `llamacpp.jsonl` is from an earlier run on this "
            "machine kind, beside this run's specdec figures")
    return ["", "## llama.cpp beside specdec", "",
            f"`benchmarks/peers/llamacpp.sh` (`llamacpp.jsonl`; {made}): llama.cpp {first.get('llamacpp', UNKNOWN)} "
            f"on the README's prompt, chat-templated as specdec feeds it, at most {first.get('max_tokens', '–')} tokens, "
            f"{first.get('threads', '–')} threads, greedy (`--temp 0 --top-k 1`): `llama-completion` (greedy), "
            "`llama-lookup` (prompt lookup) or `llama-speculative` (a draft model) at k = "
            f"{first.get('k') or next((r['k'] for r in runs if r.get('k')), '–')}, each at F32 (like for like: specdec "
            "de-quantises on load and computes in float32) and at the file's own quantisation. One run each. llama.cpp's "
            "`tok/s` is decode only; specdec's includes the prefill, so the ratio is llama.cpp's `with prefill` over "
            "specdec's (`readme.jsonl`: greedy for greedy, the card's speculative run for the others; – where specdec "
            "did not run that card on this prompt). `same text`: a speculative run's text against llama.cpp's own greedy "
            "at that quantisation; `= specdec greedy`: llama.cpp's greedy text against specdec's (not compared where "
            "`readme.jsonl` carries no text)."
            + (f" **The runs name another CPU: {', '.join(cpus)}.**" if cpus else ""), "",
            column_table(LLAMACPP_TABLE, rows)]


def llamacpp_closing(folder: Folder) -> list[str]:
    ours = specdec_readme(folder.rows("readme"))
    lines = []
    for r in llamacpp_runs(folder.rows("llamacpp")):
        s = ours.get((r["card"], r["id"]))
        if s and r["quant"] == "F32":
            lines.append(f"- llama.cpp F32 {r['mode']} on the README example: {f(r['tokens_per_s_with_prefill'], '.1f')} "
                         f"tok/s with the prefill against specdec's {f(specdec_speed(r, s), '.1f')} "
                         f"({'greedy' if r['mode'] == 'greedy' else s['draft']}).")
    return lines
