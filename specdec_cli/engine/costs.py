"""What a round costs on this machine: the target's forward time over n new tokens (n = 1..N,
at a short and a long context) and the draft's time per proposed token, measured once and
cached per (model, revision, device, dtype, torch threads, torch version).

On a CPU the verify cost is not monotonic in n (a 2- or 3-row matmul can cost more than a
5-row one), so the schedule reads the measured curve; nothing here is assumed.

The cache lives under the user cache directory (files.cache_dir("costs")), one JSON file per
key, written atomically. A corrupt file is re-measured with one warning; an unwritable
directory means measuring without caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from specdec_cli.engine import kernels
from specdec_cli.engine.cost_profile import BUSY_SPREAD, CHECKED_STEP_S, CostProfile, cheapest_widths, fixed  # noqa: F401  (costs' API)
from specdec_cli.engine.kvcache import KVCache, capacity_for
from specdec_cli.files import cache_dir, write_text_atomic

VERSION = 17  # bump when the file's meaning changes: old files are then re-measured (2: weight_major; 3: medians; 4: batch_weight_major; 5: batch_packed; 6: every width's form, the greedy step's too; 7: padded widths; 8: spread; 9: one world of forms, plain or packed; 10: a batch's world; 11: the decode forward without transformers' framework, decoder.py; 12: a draft's int8 layers are RowInt8Linear; 13: int8 q/k/v and gate/up fused, RowInt8Fused; 14: int8 layers through oneDNN; 15: bfloat16 times the prepacked form; 16: the packed world's LM head in W @ xᵀ; 17: q/k/v and gate/up prepacked as one weight each, K/V written as slices)
PROBE_REPEATS = 5  # timed forwards per width; the median is kept (see forward_seconds)
MIN_WIDTHS = 5  # measure at least n = 1..5 (k = 4); a larger k extends the profile when asked
SLOW_STEP_S = 0.15  # a target this slow per token (a 1B+ model on a CPU) gets 3 tries per width
SLOW_REPEATS = 3
DRIFT = 1.5  # a cached profile's step this much slower than a quick check now: it was measured while busy


# ---------------------------------------------------------------------------- measuring
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def forward_seconds(jobs: list[tuple], context: list[int], repeats: int | None = None,
                    prefills: list[float] | None = None, spreads: list[float] | None = None) -> list[float]:
    """Seconds of one forward of each (model, width) job over `width` tokens after `context`,
    called the way the loop calls it (argmax + one host sync): the median of the timed tries, not
    the fastest, since on a shared VM one lucky try would set a width's cost (docs/cost-model.md).
    The jobs take turns, so drift hits them alike; each model is prefilled once (Probe).

    Tries: one to warm the shapes up, then `repeats` timed ones; with repeats None,
    PROBE_REPEATS, or SLOW_REPEATS once a 1-token forward is seen to take over SLOW_STEP_S.
    A job is (model, width), or (model, width, form) to time that width in that matmul form
    (linear, weight_major or packed; kernels.py). `prefills` gets each model's prefill seconds,
    `spreads` each job's spread (how far its timed tries are apart: `spread`)."""
    probes = {}
    for lm, *_ in jobs:
        if id(lm) not in probes:
            probes[id(lm)] = Probe(lm, context, max(job[1] for job in jobs if job[0] is lm))
            if prefills is not None and len(context) > 1:
                prefills.append(probes[id(lm)].prefill_s)
    times: list[list[float]] = [[] for _ in jobs]
    tries = 0
    while tries <= (repeats or PROBE_REPEATS):  # try 0 warms the shapes up
        for (lm, width, *form), out in zip(jobs, times):
            with lm.forms.trying(1, width, form[0]) if form else contextlib.nullcontext():
                ids = torch.tensor([(context * width)[-width:]], device=lm.device)  # [1, width]
                _sync(lm.device)
                start = time.perf_counter()
                probes[id(lm)].forward(ids).argmax(-1).tolist()
                out.append(time.perf_counter() - start)
                probes[id(lm)].rollback(width)
        tries += 1
        if repeats is None and tries > SLOW_REPEATS and min(times[0][1:]) / jobs[0][1] > SLOW_STEP_S:
            break  # a slow model: fewer timed tries (seconds, not minutes)
    if spreads is not None:
        spreads.extend(spread(t[1:]) for t in times)
    return [statistics.median(t[1:]) for t in times]


