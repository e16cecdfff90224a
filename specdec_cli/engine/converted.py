"""GGUF files as transformers folders, made once per machine: the weights de-quantised to float32
safetensors, with the tokenizer and its chat template, in specdec's cache (converted/<file name
less .gguf>, about 4 bytes a parameter: 0.5 GB for SmolLM2-135M).

Two readers. specdec's loader (models.load) reads the folder in place of the file: transformers
parses a GGUF file three times (config, tokenizer, weights) and maps every tensor's name, 23 s for
SmolLM2-135M where the folder loads in 2.5 s (docs/kernels.md). And vLLM, which on a CPU loads no
GGUF file, is given the folder (cards/export.py). A stamp in the folder (source.json) names the
file it came from (path, size, modification time) and the transformers that de-quantised it; a
folder whose stamp differs from the file's is made again. A folder appears whole (one rename) or
not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import nullcontext
from pathlib import Path

from specdec_cli.files import cache_dir

STAMP = "source.json"


def folder(gguf: Path) -> Path:
    """Where the transformers folder converted from `gguf` lives (made or not)."""
    return cache_dir("converted", gguf.name.removesuffix(".gguf"))


# Shards of at most this size: models.load reads a CPU target's weights into memory a shard at a
# time (not mapped, so a weight freed later gives its memory back), and holds one shard's bytes
# beside the weights while it does (one 7.1 GB file: 14.0 GB at load for the Qwen pair's target).
SHARD = "500MB"


def is_converted(path: str) -> bool:
    return Path(path).parent == cache_dir("converted")


def stamp(gguf: Path) -> dict:
    """What a folder made from `gguf` now would record: the file and the de-quantising code."""
    import transformers

    info = gguf.resolve().stat()
    return {"gguf": str(gguf.resolve()), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "transformers": transformers.__version__, "shard": SHARD}


def ready(gguf: Path) -> Path | None:
    """folder(gguf) if it was made from this very file by this transformers, else None."""
    out = folder(gguf)
    try:
        return out if json.loads((out / STAMP).read_text()) == stamp(gguf) else None
    except (OSError, ValueError):
        return None


def convert(gguf: Path) -> Path:
    """folder(gguf), made now unless ready(). An OSError (a full disk, a read-only cache) leaves
    nothing behind and reaches the caller, who may load the file itself instead."""
    if made := ready(gguf):
        return made
    import torch
    import transformers

    out = folder(gguf)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")  # one per process: two may convert at once
    try:
        tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                                  dtype=torch.float32)
        # A model loaded from GGUF keeps the GGUF quantizer (hf_quantizer, and quantization_config
        # in its config) though its weights are plain tensors by now, and save_pretrained refuses
        # it ("The model is quantized with gguf and is not serializable"). Cleared, it saves
        # float32 safetensors, and the saved config does not send a reader looking for GGUF.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(partial, max_shard_size=SHARD)
        tok.save_pretrained(partial)  # tokenizer.json, the chat template, the special tokens
        (partial / STAMP).write_text(json.dumps(stamp(gguf)))
        del model
        shutil.rmtree(out, ignore_errors=True)  # a stale folder (another file, another transformers)
        os.rename(partial, out)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, OSError) and (made := ready(gguf)):  # another process renamed its folder first
            return made
        raise
    return out


def read_as(gguf: Path, on_convert=None) -> Path | None:
    """The folder a load reads in place of `gguf`, made now if it is not ready (`on_convert(gguf,
    folder)`: a context around that, for the caller to show); None where it cannot be kept (a
    full disk, a read-only cache): the file itself is loaded then."""
    if made := ready(gguf):
        return made
    with (on_convert or (lambda *_: nullcontext()))(gguf, folder(gguf)):
        try:
            return convert(gguf)
        except OSError:
            return None
