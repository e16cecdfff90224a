"""Pinned shapes against an independent referee: transformers' own greedy `generate`, float32.

Every other pinned test compares pinned greedy with pinned speculative: both run through the
same KVCache mask, so a mask that is wrong (the sliding window, Gemma 3's per-layer-type mix)
is wrong in both and passes. Here the tokens of pinned greedy and pinned speculative decoding
(`decoding.shapes: pinned`: every decode forward [rows, k+1] over a fixed KV buffer) must be
transformers' greedy continuation, for a tiny Llama, a tiny Qwen2 (attention biases) and a tiny
Gemma 3 (sliding window 8 under full attention, crossed many times by prompt + output). Float32
on a CPU: argmax-identical to the referee in every check so far (docs/shapes.md).

Drafts: a scripted one, right everywhere but at fixed positions of the reference, so rounds
that reject and rounds that accept everything happen by construction (and the rounds the run
must make are known beforehand); and a noisy twin (the target's weights plus 1 % noise), a real
draft model rolling back its own cache, through a card on the command line.
"""

from __future__ import annotations

import pytest
import torch

from specdec_cli.drafts import Draft
from specdec_cli.engine.kvcache import KVCache
from specdec_cli.engine.models import HFLM
from specdec_cli.loop.decoding import NoDraft, decode_rows, greedy_decode, speculative_decode

from .checkpoints import TWINS, twin_checkpoints
from .conftest import parse_json_lines, transformers_greedy

MODELS = TWINS  # Llama, Qwen2 (attention biases), Gemma 3 (sliding window 8 under full attention)
PROMPT = list(range(40, 70))  # 30 tokens: Gemma 3's window of 8 is crossed before the first output
N, K = 40, 4
NOISE = 0.01  # the twin draft: agrees often enough that some rounds keep all K, and not always
NO_EOS = frozenset()
WRONG = frozenset(i for i in range(N) if i % 7 == 3 or i % 11 == 0)  # output positions the script gets wrong


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("twins")
    return {name: twin_checkpoints(folder / name, config, seed, init, NOISE) for name, (config, seed, init) in MODELS.items()}


@pytest.fixture(scope="module")
def targets(checkpoints):
    """Each model's float32 target and transformers' greedy continuation of PROMPT (and of two
    shorter prompts, for the batch)."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    out = {}
    for name, (target, _) in checkpoints.items():
        lm = HFLM(AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32))
        prompts = [PROMPT, PROMPT[3:12], PROMPT[:20]]
        out[name] = lm, {tuple(p): transformers_greedy(lm, p, N) for p in prompts}
    return out


class Scripted(Draft):
    """Proposes the referee's continuation, except at output positions in WRONG, where it
    proposes the next id instead. Rejections happen where the script says, not by chance."""

    name = "scripted"

    def __init__(self, references: dict, vocab: int):
        self.references, self.vocab = references, vocab

    def propose(self, tokens: list[int], k: int) -> torch.Tensor:
        prompt, out = next((list(p), o) for p, o in self.references.items() if tokens[: len(p)] == list(p))
        at = len(tokens) - len(prompt)
        proposal = [out[i] if i not in WRONG else (out[i] + 1) % self.vocab for i in range(at, min(at + k, len(out)))]
        return torch.tensor(proposal, dtype=torch.long)


def scripted_rounds(k: int, n: int) -> list[tuple[int, int]]:
    """(drafted, accepted) of every round the scripted draft must make, worked out from WRONG
    alone: a round at output position i drafts min(k, n - i - 1) and keeps the run before the
    first wrong position, then the target's own token."""
    rounds, i = [], 0
    while i < n:
        d = min(k, n - i - 1)
        accepted = next((j for j in range(d) if i + j in WRONG), d)
        rounds.append((d, accepted))
        i += accepted + 1
    return rounds


