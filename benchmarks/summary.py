"""Write benchmarks/RESULTS.md, the summary across machine kinds: one row per folder of
benchmarks/results/ (one per CPU model), every figure computed from that folder's raw JSON lines
with report.py's own readers, never from a page's markdown.

    python benchmarks/summary.py [RESULTS_DIR] > benchmarks/RESULTS.md

RESULTS_DIR defaults to benchmarks/results; benchmarks/run.sh runs this at its end.
"""

from __future__ import annotations

import sys
from pathlib import Path

from report import (UNKNOWN, batch_overall, bench_rows, blas_label, commit_label, exactness_groups, f, llamacpp_runs,
                    load_machine, optional, overall_row, table, vllm_readme)


def speedup(rows: list[dict]) -> str:
    r = overall_row(rows)
    return f(r["speedup"], ".2f", "x") if r else "–"


def readme_speeds(d: Path) -> str:
    """The README example's speculative tok/s: eager (readme.jsonl) · compiled (compile.jsonl) ·
    llama.cpp's float32 greedy on the same weights (llamacpp.jsonl, prefill included)."""
    eager = overall_row(optional(d, "readme.jsonl"))
    compiled = next((r for r in optional(d, "compile.jsonl") if r.get("row") == "bench" and r["scope"] == "all"
                     and r.get("compiled") and "README" in r.get("workload", "")), None)
    peer = next((r for r in llamacpp_runs(optional(d, "llamacpp.jsonl")) if r["mode"] == "greedy"
                 and r["quant"] == "F32" and r["card"] == "smollm2"), None)
    cells = [speed_in(eager), speed_in(compiled), f(peer["tokens_per_s_with_prefill"], ".1f") if peer else "–"]
    return " · ".join(cells) if any(c != "–" for c in cells) else "–"


SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def speed_in(row: dict | None) -> str:
    """A bench row's speculative tok/s and the dtype it ran in (dtype: auto chooses per machine)."""
    if not row:
        return "–"
    dtype = row.get("dtype")
    return f(row["tokens_per_s"], ".1f") + (f" ({SHORT.get(dtype, dtype)})" if dtype else "")


def vllm_speeds(d: Path) -> str:
    """The README example through vLLM in float32 (vllm.jsonl): greedy · its speculation, tok/s with the prefill."""
    runs = vllm_readme(optional(d, "vllm.jsonl"))
    greedy = runs.pop("greedy", None)
    spec = next(iter(runs.values()), None)
    return " · ".join(f(r["tokens_per_s"], ".1f") if r else "–" for r in (greedy, spec)) if greedy or spec else "–"


def kind_row(d: Path) -> list[str]:
    """One machine kind's figures; – where its folder has no such measurement."""
    m = load_machine(d)
    bench, sweep = optional(d, "bench.jsonl"), optional(d, "sweep.jsonl")
    full = next((r for r in bench_rows(sweep, "all") if r["agree"] == 1.0 and r["k"] == 4), None)
    runs = batch_overall(optional(d, "batch.jsonl"))
    pinned = [r for key, group in exactness_groups(optional(d, "exactness.jsonl")).items() if key[2] == "pinned"
              for r in group]
    compared = [r for r in pinned if r.get("bitwise") is not None]
    return [
        f"[{m.get('cpu', UNKNOWN)}](results/{d.name}.md)", str(m.get("cores", UNKNOWN)),
        blas_label(m).removeprefix("BLAS "),
        str(m.get("date", UNKNOWN))[:10], commit_label(m),
        speedup(bench), speedup(optional(d, "readme.jsonl")), readme_speeds(d), vllm_speeds(d),
        speedup(optional(d, "distilled.jsonl")), speedup(optional(d, "pair.jsonl")),
        f"{f(full['speedup'], '.2f', 'x')} / {f(full['predicted_speedup'], '.2f', 'x')}" if full else "–",
        f"{f(runs[max(runs)]['tokens_per_s'] / runs[1]['tokens_per_s'], '.2f', 'x')} (N = {max(runs)})" if runs else "–",
        (f"{sum(bool(r['identical']) for r in pinned)}/{len(pinned)}, bitwise "
         f"{sum(r['bitwise'] is True for r in compared)}/{len(compared)}") if pinned else "–",
    ]


def main(results: str = "benchmarks/results") -> str:
    kinds = sorted(p.parent for p in Path(results).glob("*/machine.json"))
    out = [
        "# specdec benchmark results: the summary across machine kinds",
        "",
        "One row per machine kind (CPU model), each computed by `benchmarks/summary.py` from the JSON lines in that "
        "kind's folder. Every speedup is speculative over greedy (or batch N over batch 1) measured in one run on "
        "that machine; a ratio from one kind does not hold on another, so compare within a row. Each kind's page "
        "has the command, the conditions and every table; `–`: not measured on that kind.",
        "",
        table(["CPU", "cores", "torch BLAS", "date", "commit", "default card, suite", "README example",
               "README example, speculative tok/s (dtype): eager · compiled · llama.cpp fp32 greedy",
               "README example, vLLM fp32 tok/s: greedy · speculative",
               "distilled, free text", "Qwen pair, code", "synthetic a = 1.0, k = 4: measured / predicted",
               "batch N vs batch 1, speculative", "exactness, pinned shapes: identical"],
              [kind_row(d) for d in kinds]),
        "",
        "Columns: the run's `CARD` (default `smollm2`) over the suite (`bench.jsonl`); the README's first example "
        "(`readme.jsonl`); its speculative tok/s eager and with `--compile` (`compile.jsonl`, "
        "`benchmarks/compile.sh`), each in the dtype its run took, and llama.cpp's float32 greedy on the same "
        "weights, prefill included "
        "(`llamacpp.jsonl`); vLLM's float32 greedy and its own speculation (n-gram for the default card) on the "
        "same prompt and ids, prefill included (`vllm.jsonl`, `benchmarks/peers/vllm.sh`); "
        "`smollm2-distilled` on the free-text categories (`distilled.jsonl`); `qwen2.5-coder-1.5b` on the code "
        "prompts (`pair.jsonl`); the synthetic draft at agreement 1.0 and k = 4, against the cost model's prediction "
        "(`sweep.jsonl`); speculative throughput at `--batch N` over `--batch 1` (`batch.jsonl`); "
        "`benchmarks/exactness.sh`'s pinned-shape records, token-identical and with bitwise-equal logits "
        "(`exactness.jsonl`). `commit`: the code the run measured, as `run.sh` records it in `machine.json`; where "
        "it was not recorded, the commit that holds the results.",
        "",
        "## Each kind's page",
        "",
    ]
    out += [f"- [{load_machine(d).get('cpu', UNKNOWN)}](results/{d.name}.md): raw files in "
            f"[`results/{d.name}/`](results/{d.name}/)" for d in kinds]
    out += [
        "",
        "## Regenerating",
        "",
        "`bash benchmarks/run.sh` measures the machine it runs on: it writes that kind's folder "
        "(`benchmarks/results/<cpu-slug>/`, the slug from the CPU model: `python benchmarks/report.py --slug`) "
        "and page (`benchmarks/results/<cpu-slug>.md`), then rewrites this summary from every folder present "
        "(`python benchmarks/summary.py > benchmarks/RESULTS.md`). A page alone: "
        "`python benchmarks/report.py benchmarks/results/<cpu-slug> > benchmarks/results/<cpu-slug>.md`. "
        "See [docs/benchmarks.md](../docs/benchmarks.md).",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    sys.stdout.write(main(*sys.argv[1:]))
