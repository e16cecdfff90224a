"""Drafts: everything that proposes tokens for the target to verify, one module per kind.

    base.py           the protocol (`Draft`: begin, propose, update, forwards, and every
                      optional part as a declared capability with its default), `Kind` (a
                      draft kind's declaration) and the registry of kinds
    model.py          `model`: a smaller causal LM sharing the target's tokenizer
    prompt_lookup.py  `prompt-lookup`: n-gram match against the prompt and output; no model call
    early_exit.py     `early-exit`: the target's own first layers
    toy.py            `toy`: the agreement-controlled draft on the toy target (tests, demos)
    synthetic.py      `synthetic`: the agreement-controlled draft on a real target (benchmarks)
    features.py       `features`: one block drafting from the target's hidden states (EAGLE-1)

Importing the package registers these kinds, in this order (the order cards and errors list
them). A new kind is one module declaring a `Kind` and one `register` call: cards validate its
fields, the pair builds it, export and bench ask it, and no other module changes.
"""

from .base import Draft, Field, Kind, get, kinds, names, register, unregister
from .early_exit import EarlyExit
from .features import FeatureDraft, Features
from .model import ModelDraft, Model
from .prompt_lookup import MAX_PROPOSAL, PromptLookup, PromptLookupDraft
from .synthetic import Synthetic, SyntheticDraft
from .toy import OracleDraft, Toy

for _kind in (Model(), PromptLookup(), EarlyExit(), Toy(), Synthetic(), Features()):
    register(_kind)

__all__ = ["Draft", "Field", "Kind", "get", "kinds", "names", "register", "unregister", "ModelDraft",
           "PromptLookupDraft", "OracleDraft", "SyntheticDraft", "FeatureDraft", "MAX_PROPOSAL"]
