"""Weight-major matmuls for few-token forwards (kernels.py) and their choice by the cost profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
import torch.nn.functional as F

from specdec_cli.engine import costs, kernels
from specdec_cli.loop.decoding import greedy_decode, speculative_decode
from specdec_cli.drafts import ModelDraft, PromptLookupDraft
from specdec_cli.engine.models import HFLM
from tests.conftest import parse_json_lines
from tests.test_decoding import noisy_twins

TINY_LLAMA = Path(__file__).parents[1] / "cards/configs/tiny-llama.json"
NO_EOS = frozenset()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 5, 48), (3, 48), (2, 4, 48)])
def test_weight_major_equals_f_linear_up_to_rounding_and_only_where_switched_on(bias, shape):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 80, bias=bias))
    switch = kernels.install(model)
    layer = model[0]
    x = torch.randn(*shape)
    rows = x.numel() // 48
    batched = len(shape) == 3 and shape[0] > 1  # [2, 4, 48]: a batch's rectangle, keyed (2, 4), not 8
    reference = F.linear(x, layer.weight, layer.bias)
    assert torch.equal(layer(x), reference)  # switched off: F.linear itself, bit for bit
    switch.widths = frozenset({rows + 1, rows if batched else 0})
    assert torch.equal(layer(x), reference)  # another width switched on: still F.linear
    if batched:
        switch.rectangles = frozenset({(shape[0], shape[1])})
    else:
        switch.widths = frozenset({rows})
    switch.paused = True
    assert torch.equal(layer(x), reference)  # paused (a prefill): F.linear
    switch.paused = False
    out = layer(x)
    assert out.shape == reference.shape and out.is_contiguous()
    assert torch.allclose(out, reference, atol=1e-5, rtol=1e-5)
    one = layer(x.reshape(rows, 1, 48)[:1])  # a 1-token forward never takes W @ xᵀ
    assert torch.equal(one, F.linear(x.reshape(rows, 1, 48)[:1], layer.weight, layer.bias))


@pytest.mark.parametrize("bias", [False, True])
def test_prepacked_equals_f_linear_up_to_rounding_only_for_its_rectangles_and_packs_once(bias):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 80, bias=bias))
    switch = kernels.install(model)
    layer = model[0]
    assert kernels.can_pack(model)
    x = torch.randn(3, 4, 48)  # a [3, 4] rectangle
    reference = F.linear(x, layer.weight, layer.bias)
    switch.packed = frozenset({(3, 5), (2, 4)})
    assert torch.equal(layer(x), reference) and not switch.packs  # other rectangles: F.linear, nothing packed
    switch.packed = frozenset({(3, 4)})
    out = layer(x)
    assert out.shape == reference.shape and out.is_contiguous()
    assert torch.allclose(out, reference, atol=1e-5, rtol=1e-5) and list(switch.packs) == [layer]
    packed = switch.packs[layer]
    layer(x)
    assert switch.packs[layer] is packed  # reordered once, on first use
    switch.paused = True
    assert torch.equal(layer(x), reference)  # a prefill: F.linear
    switch.paused = False
    switch.unpack()
    assert not switch.packs


def test_no_prepacked_form_off_the_cpu_float32_and_bfloat16_paths():
    assert not kernels.can_pack(torch.nn.Sequential(torch.nn.Linear(4, 4).half()))
    # bfloat16 where oneDNN has the CPU's own bfloat16 kernels (not emulated ones)
    assert kernels.can_pack(torch.nn.Sequential(torch.nn.Linear(4, 4).bfloat16())) == kernels.bf16_kernels()
    assert not kernels.can_pack(torch.nn.Sequential(torch.nn.ReLU()))  # no linear layer at all


@pytest.mark.filterwarnings("ignore")
def test_install_routes_plain_linear_layers_only():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    quantized = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(8, 8)), {torch.nn.Linear},
                                                       dtype=torch.qint8)
    weights = [model[0].weight, model[2].weight]
    kernels.install(model)
    kernels.install(quantized)
    assert [type(m) for m in model] == [kernels.SwitchedLinear, torch.nn.ReLU, kernels.SwitchedLinear]
    assert [model[0].weight, model[2].weight] == weights  # the same parameters: tied weights stay tied
    assert type(quantized[0]) is not kernels.SwitchedLinear
    assert not any("forward" in vars(m) for m in [*model, *quantized])  # no method rebound on any instance


def test_choice_keeps_one_world_of_forms_and_one_copy_of_the_weights(monkeypatch):
    """Per width n = 1..5 (n = 1 is the greedy step), W @ xᵀ where it beat F.linear by 3 % or
    more (a fake timer decides); the prepacked weights only for every forward at once, where
    they beat that across the widths (geometric mean of the ratios under 0.97): one faster width
    is not enough, since packing one width keeps a second copy of every weight. Choosing leaves
    the switch as it was; using the packed world frees every plain weight but the LM head's, which
    takes W @ xᵀ at the widths where that (packed_head) beat F.linear by 3 % or more."""
    lm = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    lm.configure('free', 'measure')
    forms = ("linear", "weight_major", "packed", "packed_head")  # width -> seconds per form
    timings = {1: (1.0, 0.9, 0.5, 0.5), 2: (1.0, 0.5, 0.8, 0.8), 3: (1.0, 0.99, 0.98, 0.98), 4: (1.0, 1.4, 1.2, 1.2),
               5: (2.0, 1.0, 1.5, 1.5)}
    seen = []

    def fake(jobs, context, repeats=None):
        seen.extend(jobs)
        return [timings[width][forms.index(form)] for _, width, form in jobs]

    monkeypatch.setattr(costs, "forward_seconds", fake)
    assert costs.choose_forms(lm, 5, [1, 2, 3]) == ([1, 2, 5], [])  # packed: 0.56x at n = 1, 1.09x overall
    assert [(w, f) for _, w, f in seen] == [(w, f) for w in range(1, 6) for f in forms]
    assert lm.forms.widths == frozenset() and lm.forms.packed == frozenset() and not lm.forms.packs  # copies freed

    timings = {1: (1.0, 1.0, 0.8, 0.8), 2: (1.0, 0.9, 0.85, 0.80), 3: (1.0, 1.0, 1.02, 1.0), 4: (1.0, 1.0, 0.95, 0.95),
               5: (1.0, 1.0, 0.9, 0.85)}
    # slower at n = 3, 0.88x overall; the LM head in W @ xᵀ where it saved 3 % (n = 2, 5), not at n = 3 (2 %)
    assert costs.choose_forms(lm, 5, [1, 2, 3]) == ([2, 5], [1, 2, 3, 4, 5])
    assert lm.forms.packed == frozenset() and not lm.forms.whole
    layers = [m for m in lm.model.modules() if type(m) is kernels.SwitchedLinear]
    head = lm.model.get_output_embeddings()
    lm.forms.use([2], [1, 2, 3, 4, 5])
    assert lm.forms.whole and all(lm.forms.form(rows, n) == "packed" for rows in (1, 3) for n in (1, 4))
    assert all(m.weight.numel() == 0 for m in layers if m is not head) and head.weight.numel()  # one copy
    two, one, called, major = torch.randn(1, 2, head.in_features), torch.randn(1, 1, head.in_features), [], kernels.weight_major
    monkeypatch.setattr(kernels, "weight_major", lambda layer, x: called.append(tuple(x.shape)) or major(layer, x))
    assert torch.equal(head(two), major(head, two)) and torch.equal(head(one), F.linear(one, head.weight))
    assert called == [(1, 2, head.in_features)]  # the head at n = 2 only
    monkeypatch.setattr(kernels, "weight_major", major)
    assert head not in lm.forms.packs and {m.group or m for m in layers if m is not head} == set(lm.forms.packs)
    assert {len(g.layers) for g in lm.forms.packs if isinstance(g, kernels.PackedGroup)} == {2, 3}  # gate/up, q/k/v
    seen.clear()
    timings.update({6: (1.0, 1.0, 0.9, 0.8), 7: (1.0, 1.0, 0.9, 0.9)})
    # the plain weights are gone: only the LM head's form is left to time (W @ xᵀ where it saved 3 %)
    assert costs.choose_forms(lm, 7, [1]) == ([2, 5, 6], list(range(1, 8)))
    assert {f for _, _, f in seen} == {"packed", "packed_head"} and lm.forms.whole

    assert costs.choose_forms(object(), 5, [1]) == ([], [])  # no switch (a toy, a GPU): nothing to choose
    audit = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    audit.configure('free', 'all')  # the audit: every width, the greedy step's too, untimed
    assert costs.choose_forms(audit, 5, [1]) == ([1, 2, 3, 4, 5], [])


def test_greedy_form_is_in_the_json_and_greedy_takes_it(run, write_card, one_thread, monkeypatch):
    """The greedy step takes the form the profile measured fastest for width 1, and speculative
    output still equals that greedy."""
    monkeypatch.setattr(costs, "choose_forms", lambda target, widths, context: (
        target.forms.use([], list(range(1, widths + 1))), ([], list(range(1, widths + 1))))[1])
    r = run("generate", "-c", tiny_card(write_card), "-m", "both", "--json", "ab ab ab ab")
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["greedy_form"] == "packed" and out["cost_profile"]["greedy_form"] == "packed"
    assert out["identical"] and out["forward_policy"]["packed"][0] == [1, 1]


def test_forward_seconds_times_each_form_with_the_switch_set(monkeypatch, one_thread):
    lm = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    lm.configure('free', 'measure')
    calls = []
    real = kernels.form_of
    monkeypatch.setattr(kernels, "form_of", lambda s, x: (calls.append((x.numel() // x.shape[-1], real(s, x))), real(s, x))[1])
    costs.forward_seconds([(lm, 3, "linear"), (lm, 3, "weight_major")], list(range(1, 12)), repeats=1)
    assert (3, kernels.plain) in calls and (3, kernels.weight_major) in calls


def test_profile_caches_the_choice_and_a_cached_profile_switches_it_on(monkeypatch, one_thread):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    monkeypatch.setattr(costs, "choose_forms",
                        lambda target, widths, context: (target.forms.use([2, 4], []), ([2, 4], []))[1])
    lm = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    lm.configure('free', 'measure')
    first = costs.profile(lm, "tiny-wm", None, {})
    assert first.weight_major == [2, 4] and first.as_dict()["weight_major"] == [2, 4]
    lm.forms.widths = frozenset()  # a new process: the switch starts off
    again = costs.profile(lm, "tiny-wm", None, {})
    assert again.cached and lm.forms.widths == {2, 4}


@pytest.mark.parametrize("bad", [[0], [99], ["2"], {"2": 1}])
def test_a_cached_profile_with_malformed_widths_is_remeasured(monkeypatch, capsys, bad):
    monkeypatch.setattr(costs, "PROBE_REPEATS", 1)
    lm = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    lm.configure('free', 'measure')
    costs.profile(lm, "tiny-bad", None, {})
    path = next(costs.cache_dir("costs").glob("*.json"))
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "weight_major": bad}))
    again = costs.profile(lm, "tiny-bad", None, {})
    assert not again.cached and "unreadable" in capsys.readouterr().err


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_spec_equals_greedy_with_every_width_weight_major(k, one_thread):
    """A draft that disagrees (rollbacks of every length) and prompt lookup, with every verify
    width forced weight-major: still the target's greedy output, which runs 1-token steps."""
    target, noisy = noisy_twins(TINY_LLAMA, 1)
    target.configure('free', 'measure')
    prompts = [list(range(3, 15)), [7, 8, 7, 8, 7], list(range(40, 71))]
    expected = [greedy_decode(target, p, 48, NO_EOS).tokens for p in prompts]
    target.forms.widths = frozenset(range(2, 10))
    for draft in (ModelDraft(noisy, target.vocab_size), PromptLookupDraft(torch.device("cpu"))):
        got = [speculative_decode(target, draft, p, k, 48, NO_EOS).tokens for p in prompts]
        assert got == expected, draft


