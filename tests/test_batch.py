"""--batch N: every row of a batched run equals its prompt's batch-1 output (toys, property
tests; a tiny random transformers model with rejections, rows leaving and growing buffers), continuous
batching keeps input order, and the CLI's errors and JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_cli.engine import costs, kernels
from specdec_cli.loop.batch import Lengths, in_order, rectangle_seconds
from specdec_cli.loop.decoding import decode_rows as decode_batch
from specdec_cli.loop.decoding import NoDraft, greedy_decode
from specdec_cli.drafts import ModelDraft, PromptLookupDraft
from specdec_cli.errors import SpecdecError
from specdec_cli.engine.models import HFLM
from specdec_cli.engine.kvcache import KVCache
from specdec_cli.loop.sampling import Sampler, Sampling, speculative_sample
from specdec_cli.loop.schedule import Cost, Scheduled, lookup_prior
from specdec_cli.engine.toy_model import ToyLM

from .conftest import DATA, parse_json_lines, transformers_greedy
from .test_decoding import noisy_twins
from .test_properties import DRAFTS, make_draft
from .toys import reference

CPU = torch.device("cpu")
TINY_LLAMA = Path(__file__).parents[1] / "cards/configs/tiny-llama.json"


@st.composite
def batches(draw):
    vocab = draw(st.integers(2, 71))
    max_tokens = draw(st.integers(1, 60))
    prompts = draw(st.lists(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=20), min_size=1, max_size=9))
    eos = draw(st.sets(st.integers(0, vocab - 1), max_size=2))
    return dict(vocab=vocab, seed=draw(st.integers(0, 2**16)), k=draw(st.integers(1, 8)), max_tokens=max_tokens,
                agree=draw(st.floats(0, 1)), draft=draw(st.sampled_from(DRAFTS + ["none"])),
                draft_seed=draw(st.integers(0, 2**16)), prompts=prompts, eos=frozenset(eos),
                batch=draw(st.integers(1, 10)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_every_row_equals_its_batch_1_greedy_output(s):
    """Random batch sizes (above and below the number of prompts: continuous batching), prompt
    lengths, k, drafts, agreements and EOS sets."""
    target = ToyLM(s["vocab"], s["seed"])
    draft = NoDraft(CPU) if s["draft"] == "none" else make_draft(s["draft"], target, s["agree"], s["draft_seed"])
    finished = list(decode_batch(target, draft, s["prompts"], s["k"], s["max_tokens"], s["eos"], s["batch"]))
    assert sorted(i for i, _ in finished) == list(range(len(s["prompts"])))
    for i, result in finished:
        prompt = s["prompts"][i]
        assert result.tokens == reference(target, prompt, s["max_tokens"], s["eos"])
        st_ = result.stats
        assert st_.tokens == len(result.tokens) == sum(r.emitted for r in result.rounds)
        assert st_.target_forwards == st_.verify_rounds + (len(prompt) > 1)
        assert all(r.accepted <= r.drafted <= s["k"] for r in result.rounds)


def test_rows_finish_at_different_rounds_and_lines_come_in_input_order():
    target = ToyLM(48, 1)
    prompts = [[1], [6], [27], [10], [33], [4], [11]]  # greedy lengths 30, 4, 1, 22, 2, 30, 5 (EOS 0)
    draft = make_draft("oracle", target, 0.6, 0)
    finished = list(decode_batch(target, draft, prompts, 4, 30, frozenset([0]), 2))
    assert len({len(r.rounds) for _, r in finished}) > 1  # rows left at different rounds
    assert [i for i, _ in finished] != list(range(len(prompts)))  # ...and out of input order
    assert [i for i, _ in in_order(iter(finished))] == list(range(len(prompts)))


def batch_profile(rows: int, rectangle: list[float]):
    profile = costs.fixed([1.0, 1.6, 2.1, 1.6, 1.5, 1.5], 0.0, "prompt-lookup")  # a batch-1 CPU curve
    profile.batch_s[str(rows)] = rectangle
    return profile


@pytest.mark.parametrize("rectangle, speculates", [([2.0, 2.0, 2.0, 2.0, 2.0, 2.0], True),
                                                   ([2.0, 8.0, 10.0, 12.0, 14.0, 16.0], False)])
def test_the_batch_chooses_one_length_for_its_rows(rectangle, speculates):
    """Under the cost schedule a batch pins every row to one d chosen for the batch's verify
    cost: a flat [4, n] verify (a GPU-like curve) speculates, a steep one never does, whatever
    a row alone would have chosen; every row stays its batch-1 greedy output either way."""
    target = ToyLM(24, 2)
    prompts = [reference(target, [p], 30) * 2 for p in (1, 5, 9, 13, 17, 3)]  # the continuation copies the prompt
    draft = Scheduled(PromptLookupDraft(CPU, 3, 1), Cost(lambda w: None, "prompt-lookup", lookup_prior))
    lengths = Lengths(batch_profile(4, rectangle), 4, "prompt-lookup", explore=False)
    finished = dict(decode_batch(target, draft, prompts, 4, 30, frozenset(), 4, lengths=lengths))
    for i, prompt in enumerate(prompts):
        assert finished[i].tokens == reference(target, prompt, 30)
    drafted = [r.drafted for res in finished.values() for r in res.rounds]
    assert (sum(drafted) > 0) == speculates
    if speculates:
        assert sum(res.stats.verify_rounds for res in finished.values()) < sum(len(res.tokens) for res in finished.values())


def test_a_batch_probes_a_model_draft_its_prior_would_skip():
    """A model draft learns nothing in a skipped round: the batch probes it (first skipped
    round, then after 4, 8, ... skipped rounds) and, the draft being right, keeps drafting."""
    from .toys import NoisyToyLM

    target = ToyLM(24, 4)
    prompts = [[1, 2], [5], [9, 3], [13]]
    for noise, drafts in ((0.0, True), (1.0, False)):
        inner = ModelDraft(NoisyToyLM(target, noise), 24, name="model")
        draft = Scheduled(inner, Cost(lambda w: None, "model", lambda key: 0.0, explore=True))
        profile = costs.fixed([1.0, 1.2, 1.3, 1.4, 1.5, 1.6], 0.05, "model")
        profile.batch_s["4"] = [2.0, 2.4, 2.6, 2.8, 3.0, 3.2]
        finished = dict(decode_batch(target, draft, prompts, 4, 60, frozenset(), 4,
                                     lengths=Lengths(profile, 4, "model", explore=True)))
        assert [finished[i].tokens for i in range(4)] == [reference(target, p, 60) for p in prompts]
        rounds = [r.drafted for r in finished[0].rounds]
        assert rounds[0] > 0  # the first round probes
        assert (sum(rounds) > 2 * len(rounds)) == drafts  # a right draft is kept, a wrong one dropped


def test_a_request_entering_the_batch_gets_its_opening_probe():
    """The batch's probe patience doubles after failed probes; a request that enters later is
    still probed at its first skipped round, as it would be alone."""
    from types import SimpleNamespace

    from specdec_cli.loop.metrics import Round

    class Doubtful:  # a model draft the schedule expects nothing from
        decided = None

        def decide(self, d):
            self.decided = d

        def outlook(self, tokens, k):
            return [0.0] * k

    profile = costs.fixed([1.0, 1.2, 1.3, 1.4, 1.5], 0.05, "model")
    profile.batch_s["2"] = [2.0, 2.2, 2.4, 2.6, 2.8]
    lengths = Lengths(profile, 2, "model", explore=True)
    rows = [SimpleNamespace(draft=Doubtful(), tokens=[1], rounds=[]) for _ in range(2)]
    decided = []
    for _ in range(30):
        lengths.decide(rows, [4, 4])
        decided.append(rows[0].draft.decided)
        for r in rows:  # every proposal rejected
            r.rounds.append(Round(drafted=r.draft.decided, accepted=0, emitted=1))
    probes = [i for i, d in enumerate(decided) if d]
    assert probes[:3] == [0, 4, 12] and lengths.probes.patience >= 16  # the gaps double
    rows[1] = SimpleNamespace(draft=Doubtful(), tokens=[1], rounds=[])  # a new request takes a slot
    lengths.decide(rows, [4, 4])
    assert rows[1].draft.decided == 4  # probed at once


def test_rectangle_seconds_times_every_width_on_a_real_batch(twins):
    target, _ = twins
    seconds, major, packed = rectangle_seconds(target, 3, 4, list(range(3, 20)), repeats=1)
    assert len(seconds) == 4 and all(s > 0 for s in seconds) and major == packed == []  # no switch installed


def test_rectangle_seconds_times_each_form_and_keeps_one_world(twins, monkeypatch):
    """Each [rows, n >= 2] rectangle is timed in the three forms (the switch holds (rows, n) in
    `rectangles` while W @ xᵀ is timed, in `packed` while the prepacked weights are, and is
    restored after), the batched greedy step (n = 1) in F.linear and prepacked; the answer is one
    world: W @ xᵀ where faster and nothing prepacked (the copies timed are freed), or every n
    prepacked (a fake timer decides). Under matmuls: all every such n is W @ xᵀ; once the weights
    are prepacked every n is, untimed."""
    from specdec_cli.loop import batch as batch_mod

    target, _ = twins
    lm = HFLM(target.model)
    lm.configure('free', 'measure')
    lm.forms.widths = frozenset({2})
    seen = []
    real = kernels.form_of

    def spy(switch, x):  # each forward asks for its matmul form (decoder.py)
        seen.append((lm.forms.rectangles, lm.forms.packed))
        return real(switch, x)

    monkeypatch.setattr(kernels, "form_of", spy)
    seconds, major, packed = rectangle_seconds(lm, 3, 4, list(range(3, 20)), repeats=1)
    assert len(seconds) == 4 and packed in ([], [1, 2, 3, 4]) and (not packed or not major) and set(major) <= {2, 3, 4}
    assert lm.forms.widths == {2} and lm.forms.rectangles == lm.forms.packed == frozenset()
    assert bool(lm.forms.packs) == bool(packed)  # kept only when chosen
    for n in (2, 3, 4):
        assert ({(3, n)}, frozenset()) in seen and (frozenset(), {(3, n)}) in seen
    assert (frozenset(), {(3, 1)}) in seen and not any((3, 1) in r for r, _ in seen)  # n = 1: F.linear or packed
    lm.forms.unpack()

    timed = {"linear": 1.0, "weight_major": 0.9, "packed": 0.95}  # prepacked: slower than W @ xᵀ
    monkeypatch.setattr(batch_mod.time, "perf_counter", fake_clock(lm, timed))
    assert rectangle_seconds(lm, 3, 4, list(range(3, 20)), repeats=1)[1:] == ([2, 3, 4], []) and not lm.forms.packs
    timed.update(packed=0.8)  # faster at every n: the packed world
    assert rectangle_seconds(lm, 3, 4, list(range(3, 20)), repeats=1)[1:] == ([], [1, 2, 3, 4]) and lm.forms.packs
    lm.forms.unpack()
    lm.forms.mode = "all"
    assert rectangle_seconds(lm, 3, 4, list(range(3, 20)), repeats=1)[1:] == ([2, 3, 4], [])


def fake_clock(lm, seconds: dict):
    """A perf_counter whose every second reading is `seconds[form]` after the first, the form
    read from the switch as it stands (rectangle_seconds times one forward between two readings)."""
    state = {"now": 0.0, "start": True}

    def clock():
        if state["start"]:
            state["start"] = False
            return state["now"]
        state["start"] = True
        rows_n = next(iter(lm.forms.packed | lm.forms.rectangles), None)
        form = "linear" if rows_n is None else "packed" if rows_n in lm.forms.packed else "weight_major"
        state["now"] += seconds[form]
        return state["now"]

    return clock


def test_a_batch_switches_on_the_measured_forms(twins, monkeypatch):
    """batch_costs (through lengths_for): W @ xᵀ for the full batch's rectangles measured faster
    that way and nothing prepacked; or, where the batch's world is the prepacked weights, every
    forward prepacked and the plain weights freed (but the LM head's)."""
    from types import SimpleNamespace

    from specdec_cli.loop.batch import lengths_for

    def switched(lm, weight_major, packed):
        profile = costs.fixed([1.0, 1.2, 1.4, 1.6])
        profile.batch_s, profile.batch_weight_major, profile.batch_packed = {"4": [1.0] * 4}, {"4": weight_major}, {"4": packed}
        pair = SimpleNamespace(target=lm, cost_profile=lambda drafts, widths: profile)
        draft = Scheduled(PromptLookupDraft(CPU), Cost(lambda widths: profile, "prompt-lookup", lookup_prior, False))
        assert isinstance(lengths_for(pair, draft, 3, 4), Lengths)
        return lm.forms

    target, _ = twins
    lm = HFLM(target.model)
    lm.configure('free', 'measure')
    forms = switched(lm, [2], [])
    assert forms.rectangles == {(4, 2)} and forms.packed == frozenset() and not forms.whole and not forms.packs
    own = HFLM(noisy_twins(TINY_LLAMA, seed=1)[0].model)  # its own weights: the packed world frees them
    own.configure('free', 'measure')
    forms = switched(own, [], [1, 2, 3, 4])
    head = own.model.get_output_embeddings()
    assert forms.whole and forms.form(3, 2) == "packed" and forms.form(1, 1) == "packed"
    assert all(m.weight.numel() == 0 for m in forms.layers if m is not head) and head.weight.numel()


def test_in_order_waits_for_earlier_items():
    assert [i for i, _ in in_order(iter([(2, "c"), (0, "a"), (3, "d"), (1, "b")]))] == [0, 1, 2, 3]


def test_sampling_rows_draw_what_they_would_draw_alone():
    """Each row has its own generator seeded like a batch-1 request: on the toy (no padding
    numerics) a batched sampled row equals the batch-1 sampled output, token for token, so
    each row's distribution is speculative sampling's own (tested in test_sampling.py)."""
    target = ToyLM(32, 3)
    settings_ = Sampling(temperature=0.9, top_k=0, top_p=1.0)
    prompts = [[1, 2], [3], [4, 5, 6, 7], [8, 9, 1], [2, 2]]
    draft = make_draft("noisy-model", target, 0.6, 1)
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    got = dict(decode_batch(target, draft, prompts, 3, 25, frozenset([0]), 3, lambda: Sampler(settings_, gen())))
    for i, prompt in enumerate(prompts):
        alone = speculative_sample(target, make_draft("noisy-model", target, 0.6, 1), prompt, 3, 25,
                                   frozenset([0]), settings_, gen())
        assert got[i].tokens == alone.tokens


# ---------------------------------------------------------------------------- transformers
@pytest.fixture(scope="module")
def twins():
    torch.set_num_threads(1)
    return noisy_twins(TINY_LLAMA, seed=1)


PROMPTS = [list(range(3, 15)), [7], list(range(20, 45)), [5, 6, 7], list(range(100, 108)), [9, 9], list(range(60, 64))]


@pytest.mark.parametrize("batch", [2, 3, 7])
def test_tiny_llama_rows_equal_batch_1_greedy_with_rejections(twins, batch, monkeypatch):
    """A draft model that disagrees: rows reject different amounts every round (their lengths
    part, and the next forward writes over the rejected columns), prompts of different lengths
    enter as rows leave (a copy into a free row), and the buffers grow past their first 8
    columns; every row still equals its batch-1 greedy output."""
    target, noisy = twins
    monkeypatch.setattr(KVCache, "COLUMNS", 8)
    grown = []
    real = KVCache._reserve
    monkeypatch.setattr(KVCache, "_reserve", lambda self, rows, width: (
        grown.append(width) if width > self.cache.layers[0].keys.shape[2] else None, real(self, rows, width)))
    expected = [greedy_decode(target, p, 40, frozenset()).tokens for p in PROMPTS]
    for draft in (ModelDraft(noisy, target.vocab_size), PromptLookupDraft(CPU), NoDraft(CPU)):
        got = dict(decode_batch(target, draft, PROMPTS, 4, 40, frozenset(), batch))
        assert [got[i].tokens for i in range(len(PROMPTS))] == expected, draft
        if isinstance(draft, ModelDraft):
            rounds = [r for res in got.values() for r in res.rounds]
            assert any(r.accepted < r.drafted for r in rounds) and any(r.accepted > 0 for r in rounds)
    assert grown  # the buffers grew at least once


def test_tiny_llama_rows_equal_batch_1_greedy_under_eager_attention(twins):
    """eager attention adds its mask to the scores: KVCache hands it a float mask (0 / the
    dtype's minimum) instead of sdpa's boolean one; rows still equal batch-1 greedy."""
    target, noisy = twins
    target.model.set_attn_implementation("eager")
    try:
        assert target.model.config._attn_implementation == "eager"
        expected = [greedy_decode(target, p, 30, frozenset()).tokens for p in PROMPTS]
        got = dict(decode_batch(target, ModelDraft(noisy, target.vocab_size), PROMPTS, 4, 30, frozenset(), 3))
    finally:
        target.model.set_attn_implementation("sdpa")
    assert [got[i].tokens for i in range(len(PROMPTS))] == expected


def test_attention_without_a_per_row_mask_is_refused(twins, monkeypatch):
    target, _ = twins
    monkeypatch.setattr(target.model.config, "_attn_implementation", "flash_attention_2")
    with pytest.raises(SpecdecError, match="--batch: card x: attention 'flash_attention_2' .*use --batch 1"):
        list(decode_batch(target, NoDraft(CPU), [[1, 2]], 1, 4, frozenset(), 2, card_name="card x"))


@pytest.mark.parametrize("form", ["rectangles", "packed"])
def test_tiny_llama_rows_equal_batch_1_greedy_with_every_rectangle_in_another_form(twins, form):
    """Every batched forward computed W @ xᵀ, or took oneDNN's prepacked weights (what the batch
    profile may choose per rectangle, and more: the batched 1-token steps too), the batch-1
    greedy reference F.linear (prefills included): rows still equal it."""
    target, noisy = twins
    lm = HFLM(target.model)
    expected = [greedy_decode(lm, p, 40, frozenset()).tokens for p in PROMPTS]
    lm.configure('free', 'measure')
    try:
        setattr(lm.forms, form, frozenset((rows, n) for rows in range(2, 4) for n in range(1, 6)))
        got = dict(decode_batch(lm, ModelDraft(noisy, target.vocab_size), PROMPTS, 4, 40, frozenset(), 3))
        assert form == "rectangles" or set(lm.forms.packs) == {  # every layer packed once (q/k/v, gate/up as
            m.group or m for m in lm.model.modules() if type(m) is kernels.SwitchedLinear and m.packable}  # one), but the head
    finally:
        setattr(lm.forms, form, frozenset())
    assert [got[i].tokens for i in range(len(PROMPTS))] == expected


def test_grouped_attention_matches_transformers_sdpa(twins):
    """KVCache' attention (each key/value head's query heads in the query dimension, kvcache.py)
    gives the logits transformers' own sdpa gives a row alone, up to fp32 rounding: tiny-llama
    has 4 query heads on 2 key/value heads, so the grouping is exercised."""
    target, _ = twins
    assert target.config.num_attention_heads > target.config.num_key_value_heads
    prompts = [list(range(3, 15)), list(range(30, 37))]
    rows = KVCache(target, rows=2)
    for p in prompts:
        rows.add(p)
    got = rows.forward(torch.tensor([[p[-1], 5, 6] for p in prompts]))
    for i, p in enumerate(prompts):
        cache = target.new_cache()
        alone = target.model(input_ids=torch.tensor([p + [5, 6]]), cache=cache, use_cache=True).logits[0, -3:]
        assert torch.allclose(got[i], alone, atol=1e-4, rtol=1e-4)


def test_grouped_attention_leaves_the_attention_registry_as_it_found_it(twins):
    """The override lives only for the forward: afterwards transformers' registry resolves
    "sdpa" library-wide again, so a later AttentionInterface.register still takes effect."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    target, _ = twins
    plain = ALL_ATTENTION_FUNCTIONS["sdpa"]
    rows = KVCache(target, rows=2)
    for p in ([3, 4, 5], [6, 7]):
        rows.add(p)
    rows.forward(torch.tensor([[5, 1], [7, 1]]))
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is plain
    replacement = lambda *args, **kwargs: plain(*args, **kwargs)  # noqa: E731
    AttentionInterface.register("sdpa", replacement)
    try:
        assert ALL_ATTENTION_FUNCTIONS["sdpa"] is replacement
    finally:
        AttentionInterface.register("sdpa", plain)


def test_sliding_window_rows_equal_transformers_generate(one_thread):
    """Sliding-window layers (window 8) in the loop's own cache: every column is kept, the mask
    hides what the window drops; prompts longer and shorter than the window, batched."""
    target, draft = noisy_twins(DATA / "tiny-mistral-swa.json", seed=2)
    expected = [transformers_greedy(target, p, 30) for p in PROMPTS]
    got = dict(decode_batch(target, ModelDraft(draft, target.vocab_size), PROMPTS, 4, 30, frozenset(), 3))
    assert [got[i].tokens for i in range(len(PROMPTS))] == expected


# ---------------------------------------------------------------------------- the CLI
@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "p.jsonl"
    texts = ["ba be bi", "ta te ti", "ka", "la le li lo lu", "ba da", "ku zu", "do re mi fa"]
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return path


def test_generate_batch_lines_in_input_order_with_batch_1_tokens(run, prompts_file):
    one = parse_json_lines(run("generate", "-c", "toy", "--prompts-file", prompts_file, "-n", "30").stdout)
    r = run("generate", "-c", "toy", "--prompts-file", prompts_file, "-n", "30", "--batch", "3", "--json")
    assert r.exit_code == 0, r.stderr
    lines = parse_json_lines(r.stdout)
    *rows, last = lines
    assert [x["id"] for x in rows] == [x["id"] for x in one] == [f"p{i}" for i in range(7)]
    assert [x["spec"]["tokens"] for x in rows] == [x["spec"]["tokens"] for x in one]
    assert [x["greedy"]["tokens"] for x in rows] == [x["greedy"]["tokens"] for x in one]
    assert all(x["identical"] for x in rows)
    s = last["summary"]
    assert s["batch"] == 3 and s["prompts"] == 7 and s["differ"] == 0
    assert s["spec"]["tokens"] == sum(len(x["spec"]["tokens"]) for x in rows) and s["spec"]["tokens_per_s"] > 0
    assert s["greedy"]["tokens"] == sum(len(x["greedy"]["tokens"]) for x in rows)


def test_generate_batch_on_tiny_llama(run, write_card, prompts_file, one_thread):
    card = write_card({"description": "t", "target": f"random:{TINY_LLAMA}", "device": "cpu",
                       "draft": {"kind": "prompt-lookup"}, "decoding": {"k": 3, "max_tokens": 20}})
    one = parse_json_lines(run("generate", "-c", card, "--prompts-file", prompts_file).stdout)
    r = run("generate", "-c", card, "--prompts-file", prompts_file, "--batch", "4", "-m", "spec")
    assert r.exit_code == 0, r.stderr
    *rows, last = parse_json_lines(r.stdout)
    assert [x["spec"]["tokens"] for x in rows] == [x["greedy"]["tokens"] for x in one]
    assert "greedy" not in last["summary"] and last["summary"]["spec"]["tokens"] > 0


@pytest.mark.parametrize("args, message", [
    (("generate", "--batch", "0"), "--batch: must be an integer in 1..256, got 0"),
    (("generate", "--batch", "-3"), "--batch: must be an integer in 1..256, got -3"),
    (("generate", "--batch", "257"), "--batch: must be an integer in 1..256, got 257"),
    (("bench", "--batch", "0"), "--batch: must be an integer in 1..256, got 0"),
    (("bench", "--batch", "4", "--agree-sweep"), "--batch: cannot be combined with --agree-sweep"),
    (("bench", "--batch", "4", "--vs-transformers"), "--batch: cannot be combined with --vs-transformers"),
])
def test_bad_batch_is_one_error_line_exit_2(run, prompts_file, args, message):
    extra = ("--prompts-file", prompts_file) if args[0] == "generate" else ()
    r = run(args[0], "-c", "toy", *args[1:], *extra)
    assert r.exit_code == 2, r.stderr
    assert message in r.stderr and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr


def test_batch_without_prompts_file_is_a_usage_error(run):
    r = run("generate", "-c", "toy", "--batch", "3", "ba be")
    assert r.exit_code == 2 and "--batch" in r.stderr and "--prompts-file" in r.stderr
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1


def test_bench_batch_rows_and_exactness(run):
    r = run("bench", "-c", "toy", "-r", "1", "--limit", "1", "-n", "24", "--batch", "4", "--json")
    assert r.exit_code == 0, r.stderr
    rows = parse_json_lines(r.stdout)
    (overall,) = [x for x in rows if x["scope"] == "all"]
    assert overall["batch"] == 4 and overall["identical"] is True and overall["prompts"] == 7
    prompts = [x for x in rows if x["scope"] == "prompt"]
    assert overall["wall_s"] == pytest.approx(sum(x["wall_s"] for x in prompts))