def spread(tries: list[float]) -> float:
    """How far timed tries of one forward are apart, over their median: the interquartile range
    (the full range with fewer than 4 tries). A quiet machine repeats itself within a few
    percent; one shared with another job does not."""
    q = statistics.quantiles(tries, n=4) if len(tries) >= 4 else [min(tries), 0, max(tries)]
    return (q[2] - q[0]) / statistics.median(tries)


class Probe:
    """One model's cache for timing forwards after `context` (its prefill timed once, in
    prefill_s), the way the loop runs that model: transformers' own cache, or, for a compiled
    target (decoding.compile), the loop's fixed-capacity KVCache with its widths warmed untimed."""

    def __init__(self, lm, context: list[int], widths: int):
        self.lm, self.compiled = lm, getattr(lm, "compiled", False)
        if self.compiled:
            self.cache = KVCache(lm, capacity=capacity_for(lm, len(context) + widths))
            self.cache.warm(range(1, widths + 1))
        else:
            self.cache = lm.new_cache()
        _sync(lm.device)
        start = time.perf_counter()
        if self.compiled:
            self.cache.add(context)  # context[:-1] prefilled, as the loop adds a prompt
        elif len(context) > 1:
            lm.forward(torch.tensor([context[:-1]], device=lm.device), self.cache, keep=1)
        _sync(lm.device)
        self.prefill_s = time.perf_counter() - start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [1, n] -> logits [n, V]."""
        return self.cache.forward(ids)[0] if self.compiled else self.lm.forward(ids, self.cache)

    def rollback(self, width: int) -> None:
        if self.compiled:
            self.cache.keep([0])
        else:
            self.cache.crop(-width)


def probe_contexts(max_positions: int | None, widths: int) -> list[int]:
    """A short and a long context that bracket a typical request (a chat-templated prompt is
    rarely under 64 tokens; the long one as long as a typical request gets)."""
    long = 512 if max_positions is None else max(16, min(512, max_positions - widths - 1))
    return [min(64, long // 2), long]


def measure_target(target, widths: int) -> tuple:
    """Verify cost n = 1..widths after a short and a long context (one prefill per context,
    timed too, then every width timed in turn), with the matmul form chosen first for each
    width. Returns (contexts, verify seconds, (weight-major widths, packed widths), prefill
    seconds, spreads [context][n-1])."""
    contexts = probe_contexts(target.max_positions, widths)
    capacity_for(target, max(contexts) + widths)  # compiled: one capacity for both contexts (one set of graphs)
    forms = choose_forms(target, widths, probe_ids(target, contexts[0]))
    switch = getattr(target, "forms", None)
    verify, prefills, spreads = [], [], []
    with switch.keeping() if switch is not None else contextlib.nullcontext():  # timed in the chosen forms
        if switch is not None:
            switch.use(*forms)
        for length in contexts:
            spreads.append([])
            verify.append(forward_seconds([(target, n) for n in range(1, widths + 1)], probe_ids(target, length),
                                          prefills=prefills, spreads=spreads[-1]))
    return contexts, verify, forms, prefills, spreads


FORMS = ("linear", "weight_major", "packed", "packed_head")  # packed_head: the LM head in W @ xᵀ (kernels.py)


def choose_forms(target, widths: int, context: list[int]) -> tuple[list[int], list[int]]:
    """The matmul forms of the target's [1, n] forwards, n = 1..widths (the greedy step's too),
    from timing each width in each form in turn (kernels.py), as one of two worlds, so that
    memory holds one copy of each weight: the plain weights, each width in F.linear unless
    W @ xᵀ measured at least 3 % faster; or, where oneDNN's prepacked weights measured at least
    3 % faster than that across the widths (geometric mean of the ratios), every forward
    prepacked and the plain weights freed; there the LM head, which keeps its plain weight, takes
    W @ xᵀ at the widths where that measured 3 % faster than F.linear. Timing leaves every form
    as it was (profile() switches the choice on). Returns (weight-major widths, or the packed
    world's W @ xᵀ LM head widths; packed widths: all or none); ([], []) for a
    target without the switch (a GPU, a toy). matmuls all / packed: every width in that form,
    untimed (an exactness audit). Once the weights are prepacked alone (a cached profile chose
    them, then was found measured while busy), only the LM head's form is timed."""
    switch = getattr(target, "forms", None)
    if switch is None:
        return [], []
    every = list(range(1, widths + 1))
    if switch.mode in ("all", "packed"):
        return (every, []) if switch.mode == "all" else ([], every)
    offered = FORMS[2:] if switch.whole else FORMS if times_packed(target) else FORMS[:2]
    jobs = [(target, n, form) for n in every for form in offered]
    seconds = dict(zip([(n, form) for _, n, form in jobs], forward_seconds(jobs, context)))
    packed = {n: "packed_head" if seconds[n, "packed_head"] < 0.97 * seconds[n, "packed"] else "packed"
              for n in every} if "packed" in offered else {}
    head = [n for n in every if packed.get(n) == "packed_head"]
    if switch.whole:  # the plain weights are gone (pack_all, as a cached profile chose): the head's form is left
        return head, every
    plain = {n: "weight_major" if seconds[n, "weight_major"] < 0.97 * seconds[n, "linear"] else "linear" for n in every}
    if packed and packed_world(seconds, plain, packed):
        return head, every
    switch.unpack()  # copies made while timing, not chosen
    return [n for n in every if plain[n] == "weight_major"], []


def times_packed(target) -> bool:
    """Whether the prepacked form is timed for `target`: it runs here and its copy of the weights
    fits in the memory available (kernels.no_room_to_pack; a warning says so where it does not)."""
    if not kernels.can_pack(target.model):
        return False
    cramped = kernels.no_room_to_pack(target.model)
    if cramped:
        _warn(f"oneDNN's prepacked weights are not timed: {cramped}", once=True)  # the one-row and batch timings both ask
    return not cramped


def packed_world(seconds: dict, plain: dict, packed: dict | None = None) -> bool:
    """Whether the prepacked weights, for every forward, beat the plain world: at least 3 %
    faster across the shapes (the geometric mean of packed / plain seconds), each shape counting
    alike. seconds: (n, form) -> seconds; plain: n -> the plain world's form for n; packed: n ->
    the packed world's (packed, or packed_head; default packed). The one rule for one-row widths
    (choose_forms) and a batch's rectangles (batch.rectangle_seconds)."""
    packed = packed or {}
    return statistics.geometric_mean([seconds[n, packed.get(n, "packed")] / seconds[n, form]
                                      for n, form in plain.items()]) < 0.97


def probe_ids(target, length: int) -> list[int]:
    """`length` token ids to measure after: any ids will do."""
    return [(7 * i + 3) % min(target.vocab_size, 1000) for i in range(length)]


# ---------------------------------------------------------------------------- the cache
def model_key(target, ref: str, revision: str | None) -> dict:
    """What a measurement depends on (the model named by model_name)."""
    dtype = getattr(getattr(target, "model", None), "dtype", None)
    return {"model": model_name(ref), "revision": revision, "device": str(target.device),
            "dtype": str(dtype or "n/a").removeprefix("torch."), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "matmuls": matmuls(target), "quantize": getattr(target, "quantized", "none"),
            "version": VERSION}


def model_name(ref: str) -> str:
    """A model as a cache key names it: a local file by its path, size and mtime, so a replaced
    file is measured again; anything else (a hub id, a folder) by itself."""
    path = Path(ref)
    if not path.is_file():
        return ref
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{int(st.st_mtime)}"


def matmuls(target) -> str:
    """The target's matmul mode (kernels.ForwardPolicy): what its profile was measured under."""
    switch = getattr(target, "forms", None)
    if getattr(target, "compiled", False):  # decoding.compile: timed through the compiled forwards
        return "compiled" if switch is None else f"compiled {switch.mode}"  # inductor's forms, or the prepacked
    return switch.mode if switch is not None else "off"


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir("costs") / f"{digest}.json"


_SAID: set[str] = set()  # the warnings said once per process (_warn's once)


def _warn(message: str, once: bool = False) -> None:
    if once and message in _SAID:
        return
    _SAID.add(message)
    print(f"Warning: {message}", file=sys.stderr)


def read(key: dict) -> CostProfile | None:
    path = _path(key)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        profile = CostProfile(**{k: raw[k] for k in ("key", "contexts", "verify_s", "draft_s", "measured_s")},
                              batch_s=raw.get("batch_s", {}), weight_major=raw.get("weight_major", []),
                              packed=raw.get("packed", []),
                              batch_weight_major=raw.get("batch_weight_major", {}),
                              batch_packed=raw.get("batch_packed", {}),
                              prefill_s=raw.get("prefill_s", []), padded=raw.get("padded", {}),
                              spread=raw.get("spread", []))
        ok = (profile.key == key and len(profile.contexts) == len(profile.verify_s) >= 1
              and isinstance(profile.draft_s, dict) and isinstance(profile.batch_s, dict)
              and all(len(row) == profile.widths and all(x > 0 for x in row) for row in profile.verify_s)
              and all(isinstance(v, (int, float)) and v >= 0 for v in profile.draft_s.values())
              and all(len(row) == profile.widths and all(x > 0 for x in row) for row in profile.batch_s.values())
              and all(isinstance(ns, list) and all(type(n) is int and 1 <= n <= profile.widths for n in ns)
                      for ns in (profile.weight_major, profile.packed))
              and isinstance(profile.prefill_s, list)
              and isinstance(profile.padded, dict) and all(type(w) is int and int(n) < w <= profile.widths
                                                           for n, w in profile.padded.items())
              and len(profile.prefill_s) in (0, len(profile.contexts))
              and all(isinstance(x, (int, float)) and x > 0 for x in profile.prefill_s)
              and all(isinstance(forms, dict) and all(rows in profile.batch_s and isinstance(ns, list)
                                                      and all(type(n) is int and low <= n <= profile.widths for n in ns)
                                                      for rows, ns in forms.items())
                      # a batch's greedy step (n = 1) keeps F.linear in the plain world, not in the packed one
                      for forms, low in ((profile.batch_weight_major, 2), (profile.batch_packed, 1))))
        if not ok:
            raise ValueError("fields do not fit")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        _warn(f"cost profile {path} is unreadable ({type(e).__name__}: {str(e)[:80]}); measuring again")
        return None
    profile.cached = True
    return profile


def write(profile: CostProfile) -> None:
    """Best effort: a cache that cannot be written (read-only, full) is skipped, once, quietly
    but for one warning line."""
    path = _path(profile.key)
    data = {k: v for k, v in asdict(profile).items() if k not in ("cached", "timed")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=1), "cost profile")
    except Exception as e:  # noqa: BLE001 - caching is an optimisation, never a failure
        _warn(f"cannot write the cost profile to {path.parent} ({type(e).__name__}); running without the cache")


