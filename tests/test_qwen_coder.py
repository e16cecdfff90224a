"""The real Qwen2.5-Coder pair (1.5B target, 0.5B model draft, GGUF Q4_K_M de-quantised) against
transformers' own greedy generate. Needs the files `specdec fetch qwen2.5-coder-1.5b` puts in
the user cache (1.6 GB); skipped without them. Run with `pytest -m pair`.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import link_converted
from specdec_cli.cards.card import load_card, override
from specdec_cli.files import cache_dir
from specdec_cli.pair.loading import load_pair

CARD = load_card("qwen2.5-coder-1.5b")
MODELS = cache_dir("models")  # read at import: the user's cache (conftest gives each test its own)
FETCHED = all((MODELS / s.file).is_file() and (MODELS / s.file).stat().st_size == s.size for s in CARD.sources)

pytestmark = [pytest.mark.pair, pytest.mark.skipif(
    not FETCHED, reason="needs the Qwen2.5-Coder pair: run `specdec fetch qwen2.5-coder-1.5b` (1.6 GB)")]

PROMPT = "Write a Python function that reverses a string."
N = 24  # new tokens: several rounds at k = 4


@pytest.fixture(scope="module")
def qwen_pair(tmp_path_factory, converted_store):
    """The pair, loaded once, through a throwaway cache that links to the fetched files: the
    test reads the user's models but writes nothing into the user's cache (the converted folders
    go to the tests' own store, conftest.converted_store, made once). float32, not dtype: auto:
    the claim is token for token against transformers' generate, and auto would convert and load
    the 1.5B target in both dtypes to choose (3.5 GB more on disk: a CI runner ran out of it).
    Fixed k: the cost schedule would first measure the pair's costs (minutes on a CPU), and the
    schedule never changes the tokens, only how many are drafted."""
    cache = tmp_path_factory.mktemp("pair-cache")
    models = cache / "specdec" / "models"
    models.mkdir(parents=True)
    for s in CARD.sources:
        (models / s.file).symlink_to(MODELS / s.file)
    link_converted(cache, converted_store)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        yield load_pair(override(CARD, dtype="float32", schedule="fixed"))


def test_speculative_equals_transformers_generate(qwen_pair):
    pair = qwen_pair
    assert pair.draft.name == "model(fetched:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, int8)" and pair.chat
    ids = pair.encode(PROMPT, N)
    out = pair.target.model.generate(torch.tensor([ids], device=pair.device),
                                     attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=pair.device),
                                     max_new_tokens=N, do_sample=False)
    expected = out[0, len(ids):].tolist()
    result = pair.spec(ids, CARD.k, N)
    assert result.tokens == expected
    assert "def" in pair.tokenizer.decode(result.tokens)
    assert result.stats.accepted > 0 and result.stats.draft_forwards > 0  # the 0.5B draft really drafted
