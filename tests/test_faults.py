"""Faults and trust: Ctrl-C leaves valid (marked) JSON and exit 130, output files are atomic,
remote code and pickled weights never run unless a card says so."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import specdec_cli.eval.bench  # noqa: F401  the bench tests below need it: an import error fails them, never skips
import specdec_cli.pair.loading as pair_mod
import specdec_cli.pair.targets as targets
from specdec_cli.errors import SpecdecError
from specdec_cli.files import write_atomic, write_text_atomic

from .checkpoints import tiny_checkpoint
from .conftest import parse_json_lines, toy_card_dict

ROOT = Path(__file__).resolve().parents[1]


def interrupt_on_call(monkeypatch, owner, name: str, n: int) -> None:
    """Make the n-th call of owner.name raise KeyboardInterrupt (as Ctrl-C would, mid-work)."""
    real, calls = getattr(owner, name), []

    def wrapped(*a, **kw):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(owner, name, wrapped)


def assert_interrupted(r) -> None:
    assert r.exit_code == 130, r.stderr
    assert r.stderr.splitlines()[-1] == "Interrupted." and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------- Ctrl-C
def test_generate_json_interrupted_is_one_object_marked_incomplete(run, monkeypatch):
    interrupt_on_call(monkeypatch, pair_mod, "speculative_decode", 1)  # greedy done, speculative running
    r = run("generate", "-c", "toy", "--json", "ba be")
    assert_interrupted(r)
    assert json.loads(r.stdout) == {"incomplete": True, "reason": "interrupted", "command": "generate",
                                    "card": "toy", "prompt": "ba be"}


def test_generate_interrupted_while_loading(run, monkeypatch):
    interrupt_on_call(monkeypatch, targets, "load", 1)  # the target's load
    r = run("generate", "-c", "toy", "--json", "ba")
    assert_interrupted(r)
    assert json.loads(r.stdout)["incomplete"] is True
    interrupt_on_call(monkeypatch, targets, "load", 1)
    r = run("generate", "-c", "toy", "ba")  # not --json: nothing on stdout at all
    assert_interrupted(r)
    assert r.stdout == ""


def test_prompts_file_interrupted_keeps_whole_lines_then_a_marker(run, monkeypatch, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "ba be bi"[: 2 + i]}) + "\n" for i in range(3)))
    interrupt_on_call(monkeypatch, pair_mod, "speculative_decode", 2)
    r = run("generate", "-c", "toy", "--prompts-file", f)
    assert_interrupted(r)
    rows = parse_json_lines(r.stdout)  # every line is valid JSON
    assert [row.get("id") for row in rows] == ["p0", None] and rows[0]["identical"] is True
    assert rows[-1] == {"incomplete": True, "reason": "interrupted", "command": "generate", "card": "toy", "completed": 1}


def test_verify_exactness_json_interrupted(run, monkeypatch):
    interrupt_on_call(monkeypatch, pair_mod, "speculative_decode", 3)
    r = run("verify-exactness", "-c", "toy", "-k", "1,2,4", "--json", "ba be")
    assert_interrupted(r)
    rows = parse_json_lines(r.stdout)
    assert [row["k"] for row in rows[:-1]] == [1, 2] and all(row["identical"] for row in rows[:-1])
    assert rows[-1] == {"incomplete": True, "reason": "interrupted", "command": "verify-exactness", "card": "toy",
                        "completed": 2}


@pytest.fixture
def three_prompts(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "ba be", "category": "qa"}) + "\n" for i in range(3)))
    return f


def test_bench_json_interrupted_keeps_finished_rows_and_writes_no_files(run, monkeypatch, three_prompts, tmp_path):
    csv = tmp_path / "bench.csv"
    # greedy calls: 1 warm-up, then one per prompt (repeats 1): the 3rd is prompt p1's
    interrupt_on_call(monkeypatch, pair_mod.Pair, "greedy", 3)
    r = run("bench", "-c", "toy", "-n", "16", "-r", "1", "--prompts-file", three_prompts, "--json", "--csv", csv)
    assert_interrupted(r)
    rows = parse_json_lines(r.stdout)
    assert [(row["scope"], row["name"], row["identical"]) for row in rows[:-1]] == [("prompt", "p0", True)]
    assert rows[-1] == {"incomplete": True, "reason": "interrupted", "command": "bench", "card": "toy", "completed": 1}
    assert not csv.exists() and list(tmp_path.iterdir()) == [three_prompts]  # no file, no temp file


def sigint_after(args: list[str], ready: str, stream: str = "stderr", wait: float = 0.3):
    """Run `python -m specdec_cli ARGS`, wait until `ready` appears on `stream`, send SIGINT
    (what Ctrl-C does), and return (exit code, stdout, stderr)."""
    env = {**os.environ, "COLUMNS": "200"}
    p = subprocess.Popen([sys.executable, "-m", "specdec_cli", *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watched, seen, deadline = getattr(p, stream), b"", time.monotonic() + 60
    try:
        while ready.encode() not in seen:
            assert time.monotonic() < deadline and p.poll() is None, seen.decode(errors="replace")
            if select.select([watched], [], [], 0.5)[0]:
                seen += os.read(watched.fileno(), 65536)
        time.sleep(wait)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if stream == "stdout":
        out = seen + out
    else:
        err = seen + err
    return p.returncode, out.decode(), err.decode()


def test_real_sigint_during_generate_json(write_card, tmp_path):
    """A real SIGINT to a real process: exit 130, one valid JSON object marked incomplete.
    (A tiny random model with a huge context window and no EOS: it would run for minutes.)"""
    config = json.loads((ROOT / "cards/configs/tiny-llama.json").read_text())
    (tmp_path / "long.json").write_text(json.dumps({**config, "max_position_embeddings": 1_000_000}))
    path = write_card({**toy_card_dict(), "target": "random:long.json", "draft": {"kind": "prompt-lookup"}}, "long")
    code, out, err = sigint_after(["generate", "-c", str(path), "--json", "-n", "900000", "hi"], ready="card long")
    assert code == 130, err
    assert json.loads(out)["incomplete"] is True
    assert err.rstrip().splitlines()[-1] == "Interrupted." and "Traceback" not in err


def test_real_sigint_during_a_prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "ba be"}) + "\n" for i in range(1000)))
    code, out, err = sigint_after(["generate", "-c", "toy", "-n", "3000", "--prompts-file", str(path)], ready="\n",
                                  stream="stdout")
    assert code == 130, err
    rows = parse_json_lines(out)  # the process was cut mid-stream: still whole JSON lines
    assert rows[-1]["incomplete"] is True and rows[-1]["completed"] == len(rows) - 1 >= 1
    assert all(row["identical"] for row in rows[:-1])
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- output files
def test_write_atomic_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old\n")

    def half_then_fail(p):
        p.write_text("new, half wri")
        assert path.read_text() == "old\n"  # readers still see the old file while we write
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomic(path, half_then_fail)
    assert path.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [path]

    def interrupted(p):
        p.write_text("new, half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, interrupted)
    assert path.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [path]
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and sorted(tmp_path.iterdir()) == [path]


def test_write_atomic_refuses_a_directory_and_a_missing_folder(tmp_path):
    with pytest.raises(SpecdecError, match=f"^--csv file {tmp_path} is a directory; give a file name$"):
        write_text_atomic(tmp_path, "x", "--csv")
    with pytest.raises(SpecdecError, match="folder .*/nope does not exist"):
        write_text_atomic(tmp_path / "nope" / "out.csv", "x", "--csv")
    assert list(tmp_path.iterdir()) == []


def test_write_atomic_gives_the_mode_a_plain_write_would(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    new = write_text_atomic(tmp_path / "new.csv", "x")
    assert new.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    old = tmp_path / "old.csv"
    old.write_text("x")
    old.chmod(0o640)
    write_text_atomic(old, "y")
    assert old.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("option", ["--csv", "--plot"])
def test_bench_refuses_to_write_over_a_directory(run, tmp_path, option):
    extra = ["--agree-sweep", "1.0"] if option == "--plot" else []
    r = run("bench", "-c", "toy", *extra, option, tmp_path)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"Error: command line: {option}: {tmp_path} is a directory; give a file name\n"


# ---------------------------------------------------------------------------- trust
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("trust") / "tiny")


def spy_from_pretrained(monkeypatch) -> list[dict]:
    """Record the keyword arguments of every transformers from_pretrained call."""
    import transformers

    seen = []
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = cls.from_pretrained.__func__

        def spy(klass, *a, _real=real, **kw):
            seen.append(kw)
            return _real(klass, *a, **kw)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    return seen


@pytest.mark.parametrize("trust", [False, True])
def test_trust_remote_code_only_when_the_card_says_so_and_then_a_warning(run, write_card, checkpoint, monkeypatch, trust):
    seen = spy_from_pretrained(monkeypatch)
    raw = {"description": "t", "target": str(checkpoint), "draft": {"kind": "prompt-lookup"}, "device": "cpu",
           "decoding": {"max_tokens": 4}}
    path = write_card({**raw, "trust_remote_code": True} if trust else raw)
    r = run("generate", "-c", path, "--json", "ba be")
    assert r.exit_code == 0, r.stderr
    assert len(seen) == 2 and all(kw["trust_remote_code"] is trust for kw in seen)
    assert seen[1]["weights_only"] is True  # the model: pickled .bin weights can never run code
    warning = (f"Warning: card card sets trust_remote_code: true: Python code shipped with {checkpoint} may run on "
               f"this machine while loading. Use only repositories you trust.")
    assert (warning in r.stderr.splitlines()) is trust
    assert "Warning" not in r.stderr or trust


def test_safetensors_preferred_over_bin(tmp_path, checkpoint):
    """Both files present: the weights come from model.safetensors, never the pickle."""
    import shutil

    import torch

    from specdec_cli.engine.models import load, parse_ref

    both = tmp_path / "both"
    shutil.copytree(checkpoint, both)
    ref = parse_ref(str(both), tmp_path)
    lm, _ = load(ref, torch.device("cpu"), torch.float32)
    state = {name: torch.zeros_like(t) for name, t in lm.model.state_dict().items()}
    torch.save(state, both / "pytorch_model.bin")  # different weights under the .bin name
    again, _ = load(ref, torch.device("cpu"), torch.float32)
    assert again.model.lm_head.weight.abs().sum() > 0  # not the zeros of the .bin
    assert torch.equal(again.model.lm_head.weight, lm.model.lm_head.weight)


class Payload:
    """A pickle that runs code when unpickled by a trusting loader."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_bin_that_would_run_code_is_refused(run, write_card, tmp_path, checkpoint):
    """A checkpoint with only pytorch_model.bin still loads (transformers' fallback), but through
    torch.load(weights_only=True): a payload that would run code is one error line, never run."""
    import shutil

    import torch

    evil, marker = tmp_path / "evil", tmp_path / "pwned"
    shutil.copytree(checkpoint, evil)
    (evil / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, evil / "pytorch_model.bin")
    path = write_card({"description": "t", "target": str(evil), "draft": {"kind": "prompt-lookup"}, "device": "cpu"})
    r = run("generate", "-c", path, "ba")
    assert r.exit_code == 2 and not marker.exists()
    assert r.stderr.startswith(f"Error: cannot load model '{evil}': ") and r.stderr.count("\n") == 1, r.stderr
    assert "Weights only load failed" in r.stderr


