"""Draft kinds: what a card's `draft.kind` names, each declared as a `Kind`, and their registry.

A kind declares its card fields (name, checker, default, required), the checks that need no
model, how it is built from a card's spec and a loaded pair, its label, the serving engines it
exports to (or why not), its transformers equivalent for `bench --vs-transformers`, and
`draft`, the class it builds (drafts/: the capabilities that class declares are the kind's).
`register` adds a kind to the registry (cards, the pair, export and bench all ask it);
`unregister` removes one.

No torch here, nor in any kind's declaration: cards validate against the registry when the
command line starts. A kind imports its draft class, and what that class needs, only when a
draft is built or its class is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from specdec_cli.errors import SpecdecError

if TYPE_CHECKING:
    from specdec_cli.drafts import Draft


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
    target: str | None = None  # the target it needs: "toy", "transformers", or None (any)
    engines: tuple[str, ...] = ()  # the serving engines `specdec export` maps it onto
    why_not: str = "specdec only"  # what it is, said when an engine cannot run it

    @property
    def draft(self) -> type[Draft]:
        """The class it builds (`build` makes one): its capabilities are the kind's. A kind
        imports its class here, when asked: drafts/ needs torch, a kind's declaration does not."""
        from specdec_cli.drafts import Draft

        return Draft

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

    def loads_first(self, spec, card, dtype) -> tuple | None:
        """(reference, dtype, revision, quantize) of a model the draft loads that load_pair loads
        before the target (`dtype`: the target's): a quantized draft's float weights are then gone
        before the target's arrive, never both in memory. build takes it through Pair.load_model."""
        return None

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
