"""Every example in README.md and docs/*.md is true: the rule, as docs/README.md states it.

```bash blocks, one command line at a time (backslash continuations joined, comments dropped):
  - a line whose every `specdec` call is cheap (the toy card `-c toy`/`--card toy`, or
    `specdec cards`, `specdec export`, or `--help`) RUNS, in-process through the CLI
    (`specdec_cli.cli:app`), in a fresh folder holding prompts.jsonl and prompts.txt, and must
    exit 0. The shell it understands is small on purpose: `[VAR=value ...] specdec ARGS`,
    optionally fed by `echo WORDS |`, and optionally followed by `> FILE` and/or `| jq FILTER`
    (jq runs when installed; the output must be JSON either way). A cheap line outside that
    shape fails here, so every cheap example really runs;
  - any other line is CHECKED: each `specdec` call's subcommand must be listed by
    `specdec --help` and every option it uses must appear in that subcommand's `--help`; a
    script it runs (`bash X`, `python X`) must exist.
```yaml blocks with a `target:` are loaded as cards and must validate; the README's card is
cards/smollm2.yaml byte for byte. The README fits one screenful, shows the two set-up commands on
its first screen, copies no measured figure (those live in benchmarks/RESULTS.md), and every
relative link in these files points at a file that exists.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec_cli.cards.card import load_card
from specdec_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<"}
PROMPTS_JSONL = '{"id": "a", "prompt": "ba be bi"}\n{"id": "b", "prompt": "Why is the sky blue?"}\n'
PROMPTS_TXT = "ba be bi\nWhy is the sky blue?\n"
SETUP = ['bash scripts/install.sh && .venv/bin/specdec generate "Explain what a hash table is."',
         "bash scripts/install.sh && .venv/bin/python -m pytest -q"]


# ---------------------------------------------------------------------------- reading the docs
def fenced(lang: str):
    """(doc, line number of the fence, body) for every ```lang block."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                yield doc, text.count("\n", 0, m.start()) + 1, m.group(2)


def command_lines():
    """(test id, line) for every command line of every ```bash block."""
    for doc, fence_at, body in fenced("bash"):
        body = re.sub(r"\\\n\s*", " ", body)  # join continuations (line numbers: the fence's)
        for i, line in enumerate(body.splitlines(), start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                yield pytest.param(line, id=f"{doc.relative_to(ROOT)}:{fence_at + i}")


def tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def commands(toks: list[str]) -> list[tuple[str | None, list[str]]]:
    """[(operator before it, words)] for each simple command of a tokenised line."""
    out, op, words = [], None, []
    for t in toks:
        if t in OPERATORS:
            out.append((op, words))
            op, words = t, []
        else:
            words.append(t)
    out.append((op, words))
    return out


def split_env(words: list[str]) -> tuple[dict, list[str]]:
    env = {}
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        key, value = words[0].split("=", 1)
        env[key], words = value, words[1:]
    return env, words


def is_specdec(words: list[str]) -> bool:
    return bool(words) and (words[0] == "specdec" or words[0].endswith("/specdec"))


def specdec_calls(line: str) -> list[list[str]]:
    """The argument lists of every `specdec` call on a line, `$(...)` substitutions included."""
    calls = []
    for _, words in commands(tokens(line)):
        _, words = split_env(words)
        if is_specdec(words):
            calls.append(words[1:])
        for w in words:
            for inner in re.findall(r"\$\((.*)\)", w):
                calls += specdec_calls(inner)
    return calls


def cheap(args: list[str]) -> bool:
    """The rule: the toy card, `cards`, `export` or `--help` run for real."""
    pairs = set(zip(args, args[1:]))
    return bool(args) and (args[0] in ("cards", "export") or "--help" in args or "--card=toy" in args
                           or ("-c", "toy") in pairs or ("--card", "toy") in pairs)


# ---------------------------------------------------------------------------- the CLI's own help
def help_text(*sub: str) -> str:
    result = CliRunner().invoke(app, [*sub, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"specdec {' '.join(sub)} --help failed: {result.output}"
    return result.output


def section(text: str, title: str) -> list[str]:
    """The entry lines of a help section ('Options:', 'Commands:'), Rich's box characters stripped."""
    lines, inside = [], False
    for raw in text.splitlines():
        line = raw.strip(" │╭╮╰╯─")
        if re.match(rf"^[\s╭─]*{title}\b", raw.strip()):
            inside = True
        elif inside and line and not raw.startswith(" ") and not raw.startswith("│") and line.endswith(":"):
            inside = False
        elif inside and line:
            lines.append(line)
    return lines


