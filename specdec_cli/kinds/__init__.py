"""Draft kinds: what a card's `draft.kind` may name, one module per kind, and their registry.

    base.py           `Kind` (a kind's declaration), `Field` (one of its card fields) and the
                      registry: register, unregister, get, kinds, names
    model.py          `model`: a smaller causal LM sharing the target's tokenizer
    prompt_lookup.py  `prompt-lookup`: n-gram match against the prompt and output; no model call
    early_exit.py     `early-exit`: the target's own first layers
    toy.py            `toy`: the agreement-controlled draft on the toy target (tests, demos)
    synthetic.py      `synthetic`: the agreement-controlled draft on a real target (benchmarks)
    features.py       `features`: one block drafting from the target's hidden states (EAGLE-1)

Importing the package registers these kinds, in this order (the order cards and errors list
them), without torch: a kind imports its draft class (drafts/) only when a draft is built. A
new kind is one module declaring a `Kind` and one `register` call: cards validate its fields,
the pair builds it, export and bench ask it, and no other module changes.
"""

from .base import Field, Kind, get, kinds, names, register, unregister
from .early_exit import EarlyExit
from .features import Features
from .model import Model
from .prompt_lookup import PromptLookup
from .synthetic import Synthetic
from .toy import Toy

for _kind in (Model(), PromptLookup(), EarlyExit(), Toy(), Synthetic(), Features()):
    register(_kind)

__all__ = ["Field", "Kind", "get", "kinds", "names", "register", "unregister"]