def test_a_prefill_never_takes_weight_major_whatever_its_width(one_thread):
    """A 5-token prompt's prefill feeds 4 tokens, a width the profile may switch on for
    verifies: HFLM.forward pauses the switch when it keeps only the last logits, so the cache
    greedy starts from is the one transformers' generate builds."""
    target, _ = noisy_twins(TINY_LLAMA, 1)
    target.configure('free', 'measure'); switch = target.forms
    switch.widths = frozenset({4})
    seen = []
    takes = switch.takes
    switch.takes = lambda x: (seen.append((tuple(x.shape[:-1]), takes(x))), seen[-1][1])[1]
    cache = target.new_cache()
    target.forward(torch.tensor([[3, 4, 5, 6]]), cache, keep=1)  # the prefill
    assert ((1, 4), False) in seen and not any(took for _, took in seen)  # (the LM head sees the last row only)
    seen.clear()
    target.forward(torch.tensor([[7, 8, 9, 10]]), cache)  # a 4-token verify
    assert seen and all(took for _, took in seen) and not switch.paused


def tiny_card(write_card, **decoding):
    return write_card({"description": "t", "target": f"random:{TINY_LLAMA}", "device": "cpu",
                       "draft": {"kind": "prompt-lookup", "schedule": "fixed"},
                       "decoding": {"k": 3, "max_tokens": 12, **decoding}})


