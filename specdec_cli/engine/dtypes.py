"""`dtype: auto` on a CPU: float32 or bfloat16, whichever runs this target's decode forwards faster
on this machine, measured once per model and CPU (at the threads of the run that measures) and
kept under the user cache (cache_dir("dtypes")).

bfloat16 halves the bytes a step streams; whether that makes the step faster depends on the CPU's
bfloat16 kernels and on how much of the step is per-op work rather than matmuls (docs/kernels.md).
Both are exact against their own greedy (bfloat16 under pinned shapes), so the choice is speed,
and at a tie float32's precision: bfloat16 is kept only when its forwards cost at most CLEAR_WIN
of float32's. What is compared is a round's target forward, from each dtype's cost profile (cached
too), averaged over the widths 1..WIDTH a round verifies at, a plain step to a full verify, each
alike: float32 free shapes at the width each runs at, bfloat16 pinned at W = WIDTH for all. A
speculative decoder's rounds are what it runs (a cheaper plain step alone would hide a verify that
costs half a step more, SmolLM2's float32 on an Intel Xeon: docs/kernels.md).
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

CLEAR_WIN = 0.85  # bfloat16 must take at most this share of float32's time (a tie keeps float32's precision)
WIDTH = 5  # rounds of widths 1..5 (k = 4, the cards' default); bfloat16's pinned forwards at W = 5
VERSION = 4  # bump when a file's meaning changes: older choices are measured again (2: bfloat16 prepacked; 3: rounds' widths averaged; 4: prepacked q/k/v and gate/up as one weight each)
CHOICES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Choice:
    """What `dtype: auto` chose and the two round forwards it was chosen from (milliseconds: round_seconds)."""

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
        return (f"auto: a bfloat16 forward {self.bfloat16_ms:.0f} ms, float32 {self.float32_ms:.0f} ms (widths "
                f"1-{WIDTH} averaged): bfloat16 at {speed:.2f}x float32's speed{rule}; {when}")

    def as_dict(self) -> dict:
        return {"dtype": self.dtype, "float32_ms": round(self.float32_ms, 2), "bfloat16_ms": round(self.bfloat16_ms, 2),
                "cached": self.cached}


def decide(float32_s: float, bfloat16_s: float) -> Choice:
    """The choice from the two measured round forwards (seconds)."""
    dtype = "bfloat16" if bfloat16_s <= CLEAR_WIN * float32_s else "float32"
    return Choice(dtype, float32_s * 1e3, bfloat16_s * 1e3)


def round_seconds(profile, width: int, pinned: bool) -> float:
    """A round's target forward from a cost profile, averaged over its contexts and over the
    widths n = 1..width a round verifies at: pinned shapes run each one `width` wide, free ones at
    the width n runs at (padded: cost_profile.width)."""
    runs = [width if pinned else profile.width(n) for n in range(1, width + 1)]
    return statistics.fmean(row[m - 1] for row in profile.verify_s for m in runs)


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
