"""The draft protocol, the capabilities a draft declares, and the registry of draft kinds.

A draft proposes tokens for the target to verify (after transformers' candidate generators):
    begin(prompt)              start a new request (drop all per-request state)
    propose(tokens, k) -> [d]  up to k token ids continuing `tokens`, on the target's device
    update(tokens, accepted, new)  the round is over: `tokens` is the new sequence, the first
                               `accepted` proposed tokens were kept, and `new` (a device tensor)
                               holds the tokens just appended, so a draft needs no host copy
    forwards                   model calls made so far (a counter, never reset by begin)

Everything else a draft may or may not do is declared on its class, never probed for: `Draft`
gives each capability its default, and a draft overrides the ones it has.
    free             proposing costs nothing (no model call, not even a counted one), so a
                     schedule may peek at the proposal of a round it skips (`lookup`)
    runs_model       proposing runs a model: `step_seconds(context)` measures one proposed
                     token, the cost model's c (a draft that runs none costs nothing)
    samples          at temperature > 0 it draws from its own distribution q
                     (`propose_sampled`); otherwise its proposal is deterministic (q one-hot)
    needs_reference  it reads the target's greedy output for the prompt (synthetic): a greedy
                     run of the same prompt must come first
    batches          it can run as one row of a batch (`--batch N`, forked per row)
    fills            when it finds nothing to propose it can still offer one token (`filler`),
                     which the cost schedule verifies when a 2-token verify is cheap
    window           its own context window in tokens (None: it has no limit of its own)
    context_key(tokens, k)  a small int the schedule conditions acceptance on (default 0;
                     prompt lookup: the matched n-gram length)

A draft *kind* is what a card's `draft.kind` names. Each is declared in one module under
drafts/ as a `Kind`: its card fields (name, checker, default, required), the checks that
need no model, how it is built from a card's spec and a loaded pair, its label, the serving
engines it exports to (or why not), its transformers equivalent for `bench --vs-transformers`,
and `draft`, its class (the capabilities above). `register` adds a kind to the registry
(cards, the pair, export and bench all ask it); `unregister` removes one.

No torch here: cards validate against the registry when the command line starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..errors import SpecdecError

if TYPE_CHECKING:
    import torch


class Draft:
    """The protocol, with every optional part at its default (see the module doc)."""

    name: str = "draft"
    forwards: int = 0
    free = False
    runs_model = False
    samples = False
    needs_reference = False
    batches = True
    fills = False
    window: int | None = None

    def begin(self, prompt: list[int]) -> None:
        pass

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        raise NotImplementedError

    def update(self, tokens: list[int], accepted: int, new: torch.Tensor | None = None) -> None:
        pass

    def propose_sampled(self, tokens: list[int], k: int, warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(tokens [d], q [d, V] or None): a draft that `samples` draws from its warped q; any
        other proposes as at temperature 0 and q is None (one-hot: the loop makes it)."""
        return self.propose(tokens, k), None

    def step_seconds(self, context: list[int]) -> float:
        """Measured seconds of one proposed token after `context` (only `runs_model` drafts)."""
        return 0.0

    def context_key(self, tokens: list[int], k: int) -> int:
        return 0

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """A `free` draft's proposal as a list, peeked at no cost; [] = nothing to propose."""
        return []

    def filler(self, tokens: list[int]) -> torch.Tensor:
        """One token to verify when nothing was found (only drafts that declare `fills`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Field:
    """A card field of one draft kind: `draft.<name>`."""

    name: str
    check: Callable[[object], str | None]  # what is wrong with a value, None if nothing (checks.py)
    default: object = None  # when the card leaves it out
    required: bool = False  # a card of this kind must give it


class Kind:
    """A draft kind as a card names it. A subclass sets the attributes and overrides what
    differs; the defaults are those of a kind that needs nothing and exports nowhere."""

    name: str = ""
    fields: tuple[Field, ...] = ()
    draft: type[Draft] = Draft  # the class it builds: its capabilities are the kind's
    target: str | None = None  # the target it needs: "toy", "transformers", or None (any)
    engines: tuple[str, ...] = ()  # the serving engines `specdec export` maps it onto
    why_not: str = "specdec only"  # what it is, said when an engine cannot run it

    # -- the card ----------------------------------------------------------------------------
    def check(self, spec, where: str, field: str) -> None:
        """Checks across this kind's fields, once each field is valid (raise SpecdecError)."""

    def detail(self, spec) -> str | None:
        """What tells two drafts of this kind apart in a label: kind(detail)."""
        return None

    def models(self, spec) -> tuple[tuple[str, str], ...]:
        """(field, model reference) for every model the draft loads besides the target."""
        return ()

    # -- before and at load --------------------------------------------------------------------
    def before_load(self, spec, card, target) -> None:
        """Checks that need no model loaded (`target`: the target's models.ModelRef)."""

    def build(self, spec, pair, name: str) -> Draft:
        """The draft for a loaded pair (its target, device, dtype, tokenizer, references)."""
        raise NotImplementedError

    def prior(self, key: int) -> float:
        """The cost schedule's acceptance before any evidence, per context key."""
        return 0.6

    # -- elsewhere ------------------------------------------------------------------------------
    def export(self, engine: str, spec, card, model: Callable[[str, str], str], notes: list[str]) -> dict:
        """The engine's speculative settings, named as the engine names them, for an engine in
        `engines`; `model(field, ref)` is the path or hub id the engine loads for a reference."""
        raise NotImplementedError

    def check_peer(self, spec, card) -> None:
        """Whether transformers' assisted generation has this draft (bench --vs-transformers)."""
        raise SpecdecError(f"--vs-transformers: transformers has no equivalent of the '{spec.kind}' "
                           f"draft of card '{card.name}'")

    def peer(self, spec, pair, draft: Draft, k: int) -> tuple[dict, object]:
        """(generate() arguments, the model whose generation config carries fixed k, or None)."""
        raise NotImplementedError


_KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a kind; a card may name it from now on. Its name must be new."""
    if not kind.name or kind.name in _KINDS:
        raise ValueError(f"draft kind {kind.name!r}: {'already registered' if kind.name else 'needs a name'}")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    del _KINDS[name]


def get(name: str) -> Kind:
    return _KINDS[name]


def kinds() -> tuple[Kind, ...]:
    """Every registered kind, in the order they were registered."""
    return tuple(_KINDS.values())


def names() -> tuple[str, ...]:
    return tuple(_KINDS)
