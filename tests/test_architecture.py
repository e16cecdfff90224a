"""The layers of docs/architecture.md, enforced: every specdec module's imports (at the top and
inside functions, read with ast) point down or sideways, never up; the command libraries never
import each other; and only settings.py reads the environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specdec_cli"

# Lowest first: a package is a layer; a module may import its own layer and those below
# (docs/architecture.md). The top-level modules are the leaves every layer may use.
LAYERS = {
    1: ("leaves", ["errors", "settings", "checks", "files"]),
    2: ("the engine", ["engine", "engine.*"]),
    3: ("the loop", ["loop", "loop.*"]),
    4: ("drafts and their kinds", ["drafts", "drafts.*"]),
    5: ("cards", ["cards", "cards.*"]),
    6: ("the pair", ["pair", "pair.*"]),
    7: ("evaluation and training", ["eval", "eval.*", "training", "training.*"]),
    8: ("the command line", ["cli", "cli.*"]),
    9: ("the entry point", ["__init__", "__main__"]),
}
# One library function per command: none imports another (what they share moves down).
COMMAND_LIBRARIES = {"eval.bench", "eval.plan", "eval.verify", "training.distill", "cards.export"}


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


def imports(module: str, source: str | None = None) -> list[tuple[int, str]]:
    """(line, imported specdec module) for every import in `module` (its file, or `source` when
    given), wherever it sits (inside functions and `if TYPE_CHECKING:` too)."""
    path = MODULES.get(module, PACKAGE / (module.replace(".", "/") + ".py"))
    package = module.split(".")[:-1] if path.name != "__init__.py" else ([] if module == "__init__" else module.split("."))
    found = []
    for node in ast.walk(ast.parse(source if source is not None else path.read_text(encoding="utf-8"))):
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
            # `from specdec_cli import drafts`, `from specdec_cli.engine import kernels`: the names are modules
            targets = [f"{base}.{a.name}".lstrip(".") if f"{base}.{a.name}".lstrip(".") in MODULES else base
                       for a in node.names]
        else:
            continue
        found += [(node.lineno, target) for target in dict.fromkeys(targets) if target]
    return found


def upward_imports(module: str, source: str | None = None) -> list[str]:
    """Each import of `module` that points up a layer, or joins two command libraries."""
    mine, wrong = layer_of(module), []
    where = f"specdec_cli/{module.replace('.', '/')}.py"
    for line, target in imports(module, source):
        theirs = layer_of(target)
        if theirs is None or target == module:
            continue
        if theirs > mine:
            wrong.append(f"{where}:{line}: {module} (layer {mine}, {LAYERS[mine][0]}) imports {target} "
                         f"(layer {theirs}, {LAYERS[theirs][0]})")
        elif module in COMMAND_LIBRARIES and target in COMMAND_LIBRARIES:
            wrong.append(f"{where}:{line}: {module} imports {target}: the command libraries never import each "
                         f"other (move what they share down)")
    return wrong


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, (f"modules in no layer: {', '.join(unplaced)}: place each in LAYERS here and in "
                          f"docs/architecture.md ('Layers: which may import which')")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    wrong = upward_imports(module)
    assert not wrong, "imports that point up a layer:\n" + "\n".join(wrong)


def test_the_rule_catches_an_upward_import():
    """The check itself, fed violations: an engine module importing the loop (at the top and
    lazily), a draft importing the pair, and one command library importing another."""
    assert upward_imports("engine.kvcache", "from specdec_cli.loop.decoding import Result\n")
    assert upward_imports("engine.costs", "def f():\n    from specdec_cli.loop import schedule\n")
    assert upward_imports("drafts.model_draft", "import specdec_cli.pair.loading\n")
    assert upward_imports("eval.plan", "from specdec_cli.eval.bench import run\n")
    assert not upward_imports("loop.batch", "from specdec_cli.engine.kvcache import KVCache\n")
    assert not upward_imports("eval.bench", "from specdec_cli.eval.peers import Peer\n")  # a library's own helpers


def test_top_level_is_small_and_names_are_unique():
    """The tree shows the layers: at most 8 modules at the top, and no two modules share a file
    name (an `__init__.py` aside), so a name in a doc or a traceback means one file."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules at specdec_cli/'s top: {top}"
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, f"file names used twice: {twice}"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").rglob("*.py")]
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, f"modules over 400 lines (split them): {long}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of the import graph, one per strongly connected component (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """No two modules import each other, directly or round a loop, at the top or lazily (a
    package's `__init__` importing its own modules is how a package is built, not a cycle)."""
    graph = {m: {t for _, t in imports(m) if t != m and t in MODULES and not m.startswith(t + ".")
                 and not (MODULES[m].name == "__init__.py" and t.startswith(m + "."))} for m in MODULES}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check itself
    assert not cycles(graph), f"import cycles: {cycles(graph)}"


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


def target_attributes() -> set[str]:
    """Every attribute an HFLM (the target) has: set in its __init__, or a property or method."""
    tree = ast.parse((PACKAGE / "engine" / "models.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HFLM")
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names - {"__init__"}


def writes_into_a_target(source: str, attributes: set[str]) -> list[int]:
    """Lines assigning (or rebinding) one of the target's attributes on any object but `self`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in attributes:
            lines.append(node.lineno)
        for t in targets:
            for part in ast.walk(t):
                if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store) and part.attr in attributes \
                        and not (isinstance(part.value, ast.Name) and part.value.id == "self"):
                    lines.append(node.lineno)
    return lines


def test_nothing_outside_the_engine_writes_into_the_target():
    """The target owns how it runs (HFLM: policy, forms, compiled graphs, capacity, warmed
    shapes): other packages ask through its methods and read its properties, never assign."""
    attributes = target_attributes()
    assert {"configure", "reserve", "warm", "policy", "forms", "compiled", "_policy", "_compiled"} <= attributes
    assert writes_into_a_target("pair.target.compiled = f\nsetattr(lm, '_policy', p)\nself.model = m\n",
                                attributes) == [1, 2]  # the check itself
    found = [f"specdec_cli/{path.relative_to(PACKAGE)}:{line}" for module, path in MODULES.items()
             if not module.startswith("engine") for line in writes_into_a_target(path.read_text(encoding="utf-8"), attributes)]
    assert not found, "attributes of the target written outside specdec_cli/engine/: " + ", ".join(found)


def test_the_targets_state_is_read_only_from_outside():
    from specdec_cli.engine.models import HFLM

    for name in ("policy", "forms", "compiled", "capacity", "warmed"):
        assert isinstance(getattr(HFLM, name), property) and getattr(HFLM, name).fset is None, name