def test_the_script_rejects_and_accepts_everything():
    """The schedule the tests below expect: rounds that reject at the first token, in the
    middle, and rounds that keep all K."""
    accepted = {a for d, a in scripted_rounds(K, N) if d == K}
    assert {0, K} <= accepted and accepted - {0, K}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pinned_greedy_and_speculative_tokens_are_transformers_greedy(targets, name):
    target, references = targets[name]
    reference = references[tuple(PROMPT)]
    assert greedy_decode(target, PROMPT, N, NO_EOS, width=K + 1).tokens == reference
    spec = speculative_decode(target, Scripted(references, target.vocab_size), PROMPT, K, N, NO_EOS, width=K + 1)
    assert spec.tokens == reference
    assert [(r.drafted, r.accepted) for r in spec.rounds] == scripted_rounds(K, N)
    assert any(r.accepted < r.drafted for r in spec.rounds) and any(r.accepted == r.drafted == K for r in spec.rounds)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pinned_batch_rows_are_transformers_greedy(targets, name):
    """Two rows of three prompts of different lengths, each at its own columns of the buffer;
    a finished row's place taken by the waiting prompt."""
    target, references = targets[name]
    prompts = [list(p) for p in references]
    for draft, k in ((NoDraft(target.device), 0), (Scripted(references, target.vocab_size), K)):
        rows = dict(decode_rows(target, draft, prompts, k, N, NO_EOS, batch=2, width=K + 1))
        assert [rows[i].tokens for i in range(3)] == list(references.values()), draft
        if k:
            assert all(any(r.accepted < r.drafted for r in rows[i].rounds) for i in range(3))


def test_gemma3_layers_mix_sliding_and_full_attention(targets):
    """The Gemma 3 model really takes the per-layer-type path of specdec's cache."""
    target, _ = targets["gemma3"]
    text = target.config.get_text_config(decoder=True)
    assert set(text.layer_types) == {"sliding_attention", "full_attention"} and text.sliding_window == 8
    assert KVCache(target, width=K + 1, capacity=128).sliding == "mixed"


@pytest.mark.parametrize("change", [{"sliding_window": 4096}, {"layer_types": ["sliding_attention"] * 4},
                                    {"layer_types": ["full_attention"] * 4}],
                         ids=["no-window", "every-layer-sliding", "every-layer-full"])
def test_the_gemma3_referee_depends_on_the_window_and_the_layer_mix(checkpoints, targets, change):
    """The same weights with the window ignored, or one attention type for every layer, give
    another greedy text: so a cache that got either wrong cannot match the referee above."""
    from transformers import AutoModelForCausalLM

    _, references = targets["gemma3"]
    other = HFLM(AutoModelForCausalLM.from_pretrained(checkpoints["gemma3"][0], dtype=torch.float32, **change))
    assert transformers_greedy(other, PROMPT, N) != references[tuple(PROMPT)]


# ---------------------------------------------------------------------------- from a card
@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_a_pinned_card_generates_transformers_greedy(run, write_card, checkpoints, targets, name, one_thread):
    """`decoding.shapes: pinned` through `generate`, the noisy twin as a model draft (schedule
    fixed: every round drafts, so rejections and full accepts both come up). Not Qwen2 here:
    transformers loads a qwen2 checkpoint's tokenizer as Qwen2Tokenizer whatever its files say,
    and that reads the twins' word vocabulary as nothing; the loop tests above cover Qwen2."""
    target_dir, draft_dir = checkpoints[name]
    _, references = targets[name]
    card = write_card({"description": "t", "target": str(target_dir), "device": "cpu", "dtype": "float32",
                       "draft": {"kind": "model", "model": str(draft_dir), "schedule": "fixed"},
                       "decoding": {"k": K, "max_tokens": N, "shapes": "pinned"}})
    r = run("generate", "-c", card, "--json", " ".join(f"w{i}" for i in PROMPT))
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["shapes"] == "pinned" and out["prompt_tokens"] == len(PROMPT)
    assert out["greedy"]["tokens"] == out["spec"]["tokens"] == references[tuple(PROMPT)] and out["identical"]
    rounds = out["spec"]["rounds"]
    assert any(x["accepted"] < x["drafted"] for x in rounds), rounds
    assert any(x["accepted"] == x["drafted"] == K for x in rounds), rounds
