"""Write one machine kind's page, benchmarks/results/<kind>.md, from the JSON lines in its folder
benchmarks/results/<kind>/ (written there by benchmarks/run.sh; benchmarks/summary.py then makes
the summary across kinds, benchmarks/RESULTS.md).

Only reads the JSON contracts (bench: one object per line, `scope` prompt | category | all), so
every number on a page comes from a run, and regenerating it is one command:

    python benchmarks/report.py DIR [COMMAND [NOTE]] > DIR.md
    python benchmarks/report.py --machine [COMMAND]   # this machine and run, as JSON (machine.json)
    python benchmarks/report.py --slug                # this machine's kind: the folder's name

DIR holds machine.json (the CPU model, vendor, cores, torch's BLAS, versions, date, commit and
the command, recorded by run.sh when it starts; COMMAND defaults to its `command`), bench.jsonl
and sweep.jsonl, and optionally plan.jsonl, distilled.jsonl, pair.jsonl, pair-suite.jsonl,
pair-exact.jsonl, batch.jsonl, batch-exact.jsonl, soak.jsonl, readme.jsonl, llamacpp.jsonl
(benchmarks/peers/llamacpp.sh) and exactness.jsonl (benchmarks/exactness.sh). Every section
names the machine at its top. NOTE, when given, follows the opening sentence (say there how the
files were made if not all by one run of COMMAND).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

UNKNOWN = "unknown"  # a machine.json field nobody recorded


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def f(value, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else format(value, spec) + suffix


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


# ---------------------------------------------------------------------------- the machine
def _cpuinfo() -> dict:
    """/proc/cpuinfo's first processor: {'model name': ..., 'vendor_id': ...}; empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _lscpu() -> dict:
    """lscpu's `Key: value` lines; empty where there is no lscpu."""
    if not shutil.which("lscpu"):
        return {}
    done = subprocess.run(["lscpu"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    pairs = (line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).resolve().parent)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def slug(cpu: str) -> str:
    """The kind's folder name from the CPU model: 'Intel(R) Xeon(R) Processor' -> 'intel-xeon-processor'."""
    name = re.sub(r"\((r|tm)\)", "", cpu.lower()).split("@")[0]  # no marks, no clock ('CPU @ 2.10GHz')
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or UNKNOWN


def cpu_model(lscpu: dict | None = None, cpuinfo: dict | None = None) -> str:
    """The CPU model name (lscpu's `Model name`, as /proc/cpuinfo's `model name`)."""
    lscpu = _lscpu() if lscpu is None else lscpu
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    return lscpu.get("Model name") or cpuinfo.get("model name") or platform.processor() or UNKNOWN


def machine_record(command: str = "") -> dict:
    """This machine and this run, for machine.json: what a figure measured here depends on."""
    import torch
    import transformers

    lscpu, cpuinfo = _lscpu(), _cpuinfo()
    config = torch.__config__.show()  # the build: BLAS_INFO=mkl, "CPU capability usage: AVX512"
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    capability = re.search(r"CPU capability usage: (\w+)", config)
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu": cpu_model(lscpu, cpuinfo),
        "vendor": lscpu.get("Vendor ID") or cpuinfo.get("vendor_id") or UNKNOWN,
        "cores": os.cpu_count(),
        "threads_per_core": int(lscpu["Thread(s) per core"]) if lscpu.get("Thread(s) per core", "").isdigit() else UNKNOWN,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),  # under the run's OMP_NUM_THREADS (THREADS)
        "blas": blas[1] if blas else UNKNOWN,
        "cpu_capability": capability[1] if capability else UNKNOWN,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or UNKNOWN,  # the code the run measured
        "dirty": UNKNOWN if dirty is None or commit is None else bool(dirty),  # tracked files changed since it
        "command": command,
    }


def load_machine(directory: Path) -> dict:
    path = directory / "machine.json"
    return json.loads(path.read_text()) if path.is_file() else {"cpu": f"{UNKNOWN} (no machine.json)"}


def known(value) -> bool:
    return value is not None and value != UNKNOWN


def commit_label(m: dict) -> str:
    """The measured code's commit, or, where not recorded, the commit that holds the results."""
    if known(m.get("commit")):
        return f"`{m['commit']}`" + (" (+ uncommitted changes)" if m.get("dirty") is True else "")
    return f"{UNKNOWN} (results in `{m['results_commit']}`)" if m.get("results_commit") else UNKNOWN


def blas_label(m: dict) -> str:
    blas, cap = m.get("blas", UNKNOWN), m.get("cpu_capability", UNKNOWN)
    return f"BLAS {blas}" + (f", {cap} kernels" if known(cap) else "")


def machine_line(m: dict, folder: str) -> str:
    """The one line every section opens with."""
    return (f"*Machine: {m.get('cpu', UNKNOWN)} ({m.get('vendor', UNKNOWN)}), {m.get('cores', UNKNOWN)} cores, "
            f"torch {m.get('torch', UNKNOWN)} on {m.get('torch_threads', UNKNOWN)} threads, {blas_label(m)} "
            f"([machine.json]({folder}/machine.json)).*")


def name_the_machine(lines: list[str], line: str) -> list[str]:
    """`line` under every section and subsection heading."""
    out = []
    for text in lines:
        out.append(text)
        if text.startswith(("## ", "### ")):
            out += ["", line]
    return out


# ---------------------------------------------------------------------------- the page
def optional(directory: Path, name: str) -> list[dict]:
    path = directory / name
    return load(str(path)) if path.is_file() else []
