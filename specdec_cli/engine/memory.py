"""How much memory this process has held: the figure that says whether a pair fits a machine."""

from __future__ import annotations

import sys


def peak_rss_mb() -> float | None:
    """Peak resident set size of this process so far, in MB (2^20 bytes); None where the OS
    does not report it (Windows). It covers everything loaded: target, draft, caches, torch."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB; macOS: bytes
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def available_bytes() -> int | None:
    """Memory the OS could give this process now without swapping (Linux's MemAvailable); None
    where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            line = next((line for line in f if line.startswith("MemAvailable:")), None)
    except OSError:
        return None
    return int(line.split()[1]) * 1024 if line else None


def give_back() -> None:
    """Return freed heap memory to the OS now (glibc's malloc_trim; nothing elsewhere). Weights
    read from safetensors sit in glibc's heap; once freed (a draft's float layers quantized to
    int8, the plain weights of the packed world) glibc kept them: the Qwen draft held 3.4 GB
    after its quantization, 2.0 GB after this."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return
    if trim is not None:
        trim(0)
