"""`dtype: auto` on a CPU: float32 or bfloat16, whichever runs this target's plain step faster on
this machine, measured once per model and CPU (at the threads of the run that measures) and kept
under the user cache (cache_dir("dtypes")).

bfloat16 halves the bytes a step streams; whether that makes the step faster depends on the CPU's
bfloat16 kernels and on how much of the step is per-op work rather than matmuls (docs/kernels.md:
the Qwen pair ran 1.28-1.36x faster on an Intel Xeon, SmolLM2-135M had no winner). Both are exact
against their own greedy (bfloat16 under pinned shapes), so the choice is speed, and at a tie
float32's precision: bfloat16 is kept only when its step costs at most CLEAR_WIN of float32's.
A step is what a run in that dtype takes per plain token: float32 free shapes at the width its
profile runs one token at, bfloat16 pinned at W = WIDTH (both from the cost profile, cached too).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specdec_cli.engine.costs import model_name
from specdec_cli.files import cache_dir, write_text_atomic

CLEAR_WIN = 0.85  # bfloat16 must take at most this share of float32's step (a tie keeps float32's precision)
WIDTH = 5  # bfloat16's pinned step is timed at W = 5 (k = 4, the cards' default)
VERSION = 2  # bump when a file's meaning changes: older choices are measured again (2: bfloat16 prepacked)
CHOICES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Choice:
    """What `dtype: auto` chose and the two steps it was chosen from (milliseconds)."""

    dtype: str  # one of CHOICES
    float32_ms: float
    bfloat16_ms: float
    cached: bool = False  # read from the cache, not measured in this process

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def why(self) -> str:
        """One line for the status line: which, and why."""
        speed = self.float32_ms / self.bfloat16_ms
        rule = f", under the {1 / CLEAR_WIN:.2f}x it must reach" if self.dtype == "float32" and speed > 1 else ""
        when = "measured earlier on this CPU" if self.cached else "measured now, once for this CPU"
        return (f"auto: a bfloat16 step {self.bfloat16_ms:.0f} ms, float32 {self.float32_ms:.0f} ms: bfloat16 at "
                f"{speed:.2f}x float32's speed{rule}; {when}")

    def as_dict(self) -> dict:
        return {"dtype": self.dtype, "float32_ms": round(self.float32_ms, 2), "bfloat16_ms": round(self.bfloat16_ms, 2),
                "cached": self.cached}


def decide(float32_s: float, bfloat16_s: float) -> Choice:
    """The choice from the two measured steps (seconds)."""
    dtype = "bfloat16" if bfloat16_s <= CLEAR_WIN * float32_s else "float32"
    return Choice(dtype, float32_s * 1e3, bfloat16_s * 1e3)


def step_seconds(profile, width: int | None) -> float:
    """A plain token's forward from a cost profile, averaged over its contexts: at `width` (pinned
    shapes), else at the width a free one-token forward runs at (padded: cost_profile.width)."""
    n = width or profile.width(1)
    return statistics.fmean(row[n - 1] for row in profile.verify_s)


# ---------------------------------------------------------------------------- the cache
def cpu_name() -> str:
    """/proc/cpuinfo's model name (lscpu's), or the platform's processor string elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def key(model: str, revision: str | None) -> dict:
    """What a choice depends on: the model (costs.model_name), the CPU and torch. Not k (one
    choice, made at WIDTH) and not the threads of the run that made it: runs at any k or thread
    count load the same weights, so their text does not depend on either."""
    return {"model": model_name(model), "revision": revision, "width": WIDTH, "cpu": cpu_name(), "torch": torch.__version__,
            "version": VERSION}


def path(key: dict) -> Path:
    """The file that holds the choice for `key`."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir("dtypes") / f"{digest}.json"


def read(key: dict) -> Choice | None:
    """The cached choice for `key`; None when there is none (or it is unreadable: one warning)."""
    file = path(key)
    if not file.exists():
        return None
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
        choice = Choice(raw["dtype"], float(raw["float32_ms"]), float(raw["bfloat16_ms"]), cached=True)
        if raw.get("key") != key or choice.dtype not in CHOICES or min(choice.float32_ms, choice.bfloat16_ms) <= 0:
            raise ValueError("fields do not fit")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"Warning: dtype choice {file} is unreadable ({type(e).__name__}); measuring again", file=sys.stderr)
        return None
    return choice


def write(key: dict, choice: Choice) -> None:
    """Best effort, atomically: an unwritable cache means measuring again next time (one warning)."""
    file = path(key)
    data = {**asdict(choice), "key": key}
    data.pop("cached")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(file, json.dumps(data, indent=1), "dtype choice")
    except Exception as e:  # noqa: BLE001 - caching is an optimisation, never a failure
        print(f"Warning: cannot write the dtype choice to {file.parent} ({type(e).__name__})", file=sys.stderr)