def profile(target, ref: str, revision: str | None, drafts: dict, widths: int = MIN_WIDTHS,
            remeasure: bool = False) -> CostProfile:
    """The cost profile for `target` and the drafts that cost time (label -> draft with
    step_seconds): read from the cache, or measured (and cached). A cached profile missing a
    width or a draft is completed by measuring what it lacks."""
    key = model_key(target, ref, revision)
    widths = max(widths, MIN_WIDTHS)
    found = None if remeasure else read(key)
    if found is not None and (found.busy or found.widths < widths):  # busy: cached by an older rule; narrow: measured again
        found = None
    if found is not None:
        switch_forms(target, found)  # a step now is timed in the forms it was measured in
        if measured_while_busy(target, found):
            found = None
    start = time.perf_counter()
    if found is None:
        contexts, verify, (major, packed), prefills, spreads = measure_target(target, widths)
        found = CostProfile(key, contexts, verify, {}, weight_major=major, packed=packed, prefill_s=prefills,
                            spread=spreads)
        found.padded = cheapest_widths(found) if getattr(target, "pads", False) else {}
        if found.busy:
            middle = max(statistics.median(row) for row in spreads if row)
            _warn(f"the machine looked busy while measuring the cost profile (each width's timings spread "
                  f"{middle:.0%} at the median); using it for this run only, not caching it: measure on a quiet machine")
    switch_forms(target, found)  # the one decision: the forms the curve was measured with...
    if getattr(target, "pads", False):  # ...and the widths its free one-row forwards run at
        target.pad({int(n): w for n, w in found.padded.items()})
    missing = {label: d for label, d in drafts.items() if label not in found.draft_s}
    if missing:
        context = probe_ids(target, found.contexts[0])
        for label, draft in missing.items():
            found.draft_s[label] = draft.step_seconds(context)
    if found.cached and not missing:
        return found
    found.measured_s += time.perf_counter() - start
    save(found)
    return found