@functools.lru_cache(maxsize=None)
def subcommands(*group: str) -> frozenset[str]:
    return frozenset(line.split()[0] for line in section(help_text(*group), "Commands")
                     if re.match(r"^[a-z][\w-]*(\s|$)", line))


@functools.lru_cache(maxsize=None)
def options(*sub: str) -> frozenset[str]:
    names = set()
    for line in section(help_text(*sub), "Options"):
        if line.startswith("-"):
            head = re.split(r"\s{2,}", line)[0]
            names.update(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", head))
    return frozenset(names)


def check_call(args: list[str]) -> None:
    """The subcommand exists and every option the call uses is in its --help."""
    positional = [a for a in args if not a.startswith("-")]
    if not positional:  # root options only (specdec --version, specdec --help): each in the root --help
        assert args and all(a in options() for a in args), f"specdec {' '.join(args)}: not an option of specdec itself"
        return
    assert positional and positional[0] in subcommands(), f"no such subcommand: specdec {' '.join(args)}"
    sub = (positional[0],)
    if positional[0] in subcommands() and len(positional) > 1 and positional[1] in subcommands(positional[0]) \
            and args.index(positional[1]) == args.index(positional[0]) + 1:
        sub = (positional[0], positional[1])
    for a in args:
        if a.startswith("-") and a != "-" and not re.fullmatch(r"-[\d.]+", a):
            name = a.split("=", 1)[0]
            assert name in options(*sub), f"specdec {' '.join(sub)} has no option {name} (its --help: {sorted(options(*sub))})"


def check_script(words: list[str]) -> None:
    """`bash X` / `python X`: X exists in the repository."""
    env, words = split_env(words)
    if words and (words[0] in ("bash", "sh") or words[0].endswith("python")) and len(words) > 1 \
            and not words[1].startswith("-"):
        assert (ROOT / words[1]).is_file(), f"{words[1]} does not exist"


# ---------------------------------------------------------------------------- running a line
def run_line(line: str, folder: Path) -> None:
    """`[echo WORDS |] [VAR=v ...] specdec ARGS [> FILE] [| jq FILTER]`, in-process."""
    parts = commands(tokens(line))
    stdin = None
    if parts[0][1][:1] == ["echo"]:
        assert len(parts) > 1 and parts[1][0] == "|", f"echo must pipe into specdec: {line}"
        stdin = " ".join(parts[0][1][1:]) + "\n"
        parts = parts[1:]
    env, words = split_env(parts[0][1])
    assert is_specdec(words), f"a cheap line must be [echo ... |] specdec ...: {line}"
    rest = parts[1:]
    result = CliRunner().invoke(app, words[1:], input=stdin, env=env or None)
    assert result.exit_code == 0, (f"exit {result.exit_code}: {line}\nstdout: {result.stdout[-2000:]}\n"
                                   f"stderr: {result.stderr[-2000:]}\n{result.exception!r}")
    out = result.stdout
    while rest:
        op, words = rest.pop(0)
        if op == ">" and len(words) == 1:
            (folder / words[0]).write_text(out, encoding="utf-8")
            out = ""
        elif op == "|" and words[:1] == ["jq"]:
            for piece in out.splitlines():
                json.loads(piece)  # `jq` reads JSON: stdout must be only JSON
            if shutil.which("jq"):
                done = subprocess.run(words, input=out, capture_output=True, text=True, timeout=30)
                assert done.returncode == 0, f"jq failed on {line}: {done.stderr}"
                out = done.stdout
        else:
            raise AssertionError(f"a cheap line may end only in '> FILE' or '| jq ...', not {op} {words}: {line}")


@pytest.mark.parametrize("line", list(command_lines()))
def test_bash_example(line, tmp_path, monkeypatch):
    calls = specdec_calls(line)
    for args in calls:
        check_call(args)
    if calls and all(cheap(args) for args in calls):
        (tmp_path / "prompts.jsonl").write_text(PROMPTS_JSONL)
        (tmp_path / "prompts.txt").write_text(PROMPTS_TXT)
        monkeypatch.chdir(tmp_path)
        run_line(line, tmp_path)
    else:
        for _, words in commands(tokens(line)):
            check_script(words)


@pytest.mark.parametrize("doc,at,body", [pytest.param(d, a, b, id=f"{d.relative_to(ROOT)}:{a}")
                                         for d, a, b in fenced("yaml") if re.search(r"^target:", b, re.M)])
def test_yaml_card_example(doc, at, body, tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text(body, encoding="utf-8")
    load_card(str(path))


# ---------------------------------------------------------------------------- the README itself
def test_readme_is_one_screen_with_the_setup_first():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    first_screen = "\n".join(lines[:40])
    for command in SETUP:
        assert command in first_screen


def test_readme_card_is_the_default_card():
    readme = [body for doc, _, body in fenced("yaml") if doc.name == "README.md" and doc.parent == ROOT]
    assert readme == [(ROOT / "cards" / "smollm2.yaml").read_text(encoding="utf-8")]


def test_readme_copies_no_measured_figure():
    """Speedups (1.8x), rates (24.9 %) and throughputs (27 tok/s) live in benchmarks/RESULTS.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    figures = re.findall(r"\b\d+(?:\.\d+)?x\b|\d\s*%|\d\s*tok/s", text)
    assert not figures, figures


def test_links_resolve():
    for doc in DOCS:
        text = FENCE.sub("", doc.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not re.match(r"[a-z]+:", target):
                assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: broken link {target}"


def unmapped(text: str, package: Path) -> list[str]:
    """The package's modules, at any depth, that `text` never names by their path in the package:
    `loop/decoding.py` (`checks.py` at the top), in backticks or after `specdec_cli/`, or as
    `decoding.py` on a line that names its folder, `loop/`. A file name elsewhere does not count:
    one `model.py` cannot stand for engine/model.py and drafts/model.py."""
    modules = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py") if not p.name.startswith("__"))

    def named(module: str) -> bool:
        folder, _, name = module.rpartition("/")
        if re.search(rf"(?:`|specdec_cli/){re.escape(module)}\b", text):
            return True
        return bool(folder) and any(f"`{folder}/`" in line and f"`{name}`" in line for line in text.splitlines())

    return [m for m in modules if not named(m)]


def test_the_map_check_wants_each_module_s_path(tmp_path):
    for module in ("engine/model.py", "drafts/model.py", "checks.py", "cli/commands/plan_cmd.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).touch()
    assert unmapped("`model.py`, `checks.py`, `plan_cmd.py`", tmp_path) == [
        "cli/commands/plan_cmd.py", "drafts/model.py", "engine/model.py"]
    assert unmapped("`engine/model.py` and `loop/checks.py`\n`cli/`: `plan_cmd.py`", tmp_path) == [
        "checks.py", "cli/commands/plan_cmd.py", "drafts/model.py"]
    assert unmapped("`checks.py`, specdec_cli/drafts/model.py, `engine/model.py`\n`cli/commands/`: `plan_cmd.py`",
                    tmp_path) == []


def test_every_module_is_in_the_map():
    missing = unmapped((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), ROOT / "specdec_cli")
    assert not missing, missing
