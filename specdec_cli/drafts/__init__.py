"""Drafts: everything that proposes tokens for the target to verify, behind one protocol.

    base.py           the protocol (`Draft`: begin, propose, update, forwards, and every
                      optional part as a declared capability with its default)
    model.py          `ModelDraft`: a causal LM of its own with its KV cache (kinds `model`
                      and `early-exit`)
    prompt_lookup.py  `PromptLookupDraft`: n-gram match against the prompt and output; no model call
    toy.py            `OracleDraft`: the agreement-controlled draft on the toy target (tests, demos)
    synthetic.py      `SyntheticDraft`: the agreement-controlled draft on a real target (benchmarks)
    features.py       `FeatureDraft`: one block drafting from the target's hidden states (EAGLE-1)

What a card names is a draft kind (kinds/), which says which of these it builds; importing
this package loads torch, and a kind imports it only when a draft is built.
"""

from .base import Draft
from .features import FeatureDraft
from .model import ModelDraft
from .prompt_lookup import MAX_PROPOSAL, PromptLookupDraft
from .synthetic import SyntheticDraft
from .toy import OracleDraft

__all__ = ["Draft", "ModelDraft", "PromptLookupDraft", "OracleDraft", "SyntheticDraft", "FeatureDraft", "MAX_PROPOSAL"]
