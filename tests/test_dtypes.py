"""dtype: auto on a CPU (engine/dtypes.py, pair/targets.measure_dtype): float32 or bfloat16,
whichever steps faster here, measured once per model and CPU, remembered, and said."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .checkpoints import tiny_checkpoint
from specdec_cli.cards.card import load_card, override
from specdec_cli.engine import dtypes
from specdec_cli.pair.loading import chooses_dtype, load_pair, source_name
from specdec_cli.engine.models import model_ref
from specdec_cli.engine.placement import resolve_device


def test_bfloat16_only_when_it_clearly_wins():
    assert dtypes.decide(0.100, 0.085).dtype == "bfloat16"
    assert dtypes.decide(0.100, 0.086).dtype == "float32"  # a tie keeps float32's precision
    assert dtypes.decide(0.100, 0.120).dtype == "float32"
    choice = dtypes.decide(0.200, 0.100)
    assert (choice.float32_ms, choice.bfloat16_ms) == (200.0, 100.0)
    assert "bfloat16 at 2.00x float32's speed" in choice.why
    assert "under the 1.18x it must reach" in dtypes.decide(0.100, 0.090).why


def test_the_choice_compares_rounds_of_every_width_a_verify_takes():
    """float32 free shapes: each width 1..WIDTH at the width it runs at (padded where wider is
    cheaper), averaged with the contexts; bfloat16 pinned: every width is a WIDTH-wide forward. A
    float32 plain step cheaper than bfloat16's loses to a verify that costs half a step more."""
    from specdec_cli.engine.cost_profile import CostProfile

    float32 = CostProfile(key={}, contexts=[8, 64], verify_s=[[0.030, 0.031, 0.033, 0.045, 0.046],
                                                                    [0.032, 0.033, 0.035, 0.047, 0.048]])
    assert abs(dtypes.round_seconds(float32, 5, pinned=False) - 0.038) < 1e-12
    float32.padded = {"1": 2}  # a plain step runs 2 wide: it costs a 2-wide forward
    assert abs(dtypes.round_seconds(float32, 5, pinned=False) - 0.0382) < 1e-12
    bfloat16 = CostProfile(key={}, contexts=[8, 64], verify_s=[[0.028, 0.029, 0.030, 0.030, 0.031],
                                                                     [0.030, 0.030, 0.031, 0.032, 0.033]])
    assert dtypes.round_seconds(bfloat16, 5, pinned=True) == 0.032  # (0.031 + 0.033) / 2
    assert dtypes.decide(dtypes.round_seconds(float32, 5, False), dtypes.round_seconds(bfloat16, 5, True)).dtype == "bfloat16"


def _card(write_card, folder: Path, **decoding):
    tiny_checkpoint(folder / "model")
    return load_card(str(write_card({"description": "tiny", "target": str(folder / "model"),
                                     "draft": {"kind": "prompt-lookup"}, "decoding": {"k": 4, **decoding},
                                     "device": "cpu"})))


def test_which_cards_leave_the_choice_open(write_card, tmp_path):
    card = _card(write_card, tmp_path)
    ref, cpu = model_ref(card, "target", card.target), resolve_device("cpu")
    assert chooses_dtype(card, cpu, ref)
    for closed in ({"dtype": "float32"}, {"dtype": "bfloat16"}, {"shapes": "free"}, {"quantize": "int8"},
                   {"compile": True}, {"matmuls": "all"}):
        assert not chooses_dtype(override(card, **closed), cpu, ref), closed
    toy = load_card("toy")
    assert not chooses_dtype(toy, cpu, model_ref(toy, "target", toy.target))


def test_a_remembered_choice_is_loaded_and_said(write_card, tmp_path, run):
    card = _card(write_card, tmp_path)
    key = dtypes.key(source_name(model_ref(card, "target", card.target)), card.revision)
    dtypes.write(key, dtypes.Choice("bfloat16", 30.0, 20.0))
    pair = load_pair(card)
    assert pair.dtype == torch.bfloat16 and pair.target.model.dtype == torch.bfloat16
    assert pair.shapes == "pinned"  # bfloat16 is exact under pinned shapes
    assert pair.dtype_choice == dtypes.Choice("bfloat16", 30.0, 20.0, cached=True)
    prompt = [2, 3, 4, 5, 2, 3]
    assert pair.spec(prompt, 4, 12).tokens == pair.greedy(prompt, 12).tokens
    result = run("generate", "-c", card.path, "-n", "6", "--json", "ba be bi bo ba be")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dtype"] == "bfloat16" and data["dtype_choice"] == {"dtype": "bfloat16", "float32_ms": 30.0,
                                                                   "bfloat16_ms": 20.0, "cached": True}
    assert "bfloat16 (auto: a bfloat16 forward 20 ms, float32 30 ms (widths 1-5 averaged): bfloat16 at 1.50x " \
           "float32's speed; measured earlier on this CPU)" in " ".join(result.stderr.split())
    dtypes.write(key, dtypes.Choice("float32", 20.0, 30.0))
    assert load_pair(card).dtype == torch.float32


def test_an_unreadable_choice_is_measured_again(write_card, tmp_path, capsys):
    card = _card(write_card, tmp_path)
    key = dtypes.key(source_name(model_ref(card, "target", card.target)), card.revision)
    dtypes.write(key, dtypes.Choice("bfloat16", 30.0, 20.0))
    path = dtypes.path(key)
    path.write_text("{not json")
    pair = load_pair(card)  # a tiny target: too fast to time, so float32 and nothing remembered
    assert f"Warning: dtype choice {path} is unreadable (JSONDecodeError); measuring again" in capsys.readouterr().err
    assert pair.dtype == torch.float32 and pair.dtype_choice is None


def test_another_model_or_cpu_is_another_choice(tmp_path):
    one, other = dtypes.key(str(tmp_path / "a"), None), dtypes.key(str(tmp_path / "b"), None)
    dtypes.write(one, dtypes.Choice("bfloat16", 30.0, 20.0))
    assert dtypes.read(one).dtype == "bfloat16" and dtypes.read(other) is None
    assert dtypes.read({**one, "cpu": "another CPU"}) is None
    assert one["cpu"] == dtypes.cpu_name() != ""


def test_smollm2_is_measured_once_and_remembered(converted_store, tmp_path, monkeypatch, capsys):
    """The real measurement, in a cache of its own: both dtypes timed through their cost profiles,
    the faster kept (bfloat16 only by CLEAR_WIN), the choice written; the next load reads it."""
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    (home / "specdec").mkdir(parents=True)
    (home / "specdec" / "converted").symlink_to(converted_store, target_is_directory=True)
    pair = load_pair(load_card("smollm2"))
    choice = pair.dtype_choice
    assert choice is not None and not choice.cached
    assert choice.dtype == ("bfloat16" if choice.bfloat16_ms <= dtypes.CLEAR_WIN * choice.float32_ms else "float32")
    assert pair.dtype == choice.torch_dtype == pair.target.model.dtype
    assert pair.shapes == ("pinned" if choice.dtype == "bfloat16" else "free")
    if "looked busy" in capsys.readouterr().err:  # measured beside another job: not remembered, rightly
        assert not list((home / "specdec" / "dtypes").glob("*.json"))
        return
    assert len(list((home / "specdec" / "costs").glob("*.json"))) == 2  # both profiles, kept for later runs
    again = load_pair(load_card("smollm2"))
    assert again.dtype_choice == dtypes.Choice(choice.dtype, choice.float32_ms, choice.bfloat16_ms, cached=True)
