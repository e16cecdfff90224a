"""A GGUF file is loaded through the transformers folder engine/converted.py makes from it once
per machine (float32 safetensors: 23 s of GGUF parsing become 2.5 s). Each test here starts from
a cache where the folder was never made, and so writes 0.5 GB into its own temporary cache."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from specdec_cli.engine import converted
from specdec_cli.engine.models import parse_ref
from tests.conftest import DATA, SMOLLM2

pytestmark = pytest.mark.slow

PROMPT = "Explain what a hash table is."


def smollm2_gguf() -> Path:
    ref = parse_ref(SMOLLM2, DATA)
    return Path(ref.source) / ref.gguf_file


def greedy(run) -> tuple[list[int], str]:
    r = run("generate", "-c", "smollm2", "-m", "greedy", "-n", "8", "--json", PROMPT)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["greedy"]["tokens"], r.stderr


def test_the_first_load_converts_and_later_loads_read_the_folder(run, monkeypatch, tmp_path):
    import transformers

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # never made here
    gguf, folder = smollm2_gguf(), tmp_path / "specdec" / "converted" / "SmolLM2-135M-Instruct.Q4_1"
    tokens, err = greedy(run)
    assert re.search(f"^kept SmolLM2-135M-Instruct.Q4_1.gguf de-quantised to float32 in {re.escape(str(folder))} "
                     r"\(0\.5 GB, \d+\.\d s\): later loads read it in seconds$", err, re.MULTILINE), err
    assert converted.ready(gguf) == converted.folder(gguf) == folder
    assert json.loads((folder / "source.json").read_text()) == {
        "gguf": str(gguf.resolve()), "size": gguf.stat().st_size, "mtime_ns": gguf.stat().st_mtime_ns,
        "transformers": transformers.__version__, "shard": converted.SHARD}
    assert len(list(folder.glob("model-*-of-*.safetensors"))) >= 2  # 0.5 GB in shards: read one at a time
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert not list(folder.parent.glob(".*partial"))  # no half-made folder left beside it

    again, err = greedy(run)
    assert again == tokens and "kept" not in err

    # the folder's weights are the file's: logits bitwise those transformers computes from the GGUF
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646]])
    folder_lm = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    gguf_lm = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(folder_lm(ids).logits, gguf_lm(ids).logits)


def test_a_folder_from_another_file_transformers_or_shard_size_is_not_read(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gguf = smollm2_gguf()
    folder = converted.convert(gguf)
    stamp = json.loads((folder / "source.json").read_text())
    for field, other in (("transformers", "4.0.0"), ("size", stamp["size"] + 1), ("mtime_ns", 0), ("shard", "5GB")):
        (folder / "source.json").write_text(json.dumps({**stamp, field: other}))
        assert converted.ready(gguf) is None, field
    (folder / "source.json").unlink()  # a folder from before stamps (export convert's, once)
    assert converted.ready(gguf) is None
    assert converted.convert(gguf) == folder and converted.ready(gguf) == folder  # made again, whole


def test_a_cache_that_cannot_be_written_loads_the_file_itself(run, monkeypatch, tmp_path):
    home = os.environ["XDG_CACHE_HOME"]  # the test's own, with the tests' converted folders
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")  # nothing can be made under it, even by root
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    r = run("generate", "-c", "smollm2", "-m", "greedy", "-n", "8", "--json", PROMPT)
    assert r.exit_code == 0, r.stderr
    assert f"could not write {blocker}/specdec/converted/SmolLM2-135M-Instruct.Q4_1; SmolLM2-135M-Instruct.Q4_1.gguf " \
           f"is read from the file itself, as slowly as before, until the cache has room" in r.stderr
    assert blocker.read_text() == "not a directory"
    monkeypatch.setenv("XDG_CACHE_HOME", home)
    assert json.loads(r.stdout)["greedy"]["tokens"] == greedy(run)[0]  # the same model either way