def test_bin_only_checkpoints_still_load(tmp_path, checkpoint):
    import shutil

    import torch

    from specdec_cli.engine.models import load, parse_ref

    only_bin = tmp_path / "bin"
    shutil.copytree(checkpoint, only_bin)
    ref = parse_ref(str(only_bin), tmp_path)
    lm, _ = load(ref, torch.device("cpu"), torch.float32)
    torch.save(lm.model.state_dict(), only_bin / "pytorch_model.bin")
    (only_bin / "model.safetensors").unlink()
    again, _ = load(ref, torch.device("cpu"), torch.float32)
    assert torch.equal(again.model.lm_head.weight, lm.model.lm_head.weight)


def test_a_card_cannot_run_code(run, tmp_path):
    """YAML tags that construct Python objects are refused (safe_load): nothing runs."""
    marker = tmp_path / "pwned"
    card = tmp_path / "card.yaml"
    card.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    r = run("generate", "-c", card, "ba")
    assert r.exit_code == 2 and "malformed YAML" in r.stderr and not marker.exists()
    card.write_text(f"description: !!python/object/apply:os.system ['touch {marker}']\ntarget: toy\n"
                    "draft: {kind: toy, agree: 0.5}\n")
    assert run("generate", "-c", card, "ba").exit_code == 2 and not marker.exists()


def test_random_config_auto_map_is_ignored_without_trust(tmp_path, run, write_card):
    """A config naming remote code (auto_map) loads the built-in class; nothing is fetched or run."""
    config = json.loads((ROOT / "cards/configs/tiny-llama.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "someone/evil--modeling_evil.EvilForCausalLM"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    path = write_card({**toy_card_dict(), "target": "random:c.json", "draft": {"kind": "prompt-lookup"},
                       "decoding": {"max_tokens": 3}})
    r = run("generate", "-c", path, "--json", "hi")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["identical"] is True