def switch_forms(target, found: CostProfile) -> None:
    """The target's one-row forwards switched to the matmul forms `found` was measured with."""
    if getattr(target, "forms", None) is not None:
        target.forms.use(found.weight_major, found.packed)


def with_batch(found: CostProfile, rows: int,
               measure: Callable[[int], tuple[list[float], list[int], list[int]]]) -> CostProfile:
    """`found` with the cost of a [rows, n] verify (n = 1..widths) and the n whose matmuls
    take W @ xᵀ or the prepacked weights (kernels.py): measure(widths) -> (seconds, those n,
    these n), once per batch size, cached with the rest of the profile."""
    if str(rows) not in found.batch_s:
        start = time.perf_counter()
        found.batch_s[str(rows)], found.batch_weight_major[str(rows)], found.batch_packed[str(rows)] = measure(found.widths)
        found.measured_s += time.perf_counter() - start
        save(found)
    return found


def save(found: CostProfile) -> None:
    if not found.busy:  # a profile measured beside another job would be wrong for good
        write(found)


def measured_while_busy(target, found: CostProfile) -> bool:
    """A quick check of a cached profile against this machine now (3 one-token steps after the
    short context, in the forms it chose): a step now much faster than the cached one means the
    profile was measured while something else ran, so it is measured again (one warning). A step
    now much slower means the machine is busy now: said once, and the profile kept. Not for a compiled target:
    its one-token step is a graph of its own, which a pinned run never takes (5 s to read back
    from inductor's cache in every process, 20 s and more to compile on a machine's first run)."""
    if found.step_s < CHECKED_STEP_S or not found.timed or getattr(target, "compiled", False):
        return False
    now = forward_seconds([(target, 1)], probe_ids(target, found.contexts[0]), repeats=3)[0]
    if now * DRIFT < found.step_s:
        _warn(f"the cached cost profile's step ({found.step_s * 1e3:.0f} ms) is {found.step_s / now:.1f}x this "
              f"machine's now ({now * 1e3:.0f} ms): it was measured while busy; measuring again")
        return True
    if now > DRIFT * found.step_s:
        _warn(f"this machine is busier than when its cost profile was measured: a step takes {now * 1e3:.0f} ms "
              f"now, {found.step_s * 1e3:.0f} ms then; timings will be slower than planned")
    return False