def err(predicted, measured) -> str:
    return "–" if predicted is None or not measured else f"{100 * (predicted / measured - 1):+.0f} %"


def within(predicted, measured, tolerance: float) -> bool:
    return predicted is not None and bool(measured) and abs(predicted / measured - 1) <= tolerance


def category_table(rows: list[dict]) -> str:
    return table(["category", "prompts", "tokens", "drafted/round", "accept rate", "tokens/round", "verify rounds",
                  "greedy tok/s", "spec tok/s", "speedup", "predicted", "identical"],
                 [[r["name"] if r["scope"] == "category" else "**overall**", str(r["prompts"]), str(r["tokens"]),
                   f(r["drafted"] / r["verify_rounds"] if r["verify_rounds"] else None),
                   f(r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"), f(r["tokens_per_round"]),
                   str(r["verify_rounds"]), f(r["greedy_tokens_per_s"], ".1f"), f(r["tokens_per_s"], ".1f"),
                   f(r["speedup"], ".2f", "x"), f(r["predicted_speedup"], ".2f", "x"),
                   "yes" if r["identical"] else "**NO**"] for r in rows])


def peer_table(peers: list[dict]) -> str:
    return table(["mode", "draft", "k", "tokens", "specdec tok/s", "transformers tok/s", "ratio specdec/transformers",
                  "target fwd specdec", "target fwd transformers", "identical"],
                 [[r["mode"], r["draft"] or "–", f(r["k"], "d"), str(r["tokens"]), f(r["tokens_per_s"], ".1f"),
                   f(r["hf_tokens_per_s"], ".1f"), f(r["ratio"], ".2f", "x"), str(r["target_forwards"]),
                   str(r["hf_target_forwards"]), "yes" if r["identical"] else "**NO**"] for r in peers])


def plan_label(r: dict) -> str:
    return r["draft"] if r["schedule"] == "fixed" else f"{r['draft']}+{r['schedule']}"


def plan_pairs(plan: list[dict], measured: list[dict]) -> list[tuple[dict, dict]]:
    """Each measured overall row beside plan's row for the same draft, k and schedule."""
    by_key = {(plan_label(p), p["k"]): p for p in plan}
    return [(by_key[(m["draft"], m["k"])], m) for m in measured if (m["draft"], m["k"]) in by_key]


def main(directory: str, command: str | None = None, note: str = "") -> str:
    d = Path(directory)
    machine = load_machine(d)
    command = command or machine.get("command") or UNKNOWN
    note = note or machine.get("note", "")  # a hand-written machine.json may say how its files were made
    bench, sweep, plan = optional(d, "bench.jsonl"), optional(d, "sweep.jsonl"), optional(d, "plan.jsonl")
    distilled, pair = optional(d, "distilled.jsonl"), optional(d, "pair.jsonl")
    pair_suite = optional(d, "pair-suite.jsonl")
    batch, soak = optional(d, "batch.jsonl"), optional(d, "soak.jsonl")
    batch_exact, pair_exact = optional(d, "batch-exact.jsonl"), optional(d, "pair-exact.jsonl")
    readme, llamacpp = optional(d, "readme.jsonl"), optional(d, "llamacpp.jsonl")
    exactness, bf16 = optional(d, "exactness.jsonl"), optional(d, "bf16.jsonl")
    compiled = optional(d, "compile.jsonl")
    spec = bench_rows(bench, "category", "all")
    peers = [r for r in bench if r["row"] == "transformers" and r["scope"] == "all"]
    sweep_all = bench_rows(sweep, "all")
    out = ["# specdec benchmark results: " + machine.get("cpu", UNKNOWN), "",
           f"Generated by `{command}` (see `benchmarks/run.sh` for the knobs). Every number below is read from that "
           f"run's JSON lines in [`{d.name}/`]({d.name}/) (CSV beside the first two)." + (f" {note}" if note else ""),
           ""] + machine_bullets(machine, d.name)
    if bench or sweep:
        out += run_bullets(bench, sweep, spec, machine)
    if spec:
        out += [
            "",
            "## Greedy vs speculative, per prompt category",
            "",
            f"Draft: the card's own (`{spec[0]['draft']}`), k = {spec[0]['k']}: each round the cost schedule proposes "
            "the d ≤ k that maximizes expected tokens per unit time (d = 0: a plain greedy step), so `drafted/round` "
            "is below k where speculation does not pay.",
            "",
            category_table(spec),
        ]
    if peers:
        out += [
            "",
            "## specdec vs transformers' own `generate` (same card, prompts, process and run)",
            "",
            "Greedy: `generate(do_sample=False)`. Assisted: transformers runs the card's draft at a fixed k "
            "(`prompt_lookup_num_tokens=k` for prompt lookup; for model drafts `num_assistant_tokens=k`, schedule "
            "`constant`, confidence threshold 0 on the assistant's generation config); specdec runs it as a user "
            "does, with the card's schedule. Target forwards include the prefill (transformers folds the prefill "
            "into its first step).",
            "",
            peer_table(peers),
        ]
    measured = [r for r in spec if r["scope"] == "all"] + sweep_all
    pairs = plan_pairs(plan, measured)
    if pairs:
        out += [
            "",
            "## `specdec plan` against the measurement",
            "",
            "`specdec plan` (same prompts and token budget, run first in the same script, with `--remeasure`: the "
            "cost profile it measures is the one every later section reads) replays each configuration "
            "against the target's greedy continuation and prices its rounds with that profile, without "
            "timing a single speculative run. Beside it, what `bench` measured for that configuration (the card's "
            "default bench, then the sweep). Targets: tokens/round within ±10 %, speedup within ±20 %.",
            "",
            table(["draft", "k", "plan tokens/round", "measured", "error", "plan speedup", "measured", "error",
                   "in target"],
                  [[m["draft"], str(m["k"]), f(p["predicted_tokens_per_round"]), f(m["tokens_per_round"]),
                    err(p["predicted_tokens_per_round"], m["tokens_per_round"]),
                    f(p["predicted_speedup"], ".2f", "x"), f(m["speedup"], ".2f", "x"),
                    err(p["predicted_speedup"], m["speedup"]),
                    "yes" if within(p["predicted_tokens_per_round"], m["tokens_per_round"], 0.10)
                    and within(p["predicted_speedup"], m["speedup"], 0.20) else "**no**"] for p, m in pairs]),
        ]
        best = next((p for p in plan if p["recommended"] and p["draft"] != "none (plain greedy)"), None)
        if best:
            out += ["", f"plan's recommendation for the card's draft: `{plan_label(best)}` at k = {best['k']} "
                        f"(predicted {f(best['predicted_speedup'], '.2f', 'x')})."]
    if sweep_all:
        out += [
            "",
            "## Agreement sweep",
            "",
            "The card's draft replaced by the `synthetic` draft (proposes the target's own greedy token with "
            "probability a per position, else a wrong one, seeded) at a fixed k, on the card's real target; the "
            "card's own draft (with its schedule) is the extra row (`a set` = card). `a meas.` = accepted / "
            "(accepted + rejected rounds); `accept rate` = accepted / drafted. Theory tokens/round (Leviathan et "
            "al. 2023, k proposals every round at a set) = (1 − a^(k+1)) / (1 − a). `predicted` = the cost model's "
            "speedup for the rounds actually made: expected tokens over their price, d·c + v(d+1) target steps each, "
            "v(n) = the measured cost of an n-token target forward in 1-token steps (the `v` column: v(k+1)), c = "
            "the draft's cost per token (0: neither the synthetic draft nor prompt lookup makes a model call).",
            "",
            table(["draft", "a set", "k", "accept rate", "a meas.", "tokens/round", "theory tokens/round",
                   "verify rounds", "speedup", "predicted", "v", "c", "identical"],
                  [["synthetic" if r["agree"] is not None else r["draft"],
                    f(r["agree"]) if r["agree"] is not None else "card", str(r["k"]),
                    f(r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"), f(r["agreement_est"]),
                    f(r["tokens_per_round"]), f(r["theory_tokens_per_round"]), str(r["verify_rounds"]),
                    f(r["speedup"], ".2f", "x"), f(r["predicted_speedup"], ".2f", "x"), f(r["verify_cost"]),
                    f(r["draft_cost"]) + (" (simulated)" if r["draft_cost_simulated"] else ""),
                    "yes" if r["identical"] else "**NO**"] for r in sweep_all]),
        ]
        if (d / "agreement-sweep.png").is_file():
            out += ["", "![tokens/round and speedup against agreement, measured beside the cost model]"
                        f"({d.name}/agreement-sweep.png)"]
    out += distilled_section(distilled) + pair_section(pair) + pair_suite_section(pair_suite)
    out += pair_exact_section(pair_exact)
    out += batch_section(batch, soak) + batch_exact_section(batch_exact)
    out += readme_section(readme) + llamacpp_section(llamacpp, readme, machine, command)
    out += exactness_section(exactness) + bf16_section(bf16) + compile_section(compiled)
    ends = (closing(spec, peers, sweep_all, pairs, distilled, pair) + batch_closing(batch, soak)
            + readme_closing(readme) + pair_suite_closing(pair_suite) + pair_exact_closing(pair_exact)
            + batch_exact_closing(batch_exact) + llamacpp_closing(llamacpp, readme) + exactness_closing(exactness))
    if ends:
        out += ["", "## Closing note", ""] + ends
    out += [""]
    return "\n".join(name_the_machine(out, machine_line(machine, d.name)))


def machine_bullets(m: dict, folder: str) -> list[str]:
    """The page's opening words on its machine and run, every field from machine.json."""
    lines = [
        f"- machine: **{m.get('cpu', UNKNOWN)}**, vendor {m.get('vendor', UNKNOWN)}, {m.get('cores', UNKNOWN)} cores "
        f"({m.get('threads_per_core', UNKNOWN)} threads per core), torch {m.get('torch', UNKNOWN)} on "
        f"{m.get('torch_threads', UNKNOWN)} threads ({blas_label(m)}, oneDNN {m.get('mkldnn', UNKNOWN)}), Python "
        f"{m.get('python', UNKNOWN)}, transformers {m.get('transformers', UNKNOWN)}; run {m.get('date', UNKNOWN)} at "
        f"commit {commit_label(m)} ([machine.json]({folder}/machine.json)).",
    ]
    if m.get("source"):
        lines.append(f"- how the machine is known: {m['source']}")
    return lines


def run_bullets(bench: list[dict], sweep: list[dict], spec: list[dict], m: dict) -> list[str]:
    first = (bench or sweep)[0]
    overall = next((r for r in spec if r["scope"] == "all"), first)
    threads, cores = first["torch_threads"], m.get("cores")
    return [
        f"- card `{first['card']}`, {first['device']} {first['dtype']}, {overall['prompts']} prompts of the built-in "
        f"suite (the first `LIMIT` of each category), at most {first['max_tokens']} new tokens, chat template "
        f"{'on' if first.get('chat') else 'off'}; warm-up first, then the median of "
        f"{first['repeats']} timed runs per prompt and mode (sweep: "
        f"{sweep[0]['repeats'] if sweep else '–'}); torch {first['torch']} ({threads} thread{'s' * (threads != 1)}), "
        f"transformers {first['transformers']} (from the JSON lines).",
        f"- **Noise:** a shared {cores}-core machine, so wall "
        "times (tok/s, speedups) can move by tens of percent between runs. Counts (tokens, verify rounds, "
        "acceptance) are exact and reproducible. Greedy and speculative runs of a prompt are timed back "
        "to back in each repeat, so drift hits both alike. Ratios measured here do not carry over to another "
        "machine kind (the summary, `benchmarks/RESULTS.md`, puts the kinds side by side)."
        + (f" torch ran on {threads} of {cores} cores (`THREADS`): the rest were busy with other "
           "jobs during this run, and every thread more than the free cores stalls each parallel region; the "
           "ratios are the point." if isinstance(cores, int) and threads < cores else ""),
        "- Every speculative output below was checked equal to its greedy one (`identical`).",
        "- `predicted` (bench): the cost model's speedup for the rounds the run actually made, from their measured "
        "per-position acceptance and this machine's cost profile. `plan` (below) predicts *before* running.",
    ]


def bench_rows(rows: list[dict], *scopes: str) -> list[dict]:
    """specdec's own rows (not transformers') of the given scopes, in file order."""
    return [r for r in rows if r["row"] == "bench" and r["scope"] in scopes]


def overall_row(rows: list[dict]) -> dict | None:
    """The first configuration's row over all prompts, if the run wrote one."""
    return next(iter(bench_rows(rows, "all")), None)


def readme_section(rows: list[dict]) -> list[str]:
    r = overall_row(rows)
    if not r:
        return []
    return ["", "## The README's first example", "",
            f"`specdec generate \"Explain what a hash table is.\"` as a new user runs it (card `{r['card']}`, "
            f"{r['draft']}, k = {r['k']}, at most {r['max_tokens']} tokens), timed by `bench` greedy and speculative "
            f"back to back, median of {r['repeats']} (`README_REPEATS`).", "",
            table(["tokens", "drafted/round", "accept rate", "tokens/round", "greedy tok/s", "spec tok/s", "speedup",
                   "predicted", "identical"],
                  [[str(r["tokens"]), f(r["drafted"] / r["verify_rounds"] if r["verify_rounds"] else None),
                    f(r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"), f(r["tokens_per_round"]),
                    f(r["greedy_tokens_per_s"], ".1f"), f(r["tokens_per_s"], ".1f"), f(r["speedup"], ".2f", "x"),
                    f(r["predicted_speedup"], ".2f", "x"), "yes" if r["identical"] else "**NO**"]])]


def readme_closing(rows: list[dict]) -> list[str]:
    r = overall_row(rows)
    return [f"- The README's first example: {f(r['speedup'], '.2f', 'x')} greedy (target ≥ 1.0x)."] if r else []


def weights_metadata(card_draft: str) -> dict:
    """What `specdec distill` recorded in the shipped weights (command, prompts, time, held-out α)."""
    try:
        from safetensors import safe_open

        path = Path(__file__).resolve().parent.parent / "cards" / "weights" / f"{card_draft}.safetensors"
        with safe_open(str(path), "pt") as weights:
            return weights.metadata() or {}
    except Exception:  # no safetensors, no file: the section just says less
        return {}


def distilled_section(rows: list[dict]) -> list[str]:
    spec = bench_rows(rows, "category", "all")
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
            f"prompts (the first `LIMIT` of each).{made}", "", category_table(spec)]


def pair_section(rows: list[dict]) -> list[str]:
    spec = bench_rows(rows, "prompt", "all")
    if not spec:
        return []
    peers = [r for r in rows if r["row"] == "transformers" and r["scope"] == "all"]
    rss = max((r.get("peak_rss_mb") or 0 for r in rows), default=0)
    first = spec[0]
    lines = ["", f"## `{first['card']}`: a real two-model pair (Qwen2.5-Coder 0.5B drafting for 1.5B)", "",
             f"Draft `{first['draft']}`, k = {first['k']}, {first['device']} {first['dtype']} target, on the suite's "
             f"code prompts, at most {first['max_tokens']} new tokens, median of {first['repeats']}. Per prompt, "
             f"then overall (`c` = the draft's measured cost per token in target steps: {f(first['draft_cost'])}). "
             f"Peak resident memory of the process with the pair loaded: **{rss / 1024:.1f} GB**.", "",
             table(["prompt", "tokens", "drafted/round", "accept rate", "tokens/round", "greedy tok/s", "spec tok/s",
                    "speedup", "predicted", "identical"],
                   [[r["name"] if r["scope"] == "prompt" else "**overall**", str(r["tokens"]),
                     f(r["drafted"] / r["verify_rounds"] if r["verify_rounds"] else None),
                     f(r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"), f(r["tokens_per_round"]),
                     f(r["greedy_tokens_per_s"], ".2f"), f(r["tokens_per_s"], ".2f"), f(r["speedup"], ".2f", "x"),
                     f(r["predicted_speedup"], ".2f", "x"), "yes" if r["identical"] else "**NO**"] for r in spec])]
    if peers:
        lines += ["", "Against transformers' assisted generation (`assistant_model` = the same draft weights, fixed k):",
                  "", peer_table(peers)]
    return lines


def pair_suite_section(rows: list[dict]) -> list[str]:
    spec = bench_rows(rows, "category", "all")
    if not spec:
        return []
    first = spec[0]
    return ["", "### The pair over the whole suite", "",
            f"The same card on the first `PAIR_SUITE_LIMIT` prompts of every category of the built-in suite "
            f"(`pair-suite.jsonl`), at most {first['max_tokens']} new tokens, median of {first['repeats']}.",
            "", category_table(spec)]


def pair_suite_closing(rows: list[dict]) -> list[str]:
    overall = overall_row(rows)
    if not overall:
        return []
    return [f"- `{overall['card']}` over the whole suite ({overall['prompts']} prompts): "
            f"{f(overall['speedup'], '.2f', 'x')} (target ≥ 1.3x), identical: {'yes' if overall['identical'] else 'NO'}."]


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


def batch_section(rows: list[dict], soak: list[dict]) -> list[str]:
    runs = batch_overall(rows)
    if not runs:
        return []
    one, n = runs[1], max(runs)
    body = []
    for size, r in sorted(runs.items()):
        body.append([str(size), str(r["prompts"]), str(r["tokens"]), f(r["greedy_tokens_per_s"], ".1f"),
                     f(r["tokens_per_s"], ".1f"), f(r["speedup"], ".2f", "x"),
                     f(r["greedy_tokens_per_s"] / one["greedy_tokens_per_s"], ".2f", "x"),
                     f(r["tokens_per_s"] / one["tokens_per_s"], ".2f", "x"), f(r["tokens_per_round"]),
                     f((r.get("peak_rss_mb") or 0) / 1024, ".2f", " GB"), "yes" if r["identical"] else "**NO**"])
    lines = ["", f"## Batching: `--batch {n}` against `--batch 1`", "",
             f"Card `{one['card']}` ({one['draft']}, k = {one['k']}), the first `BATCH_LIMIT` prompts of each category "
             f"({one['prompts']} prompts), at most {one['max_tokens']} new tokens, one timed pass per mode after a "
             "warm-up. Throughput is tokens over the whole pass's wall time (continuous batching over the prompts). "
             "Each speculative verify `[rows, n >= 2]` takes the matmul form the cost profile measured fastest for it "
             "(`kernels.py`: F.linear, W @ xᵀ or oneDNN's prepacked weights); the batched greedy step `[rows, 1]` is "
             "torch's F.linear, like every greedy step. "
             "`identical`: every row equals that prompt's batch-1 greedy decode.", "",
             table(["batch", "prompts", "tokens", "greedy tok/s", "spec tok/s", "spec/greedy", "greedy vs batch 1",
                    "spec vs batch 1", "tokens/round", "peak RSS", "identical"], body)]
    growth = soak_growth(soak)
    if growth:
        first, last, count = growth
        lines += ["", f"Soak: {count} requests (the suite's prompts, numbered) of at most "
                  f"{max(len(r['spec']['tokens']) for r in soak if 'spec' in r)} tokens through `generate --batch {n} "
                  f"--mode spec`: peak RSS {first:.0f} MB after the first quarter of the output lines, {last:.0f} MB "
                  f"after the last ({last - first:+.0f} MB)."]
    return lines


def batch_closing(rows: list[dict], soak: list[dict]) -> list[str]:
    runs = batch_overall(rows)
    if not runs:
        return []
    one, n = runs[1], max(runs)
    many = runs[n]
    lines = [f"- `--batch {n}` throughput vs `--batch 1`: greedy "
             f"**{f(many['greedy_tokens_per_s'] / one['greedy_tokens_per_s'], '.2f', 'x')}**, speculative "
             f"**{f(many['tokens_per_s'] / one['tokens_per_s'], '.2f', 'x')}** (target ≥ 3x); speculative vs greedy at "
             f"batch {n}: **{f(many['speedup'], '.2f', 'x')}** (target ≥ 1.1x); every row identical to batch-1 greedy: "
             f"{'yes' if many['identical'] else '**no**'}; peak RSS {(many.get('peak_rss_mb') or 0) / 1024:.2f} GB."]
    growth = soak_growth(soak)
    if growth:
        lines.append(f"- Soak, {growth[2]} requests at batch {n}: peak RSS {growth[0]:.0f} → {growth[1]:.0f} MB.")
    return lines


def pair_exact_counts(rows: list[dict]) -> dict[int, tuple[int, int]]:
    """verify-exactness lines: k -> (identical, checked)."""
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        if "k" in r and "identical" in r:
            same, n = out.get(r["k"], (0, 0))
            out[r["k"]] = (same + bool(r["identical"]), n + 1)
    return dict(sorted(out.items()))


def pair_exact_section(rows: list[dict]) -> list[str]:
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


def pair_exact_closing(rows: list[dict]) -> list[str]:
    counts = pair_exact_counts(rows)
    if not counts:
        return []
    same, n = sum(x[0] for x in counts.values()), sum(x[1] for x in counts.values())
    return [f"- `{PAIR_CARD_NAME}` exactness over the suite at k = {', '.join(map(str, counts))}: **{same}/{n}** identical."]


PAIR_CARD_NAME = "qwen2.5-coder-1.5b"


def batch_exact_runs(rows: list[dict]) -> list[tuple[dict, int, int]]:
    """Per k: (the overall row, rows identical to batch-1 greedy, rows)."""
    out = []
    for total in sorted(bench_rows(rows, "all"), key=lambda r: r["k"]):
        prompts = [r for r in bench_rows(rows, "prompt") if r["k"] == total["k"]]
        out.append((total, sum(bool(r["identical"]) for r in prompts), len(prompts)))
    return out


def batch_exact_section(rows: list[dict]) -> list[str]:
    runs = batch_exact_runs(rows)
    if not runs:
        return []
    first = runs[0][0]
    body = [[str(r["k"]), str(r["prompts"]), str(r["tokens"]), f(r["greedy_tokens_per_s"], ".1f"), f(r["tokens_per_s"], ".1f"),
             f(r["speedup"], ".2f", "x"), f(r["tokens_per_round"]), f"{same}/{n}"] for r, same, n in runs]
    return ["", f"### Every prompt of the suite at `--batch {first['batch']}`, k = {', '.join(str(r['k']) for r, _, _ in runs)}", "",
            f"Card `{first['card']}` ({first['draft']}), all {first['prompts']} built-in prompts, at most {first['max_tokens']} "
            "new tokens, one timed pass per k beside one batched greedy pass; every row compared with that prompt's "
            "batch-1 greedy decode (`identical`: rows equal / rows).", "",
            table(["k", "prompts", "tokens", "greedy tok/s", "spec tok/s", "spec/greedy", "tokens/round", "identical"], body)]


def batch_exact_closing(rows: list[dict]) -> list[str]:
    runs = batch_exact_runs(rows)
    if not runs:
        return []
    same, n = sum(x[1] for x in runs), sum(x[2] for x in runs)
    ks = ", ".join(str(r["k"]) for r, _, _ in runs)
    return [f"- Batch {runs[0][0]['batch']} over the whole suite at k = {ks}: **{same}/{n}** rows identical to batch-1 greedy; "
            f"speculative vs greedy at that batch {', '.join(f(r['speedup'], '.2f', 'x') for r, _, _ in runs)}."]


def closing(spec, peers, sweep, pairs, distilled, pair) -> list[str]:
    """The issue targets, each with what this run measured."""
    lines = []
    overall = next((r for r in spec if r["scope"] == "all"), None)
    if overall:
        slowest = min((r for r in spec if r["scope"] == "category"), key=lambda r: r["speedup"] or 0)
        lines.append(f"- Default card ({overall['draft']}, k = {overall['k']}): overall **{f(overall['speedup'], '.2f', 'x')}** "
                     f"(target ≥ 1.3x), slowest category {slowest['name']} {f(slowest['speedup'], '.2f', 'x')} "
                     f"(target ≥ 0.97x); predicted overall {f(overall['predicted_speedup'], '.2f', 'x')}.")
    assisted = next((r for r in peers if r["mode"] == "assisted"), None)
    if assisted:
        lines.append(f"- vs transformers' assisted generation ({assisted['draft']} at k = {assisted['k']}, fixed): "
                     f"{f(assisted['tokens_per_s'], '.1f')} vs {f(assisted['hf_tokens_per_s'], '.1f')} tok/s, ratio "
                     f"**{f(assisted['ratio'], '.2f', 'x')}** (target ≥ 1.2x), identical: "
                     f"{'yes' if assisted['identical'] else 'NO'}.")
    if pairs:
        ok = [within(p["predicted_tokens_per_round"], m["tokens_per_round"], 0.10)
              and within(p["predicted_speedup"], m["speedup"], 0.20) for p, m in pairs]
        worst = max(pairs, key=lambda pm: abs((pm[0]["predicted_speedup"] or 0) / (pm[1]["speedup"] or 1) - 1))
        lines.append(f"- plan vs bench: {sum(ok)} of {len(ok)} configurations within ±10 % tokens/round and ±20 % "
                     f"speedup; the largest speedup error {err(worst[0]['predicted_speedup'], worst[1]['speedup'])} "
                     f"({worst[1]['draft']}, k = {worst[1]['k']}).")
    full = next((r for r in sweep if r["agree"] == 1.0 and r["k"] == 4), None)
    if full and full["predicted_speedup"]:
        lines.append(f"- Loop efficiency, synthetic a = 1.0, k = 4: measured {f(full['speedup'], '.2f', 'x')} = "
                     f"{full['speedup'] / full['predicted_speedup']:.2f} × predicted "
                     f"{f(full['predicted_speedup'], '.2f', 'x')} (target ≥ 0.9).")
    d = overall_row(distilled)
    if d:
        lines.append(f"- `{d['card']}` on free text: {f(d['speedup'], '.2f', 'x')} (target ≥ 1.3x), draft cost c = "
                     f"{f(d['draft_cost'])} target steps (target ≤ 0.1), acceptance {f(d['accept_rate'] and 100 * d['accept_rate'], '.1f', ' %')}.")
    p = overall_row(pair)
    if p:
        hf = next((r for r in pair if r["row"] == "transformers" and r["scope"] == "all" and r["mode"] == "assisted"), None)
        lines.append(f"- `{p['card']}` on code: {f(p['speedup'], '.2f', 'x')} (target ≥ 1.6x)"
                     + (f"; vs transformers' assisted generation {f(hf['ratio'], '.2f', 'x')} (target ≥ 1.2x)" if hf else "")
                     + f"; peak RSS {max(r.get('peak_rss_mb') or 0 for r in pair) / 1024:.1f} GB (target ≤ 12 GB).")
    return lines




# ---------------------------------------------------------------------------- llama.cpp beside specdec
def llamacpp_runs(rows: list[dict]) -> list[dict]:
    """benchmarks/peers/llamacpp_parse.py's records (one per llama.cpp run)."""
    return [r for r in rows if r.get("decoder") == "llama.cpp" and "tokens" in r]


def specdec_readme(readme: list[dict]) -> dict[tuple[str, str], dict]:
    """(card, prompt id) -> specdec's bench row for that prompt, from readme.jsonl."""
    return {(r["card"], r["name"]): r for r in bench_rows(readme, "prompt")}


def same_text(a: str | None, b: str | None) -> str:
    return "not compared" if a is None or b is None else ("yes" if a == b else "**no**")


def llamacpp_section(rows: list[dict], readme: list[dict], machine: dict, command: str) -> list[str]:
    runs = llamacpp_runs(rows)
    if not runs:
        return []
    ours = specdec_readme(readme)
    greedy = {(r["card"], r["quant"], r["id"]): r for r in runs if r["mode"] == "greedy"}
    body = []
    for r in runs:
        s = ours.get((r["card"], r["id"]))
        # specdec's tok/s includes the prefill: beside it, llama.cpp's with the prefill
        theirs = s and (s["greedy_tokens_per_s"] if r["mode"] == "greedy" else s["tokens_per_s"])
        own = greedy.get((r["card"], r["quant"], r["id"]))
        body.append([r["card"], r["mode"], r["quant"], str(r["tokens"]), f(r["tokens_per_s"], ".1f"),
                     f(r["tokens_per_s_with_prefill"], ".1f"), f(r["accept_rate"] and 100 * r["accept_rate"], ".1f", " %"),
                     f(theirs, ".1f"), f(r["tokens_per_s_with_prefill"] / theirs if theirs and r["tokens_per_s_with_prefill"]
                                        else None, ".2f", "x"),
                     "–" if r["mode"] == "greedy" else same_text(r.get("text"), own and own.get("text")),
                     same_text(r.get("text"), s.get("text")) if r["mode"] == "greedy" and s else "–"])
    cpus = sorted({r["cpu"] for r in runs if r.get("cpu")} - {machine.get("cpu")})
    first = runs[0]
    made = ("this run's command sets `PEERS=llamacpp`" if "PEERS=llamacpp" in command else
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
            table(["card", "mode", "quant", "tokens", "llama.cpp tok/s", "with prefill", "accept rate", "specdec tok/s",
                   "llama.cpp/specdec", "same text", "= specdec greedy"], body)]


def llamacpp_closing(rows: list[dict], readme: list[dict]) -> list[str]:
    ours = specdec_readme(readme)
    lines = []
    for r in llamacpp_runs(rows):
        s = ours.get((r["card"], r["id"]))
        if s and r["quant"] == "F32":
            theirs = s["greedy_tokens_per_s"] if r["mode"] == "greedy" else s["tokens_per_s"]
            lines.append(f"- llama.cpp F32 {r['mode']} on the README example: {f(r['tokens_per_s_with_prefill'], '.1f')} "
                         f"tok/s with the prefill against specdec's {f(theirs, '.1f')} "
                         f"({'greedy' if r['mode'] == 'greedy' else s['draft']}).")
    return lines


# ---------------------------------------------------------------------------- exactness in bfloat16
def bf16_section(rows: list[dict]) -> list[str]:
    """bench in bfloat16 (pinned shapes): speculative against the faster of pinned and free greedy."""
    rows = [r for r in rows if r.get("row") == "bench" and r["scope"] == "all"]
    if not rows:
        return []
    return ["", "## bfloat16 speed, pinned shapes", "",
            "`bench --dtype bfloat16` (shapes auto: pinned). Both greedy runs are timed: pinned greedy at the "
            "same width (the exactness reference) and free-shape greedy (what a user would otherwise run); "
            "the speedup is against the faster of the two, named in `baseline`.", "",
            table(["draft", "k", "prompts", "tokens", "pinned greedy tok/s", "free greedy tok/s", "speculative tok/s",
                   "tokens/round", "speedup", "baseline", "identical"],
                  [[r["draft"], str(r["k"]), str(r["prompts"]), str(r["tokens"]),
                    f(r["baseline_tokens"] / r["pinned_greedy_wall_s"] if r.get("pinned_greedy_wall_s") else None, ".1f"),
                    f(r["baseline_tokens"] / r["free_greedy_wall_s"] if r.get("free_greedy_wall_s") else None, ".1f"),
                    f(r["tokens_per_s"], ".1f"), f(r["tokens_per_round"]), f(r["speedup"], ".2f", "x"),
                    r.get("baseline", "greedy"), "yes" if r["identical"] else "**NO**"] for r in rows])]


def compile_section(rows: list[dict]) -> list[str]:
    """benchmarks/compile.sh: each workload eager, then with --compile, back to back."""
    rows = [r for r in rows if r.get("row") == "bench" and r["scope"] == "all" and "workload" in r]
    if not rows:
        return []
    runs: dict[str, dict[bool, dict]] = {}
    for r in rows:
        runs.setdefault(r["workload"], {})[bool(r.get("compiled"))] = r

    def line(workload: str, m: dict[bool, dict]) -> list[str]:
        first = m.get(True) or m[False]
        cells = [workload, first["draft"], str(first["k"]), str(first["prompts"])]
        for mode in (False, True):
            r = m.get(mode)
            cells += [f(r["greedy_tokens_per_s"], ".1f"), f(r["tokens_per_s"], ".1f"), f(r["speedup"], ".2f", "x")] if r \
                else ["–"] * 3
        return cells + ["yes" if all(r["identical"] for r in m.values()) else "**NO**"]

    return ["", "## Compiled forwards (`--compile`) against eager ones", "",
            "`bash benchmarks/compile.sh`: each workload runs eager, then with `--compile` (inductor, frozen weights, "
            "every width 1..k+1 compiled before the clock starts: docs/kernels.md), back to back in separate "
            "processes. Greedy and speculative are the same mode's: the compiled speedup is against compiled greedy."
            + (f" Commit measured: `{'`, `'.join(sorted({r['commit'] for r in rows if r.get('commit')}))}`."
               if any(r.get("commit") for r in rows) else ""),
            "",
            table(["workload", "draft", "k", "prompts", "eager greedy tok/s", "eager spec tok/s", "eager speedup",
                   "compiled greedy tok/s", "compiled spec tok/s", "compiled speedup", "identical"],
                  [line(w, m) for w, m in runs.items()])]


def exactness_groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(card, dtype, shapes, batch) -> exactness.sh's records, in file order."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if "identical" in r and "k" in r:
            out.setdefault((r.get("card", UNKNOWN), r.get("dtype", UNKNOWN), r.get("shapes", UNKNOWN), r.get("batch", 1)),
                           []).append(r)
    return out


def divergences(records: list[dict], most: int = 3) -> str:
    """The first token divergences: `id` k @position, the first few."""
    apart = [r for r in records if not r["identical"]]
    if not apart:
        return "none"
    words = [f"`{r['id']}` k={r['k']} @{(r.get('first_divergence') or {}).get('index', '?')}" for r in apart[:most]]
    return ", ".join(words) + (f" (+{len(apart) - most} more)" if len(apart) > most else "")


def logit_differences(records: list[dict]) -> str:
    compared = [r for r in records if r.get("bitwise") is not None]
    apart = [r["bitwise_divergence"] for r in compared if r["bitwise"] is False and r.get("bitwise_divergence")]
    if not compared:
        return "–"
    if not apart:
        return "none"
    return (f"first at position {min(a['index'] for a in apart)}, largest difference "
            f"{max(a.get('max_abs_diff_all', a['max_abs_diff']) for a in apart):.3g}")


def exactness_section(rows: list[dict]) -> list[str]:
    groups = exactness_groups(rows)
    if not groups:
        return []
    dtypes = list(dict.fromkeys(key[1] for key in groups))
    body = []
    for (card, dtype, shapes, batch), records in groups.items():
        compared = [r for r in records if r.get("bitwise") is not None]
        threads = ",".join(map(str, dict.fromkeys(r.get("threads", "–") for r in records)))
        body.append([card, dtype, shapes, str(batch), ",".join(map(str, dict.fromkeys(r["k"] for r in records))), threads,
                     str(len(records)), f"{sum(bool(r['identical']) for r in records)}/{len(records)}",
                     f"{sum(r['bitwise'] is True for r in compared)}/{len(compared)}" if compared else "–",
                     divergences(records), logit_differences(records)])
    return ["", f"## Exactness in {', '.join(dtypes)}: pinned vs free shapes", "",
            "`bash benchmarks/exactness.sh` (`exactness.jsonl`; a script of its own, not part of the command above): "
            "`specdec verify-exactness --bitwise` per card, with pinned shapes at `--batch 1` and `--batch N`, and in "
            "free shapes at batch 1 as the contrast ([docs/shapes.md](../../docs/shapes.md)). A record is one prompt "
            "at one k. `identical`: the speculative tokens equal the target's greedy decode (under pinned shapes, "
            "greedy at the same width k + 1); `bitwise`: the target's logits equal bit for bit at every emitted "
            "position up to the first token divergence. Under pinned shapes any difference is a failure; in free "
            "shapes a difference is the contrast, what an engine shows without pinning. `threads`: the run's "
            "OMP_NUM_THREADS (its own, whatever the machine line says).", "",
            table(["card", "dtype", "shapes", "batch", "k", "threads", "records", "identical", "bitwise-equal logits",
                   "first token divergences", "logit differences"], body)]


def exactness_closing(rows: list[dict]) -> list[str]:
    lines = []
    for shapes in ("pinned", "free"):
        records = [r for key, group in exactness_groups(rows).items() if key[2] == shapes for r in group]
        compared = [r for r in records if r.get("bitwise") is not None]
        dtypes = ", ".join(dict.fromkeys(r.get("dtype", UNKNOWN) for r in records))
        if records:
            lines.append(f"- Exactness, {shapes} shapes ({dtypes}): "
                         f"**{sum(bool(r['identical']) for r in records)}/{len(records)}** identical, "
                         f"{sum(r['bitwise'] is True for r in compared)}/{len(compared)} with bitwise-equal logits.")
    return lines


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--machine"] and len(args) <= 2:  # this machine and run, for machine.json
        sys.stdout.write(json.dumps(machine_record(*args[1:]), indent=2) + "\n")
    elif args == ["--slug"]:
        print(slug(cpu_model()))
    elif 1 <= len(args) <= 3 and not args[0].startswith("-"):  # directory[, command[, a note on how this run differs]]
        sys.stdout.write(main(*args))
    else:
        sys.exit(__doc__)
