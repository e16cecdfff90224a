"""Reads the figures llama.cpp prints at the end of a run, for benchmarks/peers/llamacpp.sh.

    python benchmarks/peers/llamacpp_parse.py RUN.log [--output RUN.out --prompt PROMPT.txt]
        [--field key=value ...] [--number key=value ...]

prints one JSON object: parse() of the log (stderr of llama-completion, llama-lookup or
llama-speculative), the generated text when the tool's stdout is given, and the fields.

Two shapes of log:
  - llama-completion (greedy): only `common_perf_print` lines. tokens = eval runs + 1 (the
    first token comes from the prompt's logits and is not a run; the last one sampled, the -n'th
    or an end-of-generation token, is never evaluated); tokens_per_s = llama.cpp's `eval time`
    figure, runs / eval seconds: decode only.
  - llama-lookup / llama-speculative: `encoded P tokens in T seconds` (the prompt),
    `decoded N tokens in T seconds` (decode only; N passes -n: the loop stops only once
    n_predict > -n, and keeps the last round whole), `n_draft` (k), `n_drafted`, `n_accept`.
    accept_rate = n_accept / n_drafted, as specdec's. Their perf lines are not read: llama.cpp
    counts every multi-token verify batch as prompt eval there.
tokens_per_s_with_prefill adds the prompt's time, which is what specdec's tokens_per_s includes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

NUM = r"(\d+(?:\.\d+)?)"
PERF = {  # common_perf_print: (milliseconds, count)
    "prompt_eval": re.compile(rf"prompt eval time =\s*{NUM} ms /\s*(\d+) tokens"),
    "eval": re.compile(rf"(?<!prompt )eval time =\s*{NUM} ms /\s*(\d+) runs"),
}
ENCODED = re.compile(rf"encoded\s+(\d+) tokens in\s+{NUM} seconds")
DECODED = re.compile(rf"decoded\s+(\d+) tokens in\s+{NUM} seconds, speed:\s*{NUM} t/s")
# lines carry a timestamp and level first ("0.10.768.251 I n_draft      = 4"); \b keeps n_draft
# from matching n_drafted
COUNTS = {k: re.compile(rf"\b{k}\s*=\s*(\d+)\s*$", re.M) for k in ("n_draft", "n_predict", "n_drafted", "n_accept")}
END_OF_TEXT = " [end of text]\n"


def _perf(log_text: str) -> dict:
    """common_perf_print's lines: {name: (ms, count)}."""
    return {name: (float(m[1]), int(m[2])) for name, rx in PERF.items() if (m := rx.search(log_text))}


def parse(log_text: str, output: str | None = None, prompt: str | None = None) -> dict:
    """The figures of one llama.cpp run; `output` (its stdout) adds the generated text."""
    row: dict = {}
    perf = _perf(log_text)
    decoded = DECODED.search(log_text)
    if decoded:  # llama-lookup / llama-speculative
        encoded = ENCODED.search(log_text)
        tokens, decode_s = int(decoded[1]), float(decoded[2])
        counts = {k: int(m[1]) for k, rx in COUNTS.items() if (m := rx.search(log_text))}
        prefill_s = float(encoded[2]) if encoded else None
        row.update(tokens=tokens, prompt_tokens=int(encoded[1]) if encoded else None, decode_s=decode_s,
                   prefill_s=prefill_s, k=counts.get("n_draft"), drafted=counts.get("n_drafted"),
                   accepted=counts.get("n_accept"))
        row["accept_rate"] = row["accepted"] / row["drafted"] if row["drafted"] else None
    elif "eval" in perf:  # llama-completion
        eval_ms, runs = perf["eval"]
        p_ms, p_tokens = perf.get("prompt_eval", (None, None))
        tokens = runs + 1  # the first token comes from the prompt's logits (the sampler's count includes the prompt)
        decode_s = eval_ms / 1e3
        prefill_s = p_ms / 1e3 if p_ms is not None else None
        row.update(tokens=tokens, prompt_tokens=p_tokens, decode_s=decode_s, prefill_s=prefill_s,
                   eval_runs=runs, drafted=None, accepted=None, accept_rate=None)
        # llama.cpp's own decode figure: runs / eval time (the first token is not a run)
        row["tokens_per_s"] = runs / decode_s if decode_s > 0 else None
    else:
        raise ValueError("no timing lines (neither 'decoded N tokens' nor 'eval time'): did the run finish?")
    if "tokens_per_s" not in row:
        row["tokens_per_s"] = row["tokens"] / row["decode_s"] if row["decode_s"] > 0 else None
    wall = row["decode_s"] + (row["prefill_s"] or 0.0)
    row["tokens_per_s_with_prefill"] = row["tokens"] / wall if row["prefill_s"] is not None and wall > 0 else None
    if output is not None:
        row["text"] = generated_text(output, prompt)
    return row


def generated_text(output: str, prompt: str | None = None) -> str:
    """The generated text from a tool's stdout: llama-lookup and llama-speculative echo the
    prompt first (after a blank line) and end with blank lines; llama-completion with
    --no-display-prompt prints the text, ' [end of text]' at an end-of-generation token, and a
    blank line."""
    text = output
    if text.startswith("\n\n") and prompt is not None and text[2:].startswith(prompt):
        text = text[2 + len(prompt):]
    text = text.rstrip("\n")
    if text.endswith(END_OF_TEXT.rstrip("\n")):
        text = text[: -len(END_OF_TEXT.rstrip("\n"))]
    return text


def _pairs(items: list[str], number: bool) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {item!r}")
        if number:
            out[key] = None if value == "" else (float(value) if "." in value else int(value))
        else:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="One JSON line from a llama.cpp run's log.")
    ap.add_argument("log", help="the tool's stderr")
    ap.add_argument("--output", help="the tool's stdout: adds the generated text")
    ap.add_argument("--prompt", help="the prompt text the tool was given (to cut its echo from --output)")
    ap.add_argument("--field", action="append", default=[], help="key=value, a string to add")
    ap.add_argument("--number", action="append", default=[], help="key=value, a number to add (empty: null)")
    args = ap.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            log_text = f.read()
        output = open(args.output, encoding="utf-8", errors="replace").read() if args.output else None
        prompt = open(args.prompt, encoding="utf-8").read() if args.prompt else None
        row = {**_pairs(args.field, False), **_pairs(args.number, True), **parse(log_text, output, prompt)}
    except (OSError, ValueError) as e:
        print(f"Error: {args.log}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
