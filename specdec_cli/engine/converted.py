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

A load in bfloat16 or float16 reads a folder of its own, `<name>-<dtype>`, made once from the
float32 one: transformers reading float32 shards into a bfloat16 model held both (the Qwen pair's
target peaked at 10.9 GB for 3.1 GB of weights, 3.5 GB from its own folder).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import nullcontext
from pathlib import Path

from specdec_cli.files import cache_dir

STAMP = "source.json"


def folder(gguf: Path, dtype: str = "float32") -> Path:
    """Where the transformers folder converted from `gguf` in `dtype` lives (made or not)."""
    name = gguf.name.removesuffix(".gguf")
    return cache_dir("converted", name if dtype == "float32" else f"{name}-{dtype}")


# Shards of at most this size: models.load reads a CPU target's weights into memory a shard at a
# time (not mapped, so a weight freed later gives its memory back), and holds one shard's bytes
# beside the weights while it does (one 7.1 GB file: 14.0 GB at load for the Qwen pair's target).
SHARD = "500MB"


def is_converted(path: str) -> bool:
    return Path(path).parent == cache_dir("converted")


def stamp(gguf: Path, dtype: str = "float32") -> dict:
    """What a folder made from `gguf` now would record: the file and the de-quantising code."""
    import transformers

    info = gguf.resolve().stat()
    made = {"gguf": str(gguf.resolve()), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "transformers": transformers.__version__, "shard": SHARD}
    return made if dtype == "float32" else {**made, "dtype": dtype}


def ready(gguf: Path, dtype: str = "float32") -> Path | None:
    """folder(gguf, dtype) if it was made from this very file by this transformers, else None."""
    out = folder(gguf, dtype)
    try:
        return out if json.loads((out / STAMP).read_text()) == stamp(gguf, dtype) else None
    except (OSError, ValueError):
        return None


def convert(gguf: Path, dtype: str = "float32") -> Path:
    """folder(gguf, dtype), made now unless ready(): float32 from the file, another dtype from the
    float32 folder. An OSError (a full disk, a read-only cache) leaves nothing behind and reaches
    the caller, who may load the file itself instead."""
    if made := ready(gguf, dtype):
        return made
    import torch
    import transformers

    read = ({"pretrained_model_name_or_path": gguf.parent, "gguf_file": gguf.name} if dtype == "float32"
            else {"pretrained_model_name_or_path": convert(gguf)})  # another dtype: from the float32 folder
    out = folder(gguf, dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")  # one per process: two may convert at once
    try:
        tok = transformers.AutoTokenizer.from_pretrained(**read)
        model = transformers.AutoModelForCausalLM.from_pretrained(**read, dtype=torch.float32)
        # A model loaded from GGUF keeps the GGUF quantizer (hf_quantizer, and quantization_config
        # in its config) though its weights are plain tensors by now, and save_pretrained refuses
        # it ("The model is quantized with gguf and is not serializable"). Cleared, it saves
        # float32 safetensors, and the saved config does not send a reader looking for GGUF.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.to(getattr(torch, dtype))  # in place, a tensor at a time
        model.save_pretrained(partial, max_shard_size=SHARD)
        tok.save_pretrained(partial)  # tokenizer.json, the chat template, the special tokens
        (partial / STAMP).write_text(json.dumps(stamp(gguf, dtype)))
        del model
        shutil.rmtree(out, ignore_errors=True)  # a stale folder (another file, another transformers)
        os.rename(partial, out)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, OSError) and (made := ready(gguf, dtype)):  # another process renamed its folder first
            return made
        raise
    return out


def read_as(gguf: Path, on_convert=None, dtype: str = "float32") -> Path | None:
    """The folder a load in `dtype` reads in place of `gguf`, made now if it is not ready
    (`on_convert(gguf, folder, dtype)`: a context around that, for the caller to show); None where it
    cannot be kept (a full disk, a read-only cache): the file itself is loaded then."""
    if made := ready(gguf, dtype):
        return made
    with (on_convert or (lambda *_: nullcontext()))(gguf, folder(gguf, dtype), dtype):
        try:
            return convert(gguf, dtype)
        except OSError:
            return None