def test_a_cpu_run_reports_the_widths_it_runs_weight_major(run, write_card, one_thread):
    r = run("generate", "-c", tiny_card(write_card, matmuls="all"), "-m", "both", "--json", "ab ab ab ab")
    assert r.exit_code == 0, r.stderr
    out = parse_json_lines(r.stdout)[0]
    assert out["cost_profile"]["weight_major"] == [1, 2, 3, 4, 5] and out["cost_profile"]["matmuls"] == "all"
    assert out["greedy_form"] == "weight_major"
    assert out["spec"]["tokens"] == out["greedy"]["tokens"]


def test_weight_major_off_leaves_the_target_alone(write_card, monkeypatch):
    from specdec_cli.cards.card import load_card
    from specdec_cli.pair.loading import load_pair

    off = load_pair(load_card(str(tiny_card(write_card, matmuls="off"))))
    assert off.target.forms is None and off.policy.as_dict() == {"shapes": "free", "matmuls": "off"}
    assert not any(type(m) is kernels.SwitchedLinear for m in off.target.model.modules())
    measured = load_pair(load_card(str(tiny_card(write_card))))
    assert measured.target.forms is measured.policy.switch is not None and measured.policy.matmuls == "measure"


def test_an_unknown_matmuls_mode_is_one_error_line(run, write_card):
    card = tiny_card(write_card, matmuls="fast")
    r = run("generate", "-c", card, "hello")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {card}: decoding.matmuls: must be one of measure, off, all, packed, got 'fast'"


