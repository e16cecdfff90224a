"""The layers of docs/architecture.md, enforced: every specdec module's imports (at the top and
inside functions, read with ast) point down or sideways, never up; the command libraries never
import each other; and only settings.py reads the environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specdec_cli"

# Lowest first; a module may import its own layer and those below (docs/architecture.md).
LAYERS = {
    1: ("leaves", ["errors", "settings", "checks", "memory", "metrics", "toy", "stattest", "kernels", "files",
                   "prompts", "features", "tokenizers", "benchrows"]),
    2: ("models and measurements", ["models", "costs", "kvcache", "trainprompts", "traindata"]),
    3: ("the loop", ["decoding", "sampling", "schedule", "batch"]),
    4: ("drafts and their kinds", ["drafts", "drafts.*", "kinds", "kinds.*"]),
    5: ("the card", ["cards", "fetch"]),
    6: ("the pair", ["pair", "generation", "peers"]),
    7: ("command libraries", ["verify", "plan", "bench", "distill", "export"]),
    8: ("command-line edges", ["requests", "render", "plot", "guard"]),
    9: ("the command line", ["cli", "commands", "commands.*"]),
    10: ("the entry point", ["__init__", "__main__"]),
}
PEERS_APART = 7  # one library function per command: none imports another


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    for number, (_, members) in LAYERS.items():
        for member in members:
            if module == member or (member.endswith(".*") and module.startswith(member[:-1])):
                return number
    return None


def imports(module: str) -> list[tuple[int, str]]:
    """(line, imported specdec module) for every import in `module`, wherever it sits (inside
    functions and `if TYPE_CHECKING:` too)."""
    path = MODULES[module]
    package = module.split(".")[:-1] if path.name != "__init__.py" else ([] if module == "__init__" else module.split("."))
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name.split(".", 1)[1] for a in node.names if a.name.startswith("specdec_cli.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `..` is the package above this module's
                parts = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == "specdec_cli":
                parts = node.module.split(".")[1:]
            else:
                continue
            base = ".".join(parts)
            # `from . import drafts`, `from .drafts import base`: the names are modules themselves
            targets = [f"{base}.{a.name}".lstrip(".") if f"{base}.{a.name}".lstrip(".") in MODULES else base
                       for a in node.names]
        else:
            continue
        found += [(node.lineno, target) for target in dict.fromkeys(targets) if target]
    return found


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, (f"modules in no layer: {', '.join(unplaced)}: place each in LAYERS here and in "
                          f"docs/architecture.md ('Layers: which may import which')")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    mine = layer_of(module)
    wrong = []
    for line, target in imports(module):
        theirs = layer_of(target)
        if theirs is None or target == module:
            continue
        if theirs > mine:
            wrong.append(f"specdec_cli/{MODULES[module].relative_to(PACKAGE)}:{line}: {module} "
                         f"(layer {mine}, {LAYERS[mine][0]}) imports {target} (layer {theirs}, {LAYERS[theirs][0]})")
        elif theirs == mine == PEERS_APART:
            wrong.append(f"specdec_cli/{MODULES[module].relative_to(PACKAGE)}:{line}: {module} imports {target}: "
                         f"the command libraries never import each other (move what they share down)")
    assert not wrong, "imports that point up a layer:\n" + "\n".join(wrong)


def test_the_rule_catches_an_upward_import():
    """The check itself: layer_of and imports() see what an upward import would be."""
    assert layer_of("cards") > layer_of("drafts.model") > layer_of("schedule") > layer_of("models")
    assert (layer_of("batch"), layer_of("pair")) == (3, 6)
    assert all(target != "pair" for _, target in imports("batch"))
    assert any(target == "drafts.base" for _, target in imports("drafts.model"))
    assert any(target == "kinds" for _, target in imports("cards"))


def reads_environment(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(a.name in ("environ", "getenv", "environb") for a in node.names):
            lines.append(node.lineno)
    return lines


def test_only_settings_reads_the_environment():
    """No hidden switches: every environment variable specdec reads is in settings.py."""
    found = [f"specdec_cli/{path.relative_to(PACKAGE)}:{line}" for module, path in MODULES.items()
             if module != "settings" for line in reads_environment(ast.parse(path.read_text(encoding="utf-8")))]
    assert not found, "os.environ read outside specdec_cli/settings.py: " + ", ".join(found)
