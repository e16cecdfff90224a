"""The options the commands share (one definition each, so every command spells them alike)."""

from __future__ import annotations

import typer

DEFAULT_CARD = "smollm2"

CARD = typer.Option(DEFAULT_CARD, "--card", "-c", help="Built-in card name or path to a YAML card.")
DEVICE = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N or mps (overrides the card).")
DTYPE = typer.Option(None, "--dtype", help="auto, float32, bfloat16 or float16 (overrides the card).")
QUANTIZE = typer.Option(None, "--quantize", help="none or int8: the target's linear layers in int8, each row "
                        "scaled alone, so speculation stays exact against that int8 model (CPU, float32; overrides the card).")
MAX_TOKENS = typer.Option(None, "--max-tokens", "-n", help="Tokens to generate at most (overrides the card).")
JSON = typer.Option(False, "--json", help="Print only JSON on stdout.")
PROMPTS_FILE = typer.Option(None, "--prompts-file", help=".jsonl ({'prompt', 'id'}) or .txt (one per line); - = JSON lines on stdin.")
TEMPERATURE = typer.Option(None, "--temperature", "-t", help="0 = greedy (exact per token); > 0 = sampling (exact in distribution). Overrides the card.")
TOP_K = typer.Option(None, "--top-k", help="Sampling: keep the k most likely tokens (0 = off). Overrides the card.")
TOP_P = typer.Option(None, "--top-p", help="Sampling: keep the smallest most-likely set holding this much probability (1 = off). Overrides the card.")
SEED = typer.Option(None, "--seed", help="Sampling: seed of every random draw (same seed, same tokens). Overrides the card.")
SCHEDULE = typer.Option(None, "--schedule", help="Draft length per round: cost (measured: propose only what pays), "
                        "heuristic (+2 after a full accept, -1 after a miss) or fixed (k every round). Overrides the card.")
REMEASURE = typer.Option(False, "--remeasure", help="Measure this machine's cost profile again instead of reading the cached one.")
SHAPES = typer.Option(None, "--shapes", help="pinned: every decode forward is [rows, k+1] over a fixed KV buffer "
                      "(greedy == speculative bitwise, in any dtype); free: [rows, d+1], the least work; auto: pinned "
                      "for bfloat16/float16 and on a GPU, else free. Overrides the card.")
MATMULS = typer.Option(None, "--matmuls", help="A CPU target's matmul forms (float32, or bfloat16 where oneDNN has "
                       "its kernels): measure (the cost profile keeps the fastest per forward shape), off (F.linear), "
                       "all or packed (every verify in that form: exactness audits). Overrides the card.")
COMPILE = typer.Option(None, "--compile/--no-compile", help="Compile the decode forwards with PyTorch's inductor: "
                       "cheaper steps after a compile per forward shape (free: widths 1..k+1; pinned: k+1), done "
                       "before timing starts; tens of seconds the first time on a machine, cached in specdec's cache "
                       "directory for later runs. Inductor chooses the matmuls; with --matmuls packed the compiled "
                       "forward calls oneDNN's prepacked weights. Overrides the card.")
TREE = typer.Option(None, "--tree/--chain", help="Let a draft that can propose a token tree do so (prompt lookup: "
                    "every earlier match merged; features: the likeliest other tokens beside the chain); the target "
                    "verifies the tree in one forward and keeps its longest agreeing path. Free shapes. Overrides the card.")
BATCH = typer.Option(1, "--batch", help="Decode N prompts together (one target forward verifies every row; "
                     "continuous batching over the prompts). 1 = one prompt after another.")

# Commands that also take the card positionally (export, cards show) take -c/--card as well.
CARD_ARGUMENT = typer.Argument(None, help="Built-in card name or path to a YAML card (or give -c/--card).",
                               show_default=False)
CARD_OPTION = typer.Option(None, "--card", "-c", help="Built-in card name or path to a YAML card.")


def one_card(positional: str | None, option: str | None) -> str:
    """The card named either way; naming none, or two different ones, is an error."""
    from specdec_cli.errors import SpecdecError

    if positional is None and option is None:
        raise SpecdecError("no card given: name one, as an argument or with -c/--card (specdec cards lists them)")
    if positional is not None and option is not None and positional != option:
        raise SpecdecError(f"two cards given: '{positional}' as an argument and '{option}' with -c/--card; give one")
    return positional if positional is not None else option
