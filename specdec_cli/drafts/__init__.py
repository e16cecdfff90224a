"""Drafts: everything that proposes tokens for the target to verify, behind one protocol.

    (the protocol every draft speaks, `Draft`, is the loop's: specdec_cli/loop/protocol.py)
    registry.py          `Kind` (what a card's `draft.kind` names: its fields, checks, label,
                         build, export mapping), `Field` and the registry
    <kind>_kind.py       a kind's torch-free declaration; <kind>_draft.py the draft it builds:
      model              a causal LM of its own with its KV cache (`ModelDraft`)
      lookup             `prompt-lookup`: n-gram match against the prompt and output; no model call
      early_exit         `early-exit`: the target's own first layers (a `ModelDraft`)
      toy                the agreement-controlled draft on the toy target (`OracleDraft`)
      synthetic          the agreement-controlled draft on a real target (`SyntheticDraft`)
      features           one block drafting from the target's hidden states (`FeatureDraft`;
                         features_block.py is the block, shared with distill)

Importing the package registers the built-in kinds, in this order (the order cards and errors
list them), without torch. The draft classes load torch, so they are imported on first use
(`from specdec_cli.drafts import ModelDraft` works; a kind imports its class only when it
builds a draft). A new kind is one `*_kind.py` declaring a `Kind` and a line below.
"""

from importlib import import_module

from specdec_cli.drafts.early_exit_kind import EarlyExit
from specdec_cli.drafts.features_kind import Features
from specdec_cli.drafts.lookup_kind import PromptLookup
from specdec_cli.drafts.model_kind import Model
from specdec_cli.drafts.registry import Field, Kind, get, kinds, names, register, unregister
from specdec_cli.drafts.synthetic_kind import Synthetic
from specdec_cli.drafts.toy_kind import Toy

for _kind in (Model(), PromptLookup(), EarlyExit(), Toy(), Synthetic(), Features()):
    register(_kind)

_CLASSES = {"Draft": "loop.protocol", "ModelDraft": "drafts.model_draft", "PromptLookupDraft": "drafts.lookup_draft",
            "MAX_PROPOSAL": "drafts.lookup_draft", "OracleDraft": "drafts.toy_draft",
            "SyntheticDraft": "drafts.synthetic_draft", "FeatureDraft": "drafts.features_draft"}


def __getattr__(name: str):
    """The draft classes, imported (with torch) on first use."""
    if name in _CLASSES:
        return getattr(import_module(f"specdec_cli.{_CLASSES[name]}"), name)
    raise AttributeError(f"module 'specdec_cli.drafts' has no attribute {name!r}")


__all__ = ["Field", "Kind", "get", "kinds", "names", "register", "unregister", *_CLASSES]
