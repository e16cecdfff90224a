"""The built-in prompt suite, and reading prompts from files.

Categories follow the usual spec-decode benchmarks (MT-Bench-like): conversation, translation,
summarization, QA, math, RAG and code. RAG and summarization prompts carry text the answer can
copy, which is where prompt lookup shines.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from specdec_cli.errors import SpecdecError


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    category: str = "custom"


_PASSAGE = (
    "The Amazon rainforest covers about 5.5 million square kilometres across nine countries. "
    "Brazil holds about 60 percent of it, followed by Peru with 13 percent and Colombia with 10 "
    "percent. The forest produces a large share of the world's oxygen and stores huge amounts of "
    "carbon. Deforestation, mostly for cattle ranching and soy farming, removed about 17 percent "
    "of the forest in the last fifty years."
)
_DOC = (
    "Python's list.sort() sorts a list in place and returns None. The built-in sorted() returns "
    "a new sorted list and leaves the original unchanged. Both accept a key function and a "
    "reverse flag. Both are stable: items that compare equal keep their original order."
)

SUITE = [
    Prompt("conv-1", "Hi! Can you suggest three fun things to do on a rainy weekend?", "conversation"),
    Prompt("conv-2", "I feel nervous before job interviews. Any advice?", "conversation"),
    Prompt("conv-3", "What is a good way to start learning to play the guitar?", "conversation"),
    Prompt("trans-1", "Translate to French: The cat is sleeping on the warm windowsill.", "translation"),
    Prompt("trans-2", "Translate to Spanish: Where is the nearest train station?", "translation"),
    Prompt("trans-3", "Translate to German: I would like a cup of coffee, please.", "translation"),
    Prompt("sum-1", f"Summarize in two sentences:\n{_PASSAGE}", "summarization"),
    Prompt("sum-2", f"Summarize this text in one sentence:\n{_DOC}", "summarization"),
    Prompt("sum-3", "Summarize the plot of Romeo and Juliet in three sentences.", "summarization"),
    Prompt("qa-1", "What is the capital of Australia?", "qa"),
    Prompt("qa-2", "Why is the sky blue?", "qa"),
    Prompt("qa-3", "Explain what a hash table is.", "qa"),
    Prompt("math-1", "What is 17 times 23? Show your steps.", "math"),
    Prompt("math-2", "Solve for x: 3x + 7 = 22.", "math"),
    Prompt("math-3", "A train travels 120 km in 2 hours. What is its average speed?", "math"),
    Prompt("rag-1", f"Context:\n{_PASSAGE}\n\nQuestion: How much of the Amazon does Brazil hold? Answer using the context.", "rag"),
    Prompt("rag-2", f"Context:\n{_DOC}\n\nQuestion: What does list.sort() return? Quote the context.", "rag"),
    Prompt("rag-3", f"Context:\n{_PASSAGE}\n\nQuestion: What are the main causes of deforestation?", "rag"),
    Prompt("code-1", "Write a Python function that checks whether a string is a palindrome.", "code"),
    Prompt("code-2", "Write a Python function that returns the n-th Fibonacci number iteratively.", "code"),
    Prompt("code-3", "Rewrite this loop as a list comprehension:\nresult = []\nfor x in range(10):\n    if x % 2 == 0:\n        result.append(x * x)", "code"),
    Prompt("code-4", "Explain what this code does:\ndef f(xs):\n    return sorted(set(xs))[:3]", "code"),
]


def read_prompts(path: str, stdin_text: str | None = None) -> list[Prompt]:
    """`.jsonl` (objects with `prompt` and optional `id`) or text (one prompt per line).
    `-` reads JSON lines from `stdin_text`."""
    if path == "-":
        text, jsonl, name = stdin_text or "", True, "<stdin>"
    else:
        p = Path(path)
        if not p.is_file():
            raise SpecdecError(f"--prompts-file: {path} is a directory" if p.is_dir() else f"--prompts-file: file not found: {path}")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SpecdecError(f"--prompts-file: {path} is not valid UTF-8") from None
        jsonl, name = p.suffix == ".jsonl", path
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(Prompt(f"line-{number}", line.replace("\\n", "\n")))  # \n escapes a newline
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise SpecdecError(f"{name}: line {number}: malformed JSON: {e.msg}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise SpecdecError(f"{name}: line {number}: expected an object with a string 'prompt'")
        if not obj["prompt"].strip():
            raise SpecdecError(f"{name}: line {number}: prompt is empty")
        prompts.append(Prompt(str(obj.get("id", f"line-{number}")), obj["prompt"], str(obj.get("category", "custom"))))
    if not prompts:
        raise SpecdecError(f"{name}: no prompts found")
    return prompts


def read_stdin() -> str | None:
    """Piped stdin as text (None on a terminal or when empty); non-UTF-8 is an error."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecdecError(f"stdin is not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    return text if text.strip() else None


def first_per_category(items: list, limit: int) -> list:
    """The first `limit` prompts of each category, in their order."""
    seen: dict[str, int] = {}
    kept = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        if seen[item.category] <= limit:
            kept.append(item)
    return kept