def test_a_prepacked_only_target_frees_its_plain_weights_and_still_matches_greedy(write_card, one_thread):
    """matmuls: packed: every forward (prefill too) takes oneDNN's prepacked weights, so the plain
    copies are freed at load (all but the LM head's, which a tied embedding reads): one copy in
    memory. Speculative output still equals greedy, and both equal the unpacked target's."""
    from specdec_cli.cards.card import load_card
    from specdec_cli.pair.loading import load_pair

    plain = load_pair(load_card(str(tiny_card(write_card, matmuls="off"))))
    packed = load_pair(load_card(str(tiny_card(write_card, matmuls="packed"))))
    layers = [m for m in packed.target.model.modules() if type(m) is kernels.SwitchedLinear]
    head = packed.target.model.get_output_embeddings()
    assert len(layers) > 1 and all(m.weight.numel() == 0 for m in layers if m is not head)
    assert head.weight.numel() and {m.group or m for m in layers if m is not head} == set(packed.target.forms.packs)
    before = sum(m.weight.numel() for m in plain.target.model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(m.weight.numel() for m in layers) < before / 2  # the plain weights are gone
    prompt = [5, 9, 5, 9, 5, 9, 17, 5, 9]
    greedy = packed.greedy(prompt, 12)
    spec = packed.spec(prompt, 3, 12)
    assert spec.tokens == greedy.tokens and len(greedy.tokens) == 12
    assert greedy.tokens == plain.greedy(prompt, 12).tokens  # the same model, another rounding of its matmuls
    assert packed.policy.form(1, 1) == "packed" and packed.policy.form(3, 4) == "packed"


def test_packed_refuses_a_target_it_cannot_pack(run, write_card):
    card = write_card({**yaml.safe_load(tiny_card(write_card, matmuls="packed").read_text()), "dtype": "float16"})
    r = run("generate", "-c", str(card), "hello")
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {card}: decoding.matmuls: packed needs a float32 target, or a bfloat16 one on a "
                                "CPU with oneDNN's bfloat16 kernels, and a torch with oneDNN (this target is float16); "
                                "use measure")


def test_the_prepacked_form_is_timed_only_where_its_copy_fits_in_memory(monkeypatch, capsys):
    """Timing the prepacked form packs a copy of every weight but the LM head's beside the plain
    ones: where that copy does not fit in the memory available (with ROOM to spare), the form is
    not tried, and a warning says why; where it fits, or the OS does not say, it is tried."""
    from specdec_cli.engine import memory

    lm = HFLM(noisy_twins(TINY_LLAMA, 0)[0].model)
    lm.configure('free', 'measure')
    head = lm.model.get_output_embeddings()
    packed = sum(m.weight.numel() * 4 for m in lm.model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    seen = []
    monkeypatch.setattr(costs, "forward_seconds", lambda jobs, context, repeats=None: seen.extend(jobs) or [1.0] * len(jobs))
    monkeypatch.setattr(costs, "_SAID", set())  # nothing said yet in this process
    for free, timed in ((None, True), (int(kernels.ROOM * packed), True), (int(kernels.ROOM * packed) - 1, False)):
        monkeypatch.setattr(memory, "available_bytes", lambda free=free: free)
        seen.clear()
        assert costs.choose_forms(lm, 2, [1, 2, 3]) == ([], [])
        assert ("packed" in {form for _, _, form in seen}) == timed
        err = capsys.readouterr().err
        assert err == ("" if timed else "Warning: oneDNN's prepacked weights are not timed: a packed copy of the target's "
                       f"weights ({packed / 1e9:.1f} GB) does not fit in the {free / 1e9:.1f} GB available\n"), err
    assert not costs.times_packed(lm) and capsys.readouterr().err == ""  # said once (a batch's rectangles ask again)
    assert lm.forms.packs == {} and not lm.forms.whole
