"""What the commands share at run time: the stdout console and loading a card's pair."""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import partial

from rich.console import Console
from rich.markup import escape

from specdec_cli.cards.card import load_card, override
from specdec_cli.cli.guard import err

out = Console(soft_wrap=True)  # data (text, JSON) only; everything else goes to `err` (stderr)


def load(card_name: str, drafts: tuple = (), remeasure: bool = False, **overrides):
    """The card (with command-line overrides) loaded into a Pair, with a status line on stderr."""
    from specdec_cli.pair.loading import check_before_load, load_pair  # pair imports torch: only when a command runs

    card = override(load_card(card_name), **overrides)
    check_before_load(card, tuple(drafts))  # fail in milliseconds, not after a long load
    if card.trust_remote_code:
        repos = dict.fromkeys([card.target] + [ref for _, ref in card.draft.models()])
        err.print(f"Warning: card {card.name} sets trust_remote_code: true: Python code shipped with "
                  f"{' and '.join(repos)} may run on this machine while loading. Use only repositories you trust.",
                  markup=False, highlight=False, soft_wrap=True)
    with err.status(f"Loading {card.target} and its {card.draft.label()} draft…") as status:
        pair = load_pair(card, on_compile=compiling, on_convert=partial(converting, status),
                         on_measure=partial(measuring, status))
    pair.remeasure = remeasure
    why = f" ({pair.dtype_choice.why})" if pair.dtype_choice else ""
    err.print(escape(f"card {card.name}: target {card.target} · draft {pair.draft.name} · {pair.device} "
                     f"{pair.dtype_name}{why}{' int8' if card.quantize == 'int8' else ''}{pair.tree_note}"),
              style="dim", highlight=False)
    return pair


@contextmanager
def measuring(status):
    """dtype: auto's first run for a model on this CPU (pair.targets.measure_dtype): the status line
    says why the load takes longer this once."""
    status.update("dtype: auto: timing this target in float32 and in bfloat16 on this CPU, once (the faster is "
                  "kept, and remembered)…")
    yield


@contextmanager
def compiling(shape: tuple):
    """A line on stderr when a decode forward shape starts compiling (decoding.compile) and one
    when it is done: the first time on a machine that takes tens of seconds, with nothing else on
    screen; a later process reads the graphs from the compile cache."""
    from specdec_cli.engine.kernels import compile_cache

    rows, width, capacity = shape
    err.print(escape(f"compiling the target's decode forward [{rows}, {width}] over {capacity} KV columns "
                     f"(cached in {compile_cache()}; tens of seconds the first time on this machine)…"),
              style="dim", highlight=False, soft_wrap=True)
    start = time.perf_counter()
    yield
    err.print(f"compiled in {time.perf_counter() - start:.1f} s", style="dim", highlight=False)


@contextmanager
def converting(status, gguf, folder, dtype="float32"):
    """The first load of a GGUF file in `dtype` on this machine: the status line says why it
    takes a while (it is de-quantised into a folder in the cache: engine/converted.py), and a line
    on stderr what was kept. A file that fails to load adds nothing to its one Error line."""
    from specdec_cli.engine.converted import ready

    status.update(f"Loading {gguf.name} for the first time on this machine: de-quantising it to {dtype} "
                  f"into {folder}, once…")
    start = time.perf_counter()
    yield
    if ready(gguf, dtype):
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1e9
        err.print(escape(f"kept {gguf.name} de-quantised to {dtype} in {folder} ({size:.1f} GB, "
                         f"{time.perf_counter() - start:.1f} s): later loads read it in seconds"),
                  style="dim", highlight=False, soft_wrap=True)
    else:
        err.print(escape(f"could not write {folder}; {gguf.name} is read from the file itself, as slowly "
                         "as before, until the cache has room"), style="dim", highlight=False, soft_wrap=True)
